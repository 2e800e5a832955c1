//! Prices and the cost of a request, in exact decimal dollars. The built-in table is a
//! data file (prices.yaml) with an as-of date; a job's `pricing:` overrides it per model.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::vocab::bounds;
use crate::vocab::protocol::Protocol;
use crate::vocab::usage::Usage;
use crate::vocab::values::Money;

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Prices of one model")]
pub struct PriceFields {
    /// Prompt tokens, USD per million.
    pub input: Money,
    /// Output tokens (reasoning included), USD per million.
    pub output: Money,
    /// 5-minute cache writes, USD per million; defaults to 1.25 x input (Anthropic)
    /// or the input rate (OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Money>,
    /// 1-hour cache writes, USD per million; defaults to 2 x input (Anthropic) or the
    /// input rate (OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<Money>,
    /// Cache reads, USD per million; defaults to 0.1 x input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Money>,
    /// Rates for the whole request once its prompt exceeds `above_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_context: Option<Box<LongContextFields>>,
    /// The share of every rate (cache rates and long-context tier included) a request
    /// sent through the provider's batch API is billed at; defaults to 0.5, both
    /// vendors' batch discount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_rate: Option<BatchRate>,
}

/// A share of the standard price, above 0 and at most 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchRate(pub Decimal);

impl<'de> Deserialize<'de> for BatchRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = Money::deserialize(d)?;
        if m.0 <= Decimal::ZERO || m.0 > Decimal::ONE {
            return Err(serde::de::Error::custom(format!(
                "batch_rate {} is a share of the standard price: above 0, at most 1 (0.5 is half price)",
                m.0
            )));
        }
        Ok(BatchRate(m.0))
    }
}

/// A long-context price tier.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Long-context price tier")]
pub struct LongContextFields {
    /// The tier applies to a request whose prompt has more tokens than this.
    #[serde(deserialize_with = "bounds::required_at_most::<_, _, { bounds::TOKEN_BUDGET }>")]
    #[schemars(range(max = bounds::TOKEN_BUDGET))]
    pub above_tokens: u64,
    /// Prompt tokens, USD per million.
    pub input: Money,
    /// Output tokens, USD per million.
    pub output: Money,
    /// 5-minute cache writes; defaults as for the standard tier, from this tier's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Money>,
    /// 1-hour cache writes; defaults as for the standard tier, from this tier's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<Money>,
    /// Cache reads; defaults to 0.1 x this tier's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Money>,
}

const MILLION: Decimal = Decimal::from_parts(1_000_000, 0, 0, false, 0);

/// Rates in USD per million tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Price {
    pub input: Decimal,
    pub output: Decimal,
    pub cache_write: Decimal,
    pub cache_write_1h: Decimal,
    pub cache_read: Decimal,
    /// (prompt tokens above which it applies, the tier's rates)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub long_context: Option<(u64, Box<Price>)>,
    /// The task asks for 1-hour cache entries, so a prompt token may be billed at the
    /// 1-hour write rate: worst cases use it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub one_hour_writes: bool,
    /// The share of these rates a batch request is billed at.
    pub batch_rate: Decimal,
    /// These rates are already the batch rates (the task is in batch mode).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub batched: bool,
}

impl Price {
    fn from_rates(
        input: Money,
        output: Money,
        cache_write: Option<Money>,
        cache_write_1h: Option<Money>,
        cache_read: Option<Money>,
        protocol: Protocol,
    ) -> Price {
        let input = input.0;
        // Anthropic bills cache writes at 1.25x (5 minutes) or 2x (1 hour) the input
        // rate; OpenAI bills them as plain input unless a model publishes a write price.
        let (write, write_1h) = protocol.facts().cache_write_rates;
        Price {
            input,
            output: output.0,
            cache_write: cache_write.map_or(input.saturating_mul(write), |m| m.0),
            cache_write_1h: cache_write_1h.map_or(input.saturating_mul(write_1h), |m| m.0),
            cache_read: cache_read.map_or(input.saturating_mul(Decimal::new(1, 1)), |m| m.0),
            long_context: None,
            one_hour_writes: false,
            batch_rate: Decimal::new(5, 1),
            batched: false,
        }
    }

