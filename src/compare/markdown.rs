//! compare.md: the same tables and flipped units as the page, for a pull request or a
//! notebook.

use std::fmt::Write as _;

use super::escape::markdown;
use super::figures::Side;
use super::{tables, CompareReport};

/// The whole document.
pub(crate) fn document(r: &CompareReport) -> String {
    let mut s = String::from("# agentbatch compare\n\n");
    let runs: Vec<String> = r
        .runs
        .iter()
        .map(|p| markdown(&p.display().to_string()))
        .collect();
    let _ = writeln!(
        s,
        "Runs: {}. Groups: {}. Pass rates are over graded rows (pass, fail, error); unchecked rows are left out.\n",
        runs.join(", "),
        match &r.by {
            Some(axis) => format!("the values of {}", markdown(axis)),
            None => "the variants".to_string(),
        }
    );
    s.push_str("## Groups\n\n");
    s.push_str(&tables::groups(&r.groups, true).markdown());
    s.push_str(
        "\n## Pairs\n\nOn the units both sides graded. Wins: A passed and B did not; losses: the \
         reverse. p: exact McNemar test (two-sided) on wins against losses. $/pass: cost of the \
         paired rows per pass.\n\n",
    );
    s.push_str(&tables::pairs(&r.pairs).markdown());
    s.push_str("\n## Flipped verdicts\n\n");
    let flipping: Vec<_> = r.pairs.iter().filter(|p| !p.flips.is_empty()).collect();
    if flipping.is_empty() {
        s.push_str("None: every paired unit got the same verdict on both sides.\n");
    }
    for p in flipping {
        let _ = writeln!(s, "### {} vs {}\n", markdown(&p.a), markdown(&p.b));
        for (side, label) in [(Side::A, &p.a), (Side::B, &p.b)] {
            let units = tables::flipped(p, side);
            if !units.is_empty() {
                let units: Vec<String> = units.iter().map(|u| markdown(u)).collect();
                let _ = writeln!(
                    s,
                    "- only {} passed ({}): {}",
                    markdown(label),
                    units.len(),
                    units.join(" ")
                );
            }
        }
        s.push('\n');
    }
    if !r.warnings.is_empty() {
        s.push_str("\n## Warnings\n\n");
        for w in &r.warnings {
            let _ = writeln!(s, "- {}", markdown(w));
        }
    }
    s
}
