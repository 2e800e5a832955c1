//! A task's budgets: before each request, work out the largest request the remaining
//! token and dollar budgets can pay for at worst case (reserve), or decide to stop;
//! after it, record what it really used (settle). Because the reservation is an upper
//! bound and max_tokens is shrunk to fit, no budget is overshot even by one request.

use rust_decimal::Decimal;
use serde::Serialize;

use crate::model::Usage;
use crate::vocab::limits::Limits;
use crate::vocab::price::Price;
use crate::vocab::stop::{Stop, StopReason};

/// What a task has used so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meter {
    pub turns: u32,
    /// Usage the provider reported.
    pub usage: Usage,
    /// Worst-case usage of requests that may have been billed without a usable answer
    /// (a cut-off body, a timeout): counted against the token budgets, not reported as
    /// usage.
    pub unsettled: Usage,
    /// Dollars spent: settled costs plus the reservations of possibly billed failures.
    pub cost: Decimal,
    /// What caching saved on the settled requests (uncached cost minus cost).
    pub saved: Decimal,
}

/// The request the budgets allow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestPlan {
    pub max_tokens: u32,
    /// Upper bound on the prompt tokens the request will use.
    pub prompt_tokens: u64,
    /// Worst-case cost, held until the response settles it (None without a price).
    pub reserved_usd: Option<Decimal>,
}

/// The smallest max_tokens worth sending: `min_max_tokens` (at most the configured
/// max_tokens), and above an enabled thinking budget, which the API requires.
pub fn floor(limits: &Limits, max_tokens: u32, thinking_budget: Option<u32>) -> u32 {
    limits
        .min_max_tokens
        .min(max_tokens)
        .max(thinking_budget.map_or(1, |b| b.saturating_add(1)))
        .max(1)
}

/// Decides the next request's max_tokens from the budgets, or why no request may go.
/// `thinking_budget` raises the floor: the API refuses max_tokens <= budget_tokens.
pub fn plan_request(
    limits: &Limits,
    meter: &Meter,
    price: Option<&Price>,
    max_tokens: u32,
    prompt_tokens: u64,
    thinking_budget: Option<u32>,
) -> Result<RequestPlan, Stop> {
    let used_in = meter
        .usage
        .prompt_tokens()
        .saturating_add(meter.unsettled.prompt_tokens());
    let used_out = meter
        .usage
        .output_tokens
        .saturating_add(meter.unsettled.output_tokens);
    if let Some(cap) = limits.max_input_tokens {
        if used_in.saturating_add(prompt_tokens) > cap {
            return Err(Stop::new(
                StopReason::TokenLimit,
                format!(
                    "next request may use up to {prompt_tokens} input tokens; {used_in} of max_input_tokens {cap} used"
                ),
            ));
        }
    }
    let floor = floor(limits, max_tokens, thinking_budget);
    let mut allowed = u64::from(max_tokens);
    let mut limited_by: Option<Stop> = None;
    if let Some(cap) = limits.max_output_tokens {
        let left = cap.saturating_sub(used_out);
        if left < allowed {
            allowed = left;
            limited_by = Some(Stop::new(
                StopReason::TokenLimit,
                format!(
                    "{left} output tokens left of max_output_tokens {cap}, below the {floor}-token minimum request"
                ),
            ));
        }
    }
    let mut reserved = None;
    if let Some(price) = price {
        if let Some(cap) = limits.max_cost_usd {
            if meter.cost > cap {
                return Err(Stop::new(
                    StopReason::CostLimit,
                    format!(
                        "spent ${}, over max_cost_usd ${cap}: a response cost more than its reservation (see reservation_exceeded in the transcript)",
                        meter.cost.normalize()
                    ),
                ));
            }
            let left = cap.saturating_sub(meter.cost);
            let affordable = price.affordable_output(left, prompt_tokens);
            if affordable < allowed {
                allowed = affordable;
                limited_by = Some(Stop::new(
                    StopReason::CostLimit,
                    format!(
                        "${} left of max_cost_usd ${cap} pays for {affordable} output tokens after a {prompt_tokens}-token prompt, below the {floor}-token minimum request",
                        left.normalize()
                    ),
                ));
            }
        }
    }
    if allowed < u64::from(floor) {
        return Err(limited_by.unwrap_or_else(|| {
            Stop::new(
                StopReason::TokenLimit,
                "max_tokens below the minimum request",
            )
        }));
    }
    let max_tokens = u32::try_from(allowed).unwrap_or(max_tokens);
    if let Some(price) = price {
        reserved = Some(price.worst_case(prompt_tokens, u64::from(max_tokens)));
    }
    Ok(RequestPlan {
        max_tokens,
        prompt_tokens,
        reserved_usd: reserved,
    })
}

impl Meter {
    /// Records a response's real usage and cost.
    pub fn settle(&mut self, usage: &Usage, price: Option<&Price>) -> Option<Decimal> {
        self.usage.add(usage);
        let cost = price.map(|p| p.cost(usage));
        if let (Some(c), Some(p)) = (cost, price) {
            self.cost = self.cost.saturating_add(c);
            self.saved = self
                .saved
                .saturating_add(p.uncached_cost(usage).saturating_sub(c));
        }
        cost
    }

