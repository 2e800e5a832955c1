//! The providers' batch APIs as a transport for agent turns: the requests the running
//! tasks make to one provider within a window are pooled into one batch (half price,
//! answered within hours), the batch is polled with backoff, and each result goes back
//! to the loop that asked, which goes on as with a synchronous answer.
//!
//! One [`Batcher`] per provider of a run owns the pooling; each batch is then watched by
//! a task of its own, so a slow batch never holds back the next window's.

mod send;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

pub use send::send;
pub use wire::{BatchApi, CallError};
use wire::{Ended, State};

/// What became of one request sent in a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The answer, as the synchronous endpoint's body would have been.
    Succeeded {
        body: Vec<u8>,
        request_id: Option<String>,
    },
    /// The request was refused or failed, as a synchronous request with this status
    /// would have been. Not billed.
    Errored {
        status: u16,
        error_type: String,
        message: String,
    },
    /// Cancelled before it was processed (by max_wait or a deadline). Not billed.
    Canceled,
    /// Not processed within the provider's window. Not billed.
    Expired,
    /// The batch itself could not be sent or followed: the request's fate is unknown
    /// when `maybe_sent`; `retryable` when another batch may fare better.
    Failed {
        message: String,
        maybe_sent: bool,
        retryable: bool,
    },
}

/// How requests are pooled and followed (the job's `batch:` setting).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How long the first request of a batch waits for others to join it.
    pub window: Duration,
    /// The most requests in one batch (the providers allow 100,000 and 50,000).
    pub max_requests: usize,
    /// How long a batch may take before it is cancelled (the providers end it at 24 h).
    pub max_wait: Duration,
    /// The first poll's delay; each next one is 1.5 times longer, up to `poll_max`.
    pub poll_first: Duration,
    pub poll_max: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window: Duration::from_secs(10),
            max_requests: 1000,
            max_wait: Duration::from_secs(24 * 3600),
            poll_first: Duration::from_millis(500),
            poll_max: Duration::from_secs(60),
        }
    }
}

/// Batch API calls made, for the benchmark and the tests.
#[derive(Debug, Default)]
pub struct Calls {
    pub batches: AtomicU64,
    pub polls: AtomicU64,
    pub requests: AtomicU64,
}

/// A request waiting for its batch: the batch id once the batch is created (so the
/// loop can write it down before the answer comes), then the outcome.
pub struct Ticket {
    pub joined: oneshot::Receiver<String>,
    pub outcome: oneshot::Receiver<(String, Outcome)>,
}

struct Pending {
    custom_id: String,
    body: Value,
    /// The body's encoded size, for the batch size limit.
    bytes: usize,
    joined: oneshot::Sender<String>,
    done: oneshot::Sender<(String, Outcome)>,
}

/// The pool of one provider's batched requests.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Pending>,
    pub calls: Arc<Calls>,
    /// The tasks watching batches in flight, so a run can wait for the last cancels.
    watchers: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Batcher {
    /// Starts pooling for `api`; the pooling task ends when every clone is dropped.
    pub fn start(api: BatchApi, settings: Settings) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        let calls = Arc::new(Calls::default());
        let watchers = Arc::new(std::sync::Mutex::new(Vec::new()));
        tokio::spawn(pool(
            Arc::new(api),
            settings,
            rx,
            calls.clone(),
            watchers.clone(),
        ));
        Batcher {
            tx,
            calls,
            watchers,
        }
    }

    /// Waits (up to `limit`) for the batches still in flight: once no loop waits for a
    /// batch it is cancelled at once, so at the end of a run this is the time those
    /// cancels take, and a batch abandoned at a deadline is not left running.
    pub async fn close(&self, limit: Duration) {
        let handles: Vec<_> = std::mem::take(
            &mut *self
                .watchers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let _ = tokio::time::timeout(limit, futures::future::join_all(handles)).await;
    }

    /// Queues one request (`body` as the synchronous endpoint takes it, without
    /// `stream`) under `custom_id` (`[A-Za-z0-9_-]{1,64}`, unique among waiting ones).
    pub fn submit(&self, custom_id: String, body: Value, bytes: usize) -> Ticket {
        let (joined_tx, joined) = oneshot::channel();
        let (done_tx, outcome) = oneshot::channel();
        let pending = Pending {
            custom_id,
            body,
            bytes,
            joined: joined_tx,
            done: done_tx,
        };
        if let Err(mpsc::error::SendError(p)) = self.tx.send(pending) {
            let _ = p.done.send((
                String::new(),
                Outcome::Failed {
                    message: "the batch pool has stopped".into(),
                    maybe_sent: false,
                    retryable: false,
                },
            ));
        }
        Ticket { joined, outcome }
    }
}

