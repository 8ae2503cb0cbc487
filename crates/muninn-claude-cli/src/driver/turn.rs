//! One exchange from the driver's side: make sure a child is alive, write the line, read to
//! the `result`, and relaunch, reseed or resend when the child died before the turn began.

use super::rewind::{Before, Ending, nothing_answered, refused_untouched};
use super::stdin::{Exchange, user_line, write_line};
use super::{Collected, Driver, MAX_ATTEMPTS, ReadEnd, RunFlush, emit};
use crate::event::ResultEvent;
use crate::{SessionEvent, TurnReport, parse_model_usage, parse_usage};
use muninn_backend::{BackendError, TtlCheck, TurnOutcome};
use muninn_core::cache::Ttl;
use muninn_core::trace::Usage;
use serde_json::Value;
use std::time::Instant;
use tokio::sync::mpsc;

impl Driver {
    pub(super) async fn turn_inner(
        &mut self,
        exchange: &Exchange,
        interrupts: &mut mpsc::Receiver<()>,
        run_flush: &mut Option<RunFlush>,
        report: &mut TurnReport,
        written_at: &mut Option<Instant>,
        result_read_at: &mut Option<Instant>,
    ) -> Result<TurnOutcome, BackendError> {
        // Validated up front, so a bad turn fails before anything is launched.
        exchange.line()?;
        let compacting = matches!(exchange, Exchange::Compact(_));
        // Interrupts sent before this turn began are stale.
        while interrupts.try_recv().is_ok() {}
        self.renew_budget(report).await;
        // A turn the CLI started by itself while idle: taken as its own, not this exchange's.
        let mut carried = Some(self.drain_idle(report).await);
        let mut attempt = 0;
        loop {
            attempt += 1;
            // One deadline for the attempt's write and read: a child that takes no input
            // times out like one that gives no result.
            let deadline = tokio::time::Instant::now() + self.config.turn_timeout;
            let before = self.write_exchange(exchange, report, deadline).await?;
            *written_at = Some(Instant::now());
            let mut collected = carried.take().unwrap_or_default();
            collected.compacting = compacting;
            let end = self
                .read_turn(interrupts, run_flush, report, &mut collected, deadline)
                .await;
            if !collected.saw_init
                && matches!(end, ReadEnd::Eof)
                && self.stored_len() > before.stored
            {
                // Killed with its `system/init` still in its stdout buffer: the CLI had stored
                // the line (and may have sent the request), so the turn began.
                collected.saw_init = true;
            }
            if !matches!(end, ReadEnd::Result { .. }) {
                self.note_compactions(&collected, None, compacting, &mut report.session_events);
            }
            if collected.saw_init && !compacting {
                // The turn began, so the CLI has stored the line, seed and all, in the session's
                // transcript (it keeps the user line even when killed mid-request): a turn that
                // then dies or times out must not send the seed again with the next input, and
                // the session now has a transcript to resume (or, if that goes missing, to
                // reseed from the log).
                self.established = true;
                self.pending_seed = None;
            }
            let ended = Ended {
                compacting,
                attempt,
                before,
            };
            let next = match end {
                ReadEnd::Result {
                    result,
                    raw,
                    read_at,
                } => {
                    *result_read_at = Some(read_at);
                    self.on_result(*result, raw, collected, ended, report).await
                }
                ReadEnd::TimedOut => self.on_timeout(&collected, ended, report).await,
                ReadEnd::Terminated => {
                    // The next turn relaunches with `--resume`, as after any crash.
                    let (status, _) = self.reap().await;
                    tracing::warn!(?status, "claude-cli: the flush protocol terminated the run");
                    Attempt::Done(Box::new(Ok(terminated_outcome(collected, report))))
                }
                ReadEnd::Eof => self.on_eof(&collected, ended, report).await,
            };
            match next {
                Attempt::Retry => continue,
                Attempt::Done(done) => return *done,
            }
        }
    }

