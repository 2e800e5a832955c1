//! SWE-bench predictions: the JSONL file the official evaluation harness takes, one
//! `{"instance_id", "model_name_or_path", "model_patch"}` object per line. The harness
//! keys predictions by instance id, so one file holds one attempt per task: one epoch
//! (`--epoch`, 1 by default) and one variant. A run with a matrix gets one file per
//! variant (`<stem>.<variant>.jsonl` beside `--out`), or only the one `--variant` names.
//! A task run without a patch (never started, stopped before its patch was taken, or
//! without a repository) has no prediction, and the notes say which.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::run::Run;
use super::write::{exports_dir, write_whole};
use super::{counted, some_of, ExportError, Exported};
use crate::report::{read_patch, ResultRow};

/// What `agentbatch export swebench-predictions` was asked.
#[derive(Debug, Clone)]
pub struct PredictionsOptions {
    /// The run folder (or its results.csv).
    pub run: PathBuf,
    /// The file (a `.jsonl`); default `<run>/exports/predictions.jsonl`.
    pub out: Option<PathBuf>,
    /// `model_name_or_path` instead of each task's model.
    pub model_name: Option<String>,
    /// Only this variant (its label `axis=value,...` or its file-name form).
    pub variant: Option<String>,
    /// The epoch whose attempts are written.
    pub epoch: u32,
}

/// One line of the file, its keys in the order the harness's own examples use.
#[derive(Serialize)]
struct Prediction<'a> {
    instance_id: &'a str,
    model_name_or_path: String,
    model_patch: String,
}

/// The rows of one variant, and the names it goes by.
struct Variant<'a> {
    /// `axis=value,...`; empty without a matrix.
    label: String,
    /// The label made safe for a file name.
    slug: String,
    rows: Vec<&'a ResultRow>,
}

/// Writes the predictions file (or one per variant); what was written and left out.
pub fn predictions(opts: &PredictionsOptions) -> Result<Exported, ExportError> {
    let run = Run::read(&opts.run)?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| exports_dir(&run.dir).join("predictions.jsonl"));
    let stem = out
        .to_str()
        .and_then(|s| s.strip_suffix(".jsonl"))
        .filter(|s| !s.is_empty() && !s.ends_with('/'))
        .ok_or_else(|| {
            ExportError::Usage(format!(
                "{}: the SWE-bench harness reads a file named *.jsonl as one prediction per line: name the --out file <name>.jsonl",
                out.display()
            ))
        })?
        .to_string();
    let variants = chosen(&run, opts)?;
    let matrix = run.rows.iter().any(|r| !r.variant.is_empty());
    let several = variants.len() > 1;
    let mut done = Exported {
        notes: run.notes.clone(),
        ..Exported::default()
    };
    let mut no_patch = Vec::new();
    let mut not_text = Vec::new();
    for v in &variants {
        let path = if several {
            PathBuf::from(format!("{stem}.{}.jsonl", v.slug))
        } else {
            out.clone()
        };
        let mut text = String::new();
        let mut count = 0;
        for row in by_instance(&v.rows, &v.label, &mut done.notes) {
            let Some(patch) = read_patch(&run.dir, &row.patch)? else {
                no_patch.push(named(row, &v.label));
                continue;
            };
            let Ok(model_patch) = String::from_utf8(patch) else {
                not_text.push(named(row, &v.label));
                continue;
            };
            let model = opts.model_name.as_deref().unwrap_or(&row.model);
            let line = Prediction {
                instance_id: &row.task_id,
                model_name_or_path: if matrix && (several || opts.model_name.is_none()) {
                    format!("{model}+{}", v.label)
                } else {
                    model.to_string()
                },
                model_patch,
            };
            // Strings and a struct of strings: encoding cannot fail.
            text.push_str(&serde_json::to_string(&line).unwrap_or_default());
            text.push('\n');
            count += 1;
        }
        write_whole(&path, text.as_bytes())?;
        let of = if v.label.is_empty() {
            String::new()
        } else {
            format!(" (variant {})", v.label)
        };
        done.summary.push(format!(
            "{}: {}{of}, epoch {}",
            path.display(),
            counted(count, "prediction", "predictions"),
            opts.epoch
        ));
        done.files.push(path);
    }
    if !no_patch.is_empty() {
        done.notes.push(format!(
            "left out {} without a patch (never started, stopped before their patch was taken, or without a repository): {}",
            counted(no_patch.len(), "task run", "task runs"),
            some_of(&no_patch)
        ));
    }
    if !not_text.is_empty() {
        done.notes.push(format!(
            "left out {} whose patch is not UTF-8 text, which a prediction cannot carry: {}",
            counted(not_text.len(), "task run", "task runs"),
            some_of(&not_text)
        ));
    }
    let unnamed = run.unnamed_transcripts()?;
    if !unnamed.is_empty() {
        done.notes.push(format!(
            "{} a transcript but no row in results.csv (running when the run was killed; `run --resume` runs it again): no prediction for {}",
            counted(unnamed.len(), "task run has", "task runs have"),
            some_of(&unnamed)
        ));
    }
    Ok(done)
}

/// How a left-out task run is named in a note.
fn named(row: &ResultRow, label: &str) -> String {
    if label.is_empty() {
        row.task_id.clone()
    } else {
        format!("{} ({label})", row.task_id)
    }
}

