//! The expanded plan as text, for `agentbatch validate`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rust_decimal::Decimal;

use super::schema::{KeepWorkspaces, WorkspaceMethod};
use super::{Plan, ProviderKind, TaskSpec};
use crate::vocab::limits::{Period, RateLimits};
use crate::vocab::protocol::Dialect;

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Renders what will run: providers in use, then one line per task with its model,
/// tools and resolved limits.
pub fn describe(plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "job {} ({}): {} task(s), concurrency {}",
        plan.name,
        plan.file.display(),
        plan.tasks.len(),
        plan.concurrency
    );
    if !plan.axes.is_empty() || plan.job.epochs.is_some_and(|e| e > 1) {
        let mut variants: Vec<&str> = Vec::new();
        for t in &plan.tasks {
            if !variants.contains(&t.variant.as_str()) {
                variants.push(&t.variant);
            }
        }
        let tasks: BTreeSet<&str> = plan.tasks.iter().map(|t| t.task.as_str()).collect();
        let epochs = plan.job.epochs.unwrap_or(1);
        let _ = writeln!(
            s,
            "matrix: {} task(s) x {} variant(s) x {} epoch(s), interleaved (epoch, task, variant)",
            tasks.len(),
            variants.len(),
            epochs
        );
        for v in variants.iter().filter(|v| !v.is_empty()) {
            let _ = writeln!(s, "  variant {v}");
        }
    }
    if !plan.job.suites.is_empty() {
        let _ = writeln!(s, "suites:");
        for (suite, n) in plan.job.suites.iter().zip(&plan.suite_tasks) {
            let _ = writeln!(s, "  {} {}: {n} task(s)", suite.format.as_str(), suite.path);
        }
    }
    describe_providers(plan, &mut s);
    let _ = writeln!(s, "tasks:");
    for t in &plan.tasks {
        describe_task(t, &mut s);
    }
    describe_caps(plan, &mut s);
    for w in price_warnings(plan) {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// Each provider the tasks use: where it is, its key, its dialect, its retries and
/// rate limits.
fn describe_providers(plan: &Plan, s: &mut String) {
    let used: BTreeSet<&str> = plan
        .tasks
        .iter()
        .map(|t| t.provider.name.as_str())
        .collect();
    let _ = writeln!(s, "providers:");
    for name in used {
        let Some(p) = plan
            .tasks
            .iter()
            .map(|t| &t.provider)
            .find(|p| p.name == name)
        else {
            continue;
        };
        let where_ = match (p.kind, &p.base_url) {
            (ProviderKind::Sim, None) => "built-in simulator, started by the run".to_string(),
            (ProviderKind::Sim, Some(u)) => format!("simulator at {u}"),
            (_, Some(u)) => p.protocol.url(u).map_or(u.clone(), |u| u.to_string()),
            (_, None) => "-".to_string(),
        };
        let key = p
            .api_key_env
            .as_ref()
            .map(|v| {
                let optional = if p.api_key_optional {
                    " (optional)"
                } else {
                    ""
                };
                format!(", key from ${v}{optional}")
            })
            .unwrap_or_default();
        let dialect = match p.protocol.facts().dialect {
            Dialect::Version => format!("anthropic-version {}", p.anthropic_version),
            Dialect::OutputLimitField => format!("output limit as {}", p.max_tokens_field),
            Dialect::Stateless => "stateless (store: false)".to_string(),
        };
        let _ = writeln!(
            s,
            "  {name}: {} {where_}{key}, {dialect}, timeout {}, {} retries ({} on 429){}",
            p.protocol,
            humantime::format_duration(p.timeout),
            p.max_retries,
            p.max_rate_limit_retries,
            rates(&p.rate)
        );
        let _ = writeln!(s, "    pacing: {}", pacing(p));
    }
}

/// One task: its model, limits, caching, streaming, batching, context and repository.
fn describe_task(t: &TaskSpec, s: &mut String) {
    let l = &t.limits;
    let price = t.price.as_ref().map_or("no price".to_string(), |p| {
        format!(
            "${}/${} per Mtok",
            p.input.normalize(),
            p.output.normalize()
        )
    });
    let _ = writeln!(
        s,
        "  {}: {} {} ({price}){}, max_tokens {}, tools [{}]\n      limits: max_turns {}, time_limit {}, max_input_tokens {}, max_output_tokens {}, max_cost_usd {}, max_repeats {}",
        t.id,
        t.provider.name,
        t.model,
        t.team_name().map(|n| format!(", team {n}")).unwrap_or_default(),
        t.max_tokens,
        t.tools.join(", "),
        l.max_turns,
        humantime::format_duration(l.time_limit),
        or_dash(l.max_input_tokens),
        or_dash(l.max_output_tokens),
        or_dash(l.max_cost_usd.map(|c| c.normalize())),
        l.max_repeats.map_or("off".to_string(), |n| n.to_string()),
    );
    if let Some(line) = describe_agent(t) {
        let _ = writeln!(s, "      {line}");
    }
    let _ = writeln!(s, "      cache: {}", describe_cache(t));
    let stream = if t.stream {
        format!(
            "yes (SSE), cut when idle for {}",
            humantime::format_duration(t.provider.stream_idle_timeout)
        )
    } else {
        "no (whole answers)".to_string()
    };
    let _ = writeln!(s, "      stream: {stream}");
    if let Some(b) = &t.batch {
        let rate = t.price.as_ref().map_or("no price".to_string(), |p| {
            format!("{}x the standard rates", p.batch_rate.normalize())
        });
        let _ = writeln!(
            s,
            "      batch: on, through the provider's batch API ({rate}); a batch gathers {} of requests (at most {}), cancelled after {}",
            humantime::format_duration(b.window.0),
            b.max_requests,
            humantime::format_duration(b.max_wait.0)
        );
    }
    let _ = writeln!(s, "      context: {}", describe_context(&t.context));
    if let Some(e) = &t.environment {
        let _ = writeln!(
            s,
            "      environment: {}, engine {}, {}{}{}; check in the {} container",
            match &e.source {
                crate::tools::container::Source::Image(i) =>
                    format!("image {i} (pull: {})", e.pull.name()),
                crate::tools::container::Source::Dockerfile { dockerfile, .. } =>
                    format!("dockerfile {}", dockerfile.display()),
            },
            e.engine.name(),
            e.limits_text(),
            e.workdir
                .as_ref()
                .map(|w| format!(", workdir {w}"))
                .unwrap_or_default(),
            e.user
                .as_ref()
                .filter(|u| !u.is_empty())
                .map(|u| format!(", user {u}"))
                .unwrap_or_default(),
            match t.check_environment {
                crate::job::CheckEnvironment::Same => "agent's",
                crate::job::CheckEnvironment::Fresh => "a fresh",
            }
        );
    }
    if let Some(r) = &t.repo {
        let _ = writeln!(
            s,
            "      repo: {}{}, toolset {}, check {}, keep_workspaces {}, workspaces {}",
            if r.in_image {
                "(the image's workdir)".to_string()
            } else {
                r.path.display().to_string()
            },
            r.git_ref
                .as_ref()
                .map(|g| format!(" at {g}"))
                .unwrap_or_default(),
            t.toolset.name.as_deref().unwrap_or("(tools list)"),
            r.check
                .as_deref()
                .map_or("none".to_string(), |c| format!("`{c}`")),
            match r.keep_workspaces {
                KeepWorkspaces::Always => "always",
                KeepWorkspaces::OnFailure => "on_failure",
                KeepWorkspaces::Never => "never",
            },
            match r.workspaces {
                WorkspaceMethod::Overlay =>
                    "overlay (a copy-on-write layer over one pristine checkout)",
                WorkspaceMethod::Reflink =>
                    "reflink (a copy sharing the pristine checkout's blocks; the run folder must be on btrfs or XFS)",
                WorkspaceMethod::Copy => "copy (a full copy of the pristine checkout)",
                WorkspaceMethod::Auto if t.environment.is_some() =>
                    "auto: reflink where the run folder's filesystem has reflinks, else copy (a container's workspace is never an overlay: the engine would not see it)",
                WorkspaceMethod::Auto if crate::tools::layer::available() =>
                    "auto: overlay (a copy-on-write layer over one pristine checkout), else reflink where the run folder's filesystem has reflinks, else copy",
                WorkspaceMethod::Auto =>
                    "auto: reflink where the run folder's filesystem has reflinks, else copy (no overlay in this process)",
            }
        );
    }
}

/// Prices that look like typos: a cache read dearer than the input it replaces (30
/// written for 0.30). Worst cases price every prompt token at it, so such a price makes
/// every cap bind early; a warning, since a job may mean it.
fn price_warnings(plan: &Plan) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for t in &plan.tasks {
        let Some(p) = t.price.as_ref().filter(|_| seen.insert(t.model.as_str())) else {
            continue;
        };
        let tiers = std::iter::once(("", p)).chain(
            p.long_context
                .iter()
                .map(|(_, tier)| (" (its long_context tier)", &**tier)),
        );
        for (which, tier) in tiers {
            if tier.cache_read > tier.input {
                out.push(format!(
                    "pricing of {}{which}: cache_read ${}/Mtok is above its input rate ${}/Mtok; a cache read normally costs a tenth of the input (a typo?). Worst cases price every prompt token at ${}/Mtok",
                    t.model,
                    tier.cache_read.normalize(),
                    tier.input.normalize(),
                    p.max_input_rate().normalize()
                ));
            }
        }
    }
    out
}

