//! The three wire protocols, their default API roots, key variables and endpoint URLs.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`POST {base}/responses`), stateless.
    OpenaiResponses,
    /// OpenAI Chat Completions (`POST {base}/chat/completions`), also what vLLM,
    /// llama.cpp, Ollama and LiteLLM serve.
    OpenaiChat,
}

/// What a `base_url` that [`Protocol::url`] takes starts with, for the JSON Schema: the
/// scheme http or https, in any case, where the URL standard lets spaces and control
/// characters come first and tabs and line breaks anywhere. The rest of the URL is left
/// to the parser.
pub const BASE_URL_PATTERN: &str =
    r"^[\x00-\x20]*[Hh][\t\n\r]*[Tt][\t\n\r]*[Tt][\t\n\r]*[Pp][\t\n\r]*([Ss][\t\n\r]*)?:";

/// What is known of a protocol without any of its behaviour: where its API usually is,
/// what its vendor bills and limits, and which of a job file's options it takes. Below
/// `model`, code reads these fields instead of matching on the protocol, so a new
/// protocol is one more `const` here (and its wire in `model::protocol`); what a
/// protocol *does* (bodies, answers, streams, compaction) is `model::protocol::Wire`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Facts {
    /// The name job files and transcripts write.
    pub name: &'static str,
    /// The API root used when a provider sets no base_url.
    pub default_base_url: &'static str,
    /// The variable the key is read from when a provider names none.
    pub default_key_env: &'static str,
    /// The endpoint's path under an API root, following the vendor's convention: an
    /// Anthropic base is the host (`/v1/messages` is added), an OpenAI base ends in `/v1`.
    pub path: &'static str,
    /// What a transcript's request URL ends with for this protocol (transcripts written
    /// before the protocol was logged are recognised by it).
    pub logged_path_suffix: &'static str,
    /// The simulator's API root under a task's or a run's path (`/v1` for OpenAI), as
    /// the vendor's base URL would be.
    pub sim_root: &'static str,
    /// `gen_ai.provider.name` in traces: the well-known value of the vendor's API.
    pub telemetry_name: &'static str,
    /// The runner places cache breakpoints (`cache_control`) itself; otherwise the
    /// provider caches on its own and the runner sends a `prompt_cache_key`.
    pub marks_cache: bool,
    /// The provider has 1-hour cache entries (written at a dearer rate).
    pub one_hour_cache: bool,
    /// Cache writes, as multiples of the input rate, for 5-minute and 1-hour entries,
    /// when a price leaves them out.
    pub cache_write_rates: (Decimal, Decimal),
    /// The input-tokens-per-minute limit leaves out cache reads (for the models
    /// whose limit does not count them, as `cache.rs` says).
    pub itpm_skips_cache_reads: bool,
    /// The per-minute limits the vendor's answers state in headers, as job limits
    /// name them (what `validate` says will be learned; `model::http` reads them).
    pub stated_limits: &'static [&'static str],
    /// The most requests one batch of the provider's batch API takes.
    pub batch_max_requests: u32,
    /// The most bytes of request bodies the runner puts in one batch: nine tenths of
    /// the provider's limit (Anthropic's 256 MB, OpenAI's 200 MB file), leaving room
    /// for the envelope.
    pub batch_max_bytes: usize,
    /// The provider's API refuses a non-streaming request with a max_tokens expected
    /// to run over 10 minutes.
    pub long_requests_stream: bool,
    /// The smallest output limit the API takes, when it has one above 1.
    pub min_output_tokens: Option<u32>,
    /// The provider fields that apply to this protocol.
    pub takes_anthropic_version: bool,
    pub takes_max_tokens_field: bool,
    pub takes_stream_options: bool,
    pub takes_parallel_tool_calls: bool,
    /// The provider manages the context itself when asked (`context: native`).
    pub native_context: bool,
    /// The API refuses a conversation with a tool-call id twice (Chat Completions'
    /// compatible servers number calls per turn and accept their own ids again).
    pub unique_call_ids: bool,
    /// The sampling fields that differ: `top_k`, the highest temperature (checked up
    /// to 2 where it is written), and `thinking:` (OpenAI has `reasoning:` instead).
    pub takes_top_k: bool,
    pub max_temperature: f64,
    pub takes_thinking: bool,
    /// How a job's `reasoning:` is sent.
    pub reasoning: Reasoning,
    /// What validate says of the request's dialect beyond the common fields.
    pub dialect: Dialect,
}

