//! The page's charts as inline SVG (no library, nothing fetched): horizontal bars of
//! tasks per stop reason and of cost per team and per variant. Bars scale to the
//! largest value; labels are cut to fit, the whole label is in the bar's tooltip.

use std::fmt::Write as _;

use rust_decimal::prelude::ToPrimitive;

use super::summary::Figures;
use crate::text::html;
use crate::vocab::stop::StopReason;

/// One bar: its label, its length and the figure written beside it.
struct Bar {
    label: String,
    value: f64,
    shown: String,
    colour: &'static str,
}

/// Characters of a label drawn; the rest is in the tooltip.
const LABEL_CHARS: usize = 28;
const ROW: usize = 22;
const LABEL_W: usize = 190;
const BAR_W: usize = 260;

/// Green for a finished loop, amber for a budget or limit, red for the infrastructure,
/// grey for the rest (the model's own stops, reasons this version does not know).
fn stop_colour(reason: &str) -> &'static str {
    match StopReason::ALL.iter().find(|r| r.as_str() == reason) {
        Some(StopReason::Completed) => "#2e7d32",
        Some(r) if r.is_budget() => "#ef8f00",
        Some(r) if r.is_infra() => "#c62828",
        _ => "#78909c",
    }
}

fn bars(id: &str, title: &str, bars: &[Bar]) -> String {
    let h = ROW * bars.len().max(1) + 8;
    let w = LABEL_W + BAR_W + 140;
    let max = bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<figure class=\"chart\"><figcaption>{}</figcaption>\
         <svg id=\"{id}\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">",
        html(title),
        html(title)
    );
    if bars.is_empty() {
        let _ = writeln!(s, "<text x=\"4\" y=\"16\">nothing to show</text>");
    }
    for (i, b) in bars.iter().enumerate() {
        let y = i * ROW + 4;
        let len = if max > 0.0 {
            (b.value / max * BAR_W as f64).max(1.0)
        } else {
            1.0
        };
        let label: String = if b.label.chars().count() > LABEL_CHARS {
            let mut l: String = b.label.chars().take(LABEL_CHARS - 1).collect();
            l.push('…');
            l
        } else {
            b.label.clone()
        };
        let _ = writeln!(
            s,
            "<g class=\"bar\" data-label=\"{}\"><title>{}: {}</title>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{LABEL_W}\" y=\"{y}\" width=\"{len:.1}\" height=\"{}\" fill=\"{}\"></rect>\
             <text class=\"fig\" x=\"{:.1}\" y=\"{}\">{}</text></g>",
            html(&b.label),
            html(&b.label),
            html(&b.shown),
            LABEL_W - 6,
            y + 14,
            html(&label),
            ROW - 6,
            b.colour,
            LABEL_W as f64 + len + 4.0,
            y + 14,
            html(&b.shown)
        );
    }
    s.push_str("</svg></figure>\n");
    s
}

/// The three charts.
pub(super) fn all(f: &Figures) -> String {
    let mut stops: Vec<&(String, u64)> = f.stops.iter().collect();
    stops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let stop_bars: Vec<Bar> = stops
        .iter()
        .map(|(reason, n)| Bar {
            label: if reason.is_empty() {
                "(none)".into()
            } else {
                reason.clone()
            },
            value: *n as f64,
            shown: n.to_string(),
            colour: stop_colour(reason),
        })
        .collect();
    let cost_bar = |label: &str, n: u64, cost: rust_decimal::Decimal| Bar {
        label: if label.is_empty() {
            "(none)".into()
        } else {
            label.to_string()
        },
        value: cost.to_f64().unwrap_or(0.0),
        shown: format!("${:.4} ({n} tasks)", cost),
        colour: "#4e79a7",
    };
    let team_bars: Vec<Bar> = f
        .teams
        .iter()
        .map(|(t, (n, c))| cost_bar(t, *n, *c))
        .collect();
    let variant_bars: Vec<Bar> = f
        .variants
        .iter()
        .map(|(v, n, c)| cost_bar(v, *n, *c))
        .collect();
    let mut s = String::from("<div class=\"charts\">\n");
    s.push_str(&bars("stop-chart", "Tasks per stop reason", &stop_bars));
    s.push_str(&bars("team-chart", "Cost per team", &team_bars));
    s.push_str(&bars("variant-chart", "Cost per variant", &variant_bars));
    s.push_str("</div>\n");
    s
}
