//! `bash`: runs a command line in the task's workspace, inside its sandbox.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::{Reach, Tool, ToolContext};
use crate::tools::ToolError;

pub struct Bash;

impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }
    fn description(&self) -> &str {
        "Run a bash command line in the repository's root folder (stdin closed; stdout and stderr together, long output cut in the middle). Use it to run tests, inspect the repository, or run scripts. A non-zero exit is reported as an error."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"command": {"type": "string", "minLength": 1}},
            "required": ["command"],
            "additionalProperties": false
        })
    }
    fn timeout(&self, ctx: &ToolContext) -> Duration {
        // The sandbox enforces the command's own timeout and kills its group; this only
        // bounds the harness's wait should that ever fail.
        ctx.bash.timeout + Duration::from_secs(30)
    }
    fn needs_workspace(&self) -> bool {
        true
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let command = input
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let sandbox = ctx
                .sandbox
                .as_ref()
                .ok_or("bash needs a workspace, and this task has no repo")?;
            let out = sandbox
                .run(
                    command,
                    ctx.bash,
                    &ctx.cancel,
                    Reach {
                        network: ctx.network,
                        distrust_git: false,
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            let text = format!("[{}]\n{}", out.status(ctx.bash.timeout), out.output);
            if out.success() {
                Ok(text)
            } else {
                Err(ToolError(text))
            }
        })
    }
}
