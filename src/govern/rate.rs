//! Pacing requests to rate limits instead of running into them: per provider and per
//! team, requests (governor's GCRA) and input and output tokens (a [`Bucket`] that
//! takes back what a request did not use) per minute, with a burst allowance of one
//! second's worth unless configured, plus a pause that a 429 or a provider's "nothing
//! remaining" headers put on everyone using that provider.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::pg_rate::{SharedRates, Take};
use crate::bucket::Bucket;
use crate::job::Plan;
use crate::vocab::limits::{RateLimits, TokenCount};

/// The requests-per-minute limit.
struct Limit {
    limiter: DefaultDirectRateLimiter,
    /// The most cells one wait may ask for (the burst allowance).
    burst: u32,
}

/// The runner paces at this share of a configured rate, and keeps this share of the
/// burst (at least one request) in reserve: a server enforcing exactly the configured
/// limit then never sees requests closer together than it allows, whatever the network
/// jitter between the runner's clock and the server's.
const RATE_SHARE: f64 = 0.99;
const BURST_RESERVE: f64 = 0.10;

/// Cells per `burst` span, at least one, minus the reserve.
fn burst_cells(per_minute: u32, burst: Duration) -> u32 {
    let cells = (u64::from(per_minute) * burst.as_millis() as u64) / 60_000;
    let reserve = ((cells as f64 * BURST_RESERVE).ceil() as u64).max(1);
    let cells = cells.saturating_sub(reserve).clamp(1, u64::from(u32::MAX));
    u32::try_from(cells).unwrap_or(u32::MAX)
}

