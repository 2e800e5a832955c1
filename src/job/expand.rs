//! From the job file as written to a [`Plan`]: defaults merged into each task field by
//! field, providers and prices resolved, simulator scripts loaded, and every check that
//! needs no spending done, each error placed at the line of the field that caused it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::locate::{locate, path_string, Seg};
use super::matrix;
use super::schema::{
    Decision, JobFile, KeepWorkspaces, LimitFields, MaxTokensField, McpServerFields,
    ParallelToolCalls, ProviderFields, ReasoningFields, SimSource, TaskFields, TeamFields,
    ThinkingFields, ThinkingKind, ToolsetFields,
};
use super::spec::{
    PeriodCap, Plan, ProviderKind, ProviderSpec, RepoSpec, TaskSpec, TeamSpec, ToolsetSpec,
};
use super::{Diagnostic, JobError};
use crate::model::Protocol;
use crate::sim::script::Script;
use crate::tools::mcp::{McpServerSpec, Transport};
use crate::tools::workspace::SourceKind;
use crate::tools::Registry;
use crate::tools::{Policy, RunLimits, SandboxConfig};
use crate::vocab::bounds;
use crate::vocab::limits::{Limits, RateLimits};
use crate::vocab::price;
use crate::vocab::values::HumanDuration;

const DEFAULT_CONCURRENCY: usize = 4;
const DEFAULT_MAX_TOKENS: u32 = 4096;
const DEFAULT_MAX_TURNS: u32 = 20;
const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(30 * 60);
const DEFAULT_MIN_MAX_TOKENS: u32 = 256;
const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
/// The API version that removed sampling parameters.
const NO_SAMPLING_VERSION: &str = "2026-10-21";
/// Largest max_tokens the SDKs allow without streaming (PROTOCOLS.md A12).
const MAX_NON_STREAMING_TOKENS: u32 = 21_333;
const DEFAULT_RATE_LIMIT_RETRIES: u32 = 8;
/// The default `max_response_bytes`: far above any real answer (a 128k-token answer with
/// its JSON framing is well under 2 MB), far below what would hurt the runner.
const DEFAULT_RESPONSE_BYTES: u64 = 64 << 20;

struct Ctx<'a> {
    file: String,
    text: &'a str,
    dir: PathBuf,
    diags: Vec<Diagnostic>,
    scripts: HashMap<PathBuf, Option<Arc<Script>>>,
    /// The variant being expanded: (axis, value index). A default an axis set is
    /// reported at that value under `matrix`.
    picks: Vec<(String, usize)>,
}

impl Ctx<'_> {
    /// Moves a path under `defaults` that a matrix axis decides to the axis's value.
    fn remap(&self, path: &[Seg]) -> Option<Vec<Seg>> {
        if path.first() != Some(&key("defaults")) {
            return None;
        }
        self.picks.iter().find_map(|(axis, i)| {
            let segs: Vec<Seg> = axis.split('.').map(key).collect();
            let rest = path.get(1..)?;
            if rest.len() >= segs.len() && rest[..segs.len()] == segs[..] {
                let mut p = vec![key("matrix"), key(axis), Seg::Index(*i)];
                p.extend(rest[segs.len()..].iter().cloned());
                Some(p)
            } else {
                None
            }
        })
    }

    fn err(&mut self, path: &[Seg], message: impl Into<String>) {
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
        self.diags.push(Diagnostic {
            file: self.file.clone(),
            line,
            column,
            message,
        });
    }
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

/// Where a merged field came from: the task itself or `defaults`.
fn origin(task: usize, set_on_task: bool, field: &[&str]) -> Vec<Seg> {
    let mut p = if set_on_task {
        vec![key("tasks"), Seg::Index(task)]
    } else {
        vec![key("defaults")]
    };
    p.extend(field.iter().map(|f| key(f)));
    p
}

