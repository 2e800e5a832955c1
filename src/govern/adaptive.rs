//! The adaptive request rate of a provider that has no configured limits and states
//! none (vLLM, llama.cpp, a proxy): found by its 429s alone.
//!
//! A rate, not a number of requests in flight: a per-minute limit is a rate, and at a
//! server's latency of 50 ms one request in flight is already 1,200 a minute. The first
//! request goes alone (its answer may state limits, which then pace instead); after its
//! answer the rate starts at [`START`] a second and doubles each round trip (slow
//! start): when a request sent at the current rate is answered, up to four times the
//! recent answers' rate (over [`SLOW_SPAN`], or the last [`SLOW_ANSWERS`] answers when
//! they are sparser), and at least each second while the last second's answers keep up
//! with half of it (so a server of long answers ramps no slower than one of short
//! ones). At 50 ms of latency a limitless server is found within about half a second,
//! where doubling each second took ten.
//!
//! A 429 for a request sent after the last cut sets the rate to [`CUT`] of what the
//! server took: what it answered over the last [`MEASURE`] (never before the first
//! answer); in slow start, over the last second, or half the rate the refused request
//! went at (the rate before it had its round trip answered), whichever is more. A 429
//! for a request sent before the last cut is the same episode, and is not counted
//! twice. The rate then grows back quickly to [`NEAR`] of that, stays there for
//! [`HOLD`], and only then tries higher, slowly, never past twice the rate the answers
//! came at, so an idle spell does not build a burst.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::limiters::{Limit, RATE_SHARE};

pub(super) struct Adaptive {
    /// Requests a second now; None until the first answer.
    pub(super) rate: Option<f64>,
    limit: Arc<Limit>,
    slow_start: bool,
    /// What the server was found to answer a second when it last refused.
    found: Option<f64>,
    /// When the rate last grew, when it was last cut, and since when it has held near
    /// what was found.
    grown: Instant,
    cut: Option<Instant>,
    held: Option<Instant>,
    /// When the recent answers came, oldest first (the last [`WINDOW`]).
    answers: VecDeque<Instant>,
    /// When the first answer came: a span reaching before it holds no answers, and
    /// would make the server look slower than it is.
    first: Option<Instant>,
    /// Slow start's rates and when each was set, oldest first (the last [`RATES_KEPT`]):
    /// a 429 in slow start is weighed against the rate its request went at.
    rates: VecDeque<(Instant, f64)>,
}

const START: f64 = 2.0;
/// What slow start measures the answers over before it doubles: two round trips of a
/// 50 ms server, so four times the answers' rate over it is still twice the rate when
/// the rate doubles each round trip (over 250 ms it held growth to x1.5 a round trip).
const SLOW_SPAN: Duration = Duration::from_millis(100);
/// How far past the answers' rate over [`SLOW_SPAN`] slow start may go: far enough that
/// the round trip, not the span's lag, sets its pace, near enough that a rate the tasks
/// do not use stops growing.
const SLOW_CEILING: f64 = 4.0;
const MIN_GROWTH: f64 = 1.1;
/// How many answers slow start's ceiling measures at least: with fewer in
/// [`SLOW_SPAN`], the span stretches back to the [`SLOW_ANSWERS`]th last answer, so one
/// task's answer every few seconds does not count as ten a second.
const SLOW_ANSWERS: usize = 4;
const RATES_KEPT: usize = 64;
const CUT: f64 = 0.8;
const NEAR: f64 = 0.9;
/// What a cut measures the server's rate over: long enough that one answer more or
/// less at its edges moves it little.
const MEASURE: Duration = Duration::from_secs(3);
const HOLD: Duration = Duration::from_secs(30);
/// Growth a second: back toward what was found, and past it after the hold.
const RECOVER: f64 = 0.10;
const PROBE: f64 = 0.01;
const WINDOW: Duration = Duration::from_secs(10);

impl Adaptive {
    pub(super) fn new() -> Adaptive {
        Adaptive {
            rate: None,
            // One request, then one a second, until an answer comes.
            limit: Arc::new(Limit::new(60, Duration::ZERO)),
            slow_start: true,
            found: None,
            grown: Instant::now(),
            cut: None,
            held: None,
            answers: VecDeque::new(),
            first: None,
            rates: VecDeque::new(),
        }
    }

