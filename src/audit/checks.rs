//! The four checks over the walked turns. A fault of the model (an undeclared tool, a
//! broken call) is a violation only when the runner let it through; answered with an
//! error result, or never run because the task stopped, it is a warning. A fault of the
//! runner (a call without a decision, a result missing, orphaned, doubled or out of
//! place) is always a violation.

use std::collections::HashMap;

use super::walk::{
    results_of, Args, Call, Decision, Declared, Followup, Rejected, Returned, Segment, Walked,
};
use super::{AuditReport, Problem, ProblemKind, Severity};

/// What became of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Every decision on it ended in an error result (refused, unreadable, failed, cut
    /// off): the model was told.
    Errored,
    /// Run, and answered as a success.
    Ran,
    /// No decision, and no request followed: the task stopped first.
    NotRun,
    /// No decision, yet the conversation went on.
    Undecided,
}

impl Fate {
    fn severity(self) -> Severity {
        match self {
            Fate::Errored | Fate::NotRun => Severity::Warning,
            Fate::Ran | Fate::Undecided => Severity::Violation,
        }
    }

    fn said(self) -> &'static str {
        match self {
            Fate::Errored => "the runner answered it with an error result",
            Fate::Ran => "yet the runner ran it",
            Fate::NotRun => "it was not run (the task stopped after this response)",
            Fate::Undecided => "and the runner recorded no decision on it",
        }
    }
}

fn fate(decisions: &[&Decision], conversation_went_on: bool) -> Fate {
    if decisions.is_empty() {
        if conversation_went_on {
            Fate::Undecided
        } else {
            Fate::NotRun
        }
    } else if decisions.iter().all(|d| d.is_error || d.interrupted) {
        Fate::Errored
    } else {
        Fate::Ran
    }
}

struct Out<'a> {
    report: &'a mut AuditReport,
}

impl Out<'_> {
    fn add(
        &mut self,
        turn: u32,
        call_id: Option<&str>,
        kind: ProblemKind,
        severity: Severity,
        line: usize,
        message: String,
    ) {
        self.report.push(Problem {
            turn: Some(turn),
            call_id: call_id.map(str::to_string),
            kind,
            severity,
            message,
            line: Some(line),
        });
    }
}

/// The declared names for a message; long MCP lists are cut short.
fn declared_list(d: &Declared) -> String {
    const SHOWN: usize = 12;
    if d.names.is_empty() {
        return "none".into();
    }
    let mut list: Vec<&str> = d.names.iter().take(SHOWN).map(String::as_str).collect();
    let rest = d.names.len().saturating_sub(SHOWN);
    let more = format!("and {rest} more");
    if rest > 0 {
        list.push(&more);
    }
    list.join(", ")
}

/// Checks 1 and 2 on one call: what the model sent. `severity` says how bad a fault of
/// this call is, `said` what became of it.
fn model_faults(
    out: &mut Out,
    turn: u32,
    line: usize,
    call: &Call,
    declared: Option<&Declared>,
    severity: Severity,
    said: &str,
) {
    let id = call.id.as_deref();
    if let (Some(d), Some(name)) = (declared, call.name.as_deref()) {
        if !d.names.contains(name) {
            out.add(
                turn,
                id,
                ProblemKind::UndeclaredTool,
                severity,
                line,
                format!(
                    "the model called \"{name}\", which this turn's request did not declare (declared: {}); {said}",
                    declared_list(d)
                ),
            );
        }
    }
    if call.name.is_none() {
        out.add(
            turn,
            id,
            ProblemKind::MalformedCall,
            severity,
            line,
            format!("the call names no tool; {said}"),
        );
    }
    if let Args::Bad(why) = &call.args {
        out.add(
            turn,
            id,
            ProblemKind::MalformedCall,
            severity,
            line,
            format!("{why}; {said}"),
        );
    }
}

/// Ids that occur more than once among the calls.
fn repeated(calls: &[Call]) -> HashMap<&str, usize> {
    let mut n: HashMap<&str, usize> = HashMap::new();
    for c in calls {
        if let Some(id) = c.id.as_deref() {
            *n.entry(id).or_default() += 1;
        }
    }
    n.retain(|_, k| *k > 1);
    n
}

