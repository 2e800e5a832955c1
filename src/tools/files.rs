//! The file tools: `read_file`, `write_file`, `edit_file`, confined to the workspace.

use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::paths::{relative, Root};
use super::{Tool, ToolContext};
use crate::tools::ToolError;

/// Largest file read_file opens; larger ones are refused with a hint.
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Most text one read_file answer carries.
const MAX_READ_BYTES: usize = 100 * 1024;

/// Runs blocking file work off the async workers, inside the task's workspace.
pub(super) fn in_workspace<'a, F>(
    ctx: &'a ToolContext,
    tool: &'static str,
    f: F,
) -> BoxFuture<'a, Result<String, ToolError>>
where
    F: FnOnce(&Root) -> Result<String, String> + Send + 'static,
{
    Box::pin(async move {
        let root = ctx
            .root()
            .ok_or_else(|| format!("{tool} needs a workspace, and this task has no repo"))?;
        let done = tokio::task::spawn_blocking(move || f(&root))
            .await
            .map_err(|e| format!("{tool} failed: {e}"))?;
        Ok(done?)
    })
}

/// Refuses pipes, sockets and devices: opening one could block the runner forever.
fn regular(meta: &std::fs::Metadata, p: &str) -> Result<(), String> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(format!(
            "{p} is not a regular file (a pipe, socket or device)"
        ))
    }
}

