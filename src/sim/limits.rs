//! The simulator's own rate limits: requests (GCRA via governor), input tokens and
//! output tokens (a [`Bucket`]) per minute, each with a burst of `burst` worth of its
//! rate. Input counts what the provider counts (for Anthropic, not cache reads); output
//! is pre-charged at max_tokens and corrected when the answer is known. A request over a limit gets
//! 429 with `retry-after`, and every answer carries the protocol's rate-limit headers
//! (`anthropic-ratelimit-*-{limit,remaining,reset}` with RFC 3339 resets, or OpenAI's
//! `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` with duration resets), so
//! client pacing is tested against a server that punishes mistakes.

use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::protocol::served;
use crate::bucket::Bucket;
use crate::model::Protocol;
use serde_json::Value;

use super::cache::PromptCache;
use crate::vocab::limits::RateLimits;

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// What one window is called in the header names, and its configured rate.
struct Named {
    /// `requests`, `input-tokens` or `output-tokens`.
    name: &'static str,
    per_minute: u32,
}

/// Requests: governor's GCRA (a request is never given back).
struct Requests {
    named: Named,
    burst: u32,
    interval: Duration,
    limiter: Limiter,
}

/// Input or output tokens: a bucket, so the output pre-charge can be corrected.
struct Tokens {
    named: Named,
    bucket: Bucket,
}

/// Rate-limit headers for a response: (name, value).
pub type Headers = Vec<(String, String)>;

/// The limits a simulator enforces.
pub struct ServerLimits {
    requests: Option<Requests>,
    /// Input, then output; under one lock, so a request is charged all or nothing.
    tokens: Mutex<Vec<Tokens>>,
    clock: DefaultClock,
}

/// A window's burst: `burst` worth of its rate, at least one.
fn burst_of(per_minute: u32, burst: Duration) -> u32 {
    u32::try_from((u64::from(per_minute) * burst.as_millis() as u64 / 60_000).max(1))
        .unwrap_or(u32::MAX)
}

impl ServerLimits {
    pub fn new(l: &RateLimits) -> ServerLimits {
        let requests = l.rpm.map(|r| r.max(1)).map(|per_minute| {
            let burst = burst_of(per_minute, l.burst);
            let interval = Duration::from_nanos(60_000_000_000 / u64::from(per_minute));
            let quota = Quota::with_period(interval)
                .unwrap_or_else(|| Quota::per_minute(NonZeroU32::MIN))
                .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
            Requests {
                named: Named {
                    name: "requests",
                    per_minute,
                },
                burst,
                interval,
                limiter: RateLimiter::direct(quota).with_middleware::<StateInformationMiddleware>(),
            }
        });
        let tokens = [("input-tokens", l.itpm), ("output-tokens", l.otpm)]
            .into_iter()
            .filter_map(|(name, rate)| rate.map(|r| (name, r.max(1))))
            .map(|(name, per_minute)| Tokens {
                named: Named { name, per_minute },
                bucket: Bucket::new(
                    u64::from(burst_of(per_minute, l.burst)),
                    f64::from(per_minute) / 60.0,
                    Instant::now(),
                ),
            })
            .collect();
        ServerLimits {
            requests,
            tokens: Mutex::new(tokens),
            clock: DefaultClock::default(),
        }
    }

    fn tokens(&self) -> std::sync::MutexGuard<'_, Vec<Tokens>> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Charges a request: one request, the input tokens the provider counts, its
    /// max_tokens (a charge above the burst takes the whole burst). All or nothing:
    /// Ok(the requests window's headers), or Err((wait, headers)) for a 429.
    pub fn charge(
        &self,
        protocol: Protocol,
        input_tokens: u64,
        max_tokens: u64,
    ) -> Result<Headers, (Duration, Headers)> {
        let now = Instant::now();
        let mut tokens = self.tokens();
        let mut headers = Vec::new();
        let mut taken: Vec<(usize, u64)> = Vec::new();
        let refund = |tokens: &mut Vec<Tokens>, taken: &[(usize, u64)]| {
            for (i, n) in taken {
                tokens[*i].bucket.refund(*n, now);
            }
        };
        for (i, t) in tokens.iter_mut().enumerate() {
            let n = match t.named.name {
                "input-tokens" => input_tokens,
                _ => max_tokens,
            }
            .max(1);
            match t.bucket.take(n, now) {
                Ok(()) => taken.push((i, n.min(t.bucket.capacity()))),
                Err(wait) => {
                    headers.extend(window_headers(protocol, &t.named, 0, wait));
                    refund(&mut tokens, &taken);
                    return Err((wait, headers));
                }
            }
        }
        if let Some(r) = &self.requests {
            match r.limiter.check() {
                Ok(snapshot) => {
                    let remaining = snapshot.remaining_burst_capacity();
                    let refill = r.interval * (r.burst - remaining.min(r.burst));
                    headers.extend(window_headers(protocol, &r.named, remaining, refill));
                }
                Err(not_until) => {
                    let wait = not_until.wait_time_from(self.clock.now());
                    headers.extend(window_headers(protocol, &r.named, 0, wait));
                    refund(&mut tokens, &taken);
                    return Err((wait, headers));
                }
            }
        }
        Ok(headers)
    }

