//! From the job file as written to a [`Plan`]: the job-wide pieces resolved once
//! (providers, teams, tool sets), the matrix applied to `defaults`, and each task
//! expanded step by step, defaults merged field by field. Every check that needs no
//! spending is done here, each error placed at the line of the field that caused it.
//!
//! Expansion reads no environment variable and no file: it checks against the
//! [`Environment`] snapshot it is given and the [`Files`] read in its loading steps.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::batch::resolve_batch;
use super::context::{Ctx, ScriptCache};
use super::diagnostics::{key, origin, place, Diagnostics, Layer};
use super::environment::Environment;
use super::fields::check_fields;
use super::files::Files;
use super::limits::{merge_task_limits, resolve_limits, resolve_price};
use super::locate::{locate, Seg};
use super::matrix::{self, Variant};
use super::providers::{missing_api_key, resolve_providers, resolve_task_provider};
use super::repos::resolve_repo;
use super::sampling::{resolve_max_tokens, resolve_request_fields};
use super::schema::{JobFile, TaskFields};
use super::schema_rules::{valid_id, MAX_ID};
use super::schema_suite::AgentKind;
use super::scripts::resolve_task_script;
use super::spec::{Plan, ProviderSpec, TaskSpec, TeamSpec, ToolsetSpec};
use super::streaming::resolve_stream;
use super::teams::{resolve_task_team, resolve_teams};
use super::toolsets::{check_toolset_needs, resolve_task_toolset, resolve_toolsets};
use super::JobError;
use crate::tools::{Registry, SandboxConfig};
use crate::vocab::bounds;
use crate::vocab::cache::Caching;

pub(super) const DEFAULT_CONCURRENCY: usize = 4;

/// What the job defines once and tasks refer to.
struct Shared<'a> {
    providers: &'a BTreeMap<String, Arc<ProviderSpec>>,
    teams: &'a BTreeMap<String, Arc<TeamSpec>>,
    toolsets: &'a BTreeMap<String, Arc<ToolsetSpec>>,
}

/// Checks the parsed `job` (whose text is `text`, read from `path`) against `env` and
/// expands it into a plan.
pub(super) fn expand(
    mut job: JobFile,
    text: &str,
    path: &Path,
    registry: &Registry,
    env: &Environment,
    suite_tasks: Vec<super::diagnostics::SuiteOrigin>,
) -> Result<Plan, JobError> {
    let mut suite_counts = vec![0; job.suites.len()];
    for o in &suite_tasks {
        if let Some(n) = suite_counts.get_mut(o.suite) {
            *n += 1;
        }
    }
    let mut diags = Diagnostics::new(path.display().to_string(), text);
    diags.written = job.tasks.len() - suite_tasks.len();
    diags.suite_tasks = suite_tasks;
    let mut cx = Ctx {
        diags,
        env,
        files: Files::read_job_files(
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
            &job,
        ),
        scripts: ScriptCache::new(),
    };
    check_job_fields(&job, &mut cx);
    let providers = resolve_providers(&job, &mut cx);
    let teams = resolve_teams(&job, &mut cx);
    let toolsets = resolve_toolsets(&job, registry, &mut cx);
    // The file as written: the matrix is applied to `defaults` as the user wrote it.
    // Read a second time only for a matrix, which needs the file's own values.
    let raw: serde_yaml::Value = if job.matrix.is_empty() {
        serde_yaml::Value::Null
    } else {
        serde_yaml::from_str(text).unwrap_or(serde_yaml::Value::Null)
    };
    let variants = resolve_variants(&job, &raw, &mut cx);
    let epochs = job.epochs.unwrap_or(1);
    if epochs == 0 {
        cx.err(&[key("epochs")], "must be at least 1");
    }
    if let Some((at, e)) = plan_too_big(&job, &variants, epochs) {
        cx.err(&[key(at)], e);
        return Err(JobError {
            diagnostics: cx.diags.into_vec(),
        });
    }
    check_tasks(&job, &raw, &mut cx);
    for (i, t) in job.tasks.iter().enumerate() {
        check_fields(&[key("tasks"), Seg::Index(i)], t, &mut cx);
    }
    cx.files.read_task_files(&job, &variants);
    let shared = Shared {
        providers: &providers,
        teams: &teams,
        toolsets: &toolsets,
    };
    // grid[task][variant]
    let mut grid: Vec<Vec<TaskSpec>> = vec![Vec::with_capacity(variants.len()); job.tasks.len()];
    // The job without its tasks, to carry each variant's defaults (the tasks are
    // expanded from `job.tasks`).
    let written = std::mem::take(&mut job.tasks);
    let mut vjob = job.clone();
    job.tasks = written;
    for v in &variants {
        cx.diags.picks = v.picks.clone();
        vjob.defaults = v.defaults.clone();
        check_fields(&[key("defaults")], &vjob.defaults, &mut cx);
        for (i, t) in job.tasks.iter().enumerate() {
            if let Some(mut spec) = expand_task(&vjob, i, t, &shared, registry, &mut cx) {
                spec.variant = v.label.clone();
                spec.axes = v.axes.clone();
                spec.id = matrix::instance_key(&spec.task, v, 1, epochs.max(1));
                grid[i].push(spec);
            }
        }
    }
    cx.diags.picks.clear();
    cx.diags.dedup();
    check_run_names(&grid, &mut cx);
    let tasks = order_runs(&grid, &variants, epochs);
    let ledger_path = job.ledger.as_ref().map(|p| {
        if crate::vocab::values::is_postgres_url(p) {
            std::path::PathBuf::from(p)
        } else {
            cx.files.join(p)
        }
    });
    if let Some(problem) = cx.files.ledger_problem().map(str::to_string) {
        cx.err(&[key("ledger")], problem);
    }
    if !cx.diags.is_empty() {
        return Err(JobError {
            diagnostics: cx.diags.into_sorted(),
        });
    }
    Ok(Plan {
        name: job.name.clone(),
        file: path.to_path_buf(),
        concurrency: job.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
        tasks,
        max_cost_usd: job.max_cost_usd.map(|m| m.0),
        teams,
        ledger_path,
        axes: job.matrix.keys().cloned().collect(),
        suite_tasks: suite_counts,
        job,
    })
}