pub(super) fn expand(
    mut job: JobFile,
    text: &str,
    path: &Path,
    registry: &Registry,
) -> Result<Plan, JobError> {
    let mut cx = Ctx {
        file: path.display().to_string(),
        text,
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        diags: Vec::new(),
        scripts: HashMap::new(),
        picks: Vec::new(),
    };
    if job.name.trim().is_empty() {
        cx.err(&[key("name")], "the job needs a name");
    }
    if job.concurrency == Some(0) {
        cx.err(&[key("concurrency")], "must be at least 1");
    }
    if job.tasks.is_empty() {
        cx.err(&[key("tasks")], "the job has no tasks");
    }
    if job.defaults.id.is_some() {
        cx.err(
            &[key("defaults"), key("id")],
            "a task id cannot be a default; give each task its own id",
        );
    }
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
    let raw_defaults = raw
        .get("defaults")
        .cloned()
        .unwrap_or(serde_yaml::Value::Null);
    let variants = match matrix::variants(&job.matrix, &raw_defaults, &job.defaults) {
        Ok(v) => v,
        Err(errors) => {
            for e in errors {
                let mut at = vec![key("matrix"), key(&e.axis)];
                at.extend(e.index.map(Seg::Index));
                cx.err(&at, e.message);
            }
            Vec::new()
        }
    };
    let epochs = job.epochs.unwrap_or(1);
    if epochs == 0 {
        cx.err(&[key("epochs")], "must be at least 1");
    }
    // Nothing is expanded when the plan alone would not fit in memory: too many task
    // runs, or too much text copied into each.
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
        });
    if let Some(e) = too_big {
        let at = if epochs > 1 {
            "epochs"
        } else if variants.len() > 1 {
            "matrix"
        } else {
            "tasks"
        };
        cx.err(&[key(at)], e);
        return Err(JobError {
            diagnostics: cx.diags,
        });
    }
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
        if let Some(id) = &t.id {
            if let Some(first) = seen.get(id) {
                let first_line = locate(text, &[key("tasks"), Seg::Index(*first), key("id")])
                    .map(|(l, _)| format!(" (first at line {l})"))
                    .unwrap_or_default();
                cx.err(
                    &[key("tasks"), Seg::Index(i), key("id")],
                    format!("duplicate task id \"{id}\"{first_line}; task ids must be unique"),
                );
            } else {
                seen.insert(id.clone(), i);
            }
        }
    }
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
        cx.picks = v.picks.clone();
        vjob.defaults = v.defaults.clone();
        for (i, t) in job.tasks.iter().enumerate() {
            if let Some(mut spec) = expand_task(&vjob, i, t, &shared, registry, &mut cx) {
                spec.variant = v.label.clone();
                spec.axes = v.axes.clone();
                spec.id = matrix::instance_key(&spec.task, v, 1, epochs.max(1));
                grid[i].push(spec);
            }
        }
    }
    cx.picks.clear();
    // The same mistake in every variant is reported once.
    let mut once = std::collections::HashSet::new();
    cx.diags.retain(|d| once.insert(d.clone()));
    // Keys name files and simulator routes: two runs of tasks must never share one (a
    // task id with "--" could meet another task's variant key).
    let mut keys: HashMap<String, usize> = HashMap::new();
    for (i, row) in grid.iter().enumerate() {
        for spec in row {
            if let Some(other) = keys.insert(spec.id.clone(), i) {
                if other != i {
                    cx.err(
                        &[key("tasks"), Seg::Index(i), key("id")],
                        format!("this task's run \"{}\" has the same name as a run of tasks[{other}]: rename one of the tasks", spec.id),
                    );
                }
            }
        }
    }
    // Epoch by epoch, task by task, every variant of a task next to each other: a run
    // cut short still holds comparable samples of each variant.
    let mut tasks = Vec::with_capacity(grid.len() * variants.len() * epochs as usize);
    for epoch in 1..=epochs {
        for row in &grid {
            for (vi, spec) in row.iter().enumerate() {
                let mut s = spec.clone();
                s.epoch = epoch;
                s.id = matrix::instance_key(&s.task, &variants[vi], epoch, epochs);
                tasks.push(s);
            }
        }
    }
    let ledger_path = job.ledger.as_ref().map(|p| cx.dir.join(p));
    if let Some(problem) = ledger_path
        .as_deref()
        .and_then(super::source::not_a_ledger_file)
    {
        cx.err(&[key("ledger")], problem);
    }
    if !cx.diags.is_empty() {
        cx.diags
            .sort_by_key(|d| (d.line.unwrap_or(usize::MAX), d.column.unwrap_or(0)));
        return Err(JobError {
            diagnostics: cx.diags,
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
        job,
    })
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

/// The built-in providers: (name, protocol, simulated).
const BUILTIN_PROVIDERS: [(&str, Protocol, bool); 3] = [
    ("sim", Protocol::Anthropic, true),
    ("anthropic", Protocol::Anthropic, false),
    ("openai", Protocol::OpenaiResponses, false),
];

fn resolve_providers(job: &JobFile, cx: &mut Ctx) -> BTreeMap<String, Arc<ProviderSpec>> {
    let mut names: Vec<&str> = BUILTIN_PROVIDERS.iter().map(|(n, _, _)| *n).collect();
    names.extend(job.providers.keys().map(String::as_str));
    names.dedup();
    let mut out = BTreeMap::new();
    let mut limited_sims = Vec::new();
    for name in names {
        if out.contains_key(name) {
            continue;
        }
        let f = job.providers.get(name).cloned().unwrap_or_default();
        let at = |field: &str| vec![key("providers"), key(name), key(field)];
        let builtin = BUILTIN_PROVIDERS.iter().find(|(n, _, _)| *n == name);
        let protocol = match (f.protocol, builtin) {
            (Some(p), _) => p,
            (None, Some((_, p, _))) => *p,
            (None, None) => {
                cx.err(
                    &[key("providers"), key(name)],
                    format!(
                        "provider \"{name}\" needs a `protocol`: {}",
                        Protocol::ALL.map(Protocol::as_str).join(", ")
                    ),
                );
                Protocol::Anthropic
            }
        };
        let simulated = match (f.simulator, builtin) {
            (Some(false), Some((_, _, true))) => {
                cx.err(
                    &at("simulator"),
                    "the built-in provider sim is always the simulator: define another provider for a real server",
                );
                true
            }
            (Some(s), _) => s,
            (None, Some((_, _, s))) => *s,
            (None, None) => false,
        };
        let kind = if simulated {
            ProviderKind::Sim
        } else {
            ProviderKind::Api
        };
        if kind == ProviderKind::Sim && f.api_key_env.is_some() {
            cx.err(&at("api_key_env"), "the simulator needs no API key");
        }
        let base_url = match (&f.base_url, kind) {
            (Some(u), _) => Some(u.clone()),
            (None, ProviderKind::Api) => Some(protocol.default_base_url().to_string()),
            (None, ProviderKind::Sim) => None,
        };
        if let Some(u) = &base_url {
            if let Err(e) = protocol.url(u) {
                cx.err(&at("base_url"), e);
            }
        }
        let ProviderFields {
            anthropic_version,
            timeout,
            max_response_bytes,
            max_retries,
            max_rate_limit_retries,
            api_key_env,
            api_key_optional,
            max_tokens_field,
            parallel_tool_calls,
            rpm,
            itpm,
            otpm,
            burst,
            server_limits,
            ..
        } = f;
        let anthropic_only: [(&str, bool); 1] =
            [("anthropic_version", anthropic_version.is_some())];
        let openai_only = [
            ("max_tokens_field", max_tokens_field.is_some()),
            ("parallel_tool_calls", parallel_tool_calls.is_some()),
        ];
        for (field, set) in anthropic_only {
            if set && protocol != Protocol::Anthropic {
                cx.err(
                    &at(field),
                    format!("applies to the anthropic protocol only, not {protocol}"),
                );
            }
        }
        for (field, set) in openai_only {
            let applies = match field {
                "max_tokens_field" => protocol == Protocol::OpenaiChat,
                _ => protocol != Protocol::Anthropic,
            };
            if set && !applies {
                cx.err(
                    &at(field),
                    format!("does not apply to the {protocol} protocol"),
                );
            }
        }
        if api_key_optional.is_some() && kind == ProviderKind::Sim {
            cx.err(&at("api_key_optional"), "the simulator needs no API key");
        }
        let base = vec![key("providers"), key(name)];
        let rate = rate_limits(cx, &base, rpm, itpm, otpm, burst);
        let server_limits = server_limits.map(|s| {
            if kind != ProviderKind::Sim {
                cx.err(
                    &at("server_limits"),
                    "only a simulated provider (providers.sim, or one with `simulator: true`) has server limits",
                );
            } else if base_url.is_some() {
                cx.err(
                    &at("server_limits"),
                    "apply only to the simulator a run starts; start a standalone one with `agentbatch sim --rpm N --itpm N --otpm N`",
                );
            }
            limited_sims.push(name.to_string());
            let mut at = base.clone();
            at.push(key("server_limits"));
            rate_limits(cx, &at, s.rpm, s.itpm, s.otpm, s.burst)
        });
        if limited_sims.len() > 1 {
            cx.err(
                &at("server_limits"),
                format!(
                    "the run's simulator has one set of limits, already given by providers.{}",
                    limited_sims[0]
                ),
            );
        }
        if let Some(v) = anthropic_version.as_deref() {
            let header_safe = !v.trim().is_empty() && v.bytes().all(|b| b.is_ascii_graphic());
            if !header_safe {
                cx.err(
                    &at("anthropic_version"),
                    "must be a version such as \"2023-06-01\" (no spaces or special characters)",
                );
            }
        }
        // OpenAI's own endpoint wants max_completion_tokens (its reasoning models refuse
        // max_tokens); compatible servers mostly know only max_tokens.
        let on_openai = base_url
            .as_deref()
            .is_some_and(|u| u.contains("api.openai.com"));
        let max_tokens_field = match max_tokens_field {
            Some(MaxTokensField::MaxTokens) => "max_tokens",
            Some(MaxTokensField::MaxCompletionTokens) => "max_completion_tokens",
            None if on_openai => "max_completion_tokens",
            None => "max_tokens",
        };
        if let Some(b) = max_response_bytes.filter(|b| b.0 > bounds::RESPONSE_BYTES) {
            cx.err(
                &at("max_response_bytes"),
                format!(
                    "{} bytes is too large: at most {}",
                    b.0,
                    bounds::RESPONSE_BYTES
                ),
            );
        }
        let default_key_env = (kind == ProviderKind::Api).then(|| protocol.default_key_env());
        out.insert(
            name.to_string(),
            Arc::new(ProviderSpec {
                name: name.to_string(),
                kind,
                protocol,
                base_url,
                api_key_env: api_key_env.or_else(|| default_key_env.map(str::to_string)),
                api_key_optional: api_key_optional.unwrap_or(false),
                anthropic_version: anthropic_version
                    .unwrap_or_else(|| DEFAULT_ANTHROPIC_VERSION.into()),
                max_tokens_field: max_tokens_field.to_string(),
                parallel_tool_calls: match parallel_tool_calls {
                    _ if protocol == Protocol::Anthropic => None,
                    Some(ParallelToolCalls::Send(v)) => Some(v),
                    Some(ParallelToolCalls::Omit(_)) => None,
                    None => Some(true),
                },
                timeout: timeout.map_or(Duration::from_secs(600), |d| d.0),
                max_response_bytes: max_response_bytes.map_or(DEFAULT_RESPONSE_BYTES, |b| b.0),
                max_retries: max_retries.unwrap_or(2),
                max_rate_limit_retries: max_rate_limit_retries
                    .unwrap_or(DEFAULT_RATE_LIMIT_RETRIES),
                rate,
                server_limits,
            }),
        );
    }
    out
}

/// Checks and resolves per-minute limits set at `at`.
fn rate_limits(
    cx: &mut Ctx,
    at: &[Seg],
    rpm: Option<u32>,
    itpm: Option<u32>,
    otpm: Option<u32>,
    burst: Option<HumanDuration>,
) -> RateLimits {
    for (name, v) in [("rpm", rpm), ("itpm", itpm), ("otpm", otpm)] {
        if v == Some(0) {
            let mut p = at.to_vec();
            p.push(key(name));
            cx.err(&p, "must be at least 1 (leave it out for no limit)");
        }
    }
    RateLimits {
        rpm: rpm.filter(|v| *v > 0),
        itpm: itpm.filter(|v| *v > 0),
        otpm: otpm.filter(|v| *v > 0),
        burst: burst.map_or(Duration::from_secs(1), |b| b.0),
    }
}

fn resolve_teams(job: &JobFile, cx: &mut Ctx) -> BTreeMap<String, Arc<TeamSpec>> {
    let mut out = BTreeMap::new();
    for (name, f) in &job.teams {
        let at = vec![key("teams"), key(name)];
        let TeamFields {
            max_cost_usd,
            cap,
            concurrency,
            rpm,
            itpm,
            otpm,
            burst,
        } = f.clone();
        if concurrency == Some(0) {
            let mut p = at.clone();
            p.push(key("concurrency"));
            cx.err(&p, "must be at least 1");
        }
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid_name {
            cx.err(
                &at,
                format!("invalid team name \"{name}\": use letters, digits, '.', '_' and '-'"),
            );
        }
        let rate = rate_limits(cx, &at, rpm, itpm, otpm, burst);
        out.insert(
            name.clone(),
            Arc::new(TeamSpec {
                name: name.clone(),
                max_cost_usd: max_cost_usd.map(|m| m.0),
                cap: cap.map(|c| PeriodCap {
                    usd: c.usd.0,
                    period: c.period,
                }),
                concurrency,
                rate,
            }),
        );
    }
    out
}

const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
const DEFAULT_BASH_OUTPUT: usize = 30_000;
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// The job's tool sets, with the built-in `coding` and `readonly` unless redefined.
fn resolve_toolsets(
    job: &JobFile,
    registry: &Registry,
    cx: &mut Ctx,
) -> BTreeMap<String, Arc<ToolsetSpec>> {
    let mut all: BTreeMap<String, ToolsetFields> = BTreeMap::new();
    for (name, tools) in [
        ("coding", &crate::tools::CODING_TOOLS[..]),
        ("readonly", &crate::tools::READONLY_TOOLS[..]),
    ] {
        all.insert(
            name.into(),
            ToolsetFields {
                tools: tools.iter().map(|t| t.to_string()).collect(),
                ..Default::default()
            },
        );
    }
    all.extend(job.toolsets.clone());
    let mut out = BTreeMap::new();
    for (name, f) in all {
        let here = vec![key("toolsets"), key(&name)];
        let at = |parts: &[Seg]| {
            let mut p = here.clone();
            p.extend_from_slice(parts);
            p
        };
        for (j, tool) in f.tools.iter().enumerate() {
            if !registry.contains(tool) {
                let known: Vec<&str> = registry.names().collect();
                cx.err(
                    &at(&[key("tools"), Seg::Index(j)]),
                    format!(
                        "unknown tool \"{tool}\"; the tools are: {}",
                        known.join(", ")
                    ),
                );
            } else if f.tools[..j].contains(tool) {
                cx.err(
                    &at(&[key("tools"), Seg::Index(j)]),
                    format!("tool \"{tool}\" is listed twice"),
                );
            }
        }
        let mcp = resolve_mcp(&f, &here, cx);
        let p = f.policy.clone().unwrap_or_default();
        let default_allow = p.default.is_none_or(|d| d == Decision::Allow);
        for (kind, rules) in [("deny", &p.deny), ("allow", &p.allow)] {
            for (j, rule) in rules.iter().enumerate() {
                let here = at(&[key("policy"), key(kind), Seg::Index(j)]);
                match Policy::new(std::slice::from_ref(rule), &[], true) {
                    Err(e) => cx.err(&here, e.to_string()),
                    Ok(one) => {
                        for (_, tool) in one.tools() {
                            let from_mcp = mcp.iter().any(|s| tool.starts_with(&s.prefix()));
                            if !f.tools.iter().any(|t| t == tool) && !from_mcp {
                                cx.err(&here, format!("rule \"{rule}\" is about {tool}, which tool set {name} does not have (MCP tools are named mcp__<server>__<tool>)"));
                            }
                        }
                    }
                }
            }
        }
        let policy = Policy::new(&p.deny, &p.allow, default_allow).unwrap_or_default();
        let bash = f.bash.clone().unwrap_or_default();
        if bash.max_output.is_some_and(|m| m < 100) {
            cx.err(
                &at(&[key("bash"), key("max_output")]),
                "must be at least 100 bytes",
            );
        }
        let mut rules: Vec<String> = p.deny.iter().map(|r| format!("deny {r}")).collect();
        rules.extend(p.allow.iter().map(|r| format!("allow {r}")));
        rules.push(format!(
            "default {}",
            if default_allow { "allow" } else { "deny" }
        ));
        out.insert(
            name.clone(),
            Arc::new(ToolsetSpec {
                name: Some(name),
                tools: f.tools.clone(),
                policy: Arc::new(policy),
                rules,
                bash: RunLimits {
                    timeout: bash.timeout.map_or(DEFAULT_BASH_TIMEOUT, |t| t.0),
                    max_output: bash.max_output.unwrap_or(DEFAULT_BASH_OUTPUT),
                },
                mcp,
            }),
        );
    }
    out
}

const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(60);
const HTTP_KINDS: [&str; 3] = ["http", "streamable-http", "streamableHttp"];

/// A tool set's MCP servers: its `mcp` entries and those of its `mcp_config` file.
fn resolve_mcp(f: &ToolsetFields, here: &[Seg], cx: &mut Ctx) -> Vec<Arc<McpServerSpec>> {
    let mut entries: Vec<(String, McpServerFields, Vec<Seg>)> = f
        .mcp
        .iter()
        .map(|(n, s)| {
            let mut at = here.to_vec();
            at.extend([key("mcp"), key(n)]);
            (n.clone(), s.clone(), at)
        })
        .collect();
    if let Some(file) = &f.mcp_config {
        let mut at = here.to_vec();
        at.push(key("mcp_config"));
        match read_mcp_config(&cx.dir.join(file)) {
            Ok(servers) => {
                for (n, s) in servers {
                    if f.mcp.contains_key(&n) {
                        cx.err(
                            &at,
                            format!("MCP server \"{n}\" is in {file} and in `mcp`: rename one"),
                        );
                    } else {
                        entries.push((n, s, at.clone()));
                    }
                }
            }
            Err(e) => cx.err(&at, e),
        }
    }
    let mut out: Vec<Arc<McpServerSpec>> = Vec::new();
    for (name, s, at) in entries {
        let field = |k: &str| {
            let mut p = at.clone();
            p.push(key(k));
            p
        };
        let kind = s
            .kind
            .clone()
            .unwrap_or_else(|| if s.url.is_some() { "http" } else { "stdio" }.into());
        let http = HTTP_KINDS.contains(&kind.as_str());
        let transport = match (kind.as_str(), &s.command, &s.url) {
            ("sse", _, _) => {
                cx.err(&field("type"), "the old HTTP+SSE transport is not supported: use the server's Streamable HTTP endpoint (`type: http`)");
                continue;
            }
            ("stdio", Some(command), None) => Transport::Stdio {
                command: command.clone(),
                args: s.args.clone(),
                env: s.env.clone(),
                cwd: s.cwd.clone(),
            },
            (_, None, Some(url)) if http => {
                let scheme_ok = ["http://", "https://", "${"]
                    .iter()
                    .any(|p| url.starts_with(p));
                if !scheme_ok {
                    cx.err(&field("url"), "use an http:// or https:// URL");
                }
                Transport::Http {
                    url: url.clone(),
                    headers: s.headers.clone(),
                }
            }
            (_, Some(_), Some(_)) => {
                cx.err(
                    &at,
                    "give either `command` (stdio) or `url` (http), not both",
                );
                continue;
            }
            ("stdio", None, _) => {
                cx.err(&at, "a stdio server needs a `command`");
                continue;
            }
            _ if http => {
                cx.err(&at, "an http server needs a `url`");
                continue;
            }
            (other, _, _) => {
                cx.err(
                    &field("type"),
                    format!("unknown MCP transport \"{other}\": use stdio or http"),
                );
                continue;
            }
        };
        let spec = McpServerSpec {
            name: name.clone(),
            transport,
            call_timeout: s.timeout.map_or(DEFAULT_MCP_TIMEOUT, |t| t.0),
            startup_timeout: s.startup_timeout.map_or(DEFAULT_MCP_TIMEOUT, |t| t.0),
        };
        if out.iter().any(|o| o.prefix() == spec.prefix()) {
            cx.err(
                &at,
                format!(
                    "MCP server \"{name}\" gets the same tool prefix {} as another server: rename it",
                    spec.prefix()
                ),
            );
            continue;
        }
        out.push(Arc::new(spec));
    }
    out
}

/// The servers of a `.mcp.json` file (`mcpServers`, or VS Code's `servers`). Keys other
/// tools put there (`disabled`, `autoApprove`, ...) are ignored, since the file is
/// shared with them.
fn read_mcp_config(path: &Path) -> Result<Vec<(String, McpServerFields)>, String> {
    let shown = path.display();
    let text = super::source::read_text(path, super::source::MAX_MCP_CONFIG, "the file")
        .map_err(|e| format!("{shown}: {e}"))?;
    // JSON objects may repeat a key too (the last would win): JSON is YAML, so the same
    // walk finds it.
    if let Some(d) = super::locate::duplicate_key(&text) {
        let line = d.at.map(|(l, _)| format!(":{l}")).unwrap_or_default();
        return Err(format!(
            "{shown}{line}: {}: a key written twice (first at line {}); remove or rename one",
            super::locate::path_string(&d.path),
            d.first_line.map_or("?".to_string(), |l| l.to_string())
        ));
    }
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| format!("{shown} is not valid JSON: {e}"))?;
    let servers = doc
        .get("mcpServers")
        .or_else(|| doc.get("servers"))
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{shown} has no `mcpServers` object"))?;
    const KNOWN: [&str; 9] = [
        "type",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "timeout",
        "startup_timeout",
    ];
    servers
        .iter()
        .map(|(name, v)| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| KNOWN.contains(&k.as_str()));
            }
            serde_json::from_value::<McpServerFields>(v)
                .map(|s| (name.clone(), s))
                .map_err(|e| format!("{shown}: server \"{name}\": {e}"))
        })
        .collect()
}