impl Limit {
    fn new(per_minute: u32, burst: Duration) -> Limit {
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
    async fn take(&self, mut n: u64) {
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
struct TokenLimit {
    bucket: Mutex<Bucket>,
    /// Wakes a waiter when tokens come back, so it does not sleep out a wait computed
    /// before the refund.
    refunded: tokio::sync::Notify,
}

impl TokenLimit {
    fn new(per_minute: u32, burst: Duration) -> TokenLimit {
        let per_minute = per_minute.max(1);
        let capacity = u64::from(burst_cells(per_minute, burst));
        let per_second = f64::from(per_minute) * RATE_SHARE / 60.0;
        TokenLimit {
            bucket: Mutex::new(Bucket::new(capacity, per_second, Instant::now())),
            refunded: tokio::sync::Notify::new(),
        }
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `n` tokens are taken, in bucket-sized steps (so a request larger
    /// than the burst is paced rather than refused); `taken` counts the steps done, so
    /// a wait cut off half-way can give them back.
    async fn take(&self, mut n: u64, done: &mut u64) {
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
    fn correct(&self, charged: u64, counted: u64) {
        self.bucket().correct(charged, counted, Instant::now());
        if charged > counted {
            self.refunded.notify_waiters();
        }
    }
}

/// What a worker takes from a shared bucket beyond the request at hand, so that at high
/// rates it does not make one database call per request: this much of the bucket's
/// refill, at most a quarter of its capacity. Taken ahead by many workers at once it
/// adds to a full bucket's burst: 5 ms each stays within the 10% burst reserve for up
/// to 20 workers on one limit.
const BATCH: Duration = Duration::from_millis(5);

/// How long what was taken ahead may be used: after that it is dropped (never given
/// back, so the shared rate is never exceeded, only not quite reached).
const CREDIT_TTL: Duration = Duration::from_millis(250);

/// A pause another worker set is seen within this long: what was taken ahead is used
/// only while the database was asked this recently.
const PAUSE_CHECK: Duration = Duration::from_millis(100);

/// A gate's buckets in the database, shared with every other process on it.
struct Shared {
    /// Tokens taken ahead, by bucket key, and until when they may be used.
    credits: Mutex<HashMap<String, (f64, Instant)>>,
    /// When the database last answered a take (and so said there was no pause).
    asked: Mutex<Option<Instant>>,
    rates: Arc<SharedRates>,
    /// `provider:<name>` or `team:<name>`: the rows are `<scope>:rpm` and so on.
    scope: String,
    /// Capacity and refill a second of each limit, as the local buckets have them.
    rpm: Option<(f64, f64)>,
    itpm: Option<(f64, f64)>,
    otpm: Option<(f64, f64)>,
}

/// Capacity and refill a second of a per-minute limit, as [`TokenLimit`] makes them.
fn shape(per_minute: Option<u32>, burst: Duration) -> Option<(f64, f64)> {
    per_minute.map(|r| {
        let r = r.max(1);
        (
            f64::from(burst_cells(r, burst)),
            f64::from(r) * RATE_SHARE / 60.0,
        )
    })
}

impl Shared {
    /// What is in hand, expired credit dropped first.
    fn credits(&self) -> std::sync::MutexGuard<'_, HashMap<String, (f64, Instant)>> {
        let mut c = self.credits.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        c.retain(|_, (_, until)| *until > now);
        c
    }

    /// Pays for `takes` from what was taken ahead, if it covers all of them.
    fn spend_credit(&self, takes: &[Take]) -> bool {
        let now = Instant::now();
        let recent = self
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| now.duration_since(at) < PAUSE_CHECK);
        let mut credits = self.credits();
        if !recent {
            return false;
        }
        let covered = takes
            .iter()
            .filter(|t| t.amount > 0.0)
            .all(|t| credits.get(&t.key).is_some_and(|(c, _)| *c >= t.amount));
        if covered {
            for t in takes.iter().filter(|t| t.amount > 0.0) {
                if let Some((c, _)) = credits.get_mut(&t.key) {
                    *c -= t.amount;
                }
            }
        }
        covered
    }

    /// What to ask the database for: each take less what is in hand, plus a batch.
    fn asks(&self, takes: &[Take]) -> Vec<Take> {
        let credits = self.credits();
        takes
            .iter()
            .map(|t| {
                if t.amount <= 0.0 {
                    return t.clone();
                }
                let held = credits.get(&t.key).map_or(0.0, |(c, _)| *c);
                let batch = (t.per_second * BATCH.as_secs_f64()).min(t.capacity / 4.0);
                Take {
                    amount: (t.amount - held).max(0.0) + batch.max(0.0),
                    ..t.clone()
                }
            })
            .collect()
    }

    /// Adds what the database gave to what is in hand.
    fn credit(&self, asks: &[Take]) {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let until = Instant::now() + CREDIT_TTL;
        let mut credits = self.credits();
        for a in asks.iter().filter(|a| a.amount > 0.0) {
            // New tokens expire with what is in hand already: nothing lives longer
            // than CREDIT_TTL from when the oldest of it was taken.
            let e = credits.entry(a.key.clone()).or_insert((0.0, until));
            e.0 += a.amount;
        }
    }

    /// The takes of a request; the pause row always (taking nothing).
    fn takes(&self, input: u64, output: u64) -> Vec<Take> {
        let mut v = vec![Take {
            key: format!("{}:pause", self.scope),
            amount: 0.0,
            capacity: 1.0,
            per_second: 1.0,
        }];
        for (name, shape, amount) in [
            ("rpm", self.rpm, 1.0),
            ("itpm", self.itpm, input as f64),
            ("otpm", self.otpm, output as f64),
        ] {
            if let Some((capacity, per_second)) = shape {
                v.push(Take {
                    key: format!("{}:{name}", self.scope),
                    amount,
                    capacity,
                    per_second,
                });
            }
        }
        v
    }

    /// Runs `f` off the async workers, not waiting for it (corrections, pauses).
    fn later(
        &self,
        f: impl FnOnce(&SharedRates) -> Result<(), super::pg::PgError> + Send + 'static,
    ) {
        let rates = self.rates.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn_blocking(move || {
                if let Err(e) = f(&rates) {
                    eprintln!("agentbatch: the shared rate limits: {e}");
                }
            });
        }
    }
}

/// The limits of one provider or team.
pub struct Gate {
    rpm: Option<Limit>,
    itpm: Option<TokenLimit>,
    otpm: Option<TokenLimit>,
    /// Waiters are served in arrival order (tokio's mutex is fair), one at a time, so
    /// nobody starves and the limiter is not polled by a herd.
    queue: tokio::sync::Mutex<()>,
    paused_until: Mutex<Option<Instant>>,
    /// The workers of a shared run pace on buckets in the database instead.
    shared: Option<Shared>,
}

impl Gate {
    pub fn new(limits: &RateLimits) -> Gate {
        Gate {
            rpm: limits.rpm.map(|r| Limit::new(r, limits.burst)),
            itpm: limits.itpm.map(|r| TokenLimit::new(r, limits.burst)),
            otpm: limits.otpm.map(|r| TokenLimit::new(r, limits.burst)),
            queue: tokio::sync::Mutex::new(()),
            paused_until: Mutex::new(None),
            shared: None,
        }
    }

    /// A gate whose buckets and pause are rows `<scope>:...` of a database that other
    /// processes pace on too.
    fn shared(limits: &RateLimits, rates: Arc<SharedRates>, scope: String) -> Gate {
        let mut g = Gate::new(limits);
        g.shared = Some(Shared {
            credits: Mutex::new(HashMap::new()),
            asked: Mutex::new(None),
            rates,
            scope,
            rpm: shape(limits.rpm, limits.burst),
            itpm: shape(limits.itpm, limits.burst),
            otpm: shape(limits.otpm, limits.burst),
        });
        g
    }

    /// Stops every request through this gate until `until` (a 429's retry time, or the
    /// reset of an exhausted rate-limit window).
    pub fn pause_until(&self, until: Instant) {
        let mut p = self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if p.is_none_or(|cur| cur < until) {
            *p = Some(until);
        }
        if let Some(sh) = &self.shared {
            let (key, secs) = (
                format!("{}:pause", sh.scope),
                until
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64(),
            );
            sh.later(move |r| r.pause(key, secs));
        }
    }

    fn pause(&self) -> Option<Instant> {
        let p = self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        p.filter(|t| *t > Instant::now())
    }

    /// Waits for the gate to admit a request of `input` rate-counted prompt tokens that
    /// may produce `output` tokens (pre-charged at max_tokens, as providers do).
    /// A wait cut off (deadline, cancellation) gives back the tokens it had taken.
    pub async fn admit(&self, input: u64, output: u64) {
        let _turn = self.queue.lock().await;
        while let Some(until) = self.pause() {
            tokio::time::sleep_until(until.into()).await;
        }
        if let Some(sh) = &self.shared {
            let takes = sh.takes(input, output);
            loop {
                if sh.spend_credit(&takes) {
                    return;
                }
                let asks = sh.asks(&takes);
                let (rates, t) = (sh.rates.clone(), asks.clone());
                let wait = match tokio::task::spawn_blocking(move || rates.take(t)).await {
                    Ok(Ok(w)) if w <= 0.0 => {
                        sh.credit(&asks);
                        continue;
                    }
                    Ok(Ok(w)) => Duration::from_secs_f64(w.min(5.0)),
                    Ok(Err(e)) => {
                        // Pacing alone would let N workers send N times the rate: wait
                        // for the database instead.
                        eprintln!("agentbatch: the shared rate limits: {e}; trying again");
                        Duration::from_secs(1)
                    }
                    Err(_) => Duration::from_secs(1),
                };
                tokio::time::sleep(wait).await;
            }
        }
        if let Some(l) = &self.rpm {
            l.take(1).await;
        }
        let mut held = Held {
            gate: self,
            taken: TokenCount::default(),
            admitted: false,
        };
        if let Some(l) = &self.itpm {
            l.take(input, &mut held.taken.input).await;
        }
        if let Some(l) = &self.otpm {
            l.take(output, &mut held.taken.output).await;
        }
        held.admitted = true;
    }

    /// Corrects what [`Gate::admit`] took (`charged`) to what the provider counted:
    /// tokens not used go back at once, tokens used beyond the charge are owed.
    pub fn correct(&self, charged: TokenCount, counted: TokenCount) {
        if let Some(sh) = &self.shared {
            let mut keys = Vec::new();
            let mut deltas = Vec::new();
            for (name, on, c, n) in [
                ("itpm", sh.itpm.is_some(), charged.input, counted.input),
                ("otpm", sh.otpm.is_some(), charged.output, counted.output),
            ] {
                if on && c != n {
                    keys.push(format!("{}:{name}", sh.scope));
                    deltas.push(c as f64 - n as f64);
                }
            }
            if !keys.is_empty() {
                sh.later(move |r| r.adjust(keys, deltas));
            }
            return;
        }
        if let Some(l) = &self.itpm {
            l.correct(charged.input, counted.input);
        }
        if let Some(l) = &self.otpm {
            l.correct(charged.output, counted.output);
        }
    }
}

/// Tokens an admit has taken so far: given back if it is dropped before it admits.
struct Held<'a> {
    gate: &'a Gate,
    taken: TokenCount,
    admitted: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.admitted {
            self.gate.correct(self.taken, TokenCount::default());
        }
    }
}

/// Every gate of a run: one per provider (always, for 429 pauses) and one per team
/// with limits.
pub struct Gates {
    providers: HashMap<String, Arc<Gate>>,
    teams: HashMap<String, Arc<Gate>>,
}

impl Gates {
    pub fn new(plan: &Plan) -> Gates {
        Gates::build(plan, |limits, _| Gate::new(limits))
    }