/// The job's own top-level fields.
fn check_job_fields(job: &JobFile, cx: &mut Ctx) {
    if job.name.trim().is_empty() {
        cx.err(&[key("name")], "the job needs a name");
    }
    if job.concurrency == Some(0) {
        cx.err(&[key("concurrency")], "must be at least 1");
    }
    if job.tasks.is_empty() {
        let message = if job.suites.is_empty() {
            "the job has no tasks: write `tasks:` or give `suites:`"
        } else {
            "the job's suites give no task (check their `only`, `exclude` and paths)"
        };
        cx.err(&[key("tasks")], message);
    }
    if job.defaults.id.is_some() {
        cx.err(
            &[key("defaults"), key("id")],
            "a task id cannot be a default; give each task its own id",
        );
    }
}

/// The matrix's variants over `defaults` (one, without a matrix); none when the matrix
/// has errors.
fn resolve_variants(job: &JobFile, raw: &serde_yaml::Value, cx: &mut Ctx) -> Vec<Variant> {
    let raw_defaults = raw
        .get("defaults")
        .cloned()
        .unwrap_or(serde_yaml::Value::Null);
    match matrix::variants(&job.matrix, &raw_defaults, &job.defaults) {
        Ok(v) => v,
        Err(errors) => {
            for e in errors {
                let mut at = vec![key("matrix"), key(&e.axis)];
                at.extend(e.index.map(Seg::Index));
                cx.err(&at, e.message);
            }
            Vec::new()
        }
    }
}

/// Nothing is expanded when the plan alone would not fit in memory: too many task
/// runs, or too much text copied into each. The field to blame and why, or None.
fn plan_too_big(
    job: &JobFile,
    variants: &[Variant],
    epochs: u32,
) -> Option<(&'static str, String)> {
    let too_big = bounds::plan_size(job.tasks.len(), variants.len(), u64::from(epochs))
        .err()
        .or_else(|| {
            // Counted only for a plan of bounded size.
            let plan_text: u64 = job
                .tasks
                .iter()
                .map(|t| variants.iter().map(|v| text_bytes(t, &v.defaults)).sum::<u64>())
                .sum::<u64>()
                .saturating_mul(u64::from(epochs));
            (plan_text > bounds::PLAN_TEXT).then(|| {
                format!(
                    "the task runs would hold {plan_text} bytes of prompts, system prompts, variables and commands: at most {} in one run; shorten them, or use fewer epochs or variants",
                    bounds::PLAN_TEXT
                )
            })
        })?;
    let at = if epochs > 1 {
        "epochs"
    } else if variants.len() > 1 {
        "matrix"
    } else {
        "tasks"
    };
    Some((at, too_big))
}

