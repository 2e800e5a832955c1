//! The two charts of compare.html, drawn as inline SVG here so the page needs no
//! script, library or network: pass rate against cost per group, and stop reasons per
//! group as stacked bars.

use std::fmt::Write as _;

use rust_decimal::prelude::ToPrimitive;

use super::escape::html;
use super::figures::GroupSummary;
use super::format;
use crate::vocab::stop::StopReason;

/// Point colours, one per group in order (repeating after ten).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Colours of the stop reasons; reasons this version does not know are grey.
fn reason_colour(reason: &str) -> &'static str {
    let colour = StopReason::ALL
        .iter()
        .position(|r| r.as_str() == reason)
        .and_then(|i| REASON_COLOURS.get(i));
    colour.copied().unwrap_or("#bdbdbd")
}

/// In the order of `StopReason::ALL`.
const REASON_COLOURS: [&str; StopReason::ALL.len()] = [
    "#2e7d32", // completed
    "#f9a825", // max_turns
    "#ef6c00", // time_limit
    "#9e9d24", // token_limit
    "#6a1b9a", // cost_limit
    "#d81b60", // team_budget
    "#f06292", // run_budget
    "#00838f", // model_max_tokens
    "#5d4037", // refusal
    "#1565c0", // context_window
    "#8d6e63", // stuck
    "#e53935", // provider_error
    "#ff8a80", // rate_limited
    "#37474f", // ledger_error
    "#880e4f", // tool_setup_error
    "#757575", // cancelled
    "#000000", // internal_error
    "#4e342e", // verifier_error
];

/// Labels longer than this are cut in the charts (the full label is in the tooltip).
const LABEL_CHARS: usize = 48;

fn short(label: &str) -> String {
    if label.chars().count() <= LABEL_CHARS {
        label.to_string()
    } else {
        let mut s: String = label.chars().take(LABEL_CHARS - 1).collect();
        s.push('…');
        s
    }
}

