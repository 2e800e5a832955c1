//! Reading a run's results.csv by column name: the rows compare needs, nothing else.
//! Columns the comparison does not use are ignored, so newer and older runs both read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rust_decimal::Decimal;

use super::CompareError;
use crate::vocab::stop::Outcome;

/// The prefix of the columns that hold one matrix axis each (`matrix.model`).
const AXIS_PREFIX: &str = "matrix.";

/// Columns a results.csv must have for a comparison to mean anything.
const REQUIRED: [&str; 5] = ["run_id", "task_id", "outcome", "stop_reason", "cost_usd"];

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
        dir.join("results.csv")
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

/// Column positions by name.
struct Columns {
    by_name: HashMap<String, usize>,
    count: usize,
}

impl Columns {
    fn get(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
}

/// Parses the bytes of a results.csv. A malformed last line (a run killed while writing
/// it) is skipped with a warning; so is a last line without its newline, since a row cut
/// at a field boundary would otherwise read as a complete row. Any other bad row is an
/// error naming the file and line.
pub(crate) fn parse(
    path: &Path,
    index: usize,
    bytes: &[u8],
    warnings: &mut Vec<String>,
) -> Result<(Vec<Row>, BTreeSet<String>), CompareError> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(false)
        .from_reader(bytes);
    let mut records = reader.byte_records();
    let header = match records.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => {
            return Err(bad_row(path, 1, format!("unreadable header: {e}")));
        }
        None => return Err(CompareError::Empty(path.to_path_buf())),
    };
    let mut by_name = HashMap::new();
    let mut axes = BTreeSet::new();
    for (i, name) in header.iter().enumerate() {
        let name = String::from_utf8_lossy(name).trim().to_string();
        if let Some(axis) = name.strip_prefix(AXIS_PREFIX) {
            if !axis.is_empty() {
                axes.insert(axis.to_string());
            }
        }
        by_name.entry(name).or_insert(i);
    }
    let columns = Columns {
        by_name,
        count: header.len(),
    };
    for name in REQUIRED {
        if columns.get(name).is_none() {
            return Err(CompareError::MissingColumn {
                path: path.to_path_buf(),
                column: name,
            });
        }
    }

    let records: Vec<_> = records.collect();
    let cut_short = !bytes.ends_with(b"\n");
    let last = records.len().saturating_sub(1);
    let mut rows = Vec::with_capacity(records.len());
    for (i, record) in records.into_iter().enumerate() {
        let parsed = match record {
            Ok(r) => {
                let line = r.position().map(|p| p.line()).unwrap_or(0);
                (line, parse_row(&columns, &axes, &r, index, line))
            }
            Err(e) => {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                (line, Err(e.to_string()))
            }
        };
        match parsed {
            (line, Ok(_)) if i == last && cut_short => warnings.push(format!(
                "{}:{line}: skipped the last line: it has no line end, so it may be cut short (a run killed while writing it)",
                path.display()
            )),
            (_, Ok(row)) => rows.push(row),
            (line, Err(detail)) if i == last => warnings.push(format!(
                "{}:{line}: skipped the last line, which is incomplete (a run killed while writing it?): {detail}",
                path.display()
            )),
            (line, Err(detail)) => return Err(bad_row(path, line, detail)),
        }
    }
    Ok((rows, axes))
}

fn bad_row(path: &Path, line: u64, detail: String) -> CompareError {
    CompareError::BadRow {
        path: path.to_path_buf(),
        line,
        detail,
    }
}

fn parse_row(
    columns: &Columns,
    axes: &BTreeSet<String>,
    record: &csv::ByteRecord,
    file: usize,
    line: u64,
) -> Result<Row, String> {
    if record.len() != columns.count {
        return Err(format!(
            "{} fields where the header has {}",
            record.len(),
            columns.count
        ));
    }
    let field = |name: &str| -> Result<String, String> {
        match columns.get(name).and_then(|i| record.get(i)) {
            Some(bytes) => std::str::from_utf8(bytes)
                .map(str::to_string)
                .map_err(|_| format!("{name} is not UTF-8")),
            None => Ok(String::new()),
        }
    };
    let required = |name: &str| -> Result<String, String> {
        let value = field(name)?;
        if value.is_empty() {
            Err(format!("{name} is empty"))
        } else {
            Ok(value)
        }
    };
    let count = |name: &str| -> Result<Option<u64>, String> {
        let value = field(name)?;
        if value.is_empty() {
            return Ok(None);
        }
        value
            .parse()
            .map(Some)
            .map_err(|_| format!("{name} \"{value}\" is not a whole number"))
    };

    let outcome_text = required("outcome")?;
    let outcome = parse_outcome(&outcome_text).ok_or_else(|| {
        format!("outcome \"{outcome_text}\" is not one of pass, fail, error, unchecked")
    })?;
    let cost_text = field("cost_usd")?;
    let cost = if cost_text.is_empty() {
        None
    } else {
        Some(
            Decimal::from_str(&cost_text)
                .map_err(|_| format!("cost_usd \"{cost_text}\" is not a decimal number"))?,
        )
    };
    let epoch_text = field("epoch")?;
    let epoch = if epoch_text.is_empty() {
        1
    } else {
        match epoch_text.parse::<u32>() {
            Ok(e) if e >= 1 => e,
            _ => {
                return Err(format!(
                    "epoch \"{epoch_text}\" is not a whole number from 1"
                ))
            }
        }
    };
    let mut row_axes = BTreeMap::new();
    for axis in axes {
        let value = field(&format!("{AXIS_PREFIX}{axis}"))?;
        if !value.is_empty() {
            row_axes.insert(axis.clone(), value);
        }
    }
    Ok(Row {
        run_id: required("run_id")?,
        task_id: required("task_id")?,
        epoch,
        variant: field("variant")?,
        axes: row_axes,
        model: field("model")?,
        outcome,
        stop_reason: required("stop_reason")?,
        cost,
        turns: count("turns")?,
        wall_ms: count("wall_ms")?,
        input_tokens: count("input_tokens")?,
        output_tokens: count("output_tokens")?,
        file,
        line,
    })
}

fn parse_outcome(s: &str) -> Option<Outcome> {
    [
        Outcome::Pass,
        Outcome::Fail,
        Outcome::Error,
        Outcome::Unchecked,
    ]
    .into_iter()
    .find(|o| o.as_str() == s)
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
