//! Finds the line and column of a node in a YAML document, for errors found after
//! parsing (duplicate ids, missing files, missing prices). serde_yaml values carry no
//! positions, but a deserializer error raised at a node does: this walks to the node
//! with a visitor that fails exactly there and reads the position off the error. The
//! same trick finds a key written twice in one map, which serde would otherwise let
//! the last one win for maps (`teams`, `pricing`, `env`, ...).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path into the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

impl fmt::Display for Seg {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Seg::Key(k) => f.write_str(k),
            Seg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// Renders a path the way serde_yaml does in its own messages: `tasks[2].limits`.
pub fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        if let Seg::Key(_) = seg {
            if !s.is_empty() {
                s.push('.');
            }
        }
        s.push_str(&seg.to_string());
    }
    s
}

/// Splits a message that starts with a field path (`turns[0].usage.output_tokens: ...`,
/// the way checks after parsing write them) into the path and the rest, so the message
/// can be placed at its line. None when it does not start with one.
pub fn split_path_prefix(message: &str) -> Option<(Vec<Seg>, &str)> {
    let (head, rest) = message.split_once(": ")?;
    let mut path = Vec::new();
    for part in head.split('.') {
        let (name, mut indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        let word = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if !word(name) {
            return None;
        }
        path.push(Seg::Key(name.to_string()));
        while let Some(inner) = indexes.strip_prefix('[') {
            let (n, after) = inner.split_once(']')?;
            path.push(Seg::Index(n.parse().ok()?));
            indexes = after;
        }
        if !indexes.is_empty() {
            return None;
        }
    }
    Some((path, rest))
}

const FOUND: &str = "agentbatch-locate-found";

/// 1-based (line, column) of the node at `path`, or of its deepest existing ancestor.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    locate_in(text, path, 0, false)
}

/// The position of the key that ends `path` (not of its value), at its `nth`
/// occurrence in its map (0: the first), for keys written more than once.
fn locate_key(text: &str, path: &[Seg], nth: usize) -> Option<(usize, usize)> {
    locate_in(text, path, nth, true)
}

fn locate_in(text: &str, path: &[Seg], nth: usize, at_key: bool) -> Option<(usize, usize)> {
    for len in (0..=path.len()).rev() {
        let de = serde_yaml::Deserializer::from_str(text);
        let full = len == path.len();
        match (Probe {
            path: &path[..len],
            skip: if full { nth } else { 0 },
            at_key: at_key && full,
        })
        .deserialize(de)
        {
            Err(e) if e.to_string().contains(FOUND) => {
                return e.location().map(|l| (l.line(), l.column()));
            }
            _ => continue,
        }
    }
    None
}

