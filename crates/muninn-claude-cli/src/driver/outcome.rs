//! A `result` event made into the turn's outcome or its error: usage, TTL check, structured
//! output, and a `/compact`'s summary and usage.

use super::{Collected, Driver, truncate};
use crate::event::ResultEvent;
use crate::{TurnReport, parse_model_usage, parse_usage};
use muninn_backend::{BackendError, TtlCheck, TurnOutcome};
use muninn_core::cache::Ttl;
use muninn_core::trace::Usage;
use serde_json::Value;

impl Driver {
    /// Turns a `result` into the turn's outcome or error.
    pub(super) fn outcome(
        &self,
        result: ResultEvent,
        collected: Collected,
        report: &TurnReport,
    ) -> Result<TurnOutcome, BackendError> {
        let interrupted = result.subtype == "error_during_execution"
            && result
                .terminal_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("aborted"));
        if result.is_error && !interrupted {
            return Err(self.error_of(&result));
        }
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        let mut usage = parse_usage(&result.usage, requested_1h);
        usage.add(&collected.earlier);
        let structured = result.structured_output.clone().filter(|v| !v.is_null());
        let mut text = collected.reply_text();
        if text.is_empty() && structured.is_none() {
            text = result.text();
        }
        if self.spec.output_schema.is_some() && structured.is_none() && !interrupted {
            // The CLI ends such a turn as a success (the model answered in text even after its
            // one enforcement nudge); for muninn a schema turn without a value failed.
            return Err(BackendError::Protocol(format!(
                "the session has an output schema but the model gave no structured output; its text: {}",
                truncate(&text, 500)
            )));
        }
        let (ttl, events) = ttl_check(&usage, requested_1h);
        Ok(TurnOutcome {
            text,
            tool_calls: collected.tool_calls,
            structured,
            stop_reason: if interrupted {
                "interrupted".to_string()
            } else {
                result.stop_reason.clone().unwrap_or_default()
            },
            usage,
            raw_usage: result.usage,
            predicted: None,
            miss: None,
            ttl,
            retries: report.retries.clone(),
            events,
            request_id: collected.request_id,
            breakpoints: Vec::new(),
            tool_results: Default::default(),
            provider_miss: None,
        })
    }

    /// The error a failed `result` stands for, its message naming the session's own limits
    /// (budget, turns) when one of them ended it.
    fn error_of(&self, result: &ResultEvent) -> BackendError {
        let status = result.api_error_status.unwrap_or(0);
        let mut message = result.text();
        if message.is_empty() {
            message = result.errors.join("; ");
        }
        // The session's own limits: not the API's doing, and no later attempt helps until
        // the limit is raised.
        match result.subtype.as_str() {
            "error_max_budget_usd" if self.config.run_budget_micro_usd.is_some() => {
                message = format!(
                    "the run's budget (--max-budget-usd, run_budget_micro_usd) is spent: \
                     {message}; the next run gets a fresh one"
                );
            }
            "error_max_budget_usd" => {
                message = format!(
                    "the session's budget (--max-budget-usd) is spent: {message}; the CLI \
                     refuses every later turn of this process"
                );
            }
            "error_max_turns" => {
                message = format!("the run reached --max-turns: {message}");
            }
            _ => {}
        }
        BackendError::Api {
            status,
            kind: result
                .terminal_reason
                .clone()
                .unwrap_or_else(|| result.subtype.clone()),
            message,
            retryable: status == 429 || status >= 500,
            retry_after_ms: None,
            // The CLI's `result` names none.
            request_id: None,
        }
    }

    /// Turns the `result` of a `/compact` into its outcome: the compaction request's usage (the
    /// `result`'s own `usage` is all zeros for a local command) and the summary.
    pub(super) fn compaction_outcome(
        &self,
        result: ResultEvent,
        collected: Collected,
        report: &TurnReport,
    ) -> Result<TurnOutcome, BackendError> {
        if result.is_error {
            return self.outcome(result, collected, report);
        }
        if collected.boundaries.is_empty() {
            // The CLI answered in text instead: its summary request failed (the API refused it
            // every time), or the conversation is too short to summarise. Its `result` text is
            // empty then; why is in the CLI's own message ("Error: No messages to compact").
            let mut why = result.text();
            if why.is_empty() {
                why = collected.cli_said.join("\n");
            }
            return Err(BackendError::CompactionFailed(format!(
                "the CLI did not compact the session: {}",
                truncate(&why, 500)
            )));
        }
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        let raw = result
            .model_usage_since_last_result
            .clone()
            .unwrap_or(Value::Null);
        let usage = parse_model_usage(&raw, requested_1h);
        let (ttl, events) = ttl_check(&usage, requested_1h);
        Ok(TurnOutcome {
            text: collected.summary.unwrap_or_default(),
            tool_calls: Vec::new(),
            structured: None,
            stop_reason: "compacted".to_string(),
            usage,
            raw_usage: raw,
            predicted: None,
            miss: None,
            ttl,
            retries: report.retries.clone(),
            events,
            request_id: collected.request_id,
            breakpoints: Vec::new(),
            tool_results: Default::default(),
            provider_miss: None,
        })
    }
}

/// The TTL the session asked for against the split the CLI reported, and the mismatch event
/// when they differ (the CLI puts one TTL on every marker, so all writes should be under it).
fn ttl_check(usage: &Usage, requested_1h: bool) -> (TtlCheck, Vec<muninn_backend::TurnEvent>) {
    let written = usage.written();
    let ttl = TtlCheck {
        expected_5m: if requested_1h { 0 } else { written },
        expected_1h: if requested_1h { written } else { 0 },
        honoured_5m: usage.cache_write_5m,
        honoured_1h: usage.cache_write_1h,
    };
    let events = if ttl.mismatch() {
        vec![muninn_backend::TurnEvent::TtlMismatch { check: ttl }]
    } else {
        Vec::new()
    };
    (ttl, events)
}
