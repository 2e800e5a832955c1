//! The run's batch pools: one per provider, where its batch API is, and batch
//! setting, made when the first task that needs it starts, shared by the rest.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::job::{ProviderKind, TaskSpec};
use crate::model::batch::{BatchApi, Batcher, Settings};
use crate::model::Endpoint;

/// The pools of one run.
#[derive(Default)]
pub struct Batchers {
    pools: Mutex<HashMap<String, Batcher>>,
}

impl Batchers {
    /// Waits for the pools' last batch calls (cancels of batches no task waits for).
    pub async fn close(&self) {
        let pools: Vec<Batcher> = self
            .pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for p in pools {
            p.close(std::time::Duration::from_secs(15)).await;
        }
    }

    /// The pool for `spec`'s requests (None when the task is not in batch mode).
    pub(super) fn for_task(
        &self,
        spec: &TaskSpec,
        endpoint: &Endpoint,
        client: &reqwest::Client,
        (sim_base, run_id): (Option<&str>, &str),
    ) -> Result<Option<Batcher>, String> {
        let Some(b) = spec.batch else {
            return Ok(None);
        };
        let p = &spec.provider;
        let base = batch_base(spec, sim_base, run_id);
        // Tasks of one provider may send different beta headers (context editing);
        // a pool sends the headers of the endpoint it was made with.
        let key = format!(
            "{}|{}|{base}|{b:?}|{:?}",
            p.name, p.protocol, endpoint.anthropic_beta
        );
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = pools.get(&key) {
            return Ok(Some(pool.clone()));
        }
        let api = BatchApi::new(client.clone(), endpoint, &base)?;
        let pool = Batcher::start(
            api,
            Settings {
                window: b.window.0,
                max_requests: b.max_requests as usize,
                max_wait: b.max_wait.0,
                ..Settings::default()
            },
        );
        pools.insert(key, pool.clone());
        Ok(Some(pool))
    }
}

/// The base URL the task's provider's batch API is under: the simulator serves a run's
/// batches under `/r/{run}`, not under a task's path.
pub(crate) fn batch_base(spec: &TaskSpec, sim_base: Option<&str>, run_id: &str) -> String {
    let p = &spec.provider;
    match p.kind {
        ProviderKind::Sim => {
            let root = p.base_url.as_deref().or(sim_base).unwrap_or_default();
            let v1 = p.protocol.facts().sim_root;
            format!("{}/r/{run_id}{v1}", root.trim_end_matches('/'))
        }
        ProviderKind::Api => p.base_url.clone().unwrap_or_default(),
    }
}