/// A task's tools: a named tool set, or a plain list (everything allowed).
fn resolve_task_toolset(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    toolsets: &BTreeMap<String, Arc<ToolsetSpec>>,
    registry: &Registry,
    cx: &mut Ctx,
) -> Option<Arc<ToolsetSpec>> {
    for (fields, on_task) in [(t, true), (d, false)] {
        if fields.tools.is_some() && fields.toolset.is_some() {
            cx.err(
                &origin(i, on_task, &["toolset"]),
                "set either `tools` or `toolset`, not both",
            );
            return None;
        }
    }
    let (name, list, on_task) = if t.toolset.is_some() || t.tools.is_some() {
        (t.toolset.clone(), t.tools.clone(), true)
    } else {
        (d.toolset.clone(), d.tools.clone(), false)
    };
    if let Some(name) = name {
        let found = toolsets.get(&name).cloned();
        if found.is_none() {
            let known: Vec<&str> = toolsets.keys().map(String::as_str).collect();
            cx.err(
                &origin(i, on_task, &["toolset"]),
                format!(
                    "unknown tool set \"{name}\"; the tool sets are: {}",
                    known.join(", ")
                ),
            );
        }
        return found;
    }
    let tools = list.unwrap_or_default();
    let mut ok = true;
    for (j, tool) in tools.iter().enumerate() {
        let mut at = origin(i, on_task, &["tools"]);
        at.push(Seg::Index(j));
        if !registry.contains(tool) {
            let known: Vec<&str> = registry.names().collect();
            cx.err(
                &at,
                format!(
                    "unknown tool \"{tool}\"; the tools are: {}",
                    known.join(", ")
                ),
            );
            ok = false;
        } else if tools[..j].contains(tool) {
            cx.err(&at, format!("tool \"{tool}\" is listed twice"));
            ok = false;
        }
    }
    ok.then(|| {
        Arc::new(ToolsetSpec {
            name: None,
            tools,
            policy: Arc::new(Policy::default()),
            rules: vec!["default allow".into()],
            bash: RunLimits {
                timeout: DEFAULT_BASH_TIMEOUT,
                max_output: DEFAULT_BASH_OUTPUT,
            },
            mcp: Vec::new(),
        })
    })
}

