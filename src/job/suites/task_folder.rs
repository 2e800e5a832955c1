//! What Harbor and Terminal-Bench task folders share: finding them (a folder, a folder
//! of them, a task file, a Harbor dataset.toml), their durations in seconds, their
//! variable names, and refusing symbolic links out of a task folder.

use std::path::{Path, PathBuf};

use super::{problem, text, Read};
use crate::vocab::values::{HumanDuration, MAX_DURATION};

/// Seconds as Harbor writes them, as a duration: a problem naming `field` unless they
/// are a number above 0 and at most a year (a job file's own longest duration).
pub(super) fn duration(s: f64, field: &str, file: &Path, read: &mut Read) -> Option<HumanDuration> {
    match std::time::Duration::try_from_secs_f64(s) {
        Ok(d) if s > 0.0 && d <= MAX_DURATION => Some(HumanDuration(d)),
        _ => {
            read.problems.push(problem(
                file,
                None,
                format!("{field} = {s}: not a number of seconds above 0 and at most a year"),
            ));
            None
        }
    }
}

/// A name a shell can export.
pub(super) fn var_name(k: &str) -> bool {
    k.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The task folders under `path`: itself when it is one, the folders a dataset.toml
/// names, else its subfolders that have `marker`.
pub(super) fn task_dirs(path: &Path, marker: &str, read: &mut Read) -> Vec<PathBuf> {
    if path.is_file() {
        if path.file_name().is_some_and(|n| n == marker) {
            return vec![path.parent().unwrap_or(Path::new(".")).to_path_buf()];
        }
        if marker == "task.toml" {
            return dataset_dirs(path, read);
        }
        read.problems.push(problem(
            path,
            None,
            format!("not a {marker}: give a task folder (with {marker}), or a folder of them"),
        ));
        return Vec::new();
    }
    if path.join(marker).is_file() {
        return vec![path.to_path_buf()];
    }
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(path) {
        Ok(d) => d
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join(marker).is_file())
            .collect(),
        Err(e) => {
            read.problems
                .push(problem(path, None, format!("cannot list: {e}")));
            return Vec::new();
        }
    };
    if dirs.is_empty() {
        read.problems.push(problem(
            path,
            None,
            format!("no task folder here (a folder with {marker}), nor in its subfolders"),
        ));
    }
    dirs.sort();
    dirs
}

/// The task folders a Harbor `dataset.toml` lists (`[[tasks]] name = "org/name"`),
/// found beside it by the name's last part.
fn dataset_dirs(file: &Path, read: &mut Read) -> Vec<PathBuf> {
    let Some(body) = text(file, read) else {
        return Vec::new();
    };
    let table: toml::Table = match body.parse() {
        Ok(t) => t,
        Err(e) => {
            read.problems
                .push(problem(file, None, format!("not TOML: {e}")));
            return Vec::new();
        }
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut dirs = Vec::new();
    let tasks = table.get("tasks").and_then(toml::Value::as_array);
    if tasks.is_none_or(|t| t.is_empty()) {
        read.problems.push(problem(
            file,
            None,
            "names no tasks: a Harbor dataset.toml lists them as [[tasks]] entries with a `name`",
        ));
    }
    for t in tasks.into_iter().flatten() {
        let Some(name) = t.get("name").and_then(toml::Value::as_str) else {
            read.problems
                .push(problem(file, None, "a [[tasks]] entry has no `name`"));
            continue;
        };
        let short = name.rsplit('/').next().unwrap_or(name);
        let folder = dir.join(short);
        if folder.join("task.toml").is_file() {
            dirs.push(folder);
        } else {
            read.problems.push(problem(
                file,
                None,
                format!(
                    "task {name}: no task folder {} beside the dataset.toml (download the dataset's tasks there first)",
                    folder.display()
                ),
            ));
        }
    }
    dirs
}

/// Whether `path` (a file or folder of task folder `dir`) stays inside it: a symbolic
/// link out of it (to `~/.ssh`, say) is refused, so that a downloaded task cannot make
/// the runner send a file of this machine to the model or copy it into a container.
pub(super) fn inside(dir: &Path, path: &Path, file: &Path, read: &mut Read) -> bool {
    let linked = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !linked {
        return true;
    }
    let (Ok(root), Ok(target)) = (std::fs::canonicalize(dir), std::fs::canonicalize(path)) else {
        read.problems.push(problem(
            file,
            None,
            format!("{} is a symbolic link that leads nowhere", path.display()),
        ));
        return false;
    };
    if target.starts_with(&root) {
        return true;
    }
    read.problems.push(problem(
        file,
        None,
        format!(
            "{} is a symbolic link out of the task folder (to {}): refused, so that a task cannot have files of this machine read or copied",
            path.display(),
            target.display()
        ),
    ));
    false
}
