//! JSON Schemas of the values job files and scripts write in their own syntax
//! (durations, sizes, dollars, `max_repeats`), and the generator settings that make a
//! schema accept what serde_yaml accepts. Editors check job files against these
//! schemas as one types, so each one accepts at least what its parser accepts (a
//! schema stricter than the parser would mark a working job file as wrong), and no more
//! than it where a pattern can say so: what each stays looser in is listed in the guide
//! (docs/guide/editor-completion.md) and held by the tests below.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use super::bounds;
use super::limits::MaxRepeats;
use super::price::BatchRate;
use super::values::{ByteSize, HumanDuration, Money, MAX_MONEY};

/// The units `humantime` reads (case-sensitive: `M` is months, `m` minutes).
macro_rules! units {
    () => {
        "(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)"
    };
}

/// What `parse_duration` reads, after trimming the text: spans of a whole or decimal
/// number and a unit, spaces allowed between and inside them ("1h30m", "1h 30m",
/// "1.5s", "250ms"), at least one of them not zero. It does not check the sum against
/// 365 days, nor whether a fraction comes to a whole number of nanoseconds.
pub const DURATION_PATTERN: &str = concat!(
    r"^\s*(0[0\s]*(\.[0\s]*0[0\s]*)?",
    units!(),
    r"\s*)*((0[0\s]*)?[1-9][0-9\s]*(\.[0-9\s]*[0-9][0-9\s]*)?|0[0\s]*\.[0-9\s]*[1-9][0-9\s]*)",
    units!(),
    r"\s*([0-9][0-9\s]*(\.[0-9\s]*[0-9][0-9\s]*)?",
    units!(),
    r"\s*)*$"
);

/// What `parse_size` reads: digits, not all zeros, then optionally B, KB, MB, GB, KiB,
/// MiB or GiB in any case. It does not check the number against a bound.
pub const SIZE_PATTERN: &str = r"^\s*0*[1-9][0-9]*\s*([KkMmGg][Ii]?[Bb]|[Bb])?\s*$";

/// A decimal as `rust_decimal` reads it: digits with `_` separators, one point (a
/// fraction without whole digits starts with a digit).
macro_rules! mantissa {
    () => {
        r"([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)"
    };
}

/// An exponent as `rust_decimal` reads it (`e5`, `E+5`, `e-5`, even `e-+5`).
macro_rules! exponent {
    () => {
        r"[eE]-?\+?[0-9]+"
    };
}

/// What `Money` reads from text: optional `$` signs, then what `rust_decimal` reads,
/// from 0 to 1,000,000,000 (a minus only before a zero). Digits past the decimal type's
/// 28 are rounded by the parser, so the largest amount may carry any fraction after 19
/// zeros; an amount with an exponent is not checked against the bound.
pub const MONEY_PATTERN: &str = concat!(
    r"^\s*\$*(\+?((0[0_]*)?([1-9](_*[0-9]){0,8}_*(\.[0-9_]*)?|1(_*0){9}_*(\.((_*0){19}[0-9_]*|[0_]*))?)|0[0_]*(\.[0-9_]*)?|\.[0-9][0-9_]*|",
    mantissa!(),
    exponent!(),
    r")|-(0[0_]*(\.[0_]*)?|\.0[0_]*)(",
    exponent!(),
    r")?)\s*$"
);

/// What `BatchRate` reads from text: an amount above 0 and at most 1. Digits past the
/// 28th are rounded, so 1 may carry any fraction after 28 zeros (and a fraction that
/// rounds to 0 passes); one with an exponent is not checked against the bounds.
pub const SHARE_PATTERN: &str = concat!(
    r"^\s*\$*\+?(0[0_]*\.[0-9_]*[1-9][0-9_]*|\.(0[0_]*)?[1-9][0-9_]*|(0[0_]*)?1_*(\.((_*0){28}[0-9_]*|[0_]*))?|",
    mantissa!(),
    exponent!(),
    r")\s*$"
);

/// A text field that must match `pattern` (and be at most `max_length` characters
/// long). A YAML number or boolean there is read as the text written, which the schema
/// cannot see, so those pass unchecked (a pattern applies to strings only); null is no
/// value.
pub fn text_matching(pattern: &str, max_length: Option<usize>) -> Schema {
    let mut text = json_schema!({
        "type": ["string", "number", "boolean", "null"],
        "pattern": pattern
    });
    if let Some(max) = max_length {
        text.insert("maxLength".into(), Value::from(max));
    }
    text
}

/// What a text field that may not be empty or blank matches.
pub const NOT_BLANK: &str = r"\S";

