//! What the CLI bills beside the turns muninn asked for, reported so it reaches the ledger
//! ([`muninn_backend::Backend::take_failed_attempts`], a row of its own each, as for any
//! attempt billed without an answer):
//!
//! - **A subagent's requests.** The `result`'s `usage` is the main thread's requests alone;
//!   its `model_usage_since_last_result` holds every request since the last `result`, a
//!   subagent's among them. The difference is reported (not for a turn that compacted: that
//!   difference is the compaction's, reported with its [`crate::SessionEvent::Compacted`]).
//! - **A turn the CLI started by itself.** A background task (a subagent, a Bash command) that
//!   ends after a turn's `result` makes the CLI start a turn of its own while muninn is idle:
//!   `system/task_notification` → `system/init` → assistant → `result`. muninn's children run
//!   with background tasks off (`launch.rs`), so none should come; should one come anyway, its
//!   `result` must not be read as the next turn's answer (every answer would be one turn
//!   behind). It is told apart by the echo of the exchange's line (`--replay-user-messages`),
//!   which the CLI writes as it takes the line, right after the turn's `system/init`: a `result`
//!   after an init with no echo, once a main-thread task has notified, is the CLI's own turn —
//!   unless no model's message came before it and the exchange is a `/compact`, whose own
//!   `result` may come with no echo.
//!   Its output is drained before each exchange's line is written, and read past while waiting
//!   for the exchange's `result`; its usage (all of `model_usage_since_last_result`) is
//!   reported and logged at warn with its cost.
//! - **A turn of its own still running when the child is stopped** (a park, a shutdown, a
//!   relaunch for a fresh budget). Stopping closes stdin, which lets the CLI finish the turn,
//!   and reads stdout to its end meanwhile, so the turn's `result` is taken as above. A turn cut
//!   short before its `result` (the child ignored the end of its input and was signalled at
//!   the shutdown timeout) is reported with what its stdout showed: each API message's usage
//!   as it began — input and cache final, output as far as reported (one token) — and logged
//!   at warn as billed but unfinished.

use super::{Collected, Driver};
use crate::event::{ResultEvent, decode};
use crate::lines::Line;
use crate::{TurnReport, parse_model_usage, parse_usage};
use muninn_backend::FailedAttempt;
use muninn_core::trace::Usage;
use serde_json::Value;
use std::time::Duration;

impl Driver {
    /// Reads what the child wrote while idle (a turn it started by itself), taking each such
    /// turn's `result` as its own; returns what was read of a turn still running, which the
    /// exchange's read carries on from.
    pub(super) async fn drain_idle(&mut self, report: &mut TurnReport) -> Collected {
        let mut collected = Collected::default();
        let requested_1h = self.spec.conversation_ttl == muninn_core::cache::Ttl::OneHour;
        loop {
            let Some(live) = self.child.as_mut() else {
                return collected;
            };
            // Only what is already there: a zero timeout polls the read once.
            let line = match tokio::time::timeout(Duration::ZERO, live.stdout.next_line()).await {
                Ok(Ok(Some(Line::Text(line)))) => line,
                Ok(Ok(Some(Line::Skipped(bytes)))) => {
                    super::read::line_skipped(&self.session_id, bytes, "the read between turns");
                    continue;
                }
                // The end of stdout: the exchange's write finds a dead child.
                Ok(Ok(None)) => return collected,
                Ok(Err(e)) => {
                    super::read::read_failed(&self.session_id, &e, "the read between turns");
                    return collected;
                }
                // Nothing waiting.
                Err(_elapsed) => return collected,
            };
            self.idle_line(&line, &mut collected, report, requested_1h);
        }
    }