/// The variants to write, in label order: the epoch's rows of each, or only the one
/// asked for.
fn chosen<'a>(run: &'a Run, opts: &PredictionsOptions) -> Result<Vec<Variant<'a>>, ExportError> {
    let mut by_label: BTreeMap<&str, Vec<&ResultRow>> = BTreeMap::new();
    for row in run.rows.iter().filter(|r| r.epoch == opts.epoch) {
        by_label.entry(&row.variant).or_default().push(row);
    }
    if by_label.is_empty() {
        let mut epochs: Vec<u32> = run.rows.iter().map(|r| r.epoch).collect();
        epochs.sort_unstable();
        epochs.dedup();
        let has = if epochs.is_empty() {
            "results.csv has no finished task yet".to_string()
        } else {
            format!(
                "its epochs are {}",
                epochs
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Err(ExportError::Usage(format!(
            "{}: no task run of epoch {} to export ({has}); choose one with --epoch N",
            run.dir.display(),
            opts.epoch
        )));
    }
    let mut variants: Vec<Variant> = by_label
        .into_iter()
        .map(|(label, rows)| Variant {
            label: label.to_string(),
            slug: String::new(),
            rows,
        })
        .collect();
    unique_slugs(&mut variants);
    if let Some(wanted) = &opts.variant {
        let labels: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();
        variants.retain(|v| v.label == *wanted || v.slug == *wanted);
        if variants.is_empty() {
            return Err(ExportError::Usage(format!(
                "{}: no variant \"{wanted}\" in epoch {} (variants: {})",
                run.dir.display(),
                opts.epoch,
                labels
                    .iter()
                    .map(|l| if l.is_empty() { "(none)" } else { l })
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
    }
    Ok(variants)
}

/// A variant's label made safe for a file name, as the transcripts' keys make it: its
/// axis values joined by `-`, anything but letters, digits, `.`, `_` and `-` made `_`;
/// a name taken twice (or empty) gets `-v<n>`.
fn unique_slugs(variants: &mut [Variant]) {
    let mut taken = std::collections::HashSet::new();
    for (i, v) in variants.iter_mut().enumerate() {
        let values: Vec<&str> = v
            .label
            .split(',')
            .map(|pair| pair.split_once('=').map_or(pair, |(_, value)| value))
            .collect();
        let mut slug = String::new();
        for c in values.join("-").chars() {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                slug.push(c);
            } else if !slug.ends_with('_') {
                slug.push('_');
            }
        }
        let base: String = slug.trim_matches('_').chars().take(80).collect();
        let mut name = base.clone();
        let mut n = i + 1;
        while name.is_empty() || name == "." || name == ".." || taken.contains(&name) {
            name = format!("{base}-v{n}").trim_start_matches('-').to_string();
            n += 1;
        }
        taken.insert(name.clone());
        v.slug = name;
    }
}

/// One row per task id, sorted by it: the harness keeps one prediction per instance,
/// so a task written twice (a results.csv merged by hand) keeps its later row, and the
/// notes say so.
fn by_instance<'a>(
    rows: &[&'a ResultRow],
    label: &str,
    notes: &mut Vec<String>,
) -> Vec<&'a ResultRow> {
    let mut by_id: BTreeMap<&str, &ResultRow> = BTreeMap::new();
    for row in rows {
        if by_id.insert(&row.task_id, row).is_some() {
            notes.push(format!(
                "{} has more than one row in results.csv for this epoch: the prediction is the later row's (line {})",
                named(row, label),
                row.line
            ));
        }
    }
    by_id.into_values().collect()
}

/// The file names these labels get.
#[cfg(test)]
fn slugs_of(labels: &[&str]) -> Vec<String> {
    let mut v: Vec<Variant> = labels
        .iter()
        .map(|l| Variant {
            label: l.to_string(),
            slug: String::new(),
            rows: Vec::new(),
        })
        .collect();
    unique_slugs(&mut v);
    v.into_iter().map(|v| v.slug).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_file_names_are_safe_and_unique() {
        assert_eq!(
            slugs_of(&[
                "model=claude-haiku-4-5,toolset=readonly",
                "model=a/b c,toolset=x"
            ]),
            ["claude-haiku-4-5-readonly", "a_b_c-x"]
        );
        assert_eq!(
            slugs_of(&["m=..", "m=//", "n=x/", "n=x?"]),
            ["..-v1", "v2", "x", "x-v4"]
        );
        assert_eq!(slugs_of(&[""]), ["v1"], "no matrix: never written by slug");
    }

    #[test]
    fn an_out_file_must_be_one_the_harness_reads_as_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("results.csv"), "run_id,task_id\n").unwrap();
        for bad in ["p.json", "p.txt", ".jsonl"] {
            let opts = PredictionsOptions {
                run: dir.path().to_path_buf(),
                out: Some(dir.path().join(bad)),
                model_name: None,
                variant: None,
                epoch: 1,
            };
            let e = predictions(&opts).unwrap_err();
            assert!(e.to_string().contains("name the --out file"), "{bad}: {e}");
            assert_eq!(e.exit_code(), 2);
        }
    }
}
