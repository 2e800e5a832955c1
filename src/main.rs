//! The `agentbatch` command line: parses arguments and calls the library.
//! Exit codes: 0 the run finished and its reports are written (task failures are data),
//! 1 the run itself broke (a file of the run folder could not be read or written, the
//! ledger or the simulator failed, a task hit a bug): the run folder may hold part of
//! the run, and `--resume` continues it; 2 the job file, the arguments or the run folder
//! given are invalid, found before anything was written (nothing ran, nothing changed);
//! 130 the run was interrupted (its reports are written, unfinished tasks as cancelled).
//! `RunError::exit_code` decides between 1 and 2.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use agentbatch::bench;
use agentbatch::job::{self, JobError, Plan};
use agentbatch::report::ProgressMode;
use agentbatch::run::{self, RunOptions};
use agentbatch::sim::BatchSettings;
use agentbatch::text::clip_quotes;
use agentbatch::tools::Registry;
use agentbatch::vocab::limits::RateLimits;

#[derive(Parser)]
#[command(
    name = "agentbatch",
    version,
    about = "Run many LLM agent loops in batch under hard budgets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Folder for reports.
    #[arg(long, default_value = "reports", value_name = "DIR")]
    out: PathBuf,
    /// Name of this run's report folder (default: <job name>-<UTC time>).
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    /// Tasks in flight at once (overrides the job's concurrency).
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Only run tasks whose id matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    only: Vec<String>,
    /// No progress output; the summary is still printed.
    #[arg(long)]
    quiet: bool,
    /// The persistent ledger of team period caps: a SQLite file or a postgres:// URL
    /// (default: the job's `ledger:`, else DIR/ledger.sqlite).
    #[arg(long, value_name = "PATH|URL", env = "AGENTBATCH_LEDGER_URL")]
    ledger: Option<PathBuf>,
    /// Continue an earlier run (its folder, DIR/<run-id>): run only what results.csv
    /// does not hold yet, and again what ended on an infrastructure failure.
    #[arg(long, value_name = "RUN_DIR")]
    resume: Option<PathBuf>,
    /// With --resume: keep rows that ended in provider_error, rate_limited,
    /// ledger_error, tool_setup_error, cancelled or internal_error instead of running
    /// those tasks again.
    #[arg(long, requires = "resume")]
    no_retry_errors: bool,
    /// With --resume: go on even though the job file changed since the run started.
    #[arg(long, requires = "resume")]
    force: bool,
    /// After the first Ctrl-C or SIGTERM, how long running tasks may finish before they
    /// are cancelled ("90s", "5m").
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Keep the pristine checkouts of git repositories in this folder across runs, one
    /// per commit and ref, instead of making them per run.
    #[arg(long, value_name = "DIR", env = "AGENTBATCH_PRISTINE_CACHE")]
    pristine_cache: Option<PathBuf>,
    /// Queue the run in this PostgreSQL database for workers on any number of machines
    /// (`agentbatch worker`) instead of running it here.
    #[arg(long, value_name = "URL", env = "AGENTBATCH_QUEUE_URL")]
    queue: Option<String>,
    #[command(flatten)]
    trace: agentbatch::commands::trace::TraceArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run a job: every task's agent loop, governed by its limits; reports to DIR/<run-id>/.
    Run {
        /// The job file (YAML).
        job: PathBuf,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Run tasks of a queued run (`run --queue`) until none is left; many workers may
    /// share one run. Reports of this worker's share go to DIR/workers/<worker>/<run-id>.
    Worker {
        /// The queue's PostgreSQL database.
        #[arg(value_name = "URL", env = "AGENTBATCH_QUEUE_URL")]
        url: String,
        #[arg(long, value_name = "ID")]
        run_id: String,
        /// The job file (default: the path `run --queue` was given); it must be the same.
        #[arg(long, value_name = "JOB")]
        job: Option<PathBuf>,
        /// Tasks in flight at once (default: the job's concurrency).
        #[arg(long, value_name = "N")]
        concurrency: Option<usize>,
        #[arg(long, default_value = "reports", value_name = "DIR")]
        out: PathBuf,
        /// This worker's name in the queue (default: host-pid).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// How long a claimed task stays this worker's without a heartbeat: a killed
        /// worker's tasks run again elsewhere after it.
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
        lease: Duration,
        #[arg(long)]
        quiet: bool,
        /// The team ledger (default: the queue's database).
        #[arg(long, value_name = "URL", env = "AGENTBATCH_LEDGER_URL")]
        ledger: Option<PathBuf>,
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
        grace: Duration,
        #[command(flatten)]
        trace: agentbatch::commands::trace::TraceArgs,
    },
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
    /// Show what each team spent per period, from the persistent ledger.
    Ledger {
        /// Only this team.
        #[arg(long)]
        team: Option<String>,
        /// A SQLite file or a postgres:// URL.
        #[arg(
            long,
            default_value = "reports/ledger.sqlite",
            value_name = "PATH|URL",
            env = "AGENTBATCH_LEDGER_URL"
        )]
        ledger: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run the simulated provider as a standalone server.
    Sim {
        #[arg(long, default_value_t = 8787)]
        port: u16,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Register the scripts of this job's sim tasks, each under /t/<task id>.
        #[arg(long, value_name = "JOB.yaml")]
        job: Option<PathBuf>,
        /// Play this script for POST /v1/messages.
        #[arg(long, value_name = "SCRIPT.yaml")]
        script: Option<PathBuf>,
        /// Refuse more than N requests per minute (429 with retry-after).
        #[arg(long, value_name = "N")]
        rpm: Option<u32>,
        /// Refuse more than N input tokens per minute.
        #[arg(long, value_name = "N")]
        itpm: Option<u32>,
        /// Refuse more than N output tokens (max_tokens) per minute.
        #[arg(long, value_name = "N")]
        otpm: Option<u32>,
        /// Burst allowance of those limits.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        burst: Duration,
        /// Keep only each request's metadata in GET /_sim/requests, not its body (for
        /// long benchmark runs, which would otherwise hold every body sent).
        #[arg(long)]
        no_request_bodies: bool,
        /// Batch APIs: time from a batch's creation to its first item's result.
        #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
        batch_delay: Duration,
        /// Batch APIs: time between one item's result and the next (a batch seen part done).
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        batch_spread: Duration,
        /// Batch APIs: time from creation after which unprocessed items expire.
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        batch_expire_after: Duration,
    },
    /// Print the JSON Schema of job files (default) or simulator scripts, for editors;
    /// --markdown prints the fields as tables instead.
    Schema(agentbatch::commands::schema::SchemaArgs),
    /// Measure rate-limit goodput and cap precision against the simulator.
    Bench {
        /// Which benchmark.
        #[arg(value_enum, default_value = "all")]
        which: bench::Which,
        /// Speed-up factor: limits and timings are multiplied by it, so the rate
        /// benchmark's 600 rpm becomes 600 x SCALE rpm.
        #[arg(long, default_value_t = 10)]
        scale: u32,
        /// Run this fraction of the load workloads' tasks (1 = the full W1, W2, W3).
        #[arg(long, default_value_t = 1.0, value_name = "F")]
        fraction: f64,
        /// Folder for the benchmark runs' reports.
        #[arg(long, default_value = "reports", value_name = "DIR")]
        out: PathBuf,
        /// The PostgreSQL database of the coordination benchmark.
        #[arg(long, value_name = "URL", env = "AGENTBATCH_QUEUE_URL")]
        queue: Option<String>,
        #[command(flatten)]
        guard: bench::GuardArgs,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    agentbatch::vocab::values::parse_duration(s)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any thread starts: overlay workspaces are mounted only in a mount namespace
    // of the process's own, so they vanish with it, even after kill -9. Only the
    // commands that make (or describe) workspaces take one.
    if matches!(
        cli.command,
        Command::Run { .. }
            | Command::Worker { .. }
            | Command::Validate { .. }
            | Command::Bench { .. }
    ) {
        agentbatch::tools::layer::private_mounts();
    }
    // A command that only prints ends quietly when its reader goes (`validate | head`).
    if !matches!(
        cli.command,
        Command::Run { .. } | Command::Worker { .. } | Command::Sim { .. } | Command::Bench { .. }
    ) {
        agentbatch::resources::end_quietly_when_stdout_closes();
    }
    // Thousands of loops in flight hold thousands of connections and transcripts.
    agentbatch::resources::raise_open_files_limit();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentbatch: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async {
        match cli.command {
            Command::Run { job, args } => run_cmd(job, args).await,
            Command::Worker {
                url,
                run_id,
                job,
                concurrency,
                out,
                name,
                lease,
                quiet,
                ledger,
                grace,
                trace,
            } => {
                let w = agentbatch::run::shared::WorkerOptions {
                    url,
                    run_id,
                    job,
                    out,
                    worker: name,
                    lease,
                };
                let registry = Arc::new(Registry::builtin());
                match agentbatch::commands::shared::worker(&w, &registry, &trace) {
                    Ok((plan, mut opts)) => {
                        opts.concurrency = concurrency;
                        opts.progress = if quiet {
                            ProgressMode::Quiet
                        } else {
                            ProgressMode::Auto
                        };
                        opts.registry = registry;
                        opts.handle_signals = true;
                        opts.ledger = ledger;
                        opts.grace = grace;
                        ExitCode::from(agentbatch::commands::outcome::report(
                            agentbatch::run::shared::work(plan, opts).await,
                        ))
                    }
                    Err(code) => ExitCode::from(code),
                }
            }
            Command::Collect {
                url,
                run_id,
                out,
                ledger,
            } => ExitCode::from(agentbatch::commands::shared::collect(
                &url,
                &run_id,
                &out,
                ledger.as_deref(),
            )),
            Command::Validate { job, out } => {
                ExitCode::from(agentbatch::commands::validate::print(&job, &out))
            }
            Command::Schema(args) => ExitCode::from(agentbatch::commands::schema::print(&args)),
            Command::Audit { transcript } => {
                ExitCode::from(agentbatch::commands::audit::print(&transcript))
            }
            Command::Report { dir } => ExitCode::from(agentbatch::commands::report::report(&dir)),
            Command::Compare { runs, by, out } => {
                ExitCode::from(agentbatch::commands::compare::compare(runs, by, out))
            }
            Command::Tools {
                job,
                toolset,
                schemas,
            } => tools_cmd(&job, toolset.as_deref(), schemas).await,
            Command::McpCheck { target, timeout } => {
                match agentbatch::commands::inspect::check_server(&target, timeout).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("agentbatch mcp-check: {e}");
                        ExitCode::from(1)
                    }
                }
            }
            Command::Ledger { team, ledger, json } => ExitCode::from(
                agentbatch::commands::ledger::report(team.as_deref(), &ledger, json),
            ),
            Command::Sim {
                port,
                host,
                job,
                script,
                rpm,
                itpm,
                otpm,
                burst,
                no_request_bodies,
                batch_delay,
                batch_spread,
                batch_expire_after,
            } => {
                let limits = RateLimits {
                    rpm,
                    itpm,
                    otpm,
                    burst,
                };
                let batches = BatchSettings {
                    delay: batch_delay,
                    spread: batch_spread,
                    expire_after: batch_expire_after,
                    ..BatchSettings::default()
                };
                report_error(
                    "sim",
                    agentbatch::commands::sim::serve(agentbatch::commands::sim::SimOptions {
                        port,
                        host,
                        job,
                        script,
                        limits,
                        batches,
                        keep_bodies: !no_request_bodies,
                    })
                    .await,
                )
            }
            Command::Bench {
                which,
                scale,
                fraction,
                out,
                queue,
                guard,
            } => report_error(
                "bench",
                bench_cmd(which, scale, fraction, &out, queue.as_deref(), &guard).await,
            ),
        }
    })
}

