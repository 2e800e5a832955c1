//! The committed baseline of `bench instructions` (tests/bench/instructions-baseline.json):
//! figures per build profile, the margins of a rise, writing it, and comparing a
//! measurement with it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio::process::Command;

use super::{
    grouped, valgrind_version, Figures, InstructionReport, DEFAULT_FILE_OPS_MARGIN,
    DEFAULT_MARGIN_PERCENT,
};

/// A committed baseline file: figures per build profile and the margins of a rise.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// How much (percent) instructions per turn or per task may rise before the guard
    /// fails.
    pub margin_percent: f64,
    /// How much file operations per turn or per task may rise (a count: 1 is one file
    /// more per turn or per task).
    pub file_ops_margin: f64,
    /// Why those margins.
    pub margin_why: String,
    /// By build profile (`debug`, `release`).
    pub profiles: BTreeMap<String, ProfileBaseline>,
}

/// One build profile's baseline.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileBaseline {
    pub per_turn: u64,
    pub per_task: u64,
    /// Not compared (the report page's size follows the run); shown beside the rest.
    pub fixed: i64,
    pub file_ops_per_turn: f64,
    pub file_ops_per_task: f64,
    /// Why this baseline (one line).
    pub why: String,
    /// Where it was measured: a rise on another toolchain or CPU may be theirs.
    pub measured: Measured,
}

/// What a count depends on besides the code.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    pub date: String,
    pub rustc: String,
    pub valgrind: String,
    pub cpu: String,
}

impl Measured {
    /// Here and now. `rustc` is the one on PATH (in the test suite, the one that built
    /// this binary).
    pub async fn here() -> Measured {
        let rustc = Command::new("rustc")
            .arg("--version")
            .output()
            .await
            .ok()
            .filter(|o| o.status.success())
            .map_or("unknown".into(), |o| {
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            });
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Measured {
            date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
            rustc,
            valgrind: valgrind_version()
                .await
                .unwrap_or_else(|_| "unknown".into()),
            cpu,
        }
    }
}

fn read_baseline(file: &Path) -> anyhow::Result<Baseline> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the baseline {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a baseline file (margin_percent, file_ops_margin, margin_why, profiles)",
            file.display()
        )
    })
}

/// `bench instructions`'s options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GuardArgs {
    /// bench instructions: compare with the baseline in FILE and fail if instructions or
    /// file operations per model turn or per task rose by more than its margins.
    #[arg(long, value_name = "FILE", conflicts_with = "write_baseline")]
    pub baseline: Option<PathBuf>,
    /// bench instructions: write this build's figures to FILE as its baseline, keeping
    /// the margins and the other profile's figures; needs --why.
    #[arg(long, value_name = "FILE", requires = "why")]
    pub write_baseline: Option<PathBuf>,
    /// With --write-baseline: why the baseline changes (one line, kept in the file).
    #[arg(long, value_name = "TEXT", requires = "write_baseline")]
    pub why: Option<String>,
}

impl GuardArgs {
    pub fn given(&self) -> bool {
        self.baseline.is_some() || self.write_baseline.is_some()
    }

    /// Before half a minute of measuring: the baseline to compare with can be read, the
    /// one to write over is a baseline file, and `--why` is one line.
    pub fn preflight(&self) -> anyhow::Result<()> {
        if let Some(file) = &self.baseline {
            read_baseline(file)?;
        }
        if let Some(file) = &self.write_baseline {
            if file.exists() {
                read_baseline(file)?;
            }
            let why = self.why.as_deref().unwrap_or_default();
            if why.trim().is_empty() || why.contains('\n') {
                bail!("--why needs one line saying why the baseline changes");
            }
        }
        Ok(())
    }
}

