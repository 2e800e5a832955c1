//! Records the commit agentbatch is built from (`agentbatch --version`, run.json's
//! `agentbatch_commit`): `AGENTBATCH_COMMIT` when the builder sets it (an image or a
//! wheel built from a copy without .git), else git's HEAD, else the commit a packaged
//! crate was made from (`.cargo_vcs_info.json`, which `cargo package` writes), else
//! `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=AGENTBATCH_COMMIT");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    for f in [".git/HEAD", ".git/packed-refs", ".cargo_vcs_info.json"] {
        if dir.join(f).exists() {
            println!("cargo:rerun-if-changed={f}");
        }
    }
    if let Ok(head) = std::fs::read_to_string(dir.join(".git/HEAD")) {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            if dir.join(".git").join(r).exists() {
                println!("cargo:rerun-if-changed=.git/{r}");
            }
        }
    }
    let commit = std::env::var("AGENTBATCH_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| from_git(dir))
        .or_else(|| from_package(dir))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=AGENTBATCH_COMMIT={}", commit.trim());
}

fn from_git(dir: &Path) -> Option<String> {
    if !dir.join(".git").exists() {
        return None;
    }
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .ok()?;
    let sha = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && sha.trim().len() >= 7).then(|| sha.trim().to_string())
}

/// `{"git": {"sha1": "..."}, ...}`, read without a JSON parser (a build script's
/// dependencies are compiled for every build).
fn from_package(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let at = text.find("\"sha1\"")?;
    let rest = &text[at + 6..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_string())
}