    /// Builds a price from a job file's or the built-in table's entry; unlisted cache
    /// rates follow the protocol's vendor.
    pub fn from_fields(f: &PriceFields, protocol: Protocol) -> Price {
        let mut p = Price::from_rates(
            f.input,
            f.output,
            f.cache_write,
            f.cache_write_1h,
            f.cache_read,
            protocol,
        );
        if let Some(lc) = &f.long_context {
            let LongContextFields {
                above_tokens,
                input,
                output,
                cache_write,
                cache_write_1h,
                cache_read,
            } = (**lc).clone();
            let tier = Price::from_rates(
                input,
                output,
                cache_write,
                cache_write_1h,
                cache_read,
                protocol,
            );
            p.long_context = Some((above_tokens, Box::new(tier)));
        }
        if let Some(r) = f.batch_rate {
            p.batch_rate = r.0;
        }
        p
    }

    /// This price for a request sent through the batch API: every rate times
    /// `batch_rate`, so cache discounts combine with the batch discount as both vendors
    /// document (a cache read in a batch is 0.1 x 0.5 of the input rate).
    pub fn batched(&self) -> Price {
        if self.batched {
            return self.clone();
        }
        let r = self.batch_rate;
        Price {
            input: self.input * r,
            output: self.output * r,
            cache_write: self.cache_write * r,
            cache_write_1h: self.cache_write_1h * r,
            cache_read: self.cache_read * r,
            long_context: self.long_context.as_ref().map(|(above, t)| {
                let tier = Price {
                    batch_rate: r,
                    ..(**t).clone()
                };
                (*above, Box::new(tier.batched()))
            }),
            one_hour_writes: self.one_hour_writes,
            batch_rate: r,
            batched: true,
        }
    }

    /// What `cost`, billed at these batch rates, would have cost at the standard ones.
    pub fn standard_cost_of(&self, cost: Decimal) -> Decimal {
        if self.batched && !self.batch_rate.is_zero() {
            cost / self.batch_rate
        } else {
            cost
        }
    }

    fn tier(&self, prompt_tokens: u64) -> &Price {
        match &self.long_context {
            Some((above, tier)) if prompt_tokens > *above => tier,
            _ => self,
        }
    }

    /// The exact cost of a response's usage.
    pub fn cost(&self, u: &Usage) -> Decimal {
        let p = self.tier(u.prompt_tokens());
        let writes_5m = u.cache_write_tokens.saturating_sub(u.cache_write_1h_tokens);
        [
            (u.input_tokens, p.input),
            (writes_5m, p.cache_write),
            (u.cache_write_1h_tokens, p.cache_write_1h),
            (u.cache_read_tokens, p.cache_read),
            (u.output_tokens, p.output),
        ]
        .iter()
        .fold(Decimal::ZERO, |sum, &(tokens, rate)| {
            sum.saturating_add(per_million(tokens, rate))
        })
    }

    /// What `u` would have cost without caching: every prompt token at the input rate.
    pub fn uncached_cost(&self, u: &Usage) -> Decimal {
        self.cost(&u.uncached())
    }

    /// The most a prompt token can cost, for worst-case reservations: every rate it can
    /// be billed at (plain input, a cache read, a 5-minute write, and a 1-hour write
    /// when the task asks for those), in any tier. A cache read is normally a tenth of
    /// the input rate, but a job's `pricing:` may say otherwise (30 for 0.30), and an
    /// answer may report any split of its prompt.
    pub fn max_input_rate(&self) -> Decimal {
        let mut own = self.input.max(self.cache_write).max(self.cache_read);
        if self.one_hour_writes {
            own = own.max(self.cache_write_1h);
        }
        match &self.long_context {
            Some((_, t)) => own.max(t.max_input_rate_as(self.one_hour_writes)),
            None => own,
        }
    }

    fn max_input_rate_as(&self, one_hour_writes: bool) -> Decimal {
        Price {
            one_hour_writes,
            long_context: None,
            ..self.clone()
        }
        .max_input_rate()
    }

    /// This price for a task that asks for 1-hour cache entries.
    pub fn with_one_hour_writes(mut self) -> Price {
        self.one_hour_writes = true;
        self
    }