/// The text a task run copies from its task and defaults: what makes a plan large.
fn text_bytes(t: &TaskFields, d: &TaskFields) -> u64 {
    let len = |f: fn(&TaskFields) -> Option<&String>| f(t).or_else(|| f(d)).map_or(0, String::len);
    let env = |f: &TaskFields| {
        f.env
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
    };
    (len(|x| x.prompt.as_ref())
        + len(|x| x.system.as_ref())
        + len(|x| x.setup.as_ref())
        + len(|x| x.check.as_ref())
        + env(t)
        + env(d)) as u64
}

/// What holds across the tasks as written: each has a valid id of its own, no two share
/// one, and none sets a field a matrix axis decides.
fn check_tasks(job: &JobFile, raw: &serde_yaml::Value, cx: &mut Ctx) {
    let text = cx.diags.text();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, t) in job.tasks.iter().enumerate() {
        let raw_task = raw
            .get("tasks")
            .and_then(|ts| ts.get(i))
            .unwrap_or(&serde_yaml::Value::Null);
        for axis in job.matrix.keys() {
            if let Some(field) = matrix::task_conflict(raw_task, axis) {
                let mut at = vec![key("tasks"), Seg::Index(i)];
                at.extend(field.split('.').map(key));
                let why = if field == axis.as_str() {
                    String::new()
                } else {
                    format!(" (`{field}` set on the task would decide it)")
                };
                cx.err(
                    &at,
                    format!("`{axis}` is a matrix axis, so the matrix decides it for every task{why}: remove it here, or from `matrix`"),
                );
            }
        }
        check_id(i, t, cx);
        if let Some(id) = &t.id {
            if let Some(first) = seen.get(id) {
                let first_line = match cx.diags.suite_origin(*first) {
                    Some(o) => format!(" (first in {})", o.file),
                    None => locate(text, &[key("tasks"), Seg::Index(*first), key("id")])
                        .map(|(l, _)| format!(" (first at line {l})"))
                        .unwrap_or_default(),
                };
                cx.err(
                    &[key("tasks"), Seg::Index(i), key("id")],
                    format!("duplicate task id \"{id}\"{first_line}; task ids must be unique"),
                );
            } else {
                seen.insert(id.clone(), i);
            }
        }
    }
}

/// Keys name files and simulator routes: two runs of tasks must never share one (a
/// task id with "--" could meet another task's variant key).
fn check_run_names(grid: &[Vec<TaskSpec>], cx: &mut Ctx) {
    let mut keys: HashMap<String, usize> = HashMap::new();
    for (i, row) in grid.iter().enumerate() {
        for spec in row {
            if let Some(other) = keys.insert(spec.id.clone(), i) {
                // Two tasks of the same id are reported as such by `check_tasks`.
                let same_id = grid[other].first().is_some_and(|o| o.task == spec.task);
                if other != i && !same_id {
                    cx.err(
                        &[key("tasks"), Seg::Index(i), key("id")],
                        format!("this task's run \"{}\" has the same name as a run of tasks[{other}]: rename one of the tasks", spec.id),
                    );
                }
            }
        }
    }
}

/// Epoch by epoch, task by task, every variant of a task next to each other: a run
/// cut short still holds comparable samples of each variant.
fn order_runs(grid: &[Vec<TaskSpec>], variants: &[Variant], epochs: u32) -> Vec<TaskSpec> {
    let mut tasks = Vec::with_capacity(grid.len() * variants.len() * epochs as usize);
    for epoch in 1..=epochs {
        for row in grid {
            for (vi, spec) in row.iter().enumerate() {
                let mut s = spec.clone();
                s.epoch = epoch;
                s.id = matrix::instance_key(&s.task, &variants[vi], epoch, epochs);
                tasks.push(s);
            }
        }
    }
    tasks
}

/// One task of one variant (whose defaults `job` carries), every field resolved; None
/// The price a task is billed at: one-hour cache writes where its cache asks for them,
/// halved in batch mode.
fn billed(
    p: crate::vocab::price::Price,
    cache: &Caching,
    provider: Option<&ProviderSpec>,
    batched: bool,
) -> crate::vocab::price::Price {
    let p = if provider.is_some_and(|pr| cache.one_hour_writes(pr.protocol)) {
        p.with_one_hour_writes()
    } else {
        p
    };
    if batched {
        p.batched()
    } else {
        p
    }
}

