//! The JSON Schema of `matrix:`. An axis names a task field, a field one level into an
//! object field (`limits.max_turns`), a variable (`env.NAME`) or anything inside `sim`,
//! and lists values for it (matrix.rs reads them into `defaults`): so each axis is a
//! list of at least one value of that field's own schema, and an axis that names no
//! field (or `id`, which a task keeps in every variant) is refused, as `validate`
//! refuses them.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::schema::TaskFields;

/// The schema of `matrix:` (serde's `schema_with`).
pub(super) fn axes(generator: &mut SchemaGenerator) -> Schema {
    let task = TaskFields::json_schema(generator);
    let mut axes = Map::new();
    let mut patterns = Map::new();
    let fields = task.get("properties").and_then(Value::as_object);
    for (name, field) in fields.into_iter().flatten() {
        if name == "id" {
            continue;
        }
        axes.insert(name.clone(), axis(field));
        if name == "sim" {
            patterns.insert(r"^sim\..+$".into(), axis(&Value::Bool(true)));
        } else if let Some(values) = field.get("additionalProperties").filter(|v| v.is_object()) {
            patterns.insert(format!(r"^{name}\.[^.]+$"), axis(values));
        } else if let Some(inner) = referenced(field, generator) {
            let inner = inner.get("properties").and_then(Value::as_object);
            for (sub, schema) in inner.into_iter().flatten() {
                axes.insert(format!("{name}.{sub}"), axis(schema));
            }
        }
    }
    json_schema!({
        "type": ["object", "null"],
        "properties": axes,
        "patternProperties": patterns,
        "additionalProperties": false
    })
}

/// An axis of `values`: a list of at least one, each without the field's description.
fn axis(values: &Value) -> Value {
    let mut values = values.clone();
    if let Some(o) = values.as_object_mut() {
        o.remove("description");
    }
    json!({ "type": "array", "minItems": 1, "items": values })
}

/// The definition a field's schema refers to (`{"$ref": ...}`, or one branch of an
/// `anyOf` with null), if it has one.
fn referenced(field: &Value, generator: &SchemaGenerator) -> Option<Value> {
    let reference = field.get("$ref").or_else(|| {
        field
            .get("anyOf")?
            .as_array()?
            .iter()
            .find_map(|b| b.get("$ref"))
    })?;
    let name = reference.as_str()?.rsplit('/').next()?;
    generator.definitions().get(name).cloned()
}