    /// Takes one stdout line the child wrote with no exchange in flight: a `result` ends a
    /// turn the CLI started by itself; anything else is read into `collected`.
    pub(super) fn idle_line(
        &mut self,
        line: &str,
        collected: &mut Collected,
        report: &mut TurnReport,
        requested_1h: bool,
    ) {
        match decode(line) {
            Some(crate::event::CliEvent::Result(result)) => {
                let raw = serde_json::from_str(line).unwrap_or(Value::Null);
                self.take_unprompted(&result, &raw, collected, report, requested_1h);
            }
            Some(event) => {
                let read = super::read::Read { line, requested_1h };
                // Never a `result` here, so never the end of a read.
                let _ = self.on_event(event, read, &mut None, report, collected);
            }
            None => {}
        }
    }

    /// A turn the CLI started by itself whose `result` never came (its child stopped before
    /// it): logged at warn with what is known, and billed as far as its stdout showed — each
    /// API message's usage as it began. Nothing when no such turn had begun.
    pub(super) fn take_unfinished(&mut self, collected: &Collected) {
        if !collected.saw_init && collected.started.is_empty() {
            return;
        }
        let requested_1h = self.spec.conversation_ttl == muninn_core::cache::Ttl::OneHour;
        let mut usage = Usage::default();
        for (_, raw) in &collected.started {
            usage.add(&parse_usage(raw, requested_1h));
        }
        tracing::warn!(session = %self.session_id, messages = collected.started.len(),
            request_id = collected.request_id.as_deref().unwrap_or(""),
            tokens_uncached = usage.input, tokens_write_5m = usage.cache_write_5m,
            tokens_write_1h = usage.cache_write_1h, tokens_read = usage.cache_read,
            tokens_output = usage.output, text = %super::truncate(&collected.reply_text(), 200),
            "claude-cli: the child was stopped during a turn the CLI started by itself; its result never came, and it is reported as far as its messages showed");
        if collected.started.is_empty() {
            // Begun, but no message of the model's came: whatever its request cost is unknown.
            return;
        }
        self.bill(FailedAttempt {
            usage,
            raw_usage: Value::Array(collected.started.iter().map(|(_, u)| u.clone()).collect()),
            predicted: None,
            request_id: collected.request_id.clone(),
            error: "a turn the Claude Code CLI started by itself, still running when its child was stopped: its messages' usage as they began (no result came)".to_string(),
            breakpoints: Vec::new(),
            cleared: false,
        });
    }

    /// Whether a `result` read after `collected` ends a turn the CLI started by itself. A
    /// `/compact`'s own `result` follows an init with no echo too, and no message of a model:
    /// a turn of the CLI's own is the model's, so one with none is the `/compact`'s — a
    /// notification that came during the turn before may have been taken into its tool loop,
    /// which stdout does not tell, so that no turn of the CLI's own follows.
    pub(super) fn unprompted(&self, collected: &Collected) -> bool {
        self.notified
            && collected.saw_init
            && !collected.echoed
            && !(collected.compacting && collected.started.is_empty())
    }

    /// A turn the CLI started by itself ended with `result`: its usage is reported, it is logged
    /// at warn with its cost, and what was read of it is set aside (a compaction in it recorded
    /// as one from outside).
    pub(super) fn take_unprompted(
        &mut self,
        result: &ResultEvent,
        raw: &Value,
        collected: &mut Collected,
        report: &mut TurnReport,
        requested_1h: bool,
    ) {
        let (usage, raw_usage) = match &result.model_usage_since_last_result {
            Some(m) => (parse_model_usage(m, requested_1h), m.clone()),
            None => (
                parse_usage(&result.usage, requested_1h),
                result.usage.clone(),
            ),
        };
        let cost_micro_usd = cost_micro_usd(raw);
        tracing::warn!(session = %self.session_id, cost_micro_usd,
            tokens_uncached = usage.input, tokens_write_5m = usage.cache_write_5m,
            tokens_write_1h = usage.cache_write_1h, tokens_read = usage.cache_read,
            tokens_output = usage.output, text = %super::truncate(&collected.reply_text(), 200),
            "claude-cli: the CLI ran a turn by itself (a background task's notification); its usage is reported, its reply set aside");
        self.note_compactions(collected, None, false, &mut report.session_events);
        self.bill(FailedAttempt {
            usage,
            raw_usage,
            predicted: None,
            request_id: collected.request_id.clone(),
            error: "a turn the Claude Code CLI started by itself (a background task's notification), not muninn's".to_string(),
            breakpoints: Vec::new(),
            cleared: false,
        });
        self.notified = false;
        *collected = Collected {
            earlier: std::mem::take(&mut collected.earlier),
            compacting: collected.compacting,
            ..Collected::default()
        };
    }

