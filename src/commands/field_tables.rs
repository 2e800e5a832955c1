//! The user guide's field reference, rendered from a JSON Schema: one Markdown table per
//! object (field, type, default, description), each object's heading reached by links
//! from the fields that hold it. Rendered from the schema rather than written by hand
//! so that a field added to the Rust types cannot be missing from the guide.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Map, Value};

/// A Markdown document of field tables.
pub struct FieldTables<'a> {
    /// The document's `#` heading.
    pub title: &'a str,
    /// A line under the title: what generated the document.
    pub note: &'a str,
    /// Definitions documented in another file, by name, with that file's link: their
    /// fields link there instead of getting a table here.
    pub elsewhere: &'a [(&'a str, &'a str)],
}

/// One object that gets a table: where it is reached from, and its heading's anchor.
struct Table {
    name: String,
    heading: String,
    anchor: String,
    paths: Vec<String>,
}

impl FieldTables<'_> {
    /// The document for `schema` (a root schema with its `$defs`).
    pub fn render(&self, schema: &Value) -> String {
        let empty = Map::new();
        let defs = schema
            .get("$defs")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let tables = self.tables(schema, defs);
        let anchors: BTreeMap<&str, &str> = tables
            .iter()
            .map(|t| (t.name.as_str(), t.anchor.as_str()))
            .collect();
        let cx = Cx {
            defs,
            anchors: &anchors,
            elsewhere: self.elsewhere,
        };
        let mut out = format!("# {}\n\n{}\n", self.title, self.note);
        for t in &tables {
            let object = if t.name.is_empty() {
                schema
            } else {
                &defs[&t.name]
            };
            out.push_str(&format!("\n## {}\n\n", t.heading));
            if !t.paths.is_empty() {
                let paths: Vec<String> = t.paths.iter().map(|p| format!("`{p}`")).collect();
                out.push_str(&format!("At {}.", paths.join(", ")));
                out.push(' ');
            }
            if let Some(d) = object.get("description").and_then(Value::as_str) {
                out.push_str(&cell(d));
            }
            out.push_str("\n\n| field | type | default | description |\n|---|---|---|---|\n");
            for (field, required, prop, branch_doc) in fields(object) {
                let mut description = prop
                    .get("description")
                    .and_then(Value::as_str)
                    .or(branch_doc)
                    .map(cell)
                    .unwrap_or_default();
                if let Some(values) = cx.value_docs(prop) {
                    description.push_str(&values);
                }
                out.push_str(&format!(
                    "| `{field}`{} | {} | {} | {} |\n",
                    if required { " (required)" } else { "" },
                    cx.human_type(prop),
                    prop.get("default").map(default_text).unwrap_or_default(),
                    description
                ));
            }
        }
        out
    }

    /// Every object with fields, in the order a reader meets them from the top, with
    /// the paths that lead to it.
    fn tables(&self, schema: &Value, defs: &Map<String, Value>) -> Vec<Table> {
        let mut tables = vec![Table {
            name: String::new(),
            heading: title_of(schema, "Top level"),
            anchor: String::new(),
            paths: Vec::new(),
        }];
        let mut queue = VecDeque::from([(schema.clone(), String::new())]);
        while let Some((object, at)) = queue.pop_front() {
            for (field, _, prop, _) in fields(&object) {
                let path = match (at.as_str(), field) {
                    ("", f) => f.to_string(),
                    (a, "") => a.to_string(),
                    (a, f) => format!("{a}.{f}"),
                };
                for (name, path) in refs(prop, &path) {
                    if self.elsewhere.iter().any(|(n, _)| *n == name) {
                        continue;
                    }
                    let Some(def) = defs.get(&name) else { continue };
                    if let Some(t) = tables.iter_mut().find(|t| t.name == name) {
                        t.paths.push(path.clone());
                        // The objects inside are reached this way too (`tasks[].limits`
                        // as well as `defaults.limits`); the depth bound ends a cycle.
                        if path.matches(['.', '[']).count() < 6 {
                            queue.push_back((def.clone(), path));
                        }
                        continue;
                    }
                    if fields(def).is_empty() {
                        // A scalar or a union of scalars: look inside for objects.
                        queue.push_back((wrap(def), path.clone()));
                        continue;
                    }
                    tables.push(Table {
                        heading: title_of(def, &name),
                        name: name.clone(),
                        anchor: String::new(),
                        paths: vec![path.clone()],
                    });
                    queue.push_back((def.clone(), path));
                }
            }
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for t in &mut tables {
            let base = slug(&t.heading);
            let n = seen.entry(base.clone()).or_insert(0);
            t.anchor = if *n == 0 { base } else { format!("{base}-{n}") };
            *n += 1;
        }
        tables
    }
}

