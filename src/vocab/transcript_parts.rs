//! The values inside the transcript's events: money as text, the first request's
//! parameters, MCP servers, images, how a tool call and the check ended, and the
//! lenient readers every event's fields use (a line of an older or newer agentbatch
//! still reads as far as it can).

use std::fmt;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::vocab::protocol::Protocol;

/// An amount of money as the transcript writes it: a normalized decimal in a string
/// (`"0.05"`, never `0.05`), so no reader ever sees a float.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usd(pub Decimal);

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0.normalize())
    }
}

/// As the transcript writes it (normalized), so a figure shown from the event in memory
/// reads the same as one shown from the file.
impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(&self.0.normalize(), f)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Usd;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a decimal amount in a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Usd, E> {
                s.parse::<Decimal>().map(Usd).map_err(E::custom)
            }
        }
        d.deserialize_str(Text)
    }
}

impl From<Decimal> for Usd {
    fn from(d: Decimal) -> Usd {
        Usd(d)
    }
}

/// A value of the wrong type reads as the default: the line is still read, as far as
/// it can be.
pub(crate) fn lenient<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).unwrap_or_default())
}

/// A key that is present, even as null (serde's `Option` alone reads null as absent).
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A name from a list this version may not know all of (a newer or older agentbatch's
/// protocols, stop reasons, outcomes): an unknown one reads as None, so the line still
/// reads.
pub(crate) fn known<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).ok())
}

/// The first request's parameters (later requests repeat none of them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestParams {
    #[serde(deserialize_with = "lenient")]
    pub url: String,
    /// Read leniently: a name this version does not know is None, not a broken line.
    #[serde(deserialize_with = "known")]
    pub protocol: Option<Protocol>,
    #[serde(deserialize_with = "lenient")]
    pub model: String,
    #[serde(deserialize_with = "lenient")]
    pub system: Option<String>,
    /// The tool declarations as the provider receives them.
    pub tools: Value,
    pub extra: Value,
    /// Anthropic only.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub anthropic_version: Option<String>,
}

/// One MCP server a task connected to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpServerInfo {
    pub name: String,
    pub transport: Value,
    pub protocol_version: String,
}

/// An image a tool returned: only its type and size are logged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageInfo {
    pub media_type: String,
    pub bytes: usize,
}

/// How a tool call ended: cut off, or run (or refused) by the runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolOutcome {
    /// The deadline or a cancellation cut the call off.
    Interrupted { interrupted: String },
    Ran {
        /// `allow`, `deny` or `invalid`.
        #[serde(default, deserialize_with = "lenient")]
        decision: String,
        #[serde(default, deserialize_with = "lenient")]
        rule: String,
        #[serde(default, deserialize_with = "lenient")]
        is_error: bool,
        #[serde(default, deserialize_with = "lenient")]
        content: String,
        #[serde(default, deserialize_with = "lenient")]
        ms: u64,
        /// What an MCP tool returned besides its content.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured_content: Option<Value>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        images: Option<Vec<ImageInfo>>,
    },
}

/// How the check command ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CheckOutcome {
    /// The run was cancelled while it ran.
    Cancelled { cancelled: bool, ms: u64 },
    /// It could not be started.
    Failed { error: String },
    Ran {
        exit_code: Option<i32>,
        timed_out: bool,
        ms: u64,
        passed: bool,
        sandboxed: bool,
        network: bool,
        output: String,
    },
}

/// What a suite's verifier found. Every field reads as its default when missing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifierRecord {
    /// `swebench` or `harbor`.
    #[serde(default, deserialize_with = "lenient")]
    pub kind: String,
    /// The verdict: resolved, or the reward reached the threshold.
    #[serde(default, deserialize_with = "lenient")]
    pub passed: bool,
    /// The verifier could not run (an image, a container, the engine): no verdict, and
    /// the task's outcome is `error`, which a resume runs again.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub error: Option<String>,
    /// SWE-bench: why the test log does not count (the patch did not apply, the
    /// markers are missing, the exit code contradicts the log): not resolved.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub invalid: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub tests_passed: Option<u32>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub tests_failed: Option<u32>,
    /// SWE-bench: every test the log parser found, with its status.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub tests: std::collections::BTreeMap<String, String>,
    /// SWE-bench: the FAIL_TO_PASS and PASS_TO_PASS tests that did not pass.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub fail_to_pass_failed: Vec<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pass_to_pass_failed: Vec<String>,
    /// Harbor: the reward that decides (`reward`, or the only one, or the mean).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub reward: Option<f64>,
    /// Harbor: every reward of reward.json.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub rewards: Option<std::collections::BTreeMap<String, f64>>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub exit_code: Option<i32>,
    #[serde(default, deserialize_with = "lenient")]
    pub timed_out: bool,
    #[serde(default, deserialize_with = "lenient")]
    pub ms: u64,
    /// The end of the test output.
    #[serde(default, deserialize_with = "lenient")]
    pub output: String,
    /// 0 for the run's own verification, N for the Nth `agentbatch regrade`.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "is_zero")]
    pub regrade: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
