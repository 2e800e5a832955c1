//! The layer order of docs/ARCHITECTURE.md, enforced: a module of src may use only
//! modules on layers below its own. An import that points up (or sideways, to another
//! module of the same layer) fails this test with the file, the line and both layers.

use std::path::{Path, PathBuf};

/// Bottom first. Keep in step with the layer table in docs/ARCHITECTURE.md.
const LAYERS: &[&[&str]] = &[
    &["text", "stats", "resources", "bucket"],
    &["vocab"],
    &["model"],
    &["tools"],
    &["sim"],
    &["job"],
    &["govern"],
    &["agent", "report", "trace"],
    &["audit", "compare", "page"],
    &["run"],
    &["commands", "bench"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::<module>` named on a line (in `use` items and in paths alike).
fn crate_paths(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let before = &rest[..i];
        rest = &rest[i + "crate::".len()..];
        // `$crate::`, `agentbatch_crate::` and the like are not this crate's paths.
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        found.push(&rest[..end]);
    }
    found
}

fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "main" || module == "lib" {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            found.push(format!(
                "src/{}: module `{module}` has no layer in LAYERS",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for used in crate_paths(line) {
                if used == module || used.is_empty() || used.chars().next().unwrap().is_uppercase()
                {
                    continue;
                }
                match layer_of(used) {
                    Some(l) if l < own => {}
                    Some(l) => found.push(format!(
                        "src/{}:{}: `{module}` (layer {own}) uses `{used}` (layer {l}): {}",
                        rel.display(),
                        n + 1,
                        line.trim()
                    )),
                    None => found.push(format!(
                        "src/{}:{}: `{used}` has no layer in LAYERS",
                        rel.display(),
                        n + 1
                    )),
                }
            }
        }
    }
    found
}

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports against the layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_layer_check_sees_an_import_that_points_up() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("model")).unwrap();
    std::fs::write(src.join("vocab.rs"), "use crate::text::clip;\n").unwrap();
    std::fs::write(
        src.join("model/http.rs"),
        "// crate::run in a comment is fine\nfn f() { crate::agent::go(); }\nuse crate::vocab::usage::Usage;\n",
    )
    .unwrap();
    std::fs::write(src.join("text.rs"), "use crate::model::x;\n").unwrap();
    let found = violations(src);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().any(|v| v.starts_with("src/model/http.rs:2:")));
    assert!(found.iter().any(|v| v.starts_with("src/text.rs:1:")));
}

/// Files of src allowed past `MAX_LINES`, each with its reason in docs/ARCHITECTURE.md.
const LONG_FILES: &[&str] = &[];
const MAX_LINES: usize = 700;

#[test]
fn no_source_file_grows_past_the_size_the_architecture_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            let rel = f.strip_prefix(&src).unwrap().display().to_string();
            (lines > MAX_LINES && !LONG_FILES.contains(&rel.as_str()))
                .then(|| format!("src/{rel}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by concern (or list them in LONG_FILES with the reason in docs/ARCHITECTURE.md):\n{}",
        long.join("\n")
    );
}

/// How the run folder's files are named, by their constants in `report::files` and as
/// literals: a file of src that names one and also writes files writes the run folder.
const RUN_FOLDER_NAMES: &[&str] = &[
    "RESULTS_CSV",
    "SUPERSEDED_CSV",
    "RUN_JSON",
    "SUMMARY_CSV",
    "REPORT_HTML",
    "REPORT_TRANSCRIPTS",
    "COLLECTED_MARKER",
    "WORKER_MARKER",
    "files::LOCK",
    "files::TRANSCRIPTS",
    "files::PATCHES",
    "transcript_path(",
    "transcript_rel(",
    "patch_path(",
    "patch_rel(",
    "\"results.csv\"",
    "\"superseded.csv\"",
    "\"run.json\"",
    "\"summary.csv\"",
    "\"report.html\"",
    "\"transcripts",
    "\"patches",
    "transcripts/",
    "patches/",
    ".jsonl\"",
    ".diff\"",
    "\".collected\"",
    "\".worker\"",
    "\".lock\"",
];

/// The calls that write, create, move or remove a file or folder.
const FILE_WRITES: &[&str] = &[
    "fs::write(",
    "File::create(",
    "OpenOptions::new(",
    "fs::rename(",
    "fs::copy(",
    "create_dir(",
    "create_dir_all(",
    "remove_file(",
    "remove_dir(",
    "remove_dir_all(",
    "Writer::from_path(",
];

/// Files outside src/report/ that name a run folder's file and write files, each with
/// the reason (docs/ARCHITECTURE.md, "The reporter writes the run folder").
const RUN_FOLDER_WRITERS: &[(&str, &str)] = &[
    (
        "run/folder.rs",
        "creates the folder and its .lock: a resume holds the lock before a reporter exists",
    ),
    (
        "page/mod.rs",
        "report.html and report-transcripts/: the page, a view of the folder written last",
    ),
    (
        "page/live.rs",
        "the page's transcript chunks, staged while the run goes",
    ),
    (
        "bench/mod.rs",
        "writes its job files in its own folder, reads the run's transcripts",
    ),
    (
        "bench/load.rs",
        "writes its job and repository in its own folder, reads run.json and results.csv",
    ),
    (
        "bench/workspaces.rs",
        "writes its repository in its own folder, reads the run's transcripts",
    ),
];

/// `file:line: what` for each write in a file outside src/report/ that names a run
/// folder's file (its unit tests, after `#[cfg(test)]`, and test files left out).
fn run_folder_writes(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().display().to_string();
        if rel.starts_with("report/")
            || rel.ends_with("tests.rs")
            || rel.contains("/tests/")
            || RUN_FOLDER_WRITERS.iter().any(|(f, _)| *f == rel)
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let lines: Vec<&str> = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect();
        let names: Vec<&str> = lines
            .iter()
            .flat_map(|l| RUN_FOLDER_NAMES.iter().filter(|n| l.contains(*n)))
            .copied()
            .collect();
        if names.is_empty() {
            continue;
        }
        for (i, line) in lines.iter().enumerate() {
            if let Some(w) = FILE_WRITES.iter().find(|w| line.contains(*w)) {
                found.push(format!(
                    "src/{rel}:{}: {w} in a file that names the run folder's {}",
                    i + 1,
                    names[0]
                ));
            }
        }
    }
    found
}

#[test]
fn only_report_writes_the_run_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = run_folder_writes(&src);
    assert!(
        found.is_empty(),
        "the run folder is written through report (report/folder.rs has the writes made outside the reporter); move these there, or list the file in RUN_FOLDER_WRITERS with its reason:\n{}",
        found.join("\n")
    );
    for (file, _) in RUN_FOLDER_WRITERS {
        assert!(
            src.join(file).is_file(),
            "RUN_FOLDER_WRITERS names {file}, which is gone"
        );
    }
}

