//! Governance: what a request may cost, whether another one may be sent, and when to
//! retry. Money is exact decimal dollars throughout.

pub mod backoff;
pub mod budget;
pub mod ledger;
pub mod pricing;
pub mod rate;
pub mod store;