fn report_error(cmd: &str, r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentbatch {cmd}: {}", clip_quotes(&format!("{e:#}")));
            ExitCode::from(1)
        }
    }
}

/// Loads a job file, for a run whose reports go to `out` where there is one.
fn load(path: &Path, registry: &Registry, out: Option<&Path>) -> Result<Plan, ExitCode> {
    match out {
        Some(out) => job::load_for_run(path, registry, out),
        None => job::load(path, registry),
    }
    .map_err(|e: JobError| {
        eprintln!("{e}");
        eprintln!(
            "agentbatch: {} has {} problem(s); nothing ran",
            path.display(),
            e.diagnostics.len()
        );
        ExitCode::from(2)
    })
}

async fn run_cmd(job: PathBuf, args: RunArgs) -> ExitCode {
    let registry = Arc::new(Registry::builtin());
    let loaded = if args.queue.is_some() {
        job::load_for_queue(&job, &registry).map_err(|e| {
            eprintln!("{e}");
            eprintln!(
                "agentbatch: {} has {} problem(s); nothing was queued",
                job.display(),
                e.diagnostics.len()
            );
            ExitCode::from(2)
        })
    } else {
        load(
            &job,
            &registry,
            Some(args.resume.as_deref().unwrap_or(&args.out)),
        )
    };
    let loaded = loaded.and_then(|p| Ok((p, args.trace.settings().map_err(ExitCode::from)?)));
    let (plan, trace) = match loaded {
        Ok(p) => p,
        Err(code) => return code,
    };
    if let Some(url) = &args.queue {
        return ExitCode::from(agentbatch::commands::shared::enqueue(
            &plan,
            &job,
            url,
            args.run_id.as_ref(),
            &args.only,
        ));
    }
    let mut opts = RunOptions::new(args.out);
    opts.run_id = args.run_id;
    opts.concurrency = args.concurrency;
    opts.only = args.only;
    opts.progress = if args.quiet {
        ProgressMode::Quiet
    } else {
        ProgressMode::Auto
    };
    opts.registry = registry;
    opts.handle_signals = true;
    opts.ledger = args.ledger;
    opts.grace = args.grace;
    opts.pristine_cache = args.pristine_cache;
    opts.trace = trace;
    opts.resume = args.resume.map(|dir| run::ResumeOptions {
        dir,
        retry_errors: !args.no_retry_errors,
        force: args.force,
    });
    ExitCode::from(agentbatch::commands::outcome::report(
        run::run(plan, opts).await,
    ))
}

