//! Reading a results-format file back: the one reader every part of agentbatch uses,
//! so a row cut off by a kill is handled in one place.

use std::path::{Path, PathBuf};

use super::{axis_column, Column, ResultRow, AXIS_PREFIX, TABLE};
use crate::report::files::{newer_format, newer_format_message};

/// A results-format file could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not even a header: a run that never started writing.
    #[error("{} is empty (not even a header)", .0.display())]
    Empty(PathBuf),
    #[error("{} has no {column} column", path.display())]
    MissingColumn { path: PathBuf, column: &'static str },
    /// A row before the last is unreadable: the file was changed by hand, or damaged.
    #[error("{}:{line}: {detail}", path.display())]
    BadRow {
        path: PathBuf,
        line: u64,
        detail: String,
    },
    /// The run folder it is in was written by a newer agentbatch (its run.json says so).
    #[error("{}", newer_format_message(path, *found))]
    Newer { path: PathBuf, found: u32 },
}

/// A results-format file read back: its header, its rows, and what was left out.
#[derive(Debug, Clone)]
pub(crate) struct ResultsFile {
    pub header: csv::StringRecord,
    /// The matrix axes the header names, in column order.
    pub axes: Vec<String>,
    pub rows: Vec<ResultRow>,
    /// Why the last line was left out, when it was: a run killed while writing it
    /// leaves it cut short. Readers show it as a warning, or ignore it.
    pub cut_off: Option<String>,
}

