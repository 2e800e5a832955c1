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
use crate::report::COLUMNS;

/// Stop reasons that say the run, not the agent, failed: re-run on resume.
pub const INFRA_STOPS: [&str; 4] = [
    "provider_error",
    "rate_limited",
    "tool_setup_error",
    "cancelled",
];

/// How to resume.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    /// The run folder, `<out>/<run-id>`.
    pub dir: PathBuf,
    /// Re-run tasks whose previous end was an infrastructure failure.
    pub retry_errors: bool,
    /// Resume even though the job file changed.
    pub force: bool,
}

/// What the earlier attempts left, ready for the runner.
pub(super) struct Resumed {
    pub run_id: String,
    pub out_dir: PathBuf,
    /// The tasks still to run, in plan order.
    pub tasks: Vec<TaskSpec>,
    /// Rows kept in results.csv.
    pub kept: usize,
    /// Rows moved to superseded.csv.
    pub superseded: usize,
    /// Money spent by earlier attempts: counted against the run's and teams' caps.
    pub spent_run: Decimal,
    pub spent_teams: HashMap<String, Decimal>,
    /// What tasks cut off by a kill had spent (set aside by this resume), in all and
    /// per team.
    pub killed_spent: Decimal,
    pub killed_teams: HashMap<String, Decimal>,
    /// run.json as the earlier attempt left it.
    pub run_json: Value,
}

fn invalid(m: String) -> RunError {
    RunError::Invalid(m)
}

/// One row of an earlier results.csv, as far as resuming needs it.
struct OldRow {
    fields: csv::StringRecord,
    unit: (String, String, u32),
    stop_reason: String,
    turns: u64,
    cost: Decimal,
    team: String,
}

fn read_rows(
    path: &Path,
    header_expected: &[String],
) -> Result<(Vec<OldRow>, csv::StringRecord), RunError> {
    let mut text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    // A row cut off by a kill has no line end: it never counted, drop it.
    if !text.ends_with('\n') {
        let keep = text.rfind('\n').map_or(0, |i| i + 1);
        text.truncate(keep);
    }
    let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let header = r
        .headers()
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?
        .clone();
    let got: Vec<&str> = header.iter().collect();
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
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(task), Some(variant), Some(epoch), Some(stop), Some(turns), Some(cost), Some(team)) = (
        col("task_id"),
        col("variant"),
        col("epoch"),
        col("stop_reason"),
        col("turns"),
        col("cost_usd"),
        col("team"),
    ) else {
        return Err(invalid(format!(
            "{}: a required column is missing",
            path.display()
        )));
    };
    let mut rows = Vec::new();
    for (n, rec) in r.records().enumerate() {
        let line = n + 2;
        let rec = rec.map_err(|e| invalid(format!("{}:{line}: {e}", path.display())))?;
        let bad = |what: &str| {
            invalid(format!(
                "{}:{line}: the {what} is not valid: fix or delete the row",
                path.display()
            ))
        };
        let epoch: u32 = rec[epoch].parse().map_err(|_| bad("epoch"))?;
        let cost: Decimal = if rec[cost].is_empty() {
            Decimal::ZERO
        } else {
            rec[cost].parse().map_err(|_| bad("cost_usd"))?
        };
        rows.push(OldRow {
            unit: (rec[task].to_string(), rec[variant].to_string(), epoch),
            stop_reason: rec[stop].to_string(),
            turns: rec[turns].parse().map_err(|_| bad("turns"))?,
            cost,
            team: rec[team].to_string(),
            fields: rec,
        });
    }
    Ok((rows, header))
}

/// Where two versions of the job differ, as `path: old -> new` lines.
pub fn job_differences(old: &Value, new: &Value) -> Vec<String> {
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

/// The last `spent_usd` a transcript recorded: what a task cut off by a kill had spent.
fn spent_in_transcript(path: &Path) -> Decimal {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Decimal::ZERO;
    };
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "settle")
        .and_then(|v| v["spent_usd"].as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(Decimal::ZERO)
}

/// Moves a file aside as `<stem>.tryN.<ext>` (the lowest free N) so nothing an earlier
/// attempt wrote is lost.
fn set_aside(path: &Path) -> std::io::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let (Some(dir), Some(stem), Some(ext)) = (path.parent(), path.file_stem(), path.extension())
    else {
        return Ok(());
    };
    let (stem, ext) = (stem.to_string_lossy(), ext.to_string_lossy());
    let mut n = 1;
    loop {
        let to = dir.join(format!("{stem}.try{n}.{ext}"));
        if !to.exists() {
            return std::fs::rename(path, to);
        }
        n += 1;
    }
}

