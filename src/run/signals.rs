//! Ctrl-C and SIGTERM: the first drains, the second (or the end of the grace period)
//! cancels.

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::vocab::log::Event;

/// The first Ctrl-C or SIGTERM drains (no new task starts) and gives running tasks
/// `grace` to finish; the second signal, or the end of the grace period, cancels them.
pub(super) async fn watch_signals(
    drain: CancellationToken,
    cancel: CancellationToken,
    grace: std::time::Duration,
    tx: UnboundedSender<Event>,
) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        #[cfg(unix)]
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminated = std::future::pending::<()>();
        let grace_over = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        let what = tokio::select! {
            r = tokio::signal::ctrl_c() => {
                if r.is_err() {
                    return;
                }
                "interrupted"
            }
            _ = terminated => "terminated",
            _ = grace_over => {
                let _ = tx.send(Event::Stopping(format!(
                    "grace period of {} over: cancelling running tasks",
                    humantime::format_duration(grace)
                )));
                cancel.cancel();
                return;
            }
        };
        if drain.is_cancelled() {
            let _ = tx.send(Event::Stopping(format!(
                "{what} again: cancelling running tasks"
            )));
            cancel.cancel();
            return;
        }
        let until = chrono::Local::now() + grace;
        let _ = tx.send(Event::Stopping(format!(
            "{what}: starting no new tasks; running ones have until {} ({} grace), then are cancelled (Ctrl-C again to cancel now)",
            until.format("%H:%M:%S"),
            humantime::format_duration(grace)
        )));
        drain.cancel();
        deadline = Some(tokio::time::Instant::now() + grace);
    }
}
