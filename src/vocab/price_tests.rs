use super::*;
use std::str::FromStr;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

#[test]
fn builtin_table_parses_and_prices_sonnet() {
    let p = lookup(&BTreeMap::new(), "claude-sonnet-4-5").unwrap();
    assert_eq!(p.input, d("3"));
    let u = Usage {
        input_tokens: 1000,
        output_tokens: 200,
        cache_read_tokens: 2000,
        cache_write_tokens: 400,
        cache_write_1h_tokens: 100,
        reasoning_tokens: 0,
    };
    // 1000*3 + 300*3.75 + 100*6 + 2000*0.3 + 200*15 = 3000+1125+600+600+3000 = 8325 per M
    assert_eq!(p.cost(&u), d("0.008325"));
    assert!(lookup(&BTreeMap::new(), "claude-sonnet-4-5-20250929").is_some());
    assert!(lookup(&BTreeMap::new(), "gpt-unknown").is_none());
}

#[test]
fn openai_cached_tokens_are_billed_at_the_cached_rate() {
    let p = lookup(&BTreeMap::new(), "gpt-5.4-2026-03-05").unwrap();
    // OpenAI usage: 1200 input of which 1000 cached, 300 output.
    let u = Usage {
        input_tokens: 200,
        cache_read_tokens: 1000,
        output_tokens: 300,
        reasoning_tokens: 180,
        ..Default::default()
    };
    // 200*2.5 + 1000*0.25 + 300*15 = 500 + 250 + 4500 = 5250 per M
    assert_eq!(p.cost(&u), d("0.00525"));
    // Below its long-context threshold a prompt is reserved at the standard rates.
    assert_eq!(p.worst_case(1_000_000 / 4, 0), d("2.50") / d("4"));
    assert!(lookup(&BTreeMap::new(), "gpt-5.4-mini").is_some());
    assert_eq!(strip_date("gpt-5.4-2026-03-05"), Some("gpt-5.4"));
    assert_eq!(strip_date("gpt-5.4-mini"), None);
}

#[test]
fn long_context_tier_applies_to_whole_request() {
    let p = lookup(&BTreeMap::new(), "claude-haiku-5-5").unwrap();
    let small = Usage {
        input_tokens: 100_000,
        output_tokens: 1000,
        ..Default::default()
    };
    assert_eq!(p.cost(&small), d("0.0105"));
    let big = Usage {
        input_tokens: 100_001,
        output_tokens: 1000,
        ..Default::default()
    };
    assert_eq!(p.cost(&big), d("0.0525005"));
    assert_eq!(p.max_input_rate(), d("0.625"));
    assert_eq!(p.max_output_rate(), d("2.50"));
}

/// OpenAI's 1.05M-context models bill a prompt above 272k tokens at 2x input and 1.5x
/// output for the whole request, with no `pricing:` in the job.
#[test]
fn openai_long_context_tiers_are_built_in() {
    for (model, input, long_input, long_output) in [
        ("gpt-5.4", "2.50", "5.00", "22.50"),
        ("gpt-5.5", "5.00", "10.00", "45.00"),
        ("gpt-5.5-pro", "30.00", "60.00", "270.00"),
    ] {
        let p = lookup_for(&BTreeMap::new(), model, Protocol::OpenaiResponses).unwrap();
        let at = |prompt: u64| Usage {
            input_tokens: prompt,
            output_tokens: 1_000_000,
            ..Default::default()
        };
        let short = p.cost(&at(272_000));
        assert_eq!(
            short,
            d(input) * d("0.272") + p.output,
            "{model} at the threshold"
        );
        let long = p.cost(&at(272_001));
        assert_eq!(
            long,
            d(long_input) * d("0.272001") + d(long_output),
            "{model} above it"
        );
        // A prompt that may cross the threshold is reserved at the higher tier's rates,
        // one that cannot at the standard ones.
        assert_eq!(
            p.worst_case(272_001, 1_000_000),
            d(long_input) * d("0.272001") + d(long_output),
            "{model}"
        );
        assert_eq!(
            p.worst_case(272_000, 1_000_000),
            d(input) * d("0.272") + p.output,
            "{model}"
        );
    }
    for flat in [
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "claude-sonnet-4-6",
        "claude-opus-4-6",
    ] {
        let p = lookup(&BTreeMap::new(), flat).unwrap();
        assert!(p.long_context.is_none(), "{flat}");
    }
}

