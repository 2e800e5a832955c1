//! Token usage in one shape for every protocol.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token counts of one response in one shape for every protocol: `input_tokens` are the
/// uncached prompt tokens (Anthropic's own sense; OpenAI's counts are converted, since
/// its input_tokens include cached ones), cache reads and writes apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    /// All cache writes, the 1-hour ones included.
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` written with the 1-hour lifetime.
    pub cache_write_1h_tokens: u64,
    /// The part of `output_tokens` spent on hidden reasoning (OpenAI reports it).
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Every prompt token the request consumed, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// The same prompt with nothing read from or written to a cache: every prompt token
    /// plain input (what caching is measured against).
    pub fn uncached(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens(),
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
            ..*self
        }
    }

    /// Adds another response's usage; saturating, since the figures come from outside.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cache_write_1h_tokens = self
            .cache_write_1h_tokens
            .saturating_add(other.cache_write_1h_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }
}

/// A usage figure a provider sent that could not be taken as sent: not a whole count,
/// at odds with another figure of the same answer, or more than the request could have
/// used. Every figure from a provider is outside input; each one read differently is
/// kept here and written to the transcript (`usage_clamped`), where the audit and a
/// reader of the page see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Clamp {
    /// The figure: the provider's own name for it (`usage.cache_creation.
    /// ephemeral_1h_input_tokens`), or the neutral one for a bound of the request.
    pub field: String,
    /// What the provider sent, as it sent it (negative, fractional, text...).
    pub reported: Value,
    /// The count used instead.
    pub used: u64,
    /// What it contradicted.
    pub why: String,
}

/// What one request could have used, which no figure of its answer may exceed: the
/// prompt bound its reservation priced (a token per byte sent, plus what came back
/// before), its `max_tokens`, and whether it asked for 1-hour cache entries (Anthropic
/// writes none for a request that did not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub one_hour_writes: bool,
}

/// An answer's usage as read, and the figures that were read differently from what the
/// provider sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reported {
    pub usage: Usage,
    pub clamps: Vec<Clamp>,
}

impl Reported {
    /// The usage clamped to what the request could have used, so that its cost never
    /// exceeds the worst case reserved for it: a token count above its bound is the
    /// provider contradicting the bytes it was sent (real tokenizers never count more
    /// tokens than bytes), and trusting it would charge a task, a team's day and a run
    /// for tokens that were never there. 1-hour writes for a request that asked for none
    /// are read as 5-minute ones; output past `max_tokens` as `max_tokens`; a prompt
    /// past its bound is cut to it, cache reads first, then plain input, then 5-minute
    /// and 1-hour writes (the cheapest first at the vendors' prices), so the reading is
    /// the dearest one consistent with the bound.
    pub fn within(mut self, b: &Bounds) -> Reported {
        let u = &mut self.usage;
        let mut note = |field: &str, reported: u64, used: u64, why: String| {
            self.clamps.push(Clamp {
                field: field.to_string(),
                reported: Value::from(reported),
                used,
                why,
            })
        };
        if !b.one_hour_writes && u.cache_write_1h_tokens > 0 {
            note(
                "cache_write_1h_tokens",
                u.cache_write_1h_tokens,
                0,
                "the request asked for no 1-hour cache entries: read as 5-minute writes".into(),
            );
            u.cache_write_1h_tokens = 0;
        }
        if u.cache_write_1h_tokens > u.cache_write_tokens {
            let why = "above cache_write_tokens, which include them".to_string();
            note(
                "cache_write_1h_tokens",
                u.cache_write_1h_tokens,
                u.cache_write_tokens,
                why,
            );
            u.cache_write_1h_tokens = u.cache_write_tokens;
        }
        if u.output_tokens > b.output_tokens {
            let why = format!("above the request's max_tokens of {}", b.output_tokens);
            note("output_tokens", u.output_tokens, b.output_tokens, why);
            u.output_tokens = b.output_tokens;
        }
        if u.reasoning_tokens > u.output_tokens {
            let why = "above output_tokens, which include them".to_string();
            note("reasoning_tokens", u.reasoning_tokens, u.output_tokens, why);
            u.reasoning_tokens = u.output_tokens;
        }
        // In u128: three hostile figures near u64::MAX still add up.
        let total = [u.input_tokens, u.cache_read_tokens, u.cache_write_tokens]
            .iter()
            .map(|&n| u128::from(n))
            .sum::<u128>();
        if total > u128::from(b.prompt_tokens) {
            let why = format!(
                "the prompt's {total} tokens are above the request's bound of {} (a token per byte sent)",
                b.prompt_tokens
            );
            let mut excess = total - u128::from(b.prompt_tokens);
            let mut writes_5m = u.cache_write_tokens.saturating_sub(u.cache_write_1h_tokens);
            let mut cut = |field: &str, n: &mut u64| {
                let by = u64::try_from(excess.min(u128::from(*n))).unwrap_or(*n);
                if by > 0 {
                    note(field, *n, *n - by, why.clone());
                    *n -= by;
                    excess -= u128::from(by);
                }
            };
            cut("cache_read_tokens", &mut u.cache_read_tokens);
            cut("input_tokens", &mut u.input_tokens);
            cut("cache_write_tokens (5-minute)", &mut writes_5m);
            cut("cache_write_1h_tokens", &mut u.cache_write_1h_tokens);
            u.cache_write_tokens = writes_5m + u.cache_write_1h_tokens;
        }
        self
    }
}

