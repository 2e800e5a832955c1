//! Governance: what a request may cost, whether another one may be sent, and when to
//! retry. Money is exact decimal dollars throughout.

mod adaptive;
pub(crate) mod budget;
mod cap_wait;
pub mod clock;
pub(crate) mod ledger;
mod limiters;
pub mod pg;
pub mod pg_rate;
pub mod pg_store;
pub mod pg_tls;
mod pools;
pub(crate) mod rate;
mod rate_shared;
mod slices;
pub mod store;

use std::path::Path;
use std::sync::Arc;

/// Opens the ledger `location` names: a PostgreSQL database for a `postgres://` URL,
/// else a SQLite file. Blocking. Here, above both stores, so that neither store file
/// names the other.
pub fn open_store(location: &Path) -> Result<Arc<dyn store::CapStore>, store::StoreError> {
    match location.to_str() {
        Some(url) if crate::vocab::values::is_postgres_url(url) => {
            Ok(Arc::new(pg_store::PgStore::open(url)?))
        }
        _ => Ok(Arc::new(store::SqliteStore::open(location)?)),
    }
}
