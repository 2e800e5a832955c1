//! OpenAI's Files API, as far as batches need it: `POST /v1/files` (multipart, `purpose`
//! and `file`), `GET /v1/files/{id}` and `GET /v1/files/{id}/content`. A batch's input
//! is uploaded here; its output and error files are written here.

use std::sync::Arc;

use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::model::Protocol;
use crate::sim::batch::{now_ms, openai_error, params, File, Params};
use crate::sim::lock;
use crate::sim::{check_key, SimState};

/// The purposes `POST /v1/files` accepts.
const PURPOSES: &[&str] = &[
    "assistants",
    "batch",
    "fine-tune",
    "vision",
    "user_data",
    "evals",
];

/// The largest input file of a batch (200 MB).
pub(super) const MAX_BATCH_FILE: usize = 200 * 1000 * 1000;

/// Files with purpose `batch` expire after 30 days unless told otherwise.
const BATCH_FILE_LIFE: i64 = 30 * 24 * 3600;

impl File {
    pub(in crate::sim) fn object(&self) -> Value {
        let expires = matches!(self.purpose.as_str(), "batch" | "batch_output")
            .then_some(self.created_at + BATCH_FILE_LIFE);
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.content.len(),
            "created_at": self.created_at,
            "expires_at": expires,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": null,
        })
    }
}

/// Keeps a file and returns it.
pub(super) fn store(
    state: &SimState,
    run: &str,
    filename: String,
    purpose: &str,
    content: Vec<u8>,
) -> Arc<File> {
    let file = Arc::new(File {
        id: state.batches.new_id("file-sim"),
        run: run.to_string(),
        filename,
        purpose: purpose.to_string(),
        created_at: chrono::Utc::now().timestamp(),
        content,
    });
    lock(&state.batches.files).insert(file.id.clone(), file.clone());
    file
}

/// The file `id` of `run`.
pub(super) fn get(state: &SimState, run: &str, id: &str) -> Option<Arc<File>> {
    lock(&state.batches.files)
        .get(id)
        .filter(|f| f.run == run)
        .cloned()
}

fn missing(state: &SimState, name: &str) -> Response {
    openai_error(
        state,
        StatusCode::BAD_REQUEST,
        "missing_required_parameter",
        Some(name),
        &format!("Missing required parameter: '{name}'."),
    )
}

fn bad(state: &SimState, message: &str) -> Response {
    openai_error(state, StatusCode::BAD_REQUEST, "", None, message)
}

/// Why a batch input file is refused at upload: it must be JSONL, and the first line is
/// what is checked here (the other lines are checked when a batch uses the file).
fn check_batch_file(content: &[u8]) -> Result<(), String> {
    if content.len() > MAX_BATCH_FILE {
        return Err(format!(
            "File is too large: {} bytes. Files for the Batch API can be up to 200 MB.",
            content.len()
        ));
    }
    let first = content
        .split(|b| *b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace));
    match first.map(serde_json::from_slice::<Value>) {
        Some(Ok(Value::Object(_))) => Ok(()),
        _ => Err("Invalid file format for Batch API. Must be .jsonl".into()),
    }
}

pub(super) async fn upload(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let (run, _) = params(p);
    if let Err(r) = check_key(Protocol::OpenaiResponses, &headers) {
        return openai_error(
            &state,
            r.status,
            r.code.as_deref().unwrap_or(""),
            None,
            &r.message,
        );
    }
    let mut form = match Multipart::from_request(req, &()).await {
        Ok(m) => m,
        Err(e) => {
            return bad(
                &state,
                &format!(
                    "The request must be multipart/form-data with `purpose` and `file` fields: {e}"
                ),
            )
        }
    };
    let mut purpose = None;
    let mut file = None;
    loop {
        let field = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                return bad(
                    &state,
                    &format!("The multipart body could not be read: {e}"),
                )
            }
        };
        let name = field.name().unwrap_or("").to_string();
        let filename = field.file_name().unwrap_or("upload.jsonl").to_string();
        let bytes = match field.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return bad(
                    &state,
                    &format!("The multipart body could not be read: {e}"),
                )
            }
        };
        match name.as_str() {
            "purpose" => purpose = Some(String::from_utf8_lossy(&bytes).into_owned()),
            "file" => file = Some((filename, bytes.to_vec())),
            _ => {}
        }
    }
    let Some(purpose) = purpose else {
        return missing(&state, "purpose");
    };
    let Some((filename, content)) = file else {
        return missing(&state, "file");
    };
    if !PURPOSES.contains(&purpose.as_str()) {
        let listed: Vec<String> = PURPOSES.iter().map(|p| format!("'{p}'")).collect();
        return openai_error(
            &state,
            StatusCode::BAD_REQUEST,
            "invalid_value",
            Some("purpose"),
            &format!(
                "Invalid value: '{purpose}'. Supported values are: {}.",
                listed.join(", ")
            ),
        );
    }
    if purpose == "batch" {
        if let Err(message) = check_batch_file(&content) {
            return bad(&state, &message);
        }
    }
    let file = store(&state, &run, filename, &purpose, content);
    Json(file.object()).into_response()
}

fn no_such_file(state: &SimState, id: &str) -> Response {
    openai_error(
        state,
        StatusCode::NOT_FOUND,
        "",
        Some("id"),
        &format!("No such File object: {id}"),
    )
}

/// The file a GET names, after the credentials are checked.
fn find(state: &SimState, p: Params, headers: &HeaderMap) -> Result<Arc<File>, Box<Response>> {
    let (run, id) = params(p);
    if let Err(r) = check_key(Protocol::OpenaiResponses, headers) {
        let code = r.code.as_deref().unwrap_or("");
        return Err(Box::new(openai_error(
            state, r.status, code, None, &r.message,
        )));
    }
    get(state, &run, &id).ok_or_else(|| Box::new(no_such_file(state, &id)))
}

pub(super) async fn retrieve(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
) -> Response {
    match find(&state, p, &headers) {
        Ok(f) => Json(f.object()).into_response(),
        Err(resp) => *resp,
    }
}

pub(super) async fn content(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
) -> Response {
    let file = match find(&state, p, &headers) {
        Ok(f) => f,
        Err(resp) => return *resp,
    };
    if let Some(batch) = state.batches.batch_of_file(&file.id) {
        lock(&batch.progress).calls.results_ms.push(now_ms(&state));
    }
    let mut resp = file.content.clone().into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_file_must_start_with_a_json_line() {
        assert!(check_batch_file(b"{\"custom_id\": \"a\"}\n{broken").is_ok());
        assert!(check_batch_file(b"\n\n{\"custom_id\": \"a\"}\n").is_ok());
        assert!(check_batch_file(b"").is_err());
        assert!(check_batch_file(b"not json\n").is_err());
        assert!(check_batch_file(b"[1, 2]\n").is_err());
    }
}
