//! `agentbatch sim`: the simulator as a server of its own, for trying a job offline or
//! for load tests that keep the simulator's CPU apart from the runner's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::job;
use crate::sim::{BatchSettings, Sim};
use crate::tools::Registry;
use crate::vocab::limits::RateLimits;
use crate::vocab::values::parse_duration;

/// The arguments of `agentbatch sim`.
#[derive(clap::Args)]
pub struct SimArgs {
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
    /// Do not state those limits in rate-limit headers (a 429 still says
    /// retry-after), as vLLM, llama.cpp or a proxy would not.
    #[arg(long)]
    no_limit_headers: bool,
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
}

/// Serves the simulator as `args` ask; the exit code.
pub async fn command(args: SimArgs) -> ExitCode {
    let limits = RateLimits {
        rpm: args.rpm,
        itpm: args.itpm,
        otpm: args.otpm,
        burst: args.burst,
    };
    let batches = BatchSettings {
        delay: args.batch_delay,
        spread: args.batch_spread,
        expire_after: args.batch_expire_after,
        ..BatchSettings::default()
    };
    let served = serve(SimOptions {
        port: args.port,
        host: args.host,
        job: args.job,
        script: args.script,
        limits,
        limit_headers: !args.no_limit_headers,
        batches,
        keep_bodies: !args.no_request_bodies,
    })
    .await;
    super::outcome::exit_code("sim", served)
}

/// What `agentbatch sim` was asked for.
pub struct SimOptions {
    pub port: u16,
    pub host: String,
    /// Register every task's script of this job under its id.
    pub job: Option<PathBuf>,
    /// Register this script under the empty key (requests to the bare endpoints).
    pub script: Option<PathBuf>,
    pub limits: RateLimits,
    /// Whether answers state the limits in headers.
    pub limit_headers: bool,
    pub batches: BatchSettings,
    pub keep_bodies: bool,
}

/// Serves until Ctrl-C. The first line printed names the URL (the load benchmark reads it).
pub async fn serve(o: SimOptions) -> anyhow::Result<()> {
    let (port, host) = (o.port, o.host.as_str());
    let addr: SocketAddr = format!("{host}:{port}")
        .parse()
        .with_context(|| format!("invalid address {host}:{port}"))?;
    let sim = Sim::start(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    sim.set_limits(Some(&o.limits));
    sim.send_limit_headers(o.limit_headers);
    sim.set_batch_settings(o.batches);
    sim.keep_request_bodies(o.keep_bodies);
    let mut registered = 0;
    if let Some(path) = &o.job {
        let plan = job::load(path, &Registry::builtin()).map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in &plan.tasks {
            if let Some(s) = &t.sim {
                sim.register(&t.id, s.clone());
                let tag = crate::model::batch::tag_for(&t.id);
                if t.batch.is_some() && tag != t.id {
                    sim.register(&tag, s.clone());
                }
                registered += 1;
            }
        }
    }
    if let Some(path) = &o.script {
        let s = job::load_script_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        sim.register("", Arc::new(s));
        registered += 1;
    }
    // Written, not println!'d: a reader that goes away (a pipe closed after the first
    // line) must not stop the server.
    use std::io::Write as _;
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "simulator listening on {} ({registered} script(s)); Ctrl-C stops it",
        sim.base_url()
    );
    if o.job.is_some() {
        let _ = writeln!(
            out,
            "point a job at it with providers: {{ sim: {{ base_url: {} }} }}",
            sim.base_url()
        );
    }
    let _ = out.flush();
    tokio::signal::ctrl_c()
        .await
        .context("cannot wait for Ctrl-C")?;
    Ok(())
}
