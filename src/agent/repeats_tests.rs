use serde_json::json;

use super::*;

fn call(name: &str, input: Value) -> ToolCall {
    ToolCall {
        id: format!("id-{name}"),
        name: name.to_string(),
        input,
        input_error: None,
    }
}

fn result(content: &str, is_error: bool) -> ToolResult {
    ToolResult {
        id: "r".to_string(),
        content: content.to_string(),
        is_error,
        images: Vec::new(),
    }
}

/// One single-call turn.
fn turn(name: &str, input: Value, got: &str) -> (Fingerprint, Vec<String>) {
    (
        turn_fingerprint(&[call(name, input)], &[result(got, false)]),
        vec![name.to_string()],
    )
}

fn play(r: &mut Repeats, turns: &[(Fingerprint, Vec<String>)]) -> Vec<Verdict> {
    turns
        .iter()
        .map(|(f, t)| r.observe(*f, t.clone()))
        .collect()
}

fn kinds(v: &[Verdict]) -> String {
    v.iter()
        .map(|v| match v {
            Verdict::Fine => '.',
            Verdict::Warn(_) => 'W',
            Verdict::Stop(_) => 'S',
        })
        .collect()
}

#[test]
fn keys_are_sorted_at_every_depth() {
    let mut a = String::new();
    canonical_json(
        &json!({"b": 1, "a": {"y": [1, {"q": 2, "p": 1}], "x": "s"}}),
        &mut a,
    );
    assert_eq!(a, r#"{"a":{"x":"s","y":[1,{"p":1,"q":2}]},"b":1}"#);
    let x = turn("edit", json!({"path": "a", "old": "x"}), "ok").0;
    let y = turn("edit", json!({"old": "x", "path": "a"}), "ok").0;
    assert_eq!(x, y, "key order is not a different call");
}

#[test]
fn the_call_id_is_not_part_of_the_call_but_everything_else_is() {
    let base = turn_fingerprint(&[call("read", json!({"p": 1}))], &[result("x", false)]);
    let mut other_id = call("read", json!({"p": 1}));
    other_id.id = "another".into();
    assert_eq!(turn_fingerprint(&[other_id], &[result("x", false)]), base);
    for (c, r) in [
        (call("read2", json!({"p": 1})), result("x", false)),
        (call("read", json!({"p": 2})), result("x", false)),
        (call("read", json!({"p": 1})), result("y", false)),
        (call("read", json!({"p": 1})), result("x", true)),
    ] {
        assert_ne!(turn_fingerprint(&[c], &[r]), base);
    }
}

#[test]
fn parallel_calls_are_one_step_whatever_their_order() {
    let a = (call("read", json!({"p": "a"})), result("A", false));
    let b = (call("read", json!({"p": "b"})), result("B", false));
    let ab = turn_fingerprint(&[a.0.clone(), b.0.clone()], &[a.1.clone(), b.1.clone()]);
    let ba = turn_fingerprint(&[b.0.clone(), a.0.clone()], &[b.1.clone(), a.1.clone()]);
    assert_eq!(ab, ba);
    assert_ne!(
        ab,
        turn_fingerprint(std::slice::from_ref(&a.0), std::slice::from_ref(&a.1))
    );
    // Two parallel calls are not two repeats of each other.
    let twice = turn_fingerprint(&[a.0.clone(), a.0.clone()], &[a.1.clone(), a.1.clone()]);
    let mut r = Repeats::new(Some(2));
    assert_eq!(
        r.observe(twice, vec!["read".into(), "read".into()]),
        Verdict::Fine
    );
}

#[test]
fn the_same_call_with_the_same_result_warns_at_the_limit_then_stops() {
    let mut r = Repeats::new(Some(3));
    let a = turn("read_file", json!({"path": "a.txt"}), "hello");
    let v = play(&mut r, &[a.clone(), a.clone(), a.clone(), a.clone()]);
    assert_eq!(kinds(&v), "..WS");
    let Verdict::Warn(w) = &v[2] else {
        unreachable!()
    };
    assert_eq!((w.period, w.times()), (1, 3));
    assert!(
        w.note().contains("(read_file) 3 times in a row"),
        "{}",
        w.note()
    );
    let Verdict::Stop(s) = &v[3] else {
        unreachable!()
    };
    assert_eq!(s.times(), 4);
    assert_eq!(
        s.detail(3),
        "made the same call (read_file) with the same result 4 times in a row, after a warning at 3 (limits.max_repeats)"
    );
}

#[test]
fn the_same_call_with_different_results_is_never_a_repeat() {
    let mut r = Repeats::new(Some(2));
    let turns: Vec<_> = (0..20)
        .map(|i| turn("get_time", json!({}), &format!("12:00:{i:02}")))
        .collect();
    assert_eq!(kinds(&play(&mut r, &turns)), ".".repeat(20));
}

#[test]
fn cycles_of_two_and_three_turns_are_caught() {
    let a = turn(
        "edit_file",
        json!({"path": "a", "old": "x", "new": "x"}),
        "edited",
    );
    let b = turn("read_file", json!({"path": "a"}), "x");
    let c = turn("list_files", json!({}), "a");
    let mut r = Repeats::new(Some(3));
    let two: Vec<_> = [&a, &b]
        .iter()
        .cycle()
        .take(7)
        .map(|t| (*t).clone())
        .collect();
    let v = play(&mut r, &two);
    assert_eq!(kinds(&v), ".....WS");
    let Verdict::Warn(w) = &v[5] else {
        unreachable!()
    };
    assert_eq!((w.period, w.times()), (2, 3));
    assert_eq!(w.tool_list(), "edit_file, then read_file");
    let Verdict::Stop(s) = &v[6] else {
        unreachable!()
    };
    assert!(s
        .detail(3)
        .contains("2-turn cycle (read_file, then edit_file)"));
    assert!(s.detail(3).contains("for 7 turns"), "{}", s.detail(3));

    let mut r = Repeats::new(Some(3));
    let three: Vec<_> = [&a, &b, &c]
        .iter()
        .cycle()
        .take(10)
        .map(|t| (*t).clone())
        .collect();
    let v = play(&mut r, &three);
    assert_eq!(kinds(&v), "........WS");
    let Verdict::Warn(w) = &v[8] else {
        unreachable!()
    };
    assert_eq!((w.period, w.times()), (3, 3));
}

#[test]
fn a_different_step_resets_the_count_and_the_warning() {
    let a = turn("read_file", json!({"path": "a"}), "x");
    let b = turn("read_file", json!({"path": "b"}), "y");
    let mut r = Repeats::new(Some(3));
    let v = play(
        &mut r,
        &[
            a.clone(),
            a.clone(),
            b.clone(),
            a.clone(),
            a.clone(),
            a.clone(),
        ],
    );
    assert_eq!(kinds(&v), ".....W", "b broke the run of a");
    // After a warning, a different step instead of a stop, then the count starts over.
    let v = play(
        &mut r,
        &[b.clone(), a.clone(), a.clone(), a.clone(), a.clone()],
    );
    assert_eq!(kinds(&v), "...WS");
}

#[test]
fn off_never_warns_nor_stops() {
    let a = turn("read_file", json!({"path": "a"}), "x");
    for max in [None, Some(0), Some(1)] {
        let mut r = Repeats::new(max);
        let v = play(&mut r, &vec![a.clone(); 30]);
        assert_eq!(kinds(&v), ".".repeat(30), "{max:?}");
    }
}

#[test]
fn a_long_limit_counts_past_the_window() {
    let a = turn("read_file", json!({"path": "a"}), "x");
    let mut r = Repeats::new(Some(50));
    let v = play(&mut r, &vec![a.clone(); 51]);
    assert_eq!(kinds(&v), format!("{}WS", ".".repeat(49)));
}