/// Reads the earlier run, decides what runs again, and sets the folder up for it:
/// results.csv keeps only the rows that stand, superseded rows go to superseded.csv,
/// transcripts and patches of tasks that run again are set aside, and leftover
/// workspaces of killed tasks are removed.
pub(super) fn prepare(
    opts: &ResumeOptions,
    plan: &Plan,
    selected: Vec<TaskSpec>,
    header: &[String],
) -> Result<Resumed, RunError> {
    let dir = &opts.dir;
    let run_json_path = dir.join("run.json");
    let text = std::fs::read_to_string(&run_json_path).map_err(|e| {
        invalid(format!(
            "--resume {}: cannot read {}: {e} (give the folder of a run: <out>/<run-id>)",
            dir.display(),
            run_json_path.display()
        ))
    })?;
    let run_json: Value = serde_json::from_str(&text)
        .map_err(|e| invalid(format!("{}: not valid JSON: {e}", run_json_path.display())))?;
    let new_job = serde_json::to_value(&plan.job).unwrap_or(Value::Null);
    let diffs = job_differences(&run_json["job"], &new_job);
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
    let run_id = run_json["run_id"]
        .as_str()
        .map(str::to_string)
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| invalid(format!("{}: no run_id", run_json_path.display())))?;
    let out_dir = dir.parent().map(Path::to_path_buf).unwrap_or_default();

    let csv_path = dir.join("results.csv");
    let (rows, head) = read_rows(&csv_path, header)?;
    let mut spent_run = Decimal::ZERO;
    let mut spent_teams: HashMap<String, Decimal> = HashMap::new();
    // Earlier resumes: the rows they replaced, and what killed tasks had spent then.
    let superseded_path = dir.join("superseded.csv");
    if superseded_path.exists() {
        let (old, _) = read_rows(&superseded_path, header)?;
        for row in old {
            spent_run += row.cost;
            if !row.team.is_empty() {
                *spent_teams.entry(row.team).or_default() += row.cost;
            }
        }
    }
    for r in run_json["resumes"].as_array().into_iter().flatten() {
        if let Some(d) = r["killed_spent_usd"]
            .as_str()
            .and_then(|s| s.parse::<Decimal>().ok())
        {
            spent_run += d;
        }
        for (team, v) in r["killed_spent_by_team"].as_object().into_iter().flatten() {
            if let Some(d) = v.as_str().and_then(|s| s.parse::<Decimal>().ok()) {
                *spent_teams.entry(team.clone()).or_default() += d;
            }
        }
    }
    let mut stands: HashSet<(String, String, u32)> = HashSet::new();
    let mut kept = Vec::new();
    let mut superseded = Vec::new();
    for row in rows {
        spent_run += row.cost;
        if !row.team.is_empty() {
            *spent_teams.entry(row.team.clone()).or_default() += row.cost;
        }
        let infra = INFRA_STOPS.contains(&row.stop_reason.as_str());
        // A task that never got to its first turn has nothing to keep.
        let never_ran = row.stop_reason == "cancelled" && row.turns == 0;
        let again = never_ran || (infra && opts.retry_errors);
        if again || stands.contains(&row.unit) {
            superseded.push(row);
        } else {
            stands.insert(row.unit.clone());
            kept.push(row);
        }
    }
    let tasks: Vec<TaskSpec> = selected
        .into_iter()
        .filter(|t| !stands.contains(&(t.task.clone(), t.variant.clone(), t.epoch)))
        .collect();

    // The folder is changed only from here on, after every check passed.
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| invalid(format!("cannot update {}: {e}", p.display()))
    };
    if !superseded.is_empty() {
        let path = dir.join("superseded.csv");
        let fresh = !path.exists();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut w = csv::Writer::from_writer(file);
        if fresh {
            w.write_record(&head)
                .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        }
        for r in &superseded {
            w.write_record(&r.fields)
                .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        }
        w.flush().map_err(io(&path))?;
    }
    let tmp = dir.join("results.csv.tmp");
    {
        let mut w =
            csv::Writer::from_path(&tmp).map_err(|e| invalid(format!("{}: {e}", tmp.display())))?;
        w.write_record(&head)
            .map_err(|e| invalid(format!("{}: {e}", tmp.display())))?;
        for r in &kept {
            w.write_record(&r.fields)
                .map_err(|e| invalid(format!("{}: {e}", tmp.display())))?;
        }
        w.flush().map_err(io(&tmp))?;
        w.get_ref().sync_data().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, &csv_path).map_err(io(&csv_path))?;

    let superseded_keys: HashSet<&(String, String, u32)> =
        superseded.iter().map(|r| &r.unit).collect();
    let mut killed_spent = Decimal::ZERO;
    let mut killed_teams: HashMap<String, Decimal> = HashMap::new();
    for t in &tasks {
        let transcript = dir.join("transcripts").join(format!("{}.jsonl", t.id));
        // A transcript without a row is a task the kill cut off: its spend counts.
        if !superseded_keys.contains(&(t.task.clone(), t.variant.clone(), t.epoch)) {
            let spent = spent_in_transcript(&transcript);
            spent_run += spent;
            killed_spent += spent;
            if let Some(team) = t.team_name() {
                *spent_teams.entry(team.to_string()).or_default() += spent;
                *killed_teams.entry(team.to_string()).or_default() += spent;
            }
        }
        set_aside(&transcript).map_err(io(&transcript))?;
        let patch = dir.join("patches").join(format!("{}.diff", t.id));
        set_aside(&patch).map_err(io(&patch))?;
        for sub in ["workspaces", "git", "tmp"] {
            let p = dir.join(sub).join(&t.id);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(io(&p))?;
            }
        }
    }
    Ok(Resumed {
        run_id,
        out_dir,
        tasks,
        kept: kept.len(),
        superseded: superseded.len(),
        spent_run,
        spent_teams,
        killed_spent,
        killed_teams,
        run_json,
    })
}

/// The header results.csv has for a plan.
pub(super) fn header_for(plan: &Plan) -> Vec<String> {
    COLUMNS
        .iter()
        .map(|c| c.to_string())
        .chain(plan.axes.iter().map(|a| crate::report::axis_column(a)))
        .collect()
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

    #[test]
    fn set_aside_never_overwrites() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        for _ in 0..2 {
            std::fs::write(&p, "x").unwrap();
            set_aside(&p).unwrap();
        }
        assert!(d.path().join("t.try1.jsonl").exists());
        assert!(d.path().join("t.try2.jsonl").exists());
        assert!(!p.exists());
    }
}
