//! The command line: clap's definition of every command, and the dispatch to each
//! command's handler in this folder. A command's own arguments, where they are many, are
//! a struct beside its handler (`run::RunArgs`, `shared::WorkerArgs`, `sim::SimArgs`,
//! `bench::BenchArgs`). `main.rs` parses, prepares the process and calls [`Command::run`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use super::bench::BenchArgs;
use super::export::ExportFormat;
use super::run::RunArgs;
use super::schema::SchemaArgs;
use super::shared::WorkerArgs;
use super::sim::SimArgs;
use crate::vocab::values::parse_duration;

/// `agentbatch` and its command.
#[derive(Parser)]
#[command(
    name = "agentbatch",
    version = crate::LONG_VERSION,
    about = "Run many LLM agent loops in batch under hard budgets"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Every command of `agentbatch`; each variant's doc comment is its `--help` text.
#[derive(Subcommand)]
pub enum Command {
    /// Run a job: every task's agent loop, governed by its limits; reports to DIR/<run-id>/.
    Run {
        /// The job file (YAML).
        job: PathBuf,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Run tasks of a queued run (`run --queue`) until none is left; many workers may
    /// share one run. Reports of this worker's share go to DIR/workers/<worker>/<run-id>.
    Worker(WorkerArgs),
    /// Write a queued run's folder (results.csv, summary.csv, run.json, transcripts,
    /// patches) from what its workers sent back, and show how far it is.
    Collect {
        #[arg(value_name = "URL", env = "AGENTBATCH_QUEUE_URL")]
        url: String,
        #[arg(long, value_name = "ID")]
        run_id: String,
        #[arg(long, default_value = "reports", value_name = "DIR")]
        out: PathBuf,
        /// The team ledger the workers used (default: the job's `ledger:` database, else
        /// the queue's): what attempts that died with their worker spent is read there.
        #[arg(long, value_name = "URL", env = "AGENTBATCH_LEDGER_URL")]
        ledger: Option<PathBuf>,
    },
    /// Check a job file without spending anything and print the expanded plan.
    Validate {
        job: PathBuf,
        /// The folder the run's reports would go to, as `run --out` takes it:
        /// `workspaces: reflink` is checked there.
        #[arg(long, default_value = "reports", value_name = "DIR")]
        out: PathBuf,
    },
    /// Compare variants (or runs) on the tasks both sides ran: wins, losses, pass rates
    /// with an exact McNemar test, cost per pass, flipped tasks; writes compare.csv,
    /// compare-flips.csv, compare.md and compare.html.
    Compare {
        /// Run folders (DIR/<run-id>) or their results.csv files.
        #[arg(required = true, value_name = "RUN_DIR")]
        runs: Vec<PathBuf>,
        /// Group by one matrix axis (or `run`) instead of by variant.
        #[arg(long, value_name = "AXIS")]
        by: Option<String>,
        /// Where the files go (default: the first RUN_DIR).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Check a transcript for agent-loop protocol problems: tools declared, calls
    /// received, each call allowed or refused, each result returned under its id.
    /// Exit 1 when it shows a protocol violation, 2 when it cannot be read.
    Audit {
        /// A transcript: DIR/<run-id>/transcripts/<task>.jsonl
        transcript: PathBuf,
    },
    /// Write report.html for an existing run folder (summary, charts, task table,
    /// transcripts) and print its path.
    Report {
        #[arg(value_name = "RUN_DIR")]
        dir: PathBuf,
    },
    /// Write a run folder in another tool's format: SWE-bench predictions for the
    /// official evaluation harness, or ATIF trajectories (Harbor's format), by default
    /// under RUN_DIR/exports/.
    Export {
        #[command(subcommand)]
        format: ExportFormat,
    },
    /// List the tools each tool set of a job gives the model, starting its MCP servers.
    Tools {
        job: PathBuf,
        /// Only this tool set.
        #[arg(long, value_name = "NAME")]
        toolset: Option<String>,
        /// Print each tool's input schema too.
        #[arg(long)]
        schemas: bool,
    },
    /// Check one MCP server: connect (an http(s) URL, or a command line for stdio), list
    /// its tools and call each with sample arguments from its schema.
    McpCheck {
        /// The server's Streamable HTTP URL, or the command that starts it.
        target: String,
        /// How long each call may take.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Show what each team spent per period, from the persistent ledger; `set-cap`
    /// changes a team's period cap there.
    Ledger {
        #[command(subcommand)]
        action: Option<LedgerAction>,
        /// Only this team.
        #[arg(long)]
        team: Option<String>,
        /// A SQLite file or a postgres:// URL.
        #[arg(
            long,
            global = true,
            default_value = "reports/ledger.sqlite",
            value_name = "PATH|URL",
            env = "AGENTBATCH_LEDGER_URL"
        )]
        ledger: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show what a suite (a SWE-bench dataset or task repo, Harbor or Terminal-Bench
    /// task folders) becomes as job YAML.
    Suite {
        #[command(subcommand)]
        action: SuiteAction,
    },
    /// Run the verifier again on a run's recorded patches, in fresh environments and
    /// without any model request; the new verdicts go beside the old ones.
    Regrade {
        /// The run folder (DIR/<run-id>).
        run: PathBuf,
        /// Only the tasks whose id (as written, or the run's key) matches this glob.
        #[arg(long)]
        only: Option<String>,
        /// The job file whose verifiers grade (default: the one the run recorded), for
        /// a fixed test patch or verifier.
        #[arg(long)]
        job: Option<PathBuf>,
        /// Also regrade Harbor tasks whose verifier shares the agent's container (the
        /// default mode): from the recorded patch alone, without what the agent changed
        /// outside the workspace.
        #[arg(long)]
        shared: bool,
    },
    /// Run the simulated provider as a standalone server.
    Sim(SimArgs),
    /// Print the JSON Schema of job files (default) or simulator scripts, for editors;
    /// --markdown prints the fields as tables instead.
    Schema(SchemaArgs),
    /// Measure rate-limit goodput and cap precision against the simulator.
    Bench(BenchArgs),
}

/// What `agentbatch ledger` does besides showing the ledger.
#[derive(Debug, Subcommand)]
pub enum LedgerAction {
    /// Set team TEAM's period cap to USD dollars for every run on this ledger, in
    /// place of what their job files say; tasks waiting for the cap (`on_cap: wait`)
    /// see it within a second.
    SetCap {
        team: String,
        #[arg(value_parser = crate::vocab::values::parse_money)]
        usd: rust_decimal::Decimal,
    },
}

/// What `agentbatch suite` does.
#[derive(Debug, Subcommand)]
pub enum SuiteAction {
    /// Print a suite's tasks as job YAML (what `suites:` gives), or name the file and
    /// field it cannot read.
    Show {
        /// A SWE-bench .jsonl file or task repo, a Harbor task folder (or a folder of
        /// them, or a dataset.toml), or Terminal-Bench task folders.
        path: PathBuf,
        /// The format, when it cannot be told from the files.
        #[arg(long, value_parser = parse_suite_format)]
        format: Option<crate::job::SuiteFormat>,
    },
}

fn parse_suite_format(s: &str) -> Result<crate::job::SuiteFormat, String> {
    match s {
        "swebench" => Ok(crate::job::SuiteFormat::Swebench),
        "harbor" => Ok(crate::job::SuiteFormat::Harbor),
        "terminal-bench" => Ok(crate::job::SuiteFormat::TerminalBench),
        _ => Err("one of swebench, harbor, terminal-bench".into()),
    }
}

impl Command {
    /// Whether the command makes (or describes) workspaces: it takes a mount namespace of
    /// its own before any thread starts, so overlay workspaces vanish with the process.
    pub fn makes_workspaces(&self) -> bool {
        matches!(
            self,
            Command::Run { .. }
                | Command::Worker(_)
                | Command::Validate { .. }
                | Command::Bench(_)
                | Command::Regrade { .. }
        )
    }

    /// Whether the command only prints, and so may end quietly when its reader goes
    /// (`validate | head`).
    pub fn only_prints(&self) -> bool {
        !matches!(
            self,
            Command::Run { .. }
                | Command::Worker(_)
                | Command::Sim(_)
                | Command::Bench(_)
                | Command::Regrade { .. }
        )
    }

    /// Runs the command; its exit code.
    pub async fn run(self) -> ExitCode {
        let code = |c: u8| ExitCode::from(c);
        match self {
            Command::Run { job, args } => super::run::run(job, args).await,
            Command::Worker(args) => super::shared::work(args).await,
            Command::Collect {
                url,
                run_id,
                out,
                ledger,
            } => code(super::shared::collect(
                &url,
                &run_id,
                &out,
                ledger.as_deref(),
            )),
            Command::Validate { job, out } => code(super::validate::print(&job, &out)),
            Command::Schema(args) => code(super::schema::print(&args)),
            Command::Audit { transcript } => code(super::audit::print(&transcript)),
            Command::Report { dir } => code(super::report::report(&dir)),
            Command::Export { format } => code(super::export::export(format)),
            Command::Compare { runs, by, out } => code(super::compare::compare(runs, by, out)),
            Command::Tools {
                job,
                toolset,
                schemas,
            } => super::inspect::tools(&job, toolset.as_deref(), schemas).await,
            Command::McpCheck { target, timeout } => {
                super::inspect::mcp_check(&target, timeout).await
            }
            Command::Ledger {
                action: Some(LedgerAction::SetCap { team, usd }),
                ledger,
                ..
            } => code(super::ledger::set_cap(&team, usd, &ledger)),
            Command::Ledger {
                action: None,
                team,
                ledger,
                json,
            } => code(super::ledger::report(team.as_deref(), &ledger, json)),
            Command::Suite {
                action: SuiteAction::Show { path, format },
            } => code(super::suite::show(&path, format)),
            Command::Regrade {
                run,
                only,
                job,
                shared,
            } => super::suite::regrade(&run, only.as_deref(), job.as_deref(), shared).await,
            Command::Sim(args) => super::sim::command(args).await,
            Command::Bench(args) => super::bench::command(args).await,
        }
    }
}