    /// The most an output token can cost, any tier.
    pub fn max_output_rate(&self) -> Decimal {
        match &self.long_context {
            Some((_, t)) => self.output.max(t.max_output_rate()),
            None => self.output,
        }
    }

    /// The highest input and output rates a request whose prompt is at most
    /// `prompt_tokens` can be billed at: a long-context tier's only when the prompt may
    /// cross its threshold (the bound is an upper bound, so a prompt within it cannot).
    fn worst_rates(&self, prompt_tokens: u64) -> (Decimal, Decimal) {
        match &self.long_context {
            Some((above, _)) if prompt_tokens > *above => {
                (self.max_input_rate(), self.max_output_rate())
            }
            _ => {
                let mut input = self.input.max(self.cache_write).max(self.cache_read);
                if self.one_hour_writes {
                    input = input.max(self.cache_write_1h);
                }
                (input, self.output)
            }
        }
    }

    /// Worst-case cost of a request: every prompt token at the highest input rate, every
    /// allowed output token at the highest output rate, of the tier the prompt can reach.
    pub fn worst_case(&self, prompt_tokens: u64, max_tokens: u64) -> Decimal {
        let (input, output) = self.worst_rates(prompt_tokens);
        per_million(prompt_tokens, input).saturating_add(per_million(max_tokens, output))
    }

    /// How many output tokens `budget` pays for after `prompt_tokens` at worst case.
    pub fn affordable_output(&self, budget: Decimal, prompt_tokens: u64) -> u64 {
        let (input, rate) = self.worst_rates(prompt_tokens);
        let left = budget
            .saturating_mul(MILLION)
            .saturating_sub(Decimal::from(prompt_tokens).saturating_mul(input));
        if left <= Decimal::ZERO {
            return 0;
        }
        if rate.is_zero() {
            return u64::MAX;
        }
        u64::try_from((left / rate).floor()).unwrap_or(u64::MAX)
    }
}

/// Dollars for `tokens` at `rate` per million; saturating, since token counts come from
/// outside (a saturated cost stops the task at any cap).
fn per_million(tokens: u64, rate: Decimal) -> Decimal {
    Decimal::from(tokens).saturating_mul(rate) / MILLION
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    as_of: String,
    models: BTreeMap<String, PriceFields>,
}

fn builtin() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_yaml::from_str(include_str!("prices.yaml"))
            .unwrap_or_else(|e| panic!("built-in prices.yaml is invalid (a build defect): {e}"))
    })
}

/// The date of the built-in price table.
pub fn builtin_as_of() -> &'static str {
    &builtin().as_of
}

/// Looks up a model's price (as used over Anthropic's protocol): see `lookup_for`.
pub fn lookup(job_prices: &BTreeMap<String, PriceFields>, model: &str) -> Option<Price> {
    lookup_for(job_prices, model, Protocol::DEFAULT)
}

/// Looks up a model's price: the job's table first, then the built-in one. Dated ids
/// such as `claude-sonnet-4-5-20250929` or `gpt-5.4-2026-03-05` fall back to their
/// undated family id. Cache rates a job's entry leaves out follow the protocol's vendor.
pub fn lookup_for(
    job_prices: &BTreeMap<String, PriceFields>,
    model: &str,
    protocol: Protocol,
) -> Option<Price> {
    let undated = strip_date(model);
    for id in [Some(model), undated].into_iter().flatten() {
        if let Some(f) = job_prices.get(id).or_else(|| builtin().models.get(id)) {
            return Some(Price::from_fields(f, protocol));
        }
    }
    None
}

fn strip_date(model: &str) -> Option<&str> {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let (head, tail) = model.rsplit_once('-')?;
    if digits(tail, 8) {
        return Some(head);
    }
    // OpenAI's form: -YYYY-MM-DD
    let (head, day) = (head, tail);
    let (head, month) = head.rsplit_once('-')?;
    let (head, year) = head.rsplit_once('-')?;
    (digits(year, 4) && digits(month, 2) && digits(day, 2)).then_some(head)
}

#[cfg(test)]
#[path = "price_tests.rs"]
mod tests;
