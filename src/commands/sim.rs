//! `agentbatch sim`: the simulator as a server of its own, for trying a job offline or
//! for load tests that keep the simulator's CPU apart from the runner's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use crate::job;
use crate::sim::{BatchSettings, Sim};
use crate::tools::Registry;
use crate::vocab::limits::RateLimits;

/// What `agentbatch sim` was asked for.
pub struct SimOptions {
    pub port: u16,
    pub host: String,
    /// Register every task's script of this job under its id.
    pub job: Option<PathBuf>,
    /// Register this script under the empty key (requests to the bare endpoints).
    pub script: Option<PathBuf>,
    pub limits: RateLimits,
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
