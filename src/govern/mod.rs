//! Governance: what a request may cost, whether another one may be sent, and when to
//! retry. Money is exact decimal dollars throughout.

pub(crate) mod budget;
pub(crate) mod ledger;
pub mod pg;
pub mod pg_rate;
pub mod pg_store;
pub mod pg_tls;
pub(crate) mod rate;
pub mod store;