    /// The per-minute figure of a limiter that paces at `rate` a second.
    fn per_minute(rate: f64) -> u32 {
        (rate * 60.0 / RATE_SHARE)
            .ceil()
            .clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// The rate the answers came at over the last `span` (or since the first answer,
    /// when that is shorter; at least [`SLOW_SPAN`]).
    fn answered_rate(&mut self, now: Instant, span: Duration) -> f64 {
        let span = match self.first {
            Some(first) => span.min(now.duration_since(first).max(SLOW_SPAN)),
            None => span,
        };
        while self
            .answers
            .front()
            .is_some_and(|t| now.duration_since(*t) > WINDOW)
        {
            self.answers.pop_front();
        }
        let n = self
            .answers
            .iter()
            .rev()
            .take_while(|t| now.duration_since(**t) <= span)
            .count();
        n as f64 / span.as_secs_f64()
    }

    /// The rate of the recent answers, for slow start's ceiling: over [`SLOW_SPAN`], or
    /// back to the [`SLOW_ANSWERS`]th last answer when the span holds fewer.
    fn answered_recent(&mut self, now: Instant) -> f64 {
        let in_span = self.answered_rate(now, SLOW_SPAN);
        let n = self.answers.len();
        if in_span * SLOW_SPAN.as_secs_f64() >= SLOW_ANSWERS as f64 || n == 0 {
            return in_span;
        }
        let oldest = self.answers[n.saturating_sub(SLOW_ANSWERS)];
        let span = now.saturating_duration_since(oldest).max(SLOW_SPAN);
        n.min(SLOW_ANSWERS) as f64 / span.as_secs_f64()
    }

    /// The rate slow start had set when `sent` went out.
    fn rate_at(&self, sent: Instant) -> Option<f64> {
        self.rates
            .iter()
            .rev()
            .find(|(t, _)| *t <= sent)
            .map(|(_, r)| *r)
    }

    fn set(&mut self, rate: f64) {
        let rate = rate.clamp(0.05, 100_000.0);
        if self.rate.is_none_or(|r| (r - rate).abs() > f64::EPSILON) {
            self.rate = Some(rate);
            self.limit = Arc::new(Limit::drained(Adaptive::per_minute(rate), Duration::ZERO));
        }
    }

    /// As [`Adaptive::set`], for slow start: the first request at the new rate goes at
    /// once, since the round trip is what the next doubling waits for, not a gap of the
    /// old rate.
    fn set_at_once(&mut self, now: Instant, rate: f64) {
        let was = self.rate;
        self.set(rate);
        let Some(set) = self.rate.filter(|r| Some(*r) != was) else {
            return;
        };
        self.limit = Arc::new(Limit::new(Adaptive::per_minute(set), Duration::ZERO));
        self.rates.push_back((now, set));
        if self.rates.len() > RATES_KEPT {
            self.rates.pop_front();
        }
    }

    /// Slow start's growth: doubled, when `sent` went at the current rate and the
    /// recent answers keep up with half the doubled rate.
    fn slow_start_at(&mut self, now: Instant, sent: Instant) {
        let Some(rate) = self.rate else {
            return;
        };
        if !self.slow_start || sent < self.grown {
            return;
        }
        let doubled = (2.0 * rate).min(SLOW_CEILING * self.answered_recent(now));
        // Growth by a sliver is not worth a new limiter (whose first request goes at
        // once) and a wake-up of the waiter.
        if doubled > rate * MIN_GROWTH {
            self.grown = now;
            self.set_at_once(now, doubled);
        }
    }

    /// The limiter to wait at, grown first when a second has passed.
    pub(super) fn current(&mut self) -> Arc<Limit> {
        self.current_at(Instant::now())
    }

    fn current_at(&mut self, now: Instant) -> Arc<Limit> {
        let Some(rate) = self.rate else {
            return self.limit.clone();
        };
        let secs = now.duration_since(self.grown).as_secs_f64();
        if secs >= 1.0 {
            let ceiling = (2.0 * self.answered_rate(now, Duration::from_secs(1))).max(rate);
            if self.slow_start {
                // A round trip longer than a second: slow start doubles each second. The
                // round trips keep counting from the last growth when it does not.
                let target = (rate * 2f64.powf(secs.floor())).min(ceiling);
                if target > rate * MIN_GROWTH {
                    self.grown = now;
                    self.set(target);
                    self.rates.push_back((now, target));
                    if self.rates.len() > RATES_KEPT {
                        self.rates.pop_front();
                    }
                }
                return self.limit.clone();
            }
            self.grown = now;
            let target = match self.found {
                Some(found) if rate < NEAR * found => {
                    (rate * (1.0 + RECOVER * secs)).min(NEAR * found)
                }
                Some(_) => {
                    let held = *self.held.get_or_insert(now);
                    if now.duration_since(held) >= HOLD {
                        rate * (1.0 + PROBE * secs)
                    } else {
                        rate
                    }
                }
                None => rate * (1.0 + RECOVER * secs),
            };
            self.set(target.min(ceiling));
        }
        self.limit.clone()
    }

    /// An answer to a request admitted at `sent`.
    pub(super) fn answered(&mut self, sent: Instant) {
        self.answered_at(Instant::now(), sent);
    }

    fn answered_at(&mut self, now: Instant, sent: Instant) {
        self.answers.push_back(now);
        if self.answers.len() > 100_000 {
            self.answers.pop_front();
        }
        if self.rate.is_none() {
            self.grown = now;
            self.first = Some(now);
            self.set_at_once(now, START);
        } else {
            self.slow_start_at(now, sent);
        }
    }

    /// A 429 for a request admitted at `sent`: the rate is cut below what the server
    /// answered over the last [`MEASURE`], unless the request went before the last cut.
    pub(super) fn refused(&mut self, sent: Instant) {
        self.refused_at(Instant::now(), sent);
    }

    fn refused_at(&mut self, now: Instant, sent: Instant) {
        if self.cut.is_some_and(|c| sent < c) {
            return;
        }
        self.cut = Some(now);
        self.grown = now;
        self.held = None;
        // In slow start the rate doubled each round trip: the last second of answers
        // averages the whole ramp, far below the rate that was refused. The rate before
        // the refused one had its round trip answered, so the server took that much
        // (perhaps from its burst: the next cut measures again, over [`MEASURE`]).
        let (span, answered_before) = if self.slow_start {
            let before = self.rate_at(sent).map_or(0.0, |r| r / 2.0);
            (Duration::from_secs(1), before)
        } else {
            (MEASURE, 0.0)
        };
        self.slow_start = false;
        let answered = self.answered_rate(now, span).max(answered_before);
        let found = match self.rate {
            Some(r) if answered > 0.0 => r.min(answered),
            Some(r) => r,
            None if answered > 0.0 => answered,
            // Refused before any answer: a request a second to start from.
            None => 1.0,
        };
        self.found = Some(found);
        self.set(found * CUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers at `per_second` over the second before `at`.
    fn answers(a: &mut Adaptive, at: Instant, per_second: u32) {
        for i in 0..per_second {
            a.answers
                .push_back(at - Duration::from_millis(u64::from(i) * 1000 / u64::from(per_second)));
        }
        a.answers.make_contiguous().sort();
    }

    #[test]
    fn it_grows_back_to_near_what_was_found_holds_there_then_tries_higher() {
        let mut a = Adaptive::new();
        let t0 = Instant::now();
        a.answered_at(t0, t0);
        // Slow start: 2, then doubling each round trip while the answers keep up.
        let t1 = t0 + Duration::from_millis(100);
        a.answered_at(t1, t0 + Duration::from_millis(50));
        assert_eq!(a.rate, Some(4.0));
        let t2 = t1 + Duration::from_millis(100);
        a.answered_at(t2, t1 + Duration::from_millis(50));
        assert_eq!(a.rate, Some(8.0));
        // The server answered 5 a second over the last three: found 5, cut to 4.
        let now = Instant::now();
        a.answers.clear();
        // A run that has gone on for a while.
        a.first = now.checked_sub(Duration::from_secs(10));
        for back in 0..3 {
            answers(&mut a, now - Duration::from_secs(back), 5);
        }
        a.refused(now);
        assert_eq!(a.found, Some(5.0));
        assert!((a.rate.unwrap() - 4.0).abs() < 1e-9);
        // Back to 90% of 5 within a few seconds, and no further for the hold.
        let mut at = now;
        for s in 1..=5 {
            at = now + Duration::from_secs(s);
            answers(&mut a, at, 5);
            a.current_at(at);
        }
        assert!((a.rate.unwrap() - 4.5).abs() < 1e-9, "{:?}", a.rate);
        let held = a.rate;
        at += Duration::from_secs(20);
        answers(&mut a, at, 5);
        a.current_at(at);
        assert_eq!(a.rate, held, "holds near what was found");
        // After the hold it tries higher, slowly.
        at += Duration::from_secs(11);
        answers(&mut a, at, 5);
        a.current_at(at);
        let r = a.rate.unwrap();
        assert!(r > 4.5 && r < 4.5 * 1.2, "{r}");
    }

    #[test]
    fn slow_start_doubles_only_for_a_round_trip_at_the_current_rate_that_the_answers_keep_up_with()
    {
        let mut a = Adaptive::new();
        let t0 = Instant::now();
        a.answered_at(t0, t0);
        assert_eq!(a.rate, Some(START));
        // An answer to a request sent before the rate was set: no round trip at it yet.
        a.answered_at(
            t0 + Duration::from_millis(10),
            t0 - Duration::from_millis(1),
        );
        assert_eq!(a.rate, Some(START));
        // A round trip at 2 a second: 4.
        let t1 = t0 + Duration::from_millis(60);
        a.answered_at(t1, t0 + Duration::from_millis(5));
        assert_eq!(a.rate, Some(4.0));
        // Time alone, with no answers to show for it, grows nothing.
        a.current_at(t1 + Duration::from_secs(5));
        assert_eq!(a.rate, Some(4.0));
        // Answers 300 ms apart (one task with seconds of tool work between its turns):
        // each is a round trip at the current rate, but the last four answers came at
        // 4.4 a second, and the rate goes no further than four times the answers' rate.
        let mut at = t1 + Duration::from_secs(5);
        a.answers.clear();
        for _ in 0..6 {
            at += Duration::from_millis(300);
            a.answered_at(at, at - Duration::from_millis(1));
        }
        assert_eq!(a.rate, Some(20.0), "the answers came at 5 a second");
        for _ in 0..10 {
            at += Duration::from_millis(300);
            a.answered_at(at, at - Duration::from_millis(1));
        }
        assert_eq!(a.rate, Some(20.0), "four answers in 0.9 s are 4.4 a second");
        // Answers that keep up (each request sent as the last answer came): it doubles.
        for _ in 0..12 {
            let sent = at;
            at += Duration::from_millis(10);
            a.answered_at(at, sent);
        }
        assert!(a.rate.unwrap() >= 80.0, "{:?}", a.rate);
    }

    #[test]
    fn a_cut_early_in_the_run_measures_the_server_since_its_first_answer() {
        let mut a = Adaptive::new();
        let t0 = Instant::now();
        a.answered_at(t0, t0);
        // Slow start leaves it; the server answered 6 a second over the run's first 1.5 s.
        a.slow_start = false;
        for i in 1..=9 {
            a.answered_at(t0 + Duration::from_millis(i * 1500 / 9), t0);
        }
        a.rate = Some(8.0);
        a.refused_at(
            t0 + Duration::from_millis(1500),
            t0 + Duration::from_millis(1400),
        );
        // Over the 3 s a cut measures, that is 3.3 a second; over the 1.5 s there was, 6.7.
        let found = a.found.unwrap();
        assert!((found - 10.0 / 1.5).abs() < 1e-9, "{found}");
    }

    #[test]
    fn a_429_in_slow_start_finds_the_server_at_the_rate_before_the_refused_one() {
        // A 50 ms server refusing past 400 a second: slow start doubled to 800 within
        // half a second, so its last second of answers averages far less than 400.
        let mut a = Adaptive::new();
        let t0 = Instant::now();
        a.answered_at(t0, t0);
        let mut at = t0;
        let mut sent_at_800 = t0;
        while a.rate.unwrap() < 800.0 {
            let sent = at;
            at += Duration::from_millis(50);
            let n = (a.rate.unwrap() * 0.05).ceil() as usize;
            for _ in 0..n {
                a.answered_at(at, sent);
            }
            sent_at_800 = at + Duration::from_millis(1);
        }
        assert!(a.rate.unwrap() >= 800.0);
        a.refused_at(sent_at_800 + Duration::from_millis(50), sent_at_800);
        let found = a.found.unwrap();
        assert!(
            found >= 400.0,
            "found {found} a second, not the 400 it took"
        );
    }

    #[test]
    fn an_idle_spell_neither_lowers_the_rate_nor_builds_a_burst() {
        let t0 = Instant::now();
        let mut a = Adaptive::new();
        a.answered(t0);
        a.refused(t0 + Duration::from_millis(1));
        let r = a.rate.unwrap();
        // Ten idle seconds: no answers, so no growth past twice the answers, and no
        // fall either.
        a.answers.clear();
        a.current_at(t0 + Duration::from_secs(10));
        assert_eq!(a.rate, Some(r));
    }
}