/// when anything about it is wrong (all of it reported).
fn expand_task(
    job: &JobFile,
    i: usize,
    t: &TaskFields,
    shared: &Shared,
    registry: &Registry,
    cx: &mut Ctx,
) -> Option<TaskSpec> {
    let d = &job.defaults;
    let before = cx.diags.len();
    // A missing or bad id is reported once, by `check_tasks`; such a task gets no spec.
    let id = t.id.clone().filter(|id| valid_id(id));
    let prompt = resolve_prompt(i, t, d, cx);
    let agent = super::verifiers::resolve_agent(t, d);
    let solution = super::verifiers::resolve_solution(i, t, d, agent, cx);
    let verifier = super::verifiers::resolve_verifier(i, t, d, cx);
    let (provider, provider_at) = resolve_task_provider(i, t, d, shared.providers, cx);
    let (model, model_at) = resolve_model(i, t, d, agent, cx);
    let (max_tokens, max_tokens_at) = resolve_max_tokens(i, t, d);
    let batch = resolve_batch(i, t, d, provider.as_deref(), cx);
    let stream = resolve_stream(
        i,
        t,
        d,
        provider.as_deref(),
        (max_tokens, &max_tokens_at),
        batch.is_some(),
        cx,
    );
    let toolset = resolve_task_toolset(i, t, d, shared.toolsets, registry, cx);
    let tools = toolset
        .as_ref()
        .map(|ts| ts.tools.clone())
        .unwrap_or_default();
    let environment = super::environments::resolve_environment(i, t, d, cx);
    let repo = resolve_repo(
        i,
        t,
        d,
        t.environment.is_some() || d.environment.is_some(),
        cx,
    );
    check_toolset_needs(i, t, d, toolset.as_deref(), repo.is_some(), registry, cx);
    let env = resolve_env(i, t, d, shared.providers, cx);
    let sandbox = resolve_sandbox(t, d);
    let written_limits = merge_task_limits(t, d);
    let team = resolve_task_team(i, t, d, shared.teams, cx);
    let protocol = provider.as_ref().map(|p| p.protocol);
    let price = resolve_price(
        job,
        &model,
        &model_at,
        protocol,
        &written_limits,
        team.as_deref(),
        cx,
    );
    let limits = resolve_limits(&written_limits);
    let request = resolve_request_fields(
        i,
        t,
        d,
        provider.as_deref(),
        (max_tokens, &max_tokens_at),
        limits.min_max_tokens,
        !tools.is_empty(),
        cx,
    );
    let sim = resolve_sim(i, t, d, provider.as_deref(), &provider_at, agent, cx);
    let context =
        super::window::resolve_context(i, t, d, &model, provider.as_ref().map(|p| p.protocol), cx);
    if cx.diags.len() > before {
        return None;
    }
    let id = id?;
    let cache = resolve_cache(t, d, provider.as_deref());
    let price = price.map(|p| billed(p, &cache, provider.as_deref(), batch.is_some()));
    Some(TaskSpec {
        task: id.clone(),
        id,
        variant: String::new(),
        axes: Vec::new(),
        epoch: 1,
        prompt,
        provider: provider?,
        team,
        toolset: toolset?,
        repo,
        env,
        sandbox,
        environment,
        check_environment: t
            .check_environment
            .or(d.check_environment)
            .unwrap_or_default(),
        model,
        max_tokens,
        system: t.system.clone().or_else(|| d.system.clone()),
        tools,
        limits,
        extra: request.extra,
        thinking_budget: request.thinking_budget,
        cache,
        context,
        stream,
        batch,
        price: price.filter(|_| agent == AgentKind::Model),
        sim,
        agent,
        solution,
        verifier,
    })
}

/// The simulator script of a task on the simulator, and the API key a real provider
/// needs; a reference agent needs neither.
fn resolve_sim(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    provider: Option<&ProviderSpec>,
    provider_at: &[Seg],
    agent: AgentKind,
    cx: &mut Ctx,
) -> Option<Arc<crate::sim::script::Script>> {
    let p = provider.filter(|_| agent == AgentKind::Model)?;
    let sim = resolve_task_script(i, t, d, p, cx);
    if let Some(message) = missing_api_key(p, cx.env) {
        cx.err(provider_at, message);
    }
    sim
}

