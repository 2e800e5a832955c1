//! agentbatch: run many LLM agent loops in batch under hard budgets.
//!
//! Data flows one way: a job file is parsed and expanded into a [`job::Plan`], the
//! [`run`] scheduler runs one [`agent`] loop per task against a provider adapter
//! ([`model`]), governed by [`govern`], with [`tools`] executed locally, and every event
//! goes to the single [`report`] writer. [`sim`] is the built-in simulated provider;
//! [`audit`] reads a transcript back and checks its tool-call protocol turn by turn;
//! [`page`] writes a run folder's report.html; [`export`] writes it in other tools'
//! formats (SWE-bench predictions, ATIF trajectories); [`suite`] grades benchmark
//! suites' logs by their official rules.

pub(crate) mod agent;
pub mod audit;
pub mod bench;
pub mod bucket;
pub mod commands;
pub mod compare;
pub mod export;
pub mod govern;
pub mod job;
pub mod model;
pub mod page;
pub mod report;
pub mod resources;
pub mod run;
pub mod sim;
pub mod stats;
pub mod suite;
pub mod text;
pub mod tools;
pub mod trace;
pub mod vocab;

/// The version recorded in run.json and sent as the user agent.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit it was built from (build.rs says how it is found), or `unknown`.
pub const COMMIT: &str = env!("AGENTBATCH_COMMIT");

/// What `agentbatch --version` says: the version and the commit.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("AGENTBATCH_COMMIT"),
    ")"
);
