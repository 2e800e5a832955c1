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
use crate::vocab::stop::StopReason;

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
    /// run.json as the earlier attempt left it.
    pub run_json: Value,
    /// The run folder.
    pub dir: PathBuf,
    /// What [`Resumed::apply`] writes.
    changes: Changes,
}

/// The file changes a resume makes, decided before any is made.
struct Changes {
    head: csv::StringRecord,
    /// Rows that stand, for results.csv.
    kept: Vec<csv::StringRecord>,
    /// Rows replaced by this resume and not yet in superseded.csv.
    superseded: Vec<csv::StringRecord>,
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
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
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
    let records: Vec<_> = r.records().collect();
    let last = records.len();
    for (n, rec) in records.into_iter().enumerate() {
        let line = n + 2;
        let rec = match rec {
            Ok(rec) if rec.len() == header.len() => rec,
            // A last row cut short (power loss before the sync): it never counted.
            _ if n + 1 == last => break,
            Ok(rec) => {
                return Err(invalid(format!(
                    "{}:{line}: {} fields where the header has {}: fix or delete the row",
                    path.display(),
                    rec.len(),
                    header.len()
                )))
            }
            Err(e) => return Err(invalid(format!("{}:{line}: {e}", path.display()))),
        };
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

/// Reads the earlier run and decides what runs again, without changing anything:
/// [`Resumed::apply`] makes the changes once the run is sure to start.
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

    let csv_path = dir.join("results.csv");
    let (rows, head) = read_rows(&csv_path, header)?;
    let fields = |r: &csv::StringRecord| r.iter().map(str::to_string).collect::<Vec<_>>();
    let current: HashSet<Vec<String>> = rows.iter().map(|r| fields(&r.fields)).collect();
    let mut spent_run = Decimal::ZERO;
    let mut spent_teams: HashMap<String, Decimal> = HashMap::new();
    // Earlier resumes: the rows they replaced (a row also still in results.csv, left by
    // a resume cut off between the two files, is counted there), and what killed tasks
    // had spent then.
    let superseded_path = dir.join("superseded.csv");
    let mut already_superseded: HashSet<Vec<String>> = HashSet::new();
    if superseded_path.exists() {
        let (old, _) = read_rows(&superseded_path, header)?;
        for row in old {
            if !current.contains(&fields(&row.fields)) {
                spent_run += row.cost;
                if !row.team.is_empty() {
                    *spent_teams.entry(row.team).or_default() += row.cost;
                }
            }
            already_superseded.insert(fields(&row.fields));
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
    // Only the tasks this resume runs (`--only`) can have their rows replaced.
    let selected_units: HashSet<(String, String, u32)> = selected
        .iter()
        .map(|t| (t.task.clone(), t.variant.clone(), t.epoch))
        .collect();
    let mut stands: HashSet<(String, String, u32)> = HashSet::new();
    let mut kept = Vec::new();
    let mut superseded = Vec::new();
    for row in rows {
        spent_run += row.cost;
        if !row.team.is_empty() {
            *spent_teams.entry(row.team.clone()).or_default() += row.cost;
        }
        let infra = StopReason::parse(&row.stop_reason).is_some_and(StopReason::is_infra);
        // A task that never got to its first turn has nothing to keep.
        let never_ran = row.stop_reason == "cancelled" && row.turns == 0;
        let again =
            (never_ran || (infra && opts.retry_errors)) && selected_units.contains(&row.unit);
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

    // Tasks cut off by a kill: a transcript without a row; their spend counts.
    let superseded_keys: HashSet<&(String, String, u32)> =
        superseded.iter().map(|r| &r.unit).collect();
    let mut killed_spent = Decimal::ZERO;
    let mut killed_teams: HashMap<String, Decimal> = HashMap::new();
    let mut killed_variants: HashMap<String, Decimal> = HashMap::new();
    for t in &tasks {
        if superseded_keys.contains(&(t.task.clone(), t.variant.clone(), t.epoch)) {
            continue;
        }
        let spent = crate::report::spent_in_transcript(
            &dir.join("transcripts").join(format!("{}.jsonl", t.id)),
        );
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
        .map(|r| r.fields.clone())
        .filter(|f| !already_superseded.contains(&fields(f)))
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
        run_json,
        changes: Changes {
            head,
            kept: kept.into_iter().map(|r| r.fields).collect(),
            superseded: superseded_new,
        },
    })
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

    /// Sets the folder up for the tasks that run again, after everything that could
    /// fail before the run has been done: run.json first (with this resume's record,
    /// so what killed tasks spent is never forgotten), then superseded.csv, results.csv
    /// (replaced whole), and the earlier transcripts, patches and workspaces of the
    /// tasks that run again. Each step can be repeated after a crash.
    pub(super) fn apply(
        &self,
        tasks: &[TaskSpec],
        run_json: &Value,
        tasks_json: &serde_json::value::RawValue,
    ) -> Result<(), RunError> {
        let dir = &self.dir;
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |e: std::io::Error| invalid(format!("cannot update {}: {e}", p.display()))
        };
        crate::report::write_run_json(&dir.join("run.json"), run_json, tasks_json)
            .map_err(|e| invalid(e.to_string()))?;
        let c = &self.changes;
        if !c.superseded.is_empty() {
            let path = dir.join("superseded.csv");
            let fresh = !path.exists();
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io(&path))?;
            let mut w = csv::Writer::from_writer(file);
            let bad = |e: csv::Error| invalid(format!("{}: {e}", path.display()));
            if fresh {
                w.write_record(&c.head).map_err(bad)?;
            }
            for r in &c.superseded {
                w.write_record(r).map_err(bad)?;
            }
            w.flush().map_err(io(&path))?;
            w.get_ref().sync_data().map_err(io(&path))?;
        }
        let csv_path = dir.join("results.csv");
        let tmp = dir.join("results.csv.tmp");
        {
            let bad = |e: csv::Error| invalid(format!("{}: {e}", tmp.display()));
            let mut w = csv::Writer::from_path(&tmp).map_err(bad)?;
            w.write_record(&c.head).map_err(bad)?;
            for r in &c.kept {
                w.write_record(r).map_err(bad)?;
            }
            w.flush().map_err(io(&tmp))?;
            w.get_ref().sync_data().map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, &csv_path).map_err(io(&csv_path))?;
        for t in tasks {
            let transcript = dir.join("transcripts").join(format!("{}.jsonl", t.id));
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
        Ok(())
    }
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
