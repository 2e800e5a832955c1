//! The simulator's latency timer, finer than tokio's. Tokio's timer wheel has
//! millisecond ticks and fires on the tick after a deadline, so a scripted 50 ms answer
//! left 0.5 to 1.5 ms late, which the load benchmark then counted against the runner.
//! Here one thread keeps the deadlines in a heap and sleeps on a channel until the
//! next one: the OS wakes it within its timer slack (about 50 microseconds).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::OnceLock;
use std::time::Instant;

use tokio::sync::oneshot;

/// A deadline and whom to wake at it (ordered by deadline, then arrival).
type Waiting = Reverse<(Instant, u64, WakeOnDrop)>;

/// A waker that compares equal to every other (the heap orders by the fields before).
struct WakeOnDrop(oneshot::Sender<()>);

impl PartialEq for WakeOnDrop {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for WakeOnDrop {}
impl PartialOrd for WakeOnDrop {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for WakeOnDrop {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// A deadline and whom to wake at it, sent to the timer thread.
type Wait = (Instant, oneshot::Sender<()>);

/// The timer thread's inbox (None: it could not be started; tokio's timer is used).
fn timer() -> Option<&'static Sender<Wait>> {
    static TIMER: OnceLock<Option<Sender<Wait>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let (tx, rx) = channel::<Wait>();
            std::thread::Builder::new()
                .name("agentbatch-sim-timer".into())
                .spawn(move || {
                    let mut heap: BinaryHeap<Waiting> = BinaryHeap::new();
                    let mut seq = 0u64;
                    loop {
                        let next = match heap.peek() {
                            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                            Some(Reverse((at, _, _))) => {
                                rx.recv_timeout(at.saturating_duration_since(Instant::now()))
                            }
                        };
                        match next {
                            Ok((at, wake)) => {
                                seq += 1;
                                heap.push(Reverse((at, seq, WakeOnDrop(wake))));
                            }
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                        let now = Instant::now();
                        while heap.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
                            if let Some(Reverse((_, _, WakeOnDrop(wake)))) = heap.pop() {
                                let _ = wake.send(());
                            }
                        }
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Waits until `deadline`, to within the OS's timer slack.
pub(crate) async fn sleep_until(deadline: Instant) {
    if deadline <= Instant::now() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    let sent = timer().is_some_and(|t| t.send((deadline, tx)).is_ok());
    if !sent || rx.await.is_err() {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Deadlines given out of order are each kept, none early; and one in the past
    /// returns at once.
    #[tokio::test]
    async fn each_sleep_ends_at_its_own_deadline_never_before() {
        let start = Instant::now();
        let mut waits = Vec::new();
        for ms in [30u64, 10, 20, 10] {
            let at = start + Duration::from_millis(ms);
            waits.push(tokio::spawn(async move {
                sleep_until(at).await;
                (Instant::now() >= at, Instant::now().duration_since(at))
            }));
        }
        for w in waits {
            let (not_early, late) = w.await.unwrap();
            assert!(not_early);
            assert!(late < Duration::from_secs(5), "{late:?}");
        }
        sleep_until(start).await;
    }
}
