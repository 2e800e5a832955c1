//! Pacing requests to rate limits instead of running into them: per provider and per
//! team, requests (governor's GCRA) and input and output tokens (a [`Bucket`] that
//! takes back what a request did not use) per minute, with a burst allowance of one
//! second's worth unless configured, plus a pause that a 429 or a provider's "nothing
//! remaining" headers put on everyone using that provider.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::adaptive::Adaptive;
use super::limiters::{Limit, TokenLimit};
use super::pg_rate::SharedRates;
use super::rate_shared::{Shapes, Shared};
use crate::job::Plan;
use crate::vocab::limits::{RateLimits, StatedLimits, TokenCount};

/// The limiters of a gate now: configured ones, and those learned from the provider's
/// headers, which replace the set when a stated limit changes.
#[derive(Clone, Default)]
struct Windows {
    rpm: Option<Arc<Limit>>,
    itpm: Option<Arc<TokenLimit>>,
    otpm: Option<Arc<TokenLimit>>,
    /// Input and output together (learned only).
    tpm: Option<Arc<TokenLimit>>,
}

impl Windows {
    fn of(l: &StatedLimits, burst: Duration) -> Windows {
        Windows {
            rpm: l.rpm.map(|r| Arc::new(Limit::new(r, burst))),
            itpm: l.itpm.map(|r| Arc::new(TokenLimit::new(r, burst))),
            otpm: l.otpm.map(|r| Arc::new(TokenLimit::new(r, burst))),
            tpm: l.tpm.map(|r| Arc::new(TokenLimit::new(r, burst))),
        }
    }

    /// Limiters for limits learned mid-window: drained, so that what was sent before
    /// they were known is not sent again as a burst.
    fn learned(l: &StatedLimits, burst: Duration) -> Windows {
        Windows {
            rpm: l.rpm.map(|r| Arc::new(Limit::drained(r, burst))),
            itpm: l.itpm.map(|r| Arc::new(TokenLimit::drained(r, burst))),
            otpm: l.otpm.map(|r| Arc::new(TokenLimit::drained(r, burst))),
            tpm: l.tpm.map(|r| Arc::new(TokenLimit::drained(r, burst))),
        }
    }
}

/// The configured limits of a gate as stated limits (no `tpm`: a job cannot set one).
fn configured(limits: &RateLimits) -> StatedLimits {
    StatedLimits {
        rpm: limits.rpm,
        itpm: limits.itpm,
        otpm: limits.otpm,
        tpm: None,
    }
}

/// A change of the limits a gate paces to, learned from a provider's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// What the gate paced to before (configured and learned).
    pub before: StatedLimits,
    /// What it paces to now.
    pub now: StatedLimits,
}

/// The most learned changes a gate keeps for run.json.
const HISTORY: usize = 100;

/// The limits of one provider or team.
pub struct Gate {
    /// The job's own limits: a window it sets is never learned.
    configured: RateLimits,
    /// What the gate paces to (configured, with what was learned where nothing is).
    pacing: Mutex<StatedLimits>,
    /// Each change learned, with when (at most [`HISTORY`] kept: a provider whose
    /// stated limits flap would otherwise grow it without bound).
    history: Mutex<Vec<(DateTime<Utc>, StatedLimits)>>,
    windows: Mutex<Windows>,
    /// While nothing is configured or learned: the adaptive rate.
    adaptive: Mutex<Option<Adaptive>>,
    /// Whether `adaptive` may hold a rate (checked without its lock on every request).
    adaptive_on: std::sync::atomic::AtomicBool,
    /// Wakes the request waiting at the adaptive limiter when the rate changes: it
    /// would otherwise sit out a gap of the old rate (at slow start's first rates, half
    /// a second for each doubling).
    adaptive_changed: tokio::sync::Notify,
    /// Waiters are served in arrival order (tokio's mutex is fair), one at a time, so
    /// nobody starves and the limiter is not polled by a herd.
    queue: tokio::sync::Mutex<()>,
    paused_until: Mutex<Option<Instant>>,
    /// The workers of a shared run pace on buckets in the database instead.
    shared: Option<Shared>,
}

impl Gate {
    /// A gate pacing to `limits`; with none, to what the provider's answers state, or
    /// to an adaptive rate when they state nothing.
    #[cfg(test)]
    pub fn new(limits: &RateLimits) -> Gate {
        Gate::with(limits, limits.is_empty())
    }

