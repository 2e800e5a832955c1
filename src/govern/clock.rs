//! The clock that decides which period a team's cap charges (`day:`, `week:`,
//! `month:`). It is the system's UTC clock, unless `AGENTBATCH_PERIOD_CLOCK` names an
//! RFC 3339 instant for it to start from when the process starts (it then runs at the
//! system clock's pace): so that a period's rollover can be tried (by a test, or by a
//! user checking what `on_cap: wait` does at midnight) without waiting for midnight.
//! Only period keys use it; leases and expiries keep the system clock.

use std::sync::OnceLock;

use chrono::{DateTime, Utc};

/// The variable that starts the period clock at another instant.
pub const PERIOD_CLOCK_VAR: &str = "AGENTBATCH_PERIOD_CLOCK";

fn offset() -> chrono::Duration {
    static OFFSET: OnceLock<chrono::Duration> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        let Ok(v) = std::env::var(PERIOD_CLOCK_VAR) else {
            return chrono::Duration::zero();
        };
        match DateTime::parse_from_rfc3339(v.trim()) {
            Ok(at) => at.with_timezone(&Utc) - Utc::now(),
            Err(e) => {
                eprintln!(
                    "agentbatch: {PERIOD_CLOCK_VAR}={v:?} is not an RFC 3339 time ({e}); team caps' periods follow the system clock"
                );
                chrono::Duration::zero()
            }
        }
    })
}

/// Now, on the period clock.
pub fn period_now() -> DateTime<Utc> {
    Utc::now() + offset()
}