/// The task's repository and the commands around its loop.
fn resolve_repo(i: usize, t: &TaskFields, d: &TaskFields, cx: &mut Ctx) -> Option<RepoSpec> {
    let pick = |f: fn(&TaskFields) -> Option<String>| {
        f(t).map(|v| (v, true)).or_else(|| f(d).map(|v| (v, false)))
    };
    let repo = pick(|x| x.repo.clone());
    let git_ref = pick(|x| x.git_ref.clone());
    let setup = pick(|x| x.setup.clone());
    let check = pick(|x| x.check.clone());
    let check_sandbox = pick(|x| x.check_sandbox.map(|b| b.to_string()));
    let Some((repo, repo_on_task)) = repo else {
        for (field, v) in [
            ("check", &check),
            ("setup", &setup),
            ("ref", &git_ref),
            ("check_sandbox", &check_sandbox),
        ] {
            if let Some((_, on_task)) = v {
                cx.err(
                    &origin(i, *on_task, &[field]),
                    format!("`{field}` works on the task's repository: give the task a `repo`"),
                );
            }
        }
        return None;
    };
    let path = cx.dir.join(&repo);
    if !path.exists() {
        cx.err(&origin(i, repo_on_task, &["repo"]), format!("nothing at {}: repo must be a local git repository, git bundle or folder, relative to the job file", path.display()));
        return None;
    }
    let kind = match SourceKind::of(&path) {
        Ok(k) => k,
        Err(e) => {
            cx.err(&origin(i, repo_on_task, &["repo"]), e.to_string());
            return None;
        }
    };
    if let Some((r, on_task)) = &git_ref {
        if !kind.is_git() {
            cx.err(
                &origin(i, *on_task, &["ref"]),
                format!(
                    "ref \"{r}\" needs a git repository, and {} is a plain folder",
                    path.display()
                ),
            );
        }
    }
    for (field, v) in [("check", &check), ("setup", &setup)] {
        if let Some((c, on_task)) = v {
            if c.trim().is_empty() {
                cx.err(&origin(i, *on_task, &[field]), "is empty");
            }
        }
    }
    let dur = |f: fn(&TaskFields) -> Option<HumanDuration>| {
        f(t).or_else(|| f(d))
            .map_or(DEFAULT_COMMAND_TIMEOUT, |h| h.0)
    };
    Some(RepoSpec {
        path,
        git_ref: git_ref.map(|(r, _)| r),
        setup: setup.map(|(s, _)| s),
        setup_timeout: dur(|x| x.setup_timeout),
        check: check.map(|(c, _)| c),
        check_timeout: dur(|x| x.check_timeout),
        check_sandbox: t.check_sandbox.or(d.check_sandbox).unwrap_or(true),
        keep_workspaces: t
            .keep_workspaces
            .or(d.keep_workspaces)
            .unwrap_or(KeepWorkspaces::OnFailure),
    })
}