    /// As [`Gate::new`], the adaptive rate only when `adaptive` (never for the runner's
    /// own simulator without limits: it has none to find).
    fn with(limits: &RateLimits, adaptive: bool) -> Gate {
        let pacing = configured(limits);
        Gate {
            configured: limits.clone(),
            pacing: Mutex::new(pacing),
            history: Mutex::new(Vec::new()),
            windows: Mutex::new(Windows::of(&pacing, limits.burst)),
            adaptive: Mutex::new(adaptive.then(Adaptive::new)),
            adaptive_on: std::sync::atomic::AtomicBool::new(adaptive),
            adaptive_changed: tokio::sync::Notify::new(),
            queue: tokio::sync::Mutex::new(()),
            paused_until: Mutex::new(None),
            shared: None,
        }
    }

    /// A gate whose buckets and pause are rows `<scope>:...` of a database that other
    /// processes pace on too.
    fn shared(limits: &RateLimits, adaptive: bool, rates: Arc<SharedRates>, scope: String) -> Gate {
        let mut g = Gate::with(limits, adaptive);
        g.shared = Some(Shared {
            credits: Mutex::new(HashMap::new()),
            asked: Mutex::new(None),
            rates,
            scope,
            shapes: Mutex::new(Shapes::of(&configured(limits), limits.burst)),
        });
        g
    }