    /// Under a per-run budget, stops a child that already served a run, so this run's relaunch
    /// gets the whole budget.
    async fn renew_budget(&mut self, report: &mut TurnReport) {
        if self.config.run_budget_micro_usd.is_some() && self.served && self.live_pid().is_some() {
            // The CLI counts `--max-budget-usd` from its process's start, so a child that
            // served an earlier run has less than this run's budget left. Stopping it the way
            // shutdown does (the CLI writes its `cost-state`, keeping `total_cost_usd` whole)
            // and resuming gives this run the whole budget on the same session.
            self.shutdown().await;
            self.renewing = true;
            report.budget_relaunch = true;
            tracing::debug!(session = %self.session_id, "claude-cli: relaunching for a fresh run budget");
        }
    }

    /// Makes sure a child is alive (launching one if not) and writes the exchange's line to it.
    /// Returns the session as it stood before the write (its file's size, id and the seed sent
    /// with the line). A child still not taking the line at `deadline` is killed and the
    /// exchange fails.
    async fn write_exchange(
        &mut self,
        exchange: &Exchange,
        report: &mut TurnReport,
        deadline: tokio::time::Instant,
    ) -> Result<Before, BackendError> {
        let alive = match self.child.as_mut() {
            Some(live) => matches!(live.child.try_wait(), Ok(None)),
            None => false,
        };
        if !alive {
            // The dead child's sweep, waited for here rather than begun by the drop.
            if let Some(dead) = self.child.take() {
                dead.finish().await;
            }
            self.launch(&mut report.session_events)?;
        }
        // Built per attempt: a reseed on the way may have rendered a seed to send first.
        let line = match exchange {
            Exchange::Turn(input) => user_line(input, self.pending_seed.as_deref())?,
            // A `/compact` cannot carry a seed (it is a command line, not a message); a seed
            // pending (a reseed at start, or on this exchange's launch) waits for the next
            // turn.
            Exchange::Compact(_) => exchange.line()?,
        };
        // What the CLI has stored of the session before this line: if it grows, the CLI took
        // the line, whether or not its `system/init` reached us before it died.
        let before = Before {
            stored: self.stored_len(),
            session_id: self.session_id.clone(),
            seed: self.pending_seed.clone(),
        };
        let Some(live) = self.child.as_mut() else {
            return Err(BackendError::Transport("no child after launch".into()));
        };
        // A write to a child that just died fails with EPIPE; reading then finds the end of
        // its stdout and the stderr explains it, so the error is not returned here.
        if let Some(stdin) = live.stdin.as_mut()
            && let Err(e) = write_line(stdin, &line, deadline).await
        {
            if e.kind() == std::io::ErrorKind::TimedOut {
                // The line is cut short, so the CLI cannot have taken it: killing the child
                // loses nothing, and the next turn resumes the session.
                let pid = live.pid;
                self.stop_child().await;
                tracing::warn!(session = %self.session_id, ?pid, timeout = ?self.config.turn_timeout,
                    "claude-cli: the child took no input; killed");
                return Err(BackendError::Transport(format!(
                    "the child took no input within {:?}; it was killed",
                    self.config.turn_timeout
                )));
            }
            tracing::debug!(error = %e, "claude-cli: stdin write failed");
        }
        self.served = true;
        Ok(before)
    }

