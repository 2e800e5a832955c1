//! Server-sent events as the simulator writes them, and where it cuts them: what the
//! framing of `stream.rs` and each protocol's events share.

use axum::body::Bytes;
use serde_json::Value;

use super::rng::Rng;

/// One server-sent event: its `event:` name (Chat Completions sends none) and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub(in crate::sim) fn named(event: &str, data: &Value) -> Sse {
        Sse {
            event: Some(event.to_string()),
            data: data.to_string(),
        }
    }

    pub(in crate::sim) fn data(data: &Value) -> Sse {
        Sse {
            event: None,
            data: data.to_string(),
        }
    }

    pub(in crate::sim) fn done() -> Sse {
        Sse {
            event: None,
            data: "[DONE]".to_string(),
        }
    }

    /// The event as it goes on the wire. Compact JSON holds no raw newline, so one
    /// `data:` line carries it.
    pub(in crate::sim) fn wire(&self) -> String {
        match &self.event {
            Some(e) => format!("event: {e}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        }
    }
}

/// Where deltas and body pieces are cut: a pure function of the conversation key and
/// step, so a split that breaks a client replays.
pub(in crate::sim) struct Splitter(Rng);

impl Splitter {
    pub(in crate::sim) fn new(key: &str, step: usize) -> Splitter {
        Splitter(Rng::new(0, key, step, "stream"))
    }

    /// `s` in one to eight pieces cut at char boundaries (none for an empty string).
    pub(in crate::sim) fn pieces<'a>(&mut self, s: &'a str) -> Vec<&'a str> {
        if s.is_empty() {
            return Vec::new();
        }
        let n = self.0.between(1, 8);
        let mut cuts: Vec<usize> = (1..n)
            .filter_map(|_| {
                let mut at = self.0.between(1, s.len() as u64) as usize;
                while !s.is_char_boundary(at) {
                    at += 1;
                }
                (at < s.len()).then_some(at)
            })
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut out = Vec::with_capacity(cuts.len() + 1);
        let mut from = 0;
        for at in cuts {
            out.push(&s[from..at]);
            from = at;
        }
        out.push(&s[from..]);
        out
    }

    pub(in crate::sim) fn chance(&mut self, percent: u32) -> bool {
        self.0.percent(percent)
    }

    /// A short filler for OpenAI's `obfuscation` fields.
    pub(in crate::sim) fn filler(&mut self) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..self.0.between(0, 12))
            .map(|_| char::from(ALPHABET[self.0.below(ALPHABET.len())]))
            .collect()
    }

    /// The body cut into pieces: every one to three events (more for long streams, so
    /// there are at most about 24 pieces), and sometimes inside an event, at any byte.
    pub(in crate::sim) fn body_pieces(&mut self, bytes: Vec<u8>, ends: &[usize]) -> Vec<Bytes> {
        let len = bytes.len();
        let group = ends.len().div_ceil(24).max(1);
        let mut cuts = Vec::new();
        let mut i = 0;
        let mut last = 0;
        while i < ends.len() {
            i += group + self.0.below(3);
            let end = ends[i.min(ends.len()) - 1];
            let at = if end > last + 1 && self.chance(30) {
                self.0.between(last as u64 + 1, end as u64 - 1) as usize
            } else {
                end
            };
            if at > last && at < len {
                cuts.push(at);
                last = at;
            }
        }
        let bytes = Bytes::from(bytes);
        let mut out = Vec::with_capacity(cuts.len() + 1);
        let mut from = 0;
        for at in cuts {
            out.push(bytes.slice(from..at));
            from = at;
        }
        if from < len {
            out.push(bytes.slice(from..));
        }
        out
    }
}

/// Whether a request asks for a streamed answer.
pub fn wanted(request: &Value) -> bool {
    request.get("stream").and_then(Value::as_bool) == Some(true)
}

/// A copy of `v` with `key` set (when `v` is an object).
pub(in crate::sim) fn with(v: &Value, key: &str, value: Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.insert(key.to_string(), value);
    }
    v
}
