//! The marker the simulated model's summaries (and the Responses API's compaction
//! items) carry: how many script steps they cover and the call ids of the last one, so
//! a later request's kept turns are placed by them.

const MARK: &str = "[agentbatch-sim summary: steps=";
const CALLS: &str = " calls=";

/// The marker a summary (or a compaction item) carries.
pub(super) fn marker_text(steps: usize, calls: &[&str]) -> String {
    format!("{MARK}{steps}{CALLS}{}]", calls.join(","))
}

/// Reads a marker: the steps a summary covers and the last step's call ids.
pub(super) fn marker(text: &str) -> Option<(usize, Vec<&str>)> {
    let rest = &text[text.find(MARK)? + MARK.len()..];
    let (steps, rest) = rest.split_once(CALLS)?;
    let calls = rest.split_once(']')?.0;
    let calls = calls.split(',').filter(|c| !c.is_empty()).collect();
    Some((steps.parse().ok()?, calls))
}
