//! What the flags and the standard `OTEL_*` variables say about where traces go and how:
//! read once at start, so a setting that would lose every span (credentials in the URL,
//! a gRPC protocol) is refused before anything runs, and one that is malformed is
//! warned about instead of being dropped in silence.

use std::time::Duration;

use super::TraceError;

/// How long a content attribute may be, in characters, unless
/// `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` / `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` say
/// otherwise: one 5 MB answer must not make an export request the collector refuses,
/// which would lose the other tasks' spans of the same batch.
pub const DEFAULT_VALUE_LIMIT: usize = 16 * 1024;

/// An export request's limit, connecting included, unless `OTEL_EXPORTER_OTLP_TIMEOUT`
/// says otherwise (the spec's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where traces go and what they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The OTLP/HTTP traces URL (`.../v1/traces`), its query kept: it may hold a token,
    /// so it is only ever sent, never shown (see [`Settings::shown_endpoint`]).
    pub endpoint: String,
    /// Record message contents, tool arguments and results (`--otlp-content`): off by
    /// default, as the conventions ask, since they may be sensitive and large.
    pub content: bool,
    /// Each export request's limit (`OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`).
    pub timeout: Duration,
    /// The collector's headers, the signal's variable winning per key.
    pub headers: Headers,
    /// The longest content attribute, in characters.
    pub value_limit: usize,
    /// What was ignored or could not be honoured, for stderr at start (never a value).
    pub warnings: Vec<String>,
}

/// Header names and values; Debug shows the names only, since values are credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k))
            .finish()
    }
}

impl Settings {
    /// The settings from `--otlp URL` and the standard variables (read through `var`),
    /// None when traces are off: neither the flag nor an endpoint variable is set, or
    /// `OTEL_SDK_DISABLED=true`. The flag's URL, like `OTEL_EXPORTER_OTLP_ENDPOINT`, is the
    /// collector's base (`/v1/traces` is added to its path unless it is there, its query
    /// kept); `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as written.
    pub fn resolve(
        flag: Option<&str>,
        content: bool,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, TraceError> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = match (flag, set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(base), _) => traces_url(base)?,
            (None, Some(full)) => checked(&full)?.to_string(),
            (None, None) => match set("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => traces_url(&base)?,
                None => return Ok(None),
            },
        };
        let mut warnings = Vec::new();
        let first =
            |names: [&'static str; 2]| names.into_iter().find_map(|n| set(n).map(|v| (n, v)));
        if let Some((name, protocol)) = first([
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ]) {
            if protocol != "http/protobuf" {
                let what = format!("{name}={protocol}: agentbatch exports OTLP over HTTP/protobuf only (no gRPC, no JSON)");
                if flag.is_none() {
                    return Err(TraceError::Protocol(format!("{what}; point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318, not gRPC's 4317) and unset the variable or set it to http/protobuf")));
                }
                warnings.push(format!(
                    "{what}; the variable is ignored and --otlp's URL gets HTTP/protobuf"
                ));
            }
        }
        if let Some((name, c)) = first([
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ]) {
            if !c.eq_ignore_ascii_case("none") {
                warnings.push(format!(
                    "{name}={c}: agentbatch does not compress exports; spans are sent uncompressed"
                ));
            }
        }
        let timeout = match first([
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ]) {
            Some((name, v)) => match v.parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    warnings.push(format!("{name}={v:?} is not a positive number of milliseconds: the default of {} s is used", DEFAULT_TIMEOUT.as_secs()));
                    DEFAULT_TIMEOUT
                }
            },
            None => DEFAULT_TIMEOUT,
        };
        let value_limit = match first([
            "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
            "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        ]) {
            Some((name, v)) => match v.parse::<usize>() {
                Ok(n) => n,
                Err(_) => {
                    warnings.push(format!("{name}={v:?} is not a number of characters: content attributes are cut at {DEFAULT_VALUE_LIMIT}"));
                    DEFAULT_VALUE_LIMIT
                }
            },
            None => DEFAULT_VALUE_LIMIT,
        };
        let mut headers = Headers::default();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(list) = set(name) {
                for (k, v) in parse_headers(name, &list, &mut warnings) {
                    headers.0.retain(|(old, _)| !old.eq_ignore_ascii_case(&k));
                    headers.0.push((k, v));
                }
            }
        }
        Ok(Some(Settings {
            endpoint,
            content,
            timeout,
            headers,
            value_limit,
            warnings,
        }))
    }

    /// The endpoint as it may be printed and recorded: scheme, host, port and path, never
    /// a query (it may hold a token).
    pub fn shown_endpoint(&self) -> String {
        shown(&self.endpoint)
    }
}

/// A URL without what may be secret in it: its credentials, query and fragment.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let host = u.host_str().unwrap_or_default();
            match u.port_or_known_default() {
                Some(port) => format!("{}://{host}:{port}{}", u.scheme(), u.path()),
                None => format!("{}://{host}{}", u.scheme(), u.path()),
            }
        }
        Err(_) => "(not a URL)".to_string(),
    }
}

/// An http(s) URL without credentials in it: they would be printed and recorded, and the
/// exporter would not send them.
fn checked(raw: &str) -> Result<reqwest::Url, TraceError> {
    let url = reqwest::Url::parse(raw.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| {
            // Echoed only when nothing in it can be a credential.
            let echo = match raw.contains('@') || raw.contains('?') {
                true => "the URL".to_string(),
                false => format!("{raw:?}"),
            };
            TraceError::Endpoint(echo)
        })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(TraceError::Credentials(shown(url.as_str())));
    }
    Ok(url)
}

/// A collector's base URL with the traces path added to its path, its query kept.
fn traces_url(base: &str) -> Result<String, TraceError> {
    let mut url = checked(base)?;
    let path = url.path().trim_end_matches('/').to_string();
    if !path.ends_with("/v1/traces") {
        url.set_path(&format!("{path}/v1/traces"));
    } else {
        url.set_path(&path);
    }
    Ok(url.to_string())
}

/// `key=value,key2=value2` as the spec writes headers (values percent-decoded), each
/// malformed entry named in a warning by its position and key, never its value.
fn parse_headers(name: &str, list: &str, warnings: &mut Vec<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, entry) in list.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        // Without `=` the entry may be a bare credential: it is named by position only.
        let Some((key, value)) = entry.split_once('=') else {
            warnings.push(format!("{name}: entry {} has no `=`: not sent", i + 1));
            continue;
        };
        let key = key.trim();
        let raw = value.trim();
        let value = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map(|v| v.into_owned())
            .unwrap_or_else(|_| raw.to_string());
        let valid = !key.is_empty()
            && !value.is_empty()
            && reqwest::header::HeaderName::from_bytes(key.as_bytes()).is_ok()
            && reqwest::header::HeaderValue::from_str(&value).is_ok();
        if valid {
            out.push((key.to_string(), value));
        } else {
            let key_shown = match reqwest::header::HeaderName::from_bytes(key.as_bytes()) {
                Ok(k) => format!("{:?}", k.as_str()),
                Err(_) => "with no valid name".to_string(),
            };
            warnings.push(format!("{name}: entry {} (key {key_shown}) is not key=value with a valid header name and a non-empty value: not sent", i + 1));
        }
    }
    out
}