    /// Corrects the output pre-charge of a request that asked for `max_tokens` to the
    /// `used` tokens its answer reports, as both providers do at the end of a request
    /// (what was taken was the pre-charge capped at the burst: more used is owed), and
    /// returns the token windows' headers for the answer (once it is corrected).
    pub fn correct_output(&self, protocol: Protocol, max_tokens: u64, used: u64) -> Headers {
        let now = Instant::now();
        let mut headers = Vec::new();
        for t in self.tokens().iter_mut() {
            if t.named.name == "output-tokens" {
                let taken = max_tokens.max(1).min(t.bucket.capacity());
                t.bucket.correct(taken, used, now);
            }
            let remaining = u32::try_from(t.bucket.available(now)).unwrap_or(u32::MAX);
            let until_full = t.bucket.until_full(now);
            headers.extend(window_headers(protocol, &t.named, remaining, until_full));
        }
        headers
    }
}

/// The input tokens of a request that the provider's ITPM limit counts on arrival: the
/// whole prompt, less (Anthropic, on the models that leave them out) what the cache
/// will read.
pub fn counted_input(
    cache: &PromptCache,
    protocol: Protocol,
    request: &Value,
    body_len: usize,
) -> u64 {
    let prompt = (body_len as u64).div_ceil(4);
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    let served = served(protocol);
    if served.itpm_skips_cache_reads(model) {
        prompt.saturating_sub(served.cache_use(cache, request, false).read)
    } else {
        prompt
    }
}

fn window_headers(protocol: Protocol, w: &Named, remaining: u32, until_full: Duration) -> Headers {
    served(protocol).window_headers(w.name, w.per_minute, remaining, until_full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_over_the_rate_with_a_wait() {
        let l = ServerLimits::new(&RateLimits {
            rpm: Some(120),
            itpm: None,
            otpm: None,
            burst: Duration::from_secs(1),
        });
        // 120 rpm, burst of 2
        assert!(l.charge(Protocol::Anthropic, 10, 10).is_ok());
        let h = l.charge(Protocol::Anthropic, 10, 10).unwrap();
        assert!(h
            .iter()
            .any(|(k, v)| k == "anthropic-ratelimit-requests-remaining" && v == "0"));
        let (wait, h) = l.charge(Protocol::OpenaiChat, 10, 10).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        let reset = h
            .iter()
            .find(|(k, _)| k == "x-ratelimit-reset-requests")
            .map(|(_, v)| v.clone())
            .unwrap();
        assert!(crate::model::parse_go_duration(&reset).is_some(), "{reset}");
    }

    #[test]
    fn output_is_corrected_at_the_end_and_a_refused_request_takes_nothing() {
        let l = ServerLimits::new(&RateLimits {
            rpm: Some(60),
            itpm: Some(60_000),
            otpm: Some(60_000),
            burst: Duration::from_secs(1),
        });
        // burst: 1 request, 1,000 input and 1,000 output tokens
        assert!(l.charge(Protocol::Anthropic, 100, 1000).is_ok());
        let h = l.correct_output(Protocol::Anthropic, 1000, 10);
        let remaining = |h: &Headers, k: &str| {
            h.iter()
                .find(|(n, _)| n == &format!("anthropic-ratelimit-{k}-remaining"))
                .map(|(_, v)| v.parse::<u64>().unwrap())
                .unwrap()
        };
        assert!(remaining(&h, "output-tokens") >= 990, "{h:?}");
        assert!(remaining(&h, "input-tokens") < 910, "{h:?}");
        // The request window is empty: refused, and its tokens are not taken.
        assert!(l.charge(Protocol::Anthropic, 800, 900).is_err());
        let h = l.correct_output(Protocol::Anthropic, 900, 900);
        assert!(remaining(&h, "input-tokens") >= 900, "{h:?}");
    }
}
