//! Conformance with OpenAI's published API description: every request the adapters sent
//! in a run, and every answer the simulator gave them (which they accepted), is checked
//! against the JSON schemas of the official OpenAPI document. The schemas come from
//! tests/fixtures/openai-schemas.json, extracted from openai/openai-openapi by
//! tests/fixtures/openai_schemas.py, so no network is needed.
//!
//! One deliberate deviation is made explicit here: the schema requires `id` on replayed
//! output messages and reasoning items, but a stateless client (`store: false`) must
//! leave the ids out, or the API answers "Item with id ... not found. Items are not
//! persisted when `store` is set to false" (PROTOCOLS.md B6). The test relaxes exactly
//! that requirement and nothing else.

use serde_json::{json, Value};

use crate::common::{job, Case};

fn schemas() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/openai-schemas.json"
    );
    let text = std::fs::read_to_string(path).expect("the schema fixture is in the repository");
    let mut doc: Value = serde_json::from_str(&text).expect("the schema fixture is JSON");
    for item in ["OutputMessage", "ReasoningItem"] {
        let required = doc["components"]["schemas"][item]["required"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("{item} has a required list"));
        let before = required.len();
        required.retain(|r| r != "id");
        assert_eq!(
            before,
            required.len() + 1,
            "{item} no longer requires id: drop the relaxation"
        );
    }
    doc
}

fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"],
    });
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("schema {name} compiles: {e}"))
}

fn assert_valid(v: &jsonschema::Validator, what: &str, instance: &Value) {
    let errors: Vec<String> = v
        .iter_errors(instance)
        .take(5)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match the OpenAI schema:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(instance).unwrap_or_default()
    );
}

const SCRIPT: &str = r#"    system: Be brief.
    temperature: 0.5
    sim:
      turns:
        - content:
            - thinking: "check the clock twice"
            - text: "Checking."
            - tool_use: { name: get_time, input: { timezone: UTC } }
            - tool_use: { name: get_time, input: { timezone: "+02:00" } }
          usage: { cache_read_input_tokens: 10, reasoning_tokens: 5 }
        - content:
            - tool_use: { name: get_time, input: {} }
        - content:
            - text: "It is {{tool_result}}."
"#;

#[tokio::test]
async fn requests_and_answers_match_the_published_openai_schemas() {
    let doc = schemas();
    let providers = "providers:\n  sim-responses: { protocol: openai-responses, simulator: true }\n  sim-chat: { protocol: openai-chat, simulator: true }\n";
    let yaml = job(
        "  model: gpt-5.4\n  prompt: What time is it?\n",
        &format!(
            "  - id: responses\n    provider: sim-responses\n    reasoning: {{ effort: low, summary: auto }}\n    limits: {{ show_budget: true }}\n{SCRIPT}  - id: chat\n    provider: sim-chat\n    reasoning: {{ effort: low }}\n    limits: {{ max_turns: 3, wrap_up: true }}\n{SCRIPT}"
        ),
    )
    .replacen("name: test\n", &format!("name: test\n{providers}"), 1);
    let case = Case::new();
    let ran = case.run(&yaml).await;
    for (task, request, response) in [
        ("responses", "CreateResponse", "Response"),
        (
            "chat",
            "CreateChatCompletionRequest",
            "CreateChatCompletionResponse",
        ),
    ] {
        assert_eq!(ran.stop(task), "completed", "{task}: {:?}", ran.row(task));
        let (req_v, resp_v) = (validator(&doc, request), validator(&doc, response));
        let reqs = ran.requests(task);
        assert_eq!(reqs.len(), 3, "{task}");
        for (n, r) in reqs.iter().enumerate() {
            assert_eq!(r.status, 200, "{task} request {n}: {:?}", r.error);
            assert_valid(&req_v, &format!("{task} request {n}"), &r.body);
            let answer = r.response.as_ref().expect("an answer was sent");
            assert_valid(&resp_v, &format!("{task} answer {n}"), answer);
        }
    }
}

#[test]
fn the_schemas_catch_a_request_in_the_wrong_shape() {
    let doc = schemas();
    let v = validator(&doc, "CreateChatCompletionRequest");
    let good = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert!(v.is_valid(&good));
    // A Responses-style flat tool in a chat request is refused.
    let bad = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                     "tools": [{"type": "function", "name": "t", "parameters": {"type": "object"}}]});
    assert!(!v.is_valid(&bad));
    let v = validator(&doc, "CreateResponse");
    assert!(!v.is_valid(&json!({"model": "m", "input": [], "max_output_tokens": 8})));
}