    /// Counts a request that may have been billed without a usable answer at its worst
    /// case: its whole reservation is spent and its token bounds are used. Returns the
    /// dollars charged.
    pub fn charge_unsettled(&mut self, plan: &RequestPlan) -> Option<Decimal> {
        self.unsettled.input_tokens = self
            .unsettled
            .input_tokens
            .saturating_add(plan.prompt_tokens);
        self.unsettled.output_tokens = self
            .unsettled
            .output_tokens
            .saturating_add(u64::from(plan.max_tokens));
        if let Some(r) = plan.reserved_usd {
            self.cost = self.cost.saturating_add(r);
        }
        plan.reserved_usd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::str::FromStr;

    fn limits() -> Limits {
        Limits {
            max_turns: 10,
            time_limit: std::time::Duration::from_secs(60),
            max_input_tokens: None,
            max_output_tokens: None,
            max_cost_usd: None,
            min_max_tokens: 256,
            wrap_up: false,
            show_budget: false,
            max_repeats: Some(3),
        }
    }

    fn sonnet() -> Price {
        crate::vocab::price::lookup(&BTreeMap::new(), "claude-sonnet-4-5").unwrap()
    }

    #[test]
    fn unlimited_keeps_max_tokens() {
        let p = plan_request(&limits(), &Meter::default(), None, 4096, 1000, None).unwrap();
        assert_eq!(p.max_tokens, 4096);
        assert_eq!(p.reserved_usd, None);
    }

    #[test]
    fn output_budget_shrinks_then_stops() {
        let l = Limits {
            max_output_tokens: Some(5000),
            ..limits()
        };
        let mut m = Meter::default();
        m.usage.output_tokens = 3000;
        assert_eq!(
            plan_request(&l, &m, None, 4096, 10, None)
                .unwrap()
                .max_tokens,
            2000
        );
        m.usage.output_tokens = 4800;
        let e = plan_request(&l, &m, None, 4096, 10, None).unwrap_err();
        assert_eq!(e.reason, StopReason::TokenLimit);
    }

    #[test]
    fn input_budget_counts_the_upcoming_prompt() {
        let l = Limits {
            max_input_tokens: Some(10_000),
            ..limits()
        };
        let mut m = Meter::default();
        m.usage.input_tokens = 6000;
        assert!(plan_request(&l, &m, None, 4096, 4000, None).is_ok());
        assert_eq!(
            plan_request(&l, &m, None, 4096, 4001, None)
                .unwrap_err()
                .reason,
            StopReason::TokenLimit
        );
    }

    #[test]
    fn cost_budget_reserves_worst_case_within_cap() {
        let cap = Decimal::from_str("0.05").unwrap();
        let l = Limits {
            max_cost_usd: Some(cap),
            ..limits()
        };
        let mut m = Meter {
            cost: Decimal::from_str("0.02").unwrap(),
            ..Default::default()
        };
        let price = sonnet();
        let plan = plan_request(&l, &m, Some(&price), 4096, 2000, None).unwrap();
        // $0.03 left: 2000 prompt tokens at $3.75/M = $0.0075, leaves 0.0225 / $15/M = 1500 tokens
        assert_eq!(plan.max_tokens, 1500);
        assert!(m.cost + plan.reserved_usd.unwrap() <= cap);
        m.cost = Decimal::from_str("0.0475").unwrap();
        assert_eq!(
            plan_request(&l, &m, Some(&price), 4096, 2000, None)
                .unwrap_err()
                .reason,
            StopReason::CostLimit
        );
    }

    #[test]
    fn thinking_budget_raises_the_floor() {
        let l = Limits {
            max_output_tokens: Some(2000),
            min_max_tokens: 1,
            ..limits()
        };
        let e = plan_request(&l, &Meter::default(), None, 4096, 10, Some(2000)).unwrap_err();
        assert_eq!(e.reason, StopReason::TokenLimit);
        assert_eq!(
            plan_request(&l, &Meter::default(), None, 4096, 10, Some(1024))
                .unwrap()
                .max_tokens,
            2000
        );
    }

    #[test]
    fn possibly_billed_failures_use_up_their_worst_case() {
        let l = Limits {
            max_output_tokens: Some(1500),
            max_cost_usd: Some(Decimal::ONE),
            ..limits()
        };
        let price = sonnet();
        let mut m = Meter::default();
        let plan = plan_request(&l, &m, Some(&price), 1000, 100, None).unwrap();
        assert_eq!(plan.max_tokens, 1000);
        let charged = m.charge_unsettled(&plan).unwrap();
        assert_eq!(m.cost, charged);
        assert_eq!(m.usage, Usage::default());
        // the retry may only use what the lost attempt could not have
        assert_eq!(
            plan_request(&l, &m, Some(&price), 1000, 100, None)
                .unwrap()
                .max_tokens,
            500
        );
    }

    #[test]
    fn a_blown_cap_stops_with_an_explanation() {
        let l = Limits {
            max_cost_usd: Some(Decimal::ONE),
            ..limits()
        };
        let m = Meter {
            cost: Decimal::TWO,
            ..Default::default()
        };
        let e = plan_request(&l, &m, Some(&sonnet()), 1000, 100, None).unwrap_err();
        assert_eq!(e.reason, StopReason::CostLimit);
        assert!(
            e.detail.contains("more than its reservation"),
            "{}",
            e.detail
        );
    }

    #[test]
    fn settle_adds_exact_cost() {
        let mut m = Meter::default();
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 100,
            ..Default::default()
        };
        let c = m.settle(&u, Some(&sonnet())).unwrap();
        assert_eq!(c, Decimal::from_str("0.0045").unwrap());
        assert_eq!(m.usage.output_tokens, 100);
    }
}
