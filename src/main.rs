//! The `agentbatch` command line: parses arguments and calls the library.
//! Exit codes: 0 the run finished and its reports are written (task failures are data),
//! 1 the run itself broke, 2 the job file or the arguments are invalid (nothing ran),
//! 130 the run was interrupted (its reports are written, unfinished tasks as cancelled).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use agentbatch::job::{self, JobError, Plan};
use agentbatch::report::ProgressMode;
use agentbatch::run::{self, RunError, RunOptions};
use agentbatch::sim::Sim;
use agentbatch::tools::Registry;

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

#[derive(Subcommand)]
enum Command {
    /// Run a job: every task's agent loop, governed by its limits; reports to DIR/<run-id>/.
    Run {
        /// The job file (YAML).
        job: PathBuf,
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
    },
    /// Check a job file without spending anything and print the expanded plan.
    Validate { job: PathBuf },
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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
            Command::Run {
                job,
                out,
                run_id,
                concurrency,
                only,
                quiet,
            } => run_cmd(job, out, run_id, concurrency, only, quiet).await,
            Command::Validate { job } => validate_cmd(job),
            Command::Sim {
                port,
                host,
                job,
                script,
            } => match sim_cmd(port, &host, job, script).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("agentbatch sim: {e:#}");
                    ExitCode::from(1)
                }
            },
        }
    })
}

fn load(path: &Path, registry: &Registry) -> Result<Plan, ExitCode> {
    job::load(path, registry).map_err(|e: JobError| {
        eprintln!("{e}");
        eprintln!(
            "agentbatch: {} has {} problem(s); nothing ran",
            path.display(),
            e.diagnostics.len()
        );
        ExitCode::from(2)
    })
}

async fn run_cmd(
    job: PathBuf,
    out: PathBuf,
    run_id: Option<String>,
    concurrency: Option<usize>,
    only: Vec<String>,
    quiet: bool,
) -> ExitCode {
    let registry = Arc::new(Registry::builtin());
    let plan = match load(&job, &registry) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut opts = RunOptions::new(out);
    opts.run_id = run_id;
    opts.concurrency = concurrency;
    opts.only = only;
    opts.progress = if quiet {
        ProgressMode::Quiet
    } else {
        ProgressMode::Auto
    };
    opts.registry = registry;
    opts.handle_signals = true;
    match run::run(plan, opts).await {
        Ok(outcome) => {
            let s = &outcome.summary;
            println!("{}", s.table());
            println!("reports: {}", s.dir.join("results.csv").display());
            if !outcome.complete {
                eprintln!("agentbatch: the run was interrupted; unfinished tasks are recorded as cancelled");
                return ExitCode::from(130);
            }
            ExitCode::SUCCESS
        }
        Err(RunError::Invalid(msg)) => {
            eprintln!("agentbatch: {msg}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("agentbatch: the run failed: {e}");
            ExitCode::from(1)
        }
    }
}

fn validate_cmd(job: PathBuf) -> ExitCode {
    let registry = Registry::builtin();
    match load(&job, &registry) {
        Ok(plan) => {
            print!("{}", agentbatch::job::describe(&plan));
            println!("ok: {} is valid", job.display());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

async fn sim_cmd(
    port: u16,
    host: &str,
    job: Option<PathBuf>,
    script: Option<PathBuf>,
) -> anyhow::Result<()> {
    let addr: SocketAddr = format!("{host}:{port}")
        .parse()
        .with_context(|| format!("invalid address {host}:{port}"))?;
    let sim = Sim::start(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let mut registered = 0;
    if let Some(path) = &job {
        let plan = job::load(path, &Registry::builtin()).map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in &plan.tasks {
            if let Some(s) = &t.sim {
                sim.register(&t.id, s.clone());
                registered += 1;
            }
        }
    }
    if let Some(path) = &script {
        let s = job::load_script_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        sim.register("", Arc::new(s));
        registered += 1;
    }
    println!(
        "simulator listening on {} ({registered} script(s)); Ctrl-C stops it",
        sim.base_url()
    );
    if job.is_some() {
        println!(
            "point a job at it with providers: {{ sim: {{ base_url: {} }} }}",
            sim.base_url()
        );
    }
    tokio::signal::ctrl_c()
        .await
        .context("cannot wait for Ctrl-C")?;
    Ok(())
}
