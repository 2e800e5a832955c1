//! What a transcript says its task spent. A task that did not end on its own (killed
//! with the process, or whose code panicked) has no trustworthy cost of its own; its
//! transcript, written as it went, does.

use std::path::Path;

use rust_decimal::Decimal;

use crate::vocab::transcript::TranscriptEvent as E;

/// What a task cut off by a kill had spent, from its transcript: the last running
/// total (`spent_usd`), plus charges recorded after it, plus a reservation still in
/// flight (it may be billed).
pub fn spent_in_transcript(path: &Path) -> Decimal {
    crate::vocab::transcript::read_file(path).map_or(Decimal::ZERO, |t| spent_in_text(&t))
}

/// [`spent_in_transcript`] of a transcript already read.
pub fn spent_in_text(text: &str) -> Decimal {
    let (mut spent, mut pending) = (Decimal::ZERO, Decimal::ZERO);
    // Lines this version cannot read (cut off by the kill, or unknown) carry no money.
    for event in text.lines().filter_map(E::read) {
        match event {
            E::Reserve {
                spent_usd,
                reserved_usd,
                ..
            } => {
                spent = spent_usd.0;
                pending = reserved_usd.map(|r| r.0).unwrap_or_default();
            }
            E::Settle { spent_usd, .. } | E::BatchRecovered { spent_usd, .. } => {
                spent = spent_usd.0;
                pending = Decimal::ZERO;
            }
            // A pool's stop (`budget_stop`) carries the whole pool's spend, not the
            // task's: it changes nothing here.
            E::AttemptFailed { charged_usd, .. } | E::RequestAborted { charged_usd, .. } => {
                if let Some(c) = charged_usd {
                    spent += c.0;
                    pending = Decimal::ZERO;
                }
            }
            _ => {}
        }
    }
    spent + pending
}