/// A schema without fields of its own, seen as an object whose one field is itself, so
/// that the walk finds the objects inside it.
fn wrap(def: &Value) -> Value {
    serde_json::json!({ "properties": { "": def } })
}

fn title_of(schema: &Value, fallback: &str) -> String {
    schema
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or(fallback)
        .to_string()
}

/// An object's fields: name, required, schema, and the description of the one-key
/// branch it came from (a union of one-key maps lists every key as a field).
fn fields(object: &Value) -> Vec<(&str, bool, &Value, Option<&str>)> {
    let required = |o: &Value, k: &str| {
        o.get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|v| v == k))
    };
    if let Some(props) = object.get("properties").and_then(Value::as_object) {
        return props
            .iter()
            .map(|(k, v)| (k.as_str(), required(object, k), v, None))
            .collect();
    }
    let branches = object.get("oneOf").and_then(Value::as_array);
    let one_key_maps = branches.filter(|b| b.iter().all(|o| o.get("properties").is_some()));
    one_key_maps
        .into_iter()
        .flatten()
        .flat_map(|o| {
            let doc = o.get("description").and_then(Value::as_str);
            o["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(move |(k, v)| (k.as_str(), false, v, doc))
        })
        .collect()
}

/// The definitions a field's schema names, with the path each is reached by (`[]`
/// for a list item, `.<name>` for a map value).
fn refs(schema: &Value, path: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        if let Some(name) = r.strip_prefix("#/$defs/") {
            found.push((name.to_string(), path.to_string()));
        }
    }
    for key in ["anyOf", "oneOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            found.extend(refs(branch, path));
        }
    }
    if let Some(items) = schema.get("items") {
        found.extend(refs(items, &format!("{path}[]")));
    }
    if let Some(values) = schema.get("additionalProperties") {
        found.extend(refs(values, &format!("{path}.<name>")));
    }
    found
}

struct Cx<'a> {
    defs: &'a Map<String, Value>,
    anchors: &'a BTreeMap<&'a str, &'a str>,
    elsewhere: &'a [(&'a str, &'a str)],
}

impl Cx<'_> {
    /// A type as a newcomer reads it: "duration, e.g. 90s", "integer 0–100,000",
    /// "one of: `a`, `b`", "list of text", a link to an object's table.
    fn human_type(&self, schema: &Value) -> String {
        if schema == &Value::Bool(true) || schema.as_object().is_some_and(|o| o.is_empty()) {
            return "any value".into();
        }
        if let Some(name) = def_name(schema) {
            if let Some((_, link)) = self.elsewhere.iter().find(|(n, _)| *n == name) {
                return format!(
                    "[{}]({link})",
                    self.defs
                        .get(name)
                        .map_or(name.into(), |d| title_of(d, name))
                );
            }
            let Some(def) = self.defs.get(name) else {
                return name.to_string();
            };
            if let Some(anchor) = self.anchors.get(name) {
                return format!("[{}](#{anchor})", title_of(def, name));
            }
            return match def.get("title").and_then(Value::as_str) {
                Some(t) => t.to_string(),
                None => self.human_type(def),
            };
        }
        if let Some(words) = enum_values(schema, self.defs) {
            return format!("one of: {}", words.join(", "));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                let shown: Vec<String> = branches
                    .iter()
                    .filter(|b| b.get("type") != Some(&Value::from("null")))
                    .map(|b| match enum_values(b, self.defs) {
                        Some(words) if words.len() == 1 => words.join(""),
                        _ => self.human_type(b),
                    })
                    .collect();
                return match shown.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} or {last}", rest.join(", "))
                    }
                    _ => shown.join(""),
                };
            }
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let types: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
        match types.as_slice() {
            ["string", "number", "boolean"] | ["string"] => "text".into(),
            ["integer"] => format!("integer{}", range(schema)),
            ["number"] => format!("number{}", range(schema)),
            ["boolean"] => "true or false".into(),
            ["array"] => format!(
                "list of {}",
                schema
                    .get("items")
                    .map_or("any value".into(), |i| self.human_type(i))
            ),
            ["object"] => match schema.get("additionalProperties") {
                Some(v) if v.is_object() => format!("map of name → {}", self.human_type(v)),
                _ => "map".into(),
            },
            _ => "any value".into(),
        }
    }

    /// For a field whose values are words with meanings of their own: each word and
    /// its meaning, one per line of the cell.
    fn value_docs(&self, schema: &Value) -> Option<String> {
        let target = match def_name(schema).or_else(|| {
            schema
                .get("anyOf")
                .and_then(Value::as_array)
                .and_then(|b| b.iter().find_map(def_name))
        }) {
            Some(name) => self.defs.get(name)?,
            None => schema,
        };
        let branches = target.get("oneOf").and_then(Value::as_array)?;
        let mut out = String::new();
        for b in branches {
            let (Some(word), Some(doc)) = (
                b.get("const").or_else(|| b.pointer("/enum/0")),
                b.get("description").and_then(Value::as_str),
            ) else {
                continue;
            };
            out.push_str(&format!("<br>`{}`: {}", scalar_text(word), cell(doc)));
        }
        (!out.is_empty()).then_some(out)
    }
}