/// Reads the counts of a provider's usage object, noting each figure that is not a
/// whole, non-negative count or contradicts another (see [`Clamp`]).
pub(crate) struct Figures<'a> {
    usage: &'a Value,
    clamps: Vec<Clamp>,
}

impl<'a> Figures<'a> {
    pub fn new(usage: &'a Value) -> Figures<'a> {
        Figures {
            usage,
            clamps: Vec::new(),
        }
    }

    fn note(&mut self, pointer: &str, used: u64, why: impl Into<String>) {
        self.clamps.push(Clamp {
            field: format!("usage{}", pointer.replace('/', ".")),
            reported: self.usage.pointer(pointer).cloned().unwrap_or(Value::Null),
            used,
            why: why.into(),
        });
    }

    /// The count at `pointer` (`/cache_creation/ephemeral_1h_input_tokens`); None when
    /// absent or null. A negative figure reads as 0, a fractional one rounded up, one
    /// past the largest count as that, and a value that is no number as absent: each is
    /// noted.
    pub fn count(&mut self, pointer: &str) -> Option<u64> {
        let v = self.usage.pointer(pointer)?;
        if let Some(n) = v.as_u64() {
            return Some(n);
        }
        let (used, why) = match v.as_f64() {
            Some(x) if x.is_sign_negative() || x.is_nan() => (0, "negative: read as 0"),
            Some(x) if x >= u64::MAX as f64 => (u64::MAX, "too large for a count"),
            Some(x) => (x.ceil() as u64, "not a whole number: rounded up"),
            None if v.is_null() => return None,
            None => {
                self.note(pointer, 0, "not a number: read as absent");
                return None;
            }
        };
        self.note(pointer, used, why);
        Some(used)
    }

    /// `value`, the figure at `pointer`, at most `most`; a larger one is noted.
    pub fn at_most(&mut self, pointer: &str, value: u64, most: u64, why: &str) -> u64 {
        if value <= most {
            return value;
        }
        self.note(pointer, most, format!("{why} ({most})"));
        most
    }

    /// The figure at `pointer` is reported as `value` but must be `expected`: noted
    /// unless they agree (a breakdown that does not add up to its total).
    pub fn agrees(&mut self, pointer: &str, value: Option<u64>, expected: u64, why: &str) {
        if value.is_some_and(|v| v != expected) {
            self.note(pointer, expected, format!("{why} ({expected})"));
        }
    }

    /// The usage read, with what was noted reading it.
    pub fn done(self, usage: Usage) -> Reported {
        Reported {
            usage,
            clamps: self.clamps,
        }
    }
}

/// Where one OpenAI protocol puts its usage figures: the prompt total (cached tokens
/// included), the cached part, the written part (Responses only), the output total and
/// its reasoning part.
pub(crate) struct OpenAiFields {
    pub input: &'static str,
    pub cached: &'static str,
    pub written: Option<&'static str>,
    pub output: &'static str,
    pub reasoning: &'static str,
}

/// OpenAI's usage in the neutral shape: its input (prompt) count includes the cached
/// tokens and, presumably, the cache writes, which `Usage` keeps apart. A part above
/// its total is clamped to it. Err names a total that is missing or not a number.
pub(crate) fn openai_usage(u: &Value, at: &OpenAiFields) -> Result<Reported, String> {
    let mut f = Figures::new(u);
    let missing = |p: &str| format!("`usage{}` is missing or not a count", p.replace('/', "."));
    let input = f.count(at.input).ok_or_else(|| missing(at.input))?;
    let output = f.count(at.output).ok_or_else(|| missing(at.output))?;
    let cached = f.count(at.cached).unwrap_or(0);
    let cached = f.at_most(
        at.cached,
        cached,
        input,
        "above the prompt total it is a part of",
    );
    let written = match at.written {
        Some(p) => {
            let w = f.count(p).unwrap_or(0);
            f.at_most(
                p,
                w,
                input - cached,
                "above the prompt total less its cached part",
            )
        }
        None => 0,
    };
    let reasoning = f.count(at.reasoning).unwrap_or(0);
    let reasoning = f.at_most(
        at.reasoning,
        reasoning,
        output,
        "above the output total it is a part of",
    );
    Ok(f.done(Usage {
        input_tokens: input - cached - written,
        cache_read_tokens: cached,
        cache_write_tokens: written,
        cache_write_1h_tokens: 0,
        output_tokens: output,
        reasoning_tokens: reasoning,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(r: &Reported) -> Vec<(&str, u64)> {
        r.clamps
            .iter()
            .map(|c| (c.field.as_str(), c.used))
            .collect()
    }

    #[test]
    fn figures_that_are_not_whole_counts_are_read_as_the_nearest_count_and_noted() {
        let u = json!({"a": -3, "b": 2.2, "c": 1e300, "d": "7", "e": null, "f": 9});
        let mut f = Figures::new(&u);
        let read: Vec<Option<u64>> = ["/a", "/b", "/c", "/d", "/e", "/f", "/g"]
            .iter()
            .map(|p| f.count(p))
            .collect();
        assert_eq!(
            read,
            [Some(0), Some(3), Some(u64::MAX), None, None, Some(9), None]
        );
        let r = f.done(Usage::default());
        assert_eq!(
            fields(&r),
            [
                ("usage.a", 0),
                ("usage.b", 3),
                ("usage.c", u64::MAX),
                ("usage.d", 0)
            ]
        );
        assert_eq!(r.clamps[0].reported, json!(-3));
        assert_eq!(r.clamps[3].reported, json!("7"));
    }

    #[test]
    fn openai_parts_above_their_totals_are_clamped_to_them() {
        let at = OpenAiFields {
            input: "/input_tokens",
            cached: "/input_tokens_details/cached_tokens",
            written: Some("/input_tokens_details/cache_write_tokens"),
            output: "/output_tokens",
            reasoning: "/output_tokens_details/reasoning_tokens",
        };
        let sane = json!({"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000},
                          "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 180}});
        let r = openai_usage(&sane, &at).unwrap();
        assert!(r.clamps.is_empty());
        assert_eq!(
            (
                r.usage.input_tokens,
                r.usage.cache_read_tokens,
                r.usage.reasoning_tokens
            ),
            (200, 1000, 180)
        );
        let odd = json!({"input_tokens": 100,
                         "input_tokens_details": {"cached_tokens": 900000000, "cache_write_tokens": 5},
                         "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 11}});
        let r = openai_usage(&odd, &at).unwrap();
        assert_eq!(r.usage.prompt_tokens(), 100);
        assert_eq!(r.usage.cache_read_tokens, 100);
        assert_eq!(r.usage.reasoning_tokens, 10);
        assert_eq!(
            fields(&r),
            [
                ("usage.input_tokens_details.cached_tokens", 100),
                ("usage.input_tokens_details.cache_write_tokens", 0),
                ("usage.output_tokens_details.reasoning_tokens", 10)
            ]
        );
        let e = openai_usage(&json!({"input_tokens": "x", "output_tokens": 1}), &at).unwrap_err();
        assert!(e.contains("usage.input_tokens"), "{e}");
    }

    #[test]
    fn within_cuts_the_cheapest_tokens_first_and_notes_each() {
        let b = Bounds {
            prompt_tokens: 80,
            output_tokens: 50,
            one_hour_writes: true,
        };
        let r = Reported {
            usage: Usage {
                input_tokens: 60,
                cache_read_tokens: 30,
                cache_write_tokens: 40,
                cache_write_1h_tokens: 10,
                output_tokens: 70,
                reasoning_tokens: 60,
            },
            clamps: Vec::new(),
        }
        .within(&b);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 40,
                cache_read_tokens: 0,
                cache_write_tokens: 40,
                cache_write_1h_tokens: 10,
                output_tokens: 50,
                reasoning_tokens: 50,
            }
        );
        assert_eq!(
            fields(&r),
            [
                ("output_tokens", 50),
                ("reasoning_tokens", 50),
                ("cache_read_tokens", 0),
                ("input_tokens", 40)
            ]
        );
        // nothing to note within bounds
        let fine = Reported {
            usage: r.usage,
            clamps: Vec::new(),
        }
        .within(&b);
        assert!(fine.clamps.is_empty());
    }
}
