//! A token bucket that refills continuously and takes tokens back: the shape of the
//! providers' token limits (Anthropic documents a bucket "continuously replenished up
//! to your maximum"; both providers correct an output pre-charge at the end of a
//! request). governor paces requests, which are never given back; token windows need a
//! refund and a debt, which governor's GCRA state does not expose, so the runner's
//! gates and the simulator's windows both count tokens here.

use std::time::{Duration, Instant};

/// Tokens available now, refilled at `per_second` up to `capacity`. The level may go
/// below zero: a charge found too small after the fact is a debt the next take waits
/// out.
#[derive(Debug, Clone)]
pub struct Bucket {
    capacity: f64,
    per_second: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket of `capacity` tokens (at least one) refilling at `per_second`.
    pub fn new(capacity: u64, per_second: f64, now: Instant) -> Bucket {
        let capacity = capacity.max(1) as f64;
        Bucket {
            capacity,
            per_second: per_second.max(f64::MIN_POSITIVE),
            level: capacity,
            at: now,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity as u64
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.at = self.at.max(now);
    }

    /// The whole tokens available at `now` (0 while in debt).
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.level.max(0.0) as u64
    }

    /// How long until the bucket is full again.
    pub fn until_full(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.wait_for(self.capacity)
    }

    fn wait_for(&self, level: f64) -> Duration {
        let missing = (level - self.level).max(0.0);
        // A huge debt (a provider reporting absurd usage) waits "forever", not panics.
        Duration::try_from_secs_f64(missing / self.per_second).unwrap_or(Duration::MAX)
    }

    /// Takes `n` tokens (at most the capacity: a larger charge takes a full bucket), or
    /// says how long until they are there and takes nothing.
    pub fn take(&mut self, n: u64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        let n = (n as f64).min(self.capacity);
        if self.level >= n {
            self.level -= n;
            Ok(())
        } else {
            Err(self.wait_for(n).max(Duration::from_millis(1)))
        }
    }

    /// Gives back tokens charged but not used (never above the capacity).
    pub fn refund(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.level = (self.level + n as f64).min(self.capacity);
    }

    /// Corrects a charge of `charged` to what was `counted`: the difference goes back,
    /// or is owed.
    pub fn correct(&mut self, charged: u64, counted: u64, now: Instant) {
        match charged.cmp(&counted) {
            std::cmp::Ordering::Greater => self.refund(charged - counted, now),
            std::cmp::Ordering::Less => self.owe(counted - charged, now),
            std::cmp::Ordering::Equal => {}
        }
    }

    /// Charges tokens that were used beyond what was taken, even into debt.
    pub fn owe(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.level -= n as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_refills_and_refuses_with_the_wait() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100, 10.0, t0);
        assert!(b.take(60, t0).is_ok());
        let wait = b.take(60, t0).unwrap_err();
        assert!((1990..=2010).contains(&wait.as_millis()), "{wait:?}");
        assert!(b.take(60, t0 + Duration::from_secs(2)).is_ok());
        assert_eq!(b.available(t0 + Duration::from_secs(2)), 0);
    }

    #[test]
    fn a_charge_above_the_capacity_takes_a_full_bucket() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100, 10.0, t0);
        assert!(b.take(1_000, t0).is_ok());
        assert_eq!(b.available(t0), 0);
        assert!(b.take(1_000, t0 + Duration::from_secs(5)).is_err());
    }

    #[test]
    fn refunds_stop_at_the_capacity_and_debts_delay_the_next_take() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100, 10.0, t0);
        b.take(80, t0).unwrap();
        b.refund(500, t0);
        assert_eq!(b.available(t0), 100);
        b.owe(150, t0);
        assert_eq!(b.available(t0), 0);
        // -50 now: 1 token needs 5.1 s
        let wait = b.take(1, t0).unwrap_err();
        assert!((5090..=5110).contains(&wait.as_millis()), "{wait:?}");
        assert_eq!(b.until_full(t0), Duration::from_secs(15));
    }

    #[test]
    fn an_earlier_instant_does_not_move_the_clock_back() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let mut b = Bucket::new(100, 10.0, t0);
        b.take(100, later).unwrap();
        assert_eq!(b.available(t0), 0);
        assert_eq!(b.available(later + Duration::from_secs(1)), 10);
    }
}
