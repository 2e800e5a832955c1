//! What an answer's headers say about the provider's rate limits: the windows' remaining
//! and reset (to pause before a used-up window refuses) and the limits they state (to
//! pace to without configuring them). Read once per answer, so read in one pass.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::HeaderMap;

use crate::vocab::limits::StatedLimits;

/// What a provider says about its rate-limit windows: Anthropic's
/// `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}`
/// (resets are RFC 3339 times) and OpenAI's `x-ratelimit-{remaining,reset}-{requests,tokens}`
/// (resets are Go-style durations such as `6m0s` or `12ms`), both read into one shape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// (remaining, reset) per window that the response reported.
    pub windows: Vec<(String, u64, Option<DateTime<Utc>>)>,
    /// The limits the `*-limit` headers state (Anthropic's
    /// `anthropic-ratelimit-*-limit`, OpenAI's `x-ratelimit-limit-*`).
    pub limits: StatedLimits,
}

/// Anthropic's windows, in the order [`RateHeaders::windows`] lists them.
const ANTHROPIC_WINDOWS: [&str; 4] = ["requests", "tokens", "input-tokens", "output-tokens"];
/// OpenAI's windows.
const OPENAI_WINDOWS: [&str; 2] = ["requests", "tokens"];

/// The rate-limit headers of one answer, picked out in one pass over its headers.
/// Looking each of a dozen names up instead (each parsed and hashed again, most absent)
/// was a third of the rise in the runner's instructions per turn when limits began to
/// be learned from the answers.
#[derive(Default)]
struct Found<'a> {
    /// Anthropic: (remaining, reset, limit) per window of [`ANTHROPIC_WINDOWS`].
    anthropic: [(Option<&'a str>, Option<&'a str>, Option<&'a str>); 4],
    /// OpenAI: (remaining, reset, limit) per window of [`OPENAI_WINDOWS`].
    openai: [(Option<&'a str>, Option<&'a str>, Option<&'a str>); 2],
}

impl<'a> Found<'a> {
    fn of(h: &'a HeaderMap) -> Found<'a> {
        let mut f = Found::default();
        for (name, value) in h {
            let name = name.as_str();
            let slot = if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
                ANTHROPIC_WINDOWS.iter().enumerate().find_map(|(i, w)| {
                    let field = rest.strip_prefix(w)?.strip_prefix('-')?;
                    Some((true, i, field))
                })
            } else if let Some(rest) = name.strip_prefix("x-ratelimit-") {
                rest.split_once('-').and_then(|(field, w)| {
                    let i = OPENAI_WINDOWS.iter().position(|x| *x == w)?;
                    Some((false, i, field))
                })
            } else {
                None
            };
            let Some((anthropic, i, field)) = slot else {
                continue;
            };
            let (remaining, reset, limit) = if anthropic {
                &mut f.anthropic[i]
            } else {
                &mut f.openai[i]
            };
            let place = match field {
                "remaining" => remaining,
                "reset" => reset,
                "limit" => limit,
                _ => continue,
            };
            // The first value of a repeated header, as HeaderMap::get gives.
            if place.is_none() {
                *place = value.to_str().ok().map(str::trim);
            }
        }
        f
    }
}

/// A stated limit: a whole number above 0 (`-1` from Azure and some proxies, or
/// garbage, states nothing).
fn limit_of(v: Option<&str>) -> Option<u32> {
    v.and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0)
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
}

impl RateHeaders {
    pub(super) fn read(h: &HeaderMap) -> RateHeaders {
        let f = Found::of(h);
        let mut windows = Vec::new();
        for (w, (remaining, reset, _)) in ANTHROPIC_WINDOWS.iter().zip(&f.anthropic) {
            let Some(remaining) = remaining.and_then(|v| v.parse::<u64>().ok()) else {
                continue;
            };
            let reset = reset
                .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
                .map(|t| t.with_timezone(&Utc));
            windows.push((w.to_string(), remaining, reset));
        }
        for (w, (remaining, reset, _)) in OPENAI_WINDOWS.iter().zip(&f.openai) {
            // -1 (Azure, some proxies) and absent values mean "not reported".
            let Some(remaining) = remaining.and_then(|v| v.parse::<u64>().ok()) else {
                continue;
            };
            let reset = reset
                .and_then(parse_go_duration)
                .and_then(|d| chrono::Duration::from_std(d).ok())
                .and_then(|d| Utc::now().checked_add_signed(d));
            windows.push((w.to_string(), remaining, reset));
        }
        RateHeaders {
            windows,
            limits: stated_limits(&f),
        }
    }

    /// How long to hold requests back because a window is used up, as of `now`: until
    /// the reset of a used-up requests window (at most a minute, the window's length);
    /// for a used-up token window, whose reset is when it is full again, at most a
    /// second (it refills continuously, and requests differ in size).
    pub fn pause(&self, now: DateTime<Utc>) -> Option<std::time::Duration> {
        self.windows
            .iter()
            .filter(|(_, remaining, _)| *remaining == 0)
            .filter_map(|(name, _, reset)| {
                let wait = ((*reset)? - now).to_std().ok()?;
                let cap = if name == "requests" { 60 } else { 1 };
                Some(wait.min(std::time::Duration::from_secs(cap)))
            })
            .max()
            .filter(|w| !w.is_zero())
    }
}

/// The limits an answer's headers state.
fn stated_limits(f: &Found) -> StatedLimits {
    let anthropic = |i: usize| limit_of(f.anthropic[i].2);
    let openai = |i: usize| limit_of(f.openai[i].2);
    let (itpm, otpm) = (anthropic(2), anthropic(3));
    StatedLimits {
        rpm: anthropic(0).or_else(|| openai(0)),
        itpm,
        otpm,
        // Anthropic's combined window paces only when it states no separate ones.
        tpm: openai(1).or_else(|| anthropic(1).filter(|_| itpm.is_none() && otpm.is_none())),
    }
}

/// Parses a Go-style duration as OpenAI sends it in `x-ratelimit-reset-*`: `1s`, `12ms`,
/// `6m0s`, `1h2m3.5s` (units h, m, s, ms, us, ns; decimals allowed).
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        // "ms" before "m", "us"/"ns" before "s".
        let (unit, secs) = [
            ("ms", 1e-3),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ns", 1e-9),
            ("h", 3600.0),
            ("m", 60.0),
            ("s", 1.0),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        total += value * secs;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_up_windows_pause_until_their_reset_within_bounds() {
        let now = Utc::now();
        let at = |secs: i64| Some(now + chrono::Duration::seconds(secs));
        let h = |w: Vec<(&str, u64, Option<DateTime<Utc>>)>| RateHeaders {
            windows: w
                .into_iter()
                .map(|(n, r, t)| (n.to_string(), r, t))
                .collect(),
            limits: StatedLimits::default(),
        };
        assert_eq!(h(vec![("requests", 3, at(10))]).pause(now), None);
        let p = h(vec![("requests", 0, at(10))]).pause(now).unwrap();
        assert!(
            p > Duration::from_secs(9) && p <= Duration::from_secs(10),
            "{p:?}"
        );
        assert_eq!(
            h(vec![("requests", 0, at(600))]).pause(now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            h(vec![("input-tokens", 0, at(30))]).pause(now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(h(vec![("requests", 0, at(-5))]).pause(now), None);
        let mut map = HeaderMap::new();
        map.insert(
            "anthropic-ratelimit-requests-remaining",
            "0".parse().unwrap(),
        );
        map.insert(
            "anthropic-ratelimit-requests-reset",
            "2026-08-21T12:40:59Z".parse().unwrap(),
        );
        map.insert(
            "anthropic-ratelimit-tokens-remaining",
            "nonsense".parse().unwrap(),
        );
        let read = RateHeaders::read(&map);
        assert_eq!(read.windows.len(), 1);
        assert_eq!(read.windows[0].1, 0);

        let mut map = HeaderMap::new();
        map.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
        map.insert("x-ratelimit-reset-requests", "6m0s".parse().unwrap());
        map.insert("x-ratelimit-remaining-tokens", "-1".parse().unwrap());
        let read = RateHeaders::read(&map);
        assert_eq!(read.windows.len(), 1, "-1 means not reported");
        assert_eq!(read.pause(Utc::now()), Some(Duration::from_secs(60)));
    }

    /// The one pass finds what a lookup of every name finds: each name of both
    /// providers, alone and all together, a repeated header (the first value counts),
    /// and names that only look alike.
    #[test]
    fn one_pass_over_the_headers_finds_what_looking_each_name_up_finds() {
        let mut names = Vec::new();
        for w in ANTHROPIC_WINDOWS {
            for f in ["remaining", "reset", "limit"] {
                names.push(format!("anthropic-ratelimit-{w}-{f}"));
            }
        }
        for w in OPENAI_WINDOWS {
            for f in ["remaining", "reset", "limit"] {
                names.push(format!("x-ratelimit-{f}-{w}"));
            }
        }
        let value = |name: &str| {
            if name.ends_with("reset") || name.contains("-reset-") {
                if name.starts_with("anthropic") {
                    "2026-12-04T10:00:00Z".to_string()
                } else {
                    "6m0s".to_string()
                }
            } else {
                format!("{}", name.len() * 7)
            }
        };
        let lookup = |h: &HeaderMap, name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_string())
        };
        let check = |h: &HeaderMap| {
            let f = Found::of(h);
            for (i, w) in ANTHROPIC_WINDOWS.iter().enumerate() {
                let (r, t, l) = f.anthropic[i];
                assert_eq!(
                    r.map(str::to_string),
                    lookup(h, &format!("anthropic-ratelimit-{w}-remaining"))
                );
                assert_eq!(
                    t.map(str::to_string),
                    lookup(h, &format!("anthropic-ratelimit-{w}-reset"))
                );
                assert_eq!(
                    l.map(str::to_string),
                    lookup(h, &format!("anthropic-ratelimit-{w}-limit"))
                );
            }
            for (i, w) in OPENAI_WINDOWS.iter().enumerate() {
                let (r, t, l) = f.openai[i];
                assert_eq!(
                    r.map(str::to_string),
                    lookup(h, &format!("x-ratelimit-remaining-{w}"))
                );
                assert_eq!(
                    t.map(str::to_string),
                    lookup(h, &format!("x-ratelimit-reset-{w}"))
                );
                assert_eq!(
                    l.map(str::to_string),
                    lookup(h, &format!("x-ratelimit-limit-{w}"))
                );
            }
        };
        let mut all = HeaderMap::new();
        for name in &names {
            let mut one = HeaderMap::new();
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap();
            one.insert(header.clone(), value(name).parse().unwrap());
            check(&one);
            all.append(header.clone(), value(name).parse().unwrap());
            // A repeated header: the first value is the one read.
            all.append(header, " 1 ".parse().unwrap());
        }
        for alike in [
            "anthropic-ratelimit-tokens",
            "anthropic-ratelimit-tokens-limits",
            "anthropic-ratelimit-input-limit",
            "x-ratelimit-limit-tokens-usage-based",
            "x-ratelimit-limit",
            "x-ratelimit-",
            "anthropic-ratelimit-",
        ] {
            all.insert(alike, "5".parse().unwrap());
        }
        check(&all);
        check(&HeaderMap::new());
    }

    #[test]
    fn stated_limits_are_read_from_either_provider_and_nonsense_states_nothing() {
        let read = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            RateHeaders::read(&m).limits
        };
        let a = read(&[
            ("anthropic-ratelimit-requests-limit", "4000"),
            ("anthropic-ratelimit-input-tokens-limit", "400000"),
            ("anthropic-ratelimit-output-tokens-limit", "80000"),
            ("anthropic-ratelimit-tokens-limit", "480000"),
        ]);
        assert_eq!(
            a,
            StatedLimits {
                rpm: Some(4000),
                itpm: Some(400000),
                otpm: Some(80000),
                tpm: None
            }
        );
        let combined = read(&[("anthropic-ratelimit-tokens-limit", "90000")]);
        assert_eq!(combined.tpm, Some(90000));
        let o = read(&[
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-limit-tokens", "30000"),
        ]);
        assert_eq!((o.rpm, o.tpm, o.itpm), (Some(500), Some(30000), None));
        for bad in ["-1", "0", "", "lots", "1e9", "99999999999999999999999"] {
            let l = read(&[("x-ratelimit-limit-requests", bad)]);
            assert_eq!(l.rpm, None, "{bad}");
        }
        let huge = read(&[("x-ratelimit-limit-tokens", "99999999999")]);
        assert_eq!(huge.tpm, Some(u32::MAX));
    }

    #[test]
    fn go_durations() {
        let d = |s: &str| parse_go_duration(s);
        assert_eq!(d("1s"), Some(Duration::from_secs(1)));
        assert_eq!(d("12ms"), Some(Duration::from_millis(12)));
        assert_eq!(d("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(d("1h2m3.5s"), Some(Duration::from_secs_f64(3723.5)));
        assert_eq!(d("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(
            d("99999999999999999999s"),
            None,
            "too long to represent, no panic"
        );
        let far = RateHeaders::read(&{
            let mut m = HeaderMap::new();
            m.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
            m.insert(
                "x-ratelimit-reset-requests",
                "9999999999999h".parse().unwrap(),
            );
            m
        });
        assert_eq!(
            far.windows.len(),
            1,
            "an absurd reset is read as unknown, no panic"
        );
        for bad in ["", "s", "5", "5x", "-1s", "1.2.3s", "1e400s"] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