    /// The read ended with the turn's `result`: a session the CLI could not find is reseeded
    /// (and the exchange retried while attempts remain); a turn the API refused is taken back
    /// out of the session (`rewind.rs`); otherwise the compactions are recorded and the outcome
    /// made.
    async fn on_result(
        &mut self,
        result: ResultEvent,
        raw: Value,
        collected: Collected,
        end: Ended,
        report: &mut TurnReport,
    ) -> Attempt {
        let Ended {
            compacting,
            attempt,
            before,
        } = end;
        let lost = result
            .errors
            .iter()
            .find(|e| e.contains("No conversation found"));
        if let Some(reason) = lost
            && !collected.saw_init
        {
            let reason = reason.clone();
            self.stop_child().await;
            self.reseed(&reason, &mut report.session_events);
            if attempt < MAX_ATTEMPTS {
                return Attempt::Retry;
            }
            return Attempt::Done(Box::new(Err(BackendError::Transport(format!(
                "the session could not be started: {reason}"
            )))));
        }
        self.established = true;
        // The seed is in the new session now (even a failed turn's line is kept by
        // the CLI and merged into the next one) — unless this was a `/compact`,
        // whose line carried none: clearing it then would start the next turn in
        // the fresh session without its history.
        if !compacting {
            self.pending_seed = None;
        }
        if !compacting && refused_untouched(&result, &collected) {
            report.rewound = self.rewind(before, Ending::Refused).await;
            report.out_of_step = !report.rewound;
        }
        report.model_usage_since_last_result = result.model_usage_since_last_result.clone();
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        let usage = compaction_usage(&result, compacting, requested_1h);
        self.note_compactions(&collected, usage, compacting, &mut report.session_events);
        report.result = Some(raw);
        Attempt::Done(Box::new(if compacting {
            self.compaction_outcome(result, collected, report)
        } else {
            self.outcome(result, collected, report)
        }))
    }

    /// No `result` by the turn's deadline: the child is killed, and the turn taken back out of
    /// the session when nothing of it was answered.
    async fn on_timeout(
        &mut self,
        collected: &Collected,
        end: Ended,
        report: &mut TurnReport,
    ) -> Attempt {
        self.stop_child().await;
        // Nothing of the turn reached the caller: when nothing of it was answered either, the
        // CLI's session must not keep it (`rewind.rs`), or a retry would be a second copy of
        // the line. A model that already acted (a paid answer, a tool call the CLI ran) stays
        // in the session, which says so.
        if !end.compacting && nothing_answered(collected) {
            report.rewound = self.rewind(end.before, Ending::TimedOut).await;
            report.out_of_step = !report.rewound;
        } else if !end.compacting {
            report.out_of_step = !self.stored_what_was_read(&end.before, collected);
        }
        Attempt::Done(Box::new(Err(BackendError::Transport(format!(
            "no result within {:?}; the child was killed",
            self.config.turn_timeout
        )))))
    }

    /// stdout ended before a `result`: a lost session is reseeded and a line that never ran is
    /// resent while attempts remain; a turn that began and died is an error, taken back out of
    /// the session when nothing of it was answered.
    async fn on_eof(
        &mut self,
        collected: &Collected,
        end: Ended,
        report: &mut TurnReport,
    ) -> Attempt {
        let (status, tail) = self.reap().await;
        // Only a child that never began the turn can have failed to find its session: one
        // that began it found the session, whatever its last stderr words say (an "address
        // already in use" of a socket, a tool's output), and reseeding would send the turn
        // again in a fresh session with the model's doing in the old one left behind.
        let lost = !collected.saw_init
            && (tail.contains("already in use") || tail.contains("No conversation found"));
        if lost && end.attempt < MAX_ATTEMPTS {
            let reason = tail.lines().last().unwrap_or("").to_string();
            self.reseed(&reason, &mut report.session_events);
            return Attempt::Retry;
        }
        if !collected.saw_init && end.attempt < MAX_ATTEMPTS {
            // Died before the turn began (killed while idle, or between our
            // liveness check and the write): the line never ran, so resend it.
            return Attempt::Retry;
        }
        // Died mid-turn (a crash, an OOM kill, a SIGKILL from outside): the CLI stored the line
        // as it took it, and a resumed session would merge it, unanswered, into the next turn's
        // message — the retry's copy a second one. When nothing of the turn was answered it is
        // taken back out (`rewind.rs`); a model that already acted stays, and the session says so.
        if collected.saw_init && !end.compacting && nothing_answered(collected) {
            tracing::warn!(session = %self.session_id, ?status, stderr = %tail,
                "claude-cli: the child died mid-turn before any answer");
            report.rewound = self.rewind(end.before, Ending::Died).await;
            report.out_of_step = !report.rewound;
        } else if collected.saw_init && !end.compacting {
            // The model acted: the turn stays, if the file holds what it did.
            report.out_of_step = !self.stored_what_was_read(&end.before, collected);
        }
        Attempt::Done(Box::new(Err(BackendError::Transport(format!(
            "claude exited during the turn ({status:?}): {tail}"
        )))))
    }

