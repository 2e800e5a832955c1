//! Suites as a task source: each format's reader turns its files into the task fields a
//! job file would write by hand (what `agentbatch suite show` prints), each problem
//! named by the file (and line) and field it is in.

#[cfg(test)]
mod folder_tests;
mod harbor;
mod swebench;
mod task_folder;
mod terminal_bench;

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};

use super::schema::TaskFields;
use super::schema_suite::{SuiteFields, SuiteFormat};
use super::Diagnostic;

/// One task a suite gives, with where it was read from.
#[derive(Debug, Clone)]
pub struct SuiteTask {
    pub fields: TaskFields,
    /// The file the task's fields come from (a JSONL file, a task.toml).
    pub file: PathBuf,
    /// Its line in `file`, for a row of a JSONL file.
    pub line: Option<usize>,
}

/// What one suite gives: its tasks (after `only`, `exclude` and `limit`), and every
/// problem found reading it.
#[derive(Debug, Default)]
pub struct Read {
    pub tasks: Vec<SuiteTask>,
    pub problems: Vec<Diagnostic>,
}

/// A problem in a suite's file.
pub(super) fn problem(file: &Path, line: Option<usize>, message: impl Into<String>) -> Diagnostic {
    Diagnostic {
        file: file.display().to_string(),
        line,
        column: None,
        message: message.into(),
    }
}

/// Reads `suite`, whose `path` is relative to `dir` (the job file's folder).
pub fn read(dir: &Path, suite: &SuiteFields) -> Read {
    let path = dir.join(&suite.path);
    let mut read = Read::default();
    if !path.exists() {
        read.problems.push(problem(
            &path,
            None,
            format!(
                "the {} suite's path does not exist: check `path` (relative to the job file)",
                suite.format.as_str()
            ),
        ));
        return read;
    }
    match suite.format {
        SuiteFormat::Swebench => swebench::read(&path, suite, &mut read),
        SuiteFormat::Harbor => harbor::read(&path, suite, &mut read),
        SuiteFormat::TerminalBench => terminal_bench::read_terminal_bench(&path, suite, &mut read),
    }
    select(suite, &path, &mut read);
    read
}

fn globs(list: &Option<Vec<String>>, at: &Path, what: &str, read: &mut Read) -> Option<GlobSet> {
    let list = list.as_ref()?;
    let mut b = GlobSetBuilder::new();
    for g in list {
        match Glob::new(g) {
            Ok(g) => {
                b.add(g);
            }
            Err(e) => read.problems.push(problem(
                at,
                None,
                format!("suite `{what}`: \"{g}\" is not a glob: {e}"),
            )),
        }
    }
    b.build().ok()
}

/// `only`, `exclude`, then `limit` (in id order), and ids given twice refused.
fn select(suite: &SuiteFields, path: &Path, read: &mut Read) {
    let only = globs(&suite.only, path, "only", read);
    let exclude = globs(&suite.exclude, path, "exclude", read);
    let id = |t: &SuiteTask| t.fields.id.clone().unwrap_or_default();
    read.tasks.retain(|t| {
        let id = id(t);
        only.as_ref().is_none_or(|g| g.is_match(&id))
            && !exclude.as_ref().is_some_and(|g| g.is_match(&id))
    });
    read.tasks.sort_by_key(id);
    let mut seen = std::collections::BTreeMap::<String, PathBuf>::new();
    for t in &read.tasks {
        if let Some(first) = seen.insert(id(t), t.file.clone()) {
            read.problems.push(problem(
                &t.file,
                t.line,
                format!(
                    "the task id \"{}\" is given twice (also in {}): ids must be unique in a suite",
                    id(t),
                    first.display()
                ),
            ));
        }
    }
    if let Some(n) = suite.limit {
        read.tasks.truncate(n);
    }
}

