//! The three wire protocols, their default API roots, key variables and endpoint URLs.

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

impl Protocol {
    pub const ALL: [Protocol; 3] = [
        Protocol::Anthropic,
        Protocol::OpenaiResponses,
        Protocol::OpenaiChat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenaiResponses => "openai-responses",
            Protocol::OpenaiChat => "openai-chat",
        }
    }

    /// The API root used when a provider sets no base_url.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Protocol::Anthropic => "https://api.anthropic.com",
            Protocol::OpenaiResponses | Protocol::OpenaiChat => "https://api.openai.com/v1",
        }
    }

    /// The variable the key is read from when a provider names none.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Protocol::Anthropic => "ANTHROPIC_API_KEY",
            Protocol::OpenaiResponses | Protocol::OpenaiChat => "OPENAI_API_KEY",
        }
    }

    /// The endpoint's URL under an API root, following each vendor's convention: an
    /// Anthropic base is the host (`/v1/messages` is added), an OpenAI base ends in
    /// `/v1` (`/responses` or `/chat/completions` is added).
    pub fn url(self, base_url: &str) -> Result<reqwest::Url, String> {
        let base = base_url.trim_end_matches('/');
        let path = match self {
            Protocol::Anthropic => "/v1/messages",
            Protocol::OpenaiResponses => "/responses",
            Protocol::OpenaiChat => "/chat/completions",
        };
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