/// What `--baseline` or `--write-baseline` asks of a measured report: a line to print,
/// or an error saying what rose.
pub async fn guard(report: &InstructionReport, args: &GuardArgs) -> anyhow::Result<String> {
    if let Some(file) = &args.baseline {
        let baseline = read_baseline(file)?;
        return compare(&report.figures, report.profile, &baseline, file)
            .map_err(anyhow::Error::msg);
    }
    let Some(file) = &args.write_baseline else {
        bail!("neither --baseline nor --write-baseline was given");
    };
    args.preflight()?;
    let why = args.why.clone().unwrap_or_default();
    let mut baseline = if file.exists() {
        read_baseline(file)?
    } else {
        Baseline {
            margin_percent: DEFAULT_MARGIN_PERCENT,
            file_ops_margin: DEFAULT_FILE_OPS_MARGIN,
            margin_why: "the default margins: say here why they suit the measured noise".into(),
            profiles: BTreeMap::new(),
        }
    };
    let g = &report.figures;
    baseline.profiles.insert(
        report.profile.to_string(),
        ProfileBaseline {
            per_turn: g.per_turn,
            per_task: g.per_task,
            fixed: g.fixed,
            file_ops_per_turn: (g.file_ops_per_turn * 100.0).round() / 100.0,
            file_ops_per_task: (g.file_ops_per_task * 100.0).round() / 100.0,
            why,
            measured: Measured::here().await,
        },
    );
    let text = serde_json::to_string_pretty(&baseline)? + "\n";
    std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(format!(
        "wrote the {} baseline to {}: commit it with a message that says why",
        report.profile,
        file.display()
    ))
}

/// One compared figure: what it is, now, in the baseline, the rise allowed, and whether
/// it is an instruction count (shown with separators and a percentage) or a count of
/// file operations.
struct Check {
    what: &'static str,
    now: f64,
    was: f64,
    allowed: f64,
    instructions: bool,
}

impl Check {
    fn show(&self, v: f64) -> String {
        if self.instructions {
            grouped(v.round() as i128)
        } else {
            format!("{v:.2}")
        }
    }

    fn percent(&self) -> f64 {
        (self.now / self.was.max(1.0) - 1.0) * 100.0
    }
}

