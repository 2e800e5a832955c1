//! Finds the line and column of a node in a YAML document, for errors found after
//! parsing (duplicate ids, missing files, missing prices). serde_yaml values carry no
//! positions, but a deserializer error raised at a node does: this walks to the node
//! with a visitor that fails exactly there and reads the position off the error.

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

const FOUND: &str = "agentbatch-locate-found";

/// 1-based (line, column) of the node at `path`, or of its deepest existing ancestor.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    for len in (0..=path.len()).rev() {
        let de = serde_yaml::Deserializer::from_str(text);
        match (Probe { path: &path[..len] }).deserialize(de) {
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
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let hit =
                matches!((first, &key), (Seg::Key(k), serde_yaml::Value::String(s)) if s == k);
            if hit {
                return map.next_value_seed(Probe { path: rest });
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
                return seq.next_element_seed(Probe { path: rest }).map(|_| ());
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
    fn renders_paths() {
        assert_eq!(
            path_string(&[k("tasks"), Seg::Index(2), k("limits")]),
            "tasks[2].limits"
        );
    }
}
