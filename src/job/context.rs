//! What every resolver of a job file works with, in one place below them all: the
//! resolvers take it and the driver (`expand.rs`) makes it, so neither imports the other.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::diagnostics::Diagnostics;
use super::environment::Environment;
use super::files::Files;
use super::locate::Seg;
use crate::sim::script::Script;

/// What every check of one job file works with: where its diagnostics go, the
/// environment and the files it is checked against, and the scripts read so far.
pub(super) struct Ctx<'a> {
    pub diags: Diagnostics<'a>,
    pub env: &'a Environment,
    pub files: Files,
    pub scripts: ScriptCache,
}

impl Ctx<'_> {
    /// Records `message` about the field at `path`.
    pub fn err(&mut self, path: &[Seg], message: impl Into<String>) {
        self.diags.err(path, message);
    }
}

/// The script files read so far, by full path.
pub(super) type ScriptCache = HashMap<PathBuf, ScriptFile>;

/// A script file as it was found the first time a task named it.
#[derive(Clone)]
pub(super) enum ScriptFile {
    Loaded(Arc<Script>),
    /// It could not be read: the message, reported at every task that names the file
    /// (each has its own line to fix).
    Unreadable(String),
    /// It was read but is wrong inside: its errors were reported once, in that file.
    Invalid,
}