/// What paces a provider: its configured limits, those its answers' headers will give
/// for the windows the job leaves out, and the adaptive rate if they state none.
fn pacing(p: &crate::job::ProviderSpec) -> String {
    let r = &p.rate;
    let configured: Vec<&str> = [("rpm", r.rpm), ("itpm", r.itpm), ("otpm", r.otpm)]
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| *k)
        .collect();
    let own_sim = p.kind == crate::job::ProviderKind::Sim && p.base_url.is_none();
    if own_sim && p.server_limits.is_none() && configured.is_empty() {
        return "none (the run's simulator enforces no limits)".into();
    }
    let learned: Vec<&str> = p
        .protocol
        .facts()
        .stated_limits
        .iter()
        .filter(|w| match **w {
            "tpm" => r.itpm.is_none() && r.otpm.is_none(),
            w => !configured.contains(&w),
        })
        .copied()
        .collect();
    let mut parts = Vec::new();
    if !configured.is_empty() {
        parts.push(format!("configured {}", configured.join(", ")));
    }
    if !learned.is_empty() {
        parts.push(format!(
            "{} learned from its answers' headers",
            learned.join(", ")
        ));
    }
    if configured.is_empty() {
        parts.push(
            "an adaptive request rate found from its 429s if its answers state no limits".into(),
        );
    }
    parts.join("; ")
}

