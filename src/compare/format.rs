//! How figures are shown in the terminal, Markdown and HTML (the CSV keeps raw values).

use rust_decimal::Decimal;

/// Shown where a figure is undefined (no passes, unpriced rows, nothing paired).
pub(crate) const NONE: &str = "-";

/// A rate as a percentage with one decimal.
pub(crate) fn pct(rate: Option<f64>) -> String {
    rate.map_or_else(|| NONE.to_string(), |r| format!("{:.1}%", r * 100.0))
}

/// A 95% interval as percentages.
pub(crate) fn interval(ci: Option<(f64, f64)>) -> String {
    ci.map_or_else(
        || NONE.to_string(),
        |(lo, hi)| format!("{:.1}-{:.1}%", lo * 100.0, hi * 100.0),
    )
}

/// A difference of rates in percentage points, signed.
pub(crate) fn points(diff: Option<f64>) -> String {
    diff.map_or_else(|| NONE.to_string(), |d| format!("{:+.1} pp", d * 100.0))
}

/// Dollars to the micro-dollar.
pub(crate) fn money(amount: Option<Decimal>) -> String {
    amount.map_or_else(|| NONE.to_string(), |a| format!("${}", exact(a)))
}

/// A total that may leave out unpriced rows, saying how many.
pub(crate) fn total(cost: Decimal, unpriced: u64) -> String {
    if unpriced == 0 {
        money(Some(cost))
    } else {
        format!("{} + {unpriced} unpriced", money(Some(cost)))
    }
}

/// An amount rounded to six decimals without trailing zeros, for files and screens.
pub(crate) fn exact(amount: Decimal) -> String {
    amount.round_dp(6).normalize().to_string()
}

/// A p-value with four decimals (trailing zeros dropped), or in scientific notation
/// when smaller than that shows.
pub(crate) fn p_value(p: f64) -> String {
    if p >= 1.0 {
        "1".to_string()
    } else if p >= 0.0001 {
        let s = format!("{p:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{p:.1e}")
    }
}

/// A median count, without a decimal when it is whole.
pub(crate) fn median(m: Option<f64>) -> String {
    match m {
        None => NONE.to_string(),
        Some(v) if v.fract() == 0.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_well() {
        assert_eq!(pct(Some(0.75)), "75.0%");
        assert_eq!(pct(None), "-");
        assert_eq!(interval(Some((0.3134, 0.8318))), "31.3-83.2%");
        assert_eq!(points(Some(0.4)), "+40.0 pp");
        assert_eq!(points(Some(-0.05)), "-5.0 pp");
        let d = |s: &str| s.parse::<Decimal>().unwrap();
        assert_eq!(money(Some(d("0.32") / d("7"))), "$0.045714");
        assert_eq!(money(Some(d("0.0320"))), "$0.032");
        assert_eq!(money(None), "-");
        assert_eq!(total(d("1.5"), 2), "$1.5 + 2 unpriced");
        assert_eq!(p_value(0.021484375), "0.0215");
        assert_eq!(p_value(0.25), "0.25");
        assert_eq!(p_value(1.0), "1");
        assert_eq!(p_value(2.7e-10), "2.7e-10");
        assert_eq!(median(Some(4.0)), "4");
        assert_eq!(median(Some(4.5)), "4.5");
    }
}