#[test]
fn the_run_folder_check_sees_a_write_outside_report() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("run")).unwrap();
    std::fs::create_dir_all(src.join("report")).unwrap();
    // A marker written by hand, as run/phases.rs did.
    std::fs::write(
        src.join("run/phases.rs"),
        "fn f(dir: &Path) {\n    let marker = dir.join(\".worker\");\n    std::fs::write(&marker, b\"\").unwrap();\n}\n",
    )
    .unwrap();
    // A transcript through the shared name, written by hand.
    std::fs::write(
        src.join("run/shared.rs"),
        "use crate::report::files;\nfn f(dir: &Path) {\n    std::fs::write(files::transcript_path(dir, \"k\"), b\"\").unwrap();\n}\n",
    )
    .unwrap();
    // Reading is fine; so are writes in report and in a file's unit tests.
    std::fs::write(
        src.join("run/resume.rs"),
        "fn f(dir: &Path) { std::fs::read(dir.join(files::RESULTS_CSV)); }\n#[cfg(test)]\nmod tests { fn g() { std::fs::write(\"results.csv\", \"\"); } }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("report/folder.rs"),
        "fn f(dir: &Path) { std::fs::write(dir.join(files::RESULTS_CSV), \"\"); }\n",
    )
    .unwrap();
    let found = run_folder_writes(src);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().any(|v| v.starts_with("src/run/phases.rs:3:")));
    assert!(found.iter().any(|v| v.starts_with("src/run/shared.rs:3:")));
}
