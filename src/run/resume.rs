//! `run --resume`: picks an interrupted (or finished) run folder up where it stopped.
//! Rows already in results.csv are kept unless their task ended on an infrastructure
//! failure; those rows move to superseded.csv and their tasks run again, as do tasks
//! with no row at all (never started, or in flight when the process was killed).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use rust_decimal::Decimal;
use serde_json::Value;

use super::RunError;
use crate::job::{Plan, TaskSpec};
use crate::report::{files, read_results, ResultRow, ResumeChanges, RunJson, RunJsonError};
use crate::vocab::stop::StopReason;

/// How to resume.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    /// The run folder, `<out>/<run-id>`.
    pub dir: PathBuf,
    /// Re-run tasks whose previous end was an infrastructure failure.
    pub retry_errors: bool,
    /// Re-run tasks a team's cap stopped (`team_budget`): the cap may allow them now
    /// (a new period, a raised cap). Their spend still counts.
    pub retry_budget_stops: bool,
    /// Resume even though the job file changed.
    pub force: bool,
}

/// What the earlier attempts left, ready for the runner.
pub(super) struct Resumed {
    pub run_id: String,
    /// The tasks still to run, in plan order.
    pub tasks: Vec<TaskSpec>,
    /// Rows moved to superseded.csv.
    pub superseded: usize,
    /// Money spent by earlier attempts: counted against the run's and teams' caps.
    pub spent_run: Decimal,
    pub spent_teams: HashMap<String, Decimal>,
    /// What tasks cut off by a kill had spent (set aside by this resume), in all and
    /// per team.
    pub killed_spent: Decimal,
    pub killed_teams: HashMap<String, Decimal>,
    pub killed_variants: HashMap<String, Decimal>,
    /// The answers each task cut off by a kill paid for, by request digest: its re-run
    /// reuses them instead of buying them again.
    pub replays: HashMap<String, Vec<(String, Value)>>,
    /// run.json as the earlier attempt left it.
    pub run_json: RunJson,
    /// The run folder.
    pub dir: PathBuf,
    /// What [`Resumed::apply`] has the report module write.
    changes: ResumeChanges,
}

fn invalid(m: String) -> RunError {
    RunError::Invalid(m)
}

/// The columns resuming needs.
const NEEDED: [&str; 6] = [
    "task_id",
    "variant",
    "epoch",
    "stop_reason",
    "turns",
    "team",
];

/// The ones of those every row fills.
const FILLED: [&str; 4] = ["task_id", "epoch", "stop_reason", "turns"];

/// The (task, variant, epoch) a row is the result of.
fn unit(row: &ResultRow) -> (String, String, u32) {
    (row.task_id.clone(), row.variant.clone(), row.epoch)
}

/// Reads an earlier results.csv or superseded.csv: its columns must be the ones this
/// job writes. A last row cut off by a kill (or power loss before the sync) never
/// counted and is left out.
fn read_rows(
    path: &Path,
    header_expected: &[String],
) -> Result<(Vec<ResultRow>, csv::StringRecord), RunError> {
    let file = read_results(path, &NEEDED, &FILLED).map_err(|e| invalid(e.to_string()))?;
    let got: Vec<&str> = file.header.iter().collect();
    if got
        != header_expected
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    {
        return Err(invalid(format!(
            "{}: its columns are not the ones this job writes (a different agentbatch version, or the matrix axes changed): start a new run instead",
            path.display()
        )));
    }
    Ok((file.rows, file.header))
}

/// Where two versions of the job differ, as `path: old -> new` lines.
pub(crate) fn job_differences(old: &Value, new: &Value) -> Vec<String> {
    fn short(v: Option<&Value>) -> String {
        match v {
            None => "(absent)".into(),
            Some(v) => {
                let s = v.to_string();
                if s.chars().count() > 60 {
                    format!("{}...", s.chars().take(57).collect::<String>())
                } else {
                    s
                }
            }
        }
    }
    fn walk(path: String, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(p, x.get(k), y.get(k), out);
                }
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) => {
                for i in 0..x.len().max(y.len()) {
                    walk(format!("{path}[{i}]"), x.get(i), y.get(i), out);
                }
            }
            (a, b) if a != b => out.push(format!("{path}: {} -> {}", short(a), short(b))),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), Some(old), Some(new), &mut out);
    out
}

