//! The search tools: `list_files` and `grep`, which walk the workspace the way git sees
//! it (.gitignore honoured, the .git folder skipped).

use std::path::Path;

use futures::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use serde_json::{json, Value};

use super::files::in_workspace;
use super::paths::relative;
use super::{Tool, ToolContext};
use crate::tools::ToolError;

const MAX_LISTED: usize = 1000;
const DEFAULT_MATCHES: usize = 100;
const MAX_MATCHES: usize = 1000;
const MAX_GREP_FILE: u64 = 2 * 1024 * 1024;
const MAX_LINE: usize = 300;

fn glob(pattern: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("invalid glob \"{pattern}\": {e}"))
}

/// Files under `base`, as paths relative to the workspace root, sorted. The walk starts
/// at the root, so the repository's ignore files apply wherever `base` is, and those
/// above the repository never do.
fn walk(root: &Path, base: &Path) -> Vec<String> {
    let mut out: Vec<String> = WalkBuilder::new(root)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .require_git(false)
        // only the repository's own ignore files count, not those above it or the
        // runner user's global ones
        .parents(false)
        .git_global(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()) && e.path().starts_with(base))
        .map(|e| relative(root, e.path()))
        .collect();
    out.sort();
    out
}

pub struct ListFiles;

impl Tool for ListFiles {
    fn name(&self) -> &str {
        "list_files"
    }
    fn description(&self) -> &str {
        "List the repository's files (paths relative to its root), skipping what .gitignore ignores. Optionally filter with a glob such as \"src/**/*.py\" or look only under `path`."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "glob matched against paths relative to the root; default all files"},
                "path": {"type": "string", "description": "a folder to list instead of the whole repository"}
            },
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
        in_workspace(ctx, "list_files", move |root| {
            let base = root.resolve(input.get("path").and_then(Value::as_str).unwrap_or("."))?;
            let matcher = input
                .get("pattern")
                .and_then(Value::as_str)
                .map(glob)
                .transpose()?;
            let files: Vec<String> = walk(&root.path, &base)
                .into_iter()
                .filter(|f| matcher.as_ref().is_none_or(|m| m.is_match(f)))
                .collect();
            if files.is_empty() {
                return Ok("no files match".into());
            }
            let mut out = files
                .iter()
                .take(MAX_LISTED)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n");
            if files.len() > MAX_LISTED {
                out.push_str(&format!(
                    "\n[{} more files not shown; narrow the pattern]",
                    files.len() - MAX_LISTED
                ));
            }
            Ok(out)
        })
    }
}

pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }
    fn description(&self) -> &str {
        "Search the repository's text files for a regular expression (Rust regex syntax), skipping what .gitignore ignores. Answers path:line: text for each matching line."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "regular expression"},
                "path": {"type": "string", "description": "a folder or file to search instead of the whole repository"},
                "glob": {"type": "string", "description": "only files whose path matches this glob, e.g. \"**/*.py\""},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES}
            },
            "required": ["pattern"],
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
        in_workspace(ctx, "grep", move |root| {
            let pattern = input
                .get("pattern")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let re = regex::Regex::new(pattern)
                .map_err(|e| format!("invalid regular expression: {e}"))?;
            let base = root.resolve(input.get("path").and_then(Value::as_str).unwrap_or("."))?;
            let filter = input
                .get("glob")
                .and_then(Value::as_str)
                .map(glob)
                .transpose()?;
            let max = input
                .get("max_results")
                .and_then(Value::as_u64)
                .map_or(DEFAULT_MATCHES, |m| (m as usize).min(MAX_MATCHES));
            let files: Vec<String> = if base.is_file() {
                vec![relative(&root.path, &base)]
            } else {
                walk(&root.path, &base)
            };
            let mut hits = Vec::new();
            let mut more = 0usize;
            for f in files
                .iter()
                .filter(|f| filter.as_ref().is_none_or(|m| m.is_match(f)))
            {
                let path = root.path.join(f);
                if std::fs::metadata(&path)
                    .map_or(true, |m| !m.is_file() || m.len() > MAX_GREP_FILE)
                {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                for (n, line) in text.lines().enumerate() {
                    if re.is_match(line) {
                        if hits.len() < max {
                            let shown: String = line.chars().take(MAX_LINE).collect();
                            hits.push(format!("{f}:{}: {shown}", n + 1));
                        } else {
                            more += 1;
                        }
                    }
                }
            }
            if hits.is_empty() {
                return Ok("no matches".into());
            }
            let mut out = hits.join("\n");
            if more > 0 {
                out.push_str(&format!("\n[{more} more matches not shown]"));
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn list_and_grep_honour_gitignore() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("src/__pycache__")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".gitignore"), "__pycache__/\n").unwrap();
        std::fs::write(root.join("src/a.py"), "def parse():\n    return 1\n").unwrap();
        std::fs::write(root.join("src/__pycache__/a.pyc"), "def parse").unwrap();
        std::fs::write(root.join(".git/config"), "def parse").unwrap();
        std::fs::write(root.join("README.md"), "parse things\n").unwrap();
        let c = ToolContext {
            workspace: Some(root.clone()),
            ..Default::default()
        };
        let all = ListFiles.call(json!({}), &c).await.unwrap();
        assert_eq!(all, ".gitignore\nREADME.md\nsrc/a.py");
        assert_eq!(
            ListFiles
                .call(json!({"pattern": "**/*.py"}), &c)
                .await
                .unwrap(),
            "src/a.py"
        );
        assert_eq!(
            ListFiles.call(json!({"path": "src"}), &c).await.unwrap(),
            "src/a.py"
        );
        let g = Grep.call(json!({"pattern": "def \\w+"}), &c).await.unwrap();
        assert_eq!(g, "src/a.py:1: def parse():");
        let g = Grep
            .call(json!({"pattern": "parse", "max_results": 1}), &c)
            .await
            .unwrap();
        assert!(g.ends_with("[1 more matches not shown]"), "{g}");
        assert!(Grep
            .call(json!({"pattern": "("}), &c)
            .await
            .unwrap_err()
            .0
            .contains("invalid regular"));
        assert!(ListFiles.call(json!({"path": "/etc"}), &c).await.is_err());
    }
}
