//! The simulator's own rate limits: requests, input tokens and output tokens per minute
//! (GCRA via governor, burst of `burst` worth of the rate). A request over a limit gets
//! 429 with `retry-after`, and every answer carries the protocol's rate-limit headers
//! (`anthropic-ratelimit-*-{limit,remaining,reset}` with RFC 3339 resets, or OpenAI's
//! `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` with duration resets), so
//! client pacing is tested against a server that punishes mistakes.

use std::num::NonZeroU32;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::model::Protocol;
use crate::vocab::limits::RateLimits;

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

struct Window {
    /// `requests`, `input-tokens` or `output-tokens`, as in the header names.
    name: &'static str,
    per_minute: u32,
    burst: u32,
    interval: Duration,
    limiter: Limiter,
}

/// Rate-limit headers for a response: (name, value).
pub type Headers = Vec<(String, String)>;

/// The limits a simulator enforces.
pub struct ServerLimits {
    windows: Vec<Window>,
    clock: DefaultClock,
}

impl ServerLimits {
    pub fn new(l: &RateLimits) -> ServerLimits {
        let windows = [
            ("requests", l.rpm),
            ("input-tokens", l.itpm),
            ("output-tokens", l.otpm),
        ]
        .into_iter()
        .filter_map(|(name, rate)| rate.map(|r| (name, r.max(1))))
        .map(|(name, per_minute)| {
            let burst =
                u32::try_from((u64::from(per_minute) * l.burst.as_millis() as u64 / 60_000).max(1))
                    .unwrap_or(u32::MAX);
            let interval = Duration::from_nanos(60_000_000_000 / u64::from(per_minute));
            let quota = Quota::with_period(interval)
                .unwrap_or_else(|| Quota::per_minute(NonZeroU32::MIN))
                .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
            Window {
                name,
                per_minute,
                burst,
                interval,
                limiter: RateLimiter::direct(quota).with_middleware::<StateInformationMiddleware>(),
            }
        })
        .collect();
        ServerLimits {
            windows,
            clock: DefaultClock::default(),
        }
    }

    /// Charges a request: one request, its input tokens, its max_tokens (a charge above
    /// the burst takes the whole burst). Ok(headers), or Err((wait, headers)) for a 429.
    pub fn charge(
        &self,
        protocol: Protocol,
        input_tokens: u64,
        max_tokens: u64,
    ) -> Result<Headers, (Duration, Headers)> {
        let mut headers = Vec::new();
        for w in &self.windows {
            let n = match w.name {
                "requests" => 1,
                "input-tokens" => input_tokens,
                _ => max_tokens,
            }
            .clamp(1, u64::from(w.burst));
            let cells =
                NonZeroU32::new(u32::try_from(n).unwrap_or(w.burst)).unwrap_or(NonZeroU32::MIN);
            match w.limiter.check_n(cells) {
                Ok(Ok(snapshot)) => {
                    let remaining = snapshot.remaining_burst_capacity();
                    let refill = w.interval * (w.burst - remaining.min(w.burst));
                    headers.extend(window_headers(protocol, w, remaining, refill));
                }
                Ok(Err(not_until)) => {
                    let wait = not_until.wait_time_from(self.clock.now());
                    headers.extend(window_headers(protocol, w, 0, wait));
                    return Err((wait, headers));
                }
                // `n` is clamped to the burst, so this cannot happen; refuse for a second.
                Err(_) => return Err((Duration::from_secs(1), headers)),
            }
        }
        Ok(headers)
    }
}

fn window_headers(protocol: Protocol, w: &Window, remaining: u32, until_full: Duration) -> Headers {
    let limit = w.per_minute.to_string();
    match protocol {
        Protocol::Anthropic => {
            let p = format!("anthropic-ratelimit-{}", w.name);
            vec![
                (format!("{p}-limit"), limit),
                (format!("{p}-remaining"), remaining.to_string()),
                (format!("{p}-reset"), reset_time(until_full)),
            ]
        }
        // OpenAI has one tokens window; the simulator reports its input window there.
        _ => {
            let name = match w.name {
                "requests" => "requests",
                "input-tokens" => "tokens",
                _ => return Vec::new(),
            };
            vec![
                (format!("x-ratelimit-limit-{name}"), limit),
                (
                    format!("x-ratelimit-remaining-{name}"),
                    remaining.to_string(),
                ),
                (format!("x-ratelimit-reset-{name}"), go_duration(until_full)),
            ]
        }
    }
}

/// An Anthropic reset: the RFC 3339 time the window is full again.
pub fn reset_time(until_full: Duration) -> String {
    let reset = Utc::now() + chrono::Duration::from_std(until_full).unwrap_or_default();
    reset.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An OpenAI reset: a Go-style duration such as `120ms`, `1.5s` or `6m0s`.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        return format!("{}s", (secs * 1000.0).round() / 1000.0);
    }
    let whole = d.as_secs();
    format!("{}m{}s", whole / 60, whole % 60)
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
    fn go_durations_round_trip() {
        for ms in [0u64, 12, 999, 1000, 1500, 59_999, 60_000, 360_000] {
            let d = Duration::from_millis(ms);
            let back = crate::model::parse_go_duration(&go_duration(d)).unwrap();
            assert!(
                back.abs_diff(d) <= Duration::from_millis(1),
                "{ms}: {}",
                go_duration(d)
            );
        }
    }
}
