//! When to retry a failed request and how long to wait first, as the official SDKs do:
//! honour the server's retry-after when it is sane, else exponential backoff with jitter.

use std::time::Duration;

/// Longest server-requested wait that is honoured as given; longer ones fall back to
/// backoff (the SDKs do the same, since such values usually mean "not soon").
const MAX_SERVER_WAIT: Duration = Duration::from_secs(60);

/// Delay before retry number `attempt` (0 for the first retry). `jitter` is a factor in
/// [0.75, 1.0] drawn by the caller, so that this stays a pure function.
pub fn retry_delay(attempt: u32, server_wait: Option<Duration>, jitter: f64) -> Duration {
    if let Some(w) = server_wait {
        if !w.is_zero() && w <= MAX_SERVER_WAIT {
            return w;
        }
    }
    let base = (0.5 * 2f64.powi(attempt.min(16) as i32)).min(8.0);
    Duration::from_secs_f64(base * jitter.clamp(0.75, 1.0))
}

/// A jitter factor in [0.75, 1.0].
pub fn jitter() -> f64 {
    0.75 + rand::random::<f64>() * 0.25
}

/// Whether an HTTP failure is worth retrying: the server's `x-should-retry` wins, else
/// 408, 409, 429 and every 5xx (529 overloaded included).
pub fn status_is_retryable(status: u16, should_retry: Option<bool>) -> bool {
    match should_retry {
        Some(v) => v,
        None => matches!(status, 408 | 409 | 429) || status >= 500,
    }
}

/// Parses `retry-after-ms` (float milliseconds) or `retry-after` (seconds, or an HTTP
/// date) into a wait.
pub fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Duration::try_from_secs_f64(ms / 1000.0).ok();
        }
    }
    let v = retry_after?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    wait.to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn honours_sane_server_waits() {
        assert_eq!(
            retry_delay(0, Some(Duration::from_secs(3)), 1.0),
            Duration::from_secs(3)
        );
        // too long or zero: back off instead
        assert_eq!(
            retry_delay(0, Some(Duration::from_secs(600)), 1.0),
            Duration::from_millis(500)
        );
        assert_eq!(
            retry_delay(1, Some(Duration::ZERO), 1.0),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(retry_delay(0, None, 1.0), Duration::from_millis(500));
        assert_eq!(retry_delay(2, None, 1.0), Duration::from_secs(2));
        assert_eq!(retry_delay(10, None, 1.0), Duration::from_secs(8));
        assert_eq!(retry_delay(10, None, 0.75), Duration::from_secs(6));
        let j = jitter();
        assert!((0.75..=1.0).contains(&j));
    }

    #[test]
    fn retryable_statuses() {
        for s in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(status_is_retryable(s, None), "{s}");
        }
        for s in [400, 401, 402, 403, 404, 413] {
            assert!(!status_is_retryable(s, None), "{s}");
        }
        assert!(!status_is_retryable(429, Some(false)));
        assert!(status_is_retryable(400, Some(true)));
    }

    #[test]
    fn absurd_waits_are_ignored_not_a_panic() {
        assert_eq!(parse_retry_after(Some("1e30"), None), None);
        assert_eq!(parse_retry_after(None, Some("1e25")), None);
        assert_eq!(parse_retry_after(None, Some("-5")), None);
    }

    #[test]
    fn parses_retry_after_forms() {
        assert_eq!(
            parse_retry_after(Some("1500"), Some("9")),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after(None, Some("2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(parse_retry_after(None, Some("soon")), None);
        let later = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let w = parse_retry_after(None, Some(&later)).unwrap();
        assert!(
            w <= Duration::from_secs(30) && w >= Duration::from_secs(28),
            "{w:?}"
        );
    }
}
