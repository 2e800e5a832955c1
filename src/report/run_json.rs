//! run.json: what a run was (the job, the version, when, how many at once), how it
//! ended, and what each resume found. Every part of agentbatch that writes or reads it
//! goes through [`RunJson`], so its keys are named once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::ReportError;
use super::files::{newer_format_message, FORMAT_VERSION};

/// run.json. Keys are written in this order; the ones a run has not reached yet (the
/// end, a resume) are left out. A key an older run lacks reads as its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RunJson {
    /// The run folder's format ([`FORMAT_VERSION`]): written as this agentbatch's, read
    /// as written (0 when absent: a folder from before versions). A reader refuses a
    /// newer one.
    #[serde(
        default,
        serialize_with = "this_format",
        deserialize_with = "super::files::saturating_format"
    )]
    pub format_version: u32,
    pub agentbatch_version: String,
    /// The commit it was built from (`unknown` when the build could not tell; absent
    /// in a folder from before commits were recorded).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agentbatch_commit: String,
    pub run_id: String,
    pub job_file: String,
    pub job_name: String,
    pub started_at: String,
    pub concurrency: usize,
    /// The `--only` globs.
    pub only: Vec<String>,
    pub pricing_as_of: String,
    /// The job as written (a resume compares it with the job it is given).
    pub job: Value,
    /// `running`, then `finished` or `interrupted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The run's totals ([`super::RunTotals`]; the last attempt's after a resume).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub totals: Option<Value>,
    /// What the process used, from the OS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Value>,
    /// What became of the run's traces (`--otlp`): spans exported and dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Value>,
    /// Per provider, the rate limits learned from its answers' headers: each change,
    /// oldest first, with when and what was paced to from then on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub learned_limits: BTreeMap<String, Vec<LearnedLimits>>,
    /// Per provider that states no limits and refused requests: the adaptive rate it
    /// was paced at by the end, in requests a minute.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub adaptive_rpm: BTreeMap<String, u32>,
    /// One record per resume, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resumes: Vec<ResumeRecord>,
    /// A shared run's attempts cut off with their worker, from the ledger (`collect`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub killed_with_workers: Option<WorkersKilled>,
    /// Says what `totals` covers once a run has been resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub totals_scope: Option<String>,
    /// The resolved plan, kept as encoded JSON (for a large run a tree of values would
    /// be the biggest thing in memory). Last, so the head reads first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Box<RawValue>>,
}

/// A run.json is written in the format of the agentbatch that writes it, whatever it
/// was read as: the folder is now of that format.
fn this_format<S: serde::Serializer>(_: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u32(FORMAT_VERSION)
}

/// One change of the limits a provider's gate paces to, learned from its headers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LearnedLimits {
    pub at: String,
    #[serde(flatten)]
    pub limits: crate::vocab::limits::StatedLimits,
}

/// What one resume found and did. Money is written as decimal strings, never floats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ResumeRecord {
    pub at: String,
    pub agentbatch_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agentbatch_commit: String,
    pub kept_rows: usize,
    pub superseded_rows: usize,
    pub tasks_to_run: usize,
    pub spent_before_usd: Decimal,
    /// What tasks cut off by a kill had spent: no row shows it, so it is kept here.
    pub killed_spent_usd: Decimal,
    pub abandoned_reservations_usd: Decimal,
    pub killed_spent_by_team: BTreeMap<String, Decimal>,
    pub killed_spent_by_variant: BTreeMap<String, Decimal>,
    pub retry_errors: bool,
    /// `--retry-budget-stops`: tasks a team's cap stopped ran again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retry_budget_stops: bool,
}

/// What the attempts of a shared run that died with their worker were charged: no row
/// shows them (the worker never sent one), so `collect` counts them from the ledger, as
/// what it charged each ended task beyond its row and its attempts kept apart. Money as
/// decimal strings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WorkersKilled {
    pub killed_spent_usd: Decimal,
    /// The part of it still reserved by requests in flight when their worker died: the
    /// worst case, since the provider may have billed them.
    pub in_flight_usd: Decimal,
    pub killed_spent_by_team: BTreeMap<String, Decimal>,
    pub killed_spent_by_variant: BTreeMap<String, Decimal>,
}