fn rates(r: &RateLimits) -> String {
    let parts: Vec<String> = [("rpm", r.rpm), ("itpm", r.itpm), ("otpm", r.otpm)]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(
            ", {} (burst {})",
            parts.join(", "),
            humantime::format_duration(r.burst)
        )
    }
}

/// The most a set of tasks can spend: the sum of their own caps, or None when one of
/// them has no cap.
fn worst_case<'a>(tasks: impl Iterator<Item = &'a TaskSpec>) -> (usize, Option<Decimal>) {
    let mut n = 0;
    let mut sum = Some(Decimal::ZERO);
    for t in tasks {
        n += 1;
        sum = match (sum, t.limits.max_cost_usd) {
            (Some(s), Some(c)) => Some(s + c),
            _ => None,
        };
    }
    (n, sum)
}

/// Each cap against the worst case of the tasks under it, with a warning where it binds.
fn describe_caps(plan: &Plan, s: &mut String) {
    if plan.max_cost_usd.is_none() && plan.teams.is_empty() {
        return;
    }
    let mut warnings = Vec::new();
    let _ = writeln!(s, "caps:");
    let mut check = |who: &str, cap: Option<Decimal>, n: usize, worst: Option<Decimal>| {
        let Some(cap) = cap else { return };
        match worst {
            Some(w) if w <= cap => {}
            Some(w) => warnings.push(format!(
                "{who}: the cap ${} is below the worst case of its {n} task(s), ${}: it will bind if they spend their limits, and the rest stop with a budget stop reason",
                cap.normalize(),
                w.normalize()
            )),
            None => warnings.push(format!(
                "{who}: some of its {n} task(s) have no limits.max_cost_usd, so the cap ${} is what bounds them: it may bind",
                cap.normalize()
            )),
        }
    };
    let show = |w: Option<Decimal>| {
        w.map_or("unbounded (a task has no max_cost_usd)".to_string(), |w| {
            format!("${}", w.normalize())
        })
    };
    if let Some(cap) = plan.max_cost_usd {
        let (n, worst) = worst_case(plan.tasks.iter());
        let _ = writeln!(
            s,
            "  run: max_cost_usd ${}; worst case of its {n} task(s): {}",
            cap.normalize(),
            show(worst)
        );
        check("the run", Some(cap), n, worst);
    }
    for team in plan.teams.values() {
        let (n, worst) = worst_case(
            plan.tasks
                .iter()
                .filter(|t| t.team_name() == Some(team.name.as_str())),
        );
        let mut caps = Vec::new();
        if let Some(c) = team.max_cost_usd {
            caps.push(format!("max_cost_usd ${} per run", c.normalize()));
        }
        if let Some(c) = &team.cap {
            let p = match c.period {
                Period::Day => "day",
                Period::Week => "week",
                Period::Month => "month",
            };
            caps.push(format!(
                "${} per {p} (persistent ledger)",
                c.usd.normalize()
            ));
        }
        if let Some(c) = team.concurrency {
            caps.push(format!("concurrency {c}"));
        }
        let _ = writeln!(
            s,
            "  team {}: {}{}; worst case of its {n} task(s): {}",
            team.name,
            if caps.is_empty() {
                "no caps".to_string()
            } else {
                caps.join(", ")
            },
            rates(&team.rate),
            show(worst)
        );
        let who = format!("team {}", team.name);
        check(&who, team.max_cost_usd, n, worst);
        check(&who, team.cap.as_ref().map(|c| c.usd), n, worst);
    }
    for w in warnings {
        let _ = writeln!(s, "warning: {w}");
    }
}