struct Probe<'p> {
    path: &'p [Seg],
    /// Matches of the last key to pass over before the one wanted.
    skip: usize,
    /// Stop at the last key itself rather than at its value.
    at_key: bool,
}

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Probe<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.path.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let mut skip = if rest.is_empty() { self.skip } else { 0 };
        if rest.is_empty() && self.at_key {
            let Seg::Key(want) = first else {
                return Ok(());
            };
            while map
                .next_key_seed(KeyProbe {
                    want,
                    skip: &mut skip,
                })?
                .is_some()
            {
                map.next_value::<IgnoredAny>()?;
            }
            return Ok(());
        }
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let hit = matches!(first, Seg::Key(k) if *k == key_text(&key));
            if hit && skip == 0 {
                return map.next_value_seed(Probe {
                    path: rest,
                    skip: self.skip,
                    at_key: self.at_key,
                });
            }
            if hit {
                skip -= 1;
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let mut i = 0;
        loop {
            if matches!(first, Seg::Index(n) if *n == i) {
                return seq
                    .next_element_seed(Probe {
                        path: rest,
                        skip: self.skip,
                        at_key: self.at_key,
                    })
                    .map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
}

/// Reads one map key and fails right there (where the parser knows the key's
/// position) if it is the wanted one and no more matches are to be passed over.
struct KeyProbe<'a> {
    want: &'a str,
    skip: &'a mut usize,
}

impl<'de> DeserializeSeed<'de> for KeyProbe<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl KeyProbe<'_> {
    /// Fails inside the visitor, so the error carries the key's own position.
    fn seen<E: de::Error>(self, key: serde_yaml::Value) -> Result<(), E> {
        if key_text(&key) == self.want {
            if *self.skip == 0 {
                return Err(E::custom(FOUND));
            }
            *self.skip -= 1;
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for KeyProbe<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.seen(serde_yaml::Value::String(v.to_string()))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.seen(serde_yaml::Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.seen(serde_yaml::Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.seen(serde_yaml::Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.seen(serde_yaml::Value::Number(v.into()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.seen(serde_yaml::Value::Null)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

const DUPLICATE: &str = "agentbatch-locate-duplicate";

/// A key written twice in one map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// The path of the key (its map's path and the key).
    pub path: Vec<Seg>,
    /// 1-based (line, column) of the second occurrence.
    pub at: Option<(usize, usize)>,
    /// 1-based line of the first occurrence.
    pub first_line: Option<usize>,
}

/// The first key that some map of the document has twice, if any. A document that is
/// not valid YAML has none (its parse error is reported elsewhere).
pub fn duplicate_key(text: &str) -> Option<DuplicateKey> {
    let found = RefCell::new(None);
    let de = serde_yaml::Deserializer::from_str(text);
    (Unique {
        path: Vec::new(),
        found: &found,
    })
    .deserialize(de)
    .err()?;
    let path = found.into_inner()?;
    Some(DuplicateKey {
        at: locate_key(text, &path, 1),
        first_line: locate_key(text, &path, 0).map(|(l, _)| l),
        path,
    })
}

/// Walks every node, failing at the second occurrence of a key in a map.
struct Unique<'f> {
    path: Vec<Seg>,
    found: &'f RefCell<Option<Vec<Seg>>>,
}

impl Unique<'_> {
    fn child(&self, seg: Seg) -> Self {
        let mut path = self.path.clone();
        path.push(seg);
        Unique {
            path,
            found: self.found,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// A map key as text, the way a path shows it.
fn key_text(key: &serde_yaml::Value) -> String {
    match key {
        serde_yaml::Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default(),
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let text = key_text(&key);
            if !seen.insert(text.clone()) {
                let mut path = self.path.clone();
                path.push(Seg::Key(text));
                *self.found.borrow_mut() = Some(path);
                return Err(de::Error::custom(DUPLICATE));
            }
            map.next_value_seed(self.child(Seg::Key(text)))?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq.next_element_seed(self.child(Seg::Index(i)))?.is_some() {
            i += 1;
        }
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Seg {
        Seg::Key(s.into())
    }

    #[test]
    fn finds_nested_nodes() {
        let text = "name: x\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    model: m\n";
        assert_eq!(locate(text, &[k("name")]), Some((1, 7)));
        assert_eq!(
            locate(text, &[k("tasks"), Seg::Index(1), k("id")]),
            Some((5, 9))
        );
        assert_eq!(
            locate(text, &[k("tasks"), Seg::Index(1), k("model")]),
            Some((6, 12))
        );
        // a missing field falls back to its task
        assert_eq!(
            locate(text, &[k("tasks"), Seg::Index(0), k("model")]),
            Some((3, 5))
        );
    }

    #[test]
    fn finds_keys_written_twice_in_any_map() {
        let text = "name: x\nteams:\n  a: { max_cost_usd: 1 }\n  b: {}\n  a: { max_cost_usd: 100 }\ntasks: []\n";
        let d = duplicate_key(text).unwrap();
        assert_eq!(d.path, vec![k("teams"), k("a")]);
        assert_eq!(d.first_line, Some(3));
        assert_eq!(d.at.map(|(l, _)| l), Some(5));
        let block = "turns:\n  - a\nturns:\n  - b\n";
        let d = duplicate_key(block).unwrap();
        assert_eq!(
            (d.at, d.first_line),
            (Some((3, 1)), Some(1)),
            "keys, not values"
        );
        let deep = "tasks:\n  - id: a\n    env: { X: 1, Y: 2, X: 3 }\n";
        let d = duplicate_key(deep).unwrap();
        assert_eq!(d.path, vec![k("tasks"), Seg::Index(0), k("env"), k("X")]);
        assert_eq!(d.first_line, Some(3));
        assert_eq!(duplicate_key("a: 1\nb: [ {a: 1}, {a: 2} ]\n"), None);
        assert_eq!(duplicate_key("a: [unclosed"), None);
        assert!(
            duplicate_key("1: a\n1: b\n").is_some(),
            "keys that are not strings"
        );
    }

    #[test]
    fn reads_a_path_at_the_start_of_a_message() {
        let (p, rest) = split_path_prefix("turns[0].faults[2].status: 700 is not").unwrap();
        assert_eq!(
            p,
            vec![
                k("turns"),
                Seg::Index(0),
                k("faults"),
                Seg::Index(2),
                k("status")
            ]
        );
        assert_eq!(rest, "700 is not");
        assert_eq!(
            split_path_prefix("chaos.max_calls: x").unwrap().0,
            vec![k("chaos"), k("max_calls")]
        );
        for bad in ["no path here", "a b: c", "x[: y", "x[a]: y", "x]: y", ": y"] {
            assert!(split_path_prefix(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn renders_paths() {
        assert_eq!(
            path_string(&[k("tasks"), Seg::Index(2), k("limits")]),
            "tasks[2].limits"
        );
    }
}