/// A size of at least one byte and at most `max`: a whole number, or text with a unit
/// (whose bound the schema does not check).
pub fn size_at_most(max: u64) -> Schema {
    json_schema!({
        "title": "size in bytes, e.g. 64MiB",
        "description": format!("A number of bytes, or one with a unit: 64MB, 512KiB, 1GiB (KB, MB and GB are powers of 1000, KiB, MiB and GiB of 1024). More than zero, at most {max}."),
        "anyOf": [
            { "type": "integer", "minimum": 1, "maximum": max },
            { "type": "string", "pattern": SIZE_PATTERN }
        ],
        "examples": ["64MiB", 1048576]
    })
}

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
        size_at_most(u64::MAX)
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
                { "type": "string", "pattern": SHARE_PATTERN }
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
/// into a `String` as the text written and an empty value as empty text; a `default`
/// of null, which only says "unset", goes; descriptions lose the doc comments' line
/// ends. An object or a list takes null only where its field says so (an `Option`, or
/// a field read through `values::or_empty`).
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
        _ => None,
    };
    if let Some(types) = text_types {
        obj.insert("type".into(), Value::from(types));
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;
    use crate::vocab::values::{parse_duration, parse_size};

    fn compiled(pattern: &str) -> regex::Regex {
        regex::Regex::new(pattern).expect("the pattern compiles")
    }

    /// Every text of up to `len` pieces from `alphabet`.
    fn texts(alphabet: &[&str], len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|t| alphabet.iter().map(move |a| format!("{t}{a}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    /// What `Money` reads from text, through serde as a job file gives it.
    fn money(text: &str) -> Option<Decimal> {
        #[derive(serde::Deserialize)]
        struct M {
            m: Money,
        }
        let yaml = format!("m: {}", serde_json::Value::from(text));
        serde_yaml::from_str::<M>(&yaml).ok().map(|m| m.m.0)
    }

    /// What `BatchRate` reads from text.
    fn share(text: &str) -> bool {
        #[derive(serde::Deserialize)]
        struct S {
            #[allow(dead_code)]
            s: BatchRate,
        }
        let yaml = format!("s: {}", serde_json::Value::from(text));
        serde_yaml::from_str::<S>(&yaml).is_ok()
    }

    /// Each text the parser reads matches the pattern, and each it refuses does not,
    /// but for what the pattern cannot see (the guide lists it).
    fn agree(
        pattern: &str,
        samples: &[String],
        parses: impl Fn(&str) -> Result<(), String>,
        unseen: impl Fn(&str, &str) -> bool,
    ) {
        let re = compiled(pattern);
        for s in samples {
            match (parses(s), re.is_match(s)) {
                (Ok(()), false) => panic!("{s:?} parses but fails the pattern"),
                (Err(e), true) if !unseen(s, &e) => {
                    panic!("{s:?} matches the pattern but the parser refuses it: {e}")
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_duration_pattern_matches_what_the_parser_reads() {
        let mut samples = texts(&["0", "1", "5", " ", ".", "s", "m", "h", "ns", "M", "x"], 5);
        samples.extend(
            [
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
                "0h 0.0s",
                "00s",
                "0.5ns",
                "0.001h",
                "0.0000000001s",
                "366d",
                "8761h",
                "1y",
                "53w",
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
            ]
            .map(String::from),
        );
        agree(
            DURATION_PATTERN,
            &samples,
            |s| parse_duration(s).map(|_| ()),
            // Over 365 days, or a fraction that is no whole number of nanoseconds (of
            // seconds, for hours and longer).
            |_, e| e.contains("at most 365 days") || e.contains("cannot be represented"),
        );
        let re = compiled(DURATION_PATTERN);
        for zero in ["0s", "0h 0.0s", "00 0ms"] {
            assert!(!re.is_match(zero), "{zero:?} matches");
        }
    }

    #[test]
    fn the_size_pattern_matches_what_the_parser_reads() {
        let mut samples = texts(&["0", "1", " ", "K", "i", "B", "m", "x", "-", "."], 5);
        samples.extend(
            [
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
                "0",
                "00KB",
                "99999999999999999999",
                "99999999999GiB",
            ]
            .map(String::from),
        );
        // Only a size that may be past 2^64 bytes, which no bound lets through anyway.
        agree(
            SIZE_PATTERN,
            &samples,
            |s| parse_size(s).map(|_| ()),
            |s, _| {
                let digits: String = s.trim().chars().take_while(char::is_ascii_digit).collect();
                digits
                    .parse::<u128>()
                    .map_or(true, |n| n << 30 > u128::from(u64::MAX))
            },
        );
    }

    #[test]
    fn the_money_pattern_matches_what_the_parser_reads() {
        let mut samples = texts(&["0", "1", "9", "_", ".", "e", "+", "-", "$", " "], 5);
        samples.extend(
            [
                "1.50",
                "$1.50",
                " $$2 ",
                "+1.5",
                "1_000",
                "1e5",
                "1e-+5",
                ".5",
                "5.",
                "1._5",
                "._5",
                "-0",
                "-.0",
                "-0e5",
                "-0.5",
                "$-1",
                "-$1",
                "$ 5",
                "1,000",
                "lots",
                "0x10",
                "1.5.5",
                "999999999",
                "999_999_999.999",
                "1000000000",
                "1_000_000_000.000",
                "0001000000000",
                "1000000000.01",
                "1000000001",
                "2000000000",
                "1000000000.00000000000000000001",
                "999999999.99999999999999999999999",
                "0000000000000000000000000000001",
                "1e9",
                "2e9",
                "1e100",
            ]
            .map(String::from),
        );
        assert_eq!(
            MAX_MONEY, 1_000_000_000,
            "the pattern spells out this bound"
        );
        agree(
            MONEY_PATTERN,
            &samples,
            |s| money(s).map(|_| ()).ok_or_else(|| "refused".to_string()),
            // An exponent, or a fraction past the 28 digits the parser rounds to.
            |s, _| s.contains(['e', 'E']) || s.len() > 28,
        );
    }

    #[test]
    fn the_share_pattern_matches_what_the_parser_reads() {
        let mut samples = texts(&["0", "1", "5", "_", ".", "e", "+", "-", "$"], 5);
        samples.extend(
            [
                "0.5",
                "$0.5",
                "1",
                "1.000",
                "01",
                "1_",
                ".5",
                "0._5",
                "1.5",
                "2",
                "0",
                "0.0",
                "-0.5",
                "1.0000000000000000000000000000001",
                "0.00000000000000000000000000000001",
                "5e-1",
            ]
            .map(String::from),
        );
        agree(
            SHARE_PATTERN,
            &samples,
            |s| share(s).then_some(()).ok_or_else(|| "refused".to_string()),
            |s, _| s.contains(['e', 'E']) || s.len() > 28,
        );
    }
}
