//! Reading a run's results.csv by column name: the rows compare needs, nothing else.
//! Columns the comparison does not use are ignored, so newer and older runs both read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rust_decimal::Decimal;

use super::CompareError;
use crate::report::{parse_results, ResultsError};
use crate::vocab::stop::Outcome;

/// Columns a results.csv must have for a comparison to mean anything.
const REQUIRED: [&str; 5] = ["run_id", "task_id", "outcome", "stop_reason", "cost_usd"];

/// Columns every row must fill (an unpriced model leaves cost_usd empty).
const FILLED: [&str; 4] = ["run_id", "task_id", "outcome", "stop_reason"];

/// One task's row, reduced to what the comparison uses.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub run_id: String,
    pub task_id: String,
    pub epoch: u32,
    pub variant: String,
    /// Matrix axis values by axis name (empty values left out).
    pub axes: BTreeMap<String, String>,
    pub model: String,
    pub outcome: Outcome,
    pub stop_reason: String,
    /// None when the model has no price.
    pub cost: Option<Decimal>,
    pub turns: Option<u64>,
    pub wall_ms: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// What prompt caching saved the row (empty in runs from before the column).
    pub cache_saved: Option<Decimal>,
    /// Where the row is, for warnings: the results file and its line.
    pub file: usize,
    pub line: u64,
}

impl Row {
    /// Graded rows carry a verdict; unchecked ones do not and stay out of pass rates.
    pub fn graded(&self) -> bool {
        self.outcome != Outcome::Unchecked
    }

    /// Only `pass` passes: an error counts against the side it happened to.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Pass
    }
}

/// One run folder's rows and the matrix axes its header names.
#[derive(Debug)]
pub(crate) struct Run {
    pub results: PathBuf,
    pub rows: Vec<Row>,
    pub axes: BTreeSet<String>,
}

/// Reads `dir/results.csv` (or `dir` itself when it is a file). `index` numbers the run
/// so rows can say where they came from.
pub(crate) fn read_run(
    dir: &Path,
    index: usize,
    warnings: &mut Vec<String>,
) -> Result<Run, CompareError> {
    let results = if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join(crate::report::files::RESULTS_CSV)
    };
    let bytes = std::fs::read(&results).map_err(|source| CompareError::Read {
        path: results.clone(),
        source,
    })?;
    let (rows, axes) = parse(&results, index, &bytes, warnings)?;
    Ok(Run {
        results,
        rows,
        axes,
    })
}

