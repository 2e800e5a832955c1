//! Simulator scripts: inline in the job or in files next to it, checked before anything
//! runs, each file read once however many tasks play it.

use std::path::Path;
use std::sync::Arc;

use super::context::{Ctx, ScriptFile};
use super::diagnostics::{origin, place, Layer};
use super::locate::Seg;
use super::schema::{SimSource, TaskFields};
use super::source::{self, SourceError};
use super::spec::{ProviderKind, ProviderSpec};
use super::{Diagnostic, JobError};
use crate::sim::script::Script;

/// The script a task plays when its provider is simulated (None otherwise, or when it
/// has errors).
pub(super) fn resolve_task_script(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    p: &ProviderSpec,
    cx: &mut Ctx,
) -> Option<Arc<Script>> {
    if p.kind != ProviderKind::Sim {
        return None;
    }
    let sim_at = origin(i, t.sim.is_some(), d.sim.is_some(), &["sim"]);
    match t.sim.as_ref().or(d.sim.as_ref()) {
        Some(src) => load_script(src, &sim_at, cx),
        None if p.base_url.is_none() => {
            cx.err(
                &place(i, Some(Layer::Task), &["sim"]),
                format!("provider {} is the simulator and needs a script: add `sim: path/to/script.yaml` (or an inline script), or choose a real provider such as `provider: anthropic`", p.name),
            );
            None
        }
        None => None,
    }
}

/// Checks a script written inline at `at` (a task's or the defaults' `sim`), whether or
/// not a task plays it; its errors are placed at the field inside it that they name.
/// Whether it is fine (a path to a file is checked when a task plays it).
pub(super) fn check_inline(src: &SimSource, at: &[Seg], cx: &mut Ctx) -> bool {
    let SimSource::Inline(s) = src else {
        return true;
    };
    let Err(e) = s.check() else {
        return true;
    };
    let e = e.0;
    match super::locate::split_path_prefix(&e) {
        Some((inner, rest)) => {
            let mut full = at.to_vec();
            full.extend(inner);
            cx.err(&full, rest.to_string());
        }
        None => cx.err(at, e),
    }
    false
}

fn load_script(src: &SimSource, at: &[Seg], cx: &mut Ctx) -> Option<Arc<Script>> {
    match src {
        // Its errors were reported where it is written (fields.rs).
        SimSource::Inline(s) => s.check().is_ok().then(|| Arc::new(s.clone())),
        SimSource::Path(p) => {
            let full = cx.files.join(p);
            let file = match cx.scripts.get(&full) {
                Some(cached) => cached.clone(),
                None => {
                    let file = match parse_script(&full, cx.files.take_script_text(&full)) {
                        Ok(s) => ScriptFile::Loaded(Arc::new(s)),
                        Err(ScriptError::Missing(e)) => ScriptFile::Unreadable(format!(
                            "simulator script {}: {e}",
                            full.display()
                        )),
                        Err(ScriptError::Invalid(d)) => {
                            cx.diags.extend(d);
                            ScriptFile::Invalid
                        }
                    };
                    cx.scripts.insert(full, file.clone());
                    file
                }
            };
            match file {
                ScriptFile::Loaded(s) => Some(s),
                ScriptFile::Unreadable(message) => {
                    cx.err(at, message);
                    None
                }
                ScriptFile::Invalid => None,
            }
        }
    }
}

enum ScriptError {
    Missing(SourceError),
    Invalid(Vec<Diagnostic>),
}

/// The script in the file at `path`, from the outcome of reading it.
fn parse_script(path: &Path, text: Result<String, SourceError>) -> Result<Script, ScriptError> {
    let text = text.map_err(ScriptError::Missing)?;
    let file = path.display().to_string();
    let script: Script =
        super::parse_yaml(&file, &text).map_err(|e| ScriptError::Invalid(e.diagnostics))?;
    script.check().map_err(|e| {
        let message = e.0;
        // Placed at the field the message names, when it names one.
        let at = super::locate::split_path_prefix(&message)
            .and_then(|(path, _)| super::locate::locate(&text, &path));
        ScriptError::Invalid(vec![Diagnostic {
            file,
            line: at.map(|(l, _)| l),
            column: at.map(|(_, c)| c),
            message,
        }])
    })?;
    Ok(script)
}

/// Reads a script file on its own (for `agentbatch sim --script`).
pub fn load_script_file(path: &Path) -> Result<Script, JobError> {
    let text = source::read_text(path, source::MAX_JOB_FILE, "the file");
    parse_script(path, text).map_err(|e| match e {
        ScriptError::Missing(io) => JobError {
            diagnostics: vec![Diagnostic {
                file: path.display().to_string(),
                line: None,
                column: None,
                message: format!("simulator script: {io}"),
            }],
        },
        ScriptError::Invalid(diagnostics) => JobError { diagnostics },
    })
}