fn merge_limits(task: Option<&LimitFields>, defaults: Option<&LimitFields>) -> LimitFields {
    let t = task.cloned().unwrap_or_default();
    let d = defaults.cloned().unwrap_or_default();
    LimitFields {
        max_turns: t.max_turns.or(d.max_turns),
        time_limit: t.time_limit.or(d.time_limit),
        max_input_tokens: t.max_input_tokens.or(d.max_input_tokens),
        max_output_tokens: t.max_output_tokens.or(d.max_output_tokens),
        max_cost_usd: t.max_cost_usd.or(d.max_cost_usd),
        min_max_tokens: t.min_max_tokens.or(d.min_max_tokens),
        wrap_up: t.wrap_up.or(d.wrap_up),
        show_budget: t.show_budget.or(d.show_budget),
    }
}

fn limit_origin(
    i: usize,
    t: &TaskFields,
    field: &str,
    pick: impl Fn(&LimitFields) -> bool,
) -> Vec<Seg> {
    origin(i, t.limits.as_ref().is_some_and(pick), &["limits", field])
}

/// What the job defines once and tasks refer to.
struct Shared<'a> {
    providers: &'a BTreeMap<String, Arc<ProviderSpec>>,
    teams: &'a BTreeMap<String, Arc<TeamSpec>>,
    toolsets: &'a BTreeMap<String, Arc<ToolsetSpec>>,
}

