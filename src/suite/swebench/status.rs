//! What a parser records: each test's status, in the order of the Python dict it builds.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A test's status as a parser recorded it. The parsers copy the first word of a line
/// (`PASSED`, but also `ERROR:` or `PASSEDfoo`), so a status outside the five is kept as
/// [`TestStatus::Other`]: grading treats it as neither passing nor failing, as SWE-bench's
/// string comparisons do.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TestStatus {
    Passed,
    Failed,
    Skipped,
    Error,
    Xfail,
    /// Any other word, verbatim.
    Other(String),
}

impl TestStatus {
    /// The word as SWE-bench writes it (`PASSED`...).
    pub fn as_str(&self) -> &str {
        match self {
            TestStatus::Passed => "PASSED",
            TestStatus::Failed => "FAILED",
            TestStatus::Skipped => "SKIPPED",
            TestStatus::Error => "ERROR",
            TestStatus::Xfail => "XFAIL",
            TestStatus::Other(word) => word,
        }
    }

    /// The status a parser's word stands for; exact, case-sensitive, as Python compares.
    pub fn from_word(word: &str) -> TestStatus {
        match word {
            "PASSED" => TestStatus::Passed,
            "FAILED" => TestStatus::Failed,
            "SKIPPED" => TestStatus::Skipped,
            "ERROR" => TestStatus::Error,
            "XFAIL" => TestStatus::Xfail,
            other => TestStatus::Other(other.to_string()),
        }
    }

    /// PASSED and XFAIL grade identically.
    pub(super) fn passing(&self) -> bool {
        matches!(self, TestStatus::Passed | TestStatus::Xfail)
    }
}

impl fmt::Display for TestStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for TestStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TestStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(TestStatus::from_word(&String::deserialize(deserializer)?))
    }
}

/// A Python dict of test name to status: insertion order kept, a later insert of the same
/// name replaces the status in place.
#[derive(Debug, Clone, Default)]
pub(super) struct StatusMap {
    pub(super) entries: Vec<(String, TestStatus)>,
    index: HashMap<String, usize>,
}

impl StatusMap {
    pub(super) fn insert(&mut self, name: String, status: TestStatus) {
        match self.index.get(&name) {
            Some(&at) => self.entries[at].1 = status,
            None => {
                self.index.insert(name.clone(), self.entries.len());
                self.entries.push((name, status));
            }
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<&TestStatus> {
        self.index.get(name).map(|&at| &self.entries[at].1)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
