//! The limiters a gate waits at: requests on governor's GCRA, tokens on a bucket that
//! takes back what a request did not use, both paced at a share of the rate.

use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::bucket::Bucket;

/// The requests-per-minute limit.
pub(super) struct Limit {
    limiter: DefaultDirectRateLimiter,
    /// The most cells one wait may ask for (the burst allowance).
    burst: u32,
}

/// The runner paces at this share of a configured rate, and keeps this share of the
/// burst (at least one request) in reserve: a server enforcing exactly the configured
/// limit then never sees requests closer together than it allows, whatever the network
/// jitter between the runner's clock and the server's.
pub(super) const RATE_SHARE: f64 = 0.99;
const BURST_RESERVE: f64 = 0.10;

/// Cells per `burst` span, at least one, minus the reserve.
pub(super) fn burst_cells(per_minute: u32, burst: Duration) -> u32 {
    let cells = (u64::from(per_minute) * burst.as_millis() as u64) / 60_000;
    let reserve = ((cells as f64 * BURST_RESERVE).ceil() as u64).max(1);
    let cells = cells.saturating_sub(reserve).clamp(1, u64::from(u32::MAX));
    u32::try_from(cells).unwrap_or(u32::MAX)
}

impl Limit {
    /// A limit whose burst is used up: it starts at its steady rate. For a limit learned
    /// part-way through a provider's window, whose burst the requests before it may
    /// have taken already.
    pub(super) fn drained(per_minute: u32, burst: Duration) -> Limit {
        let l = Limit::new(per_minute, burst);
        if let Some(n) = NonZeroU32::new(l.burst) {
            let _ = l.limiter.check_n(n);
        }
        l
    }

    pub(super) fn new(per_minute: u32, burst: Duration) -> Limit {
        let per_minute = per_minute.max(1);
        let burst_cells = burst_cells(per_minute, burst);
        let period = Duration::from_secs_f64(60.0 / (f64::from(per_minute) * RATE_SHARE));
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_minute(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::new(burst_cells).unwrap_or(NonZeroU32::MIN));
        Limit {
            limiter: RateLimiter::direct(quota),
            burst: burst_cells,
        }
    }

    /// Waits until `n` cells are available, in burst-sized steps (so a request larger
    /// than the burst is paced rather than refused).
    pub(super) async fn take(&self, mut n: u64) {
        while n > 0 {
            let step = n.min(u64::from(self.burst));
            let cells = NonZeroU32::new(u32::try_from(step).unwrap_or(self.burst))
                .unwrap_or(NonZeroU32::MIN);
            // `step` never exceeds the burst, so the capacity error cannot happen.
            let _ = self.limiter.until_n_ready(cells).await;
            n -= step;
        }
    }
}

/// A tokens-per-minute limit.
pub(super) struct TokenLimit {
    bucket: Mutex<Bucket>,
    /// Wakes a waiter when tokens come back, so it does not sleep out a wait computed
    /// before the refund.
    refunded: tokio::sync::Notify,
}

impl TokenLimit {
    pub(super) fn new(per_minute: u32, burst: Duration) -> TokenLimit {
        let per_minute = per_minute.max(1);
        let capacity = u64::from(burst_cells(per_minute, burst));
        let per_second = f64::from(per_minute) * RATE_SHARE / 60.0;
        TokenLimit {
            bucket: Mutex::new(Bucket::new(capacity, per_second, Instant::now())),
            refunded: tokio::sync::Notify::new(),
        }
    }

    /// As [`Limit::drained`]: no burst to start with.
    pub(super) fn drained(per_minute: u32, burst: Duration) -> TokenLimit {
        let t = TokenLimit::new(per_minute, burst);
        {
            let mut b = t.bucket();
            let all = b.capacity();
            let _ = b.take(all, Instant::now());
        }
        t
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `n` tokens are taken, in bucket-sized steps (so a request larger
    /// than the burst is paced rather than refused); `taken` counts the steps done, so
    /// a wait cut off half-way can give them back.
    pub(super) async fn take(&self, mut n: u64, done: &mut u64) {
        while n > 0 {
            // Registered before looking, so a refund in between is not missed.
            let refunded = self.refunded.notified();
            let taken = {
                let mut b = self.bucket();
                let step = n.min(b.capacity());
                b.take(step, Instant::now()).map(|()| step)
            };
            match taken {
                Ok(step) => {
                    n -= step;
                    *done += step;
                }
                Err(wait) => {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = refunded => {}
                    }
                }
            }
        }
    }

    /// Corrects a pre-charge of `charged` to what the provider counted, waking a
    /// waiter when tokens come back.
    pub(super) fn correct(&self, charged: u64, counted: u64) {
        self.bucket().correct(charged, counted, Instant::now());
        if charged > counted {
            self.refunded.notify_waiters();
        }
    }
}
