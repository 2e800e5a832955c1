//! `limits.max_repeats`: a model that makes the same calls and gets the same results
//! turn after turn (or goes round the same short cycle of turns) pays for every turn up
//! to `max_turns` and learns nothing. The first time a repeat reaches the limit the
//! model is told so in the turn's last tool result; if its next turn repeats again, the
//! task stops with `stuck`.
//!
//! The unit is the turn, not the call: a turn's fingerprint covers all its calls and
//! their results, as a set (call ids and their order left out). A model that reads
//! three files in parallel has not repeated itself three times, and one that makes the
//! same two parallel calls every turn is as stuck as one making a single call. Memory is
//! bounded: the last [`MAX_PERIOD`] fingerprints and one counter per cycle length.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use super::Loop;
use crate::model::{ToolCall, ToolResult};
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::TranscriptEvent;

/// The longest cycle of turns looked for (A,B,C,A,B,C,...); longer ones are rarely
/// loops, and every length costs a counter.
pub const MAX_PERIOD: usize = 3;

/// What one turn did and got: 128 bits of two independent hashes of its canonical
/// calls and results, so a false match needs a collision of both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(u64, u64);

fn digest(feed: impl Fn(&mut DefaultHasher)) -> Fingerprint {
    let mut a = DefaultHasher::new();
    0u8.hash(&mut a);
    feed(&mut a);
    let mut b = DefaultHasher::new();
    1u8.hash(&mut b);
    feed(&mut b);
    Fingerprint(a.finish(), b.finish())
}

/// `v` as JSON with every object's keys sorted, so `{"a":1,"b":2}` and `{"b":2,"a":1}`
/// are the same input (the crate keeps key order as written).
pub fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|x, y| x.0.cmp(y.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// One call and its result: the tool, its canonical input (or why it could not be
/// read), the result's text, `is_error` and images. The call id is left out: it is new
/// every turn.
fn call_fingerprint(call: &ToolCall, result: &ToolResult) -> Fingerprint {
    let mut input = String::new();
    canonical_json(&call.input, &mut input);
    digest(|h| {
        call.name.hash(h);
        input.hash(h);
        call.input_error.hash(h);
        result.content.hash(h);
        result.is_error.hash(h);
        for image in &result.images {
            image.media_type.hash(h);
            image.data.hash(h);
        }
    })
}

/// A turn's calls and results as a set: parallel calls in another order are the same
/// turn.
pub fn turn_fingerprint(calls: &[ToolCall], results: &[ToolResult]) -> Fingerprint {
    let mut each: Vec<Fingerprint> = calls
        .iter()
        .zip(results)
        .map(|(c, r)| call_fingerprint(c, r))
        .collect();
    each.sort();
    digest(|h| {
        each.len().hash(h);
        each.hash(h);
    })
}

/// A repeat the detector found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeat {
    /// Turns per cycle: 1 when the same turn came again.
    pub period: usize,
    /// Turns in a row that keep to the cycle.
    pub turns: u32,
    /// The tools of the cycle's turns, oldest first, one list per turn.
    pub tools: Vec<Vec<String>>,
}

impl Repeat {
    /// Whole rounds of the cycle made in a row (for period 1, the times the turn came).
    pub fn times(&self) -> u32 {
        self.turns / self.period as u32
    }

    /// The tool names for a message: a turn's parallel calls joined by `+`, the turns
    /// of a cycle by `, then`. Names come from the model, so each is clipped.
    pub fn tool_list(&self) -> String {
        self.tools
            .iter()
            .map(|turn| {
                turn.iter()
                    .map(|n| crate::text::prefix(n, crate::text::QUOTE_CHARS))
                    .collect::<Vec<_>>()
                    .join(" + ")
            })
            .collect::<Vec<_>>()
            .join(", then ")
    }

    fn flat_tools(&self) -> Vec<String> {
        self.tools.iter().flatten().cloned().collect()
    }

    /// The note appended to the tool result the model reads next.
    pub fn note(&self) -> String {
        if self.period == 1 {
            let (calls, result, it) = if self.tools.iter().flatten().count() == 1 {
                ("this exact call", "result", "it")
            } else {
                ("these exact calls", "results", "them")
            };
            format!(
                "[agentbatch] You have made {calls} ({}) {} times in a row and got the same {result} each time. Repeating {it} will not change anything: try something different, or finish. If your next turn repeats {it} again, the task will be stopped.",
                self.tool_list(),
                self.times()
            )
        } else {
            format!(
                "[agentbatch] You have gone round the same cycle of {} turns ({}) {} times in a row and got the same results each time. Repeating it will not change anything: try something different, or finish. If your next turn goes on with the cycle, the task will be stopped.",
                self.period,
                self.tool_list(),
                self.times()
            )
        }
    }