/// One task run of the resolved plan (`tasks`), as far as readers after the run need
/// it: who it was and what it was asked. Keys it lacks read as empty.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(crate) struct PlannedTask {
    /// The task run's key (names its transcript and patch).
    pub id: String,
    /// The task's id as written in the job file.
    pub task: String,
    pub variant: String,
    pub epoch: u32,
    pub prompt: String,
    pub system: Option<String>,
    pub model: String,
}

/// run.json could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RunJsonError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Written by a newer agentbatch, in a format this one does not know.
    #[error("{}", newer_format_message(path, *found))]
    Newer { path: PathBuf, found: u32 },
}

impl RunJson {
    /// Reads `path`.
    pub fn read(path: &Path) -> Result<RunJson, RunJsonError> {
        let text = std::fs::read_to_string(path).map_err(|source| RunJsonError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let run: RunJson = serde_json::from_str(&text).map_err(|source| RunJsonError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        if run.format_version > FORMAT_VERSION {
            return Err(RunJsonError::Newer {
                path: path.to_path_buf(),
                found: run.format_version,
            });
        }
        Ok(run)
    }

    /// The task runs of the resolved plan; none when run.json has no plan, or one this
    /// agentbatch cannot read as a list of tasks.
    pub(crate) fn planned(&self) -> Vec<PlannedTask> {
        self.tasks
            .as_ref()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default()
    }

    /// Writes `path` atomically: a temp file beside it, then a rename, so a crash
    /// leaves the old run.json or the new one.
    pub(crate) fn write(&self, path: &Path) -> Result<(), ReportError> {
        let tmp = path.with_extension("json.tmp");
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ReportError::Io { path, source }
        };
        let text =
            serde_json::to_string_pretty(self).map_err(|e| io(&tmp)(std::io::Error::other(e)))?;
        std::fs::write(&tmp, text + "\n").map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn the_planned_tasks_read_back_from_the_plan_as_written() {
        let text = r#"{"run_id": "r", "tasks": [
            {"id": "t--a", "task": "t", "variant": "m=a", "epoch": 2, "prompt": "p", "system": "s", "model": "x", "limits": {}},
            {"id": "u", "task": "u", "epoch": 1, "prompt": "q", "model": "y"}
        ]}"#;
        let run: RunJson = serde_json::from_str(text).unwrap();
        let planned = run.planned();
        assert_eq!(planned.len(), 2);
        assert_eq!(
            planned[0],
            PlannedTask {
                id: "t--a".into(),
                task: "t".into(),
                variant: "m=a".into(),
                epoch: 2,
                prompt: "p".into(),
                system: Some("s".into()),
                model: "x".into(),
            }
        );
        assert_eq!(
            (planned[1].variant.as_str(), planned[1].system.as_deref()),
            ("", None)
        );
        let none: RunJson = serde_json::from_str(r#"{"tasks": {"not": "a list"}}"#).unwrap();
        assert!(none.planned().is_empty());
        assert!(RunJson::default().planned().is_empty());
    }

    #[test]
    fn a_format_version_past_u32_is_newer_and_a_broken_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        for huge in ["4294967296", "99999999999999999999999"] {
            std::fs::write(&path, format!("{{\"format_version\": {huge}}}")).unwrap();
            match RunJson::read(&path) {
                Err(RunJsonError::Newer { found, .. }) => assert_eq!(found, u32::MAX, "{huge}"),
                other => panic!("{huge}: {other:?}"),
            }
            assert_eq!(
                super::super::files::newer_format(dir.path()),
                Some(u32::MAX)
            );
        }
        for broken in ["-1", "1.5", "\"2\""] {
            std::fs::write(&path, format!("{{\"format_version\": {broken}}}")).unwrap();
            assert!(
                matches!(RunJson::read(&path), Err(RunJsonError::Parse { .. })),
                "{broken}"
            );
        }
    }