fn expand_task(
    job: &JobFile,
    i: usize,
    t: &TaskFields,
    shared: &Shared,
    registry: &Registry,
    cx: &mut Ctx,
) -> Option<TaskSpec> {
    let Shared {
        providers,
        teams,
        toolsets,
    } = *shared;
    let d = &job.defaults;
    let here = vec![key("tasks"), Seg::Index(i)];
    let before = cx.diags.len();

    let id = match &t.id {
        None => {
            cx.err(&here, "the task has no `id`");
            String::new()
        }
        Some(id) if id.len() > MAX_ID => {
            cx.err(
                &origin(i, true, &["id"]),
                format!(
                    "the task id is {} characters long: at most {MAX_ID} (it names report files)",
                    id.len()
                ),
            );
            String::new()
        }
        Some(id) if !valid_id(id) => {
            cx.err(
                &origin(i, true, &["id"]),
                format!("invalid task id \"{id}\": use letters, digits, '.', '_' and '-', not starting with '.' (it names report files)"),
            );
            String::new()
        }
        Some(id) => id.clone(),
    };
    let prompt = t
        .prompt
        .clone()
        .or_else(|| d.prompt.clone())
        .unwrap_or_default();
    if prompt.trim().is_empty() {
        cx.err(
            &origin(i, t.prompt.is_some(), &["prompt"]),
            "the task has no prompt",
        );
    }
    let provider_name = t
        .provider
        .clone()
        .or_else(|| d.provider.clone())
        .unwrap_or_else(|| "sim".into());
    let provider_at = origin(i, t.provider.is_some(), &["provider"]);
    let provider = providers.get(&provider_name).cloned();
    if provider.is_none() {
        cx.err(
            &provider_at,
            format!(
                "unknown provider \"{provider_name}\": the providers are {}",
                providers
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    let model = t
        .model
        .clone()
        .or_else(|| d.model.clone())
        .unwrap_or_default();
    let model_at = origin(i, t.model.is_some(), &["model"]);
    if model.trim().is_empty() {
        cx.err(
            &model_at,
            "no model: set `model` on the task or in `defaults`",
        );
    }
    let max_tokens = t.max_tokens.or(d.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS);
    let max_tokens_at = origin(i, t.max_tokens.is_some(), &["max_tokens"]);
    if max_tokens == 0 {
        cx.err(&max_tokens_at, "must be at least 1");
    }
    let protocol = provider.as_ref().map(|p| p.protocol);
    if provider
        .as_ref()
        .is_some_and(|p| p.kind == ProviderKind::Api && p.protocol == Protocol::Anthropic)
        && max_tokens > MAX_NON_STREAMING_TOKENS
    {
        cx.err(
            &max_tokens_at,
            format!(
                "{max_tokens} is too large for a non-streaming request (the API drops requests expected to run over 10 minutes, above about {MAX_NON_STREAMING_TOKENS} tokens) and agentbatch does not stream yet: use at most {MAX_NON_STREAMING_TOKENS}"
            ),
        );
    }
    let toolset = resolve_task_toolset(i, t, d, toolsets, registry, cx);
    let tools = toolset
        .as_ref()
        .map(|ts| ts.tools.clone())
        .unwrap_or_default();
    let repo = resolve_repo(i, t, d, cx);
    if repo.is_none() {
        if let Some(needs) = tools.iter().find(|n| registry.needs_workspace(n)) {
            let on_task = t.toolset.is_some() || t.tools.is_some();
            let field = if t.toolset.is_some() || (!on_task && d.toolset.is_some()) {
                "toolset"
            } else {
                "tools"
            };
            cx.err(
                &origin(i, on_task, &[field]),
                format!("tool \"{needs}\" works on a repository: give the task a `repo` (a local git repository or folder)"),
            );
        }
    }
    if let Some(ts) = &toolset {
        let at = origin(i, t.toolset.is_some(), &["toolset"]);
        let set = ts.name.as_deref().unwrap_or("(tools)");
        for s in &ts.mcp {
            if s.per_task() && repo.is_none() {
                cx.err(
                    &at,
                    format!("tool set {set}'s MCP server \"{}\" uses {{workspace}}, so the task needs a `repo`", s.name),
                );
            }
            for v in s.variables() {
                if std::env::var_os(&v).is_none_or(|x| x.is_empty()) {
                    cx.err(
                        &at,
                        format!("tool set {set}'s MCP server \"{}\" reads ${{{v}}}, which is not set: export {v}=... (or write ${{{v}:-default}})", s.name),
                    );
                }
            }
        }
    }
    let mut env = d.env.clone().unwrap_or_default();
    env.extend(t.env.clone().unwrap_or_default());
    for name in env.keys() {
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let on_task = t.env.as_ref().is_some_and(|e| e.contains_key(name));
        let at = origin(i, on_task, &["env", name]);
        if !valid {
            cx.err(&at, format!("\"{name}\" is not a valid variable name"));
        }
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
    let sandbox = SandboxConfig {
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
    };

    let l = merge_limits(t.limits.as_ref(), d.limits.as_ref());
    if l.max_turns == Some(0) {
        cx.err(
            &limit_origin(i, t, "max_turns", |l| l.max_turns.is_some()),
            "must be at least 1",
        );
    }
    if l.min_max_tokens == Some(0) {
        cx.err(
            &limit_origin(i, t, "min_max_tokens", |l| l.min_max_tokens.is_some()),
            "must be at least 1",
        );
    }
    let team = match t.team.as_ref().or(d.team.as_ref()) {
        None => None,
        Some(name) => {
            let found = teams.get(name).cloned();
            if found.is_none() {
                let known: Vec<&str> = teams.keys().map(String::as_str).collect();
                cx.err(
                    &origin(i, t.team.is_some(), &["team"]),
                    format!(
                        "unknown team \"{name}\"; {}",
                        if known.is_empty() {
                            "the job defines no `teams:`".to_string()
                        } else {
                            format!("the teams are: {}", known.join(", "))
                        }
                    ),
                );
            }
            found
        }
    };
    let price = price::lookup_for(
        &job.pricing,
        &model,
        protocol.unwrap_or(Protocol::Anthropic),
    );
    let cost_cap = if l.max_cost_usd.is_some() {
        Some("limits.max_cost_usd")
    } else if team
        .as_ref()
        .is_some_and(|t| t.max_cost_usd.is_some() || t.cap.is_some())
    {
        Some("its team's spend cap")
    } else if job.max_cost_usd.is_some() {
        Some("the run's max_cost_usd")
    } else {
        None
    };
    if let (Some(cap), None, false) = (cost_cap, &price, model.is_empty()) {
        cx.err(
            &model_at,
            format!(
                "model \"{model}\" has no price, so {cap} cannot be enforced: add it under `pricing:` (USD per million tokens), e.g. pricing: {{ {model}: {{ input: 3, output: 15 }} }}"
            ),
        );
    }
    let limits = Limits {
        max_turns: l.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
        time_limit: l.time_limit.map_or(DEFAULT_TIME_LIMIT, |d| d.0),
        max_input_tokens: l.max_input_tokens,
        max_output_tokens: l.max_output_tokens,
        max_cost_usd: l.max_cost_usd.map(|m| m.0),
        min_max_tokens: l.min_max_tokens.unwrap_or(DEFAULT_MIN_MAX_TOKENS),
        wrap_up: l.wrap_up.unwrap_or(false),
        show_budget: l.show_budget.unwrap_or(false),
    };

    let mut extra = Map::new();
    let anthropic = protocol.is_none_or(|p| p == Protocol::Anthropic);
    let version = provider
        .as_ref()
        .filter(|_| anthropic)
        .map(|p| p.anthropic_version.clone())
        .unwrap_or_default();
    if protocol == Some(Protocol::OpenaiResponses) {
        // The Responses API refuses max_output_tokens below 16.
        if max_tokens < 16 {
            cx.err(&max_tokens_at, "openai-responses needs at least 16");
        }
        if limits.min_max_tokens < 16 {
            let at = limit_origin(i, t, "min_max_tokens", |l| l.min_max_tokens.is_some());
            cx.err(
                &at,
                "openai-responses needs at least 16 (its smallest max_output_tokens)",
            );
        }
    }
    let sampling: [(&str, Option<Value>, bool); 3] = [
        (
            "temperature",
            t.temperature.or(d.temperature).map(|v| json!(v)),
            t.temperature.is_some(),
        ),
        (
            "top_p",
            t.top_p.or(d.top_p).map(|v| json!(v)),
            t.top_p.is_some(),
        ),
        (
            "top_k",
            t.top_k.or(d.top_k).map(|v| json!(v)),
            t.top_k.is_some(),
        ),
    ];
    for (name, value, on_task) in sampling {
        let Some(value) = value else { continue };
        let at = origin(i, on_task, &[name]);
        // API versions are dates, so a later version compares greater as a string.
        if anthropic && version.as_str() >= NO_SAMPLING_VERSION {
            cx.err(
                &at,
                format!("anthropic-version {NO_SAMPLING_VERSION} refuses {name}: remove it, or set the provider's anthropic_version to 2023-06-01"),
            );
        }
        if !anthropic && name == "top_k" {
            cx.err(&at, "OpenAI protocols have no top_k: remove it");
        }
        // OpenAI's temperature goes up to 2, Anthropic's to 1.
        let top = if anthropic || name == "top_p" {
            1.0
        } else {
            2.0
        };
        let in_range = value.as_f64().is_some_and(|v| (0.0..=top).contains(&v));
        if name != "top_k" && !in_range {
            cx.err(&at, format!("must be between 0 and {top}"));
        }
        extra.insert(name.to_string(), value);
    }
    if let Some(r) = t.reasoning.as_ref().or(d.reasoning.as_ref()) {
        let at = origin(i, t.reasoning.is_some(), &["reasoning"]);
        reasoning_fields(r, protocol, &at, &mut extra, cx);
    }
    if let (Some(parallel), false) = (
        provider.as_ref().and_then(|p| p.parallel_tool_calls),
        tools.is_empty(),
    ) {
        extra.insert("parallel_tool_calls".into(), json!(parallel));
    }
    let thinking = t.thinking.clone().or_else(|| d.thinking.clone());
    let thinking_budget = match thinking.as_ref().map(|th| check_thinking(th, max_tokens)) {
        Some(Err(msg)) => {
            cx.err(&origin(i, t.thinking.is_some(), &["thinking"]), msg);
            None
        }
        Some(Ok(budget)) => budget,
        None => None,
    };
    if let Some(th) = thinking
        .as_ref()
        .filter(|th| th.kind != ThinkingKind::Disabled)
    {
        for name in ["temperature", "top_k"] {
            if extra.contains_key(name) {
                cx.err(
                    &origin(i, t.thinking.is_some(), &["thinking"]),
                    format!(
                        "thinking ({:?}) cannot be combined with {name}: remove one of them",
                        th.kind
                    )
                    .to_lowercase(),
                );
            }
        }
    }
    if let (Some(_), false) = (&thinking, anthropic) {
        cx.err(
            &origin(i, t.thinking.is_some(), &["thinking"]),
            "thinking is an Anthropic setting: for OpenAI reasoning models use `reasoning: {effort: ..., summary: ...}`",
        );
    }
    if let Some(th) = &thinking {
        extra.insert(
            "thinking".into(),
            serde_json::to_value(th).unwrap_or(Value::Null),
        );
    }

    let sim_on_task = t.sim.is_some();
    let sim_source = t.sim.as_ref().or(d.sim.as_ref());
    let sim_at = origin(i, sim_on_task, &["sim"]);
    let mut sim = None;
    if let Some(p) = &provider {
        if p.kind == ProviderKind::Sim {
            match sim_source {
                Some(src) => sim = load_script(src, &sim_at, cx),
                None if p.base_url.is_none() => cx.err(
                    &origin(i, true, &["sim"]),
                    format!("provider {} is the simulator and needs a script: add `sim: path/to/script.yaml` (or an inline script), or choose a real provider such as `provider: anthropic`", p.name),
                ),
                None => {}
            }
        }
        if p.kind == ProviderKind::Api && !p.api_key_optional {
            if let Some(var) = &p.api_key_env {
                if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
                    cx.err(
                        &provider_at,
                        format!("the API key variable {var} is not set: export {var}=<your key>, name another variable in providers.{}.api_key_env, or set providers.{}.api_key_optional: true for a server that takes no key", p.name, p.name),
                    );
                }
            }
        }
    }

    if cx.diags.len() > before {
        return None;
    }
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
        model,
        max_tokens,
        system: t.system.clone().or_else(|| d.system.clone()),
        tools,
        limits,
        extra,
        thinking_budget,
        price,
        sim,
    })
}

/// Ok(budget) for a valid setting (the budget for `enabled`), Err(message) otherwise.
/// Checks `reasoning` and puts it into the request under the protocol's name for it.
fn reasoning_fields(
    r: &ReasoningFields,
    protocol: Option<Protocol>,
    at: &[Seg],
    extra: &mut Map<String, Value>,
    cx: &mut Ctx,
) {
    const EFFORTS: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];
    const SUMMARIES: [&str; 3] = ["auto", "concise", "detailed"];
    let mut sub = |field: &str, msg: String| {
        let mut p = at.to_vec();
        p.push(key(field));
        cx.err(&p, msg);
    };
    if let Some(e) = r.effort.as_deref().filter(|e| !EFFORTS.contains(e)) {
        sub(
            "effort",
            format!("\"{e}\" is not an effort: {}", EFFORTS.join(", ")),
        );
    }
    if let Some(s) = r.summary.as_deref().filter(|s| !SUMMARIES.contains(s)) {
        sub(
            "summary",
            format!("\"{s}\" is not a summary setting: {}", SUMMARIES.join(", ")),
        );
    }
    match protocol {
        Some(Protocol::OpenaiResponses) => {
            extra.insert(
                "reasoning".into(),
                serde_json::to_value(r).unwrap_or(Value::Null),
            );
        }
        Some(Protocol::OpenaiChat) => {
            if r.summary.is_some() {
                sub(
                    "summary",
                    "Chat Completions has no reasoning summaries (use protocol openai-responses)".into(),
                );
            }
            if let Some(e) = &r.effort {
                extra.insert("reasoning_effort".into(), json!(e));
            }
        }
        Some(Protocol::Anthropic) => cx.err(
            at,
            "reasoning is an OpenAI setting: for Anthropic models use `thinking: {type: enabled, budget_tokens: N}`",
        ),
        None => {}
    }
}

