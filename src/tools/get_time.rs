//! `get_time`: the current time, in UTC or at a fixed offset. Harmless, so it is the
//! tool of the offline demo and of the first real-API example.

use chrono::{FixedOffset, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::{Tool, ToolContext};
use crate::tools::ToolError;

pub struct GetTime;

impl Tool for GetTime {
    fn name(&self) -> &str {
        "get_time"
    }

    fn description(&self) -> &str {
        "Get the current date and time. Use it whenever the answer depends on the current time."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "description": "\"UTC\" (the default) or a fixed offset such as \"+02:00\" or \"-05:30\""
                }
            },
            "additionalProperties": false
        })
    }

    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let tz = input
                .get("timezone")
                .and_then(Value::as_str)
                .unwrap_or("UTC");
            let now = Utc::now();
            if tz.eq_ignore_ascii_case("utc") || tz == "Z" {
                return Ok(now.to_rfc3339_opts(SecondsFormat::Secs, true));
            }
            let offset = parse_offset(tz).ok_or_else(|| {
                format!("unknown timezone \"{tz}\": use \"UTC\" or an offset such as \"+02:00\"")
            })?;
            Ok(now
                .with_timezone(&offset)
                .to_rfc3339_opts(SecondsFormat::Secs, false))
        })
    }
}

fn parse_offset(s: &str) -> Option<FixedOffset> {
    let s = s.strip_prefix("UTC").unwrap_or(s);
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    if !(0..=14).contains(&h) || !(0..60).contains(&m) {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        assert_eq!(parse_offset("+02:00").unwrap().local_minus_utc(), 7200);
        assert_eq!(parse_offset("UTC-05:30").unwrap().local_minus_utc(), -19800);
        assert_eq!(parse_offset("+3").unwrap().local_minus_utc(), 10800);
        assert!(parse_offset("Europe/Paris").is_none());
        assert!(parse_offset("+25:00").is_none());
    }
}
