//! The commands that look at a job's tools rather than run it (`agentbatch tools`,
//! `agentbatch mcp-check`). They sit above `job` and `tools`, which they both use.

pub mod inspect;
pub mod ledger;
pub mod outcome;
pub mod shared;
pub mod sim;
pub mod trace;
