//! Task suites in the formats people already have, graded by their official rules.

pub mod swebench;