    /// Reports what a `result` of an exchange's own holds beyond its `usage` (a subagent's
    /// requests; for a turn cut short, `error_during_execution`, whose `usage` is all zeros,
    /// the request it cut; for a `/compact` that did not compact, whose `usage` is all zeros
    /// too, its summary request), unless the exchange compacted, whose difference is the
    /// compaction's, reported with its [`crate::SessionEvent::Compacted`].
    pub(super) fn bill_subagents(
        &self,
        result: &ResultEvent,
        collected: &Collected,
        requested_1h: bool,
    ) {
        let Some(all) = &result.model_usage_since_last_result else {
            return;
        };
        if !collected.boundaries.is_empty() {
            return;
        }
        let all_usage = parse_model_usage(all, requested_1h);
        let turn = parse_usage(&result.usage, requested_1h);
        let beside = Usage {
            input: all_usage.input.saturating_sub(turn.input),
            cache_write_5m: all_usage.cache_write_5m.saturating_sub(turn.cache_write_5m),
            cache_write_1h: all_usage.cache_write_1h.saturating_sub(turn.cache_write_1h),
            cache_read: all_usage.cache_read.saturating_sub(turn.cache_read),
            output: all_usage.output.saturating_sub(turn.output),
        };
        if beside == Usage::default() {
            return;
        }
        let whose = if collected.compacting {
            "a /compact that did not compact"
        } else if result.subtype == "error_during_execution" {
            "a turn cut short (an interrupt)"
        } else {
            "a subagent's"
        };
        tracing::info!(session = %self.session_id, tokens_read = beside.cache_read,
            tokens_write = beside.written(), tokens_output = beside.output, whose,
            "claude-cli: requests billed beside the turn's own usage are reported");
        self.bill(FailedAttempt {
            usage: beside,
            raw_usage: all.clone(),
            predicted: None,
            request_id: None,
            error: format!("requests billed beside the turn's own ({whose}): the result's model_usage_since_last_result beyond its usage"),
            breakpoints: Vec::new(),
            cleared: false,
        });
    }

    fn bill(&self, attempt: FailedAttempt) {
        if let Ok(mut q) = self.billed.lock() {
            q.push(attempt);
        }
    }
}

/// Whether a stdout event is a main-thread background task's end (`system/task_notification`
/// not `owned_by_subagent`), after which the CLI may start a turn by itself.
pub(super) fn main_thread_notification(event: &Value) -> bool {
    event.get("type").and_then(Value::as_str) == Some("system")
        && event.get("subtype").and_then(Value::as_str) == Some("task_notification")
        && event.get("owned_by_subagent").and_then(Value::as_bool) != Some(true)
}

/// A `result`'s cost since the last `result` in micro-dollars, from its per-model `costUSD`
/// (the CLI's own pricing, for the log line; the ledger prices the usage itself).
fn cost_micro_usd(raw: &Value) -> i64 {
    let dollars: f64 = raw
        .get("model_usage_since_last_result")
        .and_then(Value::as_object)
        .map(|models| {
            models
                .values()
                .filter_map(|m| m.get("costUSD").and_then(Value::as_f64))
                .sum()
        })
        .unwrap_or(0.0);
    // A log figure: rounding a float to whole micro-dollars is exact enough.
    #[allow(clippy::cast_possible_truncation)]
    let micro = (dollars * 1e6).round() as i64;
    micro
}