/// Parses the bytes of a results.csv with the shared reader: a malformed last line (a
/// run killed while writing it) is skipped with a warning; any other bad row is an
/// error naming the file and line.
pub(crate) fn parse(
    path: &Path,
    index: usize,
    bytes: &[u8],
    warnings: &mut Vec<String>,
) -> Result<(Vec<Row>, BTreeSet<String>), CompareError> {
    let file = parse_results(path, bytes, &REQUIRED, &FILLED).map_err(|e| match e {
        ResultsError::Read { path, source } => CompareError::Read { path, source },
        ResultsError::Empty(path) => CompareError::Empty(path),
        ResultsError::MissingColumn { path, column } => {
            CompareError::MissingColumn { path, column }
        }
        ResultsError::BadRow { path, line, detail } => CompareError::BadRow { path, line, detail },
        e @ ResultsError::Newer { .. } => CompareError::NewerFormat(e.to_string()),
    })?;
    warnings.extend(file.cut_off);
    let rows = file
        .rows
        .into_iter()
        .map(|r| Row {
            run_id: r.run_id,
            task_id: r.task_id,
            epoch: r.epoch,
            variant: r.variant,
            axes: r.axes,
            model: r.model,
            outcome: r.outcome.unwrap_or(Outcome::Unchecked),
            stop_reason: r.stop_reason,
            cost: r.cost_usd,
            turns: r.turns,
            wall_ms: r.wall_ms,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_saved: r.cache_saved_usd,
            file: index,
            line: r.line,
        })
        .collect();
    Ok((rows, file.axes.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = Result<(Vec<Row>, BTreeSet<String>), CompareError>;

    fn read(text: &str) -> (Parsed, Vec<String>) {
        let mut warnings = Vec::new();
        let r = parse(
            Path::new("r/results.csv"),
            0,
            text.as_bytes(),
            &mut warnings,
        );
        (r, warnings)
    }

    const OLD: &str = "run_id,task_id,model,outcome,stop_reason,cost_usd,turns,extra\n";

    #[test]
    fn old_runs_have_no_variant_and_epoch_one() {
        let text =
            format!("{OLD}r1,t1,m,pass,completed,0.5,3,x\nr1,t2,m,unchecked,max_turns,,7,y\n");
        let (r, warnings) = read(&text);
        let (rows, axes) = r.unwrap();
        assert!(warnings.is_empty());
        assert!(axes.is_empty());
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].epoch, rows[0].variant.as_str()), (1, ""));
        assert_eq!(rows[0].cost, Some(Decimal::new(5, 1)));
        assert!(rows[0].passed() && rows[0].graded());
        assert_eq!(rows[1].cost, None);
        assert!(!rows[1].graded());
        assert_eq!(rows[1].turns, Some(7));
        assert_eq!(rows[1].line, 3);
    }

    #[test]
    fn matrix_columns_become_axes() {
        let text = "task_id,run_id,outcome,stop_reason,cost_usd,variant,epoch,matrix.model,matrix.toolset\n\
                    t1,r,fail,completed,1,\"model=a,toolset=b\",2,a,b\n";
        let (r, _) = read(text);
        let (rows, axes) = r.unwrap();
        assert_eq!(axes.into_iter().collect::<Vec<_>>(), ["model", "toolset"]);
        assert_eq!(rows[0].epoch, 2);
        assert_eq!(rows[0].variant, "model=a,toolset=b");
        assert_eq!(rows[0].axes["toolset"], "b");
    }

    #[test]
    fn a_cut_last_line_is_skipped_with_a_warning() {
        let text = format!("{OLD}r1,t1,m,pass,completed,0.5,3,x\nr1,t2,m,pa");
        let (r, warnings) = read(&text);
        assert_eq!(r.unwrap().0.len(), 1);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("r/results.csv:3: skipped the last line"),
            "{warnings:?}"
        );
        // Complete fields but no line end: still treated as cut short.
        let text = format!("{OLD}r1,t1,m,pass,completed,0.5,3,x\nr1,t2,m,pass,completed,0.5,3,x");
        let (r, warnings) = read(&text);
        assert_eq!(r.unwrap().0.len(), 1);
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn a_bad_row_before_the_last_is_an_error_naming_file_and_line() {
        let text =
            format!("{OLD}r1,t1,m,passed,completed,0.5,3,x\nr1,t2,m,pass,completed,0.5,3,x\n");
        let (r, _) = read(&text);
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with("r/results.csv:2: outcome \"passed\""), "{e}");
        let text = format!("{OLD}r1,t1,m,pass,completed,abc,3,x\nr1,t2,m,pass,completed,0.5,3,x\n");
        let e = read(&text).0.unwrap_err().to_string();
        assert!(e.contains("cost_usd \"abc\""), "{e}");
        let text = format!("{OLD}r1,t1,m,pass\nr1,t2,m,pass,completed,0.5,3,x\n");
        let e = read(&text).0.unwrap_err().to_string();
        assert!(e.contains("4 fields where the header has 8"), "{e}");
    }

    #[test]
    fn missing_columns_and_empty_files_are_errors() {
        let e = read("run_id,task_id,outcome\n").0.unwrap_err().to_string();
        assert!(e.contains("no stop_reason column"), "{e}");
        let e = read("").0.unwrap_err().to_string();
        assert!(e.contains("is empty"), "{e}");
    }
}