fn str_field<'a>(input: &'a Value, name: &str) -> Result<&'a str, String> {
    input
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{name}` is required"))
}

pub struct ReadFile;

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Read a UTF-8 text file of the repository, whole or a range of lines (1-based, inclusive). Long files are cut at about 100 KB; read on with start_line."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "path relative to the repository root"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }
    fn needs_workspace(&self) -> bool {
        true
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        in_workspace(ctx, "read_file", move |root| {
            let p = str_field(&input, "path")?;
            let path = root.resolve(p)?;
            let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read {p}: {e}"))?;
            if meta.is_dir() {
                return Err(format!("{p} is a directory; use list_files"));
            }
            regular(&meta, p)?;
            if meta.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "{p} is {} bytes, too large to read; use grep to find the part you need",
                    meta.len()
                ));
            }
            let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {p}: {e}"))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("{p} is not UTF-8 text (a binary file?)"))?;
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            let total = lines.len();
            let start = input
                .get("start_line")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1) as usize;
            let end = input
                .get("end_line")
                .and_then(Value::as_u64)
                .map_or(total, |e| e as usize)
                .min(total);
            if total == 0 {
                return Ok(String::new());
            }
            if start > total {
                return Err(format!(
                    "{p} has {total} lines; start_line {start} is past the end"
                ));
            }
            if end < start {
                return Err(format!("end_line {end} is before start_line {start}"));
            }
            let mut out = String::new();
            let mut last = start - 1;
            for line in &lines[start - 1..end] {
                if out.len() + line.len() > MAX_READ_BYTES {
                    if out.is_empty() {
                        // A single line longer than the cap: show its start.
                        let mut cut = MAX_READ_BYTES;
                        while !line.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        out.push_str(&line[..cut]);
                        out.push_str(&format!(
                            "\n[line {start} is {} bytes long; only its first {cut} are shown]",
                            line.len()
                        ));
                        last += 1;
                    }
                    break;
                }
                out.push_str(line);
                last += 1;
            }
            if last < end || (start, end) != (1, total) {
                let more = if last < total {
                    format!("; read on with start_line {}", last + 1)
                } else {
                    String::new()
                };
                if !out.ends_with('\n') && !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!("[lines {start}-{last} of {total}{more}]"));
            }
            Ok(out)
        })
    }
}

pub struct WriteFile;

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Create or overwrite a file of the repository with the given content (parent folders are created)."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "path relative to the repository root"},
                "content": {"type": "string"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }
    fn needs_workspace(&self) -> bool {
        true
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        in_workspace(ctx, "write_file", move |root| {
            let p = str_field(&input, "path")?;
            let content = str_field(&input, "content")?;
            let path = root.resolve(p)?;
            if let Ok(meta) = std::fs::metadata(&path) {
                if meta.is_dir() {
                    return Err(format!("{p} is a directory"));
                }
                regular(&meta, p)?;
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create the folders of {p}: {e}"))?;
                // The new folders must not have led outside (a symlink raced in).
                root.resolve(&relative(&root.path, parent))?;
            }
            std::fs::write(&path, content).map_err(|e| format!("cannot write {p}: {e}"))?;
            Ok(format!(
                "wrote {} bytes to {}",
                content.len(),
                relative(&root.path, &path)
            ))
        })
    }
}

pub struct EditFile;

impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }
    fn description(&self) -> &str {
        "Replace an exact string in a file of the repository. old_string must occur exactly once (include surrounding lines to make it unique) unless replace_all is true. Read the file first: whitespace and indentation must match."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string", "minLength": 1},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }
    fn needs_workspace(&self) -> bool {
        true
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        in_workspace(ctx, "edit_file", move |root| {
            let p = str_field(&input, "path")?;
            let old = str_field(&input, "old_string")?;
            let new = str_field(&input, "new_string")?;
            let all = input
                .get("replace_all")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if old == new {
                return Err("old_string and new_string are the same: nothing to change".into());
            }
            let path = root.resolve(p)?;
            let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read {p}: {e}"))?;
            regular(&meta, p)?;
            if meta.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "{p} is {} bytes, too large to edit here",
                    meta.len()
                ));
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("cannot read {p}: {e}"))?;
            let count = text.matches(old).count();
            match (count, all) {
                (0, _) => {
                    return Err(format!(
                        "old_string was not found in {p}; check whitespace and indentation, and read the file again"
                    ))
                }
                (n, false) if n > 1 => {
                    return Err(format!(
                        "old_string occurs {n} times in {p}; include more surrounding lines to make it unique, or set replace_all"
                    ))
                }
                _ => {}
            }
            let edited = if all {
                text.replace(old, new)
            } else {
                text.replacen(old, new, 1)
            };
            std::fs::write(&path, edited).map_err(|e| format!("cannot write {p}: {e}"))?;
            Ok(format!(
                "edited {}: replaced {count} occurrence(s)",
                relative(&root.path, &path)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ctx(root: &Path) -> ToolContext {
        ToolContext {
            workspace: Some(root.to_path_buf()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn read_write_edit_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let c = ctx(&root);
        let w = WriteFile
            .call(
                json!({"path": "pkg/m.py", "content": "a = 1\nb = 2\nb = 2\n"}),
                &c,
            )
            .await
            .unwrap();
        assert!(w.contains("pkg/m.py"));
        assert_eq!(
            ReadFile
                .call(json!({"path": "pkg/m.py"}), &c)
                .await
                .unwrap(),
            "a = 1\nb = 2\nb = 2\n"
        );
        let part = ReadFile
            .call(
                json!({"path": "pkg/m.py", "start_line": 2, "end_line": 2}),
                &c,
            )
            .await
            .unwrap();
        assert_eq!(part, "b = 2\n[lines 2-2 of 3; read on with start_line 3]");
        let e = EditFile
            .call(
                json!({"path": "pkg/m.py", "old_string": "b = 2", "new_string": "b = 3"}),
                &c,
            )
            .await
            .unwrap_err();
        assert!(e.0.contains("occurs 2 times"), "{e}");
        let e = EditFile
            .call(
                json!({"path": "pkg/m.py", "old_string": "c = 9", "new_string": "x"}),
                &c,
            )
            .await
            .unwrap_err();
        assert!(e.0.contains("not found"), "{e}");
        EditFile
            .call(
                json!({"path": "pkg/m.py", "old_string": "a = 1", "new_string": "a = 10"}),
                &c,
            )
            .await
            .unwrap();
        EditFile.call(json!({"path": "pkg/m.py", "old_string": "b = 2", "new_string": "b = 3", "replace_all": true}), &c).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("pkg/m.py")).unwrap(),
            "a = 10\nb = 3\nb = 3\n"
        );
        assert!(ReadFile
            .call(json!({"path": "../outside"}), &c)
            .await
            .unwrap_err()
            .0
            .contains("outside"));
        assert!(WriteFile
            .call(json!({"path": "/etc/evil", "content": "x"}), &c)
            .await
            .is_err());
        // Files at the top of the workspace, new and existing, by every spelling.
        for (path, content) in [
            ("newfile.py", "x = 1\n"),
            (".gitignore", "*.pyc\n"),
            ("./newfile.py", "x = 2\n"),
            ("", ""),
        ] {
            let r = WriteFile
                .call(json!({"path": path, "content": content}), &c)
                .await;
            if path.is_empty() {
                assert!(r.unwrap_err().0.contains("empty"));
                continue;
            }
            assert!(r.is_ok(), "{path}: {r:?}");
            let name = path.trim_start_matches("./");
            assert_eq!(std::fs::read_to_string(root.join(name)).unwrap(), content);
        }
        let abs = root.join("at_root.txt");
        WriteFile
            .call(json!({"path": abs.to_str().unwrap(), "content": "abs"}), &c)
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&abs).unwrap(), "abs");
        EditFile
            .call(
                json!({"path": "newfile.py", "old_string": "x = 2", "new_string": "x = 3"}),
                &c,
            )
            .await
            .unwrap();
        assert_eq!(
            ReadFile
                .call(json!({"path": "newfile.py"}), &c)
                .await
                .unwrap(),
            "x = 3\n"
        );
        nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        for tool in [&ReadFile as &dyn Tool, &EditFile] {
            let e = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tool.call(
                    json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
                    &c,
                ),
            )
            .await
            .expect("a named pipe must be refused, not opened")
            .unwrap_err();
            assert!(e.0.contains("not a regular file"), "{e}");
        }
        let none = ToolContext::default();
        assert!(ReadFile
            .call(json!({"path": "x"}), &none)
            .await
            .unwrap_err()
            .0
            .contains("needs a workspace"));
    }
}
