//! The commands besides running a job: inspecting tool sets (`tools`, `mcp-check`),
//! `compare`, `ledger`, `sim`, `schema`, `report`, `validate`, and what a run prints. They
//! sit on the top layer because each uses several layers below (`job` and `tools`,
//! `report` and `page`).

pub mod audit;
pub mod compare;
pub mod field_tables;
pub mod inspect;
pub mod ledger;
pub mod outcome;
pub mod report;
pub mod schema;
pub mod shared;
pub mod sim;
pub mod trace;
pub mod validate;