/// Gathers requests for a window (or until `max_requests`), then hands the batch to a
/// watcher of its own.
async fn pool(
    api: Arc<BatchApi>,
    settings: Settings,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    calls: Arc<Calls>,
    watchers: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
) {
    // A request that would take a batch past the provider's size limit opens the next.
    let mut carried: Option<Pending> = None;
    let most_bytes = api.protocol.facts().batch_max_bytes;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => break,
            },
        };
        let mut bytes = first.bytes;
        let mut items = vec![first];
        let until = tokio::time::Instant::now() + settings.window;
        while items.len() < settings.max_requests {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(p)) if bytes + p.bytes > most_bytes => {
                    carried = Some(p);
                    break;
                }
                Ok(Some(p)) => {
                    bytes += p.bytes;
                    items.push(p);
                }
                Ok(None) | Err(_) => break,
            }
        }
        // A loop that gave up before its batch was sent is not sent for.
        items.retain(|p| !p.done.is_closed());
        if items.is_empty() {
            continue;
        }
        let handle = tokio::spawn(watch(api.clone(), settings.clone(), items, calls.clone()));
        let mut w = watchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.retain(|h| !h.is_finished());
        w.push(handle);
    }
}

/// The loops waiting for a batch's answers, by custom_id.
type Waiting = HashMap<String, oneshot::Sender<(String, Outcome)>>;

/// Answers every waiting loop with the same failure of batch `id`.
fn fail_all(waiting: Waiting, id: &str, message: String, (maybe_sent, retryable): (bool, bool)) {
    for (_, done) in waiting {
        let _ = done.send((
            id.to_string(),
            Outcome::Failed {
                message: message.clone(),
                maybe_sent,
                retryable,
            },
        ));
    }
}

/// Sends one batch, polls it until it ends (cancelling it past `max_wait`, or when no
/// loop waits for it any more), and answers each request.
async fn watch(api: Arc<BatchApi>, settings: Settings, items: Vec<Pending>, calls: Arc<Calls>) {
    let bodies: Vec<(String, Value)> = items
        .iter()
        .map(|p| (p.custom_id.clone(), p.body.clone()))
        .collect();
    let mut waiting: Waiting = HashMap::new();
    let mut joined = Vec::new();
    for p in items {
        joined.push(p.joined);
        waiting.insert(p.custom_id, p.done);
    }
    let Some((id, waiting)) = create(&api, &bodies, waiting).await else {
        return;
    };
    calls.batches.fetch_add(1, Ordering::Relaxed);
    calls
        .requests
        .fetch_add(bodies.len() as u64, Ordering::Relaxed);
    for j in joined {
        let _ = j.send(id.clone());
    }
    if let Some((ended, waiting)) = follow(&api, &settings, &id, waiting, &calls).await {
        deliver(&api, &id, &ended, waiting).await;
    }
}

/// Readies and creates the batch; its id, or None when every loop was answered with
/// the failure. Readying (an upload) may be repeated; the create itself only after a
/// refusal, which created nothing: after a failure that may have reached the provider,
/// a second create could make a second batch, billed too.
async fn create(
    api: &BatchApi,
    bodies: &[(String, Value)],
    waiting: Waiting,
) -> Option<(String, Waiting)> {
    let prepared = match with_retries(|| api.prepare(bodies)).await {
        Ok(p) => p,
        Err(e) => {
            // Nothing is created, or billed, by an upload alone.
            fail_all(
                waiting,
                "",
                format!("the batch's requests could not be uploaded: {e}"),
                (false, e.retryable),
            );
            return None;
        }
    };
    match create_once(api, &prepared).await {
        Ok(id) => Some((id, waiting)),
        Err(e) => {
            let maybe_sent = !e.refused();
            let hint = match e.status {
                Some(404 | 405) => {
                    " (does this provider have a batch API? If not, set batch: { mode: off })"
                }
                _ => "",
            };
            fail_all(
                waiting,
                "",
                format!("the batch was not created: {e}{hint}"),
                (maybe_sent, e.retryable),
            );
            None
        }
    }
}