/// Reads a results-format file (results.csv or superseded.csv) by column name: columns
/// it does not know are ignored, and a column it lacks reads as empty, except the
/// `required` ones, which must be there, and a `filled` one must hold a value in every
/// row. A malformed last
/// line (a run killed while writing it) is left out and said in
/// [`ResultsFile::cut_off`]; so is a last line without its newline, since a row cut at
/// a field boundary would otherwise read as complete. Any other bad row is an error
/// naming the file and line.
pub(crate) fn read_results(
    path: &Path,
    required: &[&'static str],
    filled: &[&'static str],
) -> Result<ResultsFile, ResultsError> {
    let bytes = std::fs::read(path).map_err(|source| ResultsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_results(path, &bytes, required, filled)
}

/// [`read_results`] on bytes already read; `path` names them in messages.
pub(crate) fn parse_results(
    path: &Path,
    bytes: &[u8],
    required: &[&'static str],
    filled: &[&'static str],
) -> Result<ResultsFile, ResultsError> {
    // The folder's format is in run.json beside the file (none beside a file given on
    // its own: it is read by column name, as any).
    if let Some(found) = path.parent().and_then(newer_format) {
        return Err(ResultsError::Newer {
            path: path.to_path_buf(),
            found,
        });
    }
    let bad_row = |line: u64, detail: String| ResultsError::BadRow {
        path: path.to_path_buf(),
        line,
        detail,
    };
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(false)
        .from_reader(bytes);
    let mut records = reader.records();
    let header = match records.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => return Err(bad_row(1, format!("unreadable header: {e}"))),
        None => return Err(ResultsError::Empty(path.to_path_buf())),
    };
    let header: csv::StringRecord = header.iter().map(str::trim).collect();
    for &column in required {
        if !header.iter().any(|h| h == column) {
            return Err(ResultsError::MissingColumn {
                path: path.to_path_buf(),
                column,
            });
        }
    }
    let mut axes = Vec::new();
    for name in header.iter() {
        if let Some(axis) = name.strip_prefix(AXIS_PREFIX) {
            if !axis.is_empty() && !axes.iter().any(|a| a == axis) {
                axes.push(axis.to_string());
            }
        }
    }

    // Each field's column, found once: unknown ones (the axes, a newer agentbatch's)
    // are skipped; a known one named twice makes every row unreadable.
    let columns: Vec<Option<&Column>> = header
        .iter()
        .map(|h| TABLE.iter().find(|c| c.name == h))
        .collect();
    let twice = columns.iter().enumerate().find_map(|(i, c)| {
        let c = (*c)?;
        columns[..i]
            .iter()
            .any(|o| o.is_some_and(|o| o.name == c.name))
            .then_some(c.name)
    });
    let fields = Fields {
        header: &header,
        columns: &columns,
        twice,
        axes: &axes,
        filled,
    };
    let records: Vec<_> = records.collect();
    let cut_short = !bytes.ends_with(b"\n");
    let last = records.len().saturating_sub(1);
    let mut rows = Vec::with_capacity(records.len());
    let mut cut_off = None;
    for (i, record) in records.into_iter().enumerate() {
        let (line, parsed) = match record {
            Ok(r) => {
                let line = r.position().map_or(0, |p| p.line());
                (line, fields.row(r, line))
            }
            Err(e) => (e.position().map_or(0, |p| p.line()), Err(e.to_string())),
        };
        match parsed {
            Ok(_) if i == last && cut_short => {
                cut_off = Some(format!(
                    "{}:{line}: skipped the last line: it has no line end, so it may be cut short (a run killed while writing it)",
                    path.display()
                ))
            }
            Ok(row) => rows.push(row),
            Err(detail) if i == last => {
                cut_off = Some(format!(
                    "{}:{line}: skipped the last line, which is incomplete (a run killed while writing it?): {detail}",
                    path.display()
                ))
            }
            Err(detail) => return Err(bad_row(line, detail)),
        }
    }
    Ok(ResultsFile {
        header,
        axes,
        rows,
        cut_off,
    })
}

/// How a file's fields are read: its header, each field's column, and what every row
/// must have.
struct Fields<'a> {
    header: &'a csv::StringRecord,
    columns: &'a [Option<&'static Column>],
    /// A column the header names twice.
    twice: Option<&'static str>,
    axes: &'a [String],
    filled: &'a [&'static str],
}

impl Fields<'_> {
    /// One record as a row, or what is wrong with it. Fields are read in header order
    /// and the first bad one, named with its column, stops the row.
    fn row(&self, record: csv::StringRecord, line: u64) -> Result<ResultRow, String> {
        let header = self.header;
        if record.len() != header.len() {
            return Err(format!(
                "{} fields where the header has {}",
                record.len(),
                header.len()
            ));
        }
        for &name in self.filled {
            if let Some(i) = header.iter().position(|h| h == name) {
                if record[i].is_empty() {
                    return Err(format!("{name} is empty"));
                }
            }
        }
        if let Some(name) = self.twice {
            return Err(format!("duplicate field `{name}`"));
        }
        let mut row = ResultRow::default();
        for (column, text) in self.columns.iter().zip(record.iter()) {
            if let Some(c) = column {
                (c.read)(&mut row, text)
                    .map_err(|()| format!("{} \"{text}\" {}", c.name, c.bad))?;
            }
        }
        for axis in self.axes {
            if let Some(i) = header.iter().position(|h| h == axis_column(axis)) {
                if !record[i].is_empty() {
                    row.axes.insert(axis.clone(), record[i].to_string());
                }
            }
        }
        row.fields = record;
        row.line = line;
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::stop::Outcome;

    const P: &str = "r/results.csv";

    fn parse(text: &str) -> Result<ResultsFile, ResultsError> {
        let need = ["task_id", "outcome"];
        parse_results(Path::new(P), text.as_bytes(), &need, &need)
    }

    #[test]
    fn a_cut_off_last_row_is_left_out_and_said() {
        let head = "task_id,outcome,turns\n";
        let file = parse(&format!("{head}a,pass,1\nb,pa")).unwrap();
        assert_eq!(file.rows.len(), 1);
        let why = file.cut_off.unwrap();
        assert!(
            why.starts_with("r/results.csv:3: skipped the last line"),
            "{why}"
        );
        // Complete fields but no line end: may be cut at a field boundary.
        let file = parse(&format!("{head}a,pass,1\nb,pass,12")).unwrap();
        assert_eq!((file.rows.len(), file.cut_off.is_some()), (1, true));
        // The same damage before the last row is an error naming the line.
        let e = parse(&format!("{head}a,pass\nb,pass,1\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "r/results.csv:2: 2 fields where the header has 3"
        );
    }

    #[test]
    fn an_empty_file_and_a_header_alone() {
        let e = parse("").unwrap_err();
        assert!(matches!(e, ResultsError::Empty(_)), "{e}");
        let file = parse("task_id,outcome\n").unwrap();
        assert!(file.rows.is_empty() && file.cut_off.is_none());
    }

    #[test]
    fn a_missing_column_is_named_unless_the_reader_can_do_without() {
        let e = parse("task_id,turns\n").unwrap_err();
        assert_eq!(e.to_string(), "r/results.csv has no outcome column");
        // Columns nobody requires read as empty; an old run's epoch is 1.
        let file = parse("task_id,outcome\na,fail\n").unwrap();
        let r = &file.rows[0];
        assert_eq!((r.epoch, r.turns, r.cost_usd), (1, None, None));
        assert_eq!(
            r.ttft_ms, None,
            "runs from before streaming have no ttft_ms"
        );
        assert_eq!(r.outcome, Some(Outcome::Fail));
    }

    #[test]
    fn bad_values_name_their_column() {
        let e = parse("task_id,outcome,cost_usd\na,passed,1\nb,pass,1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "r/results.csv:2: outcome \"passed\" is not one of pass, fail, error, unchecked"
        );
        let e = parse("task_id,outcome,cost_usd\na,pass,abc\nb,pass,1\n").unwrap_err();
        assert!(e
            .to_string()
            .contains("cost_usd \"abc\" is not a decimal number"));
        let e = parse("task_id,outcome\n,pass\nb,pass\n").unwrap_err();
        assert!(e.to_string().ends_with(":2: task_id is empty"), "{e}");
    }

    /// Every typed column names itself when its value is bad, whatever its kind: the
    /// lists of decimal columns once left out cache_saved_usd and batch_saved_usd.
    #[test]
    fn a_bad_value_in_any_typed_column_names_the_column() {
        for (column, value, what) in [
            ("cache_saved_usd", "x", "is not a decimal number"),
            ("batch_saved_usd", "1.2.3", "is not a decimal number"),
            ("cost_usd", "$1", "is not a decimal number"),
            ("ttft_ms", "-1", "is not a whole number"),
            ("check_exit_code", "1.5", "is not a whole number"),
            ("epoch", "0", "is not a whole number from 1"),
        ] {
            let text = format!("task_id,outcome,{column}\na,pass,{value}\nb,pass,\n");
            let e = parse(&text).unwrap_err().to_string();
            assert_eq!(e, format!("r/results.csv:2: {column} \"{value}\" {what}"));
        }
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        let e = read_results(&path, &[], &[]).unwrap_err();
        assert!(e
            .to_string()
            .starts_with(&format!("cannot read {}", path.display())));
    }
}
