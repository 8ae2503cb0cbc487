//! Reading one exchange's events to its `result`: collecting text and tool calls, forwarding
//! interrupts, noticing forks and compactions, and carrying out the flush protocol's actions.

use super::stdin::{message_text, replayed_text, user_line, write_interrupt, write_line};
use super::{Collected, Driver, ReadEnd, RunFlush, emit, sigterm, truncate};
use crate::event::{ApiRetryEvent, AssistantEvent, CliEvent, ResultEvent, decode};
use crate::flush::{FlushAction, decide, prompt_tokens};
use crate::lines::{Line, MAX_LINE_BYTES};
use crate::{SessionEvent, TurnReport, parse_usage};
use muninn_backend::{RetryEvent, ToolCall, TurnInput};
use muninn_core::cache::Ttl;
use serde_json::Value;
use std::time::Instant;
use tokio::sync::mpsc;

impl Driver {
    /// Reads events to the turn's `result`, forwarding interrupts as `control_request`s and,
    /// for a run, carrying out the flush protocol's actions.
    pub(super) async fn read_turn(
        &mut self,
        interrupts: &mut mpsc::Receiver<()>,
        run_flush: &mut Option<RunFlush>,
        report: &mut TurnReport,
        collected: &mut Collected,
        deadline: tokio::time::Instant,
    ) -> ReadEnd {
        let timeout = tokio::time::sleep_until(deadline);
        tokio::pin!(timeout);
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        if self.child.is_none() {
            return ReadEnd::Eof;
        }
        // When the child exited: stdout is then read only until `STDOUT_END_WAIT` after it, since
        // a process it started may hold the pipe open and the end of stdout never come.
        let mut exited_at: Option<tokio::time::Instant> = None;
        loop {
            // Carry out whatever the flush protocol says is due, then sleep until its next
            // deadline or the next event, whichever comes first.
            let wake = self.step_flush(run_flush, deadline).await;
            let flush_timer = async move {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let Some(live) = self.child.as_mut() else {
                return ReadEnd::Eof;
            };
            tokio::select! {
                line = live.stdout.next_line() => {
                    let line = match line {
                        Ok(Some(Line::Text(l))) => l,
                        Ok(Some(Line::Skipped(bytes))) => {
                            line_skipped(&self.session_id, bytes, "a turn");
                            continue;
                        }
                        Ok(None) | Err(_) => {
                            if let Err(e) = &line {
                                // Taken as the end of stdout (the child is reaped, killed if it
                                // lingers, and relaunched).
                                read_failed(&self.session_id, e, "a turn");
                            }
                            return stdout_ended(run_flush);
                        }
                    };
                    let Some(event) = decode(&line) else {
                        tracing::warn!(line = %truncate(&line, 200), "claude-cli: stdout line is not JSON");
                        continue;
                    };
                    let read = Read { line: &line, requested_1h };
                    if let Some(end) = self.on_event(event, read, run_flush, report, collected) {
                        return end;
                    }
                }
                Some(()) = interrupts.recv() => {
                    self.interrupts_sent += 1;
                    // A write that waits past the deadline gives up; the next pass times out.
                    write_interrupt(live, self.interrupts_sent, deadline).await;
                }
                _ = &mut timeout => return ReadEnd::TimedOut,
                _ = flush_timer => {}
                // The child is reaped here, so its pid is forgotten: no signal meant for it (a
                // flush's SIGTERM, a tree kill) may reach a process that reuses the number.
                status = live.child.wait(), if exited_at.is_none() => {
                    tracing::debug!(session = %self.session_id, ?status, "claude-cli: the child exited during the turn");
                    live.pid = None;
                    exited_at = Some(tokio::time::Instant::now());
                }
                // What the child wrote before it exited is in the pipe and read above at once;
                // nothing more can come from it.
                () = sleep_until_after(exited_at, STDOUT_END_WAIT) => {
                    tracing::warn!(session = %self.session_id,
                        "claude-cli: the child exited and a process it started still holds its stdout open");
                    return stdout_ended(run_flush);
                }
            }
        }
    }

    /// Carries out every flush action due now; returns when the next one falls due (`None`:
    /// none is scheduled, or this is not a run). Writes to the child give up at `deadline`.
    async fn step_flush(
        &mut self,
        run_flush: &mut Option<RunFlush>,
        deadline: tokio::time::Instant,
    ) -> Option<Instant> {
        let f = run_flush.as_mut()?;
        let live = self.child.as_mut()?;
        loop {
            let now = f.started.elapsed();
            match decide(&f.state, &f.protocol, now) {
                FlushAction::Wait { until } => {
                    return until.map(|u| f.started + u);
                }
                FlushAction::AskFlush => {
                    f.state.asked_at = Some(now);
                    let line = user_line(&TurnInput::text(f.protocol.message.clone()), None);
                    if let (Some(stdin), Ok(line)) = (live.stdin.as_mut(), line)
                        && let Err(e) = write_line(stdin, &line, deadline).await
                    {
                        tracing::debug!(error = %e, "claude-cli: flush write failed");
                    }
                    tracing::info!(session = %self.session_id, "claude-cli: flush asked");
                }
                FlushAction::Interrupt => {
                    f.state.interrupted_at = Some(now);
                    self.interrupts_sent += 1;
                    write_interrupt(live, self.interrupts_sent, deadline).await;
                    tracing::info!(session = %self.session_id, "claude-cli: flush grace ran out; interrupted");
                }
                FlushAction::Terminate => {
                    f.state.terminated_at = Some(now);
                    sigterm(live.pid);
                    tracing::warn!(session = %self.session_id, "claude-cli: the interrupt did not end the run; SIGTERM");
                }
                FlushAction::Kill => {
                    f.state.killed_at = Some(now);
                    super::tree::kill_descendants(live.pid);
                    let _ = live.child.start_kill();
                    tracing::warn!(session = %self.session_id, "claude-cli: SIGTERM did not end the run; SIGKILL");
                }
            }
        }
    }

    /// Logs and reports one of the CLI's retries of a failed API request.
    fn note_retry(&self, r: ApiRetryEvent, report: &mut TurnReport) {
        // Logged as it happens: during an outage the turn returns only when
        // the CLI's retries end, and its ledger row only after that.
        tracing::warn!(session = %self.session_id, attempt = r.attempt,
            max_retries = r.max_retries, delay_ms = r.retry_delay_ms,
            status = r.error_status, error = r.error.as_deref(),
            "claude-cli: the CLI retries a failed API request");
        report.retries.push(RetryEvent {
            attempt: r.attempt,
            delay_ms: r.retry_delay_ms,
            status: r.error_status,
            kind: r.error.unwrap_or_else(|| "unknown".to_string()),
            retry_after_ms: None,
            // The CLI's `api_retry` line names no request id.
            request_id: None,
        });
    }

    /// Takes one decoded stdout event into `collected` (or the flush state, or the report);
    /// returns how the read ended when the event ends it.
    pub(super) fn on_event(
        &mut self,
        event: CliEvent,
        read: Read<'_>,
        run_flush: &mut Option<RunFlush>,
        report: &mut TurnReport,
        collected: &mut Collected,
    ) -> Option<ReadEnd> {
        match event {
            CliEvent::Init { session_id } => self.on_init(session_id, report, collected),
            CliEvent::Assistant(a) => on_assistant(a, run_flush, collected),
            CliEvent::ApiRetry(r) => self.note_retry(r, report),
            CliEvent::ControlResponse(v) => {
                tracing::debug!(response = %v, "claude-cli: control response");
            }
            CliEvent::CompactBoundary(b) => {
                collected.boundaries.push(b.compact_metadata);
            }
            CliEvent::Result(result) if self.unprompted(collected) => {
                let raw = serde_json::from_str(read.line).unwrap_or(Value::Null);
                self.take_unprompted(&result, &raw, collected, report, read.requested_1h);
            }
            CliEvent::Result(result) => {
                self.bill_subagents(&result, collected, read.requested_1h);
                return result_end(result, read, run_flush, collected);
            }
            CliEvent::Unknown(v) => self.on_other(&v, run_flush, collected),
        }
        None
    }

    /// A `system/init`: the turn began. Under `--fork-session`, the id it names is the copy's,
    /// which the session continues as from now on.
    fn on_init(&mut self, session_id: String, report: &mut TurnReport, collected: &mut Collected) {
        collected.saw_init = true;
        if self.forking && session_id != self.session_id {
            tracing::info!(from = %self.session_id, to = %session_id, "claude-cli: session forked");
            let event = SessionEvent::Forked {
                from: std::mem::replace(&mut self.session_id, session_id.clone()),
                to: session_id,
            };
            // Queued like every other session event: the host records only
            // what `take_session_events` drains.
            emit(&self.queue, &mut report.session_events, event);
            self.forking = false;
        }
    }

    /// An event the driver has no type for: a compaction's summary, the echo of a line the
    /// CLI took (the exchange's, or the flush protocol's), a background task's end.
    fn on_other(&mut self, v: &Value, run_flush: &mut Option<RunFlush>, collected: &mut Collected) {
        if v.get("type").and_then(Value::as_str) == Some("user")
            && !collected.boundaries.is_empty()
            && collected.summary.is_none()
            && v.get("isReplay").and_then(Value::as_bool) != Some(true)
        {
            collected.summary = Some(message_text(&v["message"]["content"]));
            return;
        }
        if replayed_text(v).is_some() && !collected.echoed {
            // The CLI took the exchange's line: what it wrote before was a turn it had
            // started by itself (the line absorbed into its tool loop), not the reply — nor
            // what a failed exchange's part of the session file must hold: the CLI stored
            // those messages before it took the line (`rewind.rs`). Kept, they were looked
            // for after the line, not found there, and the session called out of step.
            collected.echoed = true;
            collected.text.clear();
            collected.tool_calls.clear();
            collected.model_messages.clear();
            collected.request_id = None;
        }
        if super::beside::main_thread_notification(v) {
            self.notified = true;
        }
        if let Some(f) = run_flush.as_mut()
            && f.state.asked_at.is_some()
            && replayed_text(v).is_some_and(|t| t == f.protocol.message)
        {
            f.taken = true;
        }
        tracing::trace!(event = %v, "claude-cli: other event");
    }
}

/// A model's message: its usage noted (the flush protocol's trigger, what a turn cut short
/// cost), and the main thread's text and tool calls collected. The CLI's own messages
/// (`<synthetic>`: an API error, a `/compact` that could not compact) are no reply.
fn on_assistant(a: AssistantEvent, run_flush: &mut Option<RunFlush>, collected: &mut Collected) {
    if a.message.model == "<synthetic>" {
        let said = a.message.content.iter().filter_map(|b| b["text"].as_str());
        collected.cli_said.extend(said.map(str::to_string));
        return;
    }
    if let Some(f) = run_flush.as_mut()
        && a.parent_tool_use_id.is_none()
        && f.state.reached_at.is_none()
        && prompt_tokens(&a.message.usage) >= f.protocol.trigger_tokens()
    {
        f.state.reached_at = Some(f.started.elapsed());
    }
    // The main thread's request, which the turn's ledger row names: a subagent's (its lines
    // carry the `parent_tool_use_id` of the call that started it) is billed beside the turn.
    // Taken from any line, a turn interrupted while its subagent ran named the subagent's.
    if a.parent_tool_use_id.is_none() {
        collected.request_id = a.request_id.or(collected.request_id.take());
    }
    let id = a.message.id;
    if id.is_none() || collected.started.iter().all(|(seen, _)| *seen != id) {
        collected.started.push((id.clone(), a.message.usage));
    }
    // A subagent's message (it answers the main thread's `Agent` call, whose result
    // the main thread then reads) is not the turn's reply: its text and calls are
    // the subagent's, stored in the subagent's own file, not the session's.
    if a.parent_tool_use_id.is_none() {
        if id.is_none() || !collected.model_messages.contains(&id) {
            collected.model_messages.push(id.clone());
        }
        collect_blocks(id, a.message.content, collected);
    }
}

/// Logs a stdout line past `MAX_LINE_BYTES`, skipped: the event it held (a message, a `result`)
/// is lost with it, whenever it came — during a turn, between turns, as the child is stopped —
/// and only this line says so.
pub(super) fn line_skipped(session: &str, bytes: usize, during: &str) {
    tracing::warn!(
        session,
        bytes,
        limit = MAX_LINE_BYTES,
        during,
        "claude-cli: a stdout line past the limit was skipped; the event it held is lost"
    );
}

/// Logs a failed read of the child's stdout, which each reader takes as its end: the cause
/// would otherwise be lost.
pub(super) fn read_failed(session: &str, error: &std::io::Error, during: &str) {
    tracing::warn!(session, error = %error, during,
        "claude-cli: reading the child's stdout failed; taken as its end");
}

/// The longest stdout is read after the child exited: the lines it wrote before are already
/// in the pipe; only a process it left behind could keep the pipe open past this.
pub(super) const STDOUT_END_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Completes `wait` after `at`; never when `at` is `None`.
pub(super) async fn sleep_until_after(at: Option<tokio::time::Instant>, wait: std::time::Duration) {
    match at {
        Some(at) => tokio::time::sleep_until(at + wait).await,
        None => std::future::pending().await,
    }
}

/// How the read ends at the end of the child's stdout: the flush protocol's termination, if it
/// terminated the child, else the child's death.
fn stdout_ended(run_flush: &Option<RunFlush>) -> ReadEnd {
    let terminated = run_flush
        .as_ref()
        .is_some_and(|f| f.state.terminated_at.is_some());
    if terminated {
        ReadEnd::Terminated
    } else {
        ReadEnd::Eof
    }
}

/// How a `result` event ends the read: it does, unless a flush line the CLI has not taken yet
/// is queued behind it.
fn result_end(
    result: Box<ResultEvent>,
    read: Read<'_>,
    run_flush: &Option<RunFlush>,
    collected: &mut Collected,
) -> Option<ReadEnd> {
    // A flush line the CLI has not taken yet was queued behind this
    // result: it runs as a turn of its own next, and its reply is the
    // run's answer, so read on.
    if let Some(f) = run_flush.as_ref()
        && f.state.asked_at.is_some()
        && !f.taken
    {
        collected
            .earlier
            .add(&parse_usage(&result.usage, read.requested_1h));
        collected.text.clear();
        collected.tool_calls.clear();
        return None;
    }
    let raw = serde_json::from_str(read.line).unwrap_or(Value::Null);
    Some(ReadEnd::Result {
        result,
        raw,
        read_at: Instant::now(),
    })
}

/// The stdout line an event was decoded from, and the TTL the session asked for.
#[derive(Clone, Copy)]
pub(super) struct Read<'a> {
    pub(super) line: &'a str,
    pub(super) requested_1h: bool,
}

/// An assistant message's text blocks (under the API message's `id`) and tool calls (not the
/// CLI's `StructuredOutput` call, which carries the schema's value and comes back in the
/// `result`).
fn collect_blocks(id: Option<String>, content: Vec<Value>, collected: &mut Collected) {
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => collected.text.push((
                id.clone(),
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )),
            Some("tool_use") => {
                let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                if name != "StructuredOutput" {
                    collected.tool_calls.push(ToolCall {
                        id: block
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        name: name.to_string(),
                        input: block.get("input").cloned().unwrap_or(Value::Null),
                    });
                }
            }
            _ => {}
        }
    }
}