fn check_thinking(th: &ThinkingFields, max_tokens: u32) -> Result<Option<u32>, String> {
    match (th.kind, th.budget_tokens) {
        (ThinkingKind::Enabled, None) => {
            Err("type enabled needs budget_tokens (at least 1024)".into())
        }
        (ThinkingKind::Enabled, Some(b)) if b < 1024 => {
            Err(format!("budget_tokens {b} is below the minimum of 1024"))
        }
        (ThinkingKind::Enabled, Some(b)) if b >= max_tokens => Err(format!(
            "budget_tokens {b} must be less than max_tokens {max_tokens}"
        )),
        (ThinkingKind::Enabled, Some(b)) => Ok(Some(b)),
        (_, Some(_)) => Err("budget_tokens applies only to type enabled".into()),
        (_, None) => Ok(None),
    }
}

/// The longest task id; with a matrix and epochs the name of its files may grow, up to
/// `matrix::MAX_KEY`.
const MAX_ID: usize = 200;

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn load_script(src: &SimSource, at: &[Seg], cx: &mut Ctx) -> Option<Arc<Script>> {
    match src {
        SimSource::Inline(s) => match s.check() {
            Ok(()) => Some(Arc::new(s.clone())),
            Err(e) => {
                // At the field inside the script that the message names, if any.
                match super::locate::split_path_prefix(&e) {
                    Some((inner, rest)) => {
                        let mut full = at.to_vec();
                        full.extend(inner);
                        cx.err(&full, rest.to_string());
                    }
                    None => cx.err(at, e),
                }
                None
            }
        },
        SimSource::Path(p) => {
            let full = cx.dir.join(p);
            if let Some(cached) = cx.scripts.get(&full) {
                return cached.clone();
            }
            let loaded = read_script(&full);
            let script = match loaded {
                Ok(s) => Some(Arc::new(s)),
                Err(ScriptError::Missing(e)) => {
                    cx.err(at, format!("simulator script {}: {e}", full.display()));
                    None
                }
                Err(ScriptError::Invalid(d)) => {
                    cx.diags.extend(d);
                    None
                }
            };
            cx.scripts.insert(full, script.clone());
            script
        }
    }
}

enum ScriptError {
    Missing(String),
    Invalid(Vec<Diagnostic>),
}

