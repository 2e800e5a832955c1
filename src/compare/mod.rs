//! `agentbatch compare`: a paired comparison of variants on the tasks both sides ran.
//!
//! Rows of one or more runs' results.csv are split into groups (the variants, the runs,
//! or the values of one matrix axis with `--by`) and paired on units (task and epoch,
//! plus the other axes' values with `--by`). Per pair it counts wins, losses and ties,
//! tests them with the exact McNemar test and lists the flipped units; per group it
//! reports the pass rate with its Wilson interval, cost and stop reasons. It writes
//! compare.csv, compare-flips.csv, compare.md and a self-contained compare.html.

mod csv_files;
mod escape;
mod figures;
mod format;
mod group;
mod html;
mod markdown;
mod read;
mod svg;
mod tables;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use csv_files::{FLIP_COLUMNS, PAIR_COLUMNS};
pub use figures::{Flip, GroupSummary, PairSummary, Side};
pub use group::RUN_AXIS;

/// What to compare and where to write the reports.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Run folders (each holding results.csv), or results.csv files themselves.
    pub runs: Vec<PathBuf>,
    /// Compare the values of this matrix axis (or `run`) instead of whole variants.
    pub by: Option<String>,
    /// Where compare.csv, compare-flips.csv, compare.md and compare.html go.
    pub out_dir: PathBuf,
}

/// The figures of a comparison and the files it wrote.
#[derive(Debug, Clone)]
pub struct CompareReport {
    /// The run folders as given.
    pub runs: Vec<PathBuf>,
    pub by: Option<String>,
    /// In a stable order: by run as given, then by label.
    pub groups: Vec<GroupSummary>,
    /// Every pair (A, B) of groups with A before B in `groups`.
    pub pairs: Vec<PairSummary>,
    /// Things the user should know that did not stop the comparison (a cut last line,
    /// superseded rows, rows without the compared axis).
    pub warnings: Vec<String>,
    pub csv: PathBuf,
    pub flips_csv: PathBuf,
    pub markdown: PathBuf,
    pub html: PathBuf,
}

impl CompareReport {
    /// The tables for the terminal.
    pub fn table(&self) -> String {
        tables::text(&self.groups, &self.pairs)
    }

    /// The files written, in the order they are described to the user.
    pub fn files(&self) -> [&Path; 4] {
        [&self.csv, &self.flips_csv, &self.markdown, &self.html]
    }
}

/// Why a comparison could not be made; each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("no run folder given: name one or more run folders (each holds results.csv)")]
    NoRuns,
    #[error("cannot read {}: {source}; give a run folder that holds results.csv", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is empty (not even a header): give a run that started", .0.display())]
    Empty(PathBuf),
    #[error("{} has no {column} column: is it an agentbatch results.csv?", path.display())]
    MissingColumn { path: PathBuf, column: &'static str },
    #[error("{}:{line}: {detail}; fix or remove that row", path.display())]
    BadRow {
        path: PathBuf,
        line: u64,
        detail: String,
    },
    /// A run folder written by a newer agentbatch.
    #[error("{0}")]
    NewerFormat(String),
    #[error("run id \"{run_id}\" is in both {} and {}: give each run once", first.display(), second.display())]
    SameRun {
        run_id: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("unknown --by axis \"{axis}\": these runs have {}", available.join(", "))]
    UnknownAxis {
        axis: String,
        available: Vec<String>,
    },
    #[error("fewer than two groups to compare (found {}): {hint}", if found.is_empty() { "none".to_string() } else { found.join(", ") })]
    TooFewGroups { found: Vec<String>, hint: String },
    #[error("cannot write {}: {detail}; choose another --out folder", path.display())]
    Write { path: PathBuf, detail: String },
}

/// Reads the runs, compares their groups, writes the four report files into
/// `opts.out_dir` (created if missing) and returns the figures.
pub fn compare(opts: &CompareOptions) -> Result<CompareReport, CompareError> {
    if opts.runs.is_empty() {
        return Err(CompareError::NoRuns);
    }
    let mut warnings = Vec::new();
    let mut runs = Vec::with_capacity(opts.runs.len());
    for (i, dir) in opts.runs.iter().enumerate() {
        runs.push(read::read_run(dir, i, &mut warnings)?);
    }
    check_distinct(&runs)?;
    let groups = group::group(&runs, opts.by.as_deref(), &mut warnings)?;
    let summaries: Vec<GroupSummary> = groups.iter().map(figures::summarize).collect();
    let mut pairs = Vec::new();
    for (i, a) in groups.iter().enumerate() {
        for b in &groups[i + 1..] {
            pairs.push(figures::pair(a, b));
        }
    }

    let out = &opts.out_dir;
    std::fs::create_dir_all(out).map_err(|e| CompareError::Write {
        path: out.clone(),
        detail: e.to_string(),
    })?;
    let report = CompareReport {
        runs: opts.runs.clone(),
        by: opts.by.clone(),
        groups: summaries,
        pairs,
        warnings,
        csv: out.join("compare.csv"),
        flips_csv: out.join("compare-flips.csv"),
        markdown: out.join("compare.md"),
        html: out.join("compare.html"),
    };
    let write_err = |path: &Path, detail: String| CompareError::Write {
        path: path.to_path_buf(),
        detail,
    };
    csv_files::write_pairs(&report.csv, &report.pairs)
        .map_err(|e| write_err(&report.csv, e.to_string()))?;
    csv_files::write_flips(&report.flips_csv, &report.pairs)
        .map_err(|e| write_err(&report.flips_csv, e.to_string()))?;
    std::fs::write(&report.markdown, markdown::document(&report))
        .map_err(|e| write_err(&report.markdown, e.to_string()))?;
    std::fs::write(&report.html, html::page(&report))
        .map_err(|e| write_err(&report.html, e.to_string()))?;
    Ok(report)
}

