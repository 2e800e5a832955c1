//! The layer order of docs/ARCHITECTURE.md, enforced: a module of src may use only
//! modules on layers below its own. An import that points up (or sideways, to another
//! module of the same layer) fails this test with the file, the line and both layers.

use std::path::{Path, PathBuf};

/// Bottom first. Keep in step with the layer table in docs/ARCHITECTURE.md.
const LAYERS: &[&[&str]] = &[
    &["text", "stats", "resources", "bucket"],
    &["vocab", "suite"],
    &["model"],
    &["tools"],
    &["sim"],
    &["job"],
    &["govern"],
    &["agent", "report", "trace"],
    &["audit", "compare", "export", "page"],
    &["run"],
    &["bench"],
    &["commands"],
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

/// A Rust file's code with its comments, strings and character literals blanked out
/// (newlines kept, so line numbers hold): what is left of braces and paths is code.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && {
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // A raw string: r"..", r#".."#, br"..".
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < c.len() {
                if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &c[i..j.min(c.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            for &ch in &c[i..(j + 1).min(c.len())] {
                blank(&mut out, ch);
            }
            i = j + 1;
        } else if c[i] == '\'' && (!prev_ident || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
        {
            // A character literal ('x', '\n', '\'', b'"'), not a lifetime or a label ('a).
            let end = if c.get(i + 1) == Some(&'\\') {
                let mut j = i + 3;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                Some(j)
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(j) => {
                    for &ch in &c[i..(j + 1).min(c.len())] {
                        blank(&mut out, ch);
                    }
                    i = j + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// A token of code: an identifier (or number), `::`, or one punctuation character, with
/// its line (1-based).
fn tokens(code: &str) -> Vec<(String, usize)> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((c[start..i].iter().collect(), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(("::".to_string(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

/// For each token, the inline modules it sits in (`mod name { .. }`), and whether one of
/// them is a `#[cfg(test)]` module.
fn inline_modules(toks: &[(String, usize)]) -> Vec<(Vec<String>, bool)> {
    let mut stack: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0usize;
    let mut out = Vec::with_capacity(toks.len());
    for (i, (t, _)) in toks.iter().enumerate() {
        if t == "{" {
            depth += 1;
            if i >= 2 && toks[i - 2].0 == "mod" {
                let test = cfg_test_before(toks, i - 2) || stack.last().is_some_and(|s| s.2);
                stack.push((toks[i - 1].0.clone(), depth, test));
            }
        }
        out.push((
            stack.iter().map(|s| s.0.clone()).collect(),
            stack.last().is_some_and(|s| s.2),
        ));
        if t == "}" {
            if stack.last().is_some_and(|s| s.1 == depth) {
                stack.pop();
            }
            depth = depth.saturating_sub(1);
        }
    }
    out
}

/// Whether the item starting at token `at` (after `pub` and the like) has `#[cfg(test)]`.
fn cfg_test_before(toks: &[(String, usize)], at: usize) -> bool {
    let mut i = at;
    while i > 0
        && matches!(
            toks[i - 1].0.as_str(),
            "pub" | "crate" | "(" | ")" | "super"
        )
    {
        i -= 1;
    }
    while i > 0 && toks[i - 1].0 == "]" {
        let end = i - 1;
        let mut j = end;
        while j > 0 && toks[j].0 != "[" {
            j -= 1;
        }
        if j == 0 || toks[j - 1].0 != "#" {
            return false;
        }
        let attr: String = toks[j + 1..end].iter().map(|t| t.0.as_str()).collect();
        if attr == "cfg(test)" {
            return true;
        }
        i = j - 1;
    }
    false
}

/// A file of src that holds tests only: `tests.rs`, `*_tests.rs`, or under a `tests/`.
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().unwrap().to_string_lossy();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// The module path of a file of src: `govern/store.rs` is `govern::store`, `sim/batch/
/// mod.rs` is `sim::batch`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let last = parts.pop().unwrap();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The paths a file names from `crate::`, `super::` and `self::` (`use` groups opened,
/// on any number of lines), each made absolute from the crate root; code of
/// `#[cfg(test)]` modules left out.
fn absolute_paths(text: &str, own: &[String]) -> Vec<(Vec<String>, usize)> {
    let toks = tokens(&code_only(text));
    let inline = inline_modules(&toks);
    let mut found = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].0.as_str();
        let starts = matches!(t, "crate" | "super" | "self")
            && toks.get(i + 1).is_some_and(|n| n.0 == "::")
            && (i == 0 || !matches!(toks[i - 1].0.as_str(), "::" | "$"));
        if !starts || inline[i].1 {
            i += 1;
            continue;
        }
        let mut here: Vec<String> = own.to_vec();
        here.extend(inline[i].0.iter().cloned());
        let mut base = match t {
            "crate" => Vec::new(),
            _ => here.clone(),
        };
        let mut j = i;
        while toks.get(j).is_some_and(|x| x.0 == "super") {
            base.pop();
            j += 2;
        }
        if t == "self" || t == "crate" {
            j += 2;
        }
        let line = toks[i].1;
        i = path_tail(&toks, j, base, line, &mut found);
    }
    found
}

/// Reads the rest of a path from token `at` (segments, `::`, `{ .. }` groups) after
/// `base`, adding each full path to `found`; returns the token after the path.
fn path_tail(
    toks: &[(String, usize)],
    mut at: usize,
    mut base: Vec<String>,
    line: usize,
    found: &mut Vec<(Vec<String>, usize)>,
) -> usize {
    loop {
        let Some((t, _)) = toks.get(at) else {
            found.push((base, line));
            return at;
        };
        if t == "{" {
            at += 1;
            loop {
                match toks.get(at).map(|x| x.0.as_str()) {
                    None => return at,
                    Some("}") => return at + 1,
                    Some(",") => at += 1,
                    Some("self") => {
                        found.push((base.clone(), line));
                        at += 1;
                    }
                    // `*`, `as alias` and the like end a path: step over them.
                    Some(_) => at = path_tail(toks, at, base.clone(), line, found).max(at + 1),
                }
            }
        }
        if t.chars().all(|c| c.is_alphanumeric() || c == '_') && t != "as" {
            base.push(t.clone());
            if toks.get(at + 1).is_some_and(|x| x.0 == "::") {
                at += 2;
                continue;
            }
            found.push((base, line));
            return at + 1;
        }
        found.push((base, line));
        return at;
    }
}

/// The file a module path names: the longest start of it that is a file of `files`.
fn file_of(path: &[String], files: &[(PathBuf, Vec<String>)]) -> Option<usize> {
    (1..=path.len())
        .rev()
        .find_map(|n| files.iter().position(|(_, m)| m.as_slice() == &path[..n]))
}

/// Which file of src uses which other file of its own top-level module (test code left
/// out), as indices into the file list.
fn file_graph(src: &Path) -> (Vec<String>, Vec<Vec<usize>>) {
    let mut all = Vec::new();
    rust_files(src, &mut all);
    all.sort();
    let files: Vec<(PathBuf, Vec<String>)> = all
        .into_iter()
        .map(|f| f.strip_prefix(src).unwrap().to_path_buf())
        .filter(|rel| !is_test_file(rel))
        .map(|rel| {
            let m = module_path(&rel);
            (rel, m)
        })
        .collect();
    let mut edges = vec![Vec::new(); files.len()];
    for (n, (rel, own)) in files.iter().enumerate() {
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        for (path, _) in absolute_paths(&text, own) {
            if path.first() != own.first() {
                continue;
            }
            if let Some(to) = file_of(&path, &files) {
                if to != n && !edges[n].contains(&to) {
                    edges[n].push(to);
                }
            }
        }
    }
    let names = files
        .iter()
        .map(|(rel, _)| rel.display().to_string())
        .collect();
    (names, edges)
}

/// Each cycle of files: the strongly connected components of more than one file
/// (Tarjan), each given as its files sorted and one cycle through them, `a -> b -> a`.
fn file_cycles(src: &Path) -> Vec<(Vec<String>, String)> {
    let (names, edges) = file_graph(src);
    struct Tarjan<'a> {
        edges: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.edges[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges: &edges,
        index: vec![None; names.len()],
        low: vec![0; names.len()],
        on_stack: vec![false; names.len()],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..names.len() {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.found
        .iter()
        .map(|component| {
            let start = *component.iter().min().unwrap();
            let cycle = cycle_through(start, component, &edges);
            let mut files: Vec<String> = component.iter().map(|&v| names[v].clone()).collect();
            files.sort();
            let shown: Vec<&str> = cycle.iter().map(|&v| names[v].as_str()).collect();
            (files, format!("{} -> {}", shown.join(" -> "), names[start]))
        })
        .collect()
}

/// One cycle from `start` back to it inside `component` (a breadth-first search for the
/// shortest way back).
fn cycle_through(start: usize, component: &[usize], edges: &[Vec<usize>]) -> Vec<usize> {
    let mut came_from: std::collections::HashMap<usize, usize> = Default::default();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &edges[v] {
            if !component.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![v];
                while let Some(&p) = came_from.get(path.last().unwrap()) {
                    path.push(p);
                }
                path.reverse();
                return path;
            }
            if w != start && !came_from.contains_key(&w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

/// Cycles between files of one module allowed to stay, each the files of the cycle and
/// why (none today: a cycle is fixed by moving what both files need down).
const ALLOWED_CYCLES: &[(&[&str], &str)] = &[];

/// What is wrong with the file cycles of `src` against `allowed`: each cycle not allowed,
/// and each allowed cycle that is no longer there.
fn cycle_problems(src: &Path, allowed: &[(&[&str], &str)]) -> Vec<String> {
    let cycles = file_cycles(src);
    let mut problems: Vec<String> = cycles
        .iter()
        .filter(|(files, _)| !allowed.iter().any(|(a, _)| a == files))
        .map(|(files, shown)| {
            format!("src files use each other: {shown} (all the files of the cycle: {files:?})")
        })
        .collect();
    for (a, _) in allowed {
        if !cycles.iter().any(|(files, _)| files == a) {
            problems.push(format!(
                "ALLOWED_CYCLES lists {a:?}, which is no longer a cycle: remove it"
            ));
        }
    }
    problems
}

#[test]
fn no_two_files_of_a_module_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = cycle_problems(&src, ALLOWED_CYCLES);
    assert!(
        problems.is_empty(),
        "move what both files need down into one of them or into a third file (a file uses \
         another when it names a crate::, super:: or self:: path of it):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_cycle_check_sees_a_cycle_through_three_files_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("m/inner")).unwrap();
    std::fs::write(
        src.join("m/mod.rs"),
        "pub mod a;\npub mod b;\npub mod inner;\n",
    )
    .unwrap();
    // a -> b through a `use` group over two lines; b -> inner/c through `self`-less
    // `crate::` paths; c -> a through `super::super`.
    std::fs::write(src.join("m/a.rs"), "use super::{\n    b::B,\n    inner};\n").unwrap();
    std::fs::write(src.join("m/b.rs"), "fn f() { crate::m::inner::c::go(); }\n").unwrap();
    std::fs::write(src.join("m/inner/mod.rs"), "pub mod c;\n").unwrap();
    std::fs::write(
        src.join("m/inner/c.rs"),
        "// super::super::b is a comment\nconst S: &str = \"super::b\";\nuse super::super::a::A;\n",
    )
    .unwrap();
    // Test code and strings do not count: d uses b only in a test module.
    std::fs::write(
        src.join("m/d.rs"),
        "pub fn d() {}\n#[cfg(test)]\nmod tests {\n    use super::super::b::B;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("m/e.rs"), "use super::d::d;\n").unwrap();
    let cycles = file_cycles(src);
    assert_eq!(cycles.len(), 1, "{cycles:#?}");
    assert_eq!(
        cycles[0].0,
        ["m/a.rs", "m/b.rs", "m/inner/c.rs"].map(String::from)
    );
    assert_eq!(cycles[0].1, "m/a.rs -> m/b.rs -> m/inner/c.rs -> m/a.rs");
    let problems = cycle_problems(src, &[(&["m/d.rs", "m/e.rs"], "made up")]);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].contains("m/a.rs -> m/b.rs"), "{problems:#?}");
    assert!(problems[1].contains("no longer a cycle"), "{problems:#?}");
}

/// The most lines a function of src may have (its `fn` line to its closing brace).
const MAX_FN_LINES: usize = 120;

/// Functions of src allowed past `MAX_FN_LINES`: file, function, and why (none today).
const LONG_FNS: &[(&str, &str, &str)] = &[];

/// Each function of src over `max` lines (test code left out): file, name, lines.
fn long_functions(src: &Path, max: usize) -> Vec<(String, String, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        if is_test_file(rel) {
            continue;
        }
        let toks = tokens(&code_only(&std::fs::read_to_string(&file).unwrap()));
        let inline = inline_modules(&toks);
        for i in 0..toks.len() {
            if toks[i].0 != "fn" || inline[i].1 {
                continue;
            }
            let Some(name) = toks.get(i + 1).filter(|t| t.0 != "(") else {
                continue;
            };
            // The body: the first `{` outside the signature's brackets, unless a `;`
            // (a declaration without a body) comes first.
            let mut depth = 0i32;
            let mut j = i + 2;
            let open = loop {
                match toks.get(j).map(|t| t.0.as_str()) {
                    None => break None,
                    Some("(" | "[") => depth += 1,
                    Some(")" | "]") => depth -= 1,
                    Some(";") if depth == 0 => break None,
                    Some("{") if depth == 0 => break Some(j),
                    _ => {}
                }
                j += 1;
            };
            let Some(open) = open else { continue };
            let mut braces = 0usize;
            let close = (open..toks.len()).find(|&k| {
                match toks[k].0.as_str() {
                    "{" => braces += 1,
                    "}" => braces -= 1,
                    _ => {}
                }
                braces == 0
            });
            let Some(close) = close else { continue };
            let lines = toks[close].1 - toks[i].1 + 1;
            if lines > max {
                found.push((rel.display().to_string(), name.0.clone(), lines));
            }
        }
    }
    found
}

/// What is wrong with the function lengths of `src` against `allowed`: each long function
/// not allowed, and each allowed one that is no longer long.
fn long_fn_problems(src: &Path, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let long = long_functions(src, MAX_FN_LINES);
    let mut problems: Vec<String> = long
        .iter()
        .filter(|(f, n, _)| !allowed.iter().any(|(af, an, _)| af == f && an == n))
        .map(|(f, n, lines)| format!("src/{f}: fn {n} has {lines} lines"))
        .collect();
    for (af, an, _) in allowed {
        if !long.iter().any(|(f, n, _)| af == f && an == n) {
            problems.push(format!(
                "LONG_FNS lists src/{af}: fn {an}, which is no longer over {MAX_FN_LINES} lines: remove it"
            ));
        }
    }
    problems
}

#[test]
fn no_function_grows_past_the_length_the_architecture_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = long_fn_problems(&src, LONG_FNS);
    assert!(
        problems.is_empty(),
        "split these into functions of one step each (or list them in LONG_FNS with the \
         reason beside them):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_length_check_counts_a_function_to_its_closing_brace() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let body =
        |n: usize| "    let _ = (\"}\", b'\"', '{', b'}', '\\'', r#\"}\"#); // }\n".repeat(n);
    std::fs::write(
        src.join("a.rs"),
        format!(
            "trait T {{ fn decl(&self); }}\nfn short() {{\n{}}}\nfn long(f: fn(u8) -> [u8; 2]) {{\n{}}}\n#[cfg(test)]\nmod tests {{\n    fn in_tests() {{\n{}    }}\n}}\n",
            body(5),
            body(MAX_FN_LINES - 1),
            body(MAX_FN_LINES * 2)
        ),
    )
    .unwrap();
    std::fs::write(
        src.join("tests.rs"),
        format!("fn t() {{\n{}}}\n", body(200)),
    )
    .unwrap();
    let long = long_functions(src, MAX_FN_LINES);
    assert_eq!(
        long,
        [("a.rs".to_string(), "long".to_string(), MAX_FN_LINES + 1)]
    );
    let problems = long_fn_problems(src, &[("a.rs", "short", "made up")]);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert_eq!(
        problems[0],
        format!("src/a.rs: fn long has {} lines", MAX_FN_LINES + 1)
    );
    assert!(problems[1].contains("no longer over"), "{problems:#?}");
}

/// How the run folder's files are named, by their constants in `report::files` and as
/// literals: a file of src that names one and also writes files writes the run folder.
const RUN_FOLDER_NAMES: &[&str] = &[
    "RESULTS_CSV",
    "SUPERSEDED_CSV",
    "REGRADED_CSV",
    "RUN_JSON",
    "SUMMARY_CSV",
    "REPORT_HTML",
    "REPORT_TRANSCRIPTS",
    "COLLECTED_MARKER",
    "WORKER_MARKER",
    "files::LOCK",
    "files::TRANSCRIPTS",
    "files::PATCHES",
    "EXPORTS",
    "transcript_path(",
    "transcript_rel(",
    "patch_path(",
    "patch_rel(",
    "\"results.csv\"",
    "\"superseded.csv\"",
    "\"regraded.csv\"",
    "\"run.json\"",
    "\"summary.csv\"",
    "\"report.html\"",
    "\"transcripts",
    "\"patches",
    "\"exports",
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
        "export/write.rs",
        "exports/: the run in other tools' formats (agentbatch export), a view of the folder written on demand, like the page",
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

/// Names of `report::files` that the run-folder check need not look for, with why.
const NOT_WATCHED: &[(&str, &str)] = &[
    (
        "PRISTINE",
        "the run's pristine checkouts are made by tools/ (pristine.rs) under the folder, not report's files",
    ),
    (
        "ENVIRONMENTS",
        "image build and pull logs and image workdirs are written by tools/container under the folder the run hands it, not report's files",
    ),
];

/// A name added to `report::files` is watched by `only_report_writes_the_run_folder`
/// without anyone remembering to add it to `RUN_FOLDER_NAMES`.
#[test]
fn the_run_folder_check_watches_every_name_report_files_declares() {
    let files = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/report/files.rs");
    let text = std::fs::read_to_string(files).unwrap();
    let unwatched: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter(|l| l.contains(": &str"))
        .filter_map(|l| l.split(':').next())
        .filter(|name| {
            !RUN_FOLDER_NAMES
                .iter()
                .any(|n| n.trim_start_matches("files::") == *name)
                && !NOT_WATCHED.iter().any(|(n, _)| n == name)
        })
        .collect();
    assert!(
        unwatched.is_empty(),
        "add these report::files names to RUN_FOLDER_NAMES (or to NOT_WATCHED with a reason): {unwatched:?}"
    );
}
