//! JSON Schemas of the values job files and scripts write in their own syntax
//! (durations, sizes, dollars, `max_repeats`), and the generator settings that make a
//! schema accept what serde_yaml accepts. Editors check job files against these
//! schemas as one types, so each one accepts at least what its parser accepts: a
//! schema stricter than the parser would mark a working job file as wrong.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use super::bounds;
use super::limits::MaxRepeats;
use super::price::BatchRate;
use super::values::{ByteSize, HumanDuration, Money, MAX_MONEY};

/// What `humantime` reads, after `parse_duration` trims the text: spans of a whole or
/// decimal number and a unit, spaces allowed between and inside them ("1h30m",
/// "1h 30m", "1.5s", "250ms"). Units are case-sensitive (`M` is months, `m` minutes).
pub const DURATION_PATTERN: &str = r"^\s*([0-9][0-9\s]*(\.[0-9\s]*[0-9][0-9\s]*)?(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+$";

/// What `parse_size` reads: digits, then optionally B, KB, MB, GB, KiB, MiB or GiB in
/// any case.
pub const SIZE_PATTERN: &str = r"^\s*[0-9]+\s*([KkMmGg][Ii]?[Bb]|[Bb])?\s*$";

/// What `Money` reads from a string: optional `$` signs, then what `rust_decimal`
/// reads (a sign, digits with `_` separators, a point, an exponent).
pub const MONEY_PATTERN: &str = r"^\s*\$*[+-]?[0-9_]*\.?[0-9_]*([eE][+-]?[0-9]+)?\s*$";

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "duration, e.g. 90s",
            "description": "A duration with a unit: 500ms, 90s, 30m, 2h, 1h30m, 7days. A bare number is refused (seconds or minutes?). More than zero, at most 365 days.",
            "type": "string",
            "pattern": DURATION_PATTERN,
            "examples": ["90s", "30m", "2h"]
        })
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "size in bytes, e.g. 64MiB",
            "description": "A number of bytes, or one with a unit: 64MB, 512KiB, 1GiB (KB, MB and GB are powers of 1000, KiB, MiB and GiB of 1024). More than zero.",
            "anyOf": [
                { "type": "integer", "minimum": 1, "maximum": u64::MAX },
                { "type": "string", "pattern": SIZE_PATTERN }
            ],
            "examples": ["64MiB", 1048576]
        })
    }
}

impl JsonSchema for Money {
    fn schema_name() -> Cow<'static, str> {
        "UsdAmount".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "USD amount",
            "description": format!("US dollars as a plain decimal number, such as 1.50 (read exactly, never rounded through binary floating point). At least 0, at most {MAX_MONEY}."),
            "anyOf": [
                { "type": "number", "minimum": 0, "maximum": MAX_MONEY },
                { "type": "string", "pattern": MONEY_PATTERN }
            ]
        })
    }
}

impl JsonSchema for BatchRate {
    fn schema_name() -> Cow<'static, str> {
        "BatchRate".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "share above 0, at most 1",
            "description": "A share of the standard price: above 0, at most 1 (0.5 is half price).",
            "anyOf": [
                { "type": "number", "exclusiveMinimum": 0, "maximum": 1 },
                { "type": "string", "pattern": MONEY_PATTERN }
            ]
        })
    }
}

impl JsonSchema for MaxRepeats {
    fn schema_name() -> Cow<'static, str> {
        "MaxRepeats".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "integer from 2, or off",
            "description": format!("A count of identical steps in a row, from 2 to {}, or `off`.", bounds::REPEATS),
            "anyOf": [
                { "type": "integer", "minimum": 2, "maximum": bounds::REPEATS },
                { "const": "off" }
            ]
        })
    }
}

/// JSON Schema 2020-12 (schemars' default dialect), adjusted to what serde_yaml reads.
pub fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12()
        .with_transform(schemars::transform::RecursiveTransform(yaml_reading))
}

/// Formats schemars writes for Rust's number types: not JSON Schema formats, so an
/// editor cannot check them; each unsigned one becomes the maximum it stands for.
const RUST_FORMATS: [(&str, Option<u64>); 11] = [
    ("uint8", Some(u8::MAX as u64)),
    ("uint16", Some(u16::MAX as u64)),
    ("uint32", Some(u32::MAX as u64)),
    ("uint64", Some(u64::MAX)),
    ("uint", Some(usize::MAX as u64)),
    ("int8", None),
    ("int16", None),
    ("int32", None),
    ("int64", None),
    ("float", None),
    ("double", None),
];

/// Keywords that make a string schema something narrower than free text.
const NARROWING: [&str; 5] = ["pattern", "enum", "const", "format", "maxLength"];