fn check_segment(out: &mut Out, w: &Walked, seg: &Segment) {
    let turn = seg.turn;
    let went_on = seg.next.is_some();
    let mut by_id: HashMap<&str, Vec<&Decision>> = HashMap::new();
    for d in &seg.decisions {
        if let Some(id) = d.id.as_deref() {
            by_id.entry(id).or_default().push(d);
        }
    }
    let returned = match (w.protocol, &seg.next) {
        (Some(p), Some(f)) => results_of(p, &f.messages),
        _ => Vec::new(),
    };
    let mut results: HashMap<&str, Vec<_>> = HashMap::new();
    for r in &returned {
        if let Some(id) = r.id.as_deref() {
            results.entry(id).or_default().push(r);
        }
    }
    let dup = repeated(&seg.calls);
    let mut reported_dup = Vec::new();
    for call in &seg.calls {
        let Some(id) = call.id.as_deref() else {
            idless_call(out, seg, call, went_on);
            continue;
        };
        let decisions = by_id.get(id).cloned().unwrap_or_default();
        let f = fate(&decisions, went_on);
        model_faults(
            out,
            turn,
            seg.line,
            call,
            seg.declared.as_ref(),
            f.severity(),
            f.said(),
        );
        if call.id_made_up {
            out.add(
                turn,
                Some(id),
                ProblemKind::MalformedCall,
                Severity::Warning,
                seg.line,
                "the call came without an id, or with the id of an earlier call of the response; the runner gave it this one".into(),
            );
        }
        if let Some(n) = dup.get(id) {
            if !reported_dup.contains(&id) {
                reported_dup.push(id);
                let severity = if went_on || !decisions.is_empty() {
                    Severity::Violation
                } else {
                    Severity::Warning
                };
                let message = format!(
                    "{n} calls of this response share the id, so their results cannot be told apart"
                );
                let kind = ProblemKind::DuplicateCallId;
                out.add(turn, Some(id), kind, severity, seg.line, message);
            }
            continue;
        }
        check_decision(out, w, seg, id, &decisions);
        if let Some(next) = &seg.next {
            let rs = results.get(id).cloned().unwrap_or_default();
            check_results(out, turn, id, next, &rs);
        }
    }
    stray_decisions(out, seg);
    if let Some(next) = &seg.next {
        let context = format!(
            "turn {}'s request carries a result for an id that turn {turn}'s response never called",
            next.turn
        );
        orphans(out, turn, &returned, &context, |id| {
            seg.calls.iter().any(|c| c.id.as_deref() == Some(id))
        });
    }
}

/// A call without an id: no result can be matched to it.
fn idless_call(out: &mut Out, seg: &Segment, call: &Call, went_on: bool) {
    let (severity, said) = if went_on {
        (Severity::Violation, "yet the conversation went on")
    } else {
        (
            Severity::Warning,
            "it was not run (the task stopped after this response)",
        )
    };
    model_faults(
        out,
        seg.turn,
        seg.line,
        call,
        seg.declared.as_ref(),
        severity,
        said,
    );
    out.add(
        seg.turn,
        None,
        ProblemKind::MalformedCall,
        severity,
        seg.line,
        format!(
            "a call to \"{}\" has no id, so no result can be matched to it; {said}",
            call.name.as_deref().unwrap_or("?")
        ),
    );
}

/// Decisions the runner recorded on calls the response did not make.
fn stray_decisions(out: &mut Out, seg: &Segment) {
    for d in &seg.decisions {
        let known =
            d.id.as_deref()
                .is_some_and(|id| seg.calls.iter().any(|c| c.id.as_deref() == Some(id)));
        if !known {
            out.add(
                seg.turn,
                d.id.as_deref(),
                ProblemKind::StrayDecision,
                Severity::Violation,
                d.line,
                format!("the runner recorded a decision on a call that turn {turn}'s response did not make", turn = seg.turn),
            );
        }
    }
}

/// Check 3 on one call: exactly one decision, or none when the task stopped first.
fn check_decision(out: &mut Out, w: &Walked, seg: &Segment, id: &str, decisions: &[&Decision]) {
    let turn = seg.turn;
    let (severity, line, message) = match decisions {
        [] => match (&seg.next, seg.started.iter().find(|(s, _)| s == id)) {
            (Some(next), _) => (
                Severity::Violation,
                seg.line,
                format!(
                    "no decision recorded (no tool_result event), yet turn {}'s request went out",
                    next.turn
                ),
            ),
            (None, Some((_, started))) if w.finished => (
                Severity::Violation,
                *started,
                "the runner started the call but recorded no outcome".to_string(),
            ),
            (None, Some((_, started))) => (
                Severity::Warning,
                *started,
                "the transcript ends before this call was decided (the run was killed?)"
                    .to_string(),
            ),
            (None, None) => return,
        },
        [d] if d.decision.is_none() && !d.interrupted => (
            Severity::Violation,
            d.line,
            "the runner recorded an outcome without a decision (allow, deny or invalid)"
                .to_string(),
        ),
        [_] => return,
        [_, second, ..] => {
            let message = format!(
                "decided {} times (one tool_result event per call)",
                decisions.len()
            );
            let kind = ProblemKind::DuplicateDecision;
            out.add(
                turn,
                Some(id),
                kind,
                Severity::Violation,
                second.line,
                message,
            );
            return;
        }
    };
    out.add(
        turn,
        Some(id),
        ProblemKind::NoDecision,
        severity,
        line,
        message,
    );
}

