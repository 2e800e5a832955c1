//! Governance: what a request may cost, whether another one may be sent, and when to
//! retry. Money is exact decimal dollars throughout.

pub mod budget;
pub mod ledger;
pub mod rate;
pub mod store;
