//! The progress display: an indicatif bar on a terminal, one plain line per finished
//! task otherwise (logs, CI), nothing with --quiet.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rust_decimal::Decimal;

use crate::vocab::log::TaskResult;
use crate::vocab::stop::Outcome;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, plain lines otherwise.
    Auto,
    Lines,
    Quiet,
}

pub(super) struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    total: usize,
    done: usize,
    started: usize,
    pass: usize,
    fail: usize,
    error: usize,
    spent: Decimal,
    /// Tasks waiting for a team's period cap (`on_cap: wait`).
    cap_waiting: usize,
    /// Shown instead of the counts while the run stops.
    stopping: Option<String>,
}

impl Progress {
    pub fn new(mode: ProgressMode, total: usize, already_done: usize) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let (bar, lines) = match mode {
            ProgressMode::Quiet => (None, false),
            ProgressMode::Auto if terminal => {
                let bar =
                    ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
                let style =
                    ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed_precise}]")
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                (Some(bar), false)
            }
            _ => (None, true),
        };
        let p = Progress {
            bar,
            lines,
            total,
            done: already_done,
            started: already_done,
            pass: 0,
            fail: 0,
            error: 0,
            spent: Decimal::ZERO,
            cap_waiting: 0,
            stopping: None,
        };
        p.redraw();
        p
    }

    fn redraw(&self) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.done as u64);
            let mut counts = format!(
                "running {} pass {} fail {} error {} ${:.4}",
                self.started - self.done,
                self.pass,
                self.fail,
                self.error,
                self.spent
            );
            if self.cap_waiting > 0 {
                counts.push_str(&format!("; {} waiting for team cap", self.cap_waiting));
            }
            match &self.stopping {
                Some(s) => bar.set_message(format!("{s}; {counts}")),
                None => bar.set_message(counts),
            }
        }
    }

    pub fn started(&mut self) {
        self.started += 1;
        self.redraw();
    }

    pub fn finished(&mut self, r: &TaskResult, was_started: bool) {
        if !was_started {
            self.started += 1;
        }
        self.done += 1;
        match r.outcome {
            Outcome::Pass => self.pass += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Error => self.error += 1,
            Outcome::Unchecked => {}
        }
        self.spent += r.measured.cost_usd.unwrap_or_default();
        if self.lines {
            eprintln!(
                "[{}/{}] {}: {} ({}) turns {} ${:.4} {:.1}s{}",
                self.done,
                self.total,
                r.key,
                r.stop_reason,
                r.outcome,
                r.measured.turns,
                r.measured.cost_usd.unwrap_or_default(),
                r.measured.wall_ms as f64 / 1000.0,
                if r.stop_detail.is_empty() {
                    String::new()
                } else {
                    format!(" - {}", r.stop_detail)
                }
            );
        }
        self.redraw();
    }

    /// `n` tasks wait for a team's period cap (`on_cap: wait`): counted on the bar; in
    /// line mode, said once when tasks start waiting and once when none waits any more.
    pub fn cap_waiting(&mut self, n: usize) {
        if n == self.cap_waiting {
            return;
        }
        if self.lines {
            if self.cap_waiting == 0 {
                eprintln!(
                    "agentbatch: tasks are waiting for a team's period cap (on_cap: wait) until the next period or a raised cap"
                );
            } else if n == 0 {
                eprintln!("agentbatch: no task waits for a team's period cap now");
            }
        }
        self.cap_waiting = n;
        self.redraw();
    }

    /// The run is stopping: shown on the bar (or printed once in line mode).
    pub fn stopping(&mut self, what: String) {
        if self.bar.is_none() {
            eprintln!("agentbatch: {what}");
        }
        self.stopping = Some(what);
        self.redraw();
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar() -> Progress {
        let mut p = Progress::new(ProgressMode::Quiet, 3, 0);
        p.bar = Some(ProgressBar::hidden());
        p
    }

    #[test]
    fn the_bar_counts_tasks_waiting_for_a_team_cap() {
        let mut p = bar();
        p.started();
        p.started();
        let msg = |p: &Progress| p.bar.as_ref().map(|b| b.message()).unwrap_or_default();
        assert!(!msg(&p).contains("waiting"), "{}", msg(&p));
        p.cap_waiting(2);
        assert!(
            msg(&p).ends_with("running 2 pass 0 fail 0 error 0 $0.0000; 2 waiting for team cap"),
            "{}",
            msg(&p)
        );
        p.stopping("interrupted".into());
        assert!(msg(&p).contains("2 waiting for team cap"), "{}", msg(&p));
        p.cap_waiting(0);
        assert!(!msg(&p).contains("waiting"), "{}", msg(&p));
    }
}