/// A round step that cuts `0..max` into about `target` intervals.
fn nice_step(max: f64, target: f64) -> f64 {
    let raw = max / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Pass rate (with its 95% interval as an error bar) against cost per task, one labelled
/// point per group. Returns the SVG and the groups that could not be placed (no graded
/// rows, or unpriced rows so no cost).
pub(crate) fn pass_rate_vs_cost(groups: &[GroupSummary]) -> (String, Vec<String>) {
    const W: f64 = 760.0;
    const H: f64 = 420.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 30.0;
    const TOP: f64 = 20.0;
    const BOTTOM: f64 = 56.0;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;

    let mut points = Vec::new();
    let mut left_out = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let cost = g.cost_per_task().and_then(|c| c.to_f64());
        match (g.pass_rate(), g.interval, cost) {
            (Some(rate), Some(ci), Some(cost)) => points.push((i, g, rate, ci, cost)),
            _ => left_out.push(g.label.clone()),
        }
    }
    let max_cost = points.iter().map(|p| p.4).fold(0.0, f64::max);
    let (step, x_max) = if max_cost > 0.0 {
        let step = nice_step(max_cost, 5.0);
        (step, (max_cost / step).ceil() * step)
    } else {
        (0.2, 1.0)
    };
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let x = |cost: f64| LEFT + cost / x_max * plot_w;
    let y = |rate: f64| TOP + (1.0 - rate) * plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg id=\"pass-rate-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-labelledby=\"pass-rate-title\">\
         <title id=\"pass-rate-title\">Pass rate against cost per task, per group</title>"
    );
    for pct in (0..=100).step_by(20) {
        let yy = y(f64::from(pct) / 100.0);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\"/>\
             <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{pct}%</text>",
            LEFT + plot_w,
            LEFT - 8.0,
            yy + 4.0
        );
    }
    let ticks = (x_max / step).round() as u32;
    for t in 0..=ticks {
        let cost = f64::from(t) * step;
        let xx = x(cost);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{xx:.1}\" y1=\"{TOP}\" x2=\"{xx:.1}\" y2=\"{:.1}\"/>\
             <text class=\"tick\" x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">${cost:.decimals$}</text>",
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{bottom:.1}\"/>\
         <text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">cost per task (USD)</text>\
         <text class=\"axis-label\" transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">pass rate (graded rows, 95% CI)</text>",
        LEFT + plot_w,
        LEFT + plot_w / 2.0,
        H - 12.0,
        TOP + plot_h / 2.0,
        bottom = TOP + plot_h,
    );
    for (i, g, rate, (lo, hi), cost) in points {
        let colour = PALETTE[i % PALETTE.len()];
        let (cx, cy) = (x(cost), y(rate));
        let (y_lo, y_hi) = (y(lo), y(hi));
        let (anchor, tx) = if cx > LEFT + plot_w / 2.0 {
            ("end", cx - 9.0)
        } else {
            ("start", cx + 9.0)
        };
        let _ = writeln!(
            s,
            "<g class=\"point\"><title>{title}</title>\
             <line class=\"ci\" x1=\"{cx:.1}\" y1=\"{y_lo:.1}\" x2=\"{cx:.1}\" y2=\"{y_hi:.1}\" stroke=\"{colour}\"/>\
             <line class=\"ci\" x1=\"{:.1}\" y1=\"{y_lo:.1}\" x2=\"{:.1}\" y2=\"{y_lo:.1}\" stroke=\"{colour}\"/>\
             <line class=\"ci\" x1=\"{:.1}\" y1=\"{y_hi:.1}\" x2=\"{:.1}\" y2=\"{y_hi:.1}\" stroke=\"{colour}\"/>\
             <circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"5\" fill=\"{colour}\"/>\
             <text class=\"label\" x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{label}</text></g>",
            cx - 4.0,
            cx + 4.0,
            cx - 4.0,
            cx + 4.0,
            cy - 6.0,
            title = html(&format!(
                "{}: pass rate {} ({}), {} per task, {} per pass",
                g.label,
                format::pct(Some(rate)),
                format::interval(Some((lo, hi))),
                format::money(g.cost_per_task()),
                format::money(g.cost_per_pass()),
            )),
            label = html(&short(&g.label)),
        );
    }
    s.push_str("</svg>\n");
    (s, left_out)
}