/// A task's context policy as validate shows it.
fn describe_context(c: &crate::vocab::context::ContextPolicy) -> String {
    use crate::vocab::context::ContextStrategy;
    let window = c
        .window
        .map_or("window unknown (the provider decides)".to_string(), |w| {
            format!("{w}-token window")
        });
    match c.strategy {
        ContextStrategy::Off => {
            format!("{window}; compaction off: a prompt that outgrows it stops the task")
        }
        ContextStrategy::Native => format!(
            "{window}; at {:.0}% Anthropic's context editing clears old tool results, keeping the newest {}",
            c.at * 100.0,
            c.keep
        ),
        ContextStrategy::ClearToolResults | ContextStrategy::Auto => {
            let exempt = if c.exempt.is_empty() {
                String::new()
            } else {
                format!(", never {}", c.exempt.join(", "))
            };
            let then = if c.strategy == ContextStrategy::Auto {
                "; if that is not enough, the model summarizes the history (a model call, charged to the task)"
            } else {
                ""
            };
            format!(
                "{window}; at {:.0}% clear old tool results, keeping the newest {}{exempt}{then}",
                c.at * 100.0,
                c.keep
            )
        }
        ContextStrategy::Summarize => format!(
            "{window}; at {:.0}% the model summarizes the history (a model call, charged to the task), keeping the newest {} turns whole",
            c.at * 100.0,
            c.keep
        ),
    }
}

/// A task's caching as validate shows it, with the dearest rate a prompt token can be
/// billed at under it (what its worst cases are priced at).
fn describe_cache(t: &TaskSpec) -> String {
    use crate::vocab::cache::CacheTtl;
    if !t.cache.is_on() {
        return "off".into();
    }
    let runner_marks = t.provider.protocol.facts().marks_cache;
    let how = match runner_marks {
        true if !t.cache.marks_prefix() => match t.cache.ttl {
            CacheTtl::FiveMinutes => "on, one breakpoint on the newest message, 5-minute entries",
            CacheTtl::OneHour => "on, one breakpoint on the newest message, 1-hour entries",
        },
        true => match t.cache.ttl {
            CacheTtl::FiveMinutes => "on, breakpoints placed by the runner, 5-minute entries",
            CacheTtl::OneHour => "on, breakpoints placed by the runner, 1-hour entries",
        },
        false => match t.cache.retention {
            None => "on (automatic), a prompt_cache_key per task",
            Some(crate::vocab::cache::CacheRetention::InMemory) => {
                "on (automatic), a prompt_cache_key per task, in-memory retention"
            }
            Some(crate::vocab::cache::CacheRetention::Extended) => {
                "on (automatic), a prompt_cache_key per task, 24-hour retention"
            }
        },
    };
    match &t.price {
        Some(p) => format!(
            "{how}; worst case prices the prompt at ${}/Mtok",
            p.max_input_rate().normalize()
        ),
        None => how.to_string(),
    }
}

/// A reference agent and a suite verifier, when the task has either.
fn describe_agent(t: &TaskSpec) -> Option<String> {
    use super::{AgentKind, Solution, Verifier};
    let mut parts = Vec::new();
    match t.agent {
        AgentKind::Model => {}
        AgentKind::Nop => parts.push("agent: nop (changes nothing, no request)".to_string()),
        AgentKind::Oracle => parts.push(match t.solution.as_deref() {
            Some(Solution::Patch(_)) => "agent: oracle (applies the gold patch, no request)".into(),
            Some(Solution::Dir(d)) => format!("agent: oracle (runs {}, no request)", d.display()),
            None => "agent: oracle".into(),
        }),
    }
    match t.verifier.as_deref() {
        None => {}
        Some(Verifier::Swebench(v)) => parts.push(format!(
            "verifier: swebench ({}, {} FAIL_TO_PASS, {} PASS_TO_PASS, timeout {}) in a fresh container",
            v.log_parser,
            v.fail_to_pass.len(),
            v.pass_to_pass.len(),
            humantime::format_duration(v.timeout)
        )),
        Some(Verifier::Harbor(v)) => parts.push(format!(
            "verifier: harbor ({}, timeout {}, pass at reward >= {}) in {}",
            v.script.display(),
            humantime::format_duration(v.timeout),
            v.threshold,
            if v.separate { "a fresh container" } else { "the agent's container" }
        )),
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}
