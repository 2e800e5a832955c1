//! `agentbatch bench`: its arguments, and which benchmarks run for each choice.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::bench::{self, Which};

/// The arguments of `agentbatch bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Which benchmark.
    #[arg(value_enum, default_value = "all")]
    which: Which,
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
    /// The image of `bench environments`' containers.
    #[arg(long, default_value = bench::DEFAULT_IMAGE, value_name = "IMAGE")]
    image: String,
    #[command(flatten)]
    guard: bench::GuardArgs,
}

/// Runs the benchmarks `args` choose and prints their reports; the exit code.
pub async fn command(args: BenchArgs) -> ExitCode {
    super::outcome::exit_code("bench", run(&args).await)
}

async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let (which, fraction, out, guard) = (args.which, args.fraction, &args.out, &args.guard);
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
    if matches!(which, Which::Rate | Which::All) {
        for pacing in bench::Pacing::ALL {
            let r = bench::rate_goodput(args.scale, pacing, out).await?;
            println!("{r}");
        }
    }
    if matches!(which, Which::Cache | Which::All) {
        let r = bench::cache_savings(out).await?;
        println!("{r}");
    }
    if matches!(which, Which::Batch) {
        println!("{}", bench::batch_mode(out).await?);
    }
    if matches!(which, Which::Caps | Which::All) {
        let r = bench::cap_precision(out).await?;
        println!("{r}");
    }
    if matches!(which, Which::Throughput | Which::All) {
        println!(
            "{}",
            bench::run_load(&bench::Load::w1(fraction), out).await?
        );
        println!(
            "{}",
            bench::run_load(&bench::Load::w1_unstated(fraction), out).await?
        );
    }
    if matches!(which, Which::Scale | Which::All) {
        println!(
            "{}",
            bench::run_load(&bench::Load::w2(fraction), out).await?
        );
    }
    if matches!(which, Which::Coordination) {
        let url = args.queue.as_deref().context(
            "bench coordination needs a PostgreSQL database: --queue postgres://USER@HOST/DB (or AGENTBATCH_QUEUE_URL)",
        )?;
        let reports = bench::coordination(out, url).await?;
        for r in &reports {
            println!("{r}");
        }
        if let Some(line) = bench::capped_against_uncapped(&reports) {
            println!("{line}");
        }
    }
    if matches!(which, Which::Workspaces) {
        let files = ((20_000.0 * fraction).round() as usize).max(100);
        let tasks = ((200.0 * fraction).round() as usize).max(2);
        for r in bench::workspaces(out, files, tasks).await? {
            println!("{r}");
        }
    }
    if matches!(which, Which::Environments) {
        let scaled = |n: usize| ((n as f64 * fraction).round() as usize).max(2);
        let (tasks, in_flight) = (scaled(bench::ENV_TASKS), scaled(bench::ENV_IN_FLIGHT));
        println!(
            "{}",
            bench::environments(out, &args.image, tasks, in_flight).await?
        );
    }
    if matches!(which, Which::History | Which::All) {
        history(fraction, out).await?;
    }
    Ok(())
}

/// W3 at three lengths, how the history grows, and each context strategy at the longest.
async fn history(fraction: f64, out: &Path) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for turns in [50, 100, 200] {
        let r = bench::run_load(&bench::Load::w3(turns, fraction), out).await?;
        println!("{r}");
        runs.push(r);
    }
    println!("{}", bench::history_growth(&runs));
    use crate::vocab::context::ContextStrategy as S;
    for strategy in [S::ClearToolResults, S::Summarize, S::Native, S::Off] {
        let r = bench::run_load(&bench::Load::w3_window(200, fraction, strategy), out).await?;
        println!("{r}");
    }
    Ok(())
}
