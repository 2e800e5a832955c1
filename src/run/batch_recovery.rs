//! A resume's first step for tasks a kill cut off in batch mode. Each request was
//! written to its task's transcript with its batch id (`batch_joined`) before its answer
//! was awaited, so the resume finds the batch again: it cancels it (what the provider
//! has not processed is then not billed) and reads its result, and what the request
//! was billed, nothing unless it was answered, replaces its reservation in the killed
//! attempt's spend (a `batch_recovered` event). The task itself runs again from its
//! start, as every task a kill cut off does.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use crate::job::{Plan, ProviderKind, TaskSpec};
use crate::model::batch::{BatchApi, Outcome};
use crate::vocab::transcript::{TranscriptEvent as E, Usd};

/// How long a resume waits for a cancelled batch to end before leaving the request's
/// reservation counted whole.
const WAIT: Duration = Duration::from_secs(60);

/// A request a kill left in a batch.
struct InFlight {
    turn: u32,
    attempt: u32,
    batch_id: String,
    custom_id: String,
    /// The task's spend before it (the last reservation's `spent_usd`).
    spent_before: rust_decimal::Decimal,
    /// What its reservation priced: the prompt bound and `max_tokens` (unbounded in a
    /// transcript without a reservation).
    bounds: (u64, u64),
}

/// What became of a request: its result, what it cost, the answer, and the usage
/// figures not taken as the provider sent them.
struct Settled {
    result: String,
    cost: rust_decimal::Decimal,
    answer: Option<serde_json::Value>,
    clamps: Vec<crate::model::Clamp>,
}

/// The request a transcript left waiting in a batch, if any.
fn in_flight(text: &str) -> Option<InFlight> {
    let mut spent = rust_decimal::Decimal::ZERO;
    let mut bounds = (u64::MAX, u64::MAX);
    let mut open = None;
    for event in text.lines().filter_map(E::read) {
        match event {
            E::Reserve {
                spent_usd,
                prompt_tokens_upper_bound,
                max_tokens,
                ..
            } => {
                spent = spent_usd.0;
                bounds = (prompt_tokens_upper_bound, u64::from(max_tokens));
            }
            E::BatchJoined {
                turn,
                attempt,
                batch_id,
                custom_id,
            } => {
                open = Some(InFlight {
                    turn,
                    attempt,
                    batch_id,
                    custom_id,
                    spent_before: spent,
                    bounds,
                })
            }
            E::Response { .. }
            | E::AttemptFailed { .. }
            | E::RequestAborted { .. }
            | E::BatchRecovered { .. } => open = None,
            _ => {}
        }
    }
    open
}

/// Finds, cancels and settles the requests the killed process left in batches, for
/// the tasks of `plan` with a transcript in `dir`; returns what it did, a line each.
/// Each batch is looked up once, and all of them at the same time.
pub(super) async fn recover(dir: &Path, plan: &Plan, run_id: &str) -> Vec<String> {
    let Ok(client) = crate::model::client(true) else {
        return Vec::new();
    };
    let mut waiting: Vec<(&TaskSpec, std::path::PathBuf, InFlight)> = Vec::new();
    // The tasks the job batches, and those of the others without a row: a task the job
    // no longer batches (`--force` after a change) may still have been cut off in a
    // batch, which is billed all the same; one with a row ended before the kill, and
    // reading every finished transcript for it would read the whole run twice.
    let ended: HashSet<(String, String, u32)> = crate::report::read_results(
        &dir.join(crate::report::files::RESULTS_CSV),
        &["task_id"],
        &["task_id"],
    )
    .map(|f| {
        f.rows
            .into_iter()
            .map(|r| (r.task_id, r.variant, r.epoch))
            .collect()
    })
    .unwrap_or_default();
    for spec in &plan.tasks {
        if spec.batch.is_none()
            && ended.contains(&(spec.task.clone(), spec.variant.clone(), spec.epoch))
        {
            continue;
        }
        let path = crate::report::files::transcript_path(dir, &spec.id);
        let Ok(text) = crate::vocab::transcript::read_file(&path) else {
            continue;
        };
        if !text.contains("\"batch_joined\"") {
            continue;
        }
        if let Some(item) = in_flight(&text) {
            waiting.push((spec, path, item));
        }
    }
    // One lookup per batch, by where its API is and its id.
    let mut batches: HashMap<(String, String), (BatchApi, Vec<usize>)> = HashMap::new();
    let mut notes = Vec::new();
    for (i, (spec, _, item)) in waiting.iter().enumerate() {
        match api_for(spec, &client, run_id) {
            Ok((base, api)) => {
                batches
                    .entry((base, item.batch_id.clone()))
                    .or_insert((api, Vec::new()))
                    .1
                    .push(i);
            }
            Err(why) => notes.push(format!(
                "task {}: its request in batch {} {why}; its reservation stays counted as spent",
                spec.id, item.batch_id
            )),
        }
    }
    let looked_up = futures::future::join_all(
        batches
            .into_iter()
            .map(|((_, id), (api, who))| async move { (who, api.recover(&id, WAIT).await) }),
    )
    .await;
    for (who, found) in looked_up {
        for i in who {
            let (spec, path, item) = &waiting[i];
            let settled = match &found {
                Err(e) => Err(format!("could not be looked up ({e})")),
                Ok(None) => Err(format!(
                    "had not ended {}s after it was cancelled",
                    WAIT.as_secs()
                )),
                Ok(Some(results)) => match results.iter().find(|(c, _)| *c == item.custom_id) {
                    None => Err("has no result in its batch".to_string()),
                    Some((_, outcome)) => settle(spec, item, outcome.clone()),
                },
            };
            notes.push(note(spec, path, item, settled));
        }
    }
    notes
}

