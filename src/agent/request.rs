//! One model request, attempt by attempt: the task's own budgets, then the shared pools
//! (ledger), then the rate gates, then the send; the answer settles the reservation,
//! a failure releases it or (if it may have been billed) keeps it whole. 429s pause the
//! whole provider and retry on their own budget; other retryable errors back off.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::{guarded, hint, interrupted, Interrupt, Loop};
use crate::govern::budget::{floor, plan_request, RequestPlan};
use crate::govern::ledger::{Need, Reservation};
use crate::model::backoff::{jitter, retry_delay};
use crate::model::Conversation;
use crate::model::{RateHeaders, SendError, Turn, Usage};
use crate::vocab::limits::TokenCount;
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::{TranscriptEvent, Usd};
use rust_decimal::Decimal;

/// How long past a task's deadline its reservation may still count as in flight.
const IN_FLIGHT_MARGIN: Duration = Duration::from_secs(60);

/// The attempts of one turn so far, by kind: each kind counts against its own retry
/// budget, and each attempt of a turn gets its own number.
#[derive(Default)]
struct Attempts {
    /// Failed with an error other than the rate limit.
    errors: u32,
    /// Rate limited.
    limited: u32,
    /// Refused as too long, then compacted.
    refits: u32,
}

impl Attempts {
    /// The number of the next attempt.
    fn next(&self) -> u32 {
        self.errors + self.limited + self.refits + 1
    }
}

/// What an attempt holds before it is sent: its plan against the task's budgets, its
/// reservation in the shared pools, and the tokens the rate gates took for it.
struct Reserved {
    plan: RequestPlan,
    held: Option<Reservation>,
    paced: TokenCount,
}

/// A failed attempt, its money accounted for: what it was, and what its stop detail
/// says was spent.
struct Failed {
    turn: u32,
    attempt: u32,
    /// A worst case counted as spent.
    charged: Option<Decimal>,
    spent_note: String,
}