/// One horizontal bar per group, split by stop reason as shares of the group's rows,
/// with a legend of the reasons that occur.
pub(crate) fn stop_reasons(groups: &[GroupSummary]) -> String {
    const BAR_W: f64 = 440.0;
    const BAR_H: f64 = 22.0;
    const GAP: f64 = 10.0;
    const TOP: f64 = 10.0;
    const CHAR_W: f64 = 7.0;
    const LEGEND_COLUMN: f64 = 180.0;
    let longest = groups
        .iter()
        .map(|g| short(&g.label).chars().count())
        .max()
        .unwrap_or(0);
    let label_w = (longest as f64 * CHAR_W + 16.0).clamp(80.0, 360.0);
    let width = label_w + BAR_W + 90.0;

    let mut reasons: Vec<&str> = Vec::new();
    for g in groups {
        for (r, _) in &g.stop_reasons {
            if !reasons.contains(&r.as_str()) {
                reasons.push(r);
            }
        }
    }
    let known = |r: &str| StopReason::ALL.iter().position(|k| k.as_str() == r);
    reasons.sort_by_key(|r| (known(r).unwrap_or(usize::MAX), r.to_string()));

    let bars_h = groups.len() as f64 * (BAR_H + GAP);
    let per_line = ((width - 20.0) / LEGEND_COLUMN).floor().max(1.0) as usize;
    let legend_lines = reasons.len().div_ceil(per_line);
    let height = TOP + bars_h + 10.0 + legend_lines as f64 * 20.0 + 10.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg id=\"stop-reasons-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-labelledby=\"stop-reasons-title\">\
         <title id=\"stop-reasons-title\">Stop reasons per group, as shares of its rows</title>"
    );
    for (i, g) in groups.iter().enumerate() {
        let top = TOP + i as f64 * (BAR_H + GAP);
        let _ = write!(
            s,
            "<g class=\"bar\"><title>{}</title><text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            html(&g.label),
            label_w - 8.0,
            top + BAR_H / 2.0 + 4.0,
            html(&short(&g.label)),
        );
        let mut x = label_w;
        for (reason, n) in &g.stop_reasons {
            let share = *n as f64 / g.rows.max(1) as f64;
            let w = share * BAR_W;
            let _ = write!(
                s,
                "<rect class=\"seg\" x=\"{x:.2}\" y=\"{top:.1}\" width=\"{w:.2}\" height=\"{BAR_H}\" fill=\"{}\"><title>{}</title></rect>",
                reason_colour(reason),
                html(&format!("{}: {reason} {n} of {} ({})", g.label, g.rows, format::pct(Some(share)))),
            );
            x += w;
        }
        let _ = writeln!(
            s,
            "<text class=\"count\" x=\"{:.1}\" y=\"{:.1}\">{} rows</text></g>",
            label_w + BAR_W + 8.0,
            top + BAR_H / 2.0 + 4.0,
            g.rows
        );
    }
    let legend_top = TOP + bars_h + 10.0;
    s.push_str("<g class=\"legend\">");
    for (i, reason) in reasons.iter().enumerate() {
        let lx = 10.0 + (i % per_line) as f64 * LEGEND_COLUMN;
        let ly = legend_top + (i / per_line) as f64 * 20.0;
        let _ = write!(
            s,
            "<g class=\"legend-item\"><rect x=\"{lx:.1}\" y=\"{ly:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            reason_colour(reason),
            lx + 18.0,
            ly + 10.0,
            html(reason),
        );
    }
    s.push_str("</g>\n</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;

    fn group(
        label: &str,
        rows: u64,
        passes: u64,
        cost: Option<&str>,
        reasons: &[(&str, u64)],
    ) -> GroupSummary {
        let cost_d: Decimal = cost.unwrap_or("0").parse().unwrap();
        GroupSummary {
            label: label.into(),
            rows,
            graded: rows,
            passes,
            interval: crate::stats::wilson95(passes, rows),
            cost: cost_d,
            unpriced: if cost.is_some() { 0 } else { rows },
            graded_cost: cost_d,
            graded_unpriced: if cost.is_some() { 0 } else { rows },
            stop_reasons: reasons.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            models: vec![],
            median_turns: None,
            median_wall_ms: None,
            input_tokens: 0,
            cache_saved: Decimal::ZERO,
            output_tokens: 0,
        }
    }

    #[test]
    fn nice_steps_are_round() {
        assert_eq!(nice_step(0.036, 5.0), 0.01);
        assert_eq!(nice_step(1.0, 5.0), 0.2);
        assert_eq!(nice_step(7.0, 5.0), 2.0);
    }

    #[test]
    fn points_and_bars_per_group_with_escaped_labels() {
        let groups = [
            group(
                "a<script>",
                10,
                6,
                Some("0.12"),
                &[("completed", 7), ("max_turns", 3)],
            ),
            group(
                "b",
                10,
                3,
                Some("0.08"),
                &[("completed", 9), ("brand_new", 1)],
            ),
            group("unpriced", 4, 1, None, &[("provider_error", 4)]),
        ];
        let (svg, left_out) = pass_rate_vs_cost(&groups);
        assert_eq!(svg.matches("class=\"point\"").count(), 2);
        assert_eq!(left_out, ["unpriced"]);
        assert!(svg.contains("a&lt;script&gt;"));
        assert!(!svg.contains("<script"));
        let svg = stop_reasons(&groups);
        assert_eq!(svg.matches("class=\"bar\"").count(), 3);
        assert_eq!(svg.matches("class=\"seg\"").count(), 5);
        assert_eq!(svg.matches("class=\"legend-item\"").count(), 4);
        // Unknown reasons come last in the legend, in grey.
        let legend = &svg[svg.find("class=\"legend\"").unwrap()..];
        assert!(legend.find("provider_error").unwrap() < legend.find("brand_new").unwrap());
        assert!(svg.contains("fill=\"#bdbdbd\""));
    }
}
