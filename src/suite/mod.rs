//! Suites in the formats people already have: their grading, without I/O.

pub mod swebench;
