//! A task's `environment:` (its container) and `check_environment`, resolved field by
//! field over `defaults`; the engine it names must be found here (unless the job is
//! only queued, for workers elsewhere).

use std::sync::Arc;
use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::origin;
use super::schema::TaskFields;
use super::schema_environment::{CheckEnvironment, EnvironmentFields};
use crate::tools::container::{EnvironmentConfig, Source};

/// How long a build or a pull may take when `build_timeout` is not set.
const DEFAULT_BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Whether a memory limit reads as the engines read one: digits and an optional unit.
fn memory_ok(m: &str) -> bool {
    let digits = m.trim_end_matches(|c: char| "bkmgBKMG".contains(c));
    m.len() - digits.len() <= 1 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The task's environment, or None without one (the host sandbox).
pub(super) fn resolve_environment(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    cx: &mut Ctx,
) -> Option<Arc<EnvironmentConfig>> {
    let (te, de) = (t.environment.as_ref(), d.environment.as_ref());
    if te.is_none() && de.is_none() {
        if let Some(c) = t.check_environment.or(d.check_environment) {
            if c == CheckEnvironment::Fresh {
                let on_task = t.check_environment.is_some();
                cx.err(
                    &origin(i, on_task, !on_task, &["check_environment"]),
                    "check_environment: fresh needs an `environment:` (the check runs in a new container of its image)",
                );
            }
        }
        return None;
    }
    let empty = EnvironmentFields::default();
    let (te, de) = (te.unwrap_or(&empty), de.unwrap_or(&empty));
    let at = |field: &str, on_task: bool| origin(i, on_task, !on_task, &["environment", field]);
    let before = cx.diags.len();
    for (layer, on_task) in [(te, true), (de, false)] {
        if layer.image.is_some() && layer.dockerfile.is_some() {
            cx.err(
                &at("dockerfile", on_task),
                "give either `image` or `dockerfile`, not both",
            );
        }
        if layer.context.is_some() && layer.dockerfile.is_none() {
            cx.err(
                &at("context", on_task),
                "`context` goes with a `dockerfile` in the same place",
            );
        }
    }
    let source = resolve_source(i, t, d, te, de, cx);
    macro_rules! pick {
        ($f:ident) => {
            (te.$f.clone().or_else(|| de.$f.clone()), te.$f.is_some())
        };
    }
    let (memory, memory_on_task) = pick!(memory);
    if let Some(m) = &memory {
        if !memory_ok(m) {
            cx.err(
                &at("memory", memory_on_task),
                format!("memory \"{m}\" is not a size the engines read: digits and one of b, k, m, g (`512m`, `4g`)"),
            );
        }
    }
    let (cpus, cpus_on_task) = pick!(cpus);
    if let Some(c) = cpus {
        if !(c.is_finite() && c > 0.0 && c <= 1024.0) {
            cx.err(
                &at("cpus", cpus_on_task),
                format!("cpus {c} is not between 0.01 and 1024"),
            );
        }
    }
    let (pids, pids_on_task) = pick!(pids);
    if pids.is_some_and(|p| p < 8) {
        cx.err(
            &at("pids", pids_on_task),
            "pids below 8 leaves no room for the shell that runs each command",
        );
    }
    let (workdir, workdir_on_task) = pick!(workdir);
    if let Some(w) = &workdir {
        if !w.starts_with('/') || w.contains(':') || w == "/" {
            cx.err(
                &at("workdir", workdir_on_task),
                format!(
                    "workdir \"{w}\" must be an absolute folder other than / (and hold no ':')"
                ),
            );
        }
    }
    let (engine, engine_on_task) = pick!(engine);
    let engine = engine.unwrap_or_default();
    if !cx.env.keys_on_workers {
        if let Err(why) = cx.env.engines.get(engine) {
            let why = why.to_string();
            let on_task = engine_on_task || (de.engine.is_none() && t.environment.is_some());
            cx.err(&at("engine", on_task), why);
        }
    }
    let mut env = de.env.clone().unwrap_or_default();
    env.extend(te.env.clone().unwrap_or_default());
    if cx.diags.len() > before {
        return None;
    }
    Some(Arc::new(EnvironmentConfig {
        source: source?,
        pull: pick!(pull).0.unwrap_or_default(),
        engine,
        cpus,
        memory,
        pids,
        network: pick!(network).0.unwrap_or_default(),
        workdir,
        user: pick!(user).0,
        env,
        build_timeout: pick!(build_timeout)
            .0
            .map_or(DEFAULT_BUILD_TIMEOUT, |h| h.0),
    }))
}

/// Where the image comes from: the nearest layer that names `image` or `dockerfile`
/// decides, whole.
fn resolve_source(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    te: &EnvironmentFields,
    de: &EnvironmentFields,
    cx: &mut Ctx,
) -> Option<Source> {
    let at = |field: &str, on_task: bool| origin(i, on_task, !on_task, &["environment", field]);
    // The image is one choice, taken from the nearest layer that makes it.
    let (chosen, on_task) = if te.image.is_some() || te.dockerfile.is_some() {
        (te, true)
    } else {
        (de, false)
    };
    if let Some(image) = &chosen.image {
        Some(Source::Image(image.clone()))
    } else if let Some(df) = &chosen.dockerfile {
        let dockerfile = cx.files.join(df);
        let context = match &chosen.context {
            Some(c) => cx.files.join(c),
            // A bare `Dockerfile` beside a job given as a bare name: its folder is ".".
            None => dockerfile
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| std::path::PathBuf::from("."), |p| p.to_path_buf()),
        };
        if !dockerfile.is_file() {
            cx.err(
                &at("dockerfile", on_task),
                format!(
                    "no file at {}: dockerfile is relative to the job file",
                    dockerfile.display()
                ),
            );
        }
        if !context.is_dir() {
            let field = if chosen.context.is_some() {
                "context"
            } else {
                "dockerfile"
            };
            cx.err(
                &at(field, on_task),
                format!("the build context {} is not a folder", context.display()),
            );
        }
        // Absolute: the engine runs in the machine's mount namespace, from its root.
        let abs = |p: std::path::PathBuf| std::path::absolute(&p).unwrap_or(p);
        Some(Source::Dockerfile {
            dockerfile: abs(dockerfile),
            context: abs(context),
        })
    } else {
        cx.err(
            &origin(
                i,
                t.environment.is_some(),
                d.environment.is_some(),
                &["environment"],
            ),
            "an environment needs `image` (a name the engine has or can pull) or `dockerfile`",
        );
        None
    }
}

#[cfg(test)]
mod tests {
    use super::memory_ok;

    #[test]
    fn memory_sizes_read_as_the_engines_read_them() {
        for ok in ["4g", "256m", "1024", "512M", "10b"] {
            assert!(memory_ok(ok), "{ok}");
        }
        for bad in ["", "g", "4gb", "4 g", "-1g", "1.5g", "4t"] {
            assert!(!memory_ok(bad), "{bad}");
        }
    }
}
