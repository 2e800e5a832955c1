//! The expanded plan as text, for `agentbatch validate`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{Plan, ProviderKind};

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
            (_, Some(u)) => u.clone(),
            (_, None) => "-".to_string(),
        };
        let key = p
            .api_key_env
            .as_ref()
            .map(|v| format!(", key from ${v}"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {name}: {where_}{key}, anthropic-version {}, timeout {}, {} retries",
            p.anthropic_version,
            humantime::format_duration(p.timeout),
            p.max_retries
        );
    }
    let _ = writeln!(s, "tasks:");
    for t in &plan.tasks {
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
            "  {}: {} {} ({price}), max_tokens {}, tools [{}]\n      limits: max_turns {}, time_limit {}, max_input_tokens {}, max_output_tokens {}, max_cost_usd {}",
            t.id,
            t.provider.name,
            t.model,
            t.max_tokens,
            t.tools.join(", "),
            l.max_turns,
            humantime::format_duration(l.time_limit),
            or_dash(l.max_input_tokens),
            or_dash(l.max_output_tokens),
            or_dash(l.max_cost_usd.map(|c| c.normalize())),
        );
    }
    s
}