    /// The stop's `stop_detail`.
    pub fn detail(&self, max: u32) -> String {
        if self.period == 1 {
            let (calls, results) = if self.tools.iter().flatten().count() == 1 {
                ("call", "result")
            } else {
                ("calls", "results")
            };
            format!(
                "made the same {calls} ({}) with the same {results} {} times in a row, after a warning at {max} (limits.max_repeats)",
                self.tool_list(),
                self.times()
            )
        } else {
            format!(
                "went round the same {}-turn cycle ({}) with the same results for {} turns in a row, after a warning at {max} rounds (limits.max_repeats)",
                self.period,
                self.tool_list(),
                self.turns
            )
        }
    }
}

/// What the loop does about a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Fine,
    /// The repeat reached the limit: tell the model.
    Warn(Repeat),
    /// The model was warned last turn and kept to the same cycle: stop.
    Stop(Repeat),
}

struct Step {
    fingerprint: Fingerprint,
    tools: Vec<String>,
}

/// One task's repeat detector.
pub struct Repeats {
    /// None or below 2: off (one turn is no repeat).
    max: Option<u32>,
    /// The last turns, newest last, at most [`MAX_PERIOD`].
    recent: VecDeque<Step>,
    /// For each period p (at index p-1): the turns in a row that equalled the turn p
    /// before them. The last `runs[p-1] + p` turns then keep to a cycle of p turns.
    runs: [u32; MAX_PERIOD],
    /// The period the model was warned about on the previous turn.
    warned: Option<usize>,
}

impl Repeats {
    pub fn new(max: Option<u32>) -> Repeats {
        Repeats {
            max: max.filter(|&m| m >= 2),
            recent: VecDeque::with_capacity(MAX_PERIOD),
            runs: [0; MAX_PERIOD],
            warned: None,
        }
    }

    /// Takes in one turn and says what to do about it.
    pub fn observe(&mut self, fingerprint: Fingerprint, tools: Vec<String>) -> Verdict {
        let Some(max) = self.max else {
            return Verdict::Fine;
        };
        for p in 1..=MAX_PERIOD {
            let same = self.recent.len() >= p
                && self.recent[self.recent.len() - p].fingerprint == fingerprint;
            self.runs[p - 1] = if same {
                self.runs[p - 1].saturating_add(1)
            } else {
                0
            };
        }
        if self.recent.len() == MAX_PERIOD {
            self.recent.pop_front();
        }
        self.recent.push_back(Step { fingerprint, tools });
        if let Some(p) = self.warned.take() {
            if self.runs[p - 1] > 0 {
                return Verdict::Stop(self.repeat(p));
            }
        }
        // The shortest cycle made `max` times in a row: (max - 1) * p turns each equal
        // to the one p before.
        let reached = (1..=MAX_PERIOD)
            .find(|&p| u64::from(self.runs[p - 1]) >= u64::from(max - 1) * p as u64);
        match reached {
            Some(p) => {
                self.warned = Some(p);
                Verdict::Warn(self.repeat(p))
            }
            None => Verdict::Fine,
        }
    }

    fn repeat(&self, period: usize) -> Repeat {
        let tools = self
            .recent
            .iter()
            .skip(self.recent.len().saturating_sub(period))
            .map(|s| s.tools.clone())
            .collect();
        Repeat {
            period,
            turns: self.runs[period - 1].saturating_add(period as u32),
            tools,
        }
    }

    /// The limit, for the stop's detail.
    fn max(&self) -> u32 {
        self.max.unwrap_or_default()
    }
}

impl Loop<'_> {
    /// After a turn's tools ran: appends the warning to the last result, or stops the
    /// task. The note goes into the result itself, so the next request still answers
    /// every call under its id and nothing else.
    pub(super) fn watch_repeats(
        &mut self,
        calls: &[ToolCall],
        results: &mut [ToolResult],
    ) -> Option<Stop> {
        let fingerprint = turn_fingerprint(calls, results);
        let tools = calls.iter().map(|c| c.name.clone()).collect();
        match self.repeats.observe(fingerprint, tools) {
            Verdict::Fine => None,
            Verdict::Warn(r) => {
                let last = results.last_mut()?;
                let note = r.note();
                if !last.content.is_empty() {
                    last.content.push_str("\n\n");
                }
                last.content.push_str(&note);
                self.log.emit(TranscriptEvent::RepeatWarning {
                    turn: self.meter.turns,
                    tools: r.flat_tools(),
                    period: r.period as u32,
                    times: r.times(),
                    id: last.id.clone(),
                    note,
                });
                None
            }
            Verdict::Stop(r) => {
                self.log.emit(TranscriptEvent::RepeatStop {
                    turn: self.meter.turns,
                    tools: r.flat_tools(),
                    period: r.period as u32,
                    times: r.times(),
                });
                Some(Stop::new(StopReason::Stuck, r.detail(self.repeats.max())))
            }
        }
    }
}

#[cfg(test)]
#[path = "repeats_tests.rs"]
mod tests;