/// The batch API of the task's provider, and the base it is under.
fn api_for(
    spec: &TaskSpec,
    client: &reqwest::Client,
    run_id: &str,
) -> Result<(String, BatchApi), String> {
    if spec.provider.kind == ProviderKind::Sim && spec.provider.base_url.is_none() {
        return Err("was in the killed run's own simulator, which is gone".into());
    }
    let endpoint = crate::agent::endpoint(spec, None, run_id)?;
    let base = crate::agent::batching::batch_base(spec, None, run_id);
    let api = BatchApi::new(client.clone(), &endpoint, &base)?;
    Ok((base, api))
}

/// Records what became of a request (a `batch_recovered` event), and says so.
fn note(spec: &TaskSpec, path: &Path, item: &InFlight, settled: Result<Settled, String>) -> String {
    let Settled {
        result,
        cost,
        answer,
        clamps,
    } = match settled {
        Ok(s) => s,
        Err(why) => {
            return format!(
                "task {}: its request in batch {} {why}; its reservation stays counted as spent",
                spec.id, item.batch_id
            )
        }
    };
    let clamped = (!clamps.is_empty()).then(|| E::UsageClamped {
        turn: item.turn,
        attempt: item.attempt,
        clamps,
    });
    let event = E::BatchRecovered {
        turn: item.turn,
        attempt: item.attempt,
        batch_id: item.batch_id.clone(),
        custom_id: item.custom_id.clone(),
        result: result.clone(),
        cost_usd: Usd(cost),
        spent_usd: Usd(item.spent_before + cost),
        answer,
    };
    let appended = crate::report::append_transcript_events(path, clamped.iter().chain([&event]));
    match appended {
        Ok(()) => format!(
            "task {}: its request in batch {} was {result}; ${} billed for it instead of its reservation",
            spec.id,
            item.batch_id,
            cost.normalize()
        ),
        Err(e) => format!(
            "task {}: cannot record batch {}'s result in {}: {e}; its reservation stays counted",
            spec.id,
            item.batch_id,
            path.display()
        ),
    }
}

/// What became of the request: an answer is billed at its usage within the bounds its
/// reservation priced, at batch prices.
fn settle(spec: &TaskSpec, item: &InFlight, outcome: Outcome) -> Result<Settled, String> {
    let (result, cost, answer, clamps) = match outcome {
        Outcome::Succeeded { body, .. } => {
            let answer: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|_| "was answered, but its answer is not JSON")?;
            let bounds = crate::model::Bounds {
                prompt_tokens: item.bounds.0,
                output_tokens: item.bounds.1,
                one_hour_writes: spec.cache.one_hour_writes(spec.provider.protocol),
            };
            let reported = crate::model::usage_of(spec.provider.protocol, &answer)
                .ok_or("was answered, but its answer carries no usage")?
                .within(&bounds);
            // At batch prices, even when the job has since turned batch mode off.
            let cost = spec
                .price
                .as_ref()
                .map(|p| p.batched().cost(&reported.usage))
                .unwrap_or_default();
            ("answered".into(), cost, Some(answer), reported.clamps)
        }
        Outcome::Errored { status, .. } => (
            format!("refused (HTTP {status})"),
            Default::default(),
            None,
            Vec::new(),
        ),
        Outcome::Canceled => (
            "cancelled before it was processed".into(),
            Default::default(),
            None,
            Vec::new(),
        ),
        Outcome::Expired => ("expired".into(), Default::default(), None, Vec::new()),
        Outcome::Failed { message, .. } => return Err(format!("is unknown: {message}")),
    };
    Ok(Settled {
        result,
        cost,
        answer,
        clamps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_request_left_waiting_is_in_flight() {
        let joined =
            r#"{"event":"batch_joined","turn":2,"attempt":1,"batch_id":"b1","custom_id":"t--2-1"}"#;
        let reserve =
            r#"{"event":"reserve","turn":2,"attempt":1,"reserved_usd":"0.05","spent_usd":"0.01"}"#;
        let answered = r#"{"event":"response","turn":2}"#;
        let text = [reserve, joined].join("\n");
        let item = in_flight(&text).unwrap();
        assert_eq!((item.turn, item.batch_id.as_str()), (2, "b1"));
        assert_eq!(item.spent_before, "0.01".parse().unwrap());
        assert!(in_flight(&[reserve, joined, answered].join("\n")).is_none());
        assert!(in_flight(reserve).is_none());
    }
}