    /// Gates whose buckets and pauses live in the database `rates` (the workers of a
    /// shared run): every process on it paces together, by provider and team name.
    pub fn shared(plan: &Plan, rates: Arc<SharedRates>) -> Gates {
        Gates::build(plan, |limits, scope| {
            Gate::shared(limits, rates.clone(), scope)
        })
    }

    fn build(plan: &Plan, make: impl Fn(&RateLimits, String) -> Gate) -> Gates {
        let mut providers = HashMap::new();
        for t in &plan.tasks {
            providers.entry(t.provider.name.clone()).or_insert_with(|| {
                Arc::new(make(
                    &t.provider.rate,
                    format!("provider:{}", t.provider.name),
                ))
            });
        }
        let teams = plan
            .teams
            .values()
            .filter(|t| !t.rate.is_empty())
            .map(|t| {
                (
                    t.name.clone(),
                    Arc::new(make(&t.rate, format!("team:{}", t.name))),
                )
            })
            .collect();
        Gates { providers, teams }
    }

    pub fn provider(&self, name: &str) -> Option<Arc<Gate>> {
        self.providers.get(name).cloned()
    }

    pub fn team(&self, name: Option<&str>) -> Option<Arc<Gate>> {
        name.and_then(|n| self.teams.get(n)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: u32, burst_ms: u64) -> RateLimits {
        RateLimits {
            rpm: Some(rpm),
            itpm: None,
            otpm: None,
            burst: Duration::from_millis(burst_ms),
        }
    }

    #[tokio::test]
    async fn paces_to_the_rate_after_the_burst() {
        // 1200 rpm = one every 50 ms (50.5 at 99%); one second's worth = 20, 2 kept in
        // reserve: 18 at once, then 12 more
        let g = Gate::new(&limits(1200, 1000));
        let start = Instant::now();
        for _ in 0..30 {
            g.admit(0, 0).await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(12 * 50), "{took:?}");
        assert!(took < Duration::from_millis(1000), "{took:?}");
    }

    #[tokio::test]
    async fn token_charges_larger_than_the_burst_are_paced_not_refused() {
        let g = Gate::new(&RateLimits {
            rpm: None,
            itpm: Some(60_000),
            otpm: None,
            burst: Duration::from_secs(1),
        });
        let start = Instant::now();
        g.admit(3000, 0).await; // 990/s with a burst of 900: over two seconds
        assert!(
            start.elapsed() >= Duration::from_millis(1900),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_wait_cut_off_gives_back_what_it_had_taken() {
        // 60,000 itpm: 990 a second, a burst of 900.
        let g = Gate::new(&RateLimits {
            rpm: None,
            itpm: Some(60_000),
            otpm: None,
            burst: Duration::from_secs(1),
        });
        // 1,800 takes the burst at once, then waits for the rest: cut it off.
        let cut = tokio::time::timeout(Duration::from_millis(100), g.admit(1800, 0)).await;
        assert!(cut.is_err());
        // The 900 it took are back: the next 900 go at once.
        let start = Instant::now();
        g.admit(850, 0).await;
        assert!(
            start.elapsed() < Duration::from_millis(300),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn tokens_given_back_wake_a_waiter_and_debts_hold_the_next() {
        let g = Arc::new(Gate::new(&RateLimits {
            rpm: None,
            itpm: Some(60_000),
            otpm: None,
            burst: Duration::from_secs(1),
        }));
        g.admit(900, 0).await; // the whole burst; refilling takes about 909 ms
        let start = Instant::now();
        let waiter = tokio::spawn({
            let g = g.clone();
            async move { g.admit(900, 0).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let charged = TokenCount {
            input: 900,
            output: 0,
        };
        g.correct(charged, TokenCount::default());
        waiter.await.unwrap();
        let woke = start.elapsed();
        assert!(woke < Duration::from_millis(500), "{woke:?}");
        // Counted at twice the charge: the next request waits out the debt too.
        g.correct(
            charged,
            TokenCount {
                input: 1800,
                output: 0,
            },
        );
        let start = Instant::now();
        g.admit(1, 0).await;
        assert!(
            start.elapsed() >= Duration::from_millis(800),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_pause_holds_everyone() {
        let g = Gate::new(&limits(60_000, 1000));
        g.pause_until(Instant::now() + Duration::from_millis(200));
        g.pause_until(Instant::now() + Duration::from_millis(50)); // never shortens
        let start = Instant::now();
        g.admit(0, 0).await;
        assert!(start.elapsed() >= Duration::from_millis(190));
    }
}
