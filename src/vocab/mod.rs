//! The shared vocabulary, at the bottom of the layers: what every other module speaks
//! of (stop reasons and outcomes, usage, protocols, money, durations and sizes, limits,
//! periods, prices), the transcript's events and the writer every task logs through.
//! It imports no other module of the crate, so nothing that uses it can form a cycle
//! through it.

pub mod bounds;
pub mod limits;
pub mod log;
pub mod price;
pub mod protocol;
pub mod stop;
pub mod transcript;
pub mod usage;
pub mod values;
