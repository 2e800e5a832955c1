//! The shared vocabulary, at the bottom of the layers: what every other module speaks
//! of (stop reasons and outcomes, usage, protocols, money, durations and sizes, limits,
//! periods, prices), the transcript's events and the writer every task logs through.
//! It imports no other module of the crate, so nothing that uses it can form a cycle
//! through it.

pub(crate) mod bounds;
pub mod cache;
pub mod context;
pub mod json_schema;
pub mod limits;
pub(crate) mod log;
pub mod price;
pub(crate) mod protocol;
pub mod sink;
pub mod stop;
pub(crate) mod transcript;
mod transcript_parts;
pub(crate) mod usage;
pub mod values;