/// How a protocol takes a job's `reasoning:` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    /// Not at all: the protocol has `thinking:` instead.
    Refused,
    /// The whole object, as `reasoning`.
    Object,
    /// Only the effort, as `reasoning_effort` (no summaries).
    EffortOnly,
}

/// What `validate` shows of a provider's dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The `anthropic-version` header it sends.
    Version,
    /// The field the output limit goes under.
    OutputLimitField,
    /// Stateless requests (`store: false`).
    Stateless,
}

const ANTHROPIC: Facts = Facts {
    name: "anthropic",
    default_base_url: "https://api.anthropic.com",
    default_key_env: "ANTHROPIC_API_KEY",
    path: "/v1/messages",
    logged_path_suffix: "/messages",
    sim_root: "",
    telemetry_name: "anthropic",
    marks_cache: true,
    one_hour_cache: true,
    // 1.25x and 2x the input rate.
    cache_write_rates: (Decimal::from_parts(125, 0, 0, false, 2), Decimal::TWO),
    itpm_skips_cache_reads: true,
    stated_limits: &["rpm", "itpm", "otpm"],
    batch_max_requests: 100_000,
    batch_max_bytes: 230 * 1024 * 1024,
    long_requests_stream: true,
    min_output_tokens: None,
    takes_anthropic_version: true,
    takes_max_tokens_field: false,
    takes_stream_options: false,
    takes_parallel_tool_calls: false,
    native_context: true,
    unique_call_ids: true,
    takes_top_k: true,
    max_temperature: 1.0,
    takes_thinking: true,
    reasoning: Reasoning::Refused,
    dialect: Dialect::Version,
};

/// What both OpenAI protocols share.
const OPENAI: Facts = Facts {
    name: "",
    default_base_url: "https://api.openai.com/v1",
    default_key_env: "OPENAI_API_KEY",
    path: "",
    logged_path_suffix: "",
    sim_root: "/v1",
    telemetry_name: "openai",
    marks_cache: false,
    one_hour_cache: false,
    // Plain input unless a model publishes a write price.
    cache_write_rates: (Decimal::ONE, Decimal::ONE),
    itpm_skips_cache_reads: false,
    // x-ratelimit-limit-tokens counts input and output together.
    stated_limits: &["rpm", "tpm"],
    batch_max_requests: 50_000,
    batch_max_bytes: 180 * 1024 * 1024,
    long_requests_stream: false,
    min_output_tokens: None,
    takes_anthropic_version: false,
    takes_max_tokens_field: false,
    takes_stream_options: false,
    takes_parallel_tool_calls: true,
    native_context: true,
    unique_call_ids: true,
    takes_top_k: false,
    max_temperature: 2.0,
    takes_thinking: false,
    reasoning: Reasoning::Object,
    dialect: Dialect::Stateless,
};

const OPENAI_RESPONSES: Facts = Facts {
    name: "openai-responses",
    path: "/responses",
    logged_path_suffix: "/responses",
    // The API refuses max_output_tokens below 16.
    min_output_tokens: Some(16),
    ..OPENAI
};

const OPENAI_CHAT: Facts = Facts {
    name: "openai-chat",
    path: "/chat/completions",
    logged_path_suffix: "/chat/completions",
    takes_max_tokens_field: true,
    takes_stream_options: true,
    native_context: false,
    unique_call_ids: false,
    reasoning: Reasoning::EffortOnly,
    dialect: Dialect::OutputLimitField,
    ..OPENAI
};

