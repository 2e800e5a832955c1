//! compare.html: one self-contained page (inline CSS and SVG, no script, nothing
//! fetched) that opens from the file system. A Content-Security-Policy forbids any
//! request, so a mistake that adds one shows as a console error instead of a leak.

use std::fmt::Write as _;

use super::escape::html;
use super::figures::Side;
use super::{svg, tables, CompareReport};

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem;color:#222;max-width:1400px}*{box-sizing:border-box}\
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}\
table{border-collapse:collapse;font-size:.82rem}th,td{border:1px solid #ccc;padding:.2rem .35rem;text-align:left;vertical-align:top}\
td{overflow-wrap:anywhere}th{background:#f3f3f3;overflow-wrap:normal;font-size:.76rem}\
@media (max-width:1100px){body{margin:1rem}}\
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap;overflow-wrap:normal}th.num{white-space:normal}\
.table-wrap{max-width:100%;overflow-x:auto}svg{max-width:100%;height:auto}\
.note{color:#555;font-size:.9rem}code{font-size:.9rem;overflow-wrap:anywhere}\
svg text{font-family:system-ui,sans-serif;font-size:12px;fill:#222}svg .tick{fill:#555;font-size:11px}\
svg .grid{stroke:#e5e5e5}svg .axis{stroke:#555}svg .ci{stroke-width:2}\
li{margin:.2rem 0}";

/// A table in a box that scrolls sideways if the table still cannot fit (its labels
/// wrap and its numbers are compact first), so the page itself never does.
fn wrapped(table: &str) -> String {
    format!("<div class=\"table-wrap\">\n{table}</div>\n")
}

/// The whole page.
pub(crate) fn page(r: &CompareReport) -> String {
    let mut s = String::new();
    s.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"icon\" href=\"data:,\">\n<title>agentbatch compare</title>\n",
    );
    let _ = writeln!(s, "<style>{STYLE}</style>\n</head>\n<body>");
    s.push_str("<h1>agentbatch compare</h1>\n<p class=\"note\">Runs: ");
    let runs: Vec<String> = r
        .runs
        .iter()
        .map(|p| format!("<code>{}</code>", html(&p.display().to_string())))
        .collect();
    s.push_str(&runs.join(", "));
    let _ = writeln!(
        s,
        ". Groups: {}. Pass rates are over graded rows (pass, fail, error); unchecked rows are left out.</p>",
        match &r.by {
            Some(axis) => format!("the values of <code>{}</code>", html(axis)),
            None => "the variants".to_string(),
        }
    );

    s.push_str("<h2>Groups</h2>\n");
    s.push_str(&wrapped(&tables::groups(&r.groups, false).html("groups")));
    s.push_str("<h3>Tokens, time and models</h3>\n");
    s.push_str(&wrapped(
        &tables::groups_effort(&r.groups).html("groups-effort"),
    ));

    s.push_str("<h2>Pass rate and cost</h2>\n");
    let (chart, left_out) = svg::pass_rate_vs_cost(&r.groups);
    s.push_str(&chart);
    if !left_out.is_empty() {
        let names: Vec<String> = left_out.iter().map(|l| html(l)).collect();
        let _ = writeln!(
            s,
            "<p class=\"note\">Not plotted (no graded rows, or unpriced rows): {}</p>",
            names.join(", ")
        );
    }

    s.push_str("<h2>Stop reasons</h2>\n");
    s.push_str(&svg::stop_reasons(&r.groups));

    s.push_str(
        "<h2>Pairs</h2>\n<p class=\"note\">On the units both sides graded. Wins: A passed and B did not; \
         losses: the reverse. p: exact McNemar test (two-sided) on wins against losses. \
         $/pass: cost of the paired rows per pass.</p>\n",
    );
    s.push_str(&wrapped(&tables::pairs(&r.pairs).html("pairs")));

    s.push_str("<h2>Flipped verdicts</h2>\n");
    let flipping: Vec<_> = r.pairs.iter().filter(|p| !p.flips.is_empty()).collect();
    if flipping.is_empty() {
        s.push_str("<p>None: every paired unit got the same verdict on both sides.</p>\n");
    }
    for p in flipping {
        let _ = writeln!(
            s,
            "<h3><code>{}</code> vs <code>{}</code></h3>\n<ul>",
            html(&p.a),
            html(&p.b)
        );
        for (side, label) in [(Side::A, &p.a), (Side::B, &p.b)] {
            let units = tables::flipped(p, side);
            if !units.is_empty() {
                let units: Vec<String> = units.iter().map(|u| html(u)).collect();
                let _ = writeln!(
                    s,
                    "<li>only <code>{}</code> passed ({}): {}</li>",
                    html(label),
                    units.len(),
                    units.join(" ")
                );
            }
        }
        s.push_str("</ul>\n");
    }

    if !r.warnings.is_empty() {
        s.push_str("<h2>Warnings</h2>\n<ul>\n");
        for w in &r.warnings {
            let _ = writeln!(s, "<li>{}</li>", html(w));
        }
        s.push_str("</ul>\n");
    }
    s.push_str("</body>\n</html>\n");
    s
}