/// The figures against a baseline: a line saying they are within the margins, or an
/// error saying what rose, by how much, and what to do.
pub fn compare(
    now: &Figures,
    profile: &str,
    baseline: &Baseline,
    file: &Path,
) -> Result<String, String> {
    let Some(base) = baseline.profiles.get(profile) else {
        return Err(format!(
            "{} has no baseline for the {profile} build (it has: {}): measure one with `agentbatch bench instructions --write-baseline {} --why \"...\"` built as {profile}, and commit it",
            file.display(),
            baseline.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
            file.display()
        ));
    };
    let margin = baseline.margin_percent;
    let ops = baseline.file_ops_margin;
    let instr = |what, now: u64, was: u64| Check {
        what,
        now: now as f64,
        was: was as f64,
        allowed: was as f64 * margin / 100.0,
        instructions: true,
    };
    let file_ops = |what, now: f64, was: f64| Check {
        what,
        now,
        was,
        allowed: ops,
        instructions: false,
    };
    let checks = [
        instr("instructions per model turn", now.per_turn, base.per_turn),
        instr("instructions per task", now.per_task, base.per_task),
        file_ops(
            "file operations per model turn",
            now.file_ops_per_turn,
            base.file_ops_per_turn,
        ),
        file_ops(
            "file operations per task",
            now.file_ops_per_task,
            base.file_ops_per_task,
        ),
    ];
    let rose: Vec<String> = checks
        .iter()
        .filter(|c| c.now - c.was > c.allowed)
        .map(|c| {
            let by = if c.instructions {
                format!(" {:.1}%,", c.percent())
            } else {
                String::new()
            };
            format!(
                "{} rose{by} from {} to {} (+{}; the margin allows +{})",
                c.what,
                c.show(c.was),
                c.show(c.now),
                c.show(c.now - c.was),
                c.show(c.allowed)
            )
        })
        .collect();
    if rose.is_empty() {
        let shown: Vec<String> = checks
            .iter()
            .map(|c| format!("{} {} (baseline {})", c.what, c.show(c.now), c.show(c.was)))
            .collect();
        let fell = checks.iter().any(|c| c.was - c.now > c.allowed);
        return Ok(format!(
            "baseline ({profile} build, {}): {}; within the margins ({margin}% of instructions, {ops} file operations){}",
            file.display(),
            shown.join(", "),
            if fell {
                "; some fell by more than the margin: write a new baseline (--write-baseline, in a commit that says why) so that the guard stays tight"
            } else {
                ""
            }
        ));
    }
    let m = &base.measured;
    Err(format!(
        "{} over the baseline in {} ({profile} build; measured {} with {}, {}, on {}). Find the cause (docs/PERFORMANCE.md, \"Instruction-count guard\", says how to see where they go), or, if the rise is meant, write a new baseline with `agentbatch bench instructions --write-baseline {} --why \"...\"` and commit it with a message that says why",
        rose.join("; "),
        file.display(),
        m.date,
        m.rustc,
        m.valgrind,
        m.cpu,
        file.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(per_turn: u64, per_task: u64) -> Baseline {
        Baseline {
            margin_percent: 3.0,
            file_ops_margin: 0.5,
            margin_why: "test".into(),
            profiles: BTreeMap::from([(
                "debug".to_string(),
                ProfileBaseline {
                    per_turn,
                    per_task,
                    fixed: 0,
                    file_ops_per_turn: 0.0,
                    file_ops_per_task: 2.0,
                    why: "test".into(),
                    measured: Measured::default(),
                },
            )]),
        }
    }

    fn figures(per_turn: u64, per_task: u64, file_ops_per_task: f64) -> Figures {
        Figures {
            per_turn,
            per_task,
            fixed: 0,
            file_ops_per_turn: 0.0,
            file_ops_per_task,
        }
    }

    #[test]
    fn a_rise_past_the_margin_fails_naming_what_rose_and_what_to_do() {
        let file = Path::new("tests/bench/instructions-baseline.json");
        let b = baseline(1_000_000, 2_000_000);
        let ok = compare(&figures(1_029_000, 1_500_000, 2.45), "debug", &b, file).unwrap();
        assert!(ok.contains("within the margins"), "{ok}");
        assert!(ok.contains("write a new baseline"), "a large fall: {ok}");
        let err = compare(&figures(1_031_000, 2_000_000, 2.0), "debug", &b, file).unwrap_err();
        assert!(
            err.contains("instructions per model turn rose 3.1%, from 1,000,000 to 1,031,000 (+31,000; the margin allows +30,000)"),
            "{err}"
        );
        assert!(!err.contains("per task rose"), "{err}");
        assert!(err.contains("--write-baseline tests/bench/instructions-baseline.json"));
        assert!(err.contains("Find the cause"), "{err}");
        let both = compare(&figures(2_000_000, 2_100_000, 2.0), "debug", &b, file).unwrap_err();
        assert!(both.contains("instructions per task rose 5.0%"), "{both}");
    }

    #[test]
    fn one_file_more_per_task_fails_though_its_instructions_are_lost_in_the_noise() {
        let b = baseline(1_000_000, 2_000_000);
        let err = compare(
            &figures(1_000_000, 2_000_000, 3.0),
            "debug",
            &b,
            Path::new("b.json"),
        )
        .unwrap_err();
        assert!(
            err.contains(
                "file operations per task rose from 2.00 to 3.00 (+1.00; the margin allows +0.50)"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_profile_without_a_baseline_fails_rather_than_passing() {
        let err = compare(
            &figures(1, 1, 2.0),
            "release",
            &baseline(1, 1),
            Path::new("b.json"),
        )
        .unwrap_err();
        assert!(
            err.contains("no baseline for the release build (it has: debug)"),
            "{err}"
        );
    }
}