/// Check 4 on one call: one result under its id in the next request, in its place.
fn check_results(out: &mut Out, turn: u32, id: &str, next: &Followup, rs: &[&Returned]) {
    let violation = Severity::Violation;
    match rs {
        [] => {
            let message = format!(
                "turn {}'s request carries no result for this call",
                next.turn
            );
            out.add(
                turn,
                Some(id),
                ProblemKind::MissingResult,
                violation,
                next.line,
                message,
            );
        }
        [_] => {}
        [_, second, ..] => {
            let message = format!(
                "turn {}'s request carries {} results for this call",
                next.turn,
                rs.len()
            );
            let kind = ProblemKind::DuplicateResult;
            out.add(turn, Some(id), kind, violation, second.line, message);
        }
    }
    for r in rs {
        if let Some(why) = &r.misplaced {
            let message = format!("the result is {why}");
            out.add(
                turn,
                Some(id),
                ProblemKind::MisplacedResult,
                violation,
                r.line,
                message,
            );
        }
    }
}

/// Results whose id no call of the answered response has; `context` says which request
/// and response.
fn orphans(
    out: &mut Out,
    turn: u32,
    returned: &[Returned],
    context: &str,
    called: impl Fn(&str) -> bool,
) {
    for r in returned {
        match r.id.as_deref() {
            Some(id) if called(id) => {}
            id => out.add(
                turn,
                id,
                ProblemKind::OrphanResult,
                Severity::Violation,
                r.line,
                match id {
                    Some(_) => context.to_string(),
                    None => "a result without a call id".to_string(),
                },
            ),
        }
    }
}

fn check_rejected(out: &mut Out, r: &Rejected) {
    let said = format!("the runner refused the response ({})", r.why);
    for call in &r.calls {
        model_faults(
            out,
            r.turn,
            r.line,
            call,
            r.declared.as_ref(),
            Severity::Warning,
            &said,
        );
        if call.id.is_none() || call.id_made_up {
            out.add(
                r.turn,
                call.id.as_deref().filter(|_| call.id_made_up),
                ProblemKind::MalformedCall,
                Severity::Warning,
                r.line,
                format!("the call has no id; {said}"),
            );
        }
    }
    for (id, n) in repeated(&r.calls) {
        out.add(
            r.turn,
            Some(id),
            ProblemKind::DuplicateCallId,
            Severity::Warning,
            r.line,
            format!("{n} calls of this response share the id; {said}"),
        );
    }
}

/// Runs the checks over the walked transcript, adding what they find to `report`.
/// A summary's answer: its calls are not run (the request asked for none), which is
/// worth a note, not a violation.
fn summary_calls(out: &mut Out, seg: &Segment) {
    for c in &seg.calls {
        out.report.push(Problem {
            turn: Some(seg.turn),
            call_id: c.id.clone(),
            kind: ProblemKind::Compaction,
            severity: Severity::Warning,
            message: "the model called a tool in its answer to a summary request; the runner does not run such calls".into(),
            line: Some(seg.line),
        });
    }
}

pub(super) fn check(w: &Walked, report: &mut AuditReport) {
    let mut out = Out { report };
    if let Some(line) = w.unknown_protocol {
        out.report.push(Problem {
            turn: None,
            call_id: None,
            kind: ProblemKind::Transcript,
            severity: Severity::Warning,
            message: "cannot tell the wire protocol (no request says it, and the response has no known shape): its calls were not checked".into(),
            line: Some(line),
        });
    }
    if w.undeclared_unknown {
        out.report.push(Problem {
            turn: None,
            call_id: None,
            kind: ProblemKind::Transcript,
            severity: Severity::Warning,
            message:
                "no event says which tools were declared: the tools-declared check was skipped"
                    .into(),
            line: None,
        });
    }
    if let (Some(p), Some(f)) = (w.protocol, &w.before_first) {
        let context = format!(
            "turn {}'s request carries a result, but no response had called a tool yet",
            f.turn
        );
        orphans(
            &mut out,
            f.turn,
            &results_of(p, &f.messages),
            &context,
            |_| false,
        );
    }
    for (line, turn, said) in &w.usage_clamped {
        out.report.push(Problem {
            turn: (*turn > 0).then_some(*turn),
            call_id: None,
            kind: ProblemKind::Usage,
            severity: Severity::Warning,
            message: format!("the provider's usage figures were not billed as sent: {said}"),
            line: Some(*line),
        });
    }
    for d in &w.loose_decisions {
        out.report.push(Problem {
            turn: None,
            call_id: d.id.clone(),
            kind: ProblemKind::StrayDecision,
            severity: Severity::Violation,
            message: "the runner recorded a decision before any response called a tool".into(),
            line: Some(d.line),
        });
    }
    // Rejected responses come before the accepted answer of the same turn.
    let mut rejected = w.rejected.iter().peekable();
    for seg in &w.segments {
        while let Some(r) = rejected.next_if(|r| r.line < seg.line) {
            check_rejected(&mut out, r);
        }
        if w.summary_turns.contains(&seg.turn) {
            summary_calls(&mut out, seg);
            continue;
        }
        check_segment(&mut out, w, seg);
    }
    for r in rejected {
        check_rejected(&mut out, r);
    }
}