fn read_script(path: &Path) -> Result<Script, ScriptError> {
    let text = super::source::read_text(path, super::source::MAX_JOB_FILE, "the file")
        .map_err(ScriptError::Missing)?;
    let file = path.display().to_string();
    let script: Script =
        super::parse_yaml(&file, &text).map_err(|e| ScriptError::Invalid(e.diagnostics))?;
    script.check().map_err(|message| {
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
    read_script(path).map_err(|e| match e {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Plan, JobError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.yaml");
        std::fs::write(&p, text).unwrap();
        let job: JobFile = super::super::parse_yaml("job.yaml", text)?;
        expand(job, text, &p, &Registry::builtin())
    }

    const INLINE: &str = "{ turns: [ { content: [ { text: hi } ] } ] }";

    #[test]
    fn defaults_merge_field_by_field() {
        let plan = load(&format!(
            "name: t\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 5, max_cost_usd: 0.5 }}\n  sim: {INLINE}\ntasks:\n  - id: a\n    prompt: p\n    limits: {{ max_turns: 2 }}\n  - id: b\n    prompt: q\n    model: claude-haiku-4-5\n"
        ))
        .unwrap();
        assert_eq!(plan.tasks.len(), 2);
        let a = &plan.tasks[0];
        assert_eq!(a.limits.max_turns, 2);
        assert_eq!(a.limits.max_cost_usd.unwrap().to_string(), "0.5");
        assert_eq!(a.tools, vec!["get_time"]);
        assert_eq!(a.provider.kind, ProviderKind::Sim);
        assert_eq!(plan.tasks[1].model, "claude-haiku-4-5");
        assert_eq!(plan.tasks[1].limits.max_turns, 5);
        assert_eq!(plan.concurrency, DEFAULT_CONCURRENCY);
    }

    #[test]
    fn errors_point_at_the_field() {
        let e = load(&format!(
            "name: t\ndefaults:\n  model: m\n  sim: {INLINE}\ntasks:\n  - id: a\n    prompt: p\n  - id: a\n    prompt: p\n    tools: [nope]\n"
        ))
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("job.yaml:8:9: tasks[1].id: duplicate task id \"a\" (first at line 6)"),
            "{text}"
        );
        assert!(
            text.contains(":10:13: tasks[1].tools[0]: unknown tool \"nope\""),
            "{text}"
        );
    }

    #[test]
    fn cost_limit_needs_a_price() {
        let e = load(&format!(
            "name: t\ndefaults:\n  model: my-model\n  sim: {INLINE}\n  limits: {{ max_cost_usd: 1 }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("3:10: defaults.model: model \"my-model\" has no price"),
            "{e}"
        );
        let ok = load(&format!(
            "name: t\npricing:\n  my-model: {{ input: 1, output: 2 }}\ndefaults:\n  model: my-model\n  sim: {INLINE}\n  limits: {{ max_cost_usd: 1 }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
        ));
        assert!(ok.is_ok());
    }

    #[test]
    fn providers_have_a_protocol_and_settings_that_fit_it() {
        let ok = load(&format!(
            "name: t\nproviders:\n  fake-oai: {{ protocol: openai-responses, simulator: true }}\n  local: {{ protocol: openai-chat, base_url: \"http://127.0.0.1:9/v1\", api_key_env: AGENTBATCH_TEST_UNSET_KEY, api_key_optional: true }}\ndefaults: {{ model: gpt-5.4, sim: {INLINE}, tools: [get_time] }}\ntasks:\n  - {{ id: a, prompt: p, provider: fake-oai, reasoning: {{ effort: low, summary: auto }} }}\n  - {{ id: b, prompt: p, provider: local, temperature: 1.5, reasoning: {{ effort: high }} }}\n"
        ))
        .unwrap();
        let a = &ok.tasks[0];
        assert_eq!(
            (a.provider.kind, a.provider.protocol),
            (ProviderKind::Sim, Protocol::OpenaiResponses)
        );
        assert_eq!(
            a.extra["reasoning"],
            json!({"effort": "low", "summary": "auto"})
        );
        assert_eq!(a.extra["parallel_tool_calls"], json!(true));
        let b = &ok.tasks[1];
        assert_eq!(b.provider.max_tokens_field, "max_tokens");
        let omitted = load(&format!(
            "name: t\nproviders:\n  l: {{ protocol: openai-chat, simulator: true, parallel_tool_calls: omit }}\ndefaults: {{ model: m, sim: {INLINE}, tools: [get_time], provider: l }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
        ))
        .unwrap();
        assert!(!omitted.tasks[0].extra.contains_key("parallel_tool_calls"));
        assert_eq!(b.extra["reasoning_effort"], json!("high"));
        assert!(b.provider.api_key_optional);
        let openai = load(&format!(
            "name: t\nproviders:\n  openai: {{ protocol: openai-chat }}\ndefaults: {{ model: gpt-5.4, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
        ))
        .unwrap();
        let p = &openai.job.providers;
        assert!(p.contains_key("openai"));
        let all = resolve_for_test(&openai.job);
        assert_eq!(all["openai"].max_tokens_field, "max_completion_tokens");
        assert_eq!(
            all["openai"].base_url.as_deref(),
            Some("https://api.openai.com/v1")
        );
        assert_eq!(all["openai"].api_key_env.as_deref(), Some("OPENAI_API_KEY"));

        for (yaml, needle) in [
            (
                "providers:\n  mine: { base_url: \"http://x/v1\" }\n",
                "needs a `protocol`",
            ),
            (
                "providers:\n  mine: { protocol: grpc }\n",
                "unknown variant",
            ),
            (
                "providers:\n  openai: { anthropic_version: \"2023-06-01\" }\n",
                "anthropic protocol only",
            ),
            (
                "providers:\n  anthropic: { max_tokens_field: max_tokens }\n",
                "does not apply",
            ),
            (
                "providers:\n  sim: { simulator: false }\n",
                "always the simulator",
            ),
            (
                "providers:\n  mine: { protocol: openai-chat, base_url: \"ftp://x\" }\n",
                "http",
            ),
        ] {
            let e = load(&format!(
                "name: t\n{yaml}defaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains(needle), "{yaml}: {e}");
        }
        let sim_oai = "providers:\n  so: { protocol: openai-responses, simulator: true }\n  sc: { protocol: openai-chat, simulator: true }\n";
        for (task, needle) in [
            (
                "{ id: a, prompt: p, provider: so, thinking: { type: adaptive } }",
                "thinking is an Anthropic setting",
            ),
            (
                "{ id: a, prompt: p, reasoning: { effort: low } }",
                "reasoning is an OpenAI setting",
            ),
            ("{ id: a, prompt: p, provider: sc, top_k: 5 }", "no top_k"),
            (
                "{ id: a, prompt: p, provider: so, max_tokens: 8 }",
                "at least 16",
            ),
            (
                "{ id: a, prompt: p, provider: so, limits: { min_max_tokens: 8 } }",
                "at least 16",
            ),
            (
                "{ id: a, prompt: p, provider: sc, reasoning: { summary: auto } }",
                "no reasoning summaries",
            ),
            (
                "{ id: a, prompt: p, provider: so, reasoning: { effort: extreme } }",
                "not an effort",
            ),
            (
                "{ id: a, prompt: p, provider: sc, temperature: 2.5 }",
                "between 0 and 2",
            ),
            (
                "{ id: a, prompt: p, provider: nope }",
                "the providers are anthropic, openai, sc, sim, so",
            ),
        ] {
            let e = load(&format!(
                "name: t\n{sim_oai}defaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {task}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains(needle), "{task}: {e}");
        }
    }

    #[test]
    fn mcp_servers_are_checked_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("servers.json"),
            r#"{"mcpServers": {"fs": {"command": "srv", "args": ["{workspace}"], "autoApprove": []}, "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${AB_TEST_UNSET_TOKEN}"}}}}"#,
        )
        .unwrap();
        let load_in = |text: &str| {
            let p = dir.path().join("job.yaml");
            std::fs::write(&p, text).unwrap();
            super::super::load(&p, &Registry::builtin())
        };
        let base = |toolset: &str, task: &str| {
            format!("name: t\ntoolsets:\n  m:\n{toolset}defaults: {{ model: m, toolset: m, sim: {INLINE} }}\ntasks:\n  - {task}\n")
        };
        let ok = load_in(&base("    mcp: { one: { command: srv, args: [x] } }\n    policy: { deny: [\"mcp__one__write(**/.git/**)\"] }\n", "{ id: a, prompt: p }")).unwrap();
        let spec = &ok.tasks[0].toolset.mcp[0];
        assert_eq!((spec.name.as_str(), spec.per_task()), ("one", false));
        let e = load_in(&base(
            "    mcp_config: servers.json\n",
            "{ id: a, prompt: p }",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("uses {workspace}, so the task needs a `repo`"),
            "{e}"
        );
        assert!(
            e.contains("reads ${AB_TEST_UNSET_TOKEN}, which is not set"),
            "{e}"
        );
        for (toolset, needle) in [
            (
                "    mcp: { s: { type: sse, url: \"http://x/sse\" } }\n",
                "HTTP+SSE transport is not supported",
            ),
            (
                "    mcp: { s: { command: a, url: \"http://x\" } }\n",
                "not both",
            ),
            ("    mcp: { s: { type: http } }\n", "needs a `url`"),
            ("    mcp: { s: { args: [x] } }\n", "needs a `command`"),
            (
                "    mcp: { s: { type: grpc, command: a } }\n",
                "unknown MCP transport",
            ),
            (
                "    mcp: { s: { command: a, colour: red } }\n",
                "unknown field `colour`",
            ),
            ("    mcp_config: missing.json\n", "cannot read"),
            (
                "    mcp: { s: { command: a } }\n    policy: { deny: [\"mcp__other__x\"] }\n",
                "which tool set m does not have",
            ),
            (
                "    mcp: { \"a.b\": { command: a }, \"a_b\": { command: b } }\n",
                "same tool prefix",
            ),
        ] {
            let e = load_in(&base(toolset, "{ id: a, prompt: p }"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{toolset}: {e}");
        }
    }

    fn resolve_for_test(job: &JobFile) -> BTreeMap<String, Arc<ProviderSpec>> {
        let mut cx = Ctx {
            file: "job.yaml".into(),
            text: "",
            dir: PathBuf::from("."),
            diags: Vec::new(),
            scripts: HashMap::new(),
            picks: Vec::new(),
        };
        let out = resolve_providers(job, &mut cx);
        assert!(cx.diags.is_empty(), "{:?}", cx.diags);
        out
    }

    #[test]
    fn sim_needs_a_script_and_sampling_needs_an_old_version() {
        let e = load("name: t\ndefaults: { model: m }\ntasks:\n  - { id: a, prompt: p }\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("provider sim is the simulator and needs a script"),
            "{e}"
        );
        let e = load(&format!(
            "name: t\nproviders:\n  sim: {{ anthropic_version: \"2026-10-21\" }}\ndefaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p, temperature: 0.2 }}\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("refuses temperature"), "{e}");
    }

    #[test]
    fn thinking_checks() {
        assert!(check_thinking(
            &ThinkingFields {
                kind: ThinkingKind::Enabled,
                budget_tokens: None,
                display: None
            },
            4096
        )
        .is_err());
        assert_eq!(
            check_thinking(
                &ThinkingFields {
                    kind: ThinkingKind::Enabled,
                    budget_tokens: Some(2048),
                    display: None
                },
                4096
            ),
            Ok(Some(2048))
        );
        assert!(check_thinking(
            &ThinkingFields {
                kind: ThinkingKind::Enabled,
                budget_tokens: Some(4096),
                display: None
            },
            4096
        )
        .is_err());
        assert_eq!(
            check_thinking(
                &ThinkingFields {
                    kind: ThinkingKind::Adaptive,
                    budget_tokens: None,
                    display: None
                },
                4096
            ),
            Ok(None)
        );
    }

    #[test]
    fn ids_name_files_safely() {
        assert!(valid_id("fix-parse_dates.2"));
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