    /// Records the compactions a turn saw. `usage` is the compaction's own when it could be
    /// told apart; `requested` when the exchange was [`Exchange::Compact`].
    pub(super) fn note_compactions(
        &self,
        collected: &Collected,
        usage: Option<Usage>,
        requested: bool,
        events: &mut Vec<SessionEvent>,
    ) {
        // One usage figure cannot be split between several boundaries.
        let usage = usage.filter(|_| collected.boundaries.len() == 1);
        for b in &collected.boundaries {
            if !requested {
                tracing::warn!(trigger = %b.trigger, pre_tokens = ?b.pre_tokens,
                    "claude-cli: the CLI compacted the session by itself");
            }
            emit(
                &self.queue,
                events,
                SessionEvent::Compacted {
                    session_id: self.session_id.clone(),
                    trigger: b.trigger.clone(),
                    pre_tokens: b.pre_tokens,
                    post_tokens: b.post_tokens,
                    outside: !requested,
                    usage,
                },
            );
        }
    }
}

/// How an attempt at an exchange ended: at its `result`, or at its deadline.
struct Ended {
    /// The exchange was a `/compact`.
    compacting: bool,
    /// The attempt's number (1 for the first).
    attempt: u32,
    /// The session as it stood before the attempt's line.
    before: Before,
}

/// What follows one attempt at an exchange.
enum Attempt {
    /// Launch (or relaunch) and write the line again.
    Retry,
    /// The exchange is over.
    Done(Box<Result<TurnOutcome, BackendError>>),
}

/// What a run the flush protocol terminated produced: the text and tool calls read so far and
/// the usage of the results before it.
fn terminated_outcome(collected: Collected, report: &TurnReport) -> TurnOutcome {
    TurnOutcome {
        text: collected.reply_text(),
        tool_calls: collected.tool_calls,
        structured: None,
        stop_reason: "terminated".to_string(),
        usage: collected.earlier,
        raw_usage: Value::Null,
        predicted: None,
        miss: None,
        ttl: TtlCheck {
            expected_5m: 0,
            expected_1h: 0,
            honoured_5m: 0,
            honoured_1h: 0,
        },
        retries: report.retries.clone(),
        events: Vec::new(),
        request_id: collected.request_id,
        breakpoints: Vec::new(),
        tool_results: Default::default(),
        provider_miss: None,
    }
}

/// The usage of the compactions in a `result`'s `model_usage_since_last_result`: all of it for
/// a `/compact`, else what is left once the turn's own `usage` is taken out.
fn compaction_usage(result: &ResultEvent, compacting: bool, requested_1h: bool) -> Option<Usage> {
    result.model_usage_since_last_result.as_ref().map(|m| {
        let all = parse_model_usage(m, requested_1h);
        if compacting {
            all
        } else {
            // `usage` is the turn's own requests; the rest was compaction.
            let turn = parse_usage(&result.usage, requested_1h);
            Usage {
                input: all.input.saturating_sub(turn.input),
                cache_write_5m: all.cache_write_5m.saturating_sub(turn.cache_write_5m),
                cache_write_1h: all.cache_write_1h.saturating_sub(turn.cache_write_1h),
                cache_read: all.cache_read.saturating_sub(turn.cache_read),
                output: all.output.saturating_sub(turn.output),
            }
        }
    })
}
