//! The group and pair tables, built once and rendered for the terminal, Markdown and
//! HTML, so the three always show the same figures.

use std::fmt::Write as _;

use super::escape::{html, markdown};
use super::figures::{GroupSummary, PairSummary, Side};
use super::format;

/// Rows of cells under a header; numeric columns are right-aligned.
pub(crate) struct Table {
    pub header: Vec<&'static str>,
    pub numeric: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns padded to their widest cell, two spaces apart.
    pub fn text(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut s = String::new();
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let w = widths[i];
                if i > 0 {
                    line.push_str("  ");
                }
                if self.numeric[i] {
                    let _ = write!(line, "{cell:>w$}");
                } else {
                    let _ = write!(line, "{cell:<w$}");
                }
            }
            s.push_str(line.trim_end());
            s.push('\n');
        }
        s
    }

    /// A GitHub-flavoured Markdown table, cells escaped.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| {} |", self.header.join(" | "));
        let rule: Vec<&str> = self
            .numeric
            .iter()
            .map(|&n| if n { "---:" } else { "---" })
            .collect();
        let _ = writeln!(s, "|{}|", rule.join("|"));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| markdown(c)).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        s
    }

    /// An HTML table, cells escaped; numeric cells carry class `num`.
    pub fn html(&self, class: &str) -> String {
        let mut s = format!("<table class=\"{}\">\n<thead><tr>", html(class));
        for (h, &n) in self.header.iter().zip(&self.numeric) {
            let _ = write!(s, "<th{}>{}</th>", num_class(n), html(h));
        }
        s.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            s.push_str("<tr>");
            for (cell, &n) in row.iter().zip(&self.numeric) {
                let _ = write!(s, "<td{}>{}</td>", num_class(n), html(cell));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</tbody>\n</table>\n");
        s
    }
}

fn num_class(numeric: bool) -> &'static str {
    if numeric {
        " class=\"num\""
    } else {
        ""
    }
}

/// One row per group. `full` adds the columns that make the terminal table too wide:
/// models, tokens and wall time.
pub(crate) fn groups(groups: &[GroupSummary], full: bool) -> Table {
    let mut header = vec![
        "group",
        "rows",
        "graded",
        "passes",
        "pass rate",
        "95% CI",
        "cost",
        "$/task",
        "$/pass",
        "cache saved",
        "turns",
    ];
    let mut numeric = vec![
        false, true, true, true, true, true, true, true, true, true, true,
    ];
    if full {
        header.extend(["wall s", "tokens in", "tokens out", "models"]);
        numeric.extend([true, true, true, false]);
    }
    header.push("stop reasons");
    numeric.push(false);
    let rows = groups
        .iter()
        .map(|g| {
            let mut row = vec![
                g.label.clone(),
                g.rows.to_string(),
                g.graded.to_string(),
                g.passes.to_string(),
                format::pct(g.pass_rate()),
                format::interval(g.interval),
                format::total(g.cost, g.unpriced),
                format::money(g.cost_per_task()),
                format::money(g.cost_per_pass()),
                format::money(Some(g.cache_saved)),
                format::median(g.median_turns),
            ];
            if full {
                row.extend([
                    format::median(g.median_wall_ms.map(|ms| (ms / 100.0).round() / 10.0)),
                    g.input_tokens.to_string(),
                    g.output_tokens.to_string(),
                    g.models.join(", "),
                ]);
            }
            row.push(stop_reasons(g));
            row
        })
        .collect();
    Table {
        header,
        numeric,
        rows,
    }
}

/// What the groups spent besides money, one row per group: on a page, the groups table
/// with these columns too is wider than a 1024-pixel screen.
pub(crate) fn groups_effort(groups: &[GroupSummary]) -> Table {
    Table {
        header: vec![
            "group",
            "median wall s",
            "tokens in",
            "tokens out",
            "models",
        ],
        numeric: vec![false, true, true, true, false],
        rows: groups
            .iter()
            .map(|g| {
                vec![
                    g.label.clone(),
                    format::median(g.median_wall_ms.map(|ms| (ms / 100.0).round() / 10.0)),
                    g.input_tokens.to_string(),
                    g.output_tokens.to_string(),
                    g.models.join(", "),
                ]
            })
            .collect(),
    }
}

/// `completed 8, max_turns 2`.
pub(crate) fn stop_reasons(g: &GroupSummary) -> String {
    g.stop_reasons
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One row per pair of groups.
pub(crate) fn pairs(pairs: &[PairSummary]) -> Table {
    let header = vec![
        "A", "B", "paired", "wins", "losses", "ties", "A pass", "B pass", "diff", "p", "A $/pass",
        "B $/pass",
    ];
    let mut numeric = vec![true; header.len()];
    numeric[0] = false;
    numeric[1] = false;
    let rows = pairs
        .iter()
        .map(|p| {
            vec![
                p.a.clone(),
                p.b.clone(),
                p.paired.to_string(),
                p.wins.to_string(),
                p.losses.to_string(),
                p.ties.to_string(),
                format::pct(p.pass_rate_a()),
                format::pct(p.pass_rate_b()),
                format::points(p.diff()),
                format::p_value(p.p_value),
                format::money(p.cost_per_pass_a()),
                format::money(p.cost_per_pass_b()),
            ]
        })
        .collect();
    Table {
        header,
        numeric,
        rows,
    }
}

/// The flipped units of a pair that one side passed, in words (`t01@2 t03@1`).
pub(crate) fn flipped(p: &PairSummary, side: Side) -> Vec<String> {
    p.flips
        .iter()
        .filter(|f| f.passed == side)
        .map(|f| f.unit())
        .collect()
}

/// The terminal report: the two tables and the flipped units.
pub(crate) fn text(g: &[GroupSummary], p: &[PairSummary]) -> String {
    let mut s = String::new();
    s.push_str("Groups (pass rate over graded rows: pass, fail, error; unchecked rows left out)\n");
    s.push_str(&groups(g, false).text());
    s.push_str(
        "\nPairs (on the units both sides graded; wins: A passed and B did not; p: exact McNemar test)\n",
    );
    s.push_str(&pairs(p).text());
    let flipping: Vec<&PairSummary> = p.iter().filter(|p| !p.flips.is_empty()).collect();
    if !flipping.is_empty() {
        s.push_str("\nFlipped verdicts\n");
    }
    for pair in flipping {
        let _ = writeln!(s, "{} vs {}", pair.a, pair.b);
        for (side, label) in [(Side::A, &pair.a), (Side::B, &pair.b)] {
            let units = flipped(pair, side);
            if !units.is_empty() {
                let _ = writeln!(
                    s,
                    "  only {label} passed ({}): {}",
                    units.len(),
                    units.join(" ")
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            header: vec!["name", "n"],
            numeric: vec![false, true],
            rows: vec![
                vec!["a|b<c>".into(), "1".into()],
                vec!["long name".into(), "123".into()],
            ],
        }
    }

    #[test]
    fn text_aligns_columns() {
        assert_eq!(
            table().text(),
            "name         n\na|b<c>       1\nlong name  123\n"
        );
    }

    #[test]
    fn markdown_and_html_escape_cells() {
        let md = table().markdown();
        assert!(md.starts_with("| name | n |\n|---|---:|\n"), "{md}");
        assert!(md.contains("| a\\|b\\<c\\> | 1 |"), "{md}");
        let h = table().html("t");
        assert!(
            h.contains("<td>a|b&lt;c&gt;</td><td class=\"num\">1</td>"),
            "{h}"
        );
    }
}