/// Reads the earlier run and decides what runs again, without changing anything:
/// [`Resumed::apply`] makes the changes once the run is sure to start.
pub(super) fn prepare(
    opts: &ResumeOptions,
    plan: &Plan,
    selected: Vec<TaskSpec>,
    header: &[String],
) -> Result<Resumed, RunError> {
    let dir = &opts.dir;
    let run_json_path = dir.join(files::RUN_JSON);
    let run_json = read_run_json(opts, plan)?;
    let run_id = Some(run_json.run_id.clone())
        .filter(|id| !id.is_empty())
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| invalid(format!("{}: no run_id", run_json_path.display())))?;

    let csv_path = dir.join(files::RESULTS_CSV);
    let (rows, head) = read_rows(&csv_path, header)?;
    let current: HashSet<Vec<String>> = rows.iter().map(ResultRow::verbatim).collect();
    let mut spent_run = Decimal::ZERO;
    let mut spent_teams: HashMap<String, Decimal> = HashMap::new();
    // Earlier resumes: the rows they replaced (a row also still in results.csv, left by
    // a resume cut off between the two files, is counted there), and what killed tasks
    // had spent then.
    let already_superseded =
        read_superseded(dir, header, &current, &mut spent_run, &mut spent_teams)?;
    for r in &run_json.resumes {
        spent_run += r.killed_spent_usd;
        for (team, d) in &r.killed_spent_by_team {
            *spent_teams.entry(team.clone()).or_default() += *d;
        }
    }
    // Only the tasks this resume runs (`--only`) can have their rows replaced.
    let selected_units: HashSet<(String, String, u32)> = selected
        .iter()
        .map(|t| (t.task.clone(), t.variant.clone(), t.epoch))
        .collect();
    let mut stands: HashSet<(String, String, u32)> = HashSet::new();
    let mut kept = Vec::new();
    let mut superseded = Vec::new();
    for row in rows {
        let cost = row.cost_usd.unwrap_or_default();
        spent_run += cost;
        if !row.team.is_empty() {
            *spent_teams.entry(row.team.clone()).or_default() += cost;
        }
        let reason = StopReason::parse(&row.stop_reason);
        let infra = reason.is_some_and(StopReason::is_infra);
        let capped = reason == Some(StopReason::TeamBudget) && opts.retry_budget_stops;
        // A task that never got to its first turn has nothing to keep.
        let never_ran = row.stop_reason == "cancelled" && row.turns == Some(0);
        let unit = unit(&row);
        let again =
            (never_ran || (infra && opts.retry_errors) || capped) && selected_units.contains(&unit);
        if again || stands.contains(&unit) {
            superseded.push(row);
        } else {
            stands.insert(unit);
            kept.push(row);
        }
    }
    let tasks: Vec<TaskSpec> = selected
        .into_iter()
        .filter(|t| !stands.contains(&(t.task.clone(), t.variant.clone(), t.epoch)))
        .collect();

    // Tasks cut off by a kill: a transcript without a row; their spend counts.
    let superseded_keys: HashSet<(String, String, u32)> = superseded.iter().map(unit).collect();
    let mut killed_spent = Decimal::ZERO;
    let mut killed_teams: HashMap<String, Decimal> = HashMap::new();
    let mut killed_variants: HashMap<String, Decimal> = HashMap::new();
    let mut replays = HashMap::new();
    for t in &tasks {
        if superseded_keys.contains(&(t.task.clone(), t.variant.clone(), t.epoch)) {
            continue;
        }
        let transcript = files::transcript_path(dir, &t.id);
        let text = crate::vocab::transcript::read_file(&transcript).unwrap_or_default();
        let spent = crate::report::spent_in_text(&text);
        let paid = crate::report::paid_answers(&text);
        if !paid.is_empty() {
            replays.insert(t.id.clone(), paid);
        }
        spent_run += spent;
        killed_spent += spent;
        if !spent.is_zero() {
            *killed_variants.entry(t.variant.clone()).or_default() += spent;
        }
        if let Some(team) = t.team_name() {
            *spent_teams.entry(team.to_string()).or_default() += spent;
            *killed_teams.entry(team.to_string()).or_default() += spent;
        }
    }
    let superseded_new: Vec<csv::StringRecord> = superseded
        .iter()
        .filter(|r| !already_superseded.contains(&r.verbatim()))
        .map(|r| r.fields.clone())
        .collect();
    Ok(Resumed {
        run_id,
        dir: dir.clone(),
        tasks,
        superseded: superseded.len(),
        spent_run,
        spent_teams,
        killed_spent,
        killed_teams,
        killed_variants,
        replays,
        run_json,
        changes: ResumeChanges {
            header: head,
            kept: kept.into_iter().map(|r| r.fields).collect(),
            superseded: superseded_new,
        },
    })
}