    #[test]
    fn a_run_json_round_trips_key_for_key_in_order() {
        let text = r#"{
  "format_version": 1,
  "agentbatch_version": "0.1.0",
  "run_id": "r",
  "job_file": "job.yaml",
  "job_name": "j",
  "started_at": "2026-01-01T00:00:00.000Z",
  "concurrency": 4,
  "only": [
    "a*"
  ],
  "pricing_as_of": "2026-01-01",
  "job": {
    "name": "j",
    "tasks": []
  },
  "status": "finished",
  "finished_at": "2026-01-01T00:01:00.000Z",
  "totals": {
    "tasks": 1
  },
  "resources": {
    "cpu_user_s": 0.5
  },
  "resumes": [
    {
      "at": "2026-01-01T00:00:30.000Z",
      "agentbatch_version": "0.1.0",
      "kept_rows": 1,
      "superseded_rows": 2,
      "tasks_to_run": 3,
      "spent_before_usd": "0.25",
      "killed_spent_usd": "0",
      "abandoned_reservations_usd": "0.1",
      "killed_spent_by_team": {
        "t": "0.01"
      },
      "killed_spent_by_variant": {},
      "retry_errors": true
    }
  ],
  "totals_scope": "the last attempt only; summary.csv covers the whole run",
  "tasks": [{"id": "a"}]
}
"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        std::fs::write(&path, text).unwrap();
        let r = RunJson::read(&path).unwrap();
        assert_eq!(r.resumes[0].spent_before_usd, d("0.25"));
        assert_eq!(r.resumes[0].killed_spent_by_team["t"], d("0.01"));
        r.write(&path).unwrap();
        let again = std::fs::read_to_string(&path).unwrap();
        let (a, b): (Value, Value) = (
            serde_json::from_str(text).unwrap(),
            serde_json::from_str(&again).unwrap(),
        );
        assert_eq!(a, b);
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&a), keys(&b), "the same keys in the same order");
        assert!(!dir.path().join("run.json.tmp").exists());
    }

    #[test]
    fn a_new_run_has_only_the_keys_it_has_reached() {
        let r = RunJson {
            run_id: "r".into(),
            agentbatch_commit: "3f2a".into(),
            job: json!({"name": "j"}),
            status: Some("running".into()),
            ..RunJson::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "format_version",
                "agentbatch_version",
                "agentbatch_commit",
                "run_id",
                "job_file",
                "job_name",
                "started_at",
                "concurrency",
                "only",
                "pricing_as_of",
                "job",
                "status"
            ]
        );
    }

    #[test]
    fn an_old_or_bad_run_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        std::fs::write(&path, "{}").unwrap();
        let r = RunJson::read(&path).unwrap();
        assert!(r.resumes.is_empty() && r.run_id.is_empty());
        assert_eq!(r.format_version, 0, "a run.json from before versions");
        // Read as written, written as this agentbatch's format.
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.starts_with(&format!("{{\"format_version\":{FORMAT_VERSION},")));
        std::fs::write(&path, format!("{{\"format_version\": {FORMAT_VERSION}}}")).unwrap();
        assert_eq!(RunJson::read(&path).unwrap().format_version, FORMAT_VERSION);
        std::fs::write(
            &path,
            format!("{{\"format_version\": {}}}", FORMAT_VERSION + 1),
        )
        .unwrap();
        let e = RunJson::read(&path).unwrap_err().to_string();
        assert!(
            e.contains("run.json: written by a newer agentbatch")
                && e.contains("use a newer agentbatch"),
            "{e}"
        );
        std::fs::write(&path, "{").unwrap();
        let e = RunJson::read(&path).unwrap_err().to_string();
        assert!(e.contains("run.json: not valid JSON"), "{e}");
        let e = RunJson::read(&dir.path().join("none.json")).unwrap_err();
        assert!(matches!(e, RunJsonError::Read { .. }), "{e}");
    }
}