/// Each caching field from the task, else its provider, else the defaults (a provider
/// that cannot take the cache fields says `mode: off` once for all its tasks).
fn resolve_cache(t: &TaskFields, d: &TaskFields, p: Option<&ProviderSpec>) -> Caching {
    let layers = [t.cache, p.and_then(|p| p.cache), d.cache];
    Caching {
        mode: layers
            .iter()
            .flatten()
            .find_map(|c| c.mode)
            .unwrap_or_default(),
        ttl: layers
            .iter()
            .flatten()
            .find_map(|c| c.ttl)
            .unwrap_or_default(),
        retention: layers.iter().flatten().find_map(|c| c.retention),
    }
}

/// Checks a task's id, which names its report files: the same in every variant, so
/// checked once, whatever the matrix.
fn check_id(i: usize, t: &TaskFields, cx: &mut Ctx) {
    match &t.id {
        None => cx.err(&[key("tasks"), Seg::Index(i)], "the task has no `id`"),
        Some(id) if id.len() > MAX_ID => cx.err(
            &place(i, Some(Layer::Task), &["id"]),
            format!(
                "the task id is {} characters long: at most {MAX_ID} (it names report files)",
                id.len()
            ),
        ),
        Some(id) if !valid_id(id) => cx.err(
            &place(i, Some(Layer::Task), &["id"]),
            format!("invalid task id \"{id}\": use letters, digits, '.', '_' and '-', not starting with '.' (it names report files)"),
        ),
        Some(_) => {}
    }
}

/// The task's prompt (its own, or the default one; an empty one is reported where it
/// is written, in fields.rs).
fn resolve_prompt(i: usize, t: &TaskFields, d: &TaskFields, cx: &mut Ctx) -> String {
    let prompt = t.prompt.as_ref().or(d.prompt.as_ref());
    if prompt.is_none() {
        cx.err(
            &origin(i, false, false, &["prompt"]),
            "the task has no prompt: write `prompt:` on the task, or in `defaults` for every task",
        );
    }
    prompt.cloned().unwrap_or_default()
}

/// The task's model, and where it was set.
/// The model; a reference agent sends no request, so its model is its name unless
/// one is set.
fn resolve_model(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    agent: AgentKind,
    cx: &mut Ctx,
) -> (String, Vec<Seg>) {
    if agent != AgentKind::Model {
        let model = t.model.clone().or_else(|| d.model.clone());
        let at = origin(i, t.model.is_some(), d.model.is_some(), &["model"]);
        return (model.unwrap_or_else(|| agent.as_str().to_string()), at);
    }
    let model = t
        .model
        .clone()
        .or_else(|| d.model.clone())
        .unwrap_or_default();
    let model_at = origin(i, t.model.is_some(), d.model.is_some(), &["model"]);
    // An empty one is reported where it is written (fields.rs).
    if t.model.is_none() && d.model.is_none() {
        cx.err(
            &model_at,
            "no model: set `model` on the task or in `defaults`",
        );
    }
    (model, model_at)
}

/// The variables the task's commands get: the defaults', then the task's own over
/// them. No provider's API key variable may be among them (each name on its own is
/// checked where it is written, in fields.rs).
fn resolve_env(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    providers: &BTreeMap<String, Arc<ProviderSpec>>,
    cx: &mut Ctx,
) -> BTreeMap<String, String> {
    let mut env = d.env.clone().unwrap_or_default();
    env.extend(t.env.clone().unwrap_or_default());
    for name in env.keys() {
        let on_task = t.env.as_ref().is_some_and(|e| e.contains_key(name));
        let at = origin(i, on_task, !on_task, &["env", name]);
        if providers
            .values()
            .any(|p| p.api_key_env.as_deref() == Some(name.as_str()))
        {
            cx.err(
                &at,
                format!(
                    "{name} is a provider's API key variable; keys never reach a task's commands"
                ),
            );
        }
    }
    env
}

/// The task's sandbox: network on and the sandbox optional unless set otherwise.
fn resolve_sandbox(t: &TaskFields, d: &TaskFields) -> SandboxConfig {
    SandboxConfig {
        network: t
            .sandbox
            .as_ref()
            .and_then(|s| s.network)
            .or_else(|| d.sandbox.as_ref().and_then(|s| s.network))
            .unwrap_or(true),
        require: t
            .sandbox
            .as_ref()
            .and_then(|s| s.require)
            .or_else(|| d.sandbox.as_ref().and_then(|s| s.require))
            .unwrap_or(false),
    }
}