/// Polls batch `id` until it ends; None when it failed, could not be followed (every
/// loop was answered with that) or no loop waits for it any more.
async fn follow(
    api: &BatchApi,
    settings: &Settings,
    id: &str,
    mut waiting: Waiting,
    calls: &Calls,
) -> Option<(Ended, Waiting)> {
    let created = Instant::now();
    let deadline = tokio::time::Instant::now() + settings.max_wait;
    let mut delay = settings.poll_first;
    let mut cancelled = false;
    loop {
        // Wake at the next poll, when max_wait passes (not at the poll after it: polls
        // back off to a minute apart), or as soon as no loop waits for the batch.
        let all_gone = futures::future::join_all(waiting.values_mut().map(|s| s.closed()));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            // Once: a cancel that failed is tried again at the next poll.
            _ = tokio::time::sleep_until(deadline), if !cancelled && created.elapsed() < settings.max_wait => {}
            _ = all_gone, if !cancelled => {}
        }
        delay = settings.poll_max.min(delay.mul_f64(1.5));
        let abandoned = waiting.values().all(oneshot::Sender::is_closed);
        if !cancelled && (abandoned || created.elapsed() >= settings.max_wait) {
            // Best effort: a batch that cannot be cancelled ends on its own.
            cancelled = with_retries(|| api.cancel(id)).await.is_ok();
            if abandoned {
                return None;
            }
            // A cancelled batch ends within moments: poll for its end from the start.
            delay = settings.poll_first;
        }
        calls.polls.fetch_add(1, Ordering::Relaxed);
        match with_retries(|| api.poll(id)).await {
            Ok(State::Running) => {}
            Ok(State::Ended(e)) => return Some((e, waiting)),
            Ok(State::Failed(why)) => {
                fail_all(
                    waiting,
                    id,
                    format!("batch {id} failed: {why}"),
                    (false, false),
                );
                return None;
            }
            Err(e) => {
                // Best effort: a batch left running would be billed beside the retries.
                let _ = api.cancel(id).await;
                fail_all(
                    waiting,
                    id,
                    format!("batch {id} could not be followed: {e}"),
                    (true, true),
                );
                return None;
            }
        }
    }
}

async fn deliver(
    api: &BatchApi,
    id: &str,
    ended: &Ended,
    mut waiting: HashMap<String, oneshot::Sender<(String, Outcome)>>,
) {
    match with_retries(|| api.results(ended)).await {
        Ok(results) => {
            for (custom_id, outcome) in results {
                if let Some(done) = waiting.remove(&custom_id) {
                    let _ = done.send((id.to_string(), outcome));
                }
            }
            for (custom_id, done) in waiting {
                let _ = done.send((
                    id.to_string(),
                    Outcome::Failed {
                        message: format!(
                            "batch {id} ended without a readable result for {custom_id}"
                        ),
                        maybe_sent: true,
                        retryable: true,
                    },
                ));
            }
        }
        Err(e) => {
            for (_, done) in waiting {
                let _ = done.send((
                    id.to_string(),
                    Outcome::Failed {
                        message: format!("the results of batch {id} could not be read: {e}"),
                        maybe_sent: true,
                        retryable: true,
                    },
                ));
            }
        }
    }
}

/// Creates the batch, trying again (up to 6 times, 1 s to 16 s apart) only after a
/// refusal that created nothing (a rate limit, an overload).
async fn create_once(api: &BatchApi, prepared: &wire::Prepared) -> Result<String, CallError> {
    let mut wait = Duration::from_secs(1);
    let mut tries = 0;
    loop {
        match api.create(prepared).await {
            Err(e) if e.retryable && e.refused() && tries < 5 => {
                tries += 1;
                tokio::time::sleep(wait.mul_f64(crate::model::backoff::jitter())).await;
                wait *= 2;
            }
            other => return other,
        }
    }
}

/// A batch API call, tried again (up to 6 times in all, 1 s to 16 s apart) while its
/// failure is one that may pass.
async fn with_retries<T, F, Fut>(mut call: F) -> Result<T, CallError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CallError>>,
{
    let mut wait = Duration::from_secs(1);
    let mut tries = 0;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.retryable && tries < 5 => {
                tries += 1;
                tokio::time::sleep(wait.mul_f64(crate::model::backoff::jitter())).await;
                wait *= 2;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A `custom_id` for turn `turn`, attempt `attempt` of the task tagged `tag`: the
/// simulator plays the script registered under the part before the last `--`.
pub fn custom_id(tag: &str, turn: u32, attempt: u32) -> String {
    format!("{tag}--{turn}-{attempt}")
}

/// The tag of a task's custom_ids: its id when that fits the providers' custom_id
/// rules (`[A-Za-z0-9_-]`, with room for the turn and attempt in 64 characters), else
/// a digest of it. Stable for an id, so a resume names the same requests alike.
pub fn tag_for(task_id: &str) -> String {
    let fits = !task_id.is_empty()
        && task_id.len() <= 48
        && task_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if fits {
        task_id.to_string()
    } else {
        format!("h{:016x}", crate::text::fnv1a(task_id.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_fit_the_custom_id_rules_and_stay_apart() {
        assert_eq!(tag_for("fix-bug_1"), "fix-bug_1");
        let dotted = tag_for("fix.bug--model=a--e2");
        assert_eq!(dotted.len(), 17);
        assert!(dotted.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_ne!(dotted, tag_for("fix.bug--model=b--e2"));
        assert_eq!(tag_for(&"x".repeat(49)).len(), 17);
        let id = custom_id(&tag_for(&"y".repeat(48)), 9999, 99);
        assert!(id.len() <= 64, "{id}");
    }
}