    fn adaptive(&self) -> std::sync::MutexGuard<'_, Option<Adaptive>> {
        self.adaptive.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn adaptive_on(&self) -> bool {
        self.adaptive_on.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An answer came for a request admitted at `sent` (for the adaptive rate).
    pub fn answered(&self, sent: Instant) {
        if !self.adaptive_on() {
            return;
        }
        self.adapt(|a| a.answered(sent));
    }

    /// A 429 came for a request admitted at `sent`: the adaptive rate, if that is what
    /// paces, is cut.
    pub fn refused(&self, sent: Instant) {
        if !self.adaptive_on() {
            return;
        }
        self.adapt(|a| a.refused(sent));
    }

    /// Applies `change` to the adaptive rate, and wakes its waiter if the rate moved.
    fn adapt(&self, change: impl FnOnce(&mut Adaptive)) {
        let changed = self.adaptive().as_mut().is_some_and(|a| {
            let was = a.rate;
            change(a);
            a.rate != was
        });
        if changed {
            self.adaptive_changed.notify_waiters();
        }
    }

    /// The adaptive rate now (requests a second), while it paces.
    pub fn adaptive_rate(&self) -> Option<f64> {
        self.adaptive().as_ref().and_then(|a| a.rate)
    }

    fn windows(&self) -> Windows {
        self.windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The changes learned so far, oldest first: when, and what the gate paced to from
    /// then on.
    pub fn learned(&self) -> Vec<(DateTime<Utc>, StatedLimits)> {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the gate paces to now: the configured limits, and those learned where the
    /// job configures none.
    #[cfg(test)]
    fn pacing(&self) -> StatedLimits {
        *self.pacing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the limits a provider's answer states for every window the job does not
    /// configure (a `tpm` only where no input or output limit is configured or
    /// stated); Some(change) when what the gate paces to changed. The limiters of a
    /// changed window start afresh at the new rate.
    pub fn learn(&self, stated: &StatedLimits) -> Option<Learned> {
        if stated.is_empty() {
            return None;
        }
        let c = &self.configured;
        let mut pacing = self.pacing.lock().unwrap_or_else(PoisonError::into_inner);
        let before = *pacing;
        let mut now = before;
        if c.rpm.is_none() && stated.rpm.is_some() {
            now.rpm = stated.rpm;
        }
        if c.itpm.is_none() && stated.itpm.is_some() {
            now.itpm = stated.itpm;
        }
        if c.otpm.is_none() && stated.otpm.is_some() {
            now.otpm = stated.otpm;
        }
        if stated.tpm.is_some() && c.itpm.is_none() && c.otpm.is_none() {
            now.tpm = stated.tpm;
        }
        if now == before {
            return None;
        }
        *pacing = now;
        {
            let mut h = self.history.lock().unwrap_or_else(PoisonError::into_inner);
            if h.len() < HISTORY {
                h.push((Utc::now(), now));
            }
        }
        let burst = c.burst;
        {
            let mut w = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
            let fresh = Windows::learned(&now, burst);
            if now.rpm != before.rpm {
                w.rpm = fresh.rpm;
            }
            if now.itpm != before.itpm {
                w.itpm = fresh.itpm;
            }
            if now.otpm != before.otpm {
                w.otpm = fresh.otpm;
            }
            if now.tpm != before.tpm {
                w.tpm = fresh.tpm;
            }
        }
        if let Some(sh) = &self.shared {
            *sh.shapes.lock().unwrap_or_else(PoisonError::into_inner) = Shapes::of(&now, burst);
        }
        // Limits are known and in place now (not before: a request let through between
        // would meet no pacing at all): the adaptive rate has done its part.
        *self.adaptive.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.adaptive_on
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.adaptive_changed.notify_waiters();
        Some(Learned { before, now })
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
        while self.adaptive_on() {
            let changed = self.adaptive_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let Some(l) = self.adaptive().as_mut().map(Adaptive::current) else {
                break;
            };
            tokio::select! {
                () = l.take(1) => break,
                () = &mut changed => {}
            }
        }
        let w = self.windows();
        if let Some(l) = &w.rpm {
            l.take(1).await;
        }
        let mut held = Held {
            gate: self,
            taken: TokenCount::default(),
            combined: 0,
            admitted: false,
        };
        if let Some(l) = &w.itpm {
            l.take(input, &mut held.taken.input).await;
        }
        if let Some(l) = &w.otpm {
            l.take(output, &mut held.taken.output).await;
        }
        if let Some(l) = &w.tpm {
            l.take(input + output, &mut held.combined).await;
        }
        held.admitted = true;
    }

    /// Corrects what [`Gate::admit`] took (`charged`) to what the provider counted:
    /// tokens not used go back at once, tokens used beyond the charge are owed.
    pub fn correct(&self, charged: TokenCount, counted: TokenCount) {
        self.correct_each(charged, counted, charged.input + charged.output);
    }

    /// As [`Gate::correct`], with what the combined window took given apart (an admit
    /// cut off part-way took less there than the charge).
    fn correct_each(&self, charged: TokenCount, counted: TokenCount, combined: u64) {
        let counted_combined = counted.input + counted.output;
        if let Some(sh) = &self.shared {
            let shapes = sh.shapes();
            let mut keys = Vec::new();
            let mut deltas = Vec::new();
            for (name, on, c, n) in [
                ("itpm", shapes.itpm.is_some(), charged.input, counted.input),
                (
                    "otpm",
                    shapes.otpm.is_some(),
                    charged.output,
                    counted.output,
                ),
                ("tpm", shapes.tpm.is_some(), combined, counted_combined),
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
        let w = self.windows();
        if let Some(l) = &w.itpm {
            l.correct(charged.input, counted.input);
        }
        if let Some(l) = &w.otpm {
            l.correct(charged.output, counted.output);
        }
        if let Some(l) = &w.tpm {
            l.correct(combined, counted_combined);
        }
    }
}

/// Tokens an admit has taken so far: given back if it is dropped before it admits.
struct Held<'a> {
    gate: &'a Gate,
    taken: TokenCount,
    /// What the combined window took.
    combined: u64,
    admitted: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.admitted {
            self.gate
                .correct_each(self.taken, TokenCount::default(), self.combined);
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
        Gates::build(plan, |limits, adaptive, _| Gate::with(limits, adaptive))
    }

    /// Gates whose buckets and pauses live in the database `rates` (the workers of a
    /// shared run): every process on it paces together, by provider and team name.
    pub fn shared(plan: &Plan, rates: Arc<SharedRates>) -> Gates {
        Gates::build(plan, |limits, adaptive, scope| {
            Gate::shared(limits, adaptive, rates.clone(), scope)
        })
    }

    fn build(plan: &Plan, make: impl Fn(&RateLimits, bool, String) -> Gate) -> Gates {
        let mut providers = HashMap::new();
        for t in &plan.tasks {
            let p = &t.provider;
            // The simulator a run starts enforces limits only when given some.
            let own_unlimited_sim = p.kind == crate::job::ProviderKind::Sim
                && p.base_url.is_none()
                && p.server_limits.is_none();
            providers.entry(p.name.clone()).or_insert_with(|| {
                Arc::new(make(
                    &p.rate,
                    p.rate.is_empty() && !own_unlimited_sim,
                    format!("provider:{}", p.name),
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
                    Arc::new(make(&t.rate, false, format!("team:{}", t.name))),
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

    /// Per provider paced by its adaptive rate at the end (it refused requests and
    /// states no limits): that rate, in requests a minute.
    pub fn adaptive_rpm(&self) -> BTreeMap<String, u32> {
        self.providers
            .iter()
            .filter_map(|(name, g)| {
                g.adaptive_rate().map(|r| {
                    (
                        name.clone(),
                        (r * 60.0).round().clamp(0.0, f64::from(u32::MAX)) as u32,
                    )
                })
            })
            .collect()
    }

    /// Per provider whose answers' headers changed what it paces to: each change, when,
    /// and the limits from then on.
    pub fn learned(&self) -> BTreeMap<String, Vec<(DateTime<Utc>, StatedLimits)>> {
        self.providers
            .iter()
            .map(|(name, g)| (name.clone(), g.learned()))
            .filter(|(_, h)| !h.is_empty())
            .collect()
    }
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