fn def_name(schema: &Value) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix("#/$defs/")
}

/// The words a field may be, when it may only be words (an enum, or a union of
/// constants, possibly behind a reference or beside null).
fn enum_values(schema: &Value, defs: &Map<String, Value>) -> Option<Vec<String>> {
    if let Some(name) = def_name(schema) {
        return enum_values(defs.get(name)?, defs);
    }
    if let Some(c) = schema.get("const") {
        return Some(vec![format!("`{}`", scalar_text(c))]);
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return Some(
            values
                .iter()
                .map(|v| format!("`{}`", scalar_text(v)))
                .collect(),
        );
    }
    let branches = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)?;
    let mut words = Vec::new();
    for b in branches {
        if b.get("type") == Some(&Value::from("null")) {
            continue;
        }
        words.extend(enum_values(b, defs)?);
    }
    (!words.is_empty()).then_some(words)
}

/// " 0–1,000" from minimum and maximum; a maximum that only says "fits 64 bits" is no
/// bound a reader needs.
fn range(schema: &Value) -> String {
    let min = schema.get("minimum").map(number_text);
    let above = schema.get("exclusiveMinimum").map(number_text);
    let max = schema
        .get("maximum")
        .filter(|m| m.as_u64() != Some(u64::MAX))
        .map(number_text);
    match (min, above, max) {
        (Some(lo), _, Some(hi)) => format!(" {lo}–{hi}"),
        (_, Some(lo), Some(hi)) => format!(" above {lo}, at most {hi}"),
        (Some(lo), _, None) => format!(" ≥ {lo}"),
        (None, None, Some(hi)) => format!(" at most {hi}"),
        _ => String::new(),
    }
}

/// A number with thousands separators from 10,000 up.
fn number_text(n: &Value) -> String {
    match n.as_u64() {
        Some(v) if v >= 10_000 => {
            let digits = v.to_string();
            let mut out = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        _ => n.to_string(),
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A default worth showing: empty lists and maps only say "none".
fn default_text(v: &Value) -> String {
    match v {
        Value::Array(a) if a.is_empty() => String::new(),
        Value::Object(o) if o.is_empty() => String::new(),
        other => format!("`{}`", scalar_text(other)),
    }
}

/// The first paragraph of a doc comment, on one line, safe inside a table cell.
fn cell(doc: &str) -> String {
    let first = doc.split("\n\n").next().unwrap_or_default();
    first
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces made hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_read_as_words_and_objects_link_to_their_tables() {
        let schema = serde_json::json!({
            "title": "Thing",
            "type": "object",
            "properties": {
                "n": { "type": ["integer", "null"], "minimum": 0, "maximum": 100000, "description": "How many | which." },
                "mode": { "anyOf": [{ "$ref": "#/$defs/Mode" }, { "type": "null" }] },
                "inner": { "$ref": "#/$defs/Inner" },
                "tags": { "type": "array", "items": { "type": "string" }, "default": [] },
                "on": { "type": "boolean", "default": false }
            },
            "required": ["inner"],
            "$defs": {
                "Mode": { "oneOf": [
                    { "const": "a", "description": "First." },
                    { "const": "b", "description": "Second." }
                ] },
                "Inner": { "title": "The inner part", "type": "object", "properties": {
                    "x": { "type": "number", "exclusiveMinimum": 0, "maximum": 1 }
                } }
            }
        });
        let doc = FieldTables {
            title: "Fields",
            note: "Generated.",
            elsewhere: &[],
        }
        .render(&schema);
        for expected in [
            "## Thing",
            "| `n` | integer 0–100,000 |  | How many \\| which. |",
            "| `mode` | one of: `a`, `b` |  | <br>`a`: First.<br>`b`: Second. |",
            "| `inner` (required) | [The inner part](#the-inner-part) |",
            "| `tags` | list of text |  |",
            "| `on` | true or false | `false` |",
            "## The inner part\n\nAt `inner`.",
            "| `x` | number above 0, at most 1 |",
        ] {
            assert!(doc.contains(expected), "{expected:?} not in:\n{doc}");
        }
    }
}