/// Lists every tool set's tools (the ones the job's tasks use, or the one named), with
/// MCP servers started for real; a `{workspace}` is an empty temporary folder.
async fn tools_cmd(job: &Path, only: Option<&str>, schemas: bool) -> ExitCode {
    let registry = Registry::builtin();
    let plan = match load(job, &registry, None) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut sets: Vec<&job::ToolsetSpec> = Vec::new();
    for t in &plan.tasks {
        if !sets.iter().any(|s| std::ptr::eq(*s, &*t.toolset)) {
            sets.push(&t.toolset);
        }
    }
    if let Some(name) = only {
        sets.retain(|s| s.name.as_deref() == Some(name));
        if sets.is_empty() {
            eprintln!(
                "agentbatch tools: no task of {} uses a tool set named {name}",
                job.display()
            );
            return ExitCode::from(2);
        }
    }
    let scratch = match tempfile_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("agentbatch tools: cannot make a temporary folder: {e}");
            return ExitCode::from(1);
        }
    };
    let mut failed = false;
    for set in sets {
        let name = set.name.as_deref().unwrap_or("(the tasks' tools list)");
        println!("tool set {name}:");
        match agentbatch::commands::inspect::list_toolset(set, &registry, Some(&scratch)).await {
            Ok(tools) => {
                for t in tools {
                    let first_line = t.description.lines().next().unwrap_or_default();
                    println!("  {}  [{}]  {first_line}", t.name, t.source);
                    if schemas {
                        println!("      schema: {}", t.schema);
                    }
                }
            }
            Err(e) => {
                failed = true;
                println!("  error: {e}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A fresh empty folder under the system's temp folder.
fn tempfile_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "agentbatch-tools-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn bench_cmd(
    which: bench::Which,
    scale: u32,
    fraction: f64,
    out: &Path,
    queue: Option<&str>,
    guard: &bench::GuardArgs,
) -> anyhow::Result<()> {
    use bench::Which;
    if !(fraction > 0.0 && fraction <= 1.0) {
        anyhow::bail!("--fraction must be more than 0 and at most 1");
    }
    if guard.given() && which != Which::Instructions {
        anyhow::bail!("--baseline and --write-baseline go with `bench instructions`");
    }
    if which == Which::Instructions {
        guard.preflight()?;
        let r = bench::instructions(out).await?;
        println!("{r}");
        if guard.given() {
            println!("{}", bench::guard(&r, guard).await?);
        }
    }
    if matches!(which, bench::Which::Rate | bench::Which::All) {
        let r = bench::rate_goodput(scale, out).await?;
        println!("{r}");
    }
    if matches!(which, bench::Which::Cache | bench::Which::All) {
        let r = bench::cache_savings(out).await?;
        println!("{r}");
    }
    if matches!(which, Which::Batch) {
        println!("{}", bench::batch_mode(out).await?);
    }
    if matches!(which, bench::Which::Caps | bench::Which::All) {
        let r = bench::cap_precision(out).await?;
        println!("{r}");
    }
    if matches!(which, Which::Throughput | Which::All) {
        println!(
            "{}",
            bench::run_load(&bench::Load::w1(fraction), out).await?
        );
    }
    if matches!(which, Which::Scale | Which::All) {
        println!(
            "{}",
            bench::run_load(&bench::Load::w2(fraction), out).await?
        );
    }
    if matches!(which, Which::Coordination) {
        let url = queue.context(
            "bench coordination needs a PostgreSQL database: --queue postgres://USER@HOST/DB (or AGENTBATCH_QUEUE_URL)",
        )?;
        for r in bench::coordination(out, url).await? {
            println!("{r}");
        }
    }
    if matches!(which, Which::Workspaces) {
        let files = ((20_000.0 * fraction).round() as usize).max(100);
        let tasks = ((200.0 * fraction).round() as usize).max(2);
        for r in bench::workspaces(out, files, tasks).await? {
            println!("{r}");
        }
    }
    if matches!(which, Which::History | Which::All) {
        let mut runs = Vec::new();
        for turns in [50, 100, 200] {
            let r = bench::run_load(&bench::Load::w3(turns, fraction), out).await?;
            println!("{r}");
            runs.push(r);
        }
        println!("{}", bench::history_growth(&runs));
        use agentbatch::vocab::context::ContextStrategy as S;
        for strategy in [S::ClearToolResults, S::Summarize, S::Native, S::Off] {
            let r = bench::run_load(&bench::Load::w3_window(200, fraction, strategy), out).await?;
            println!("{r}");
        }
    }
    Ok(())
}
