//! Collecting the problems expansion finds: each placed at the line and column of the
//! field that caused it (or, for a default a matrix axis set, at that axis's value), in
//! the order the checks found them, then deduplicated and sorted into file order.

use super::locate::{locate, path_string, Seg};
use super::Diagnostic;

/// The diagnostics of one job file, and what is needed to place them.
pub(super) struct Diagnostics<'a> {
    file: String,
    text: &'a str,
    list: Vec<Diagnostic>,
    /// The variant being expanded: (axis, value index). A default an axis set is
    /// reported at that value under `matrix`.
    pub picks: Vec<(String, usize)>,
    /// The tasks from suites, which follow the job's own `written` tasks: a problem
    /// with one is reported at its suite's file.
    pub suite_tasks: Vec<SuiteOrigin>,
    pub written: usize,
}

/// Where a task from a suite was read.
#[derive(Debug, Clone)]
pub struct SuiteOrigin {
    /// Its index in `suites`.
    pub suite: usize,
    pub file: String,
    pub line: Option<usize>,
    pub id: String,
}

impl<'a> Diagnostics<'a> {
    /// None yet, for the job file named `file` (as shown in messages) whose text is
    /// `text`.
    pub fn new(file: String, text: &'a str) -> Diagnostics<'a> {
        Diagnostics {
            file,
            text,
            list: Vec::new(),
            picks: Vec::new(),
            suite_tasks: Vec::new(),
            written: 0,
        }
    }

    /// The job file's text, to place a field by its path.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// How many have been found so far: a step compares before and after to know
    /// whether it found anything.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether the job has no problem so far.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Diagnostics already placed (in another file, such as a simulator script).
    pub fn extend(&mut self, more: impl IntoIterator<Item = Diagnostic>) {
        self.list.extend(more);
    }

    /// Moves a path under `defaults` that a matrix axis decides to the axis's value: the
    /// axis's field or one inside it, or a field the axis sets a part of
    /// (`defaults.reasoning` for the axis `reasoning.effort`).
    fn remap(&self, path: &[Seg]) -> Option<Vec<Seg>> {
        if path.first() != Some(&key("defaults")) {
            return None;
        }
        let rest = path.get(1..).filter(|r| !r.is_empty())?;
        self.picks.iter().find_map(|(axis, i)| {
            let segs: Vec<Seg> = axis.split('.').map(key).collect();
            let mut p = vec![key("matrix"), key(axis), Seg::Index(*i)];
            if rest.starts_with(&segs) {
                p.extend(rest[segs.len()..].iter().cloned());
                Some(p)
            } else if segs.starts_with(rest) {
                Some(p)
            } else {
                None
            }
        })
    }

    /// Where task `i` of the expanded list was read, when a suite gave it.
    pub fn suite_origin(&self, i: usize) -> Option<&SuiteOrigin> {
        i.checked_sub(self.written)
            .and_then(|k| self.suite_tasks.get(k))
    }

    /// Records `message` about the field at `path`, prefixed with the field's name.
    pub fn err(&mut self, path: &[Seg], message: impl Into<String>) {
        if let (Some(Seg::Key(k)), Some(Seg::Index(i))) = (path.first(), path.get(1)) {
            if k == "tasks" {
                if let Some(o) = self.suite_origin(*i) {
                    let field = path_string(&path[2..]);
                    let field = if field.is_empty() {
                        String::new()
                    } else {
                        format!("{field}: ")
                    };
                    self.list.push(Diagnostic {
                        file: o.file.clone(),
                        line: o.line,
                        column: None,
                        message: format!(
                            "task \"{}\" of suites[{}]: {field}{}",
                            o.id,
                            o.suite,
                            message.into()
                        ),
                    });
                    return;
                }
            }
        }
        let remapped = self.remap(path);
        let path = remapped.as_deref().unwrap_or(path);
        let (line, column) =
            locate(self.text, path).map_or((None, None), |(l, c)| (Some(l), Some(c)));
        let field = path_string(path);
        let message = message.into();
        let message = if field.is_empty() {
            message
        } else {
            format!("{field}: {message}")
        };
        self.list.push(Diagnostic {
            file: self.file.clone(),
            line,
            column,
            message,
        });
    }

    /// The same mistake in every variant is reported once.
    pub fn dedup(&mut self) {
        let mut once = std::collections::HashSet::new();
        self.list.retain(|d| once.insert(d.clone()));
    }

    /// Everything found, as it was found.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.list
    }

    /// Everything found, in file order.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.list
            .sort_by_key(|d| (d.line.unwrap_or(usize::MAX), d.column.unwrap_or(0)));
        self.list
    }
}

pub(super) fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

/// The layer a task's merged field takes its value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layer<'a> {
    /// The task's own value.
    Task,
    /// The value of the task's provider (`providers.<name>`), for the fields a
    /// provider may set for all its tasks (`stream`, `batch`, `cache`).
    Provider(&'a str),
    /// The value of `defaults` (or of the matrix axis that set it there).
    Defaults,
}

/// Where a problem with a task's merged field is reported: at the layer its value came
/// from, or, when no layer gives it a value, at the task itself. A task that writes
/// `prompt: null` or leaves `prompt` out lacks a prompt of its own, so each such task
/// is told at its own line; only a value the task really inherits is reported where it
/// is written, once for every task that inherits it.
pub(super) fn place(task: usize, layer: Option<Layer>, field: &[&str]) -> Vec<Seg> {
    let mut p = match layer {
        Some(Layer::Task) | None => vec![key("tasks"), Seg::Index(task)],
        Some(Layer::Provider(name)) => vec![key("providers"), key(name)],
        Some(Layer::Defaults) => vec![key("defaults")],
    };
    p.extend(field.iter().map(|f| key(f)));
    p
}

/// [`place`] for a field that only the task and `defaults` set: `own` and `inherited`
/// say whether each has a value (serde reads a `null` as no value).
pub(super) fn origin(task: usize, own: bool, inherited: bool, field: &[&str]) -> Vec<Seg> {
    let layer = if own {
        Some(Layer::Task)
    } else if inherited {
        Some(Layer::Defaults)
    } else {
        None
    };
    place(task, layer, field)
}
