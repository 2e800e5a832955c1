//! Python's string semantics, which the official code relies on without saying so:
//! `str.split()`, `str.strip()` and `int()`, and `re` patterns with Python's `\s`, `\d`
//! and `\w` (the tables of [`super::python_chars`]).

use regex::Regex;

use super::python_chars;

/// Whether `c` falls in one of `table`'s flattened inclusive ranges; the range's start too.
fn range_of(table: &[u32], c: char) -> Option<u32> {
    let c = c as u32;
    // The index of the first range whose last code point is >= c.
    let pairs = table.len() / 2;
    let (mut lo, mut hi) = (0, pairs);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if table[2 * mid + 1] < c {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    (lo < pairs && table[2 * lo] <= c).then(|| table[2 * lo])
}

/// `str.isspace()`: what `split()` and `strip()` cut on, and `\s` in `re`.
pub(super) fn py_isspace(c: char) -> bool {
    if c.is_ascii() {
        matches!(c, '\t'..='\r' | '\x1c'..=' ')
    } else {
        range_of(python_chars::SPACE, c).is_some()
    }
}

/// A decimal digit's value, as `int()` reads it (`\d` in `re`).
pub(super) fn py_decimal(c: char) -> Option<u32> {
    if c.is_ascii() {
        return c.to_digit(10);
    }
    range_of(python_chars::DECIMAL, c).map(|start| (c as u32 - start) % 10)
}

/// `str.split()` with no separator.
pub(super) fn py_split(s: &str) -> Vec<&str> {
    s.split(py_isspace).filter(|t| !t.is_empty()).collect()
}

/// `str.strip()` with no argument.
pub(super) fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

/// A regex character class of a table's ranges, for the regex crate.
fn class(table: &[u32]) -> String {
    let mut out = String::from("[");
    for pair in table.chunks_exact(2) {
        out.push_str(&format!("\\x{{{:x}}}-\\x{{{:x}}}", pair[0], pair[1]));
    }
    out.push(']');
    out
}

/// A Python `re` pattern in the regex crate's syntax: `\s`, `\d`, `\w` spelled `{S}`,
/// `{D}`, `{W}` become Python's classes.
pub(super) fn python_regex(pattern: &str) -> Regex {
    let pattern = pattern
        .replace("{S}", &class(python_chars::SPACE))
        .replace("{D}", &class(python_chars::DECIMAL))
        .replace("{W}", &class(python_chars::WORD));
    Regex::new(&pattern).expect("the ported SWE-bench patterns compile")
}
