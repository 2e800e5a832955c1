//! OpenAI Responses events (PROTOCOLS.md B9): the final event's `response` object
//! (`response.completed`, `.incomplete` or `.failed`) is the body a non-streaming call
//! returns, so the parser treats an incomplete or failed one as it always does. A
//! server whose final response leaves `output` empty gets the `output_item.done` items
//! instead. An `error` event is an error inside the stream.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::protocol::events::{error_of, json, Broken, Step};

/// A response under construction: the finished output items, by output index.
#[derive(Default)]
pub struct Response {
    items: BTreeMap<u64, Value>,
}

impl Response {
    pub(in crate::model) fn feed(&mut self, name: &str, data: &str) -> Result<Step, Broken> {
        let mut v = json(data)?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_string();
        let kind = kind.as_str();
        match kind {
            "response.completed" | "response.incomplete" | "response.failed" => {
                let mut r = v
                    .get_mut("response")
                    .filter(|r| r.is_object())
                    .map(Value::take)
                    .ok_or_else(|| format!("{kind} has no `response` object"))?;
                let empty = r
                    .get("output")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty);
                if empty && !self.items.is_empty() {
                    let items = std::mem::take(&mut self.items).into_values().collect();
                    r["output"] = Value::Array(items);
                }
                Ok(Step::Done(r))
            }
            "error" => Err(match v.get("error").filter(|e| e.is_object()) {
                Some(e) => error_of(e),
                None => error_of(&v),
            }),
            "response.output_item.done" => {
                if let (Some(i), Some(item)) =
                    (v.get("output_index").and_then(Value::as_u64), v.get("item"))
                {
                    self.items.insert(i, item.clone());
                }
                Ok(Step::More)
            }
            k if k.ends_with(".delta") => Ok(Step::Content),
            _ => Ok(Step::More),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn feed_all(r: &mut Response, events: &[Value]) -> Result<Step, Broken> {
        let mut last = Step::More;
        for e in events {
            let name = e["type"].as_str().unwrap_or_default().to_string();
            last = r.feed(&name, &e.to_string())?;
        }
        Ok(last)
    }

    fn final_response(status: &str, output: Value) -> Value {
        json!({"id": "resp_1", "object": "response", "status": status, "output": output,
               "usage": {"input_tokens": 10, "output_tokens": 4, "total_tokens": 14}})
    }

    #[test]
    fn the_completed_response_is_the_body() {
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}", "status": "completed"});
        let text = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": "h\u{e9}", "annotations": []}]});
        let done = final_response("completed", json!([text, call]));
        let events = [
            json!({"type": "response.created", "sequence_number": 0, "response": final_response("in_progress", json!([]))}),
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "message"}}),
            json!({"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "h"}),
            json!({"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "\u{e9}"}),
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 4, "output_index": 1, "delta": "{\"path\""}),
            json!({"type": "response.completed", "sequence_number": 5, "response": done}),
        ];
        let mut r = Response::default();
        assert_eq!(r.feed("", &events[2].to_string()).unwrap(), Step::Content);
        let Step::Done(body) = feed_all(&mut Response::default(), &events).unwrap() else {
            panic!()
        };
        assert_eq!(body.to_string(), done.to_string());
        let parsed = crate::model::protocol::openai::responses::items::parse(&body).unwrap();
        assert_eq!((parsed.calls.len(), parsed.text.as_str()), (1, "h\u{e9}"));
    }

    #[test]
    fn an_empty_final_output_takes_the_finished_items() {
        let item = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]});
        let events = [
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": "response.completed", "response": final_response("completed", json!([]))}),
        ];
        let Step::Done(body) = feed_all(&mut Response::default(), &events).unwrap() else {
            panic!()
        };
        assert_eq!(body["output"], json!([item]));
    }

    #[test]
    fn incomplete_and_failed_responses_are_read_as_without_streaming() {
        let mut inc = final_response("incomplete", json!([]));
        inc["incomplete_details"] = json!({"reason": "max_output_tokens"});
        let Step::Done(body) = feed_all(
            &mut Response::default(),
            &[json!({"type": "response.incomplete", "response": inc})],
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            crate::model::protocol::openai::responses::items::parse(&body)
                .unwrap()
                .stop,
            crate::model::ModelStop::MaxTokens
        );
        let mut failed = final_response("failed", json!([]));
        failed["error"] = json!({"code": "server_error", "message": "boom"});
        let Step::Done(body) = feed_all(
            &mut Response::default(),
            &[json!({"type": "response.failed", "response": failed})],
        )
        .unwrap() else {
            panic!()
        };
        assert!(matches!(
            crate::model::protocol::openai::responses::items::parse(&body),
            Err(crate::model::WireError::Failed {
                retryable: true,
                ..
            })
        ));
        let e = feed_all(
            &mut Response::default(),
            &[json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null})],
        )
        .unwrap_err();
        assert_eq!(
            e,
            Broken::Error {
                error_type: "rate_limit_exceeded".into(),
                message: "slow down".into()
            }
        );
    }
}
