//! Every command of the `agentbatch` binary: the command line's definition and dispatch
//! (`cli.rs`), one file per command or group of commands with its arguments and its
//! handler (`run`, `worker` and `collect`, `validate`, `compare`, `audit`, `report`, `export`,
//! `tools` and `mcp-check`, `ledger`, `sim`, `schema`, `bench`), and what a run prints.
//! They sit on the top layer because each uses several layers below (`job` and `tools`,
//! `report`, `page` and `export`, `run`, `bench`).

pub mod audit;
pub mod bench;
pub mod cli;
pub mod compare;
pub mod export;
pub mod field_tables;
pub mod inspect;
pub mod ledger;
pub mod outcome;
pub mod report;
pub mod run;
pub mod schema;
pub mod shared;
pub mod sim;
pub mod suite;
pub mod trace;
pub mod validate;