/// A suite id as a task id: kept as it is when it is one (the ids in reports are the
/// suite's own), else a problem.
pub(super) fn task_id(
    id: &str,
    file: &Path,
    line: Option<usize>,
    read: &mut Read,
) -> Option<String> {
    if super::schema_rules::valid_id(id) {
        Some(id.to_string())
    } else {
        read.problems.push(problem(
            file,
            line,
            format!(
                "the task id \"{id}\" cannot name report files (letters, digits, '.', '_', '-', at most {} characters, not starting with '.'): exclude it with the suite's `exclude`",
                super::schema_rules::MAX_ID
            ),
        ));
        None
    }
}

/// A path as the job's fields write it: absolute, so it means the same wherever the
/// fields are printed or resolved.
pub(super) fn abs(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Reads a text file of a suite, or records why it cannot be read.
pub(super) fn text(file: &Path, read: &mut Read) -> Option<String> {
    match std::fs::read_to_string(file) {
        Ok(t) => Some(t),
        Err(e) => {
            read.problems
                .push(problem(file, None, format!("cannot read: {e}")));
            None
        }
    }
}

/// The format of the suite at `path`, guessed from what is there: a dataset file or a
/// task repo is SWE-bench, task.toml folders (or a dataset.toml) Harbor, task.yaml
/// folders Terminal-Bench.
pub fn guess_format(path: &Path) -> Option<SuiteFormat> {
    let has = |marker: &str| {
        path.join(marker).is_file()
            || std::fs::read_dir(path)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .any(|e| e.path().join(marker).is_file())
                })
                .unwrap_or(false)
    };
    if path.is_file() {
        let name = path.file_name()?.to_string_lossy().to_lowercase();
        return if name.ends_with(".toml") {
            Some(SuiteFormat::Harbor)
        } else {
            Some(SuiteFormat::Swebench)
        };
    }
    if path.join("tasks").is_dir() && has_task_repo(path) {
        Some(SuiteFormat::Swebench)
    } else if has("task.toml") {
        Some(SuiteFormat::Harbor)
    } else if has("task.yaml") {
        Some(SuiteFormat::TerminalBench)
    } else {
        None
    }
}

fn has_task_repo(path: &Path) -> bool {
    path.join("sweb.yaml").is_file()
        || std::fs::read_dir(path.join("tasks"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .any(|e| e.path().join("tests.json").is_file())
            })
            .unwrap_or(false)
}

/// What the suite at `path` becomes, as a job file's YAML: its tasks with every field
/// the suite sets (`agentbatch suite show`).
pub fn show(path: &Path, format: Option<SuiteFormat>) -> Result<String, super::JobError> {
    let one = |message: String| super::JobError {
        diagnostics: vec![problem(path, None, message)],
    };
    let format =
        match format.or_else(|| guess_format(path)) {
            Some(f) => f,
            None => return Err(one(
                "cannot tell the suite's format: give --format swebench, harbor or terminal-bench"
                    .into(),
            )),
        };
    let suite = SuiteFields {
        format,
        path: abs(path),
        only: None,
        exclude: None,
        limit: None,
        image_namespace: None,
        threshold: None,
    };
    let read = read(Path::new("/"), &suite);
    if !read.problems.is_empty() {
        return Err(super::JobError {
            diagnostics: read.problems,
        });
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .filter(|s| super::schema_rules::valid_id(s))
        .unwrap_or_else(|| "suite".into());
    #[derive(serde::Serialize)]
    struct Shown {
        name: String,
        tasks: Vec<TaskFields>,
    }
    let shown = Shown {
        name,
        tasks: read.tasks.into_iter().map(|t| t.fields).collect(),
    };
    let yaml = serde_yaml::to_string(&shown).map_err(|e| one(e.to_string()))?;
    Ok(format!(
        "# The {} tasks of {} ({} format), as a job file writes them. Add `defaults:`\n# (provider, model, toolset) to run it, or keep the suite in `suites:`.\n{yaml}",
        shown.tasks.len(),
        path.display(),
        format.as_str()
    ))
}
