//! Teams: the job's `teams:` with their spend caps, concurrency and rate limits, and
//! the team each task names.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::context::Ctx;
use super::diagnostics::{key, origin};
use super::providers::rate_limits;
use super::schema::{JobFile, TaskFields, TeamFields};
use super::spec::{PeriodCap, TeamSpec};

/// Every team a task may name, by name.
pub(super) fn resolve_teams(job: &JobFile, cx: &mut Ctx) -> BTreeMap<String, Arc<TeamSpec>> {
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
                    on_cap: c.on_cap.unwrap_or_default(),
                }),
                concurrency,
                rate,
            }),
        );
    }
    out
}

/// The team a task (or `defaults`) names, if any.
pub(super) fn resolve_task_team(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    teams: &BTreeMap<String, Arc<TeamSpec>>,
    cx: &mut Ctx,
) -> Option<Arc<TeamSpec>> {
    let name = t.team.as_ref().or(d.team.as_ref())?;
    let found = teams.get(name).cloned();
    if found.is_none() {
        let known: Vec<&str> = teams.keys().map(String::as_str).collect();
        cx.err(
            &origin(i, t.team.is_some(), d.team.is_some(), &["team"]),
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