impl Protocol {
    pub const ALL: [Protocol; 3] = [
        Protocol::Anthropic,
        Protocol::OpenaiResponses,
        Protocol::OpenaiChat,
    ];

    /// The protocol assumed where no provider says (a price looked up without one).
    pub const DEFAULT: Protocol = Protocol::Anthropic;

    /// What is known of the protocol: the one place a protocol's facts are chosen.
    pub const fn facts(self) -> &'static Facts {
        match self {
            Protocol::Anthropic => &ANTHROPIC,
            Protocol::OpenaiResponses => &OPENAI_RESPONSES,
            Protocol::OpenaiChat => &OPENAI_CHAT,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.facts().name
    }

    /// The API root used when a provider sets no base_url.
    pub fn default_base_url(self) -> &'static str {
        self.facts().default_base_url
    }

    /// The variable the key is read from when a provider names none.
    pub fn default_key_env(self) -> &'static str {
        self.facts().default_key_env
    }

    /// The endpoint's URL under an API root (see [`Facts::path`]).
    pub fn url(self, base_url: &str) -> Result<reqwest::Url, String> {
        let base = base_url.trim_end_matches('/');
        let path = self.facts().path;
        let url = reqwest::Url::parse(&format!("{base}{path}"))
            .map_err(|e| format!("invalid base_url \"{base_url}\": {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "invalid base_url \"{base_url}\": use an http:// or https:// URL"
            ));
        }
        Ok(url)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Protocol::ALL` is written by hand; the schema is derived from the enum, so a
    /// variant missing from the list shows here.
    #[test]
    fn all_lists_every_variant_of_the_enum() {
        let schema = serde_json::to_value(schemars::schema_for!(Protocol)).unwrap();
        let mut named = Vec::new();
        collect_names(&schema, &mut named);
        named.sort();
        let mut listed: Vec<String> = Protocol::ALL.iter().map(|p| p.as_str().into()).collect();
        listed.sort();
        assert_eq!(named, listed);
    }

    /// Every string constant of a schema (`enum` values and `const`s).
    fn collect_names(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("enum", serde_json::Value::Array(values)) => {
                            out.extend(values.iter().filter_map(|v| v.as_str()).map(str::to_string))
                        }
                        ("const", serde_json::Value::String(c)) => out.push(c.clone()),
                        _ => collect_names(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| collect_names(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_protocol_has_its_own_name_path_and_facts() {
        for p in Protocol::ALL {
            let f = p.facts();
            assert!(!f.name.is_empty() && !f.path.is_empty(), "{p:?}");
            assert!(f.path.ends_with(f.logged_path_suffix) && !f.logged_path_suffix.is_empty());
            let json = serde_json::to_value(p).unwrap();
            assert_eq!(json, f.name, "the serde name is the facts' name");
            for q in Protocol::ALL.into_iter().filter(|q| *q != p) {
                assert!(!f.path.ends_with(q.facts().logged_path_suffix), "{p} {q}");
            }
        }
    }

    #[test]
    fn the_base_url_pattern_matches_every_url_the_check_takes() {
        let re = regex::Regex::new(BASE_URL_PATTERN).expect("the pattern compiles");
        for url in [
            "https://api.anthropic.com",
            "http://127.0.0.1:8000/v1",
            "HTTPS://API.OPENAI.COM/v1",
            " http://h",
            "\u{1}http://h",
            "ht\ttp://h",
            "http\n://h",
            "http:h",
            "http:/h",
            "https:\\\\h",
            "ftp://h",
            "localhost:8000",
            "h",
            "",
            "://h",
            "http//h",
            "file:///x",
            "http://exa mple.com",
        ] {
            let takes = Protocol::ALL.iter().any(|p| p.url(url).is_ok());
            if takes {
                assert!(re.is_match(url), "{url:?} is taken but fails the pattern");
            }
        }
        for refused in ["ftp://h", "localhost:8000", "h", "", "://h", "http//h"] {
            assert!(!re.is_match(refused), "{refused:?} matches");
        }
    }
}