/// A doc comment's paragraphs each on one line: editors wrap a hover's text
/// themselves, and the comment's own line ends would break it mid-sentence.
fn reflow(doc: &str) -> String {
    doc.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// One schema's adjustments: a Rust number format becomes its range; free text also
/// takes numbers, booleans and null, since serde_yaml reads `id: 1` or `PORT: 8080`
/// into a `String` as the text written and an empty value as empty text; an object may
/// be left empty (null) too; a `default` of null, which only says "unset", goes;
/// descriptions lose the doc comments' line ends.
fn yaml_reading(schema: &mut Schema) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::String(format)) = obj.get("format") {
        if let Some((_, max)) = RUST_FORMATS.iter().find(|(f, _)| f == format) {
            if let Some(max) = max {
                obj.entry("maximum").or_insert(Value::from(*max));
            }
            obj.remove("format");
        }
    }
    if obj.get("default") == Some(&Value::Null) {
        obj.remove("default");
    }
    if let Some(Value::String(d)) = obj.get_mut("description") {
        *d = reflow(d);
    }
    if NARROWING.iter().any(|k| obj.contains_key(*k)) {
        return;
    }
    let text_types = match obj.get("type") {
        Some(Value::Array(ts)) if ts == &[Value::from("string"), Value::from("null")] => {
            Some(vec!["string", "number", "boolean", "null"])
        }
        Some(Value::String(t)) if t == "string" => {
            Some(vec!["string", "number", "boolean", "null"])
        }
        // `defaults:` or `teams:` with nothing after the colon (every entry commented
        // out) reads as empty, not as an error.
        Some(Value::String(t)) if t == "object" => Some(vec!["object", "null"]),
        _ => None,
    };
    if let Some(types) = text_types {
        obj.insert("type".into(), Value::from(types));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::values::{parse_duration, parse_size};

    fn matches(pattern: &str, text: &str) -> bool {
        regex::Regex::new(pattern)
            .expect("the pattern compiles")
            .is_match(text)
    }

    /// The schema may accept more than the parser (zero, too long), never less.
    #[test]
    fn every_duration_the_parser_reads_matches_the_pattern() {
        let samples = [
            "90s",
            "1h30m",
            "1h 30m",
            " 2h ",
            "250ms",
            "1.5s",
            "1. 5s",
            "1 0s",
            "7days",
            "1week",
            "2 hours",
            "3M",
            "1y",
            "10µs",
            "5min 3sec",
            "0s",
            "90",
            "ten minutes",
            "1H",
            "1.s",
            "-1s",
            "1h,30m",
            "s",
            "1h30",
            "1.5.5s",
            "",
        ];
        for s in samples {
            if parse_duration(s).is_ok() {
                assert!(
                    matches(DURATION_PATTERN, s),
                    "{s:?} parses but fails the pattern"
                );
            }
        }
        for bad in [
            "90",
            "ten minutes",
            "1H",
            "90 parsecs",
            "-1s",
            "1h,30m",
            "1.s",
        ] {
            assert!(!matches(DURATION_PATTERN, bad), "{bad:?} matches");
        }
    }

    #[test]
    fn every_size_the_parser_reads_matches_the_pattern() {
        let samples = [
            "1048576",
            "64MB",
            "64 MiB",
            "512kib",
            "2GB",
            "10B",
            " 7 kb ",
            "1.5MB",
            "MB",
            "-1",
            "12 parsecs",
            "64 M",
        ];
        for s in samples {
            if parse_size(s).is_ok() {
                assert!(
                    matches(SIZE_PATTERN, s),
                    "{s:?} parses but fails the pattern"
                );
            }
        }
        for bad in ["1.5MB", "MB", "-1", "12 parsecs", "64 M"] {
            assert!(!matches(SIZE_PATTERN, bad), "{bad:?} matches");
        }
    }

    #[test]
    fn every_amount_the_parser_reads_matches_the_pattern() {
        #[derive(serde::Deserialize)]
        struct M {
            #[allow(dead_code)]
            m: Money,
        }
        let samples = [
            "1.50", "$1.50", " $$2 ", "+1.5", "1_000", "1e5", ".5", "5.", "0.000001", "-0", "$ 5",
            "1,000", "lots", "0x10", "1.5.5",
        ];
        for s in samples {
            let yaml = format!("m: {}", serde_json::Value::from(s));
            if serde_yaml::from_str::<M>(&yaml).is_ok() {
                assert!(
                    matches(MONEY_PATTERN, s),
                    "{s:?} parses but fails the pattern"
                );
            }
        }
        for bad in ["lots", "1,000", "$ 5", "0x10"] {
            assert!(!matches(MONEY_PATTERN, bad), "{bad:?} matches");
        }
    }
}