/// The answers a task cut off by a kill paid for, by the digest of the request body
/// each answered, in order: a resume reuses them for the same requests instead of
/// buying them again. An answer counts once it was settled (or, left in a batch, found
/// again by the resume).
pub fn paid_answers(text: &str) -> Vec<(String, serde_json::Value)> {
    let mut paid = Vec::new();
    let (mut hash, mut answer) = (None, None);
    // Whether the newest paid answer is the current request's: an answer settled and
    // then failed (a failed generation that reported its usage) is not replayed, since
    // its replay would be a failure billed again.
    let mut settled_current = false;
    for event in text.lines().filter_map(E::read) {
        match event {
            E::Request { body_hash, .. } => {
                hash = body_hash;
                answer = None;
                settled_current = false;
            }
            E::Response { body, .. } => answer = body,
            E::AttemptFailed { .. } | E::RequestAborted { .. } => {
                answer = None;
                if std::mem::take(&mut settled_current) {
                    paid.pop();
                }
            }
            E::Settle { .. } => {
                if let (Some(h), Some(a)) = (hash.take(), answer.take()) {
                    paid.push((h, a));
                    settled_current = true;
                }
            }
            E::BatchRecovered {
                answer: Some(a), ..
            } => {
                if let Some(h) = hash.take() {
                    paid.push((h, a));
                }
            }
            _ => {}
        }
    }
    paid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_tasks_spend_counts_charges_and_the_request_in_flight() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let lines = [
            r#"{"event":"reserve","reserved_usd":"0.05","spent_usd":"0"}"#,
            r#"{"event":"settle","cost_usd":"0.01","spent_usd":"0.01"}"#,
            r#"{"event":"reserve","reserved_usd":"0.05","spent_usd":"0.01"}"#,
            r#"{"event":"attempt_failed","charged_usd":"0.05"}"#,
            r#"{"event":"reserve","reserved_usd":"0.04","spent_usd":"0.06"}"#,
            r#"{"event":"request"}"#,
        ];
        std::fs::write(&p, lines.join("\n")).unwrap();
        // 0.06 spent (0.01 settled + 0.05 charged), and 0.04 in flight at the kill.
        assert_eq!(spent_in_transcript(&p), "0.10".parse::<Decimal>().unwrap());
        std::fs::write(&p, lines[..4].join("\n")).unwrap();
        assert_eq!(spent_in_transcript(&p), "0.06".parse::<Decimal>().unwrap());
    }

    #[test]
    fn an_aborted_request_counts_and_lines_it_cannot_read_do_not() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let lines = [
            r#"{"event":"settle","cost_usd":"0.01","spent_usd":"0.01"}"#,
            r#"{"event":"reserve","reserved_usd":"0.05","spent_usd":"0.01"}"#,
            r#"{"event":"request_aborted","turn":2,"charged_usd":"0.05"}"#,
            r#"{"event":"from_the_future","spent_usd":"9"}"#,
            r#"{"event":"reserve","reserved_usd":"0.04","spe"#,
        ];
        std::fs::write(&p, lines.join("\n")).unwrap();
        // 0.01 settled + 0.05 aborted; the unknown line and the cut-off one count nothing.
        assert_eq!(spent_in_transcript(&p), "0.06".parse::<Decimal>().unwrap());
    }

    /// A kill during the write of a long line can cut it inside a character: the lines
    /// before it still count (read as text, the whole file was refused and the spend
    /// read as $0, so a resume under-counted what the killed run spent).
    #[test]
    fn a_last_line_cut_inside_a_character_loses_only_that_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let mut bytes = [
            r#"{"event":"settle","cost_usd":"0.01","spent_usd":"0.01"}"#,
            r#"{"event":"reserve","reserved_usd":"0.05","spent_usd":"0.01"}"#,
            "{\"event\":\"request\",\"note\":\"日本",
        ]
        .join("\n")
        .into_bytes();
        bytes.pop();
        std::fs::write(&p, bytes).unwrap();
        assert_eq!(spent_in_transcript(&p), "0.06".parse::<Decimal>().unwrap());
    }

    #[test]
    fn a_pools_stop_does_not_charge_the_task_the_pools_spend() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let lines = [
            r#"{"event":"reserve","reserved_usd":"0.05","spent_usd":"0"}"#,
            r#"{"event":"settle","cost_usd":"0.01","spent_usd":"0.01"}"#,
            r#"{"event":"budget_stop","pool":"team platform","cap_usd":"10","spent_usd":"9.99","left_usd":"0.01","reserved_by_others_usd":"0","smallest_request_usd":"0.02"}"#,
        ];
        std::fs::write(&p, lines.join("\n")).unwrap();
        assert_eq!(spent_in_transcript(&p), "0.01".parse::<Decimal>().unwrap());
    }

    #[test]
    fn only_settled_or_recovered_answers_are_paid_for() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let lines = [
            r#"{"event":"request","turn":1,"attempt":1,"body_hash":"a"}"#,
            r#"{"event":"response","turn":1,"body":{"n":1}}"#,
            r#"{"event":"settle","turn":1,"cost_usd":"0.01","spent_usd":"0.01"}"#,
            r#"{"event":"request","turn":2,"attempt":1,"body_hash":"b"}"#,
            r#"{"event":"response","turn":2,"body":{"n":2}}"#,
            r#"{"event":"attempt_failed","turn":2,"attempt":1}"#,
            r#"{"event":"request","turn":2,"attempt":2,"body_hash":"c"}"#,
            r#"{"event":"batch_joined","turn":2,"attempt":2,"batch_id":"x","custom_id":"t--2-2"}"#,
            r#"{"event":"batch_recovered","turn":2,"attempt":2,"batch_id":"x","custom_id":"t--2-2","result":"answered","cost_usd":"0.02","spent_usd":"0.03","answer":{"n":3}}"#,
            r#"{"event":"request","turn":3,"attempt":1,"body_hash":"e"}"#,
            r#"{"event":"response","turn":3,"body":{"n":5}}"#,
            r#"{"event":"settle","turn":3,"cost_usd":"0","spent_usd":"0.03"}"#,
            r#"{"event":"attempt_failed","turn":3,"attempt":1}"#,
            r#"{"event":"request","turn":3,"attempt":2,"body_hash":"d"}"#,
            r#"{"event":"response","turn":3,"body":{"n":4}}"#,
        ];
        std::fs::write(&p, lines.join("\n")).unwrap();
        let paid: Vec<(String, i64)> = paid_answers(&lines.join("\n"))
            .into_iter()
            .map(|(h, v)| (h, v["n"].as_i64().unwrap()))
            .collect();
        assert_eq!(paid, vec![("a".to_string(), 1), ("c".to_string(), 3)]);
        assert_eq!(spent_in_transcript(&p), "0.03".parse::<Decimal>().unwrap());
    }
}
