//! Small statistics for comparing variants: Wilson intervals for pass rates, the exact
//! McNemar test for paired verdicts, medians. Probabilities are f64; money stays
//! Decimal and is only ever medianed, never averaged through floats.

use rust_decimal::Decimal;

/// The 95% Wilson score interval of `passes` out of `n`; None when n is 0. Chosen over
/// the normal approximation because it stays inside [0, 1] and behaves at 0 and n.
pub fn wilson95(passes: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let z = 1.959_963_984_540_054_f64;
    let n_f = n as f64;
    let p = passes as f64 / n_f;
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z * ((p * (1.0 - p) + z2 / (4.0 * n_f)) / n_f).sqrt() / denom;
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// Two-sided exact McNemar p-value for `b` and `c` discordant pairs: the binomial test
/// of min(b, c) against n = b + c at p = 1/2, doubled and capped at 1. No discordant
/// pairs gives 1.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // Sum C(n, i) / 2^n for i <= k in log space, so large n does not overflow.
    let ln2n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0.0_f64; // ln C(n, 0)
    let mut tail = 0.0_f64;
    for i in 0..=k {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose - ln2n).exp();
    }
    let p = 2.0 * tail;
    // Rounding in log space must not turn an exact 1 into 0.999...
    if p > 1.0 - 1e-12 {
        1.0
    } else {
        p
    }
}

/// The median of some amounts (the mean of the middle two for an even count).
pub fn median(values: &mut [Decimal]) -> Option<Decimal> {
    if values.is_empty() {
        return None;
    }
    values.sort();
    let m = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[m]
    } else {
        (values[m - 1] + values[m]) / Decimal::TWO
    })
}

/// The median of counts or durations.
pub fn median_u64(values: &mut [u64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let m = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[m] as f64
    } else {
        (values[m - 1] as f64 + values[m] as f64) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn wilson_matches_reference_values() {
        // Reference: statsmodels proportion_confint(7, 10, method="wilson").
        let (lo, hi) = wilson95(7, 10).unwrap();
        assert!((lo - 0.396_778).abs() < 1e-5, "{lo}");
        assert!((hi - 0.892_208).abs() < 1e-5, "{hi}");
        let (lo, hi) = wilson95(0, 5).unwrap();
        assert_eq!(lo, 0.0);
        assert!((hi - 0.434_482).abs() < 1e-5, "{hi}");
        assert_eq!(wilson95(0, 0), None);
    }

    #[test]
    fn mcnemar_exact_matches_the_binomial_test() {
        // scipy.stats.binomtest(1, 9, 0.5).pvalue = 0.0390625
        assert!((mcnemar_exact(1, 8) - 0.039_062_5).abs() < 1e-12);
        assert!((mcnemar_exact(8, 1) - 0.039_062_5).abs() < 1e-12);
        // binomtest(2, 5) = 1.0; binomtest(0, 6) = 0.03125
        assert_eq!(mcnemar_exact(2, 3), 1.0);
        assert!((mcnemar_exact(0, 6) - 0.031_25).abs() < 1e-12);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // Large n stays finite: binomtest(400, 1000) ≈ 2.728e-10.
        let p = mcnemar_exact(400, 600);
        assert!((p / 2.728_464_156e-10 - 1.0).abs() < 1e-6, "{p}");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), None);
        assert_eq!(
            median(&mut [dec("0.3"), dec("0.1"), dec("0.2")]),
            Some(dec("0.2"))
        );
        assert_eq!(median(&mut [dec("0.4"), dec("0.1")]), Some(dec("0.25")));
        assert_eq!(median_u64(&mut [5, 1, 3, 9]), Some(4.0));
    }
}
