//! Rate limits shared by every process on one PostgreSQL database (the workers of a
//! shared run): token buckets in rows, taken all or none in one call (`agentbatch_take`,
//! by the database's clock, so machines' clocks need not agree), corrected when the
//! answer comes (`agentbatch_adjust`), and a pause a 429 puts on a provider for all.

use futures::FutureExt;

use super::pg::{Pg, PgError};

/// One bucket of a take: its key, what to take, its capacity and refill a second.
#[derive(Debug, Clone)]
pub struct Take {
    pub key: String,
    pub amount: f64,
    pub capacity: f64,
    pub per_second: f64,
}

/// The shared buckets.
pub struct SharedRates {
    pg: std::sync::Arc<Pg>,
}

impl SharedRates {
    /// Connects (making or upgrading the schema). Blocking.
    pub fn open(url: &str) -> Result<SharedRates, PgError> {
        Ok(SharedRates {
            pg: Pg::shared(url)?,
        })
    }

    /// Takes every amount or none: 0.0 when taken, else the seconds to wait before
    /// trying again. Blocking.
    pub fn take(&self, takes: Vec<Take>) -> Result<f64, PgError> {
        let keys: Vec<String> = takes.iter().map(|t| t.key.clone()).collect();
        let amounts: Vec<f64> = takes.iter().map(|t| t.amount).collect();
        let caps: Vec<f64> = takes.iter().map(|t| t.capacity).collect();
        let rates: Vec<f64> = takes.iter().map(|t| t.per_second).collect();
        self.pg.run(move |c| {
            async move {
                Ok(c.query_one(
                    "SELECT agentbatch_take($1, $2, $3, $4)",
                    &[&keys, &amounts, &caps, &rates],
                )
                .await?
                .get::<_, f64>(0))
            }
            .boxed()
        })
    }

    /// Gives back (positive) or charges (negative) each delta. Blocking.
    pub fn adjust(&self, keys: Vec<String>, deltas: Vec<f64>) -> Result<(), PgError> {
        self.pg.run(move |c| {
            async move {
                c.execute("SELECT agentbatch_adjust($1, $2)", &[&keys, &deltas])
                    .await
                    .map(|_| ())
            }
            .boxed()
        })
    }

    /// Pauses `key` (a gate's pause row) for `seconds` from now, never shortening a
    /// pause already set. Blocking.
    pub fn pause(&self, key: String, seconds: f64) -> Result<(), PgError> {
        self.pg.run(move |c| {
            async move {
                c.execute(
                    "INSERT INTO rate_buckets (key, capacity, per_second, tokens, at, paused_until)
                     VALUES ($1, 1, 1, 1, clock_timestamp(),
                             clock_timestamp() + make_interval(secs => $2))
                     ON CONFLICT (key) DO UPDATE SET paused_until = GREATEST(
                         coalesce(rate_buckets.paused_until, EXCLUDED.paused_until),
                         EXCLUDED.paused_until)",
                    &[&key, &seconds],
                )
                .await
                .map(|_| ())
            }
            .boxed()
        })
    }
}