impl Loop<'_> {
    /// Sends one model request, retrying retryable failures. Every attempt is planned
    /// and reserved against the budgets first, and charged in full when it may have
    /// been billed without an answer. `max_tokens`: the task's, or a summary's (which
    /// may have to be smaller to fit the window).
    pub(super) async fn request(
        &mut self,
        conv: &mut Conversation,
        max_tokens: u32,
    ) -> Result<Turn, Stop> {
        let turn_no = self.meter.turns + 1;
        let mut tries = Attempts::default();
        loop {
            let attempt = tries.next();
            let Reserved { plan, held, paced } =
                self.reserve(conv, max_tokens, turn_no, attempt).await?;
            let sent_at = Instant::now();
            let sent = guarded(
                conv.send(plan.max_tokens, self.log, turn_no, attempt),
                self.deadline,
                &self.env.cancel,
            )
            .await;
            let took = sent_at.elapsed();
            self.tally.model += took;
            self.tally.longest_request = self.tally.longest_request.max(took);
            let failure = match sent {
                Err(interrupt) => return Err(self.aborted(interrupt, &plan, held, turn_no).await),
                Ok(Ok(turn)) => {
                    return Ok(self.answered(conv, turn, paced, &plan, held, turn_no).await)
                }
                Ok(Err(f)) => f,
            };
            let (charged, spent_note) = self
                .account_failure(conv, &failure, paced, &plan, held, turn_no)
                .await;
            self.note_rate_headers(&failure.rate, None);
            if failure.error.is_context_overflow() {
                // Not billed; compact and send again, or stop if nothing is left to
                // compact.
                self.refit_after(conv, &failure, turn_no)?;
                tries.refits += 1;
                continue;
            }
            let failed = Failed {
                turn: turn_no,
                attempt,
                charged,
                spent_note,
            };
            if failure.rate_limited {
                self.after_rate_limit(&failure, &failed, &mut tries).await?;
            } else {
                self.after_error(&failure, &failed, &mut tries).await?;
            }
        }
    }

    /// Plans attempt `attempt` of turn `turn_no` against the task's budgets and the
    /// window, holds it in the shared pools, writes the reservation to the transcript
    /// and passes the rate gates.
    async fn reserve(
        &mut self,
        conv: &Conversation,
        max_tokens: u32,
        turn_no: u32,
        attempt: u32,
    ) -> Result<Reserved, Stop> {
        let bound = conv.estimate_prompt_tokens();
        let mut plan = plan_request(
            &self.spec.limits,
            &self.meter,
            self.spec.price.as_ref(),
            max_tokens,
            bound,
            self.spec.thinking_budget,
        )?;
        // No request leaves that cannot fit the window (nothing is reserved yet).
        if let Err(o) = self.check_fits(conv, plan.max_tokens) {
            return Err(self.no_room(&o));
        }
        let held = self.hold_shared(&mut plan).await?;
        // What the rate gates take: the tokens the provider's limits will count.
        let paced = TokenCount {
            input: conv.estimate_rate_tokens(bound),
            output: u64::from(plan.max_tokens),
        };
        if attempt == 1 {
            self.meter.turns = turn_no;
        }
        // Written out before the send: a resume after kill -9 counts this
        // reservation from the transcript.
        self.log
            .emit_written(TranscriptEvent::Reserve {
                turn: turn_no,
                attempt,
                max_tokens: plan.max_tokens,
                prompt_tokens_upper_bound: plan.prompt_tokens,
                paced_input_tokens: Some(paced.input),
                reserved_usd: plan.reserved_usd.map(Usd),
                spent_usd: Usd(self.meter.cost),
            })
            .await;
        if let Err(stop) = self.admit(paced).await {
            self.give_back(held, false).await;
            return Err(stop);
        }
        Ok(Reserved { plan, held, paced })
    }

    /// A request cut off in flight by the deadline or the run's cancel: it may still be
    /// billed, so it counts whole. The stop.
    async fn aborted(
        &mut self,
        interrupt: Interrupt,
        plan: &RequestPlan,
        held: Option<Reservation>,
        turn_no: u32,
    ) -> Stop {
        let charged = self.meter.charge_unsettled(plan);
        self.give_back(held, true).await;
        self.log.emit(TranscriptEvent::RequestAborted {
            turn: turn_no,
            charged_usd: charged.map(Usd),
        });
        let mut stop = interrupted(interrupt, "during a model request", &self.spec.limits);
        if let Some(c) = charged {
            stop.detail.push_str(&format!(
                "; its reservation of ${} is counted as spent",
                c.normalize()
            ));
        }
        stop
    }

    /// An answer: the gates corrected to what the provider counted, the reservation
    /// settled at what it used (at $0 for an answer replayed from a killed attempt,
    /// which paid for it and counted it).
    async fn answered(
        &mut self,
        conv: &Conversation,
        turn: Turn,
        paced: TokenCount,
        plan: &RequestPlan,
        held: Option<Reservation>,
        turn_no: u32,
    ) -> Turn {
        self.tally.ttfts.extend(turn.ttft_ms);
        if turn.replayed {
            // Paid for by the killed attempt, and counted there.
            self.correct_gates(paced, None);
            self.settle(&Usage::default(), false, plan, held, turn_no)
                .await;
            self.tally.replayed_turns += 1;
            return turn;
        }
        let counted = conv.rate_counted(&turn.usage);
        self.correct_gates(paced, Some(counted));
        let cost = self
            .settle(&turn.usage, turn.usage_estimated, plan, held, turn_no)
            .await;
        if self.spec.batch.is_some() {
            self.tally.batched_turns += 1;
            if let (Some(c), Some(p)) = (cost, &self.spec.price) {
                self.tally.batch_saved += p.standard_cost_of(c) - c;
            }
        }
        self.note_rate_headers(&turn.rate, Some(counted));
        turn
    }

    /// The money and the gates of a failed attempt: what it is charged or billed, and the
    /// note a stop's detail says it with.
    async fn account_failure(
        &mut self,
        conv: &Conversation,
        failure: &SendError,
        paced: TokenCount,
        plan: &RequestPlan,
        held: Option<Reservation>,
        turn_no: u32,
    ) -> (Option<Decimal>, String) {
        // A request refused for the rate limit or as too long counted nothing; one
        // that failed after saying what it used counted that; any other failure
        // keeps its whole charge.
        match &failure.usage {
            Some(u) => self.correct_gates(paced, Some(conv.rate_counted(u))),
            None if failure.rate_limited || failure.error.is_context_overflow() => {
                self.correct_gates(paced, None)
            }
            None => {}
        }
        // `charged`: a worst case counted as spent (logged by the caller); `billed`: the
        // cost of a failed answer that said what it used (logged by its settle event).
        let (charged, billed) = match (&failure.usage, failure.maybe_billed) {
            // A failed answer that says what it used is billed that, not the
            // worst case.
            (Some(usage), _) => (None, self.settle(usage, false, plan, held, turn_no).await),
            (None, true) => {
                let charged = self.meter.charge_unsettled(plan);
                self.give_back(held, true).await;
                (charged, None)
            }
            (None, false) => {
                self.give_back(held, false).await;
                (None, None)
            }
        };
        let spent_note = match (charged, billed) {
            (Some(c), _) => format!("; ${} reserved for it is counted as spent", c.normalize()),
            (None, Some(b)) => format!("; billed ${} at the usage it reported", b.normalize()),
            (None, None) => String::new(),
        };
        (charged, spent_note)
    }

    /// After a refusal as too long: Ok when compaction made room to send again, else
    /// the stop.
    fn refit_after(
        &mut self,
        conv: &mut Conversation,
        failure: &SendError,
        turn_no: u32,
    ) -> Result<(), Stop> {
        match self.refit(conv, turn_no) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Stop::new(
                StopReason::ContextWindow,
                match self.refused_too_long {
                    // The loop asks for a summary next.
                    true => failure.error.to_string(),
                    false => format!("{}; nothing was left to clear", failure.error),
                },
            )),
            Err(mut stop) => {
                stop.detail = format!("{} ({})", failure.error, stop.detail);
                Err(stop)
            }
        }
    }

    /// After a 429: Ok when the next attempt may go (the provider paused, or this task
    /// waited), else the stop.
    async fn after_rate_limit(
        &mut self,
        failure: &SendError,
        failed: &Failed,
        tries: &mut Attempts,
    ) -> Result<(), Stop> {
        // A 429 that says when to come back is the rate limit: it pauses the
        // whole provider and retries on its own budget. One without any wait (a
        // spend cap, a quota) rarely recovers: it counts against max_retries.
        self.learn_limits(&failure.rate, None);
        if let Some(g) = self.provider_gate() {
            g.refused(self.admitted_at.unwrap_or_else(Instant::now));
        }
        let signalled = failure.server_wait.is_some() || failure.rate.pause(Utc::now()).is_some();
        let (used, budget) = if signalled {
            (tries.limited, self.spec.provider.max_rate_limit_retries)
        } else {
            (tries.errors + tries.limited, self.spec.provider.max_retries)
        };
        let give_up = !failure.retryable || used >= budget;
        let wait = match failure.server_wait {
            // the SDKs' rule: honour 0-60 s, else back off
            Some(_) => retry_delay(tries.limited, failure.server_wait, jitter()),
            None => failure
                .rate
                .pause(Utc::now())
                .unwrap_or_else(|| retry_delay(used, None, jitter())),
        };
        // A batch item's 429 is the batch API's own limit: the synchronous
        // gate, which batched requests skip, is left alone, and this task alone
        // waits before its next batch.
        let batched = self.spec.batch.is_some();
        let waits = (!give_up).then_some(wait.as_millis() as u64);
        self.log.emit(TranscriptEvent::AttemptFailed {
            turn: failed.turn,
            attempt: failed.attempt,
            error: failure.error.to_string(),
            retryable: !give_up,
            rate_limited: Some(true),
            charged_usd: failed.charged.map(Usd),
            provider_paused_ms: (!batched).then_some(waits),
            retry_in_ms: batched.then_some(waits),
        });
        if give_up {
            let why = if !failure.retryable {
                "the provider says not to retry (x-should-retry: false, or OpenAI's insufficient_quota): a spend limit or an exhausted quota, most likely; waiting will not help: add credit or raise the account's spend limit".to_string()
            } else {
                format!(
                    "still rate limited after {used} retries; raise providers.{}.max_rate_limit_retries or lower the rate",
                    self.spec.provider.name
                )
            };
            return Err(Stop::new(
                StopReason::RateLimited,
                format!("{} ({why}){}", failure.error, failed.spent_note),
            ));
        }
        if batched {
            self.wait_to_retry(wait).await?;
        } else if let (Some(g), Some(until)) = (
            // Everyone on this provider waits, not just this task; the next
            // admit waits out the pause.
            self.env.gates.provider(&self.spec.provider.name),
            Instant::now().checked_add(wait),
        ) {
            g.pause_until(until);
        }
        if signalled {
            tries.limited += 1;
        } else {
            tries.errors += 1;
        }
        self.tally.retries += 1;
        Ok(())
    }

    /// After any other failure: Ok once the backoff is waited out and another attempt
    /// may go, else the stop.
    async fn after_error(
        &mut self,
        failure: &SendError,
        failed: &Failed,
        tries: &mut Attempts,
    ) -> Result<(), Stop> {
        let errors = tries.errors;
        let give_up = !failure.retryable || errors >= self.spec.provider.max_retries;
        let wait = retry_delay(errors, failure.server_wait, jitter());
        self.log.emit(TranscriptEvent::AttemptFailed {
            turn: failed.turn,
            attempt: failed.attempt,
            error: failure.error.to_string(),
            retryable: failure.retryable,
            rate_limited: None,
            charged_usd: failed.charged.map(Usd),
            provider_paused_ms: None,
            retry_in_ms: Some((!give_up).then_some(wait.as_millis() as u64)),
        });
        if give_up {
            let mut detail = failure.error.to_string();
            if let Some(h) = hint(&failure.error, self.spec) {
                detail.push_str(&format!(" ({h})"));
            }
            let retries = errors + tries.limited;
            if retries > 0 {
                detail.push_str(&format!(" (after {retries} retries)"));
            }
            detail.push_str(&failed.spent_note);
            return Err(Stop::new(StopReason::ProviderError, detail));
        }
        self.wait_to_retry(wait).await?;
        tries.errors += 1;
        self.tally.retries += 1;
        Ok(())
    }

    /// Waits before the next attempt; the task's deadline or the run's cancel ends the
    /// wait, and the task.
    async fn wait_to_retry(&self, wait: Duration) -> Result<(), Stop> {
        guarded(tokio::time::sleep(wait), self.deadline, &self.env.cancel)
            .await
            .map_err(|interrupt| {
                interrupted(
                    interrupt,
                    "while waiting to retry a model request",
                    &self.spec.limits,
                )
            })
    }

    /// Reserves the request in the run's and the team's pools (if any apply), which may
    /// shrink it further; waiting for money held by requests in flight counts against
    /// the task's clock.
    async fn hold_shared(&mut self, plan: &mut RequestPlan) -> Result<Option<Reservation>, Stop> {
        let team = self.spec.team.as_deref();
        let Some(price) = self
            .spec
            .price
            .as_ref()
            .filter(|_| self.env.ledger.governs(team))
        else {
            return Ok(None);
        };
        let floor = floor(
            &self.spec.limits,
            self.spec.max_tokens,
            self.spec.thinking_budget,
        );
        let need = Need {
            task_id: &self.spec.id,
            variant: &self.spec.variant,
            team,
            price,
            prompt_tokens: plan.prompt_tokens,
            max_tokens: plan.max_tokens,
            floor: floor.min(plan.max_tokens),
            in_flight_for: self.deadline.saturating_duration_since(Instant::now())
                + IN_FLIGHT_MARGIN,
            cap_wait_since: std::sync::Mutex::new(None),
        };
        let waited = Instant::now();
        let got = guarded(
            self.env.ledger.reserve(&need, self.log),
            self.deadline,
            &self.env.cancel,
        )
        .await;
        self.tally.budget_wait += waited.elapsed();
        let cap_wait = *need
            .cap_wait_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(since) = cap_wait {
            self.tally.cap_wait += since.elapsed();
        }
        let (res, max_tokens) = match got {
            Err(interrupt) => {
                return Err(interrupted(
                    interrupt,
                    "while waiting for the team or run budget",
                    &self.spec.limits,
                ))
            }
            Ok(r) => r?,
        };
        plan.max_tokens = max_tokens;
        plan.reserved_usd = Some(res.usd());
        Ok(Some(res))
    }

    /// The team's and the provider's rate gates.
    /// The team's gate and the provider's; a batched request passes the team's only:
    /// the batch APIs have their own limits, apart from the per-minute ones.
    fn gates(&self) -> [Option<std::sync::Arc<crate::govern::rate::Gate>>; 2] {
        [
            self.env.gates.team(self.spec.team_name()),
            self.provider_gate(),
        ]
    }

    /// Corrects the gates' pre-charge to what the provider counted (None: nothing).
    fn correct_gates(&self, charged: TokenCount, counted: Option<TokenCount>) {
        for g in self.gates().iter().flatten() {
            g.correct(charged, counted.unwrap_or_default());
        }
    }

    /// Waits for the team's and the provider's rate gates (counted as rate_wait_ms).
    /// Cut off, it gives back what the gates that had admitted it took (the one it was
    /// waiting at gives back its own).
    async fn admit(&mut self, paced: TokenCount) -> Result<(), Stop> {
        let gates: Vec<_> = self.gates().into_iter().flatten().collect();
        let started = Instant::now();
        let passed = std::sync::atomic::AtomicUsize::new(0);
        let admitted = guarded(
            async {
                for g in &gates {
                    g.admit(paced.input, paced.output).await;
                    passed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            },
            self.deadline,
            &self.env.cancel,
        )
        .await;
        self.tally.rate_wait += started.elapsed();
        self.admitted_at = Some(Instant::now());
        if admitted.is_err() {
            let n = passed.load(std::sync::atomic::Ordering::SeqCst);
            for g in gates.iter().take(n) {
                g.correct(paced, TokenCount::default());
            }
        }
        admitted.map_err(|i| interrupted(i, "while waiting for a rate limit", &self.spec.limits))
    }

    /// Records a response's real cost in the task's meter and the shared pools.
    /// Returns the cost (None without a price).
    async fn settle(
        &mut self,
        usage: &Usage,
        estimated: bool,
        plan: &RequestPlan,
        held: Option<Reservation>,
        turn_no: u32,
    ) -> Option<Decimal> {
        let cost = self.meter.settle(usage, self.spec.price.as_ref());
        if estimated {
            self.tally.usage_estimated_turns += 1;
        }
        let over_cost = matches!((cost, plan.reserved_usd), (Some(c), Some(r)) if c > r);
        if over_cost || usage.prompt_tokens() > plan.prompt_tokens {
            // The provider billed more than the upper bound the budgets relied on; the
            // next plan sees the real figures.
            self.log.emit(TranscriptEvent::ReservationExceeded {
                turn: turn_no,
                prompt_tokens: usage.prompt_tokens(),
                prompt_tokens_upper_bound: plan.prompt_tokens,
                cost_usd: cost.map(Usd),
                reserved_usd: plan.reserved_usd.map(Usd),
            });
        }
        if let Some(res) = held {
            if let Err(e) = self.env.ledger.settle(res, cost.unwrap_or_default()).await {
                self.log.emit(TranscriptEvent::LedgerError {
                    error: e.to_string(),
                });
            }
        }
        self.log.emit(TranscriptEvent::Settle {
            turn: turn_no,
            usage: *usage,
            usage_estimated: estimated,
            cost_usd: cost.map(Usd),
            released_usd: match (plan.reserved_usd, cost) {
                (Some(r), Some(c)) => Some(Usd(r - c)),
                _ => None,
            },
            spent_usd: Usd(self.meter.cost),
        });
        cost
    }

    /// Ends a reservation without an answer: kept whole if the request may have been
    /// billed, else given back.
    async fn give_back(&mut self, held: Option<Reservation>, maybe_billed: bool) {
        let Some(res) = held else { return };
        let r = if maybe_billed {
            let all = res.usd();
            self.env.ledger.settle(res, all).await
        } else {
            self.env.ledger.release(res).await
        };
        if let Err(e) = r {
            self.log.emit(TranscriptEvent::LedgerError {
                error: e.to_string(),
            });
        }
    }

    /// The provider's gate, unless the request is batched (the batch APIs have limits
    /// of their own, apart from the per-minute ones).
    fn provider_gate(&self) -> Option<std::sync::Arc<crate::govern::rate::Gate>> {
        match self.spec.batch {
            Some(_) => None,
            None => self.env.gates.provider(&self.spec.provider.name),
        }
    }

    /// The limits a provider's answer states pace its gate where the job configures
    /// none; a change goes in the transcript.
    fn learn_limits(&self, rate: &RateHeaders, accepted: Option<TokenCount>) {
        if rate.limits.is_empty() {
            return;
        }
        let Some(g) = self.provider_gate() else {
            return;
        };
        let stated = match accepted {
            Some(a) => rate.limits.consistent_with(a),
            None => rate.limits,
        };
        if let Some(change) = g.learn(&stated) {
            self.log.emit(TranscriptEvent::RateLearned {
                provider: self.spec.provider.name.clone(),
                before: change.before,
                now: change.now,
            });
        }
    }

    /// A provider that reports a used-up window is paused (until its reset, see
    /// `RateHeaders::pause`), before its limit is hit.
    fn note_rate_headers(&self, rate: &RateHeaders, accepted: Option<TokenCount>) {
        self.learn_limits(rate, accepted);
        // An answer, not a refusal: what the adaptive rate measures the server by.
        if accepted.is_some() {
            if let Some(g) = self.provider_gate() {
                g.answered(self.admitted_at.unwrap_or_else(Instant::now));
            }
        }
        let Some(wait) = rate.pause(Utc::now()) else {
            return;
        };
        if let (Some(g), Some(until)) = (
            self.env.gates.provider(&self.spec.provider.name),
            Instant::now().checked_add(wait),
        ) {
            g.pause_until(until);
            self.log.emit(TranscriptEvent::RatePause {
                ms: wait.as_millis() as u64,
                reason: "rate-limit headers: a window is used up".to_string(),
            });
        }
    }
}