/// Reads the earlier run's run.json and refuses a job that changed since, unless
/// forced.
fn read_run_json(opts: &ResumeOptions, plan: &Plan) -> Result<RunJson, RunError> {
    let dir = &opts.dir;
    let run_json = RunJson::read(&dir.join(files::RUN_JSON)).map_err(|e| match e {
        RunJsonError::Read { path, source } => invalid(format!(
            "--resume {}: cannot read {}: {source} (give the folder of a run: <out>/<run-id>)",
            dir.display(),
            path.display()
        )),
        e => invalid(e.to_string()),
    })?;
    let new_job = serde_json::to_value(&plan.job).unwrap_or(Value::Null);
    let diffs = job_differences(&run_json.job, &new_job);
    if !diffs.is_empty() && !opts.force {
        let shown: Vec<&String> = diffs.iter().take(20).collect();
        return Err(invalid(format!(
            "the job changed since {} started ({} difference(s)):\n  {}{}\nresume with --force to run the remaining tasks under the new job anyway, or start a new run",
            dir.display(),
            diffs.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
            if diffs.len() > 20 { "\n  ..." } else { "" }
        )));
    }
    Ok(run_json)
}

/// The rows earlier resumes replaced (superseded.csv), as keys; what they spent is
/// added to `spent_run` and `spent_teams`, unless a row is also still in results.csv
/// (`current`: left by a resume cut off between the two files), which counts it.
fn read_superseded(
    dir: &Path,
    header: &[String],
    current: &HashSet<Vec<String>>,
    spent_run: &mut Decimal,
    spent_teams: &mut HashMap<String, Decimal>,
) -> Result<HashSet<Vec<String>>, RunError> {
    let superseded_path = dir.join(files::SUPERSEDED_CSV);
    let mut already_superseded: HashSet<Vec<String>> = HashSet::new();
    if superseded_path.exists() {
        let (old, _) = read_rows(&superseded_path, header)?;
        for row in old {
            if !current.contains(&row.verbatim()) {
                let cost = row.cost_usd.unwrap_or_default();
                *spent_run += cost;
                if !row.team.is_empty() {
                    *spent_teams.entry(row.team.clone()).or_default() += cost;
                }
            }
            already_superseded.insert(row.verbatim());
        }
    }
    Ok(already_superseded)
}

impl Resumed {
    /// Rows kept in results.csv.
    pub(super) fn kept(&self) -> usize {
        self.changes.kept.len()
    }

    /// Where the run folder is, as `--out` would name it.
    pub(super) fn out_dir(&self) -> PathBuf {
        self.dir.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    /// Has the report module set the folder up for the tasks that run again, once
    /// everything that could fail before the run has been done (see
    /// [`ResumeChanges::apply`]).
    pub(super) fn apply(&self, tasks: &[TaskSpec], run_json: &RunJson) -> Result<(), RunError> {
        let rerun: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        Ok(self.changes.apply(&self.dir, run_json, &rerun)?)
    }
}

/// The header results.csv has for a plan.
pub(super) fn header_for(plan: &Plan) -> Vec<String> {
    crate::report::header_for(&plan.axes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_the_changed_fields() {
        let a = json!({"name": "j", "defaults": {"model": "a"}, "tasks": [{"id": "t1"}]});
        let b =
            json!({"name": "j", "defaults": {"model": "b"}, "tasks": [{"id": "t1"}, {"id": "t2"}]});
        assert_eq!(
            job_differences(&a, &b),
            [
                "defaults.model: \"a\" -> \"b\"",
                "tasks[1]: (absent) -> {\"id\":\"t2\"}"
            ]
        );
        assert!(job_differences(&a, &a).is_empty());
    }
}
