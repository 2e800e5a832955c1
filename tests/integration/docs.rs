//! The README and the user guide link to each other by file and heading. A chapter
//! renamed or a heading reworded would leave a link that lands nowhere; this test
//! follows every relative link of README.md and docs/**/*.md and fails on one whose file
//! or `#anchor` does not exist (anchors as GitHub makes them from headings).
//! The docs also keep up with the code: every command and flag is in the commands
//! chapter, every results.csv column and stop reason in the reports chapter, and every
//! file of src in docs/ARCHITECTURE.md's module table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces made hyphens; a repeated anchor gets `-1`, `-2`, ...
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Lines outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `[text](target)` targets on prose lines, with code spans removed first.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_of_the_readme_and_the_guide_lands_on_a_file_and_heading() {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut files);
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.starts_with('<') {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            checked += 1;
            let shown = file.strip_prefix(&root).unwrap().display().to_string();
            if !dest.exists() {
                broken.push(format!("{shown}: ({target}): no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let dest_text = std::fs::read_to_string(&dest).unwrap_or_default();
                if !anchors(&dest_text).contains(anchor) {
                    broken.push(format!("{shown}: ({target}): no heading makes #{anchor}"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the link reader broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# Batch mode: overnight at half price\n## Prompt caching\n```\n# not a heading\n```\n## Prompt caching\n";
    let found = anchors(text);
    assert!(found.contains("batch-mode-overnight-at-half-price"));
    assert!(found.contains("prompt-caching"));
    assert!(found.contains("prompt-caching-1"));
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        link_targets("see [a](x.md#b) and `[c](nope)` [d](#e)"),
        vec!["x.md#b", "#e"]
    );
}

/// The long flags a `--help` text lists, `--help` and `--version` left out.
fn long_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if let Some(name) = word.strip_prefix("--") {
            if name.starts_with(|c: char| c.is_ascii_lowercase())
                && name != "help"
                && name != "version"
            {
                flags.insert(word.to_string());
            }
        }
    }
    flags
}

fn help_of(args: &[&str]) -> String {
    let out = super::common::bin()
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "agentbatch {args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_commands_chapter_names_every_command_and_flag_the_binary_has() {
    let chapter = std::fs::read_to_string(repo_root().join("docs/guide/commands.md")).unwrap();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let top = help_of(&[]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(
        commands.len() >= 10,
        "commands read from --help: {commands:?}"
    );
    let mut missing = Vec::new();
    for command in &commands {
        let usage = format!("agentbatch {command}");
        if !chapter.contains(&usage) {
            missing.push(format!("docs/guide/commands.md does not show `{usage}`"));
        }
        if !readme.contains(&format!("`{usage}")) && !readme.contains(&format!("`{command}`")) {
            missing.push(format!(
                "README.md's command table does not name `{command}`"
            ));
        }
        for flag in long_flags(&help_of(&[command])) {
            if !chapter.contains(&flag) {
                missing.push(format!(
                    "docs/guide/commands.md does not mention {flag} of `{usage}`"
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The ```yaml blocks of the README and the guide, with the file and line of each.
fn yaml_blocks() -> Vec<(String, usize, String)> {
    let root = repo_root();
    let mut files = vec![root.join("README.md"), root.join("docs/simulator.md")];
    let mut guide = Vec::new();
    markdown_files(&root.join("docs/guide"), &mut guide);
    files.extend(guide);
    let mut blocks = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let mut current: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            match &mut current {
                None if line.trim_start() == "```yaml" => current = Some((n + 2, String::new())),
                Some((_, body)) if line.trim_start() != "```" => {
                    body.push_str(line);
                    body.push('\n');
                }
                Some((start, body)) => {
                    blocks.push((shown.clone(), *start, std::mem::take(body)));
                    current = None;
                }
                None => {}
            }
        }
    }
    blocks
}

/// A newcomer copies the examples: every YAML block must be YAML, and every whole job
/// file among them (one with `name` and `tasks`) must pass `agentbatch validate` beside
/// jobs/sim and jobs/fixtures, so that its relative paths resolve as in the shipped jobs
/// (not in jobs/ itself, whose files another test reads at the same time).
#[test]
fn every_yaml_example_of_the_readme_and_the_guide_parses_and_whole_jobs_validate() {
    let blocks = yaml_blocks();
    assert!(blocks.len() > 15, "only {} yaml blocks found", blocks.len());
    let mut failures = Vec::new();
    let mut whole = 0;
    for (file, line, body) in &blocks {
        let value: serde_yaml::Value = match serde_yaml::from_str(body) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{file}:{line}: not YAML: {e}"));
                continue;
            }
        };
        let is_job = value.get("name").is_some() && value.get("tasks").is_some();
        if !is_job {
            continue;
        }
        whole += 1;
        let dir = tempfile::tempdir().unwrap();
        for linked in ["sim", "fixtures"] {
            std::os::unix::fs::symlink(
                repo_root().join("jobs").join(linked),
                dir.path().join(linked),
            )
            .unwrap();
        }
        let path = dir.path().join("example.yaml");
        std::fs::write(&path, body).unwrap();
        let out = super::common::bin()
            .env("ANTHROPIC_API_KEY", "sk-ant-example")
            .env("OPENAI_API_KEY", "sk-example")
            .args(["validate", path.to_str().unwrap()])
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{file}:{line}: the example job does not validate:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(whole >= 2, "only {whole} whole job examples found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The files of one module named in its row of docs/ARCHITECTURE.md's module table: a
/// file by its path under the module (`stream/cut.rs`) or its name (`cut.rs`), a
/// folder's `mod.rs` by the folder (`stream/`).
fn named_in(row: &str, under_module: &str) -> bool {
    let name = under_module.rsplit('/').next().unwrap_or(under_module);
    let folder = under_module.strip_suffix("mod.rs");
    row.contains(&format!("`{under_module}`"))
        || row.contains(&format!("`{name}`"))
        || folder.is_some_and(|f| f.is_empty() || row.contains(&format!("`{f}`")))
}

#[test]
fn the_module_table_of_the_architecture_names_every_source_file() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let table = doc
        .split("\n## Modules\n")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("docs/ARCHITECTURE.md has a `## Modules` section");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
    let mut files = Vec::new();
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let src = root.join("src");
    let mut missing = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let is_test = rel.ends_with("tests.rs") || rel.contains("/tests/");
        if is_test || rel == "main.rs" || rel == "lib.rs" {
            continue;
        }
        let (module, under) = match rel.split_once('/') {
            Some((m, rest)) => (m.to_string(), rest.to_string()),
            None => (rel.trim_end_matches(".rs").to_string(), String::new()),
        };
        let row = rows.iter().find(|r| {
            let first = r.split('|').nth(1).unwrap_or("");
            first.contains(&format!("`{module}/`")) || first.contains(&format!("`{module}.rs`"))
        });
        let named = match row {
            Some(_) if under.is_empty() => true,
            Some(row) => named_in(row, &under),
            None => false,
        };
        if !named {
            missing.push(format!("src/{rel}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's module table does not say what these files own:\n{}",
        missing.join("\n")
    );
}
/// The names in backticks in the first cell of each row of the table under `heading` in
/// a guide chapter.
fn first_cells(chapter: &str, heading: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("docs/guide").join(chapter)).unwrap();
    let section = text
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/guide/{chapter} has no `{heading}`"));
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut names = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split('|').nth(1).unwrap_or("");
        names.extend(cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    names
}

#[test]
fn the_reports_chapter_explains_every_results_column_and_stop_reason() {
    let columns = first_cells("reports.md", "## results.csv");
    let missing: Vec<&str> = agentbatch::report::COLUMNS
        .iter()
        .copied()
        .filter(|c| !columns.contains(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guide/reports.md's results.csv table does not explain {missing:?}"
    );
    let reasons = first_cells("reports.md", "## Stop reasons");
    let known: BTreeSet<String> = agentbatch::vocab::stop::StopReason::ALL
        .iter()
        .map(|r| r.as_str().to_string())
        .collect();
    assert_eq!(
        reasons, known,
        "docs/guide/reports.md's stop reasons table and StopReason::ALL differ"
    );
}
