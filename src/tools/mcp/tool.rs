//! An MCP server's tool as the harness runs it: declared to the model under its alias
//! (`mcp__<server>__<tool>`), called under its real name, and its `CallToolResult` turned
//! into a tool result: text as text, images passed on (for providers that take them),
//! audio and resources described in words, `structuredContent` kept (and sent when no
//! text came), `isError` as is_error. A lost connection is fatal for the task.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::client::{CallOutcome, McpServer, ServerTool};
use crate::model::Image;
use crate::tools::ToolError;
use crate::tools::{Tool, ToolContext, ToolOutput};

/// Image types every provider that takes images in tool results accepts.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// One tool of one server.
pub struct McpTool {
    pub alias: String,
    pub server: Arc<McpServer>,
    pub tool: ServerTool,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.alias
    }

    fn description(&self) -> &str {
        &self.tool.description
    }

    fn input_schema(&self) -> Value {
        self.tool.input_schema.clone()
    }

    /// The server's own timeout fires first (it cancels the call); this is a backstop.
    fn timeout(&self, _ctx: &ToolContext) -> Duration {
        self.server.spec.call_timeout + Duration::from_secs(5)
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let out = self.run(input, ctx).await;
            if out.is_error {
                Err(ToolError(out.text))
            } else {
                Ok(out.text)
            }
        })
    }

    fn run<'a>(&'a self, input: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let args = match input {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            let server = &self.server.spec.name;
            match self.server.call(&self.tool.name, args).await {
                CallOutcome::Answered(result) => map_result(&result),
                CallOutcome::TimedOut(d) => ToolOutput::error(format!(
                    "Error: MCP server \"{server}\" did not answer within {}; the call was cancelled",
                    humantime::format_duration(d)
                )),
                CallOutcome::Refused(why) => {
                    ToolOutput::error(format!("Error: MCP server \"{server}\" refused the call: {why}"))
                }
                CallOutcome::Lost(why) => {
                    let msg = format!("MCP server \"{server}\" is gone: {why}");
                    ToolOutput {
                        fatal: Some(msg.clone()),
                        ..ToolOutput::error(format!("Error: {msg}"))
                    }
                }
            }
        })
    }
}

/// Turns a `CallToolResult` (as JSON) into a tool result.
pub fn map_result(result: &Value) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let mut has_text = false;
    for block in result["content"].as_array().into_iter().flatten() {
        let mime = block["mimeType"]
            .as_str()
            .unwrap_or("application/octet-stream");
        let size = |data: &Value| data.as_str().map_or(0, |d| d.len() * 3 / 4);
        match block["type"].as_str().unwrap_or("") {
            "text" => {
                has_text = true;
                parts.push(block["text"].as_str().unwrap_or_default().to_string());
            }
            "image" if IMAGE_TYPES.contains(&mime) => {
                let data = block["data"].as_str().unwrap_or_default().to_string();
                parts.push(format!(
                    "[image {mime}, {} bytes, attached]",
                    size(&block["data"])
                ));
                images.push(Image {
                    media_type: mime.to_string(),
                    data,
                });
            }
            "image" => parts.push(format!(
                "[image {mime}, {} bytes, not passed on: providers take png, jpeg, gif and webp]",
                size(&block["data"])
            )),
            "audio" => parts.push(format!(
                "[audio {mime}, {} bytes, not passed on: providers take no audio in tool results]",
                size(&block["data"])
            )),
            "resource_link" => parts.push(format!(
                "[resource link: {} <{}>{}{}]",
                block["name"].as_str().unwrap_or(""),
                block["uri"].as_str().unwrap_or(""),
                block["mimeType"]
                    .as_str()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default(),
                block["description"]
                    .as_str()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default(),
            )),
            "resource" => {
                let r = &block["resource"];
                let uri = r["uri"].as_str().unwrap_or("");
                match (r["text"].as_str(), r.get("blob")) {
                    (Some(text), _) => {
                        has_text = true;
                        parts.push(format!("[resource {uri}]\n{text}"));
                    }
                    (None, Some(blob)) => parts.push(format!(
                        "[resource {uri} ({}), {} bytes of binary, not shown]",
                        r["mimeType"].as_str().unwrap_or("application/octet-stream"),
                        size(blob)
                    )),
                    (None, None) => parts.push(format!("[resource {uri}]")),
                }
            }
            other => parts.push(format!("[{other} content, not shown]")),
        }
    }
    let structured = result
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .cloned();
    if !has_text {
        if let Some(s) = &structured {
            parts.push(s.to_string());
        }
    }
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let mut text = parts.join("\n");
    if is_error && !text.starts_with("Error") {
        text = format!("Error: {text}");
    }
    ToolOutput {
        text,
        is_error,
        images,
        structured,
        fatal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_content_type_becomes_something_the_model_can_read() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/bmp"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "test://1", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "test://2", "blob": "AAAA", "mimeType": "application/gzip"}}
        ]});
        let out = map_result(&r);
        assert!(!out.is_error);
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.images[0].media_type, "image/png");
        for needle in [
            "hello",
            "[image image/png",
            "image/bmp",
            "[audio audio/wav",
            "file:///a.txt",
            "inside",
            "test://2 (application/gzip)",
        ] {
            assert!(out.text.contains(needle), "{needle}: {}", out.text);
        }
        let structured = map_result(&json!({"content": [], "structuredContent": {"temp": 21}}));
        assert_eq!(structured.text, "{\"temp\":21}");
        assert_eq!(structured.structured, Some(json!({"temp": 21})));
        let failed = map_result(
            &json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}),
        );
        assert!(failed.is_error);
        assert_eq!(failed.text, "Error: no such file");
        assert_eq!(map_result(&json!({})).text, "");
    }
}