#[test]
fn job_prices_override_and_default_cache_rates() {
    let mut t = BTreeMap::new();
    t.insert(
        "claude-sonnet-4-5".to_string(),
        PriceFields {
            input: Money(d("1")),
            output: Money(d("2")),
            cache_write: None,
            cache_write_1h: None,
            cache_read: None,
            long_context: None,
            batch_rate: None,
        },
    );
    let p = lookup(&t, "claude-sonnet-4-5").unwrap();
    assert_eq!(
        (p.cache_write, p.cache_write_1h, p.cache_read),
        (d("1.25"), d("2"), d("0.1"))
    );
    let p = lookup_for(&t, "claude-sonnet-4-5", Protocol::OpenaiChat).unwrap();
    assert_eq!(
        (p.cache_write, p.cache_write_1h, p.cache_read),
        (d("1"), d("1"), d("0.1")),
        "OpenAI bills cache writes as input"
    );
    assert_eq!(p.max_input_rate(), d("1"));
}

#[test]
fn hostile_token_counts_saturate_instead_of_panicking() {
    let p = lookup(&BTreeMap::new(), "claude-fable-5-1").unwrap();
    let u = Usage {
        input_tokens: u64::MAX,
        output_tokens: u64::MAX,
        cache_read_tokens: u64::MAX,
        cache_write_tokens: u64::MAX,
        cache_write_1h_tokens: 0,
        reasoning_tokens: 0,
    };
    assert!(p.cost(&u) > d("1000000000"));
    assert!(p.worst_case(u64::MAX, u64::MAX) > d("1000000000"));
    assert_eq!(p.affordable_output(d("1"), u64::MAX), 0);
}

#[test]
fn affordable_output_never_exceeds_budget() {
    let p = lookup(&BTreeMap::new(), "claude-sonnet-4-5").unwrap();
    let budget = d("0.01");
    let n = p.affordable_output(budget, 1000);
    assert!(p.worst_case(1000, n) <= budget);
    assert!(p.worst_case(1000, n + 1) > budget);
    assert_eq!(p.affordable_output(d("0.001"), 1_000_000), 0);
}

#[test]
fn one_hour_caching_raises_the_worst_case_to_the_one_hour_write_rate() {
    let p = lookup(&BTreeMap::new(), "claude-sonnet-4-5").unwrap();
    assert_eq!(p.max_input_rate(), d("3.75"));
    let p = p.with_one_hour_writes();
    assert_eq!(p.max_input_rate(), d("6"));
    assert_eq!(p.worst_case(1_000_000, 0), d("6"));
}

#[test]
fn a_cache_read_priced_above_input_raises_the_worst_case_to_its_rate() {
    let fields: PriceFields =
        serde_yaml::from_str("{ input: 1, output: 1, cache_read: 1000 }").unwrap();
    let p = Price::from_fields(&fields, Protocol::Anthropic);
    assert_eq!(p.max_input_rate(), d("1000"));
    // 2,510 tokens read from the cache at $1000/Mtok: what a $0.05 cap must cover.
    let read = Usage {
        cache_read_tokens: 2510,
        ..Default::default()
    };
    assert_eq!(p.cost(&read), d("2.51"));
    assert!(p.cost(&read) <= p.worst_case(2510, 0));
    assert_eq!(p.affordable_output(d("0.05"), 2510), 0);
}

/// A small deterministic generator (splitmix64), so a failure names its case.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A figure a hostile provider may send: none, small, about the bound, past it,
    /// absurd, or the largest count.
    fn figure(&mut self, bound: u64) -> u64 {
        match self.next() % 7 {
            0 => 0,
            1 => self.next() % 100,
            2 => bound,
            3 => bound.saturating_add(1 + self.next() % 1000),
            4 => self.next() % bound.saturating_add(1),
            5 => 900_000_000 + self.next() % 1_000_000_000,
            _ => u64::MAX - self.next() % 3,
        }
    }

    fn rate(&mut self) -> Option<Money> {
        let r = [
            None,
            Some("0"),
            Some("0.3"),
            Some("3.75"),
            Some("30"),
            Some("1000"),
        ];
        r[(self.next() % r.len() as u64) as usize].map(|s| Money(d(s)))
    }
}