/// The same run given twice (or copied) would merge into one group or pair with itself.
fn check_distinct(runs: &[read::Run]) -> Result<(), CompareError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, run) in runs.iter().enumerate() {
        for row in &run.rows {
            match seen.get(row.run_id.as_str()) {
                Some(&j) if j != i => {
                    return Err(CompareError::SameRun {
                        run_id: row.run_id.clone(),
                        first: runs[j].results.clone(),
                        second: run.results.clone(),
                    })
                }
                Some(_) => {}
                None => {
                    seen.insert(&row.run_id, i);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "run_id,task_id,model,outcome,stop_reason,cost_usd,turns,variant,epoch,matrix.toolset\n";

    fn run_file(dir: &Path, name: &str, rows: &[&str]) -> PathBuf {
        let run = dir.join(name);
        std::fs::create_dir_all(&run).unwrap();
        let mut text = HEADER.to_string();
        for r in rows {
            text.push_str(r);
            text.push('\n');
        }
        std::fs::write(run.join("results.csv"), text).unwrap();
        run
    }

    fn options(dir: &Path, runs: Vec<PathBuf>, by: Option<&str>) -> CompareOptions {
        CompareOptions {
            runs,
            by: by.map(str::to_string),
            out_dir: dir.join("out"),
        }
    }

    #[test]
    fn writes_csv_md_and_html_with_escaped_user_text() {
        let dir = tempfile::tempdir().unwrap();
        let run = run_file(
            dir.path(),
            "r1",
            &[
                "r1,t1,m,pass,completed,0.1,3,toolset=<b>,1,<b>",
                "r1,t1,m,fail,max_turns,0.1,3,toolset=a|b,1,a|b",
                "r1,t2,m,pass,completed,0.1,3,toolset=<b>,1,<b>",
                "r1,t2,m,pass,completed,0.1,3,toolset=a|b,1,a|b",
                "r1,t3,m,unchecked,completed,0.1,3,toolset=<b>,1,<b>",
                "r1,t3,m,unchecked,completed,0.1,3,toolset=a|b,1,a|b",
            ],
        );
        let r = compare(&options(dir.path(), vec![run], None)).unwrap();
        assert_eq!(r.groups.len(), 2);
        assert_eq!(r.groups[0].label, "toolset=<b>");
        assert_eq!((r.groups[0].rows, r.groups[0].graded), (3, 2));

        let csv_text = std::fs::read_to_string(&r.csv).unwrap();
        let mut lines = csv_text.lines();
        assert_eq!(lines.next(), Some(PAIR_COLUMNS.join(",").as_str()));
        assert_eq!(
            lines.next(),
            Some("toolset=<b>,toolset=a|b,2,1,0,1,1,0.5,0.5,1,0.1,0.2,a:t1@1")
        );
        let flips = std::fs::read_to_string(&r.flips_csv).unwrap();
        assert_eq!(
            flips,
            "a,b,task_id,epoch,others,passed\ntoolset=<b>,toolset=a|b,t1,1,,a\n"
        );

        let md = std::fs::read_to_string(&r.markdown).unwrap();
        assert!(md.contains("| toolset=\\<b\\> | toolset=a\\|b | 2 | 1 | 0 | 1 | 100.0% | 50.0% | +50.0 pp | 1 | $0.1 | $0.2 |"), "{md}");
        assert!(
            md.contains("- only toolset=\\<b\\> passed (1): t1@1"),
            "{md}"
        );

        let page = std::fs::read_to_string(&r.html).unwrap();
        assert!(!page.contains("<b>"), "user text must be escaped");
        assert!(page.contains("toolset=&lt;b&gt;"));
        assert!(!page.contains("<script"));
        assert!(!page.contains("src="), "nothing is fetched");
        assert_eq!(
            page.matches("href=").count(),
            1,
            "only the empty data: icon"
        );

        let table = r.table();
        assert!(
            table.contains("only toolset=<b> passed (1): t1@1"),
            "{table}"
        );
        assert!(r.files().iter().all(|p| p.exists()));
    }

    #[test]
    fn the_same_run_twice_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = run_file(dir.path(), "r1", &["r1,t1,m,pass,completed,0.1,3,,1,"]);
        let b = dir.path().join("copy");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::copy(a.join("results.csv"), b.join("results.csv")).unwrap();
        let e = compare(&options(dir.path(), vec![a, b], None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("run id \"r1\" is in both"), "{e}");
        assert!(!dir.path().join("out").exists());
    }

    #[test]
    fn two_runs_compare_as_runs() {
        let dir = tempfile::tempdir().unwrap();
        let a = run_file(
            dir.path(),
            "r1",
            &[
                "r1,t1,m,pass,completed,0.1,3,,1,",
                "r1,t2,m,pass,completed,0.1,3,,1,",
            ],
        );
        let b = run_file(
            dir.path(),
            "r2",
            &[
                "r2,t1,m,fail,completed,,3,,1,",
                "r2,t2,m,pass,completed,,3,,1,",
            ],
        );
        let r = compare(&options(dir.path(), vec![b, a], None)).unwrap();
        let labels: Vec<&str> = r.groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(labels, ["run=r2", "run=r1"]);
        let p = &r.pairs[0];
        assert_eq!((p.wins, p.losses, p.ties), (0, 1, 1));
        assert_eq!(p.cost_per_pass_a(), None);
        assert!(r.table().contains("run=r2  run=r1"), "{}", r.table());
    }
}
