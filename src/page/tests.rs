use serde_json::{json, Value};

use super::*;

#[test]
fn script_json_cannot_close_its_script_and_reads_back_the_same() {
    let v = json!({"t": "</script><img src=x onerror=alert(1)> & \u{2028}\u{2029} <!--"});
    let s = script_json(&v);
    for bad in ["<", ">", "&", "\u{2028}", "\u{2029}"] {
        assert!(!s.contains(bad), "{bad:?} in {s}");
    }
    assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v);
}

#[test]
fn transcript_paths_stay_inside_the_run_folder() {
    let d = Path::new("/runs/r");
    assert_eq!(
        inside(d, "transcripts/a.jsonl"),
        Some(d.join("transcripts/a.jsonl"))
    );
    for bad in [
        "",
        "/etc/passwd",
        "../x.jsonl",
        "transcripts/../../x",
        "./a",
    ] {
        assert_eq!(inside(d, bad), None, "{bad}");
    }
}

#[test]
fn a_cut_off_transcript_with_unknown_events_still_reads_by_turn() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.jsonl");
    let lines = [
        r#"{"ts":"x","t_ms":0,"event":"task_start","task":"t","tools":["get_time"],"policy":["deny bash(rm*)"]}"#,
        r#"{"ts":"x","t_ms":1,"event":"request","turn":1,"attempt":1,"new_messages":[{"role":"user","content":"go"}],"params":{"tools":[{"name":"get_time"},{"name":"bash"}]}}"#,
        r#"{"ts":"x","t_ms":2,"event":"response","turn":1,"ms":5,"body":{"content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"c1","name":"bash","input":{}}],"stop_reason":"tool_use"}}"#,
        r#"{"ts":"x","t_ms":3,"event":"tool_call","turn":1,"id":"c1","name":"bash","input":{"command":"rm -rf /"}}"#,
        r#"{"ts":"x","t_ms":4,"event":"tool_result","turn":1,"id":"c1","name":"bash","decision":"deny","rule":"bash(rm*)","is_error":true,"content":"denied"}"#,
        r#"{"ts":"x","t_ms":5,"event":"from_the_future","turn":2}"#,
        r#"{"ts":"x","t_ms":6,"event":"request","turn":2,"attempt":1,"new_messages":[]}"#,
    ];
    std::fs::write(
        &p,
        format!("{}\n{{\"ts\":\"x\",\"t_ms\":7,\"ev", lines.join("\n")),
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&transcript::view(&p, "transcripts/t.jsonl")).unwrap();
    assert_eq!(
        (v["cut"].clone(), v["skipped"].clone()),
        (json!(true), json!(1))
    );
    let sections = v["sections"].as_array().unwrap();
    let turns: Vec<u64> = sections
        .iter()
        .map(|s| s["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [0, 1, 2]);
    assert_eq!(sections[0]["declared"], json!(["get_time"]));
    assert_eq!(sections[1]["declared"], json!(["get_time", "bash"]));
    let kinds: Vec<&str> = sections[1]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["k"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["request", "response", "call", "result", "ev"]);
    let result = &sections[1]["items"][3];
    assert_eq!(
        (&result["decision"], &result["rule"]),
        (&json!("deny"), &json!("bash(rm*)"))
    );
    assert_eq!(sections[1]["items"][1]["thinking"], json!(["hm"]));
}

/// Bytes that are not UTF-8 lose their own line only: one in the middle is skipped, and
/// a last line cut inside a character by a kill reads as cut (both once stopped the
/// whole transcript at that line).
#[test]
fn bytes_that_are_not_utf8_lose_only_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.jsonl");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(
        br#"{"ts":"x","t_ms":0,"event":"request","turn":1,"attempt":1,"new_messages":[]}"#,
    );
    bytes.extend_from_slice(b"\n\xff\xfe binary \x80\n");
    bytes.extend_from_slice(
        br#"{"ts":"x","t_ms":2,"event":"request","turn":2,"attempt":1,"new_messages":[]}"#,
    );
    bytes.push(b'\n');
    bytes.extend_from_slice(
        "{\"ts\":\"x\",\"t_ms\":3,\"event\":\"ledger_error\",\"error\":\"日".as_bytes(),
    );
    bytes.pop();
    std::fs::write(&p, bytes).unwrap();
    let v: Value = serde_json::from_slice(&transcript::view(&p, "transcripts/t.jsonl")).unwrap();
    assert_eq!(
        (v["cut"].clone(), v["skipped"].clone()),
        (json!(true), json!(1))
    );
    let turns: Vec<u64> = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [1, 2]);
}

#[test]
fn a_folder_without_results_is_not_a_run_folder_and_a_bad_row_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let e = write(dir.path(), &PageOptions::default()).unwrap_err();
    assert!(e.to_string().contains("is not a run folder"), "{e}");
    assert_eq!(e.exit_code(), 2);
    std::fs::write(
        dir.path().join("results.csv"),
        "task_id,outcome,turns\na,pass,x\nb,pass,1\n",
    )
    .unwrap();
    let e = write(dir.path(), &PageOptions::default()).unwrap_err();
    assert!(e.to_string().contains("results.csv:2:"), "{e}");
}

/// A rewrite that fails leaves the page before it whole: its transcripts beside it were
/// once removed first, so a failed write left a page whose every transcript failed to
/// load. A stray file where the transcripts go does not stop a write either.
#[test]
fn a_failed_rewrite_keeps_the_page_before_it_and_its_transcripts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("results.csv"),
        "task_id,outcome,turns\na,pass,1\nb,fail,2\n",
    )
    .unwrap();
    let lazy = PageOptions {
        inline_tasks: 0,
        ..PageOptions::default()
    };
    let count = |p: &Path| std::fs::read_dir(p).map_or(0, |r| r.count());
    assert!(write(d, &lazy).unwrap().lazy);
    // Both views in one chunk.
    assert_eq!(count(&d.join(TRANSCRIPTS)), 1);
    let before = std::fs::read(d.join(PAGE)).unwrap();
    // The page cannot be written: a folder stands where its temporary file goes.
    std::fs::create_dir(d.join("report.html.tmp")).unwrap();
    assert!(write(d, &lazy).is_err());
    assert!(write(d, &PageOptions::default()).is_err());
    assert_eq!(count(&d.join(TRANSCRIPTS)), 1);
    assert_eq!(std::fs::read(d.join(PAGE)).unwrap(), before);
    assert!(!d.join(format!("{TRANSCRIPTS}.new")).exists());
    std::fs::remove_dir(d.join("report.html.tmp")).unwrap();
    // Inline again: the transcripts beside the page go; a stray file there too.
    assert!(!write(d, &PageOptions::default()).unwrap().lazy);
    assert!(!d.join(TRANSCRIPTS).exists());
    std::fs::write(d.join(TRANSCRIPTS), "stray").unwrap();
    assert!(write(d, &lazy).unwrap().lazy);
    assert_eq!(count(&d.join(TRANSCRIPTS)), 1);
    std::fs::write(d.join(format!("{TRANSCRIPTS}.old")), "stray").unwrap();
    assert!(write(d, &lazy).unwrap().lazy);
    assert!(!d.join(format!("{TRANSCRIPTS}.old")).exists());
}
