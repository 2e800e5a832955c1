//! The page around the data: head and policy, the summary, the charts, the task table's
//! frame and the scripts. The static parts are HTML written here (escaped); the table
//! and transcripts are JSON the script turns into text nodes.

use std::fmt::Write as _;
use std::path::Path;

use super::summary::{self, Figures};
use super::{charts, script_json, table, TRANSCRIPTS};
use crate::report::{ResultRow, RunJson, VariantSummary};
use crate::text::html;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// What the page is made of.
pub(super) struct Parts<'a> {
    pub dir: &'a Path,
    pub run: Option<&'a RunJson>,
    pub rows: &'a [ResultRow],
    pub variants: Option<&'a [VariantSummary]>,
    /// Each task's transcript as script-safe JSON, or None when they are beside the page.
    pub transcripts: Option<&'a [String]>,
    /// Else each task's view id and the chunk beside the page that holds it.
    pub lazy: Option<&'a [(String, u32)]>,
    pub warnings: &'a [String],
}

/// The whole page.
pub(super) fn page(p: &Parts) -> String {
    let run_id = p
        .run
        .map(|r| r.run_id.clone())
        .or_else(|| {
            // `agentbatch report .` names the folder by its real name, not ".".
            let dir = p.dir.canonicalize().unwrap_or_else(|_| p.dir.to_path_buf());
            dir.file_name().map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let mut s = String::with_capacity(64 * 1024 + p.rows.len() * 160);
    s.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline' 'self'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"icon\" href=\"data:,\">\n",
    );
    let _ = writeln!(s, "<title>agentbatch run {}</title>", html(&run_id));
    let _ = writeln!(s, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(
        s,
        "<header><h1>agentbatch run <code>{}</code></h1>",
        html(&run_id)
    );
    if let Some(r) = p.run {
        let _ = writeln!(
            s,
            "<p class=\"note\">Job <code>{}</code> ({}) · agentbatch {} · started {} · {}{}</p>",
            html(&r.job_name),
            html(&r.job_file),
            html(&r.agentbatch_version),
            html(&r.started_at),
            html(match r.status.as_deref() {
                // Only a page written from outside the run sees this: the run's own
                // page is written after run.json says how it ended.
                Some("running") =>
                    "running, or killed before it finished (run --resume continues it)",
                Some(status) => status,
                None => "status unknown",
            }),
            r.finished_at
                .as_deref()
                .map_or(String::new(), |f| format!(" {}", html(f)))
        );
    }
    s.push_str("</header>\n<h2>Summary</h2>\n");
    let figures = Figures::of(p.rows);
    s.push_str(&summary::table(&figures, p.variants));
    if let Some(v) = p.variants {
        s.push_str(&summary::variants_table(v));
    }
    s.push_str("<h2>Charts</h2>\n");
    s.push_str(&charts::all(&figures));
    if !p.warnings.is_empty() {
        s.push_str("<h2>Warnings</h2>\n<ul class=\"warn\">\n");
        for w in p.warnings {
            let _ = writeln!(s, "<li>{}</li>", html(w));
        }
        s.push_str("</ul>\n");
    }
    s.push_str(TASKS);
    let _ = writeln!(
        s,
        "<script id=\"ab-table\" type=\"application/json\">{}</script>",
        script_json(&table::data(p.rows))
    );
    match p.transcripts {
        Some(all) => {
            s.push_str("<script id=\"ab-transcripts\" type=\"application/json\">[");
            s.push_str(&all.join(","));
            s.push_str("]</script>\n");
        }
        None => {
            let (ids, chunks): (Vec<&str>, Vec<u32>) = p
                .lazy
                .unwrap_or_default()
                .iter()
                .map(|(id, n)| (id.as_str(), *n))
                .unzip();
            let _ = writeln!(
                s,
                "<script id=\"ab-lazy\" type=\"application/json\" data-dir=\"{TRANSCRIPTS}\">{}</script>",
                script_json(&serde_json::json!({ "ids": ids, "chunks": chunks }))
            );
        }
    }
    let _ = writeln!(s, "<script>{SCRIPT}</script>\n</body>\n</html>");
    s
}

/// The task table's frame; the script fills it.
const TASKS: &str = "<h2>Tasks</h2>\n\
<noscript><p class=\"warn\">The task table and transcripts need JavaScript.</p></noscript>\n\
<div id=\"filters\">\
<label>outcome <select id=\"f-outcome\"><option value=\"\">all</option></select></label>\
<label>stop reason <select id=\"f-stop\"><option value=\"\">all</option></select></label>\
<label>team <select id=\"f-team\"><option value=\"\">all</option></select></label>\
<label>variant <select id=\"f-variant\"><option value=\"\">all</option></select></label>\
<label>task id <input id=\"f-text\" type=\"search\" placeholder=\"contains...\"></label>\
<span id=\"count\" class=\"note\"></span></div>\n\
<div class=\"table-wrap\"><table id=\"tasks\"><thead><tr></tr></thead><tbody></tbody></table></div>\n\
<div id=\"pager\"><button id=\"prev\" type=\"button\">previous</button><span id=\"page-info\"></span>\
<button id=\"next\" type=\"button\">next</button><span class=\"note\">Click a task to see its transcript.</span></div>\n\
<section id=\"transcript\" hidden></section>\n";
