//! Job files: parse (schema v1), check everything that can be checked without
//! spending, and expand into a [`Plan`] of fully resolved tasks. Every error names the
//! file, line and column, and the field.

mod batch;
mod context;
mod describe;
mod diagnostics;
mod environment;
mod environments;
mod expand;
mod fields;
mod files;
mod limits;
pub(crate) mod locate;
mod matrix;
mod providers;
mod repos;
mod sampling;
pub(crate) mod schema;
mod schema_environment;
mod schema_matrix;
mod schema_providers;
mod schema_rules;
mod schema_shared;
pub(crate) mod schema_suite;
mod schema_toolsets;
mod scripts;
pub(crate) mod source;
mod spec;
mod streaming;
pub(crate) mod suites;
mod teams;
#[cfg(test)]
mod tests;
mod toolsets;
mod verifiers;
mod window;

use std::fmt;
use std::path::Path;

pub use describe::describe;
pub(crate) use environment::Environment;
pub(crate) use matrix::fnv1a;
pub use schema::WorkspaceMethod;
pub use schema_environment::CheckEnvironment;
pub use schema_suite::SuiteFormat;
pub use scripts::load_script_file;
pub use spec::{
    AgentKind, HarborVerifier, PeriodCap, Plan, ProviderKind, ProviderSpec, RepoSpec, Solution,
    SwebenchVerifier, TaskSpec, TeamSpec, ToolsetSpec, Verifier,
};

use crate::tools::Registry;

/// One problem in a job file (or a file it references).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based; None when the problem has no single place (an unreadable file).
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    /// Long values quoted in the message are cut (a 20 MB scalar, a file that is not a
    /// job file), so one line stays one readable line.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let message = crate::text::clip_quotes(&self.message);
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {message}", self.file),
            (Some(l), None) => write!(f, "{}:{l}: {message}", self.file),
            _ => write!(f, "{}: {message}", self.file),
        }
    }
}

/// Everything wrong with a job file, in file order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct JobError {
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl JobError {
    fn one(
        file: &str,
        line: Option<usize>,
        column: Option<usize>,
        message: impl Into<String>,
    ) -> JobError {
        JobError {
            diagnostics: vec![Diagnostic {
                file: file.into(),
                line,
                column,
                message: message.into(),
            }],
        }
    }
}

/// Turns a serde_yaml error into a diagnostic: its position moves to the front
/// (`file:line:column:`), its field path and message stay.
pub(crate) fn yaml_diagnostic(file: &str, e: &serde_yaml::Error) -> Diagnostic {
    let mut message = e.to_string();
    let (line, column) = match e.location() {
        Some(l) => {
            let at = format!(" at line {} column {}", l.line(), l.column());
            message = message.replacen(&at, "", 1);
            (Some(l.line()), Some(l.column()))
        }
        None => (None, None),
    };
    Diagnostic {
        file: file.into(),
        line,
        column,
        message,
    }
}

/// Reads, checks and expands a job file. `registry` is what tool names are checked
/// against; API keys and MCP variables are checked against this process's environment
/// as it is now.
pub fn load(path: &Path, registry: &Registry) -> Result<Plan, JobError> {
    load_in(path, registry, &Environment::from_process())
}

/// [`load`] for a run whose reports go to `out` (`--out`, or the folder a resume
/// continues): a task that asks for `workspaces: reflink` where no file can be
/// reflinked there is refused at its field, rather than every such task stopping with
/// `tool_setup_error` once the run has started.
pub fn load_for_run(path: &Path, registry: &Registry, out: &Path) -> Result<Plan, JobError> {
    let mut env = Environment::from_process();
    env.run_folder = Some(environment::RunFolder::new(out));
    load_in(path, registry, &env)
}

/// [`load`] for `run --queue`: the provider keys' variables need not be set here, since
/// only the workers send requests (each checks its own keys when it loads the job).
pub fn load_for_queue(path: &Path, registry: &Registry) -> Result<Plan, JobError> {
    let mut env = Environment::from_process();
    env.keys_on_workers = true;
    load_in(path, registry, &env)
}

/// [`load`] against a given environment snapshot instead of the process's: the same
/// job gives the same answer for the same snapshot, whatever the process has set.
pub(crate) fn load_in(
    path: &Path,
    registry: &Registry,
    env: &Environment,
) -> Result<Plan, JobError> {
    let file = path.display().to_string();
    let text = source::read_text(path, source::MAX_JOB_FILE, "the job file")
        .map_err(|e| JobError::one(&file, None, None, e.to_string()))?;
    let mut job: schema::JobFile = parse_yaml(&file, &text)?;
    let origins = add_suite_tasks(&mut job, path)?;
    expand::expand(job, &text, path, registry, env, origins)
}

/// Appends the tasks of the job's suites to its tasks, and says where each came from
/// (so that a problem with one is reported at its suite's file). Every problem reading
/// the suites is reported at once, before anything else is checked.
fn add_suite_tasks(
    job: &mut schema::JobFile,
    path: &Path,
) -> Result<Vec<diagnostics::SuiteOrigin>, JobError> {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut problems = Vec::new();
    let mut origins = Vec::new();
    for (k, suite) in job.suites.iter().enumerate() {
        let read = suites::read(&dir, suite);
        problems.extend(read.problems);
        for t in read.tasks {
            origins.push(diagnostics::SuiteOrigin {
                suite: k,
                file: t.file.display().to_string(),
                line: t.line,
                id: t.fields.id.clone().unwrap_or_default(),
            });
            job.tasks.push(t.fields);
        }
    }
    if problems.is_empty() {
        Ok(origins)
    } else {
        Err(JobError {
            diagnostics: problems,
        })
    }
}

/// Parses a YAML document into `T`, refusing a key written twice in any map first:
/// serde lets the last one win silently for maps, so a second `teams.platform` with a
/// bigger cap would raise the cap without a word.
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
) -> Result<T, JobError> {
    if let Some(d) = locate::duplicate_key(text) {
        let (line, column) = d.at.map_or((None, None), |(l, c)| (Some(l), Some(c)));
        let name = match d.path.last() {
            Some(locate::Seg::Key(k)) => k.clone(),
            _ => String::new(),
        };
        let first = d
            .first_line
            .map(|l| format!(" (first at line {l})"))
            .unwrap_or_default();
        return Err(JobError::one(
            file,
            line,
            column,
            format!(
                "{}: duplicate key \"{name}\"{first}; each key may appear once in a map: remove or rename one",
                locate::path_string(&d.path)
            ),
        ));
    }
    serde_yaml::from_str(text).map_err(|e| JobError {
        diagnostics: vec![yaml_diagnostic(file, &e)],
    })
}