#[test]
fn no_usage_a_provider_may_send_settles_above_the_worst_case_reserved() {
    use crate::vocab::usage::{Bounds, Reported};
    let mut g = Gen(27);
    for case in 0..20_000 {
        let tier = |g: &mut Gen| {
            (
                g.rate().unwrap_or(Money(d("3"))),
                g.rate().unwrap_or(Money(d("15"))),
                g.rate(),
                g.rate(),
                g.rate(),
            )
        };
        let (input, output, cache_write, cache_write_1h, cache_read) = tier(&mut g);
        let long = g.next().is_multiple_of(3);
        let (li, lo, lw, lw1, lr) = tier(&mut g);
        let fields = PriceFields {
            input,
            output,
            cache_write,
            cache_write_1h,
            cache_read,
            long_context: long.then(|| {
                Box::new(LongContextFields {
                    above_tokens: g.next() % 300_000,
                    input: li,
                    output: lo,
                    cache_write: lw,
                    cache_write_1h: lw1,
                    cache_read: lr,
                })
            }),
            batch_rate: None,
        };
        let protocol = [Protocol::Anthropic, Protocol::OpenaiResponses][case % 2];
        let mut price = Price::from_fields(&fields, protocol);
        let one_hour = g.next().is_multiple_of(2);
        if one_hour {
            price = price.with_one_hour_writes();
        }
        if g.next().is_multiple_of(4) {
            price = price.batched();
        }
        let bounds = Bounds {
            prompt_tokens: g.next() % (1 << 40),
            output_tokens: g.next() % 200_000,
            one_hour_writes: one_hour,
        };
        let usage = Usage {
            input_tokens: g.figure(bounds.prompt_tokens),
            output_tokens: g.figure(bounds.output_tokens),
            cache_read_tokens: g.figure(bounds.prompt_tokens),
            cache_write_tokens: g.figure(bounds.prompt_tokens),
            cache_write_1h_tokens: g.figure(bounds.prompt_tokens),
            reasoning_tokens: g.figure(bounds.output_tokens),
        };
        let reported = Reported {
            usage,
            clamps: Vec::new(),
        }
        .within(&bounds);
        let reserved = price.worst_case(bounds.prompt_tokens, bounds.output_tokens);
        let settled = price.cost(&reported.usage);
        assert!(
            settled <= reserved,
            "case {case}: {usage:?} read as {:?} under {bounds:?} costs {settled}, above the {reserved} reserved at {price:?}",
            reported.usage
        );
        let u = reported.usage;
        assert!(u.prompt_tokens() <= bounds.prompt_tokens, "case {case}");
        assert!(
            u.cache_write_1h_tokens <= u.cache_write_tokens,
            "case {case}"
        );
        assert!(u.reasoning_tokens <= u.output_tokens, "case {case}");
        assert!(p_saved_is_not_negative(&price, &u), "case {case}: {u:?}");
        assert_eq!(
            reported.clamps.is_empty(),
            u == usage,
            "case {case}: every figure changed is noted"
        );
    }
}

/// What caching saved (uncached cost less cost) is never below zero when no cache
/// rate is above the input rate.
fn p_saved_is_not_negative(p: &Price, u: &Usage) -> bool {
    let tier = p.tier(u.prompt_tokens());
    let dear = [tier.cache_read, tier.cache_write, tier.cache_write_1h]
        .iter()
        .any(|r| *r > tier.input);
    dear || p.uncached_cost(u) >= p.cost(u)
}

#[test]
fn batch_prices_scale_every_rate_and_combine_with_cache_discounts() {
    let p = lookup(&BTreeMap::new(), "claude-sonnet-4-5").unwrap();
    let b = p.batched();
    assert_eq!(b.input, p.input * d("0.5"));
    assert_eq!(b.cache_read, p.input * d("0.1") * d("0.5"));
    assert_eq!(b.cache_write_1h, p.cache_write_1h * d("0.5"));
    let u = Usage {
        input_tokens: 1000,
        output_tokens: 200,
        cache_read_tokens: 2000,
        cache_write_tokens: 400,
        cache_write_1h_tokens: 100,
        reasoning_tokens: 0,
    };
    assert_eq!(b.cost(&u) * d("2"), p.cost(&u));
    assert_eq!(b.standard_cost_of(b.cost(&u)), p.cost(&u));
    assert_eq!(p.standard_cost_of(p.cost(&u)), p.cost(&u));
    assert_eq!(b.batched().input, b.input, "batching twice halves once");
    let fields: PriceFields =
        serde_yaml::from_str("{ input: 2, output: 10, batch_rate: 0.6 }").unwrap();
    let own = Price::from_fields(&fields, Protocol::OpenaiResponses).batched();
    assert_eq!(own.input, d("1.2"));
    assert_eq!(own.output, d("6"));
    for bad in ["0", "1.5", "-0.5"] {
        let r: Result<PriceFields, _> =
            serde_yaml::from_str(&format!("{{ input: 2, output: 10, batch_rate: {bad} }}"));
        assert!(r.is_err(), "{bad}");
    }
}
