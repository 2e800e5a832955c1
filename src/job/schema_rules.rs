//! What the JSON Schema of a job file says beyond its types (schema.rs refers to these
//! by name): the rules `validate` checks a value by on its own, said the same way, so
//! an editor marks what `validate` would refuse. Each names the check it mirrors; the
//! schema tests hold the two to agreeing.

use serde_json::json;

use super::schema_providers::BUILTIN_PROVIDERS;
use crate::vocab::json_schema;
use crate::vocab::values::PASSWORD_URL_PATTERN;

/// A task (or `defaults`) sets `tools` or `toolset`, not both
/// (`toolsets::resolve_task_toolset`).
pub(super) fn tools_or_toolset(schema: &mut schemars::Schema) {
    let set = |field: &str| json!({ "required": [field], "properties": { field: { "not": { "type": "null" } } } });
    schema.insert(
        "not".into(),
        json!({ "allOf": [set("tools"), set("toolset")] }),
    );
}

/// A text field that may not be empty or blank (`prompt: ""`; `fields::check_fields`).
pub(super) fn not_blank(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    json_schema::text_matching(json_schema::NOT_BLANK, None)
}

/// The built-in providers keep their settings; one of the job's own names its
/// protocol; `sim` is always the simulator, which takes no API key
/// (`providers::resolve_provider`).
pub(super) fn provider_rules(schema: &mut schemars::Schema) {
    let Some(provider) = schema.remove("additionalProperties") else {
        return;
    };
    // A provider of the job's own: `{"$ref": ...}` with its protocol required, which
    // also leaves out null (an empty provider has no protocol).
    let reference = provider
        .pointer("/anyOf/0/$ref")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let mut builtins = serde_json::Map::new();
    for (name, _, simulated) in BUILTIN_PROVIDERS {
        let mut value = provider.clone();
        if simulated {
            value["properties"] = json!({
                "simulator": { "not": { "const": false } },
                "api_key_env": { "type": "null" },
                "api_key_optional": { "type": "null" }
            });
        }
        builtins.insert(name.to_string(), value);
    }
    schema.insert("properties".into(), builtins.into());
    schema.insert(
        "additionalProperties".into(),
        json!({
            "$ref": reference,
            "required": ["protocol"],
            "properties": { "protocol": { "not": { "type": "null" } } }
        }),
    );
}

/// A PostgreSQL ledger's URL holds no password (`source::not_a_ledger_url`).
pub(super) fn no_password(schema: &mut schemars::Schema) {
    schema.insert(
        "not".into(),
        json!({ "type": "string", "pattern": PASSWORD_URL_PATTERN }),
    );
}

/// Every task needs an id of its own (`defaults` may not give one; `expand::check_id`).
/// A job needs tasks: a non-empty `tasks`, or `suites` (whose tasks the schema cannot
/// see).
pub(super) fn tasks_or_suites(schema: &mut schemars::Schema) {
    if let Some(o) = schema.as_object_mut() {
        o.insert(
            "anyOf".into(),
            serde_json::json!([
                { "required": ["tasks"], "properties": { "tasks": { "minItems": 1 } } },
                { "required": ["suites"], "properties": { "suites": { "minItems": 1 } } }
            ]),
        );
    }
}

pub(super) fn tasks_need_ids(schema: &mut schemars::Schema) {
    if let Some(items) = schema.get_mut("items").and_then(|i| i.as_object_mut()) {
        items.insert("required".into(), serde_json::json!(["id"]));
        items.insert(
            "properties".into(),
            serde_json::json!({ "id": { "not": { "type": "null" } } }),
        );
    }
}

/// The longest task id; with a matrix and epochs the name of its files may grow, up to
/// `matrix::MAX_KEY`.
pub(super) const MAX_ID: usize = 200;

/// What [`valid_id`] accepts (with [`MAX_ID`] as the length), for the JSON Schema.
pub(super) const ID_PATTERN: &str = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$";

/// Whether `id` is safe as a file name (no folders, not hidden).
pub(super) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The schema of a task id: [`ID_PATTERN`], at most [`MAX_ID`] characters.
pub(super) fn task_id(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    json_schema::text_matching(ID_PATTERN, Some(MAX_ID))
}

/// The reasoning efforts the OpenAI APIs know (models take different subsets).
pub(super) const EFFORTS: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];
/// The reasoning summary settings of the Responses API.
pub(super) const SUMMARIES: [&str; 3] = ["auto", "concise", "detailed"];

pub(super) fn efforts(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    words_or_null(&EFFORTS)
}

pub(super) fn summaries(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    words_or_null(&SUMMARIES)
}

/// One of `words`, or no value.
pub(super) fn words_or_null(words: &[&str]) -> schemars::Schema {
    schemars::json_schema!({ "anyOf": [{ "enum": words }, { "type": "null" }] })
}

/// What `sampling::thinking_shape` says of a setting on its own: `enabled` needs
/// `budget_tokens`, and only `enabled` takes one.
pub(super) fn thinking_rules(schema: &mut schemars::Schema) {
    schema.insert(
        "allOf".into(),
        json!([
            {
                "if": { "properties": { "type": { "const": "enabled" } } },
                "then": { "required": ["budget_tokens"], "properties": { "budget_tokens": { "type": "integer" } } }
            },
            {
                "if": { "properties": { "type": { "enum": ["adaptive", "disabled"] } } },
                "then": { "properties": { "budget_tokens": { "type": "null" } } }
            }
        ]),
    );
}
