//! Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`).
//!
//! # The format, as far as the importer cares
//!
//! Every line is `{"timestamp": "<RFC 3339>", "type": <kind>, "payload": {…}}`:
//!
//! - `session_meta`: `payload.id` is the session id (the file stem is the fallback),
//!   `payload.model` if present the model until a `turn_context` says otherwise;
//! - `turn_context`: `payload.model` is the model of the turn's requests;
//! - `event_msg` with `payload.type == "user_message"`: a human message, so the next request is a
//!   boundary (as is the first);
//! - `event_msg` with `payload.type == "token_count"`: one finished request, its usage in
//!   `payload.info.last_token_usage`. `info` is `null` before the first response, and Codex
//!   re-emits the last count (same `total_token_usage`) on some events: both are skipped;
//! - `compacted`: the history was rewritten, so the next request is `compacted`;
//! - `response_item`: model output (`reasoning`, `function_call`, assistant `message`, …) or input
//!   (user `message`, `function_call_output`, …). Codex 0.77 and later log a request's output
//!   items *before* its `token_count`; Codex 0.57–0.58 log them right *after* it, before the next
//!   input. So output items that follow a count with no input between belong to the request
//!   just counted, and other output items to the next one. The first output item logged before
//!   a count marks when that request was answering, which is used as its `at_ms`; without one
//!   the `token_count` line's own timestamp is used. A `reasoning` item among a request's output
//!   marks it `reasoning` (OpenAI's reasoning models drop that reasoning from the prompt at the
//!   next user message, which the OpenAI cache model needs to know);
//! - `event_msg` `entered_review_mode` … `exited_review_mode`: a `/review` runs as a conversation
//!   of its own (its own prompt and running totals), which Codex 0.77 writes to a rollout of its
//!   own (`source: {"subagent": "review"}`, with the review's output items) and only echoes here:
//!   the echoed counts are skipped (the review's own rollout is its record), and so is the main
//!   thread's last count, which Codex re-emits after the review.
//!
//! Usage mapping: `cached_input_tokens` → cache read, `cache_write_input_tokens` (logged by newer
//! Codex versions, for models that bill a write premium) → cache write (OpenAI has no TTL tiers:
//! the 5m column), the rest of `input_tokens` → input. Older rollouts log no writes (OpenAI
//! caches implicitly and did not bill them). `output_tokens`
//! already includes reasoning in OpenAI's accounting; `reasoning_output_tokens` is added only when
//! `total_tokens` shows it was counted separately.
//!
//! A rollout is one thread (`main`); a model switch gives a second trace.

use crate::json::{Str, parse_timestamp_ms};
use crate::lines::{Line, parse_line};
use crate::sink::RequestSlot;
use crate::{FormatReader, LineContext};
use muninn_core::trace::{ThreadKind, TraceRequest, Usage};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
struct CodexLine<'a> {
    #[serde(borrow)]
    timestamp: Option<Str<'a>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    payload: Option<Payload<'a>>,
}

/// The union of the payload fields read, whatever the line's type.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    #[serde(borrow)]
    role: Option<Str<'a>>,
    info: Option<TokenInfo>,
}

#[derive(Deserialize)]
struct TokenInfo {
    total_token_usage: Option<TokenUsage>,
    last_token_usage: Option<TokenUsage>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
struct TokenUsage {
    input_tokens: Option<u64>,
    cached_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    reasoning_output_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

impl TokenUsage {
    /// What [`TokenUsage::to_usage`] has to correct, said: OpenAI counts the cached (and the
    /// written) tokens inside `input_tokens`, so more of them than that is a damaged count,
    /// read as all of the input (none of 3,480 counts in the public rollouts is one).
    fn inconsistency(self) -> Option<String> {
        let input = self.input_tokens.unwrap_or(0);
        let cached = self.cached_input_tokens.unwrap_or(0);
        let written = self.cache_write_input_tokens.unwrap_or(0);
        if cached > input {
            Some(format!(
                "cached_input_tokens {cached} above input_tokens {input}: read as {input}"
            ))
        } else if written > input - cached {
            Some(format!(
                "cache_write_input_tokens {written} above the {} input tokens not cached: read \
                 as {}",
                input - cached,
                input - cached
            ))
        } else {
            None
        }
    }

    fn to_usage(self) -> Usage {
        let input = self.input_tokens.unwrap_or(0);
        let cached = self.cached_input_tokens.unwrap_or(0).min(input);
        let written = self
            .cache_write_input_tokens
            .unwrap_or(0)
            .min(input - cached);
        let output = self.output_tokens.unwrap_or(0);
        let reasoning = self.reasoning_output_tokens.unwrap_or(0);
        // Checked and saturating: the counts are the rollout's, any u64 (fuzzing found the
        // overflow of `input + output + reasoning`). A sum that overflows matches no total.
        let separate = reasoning > 0
            && input
                .checked_add(output)
                .and_then(|n| n.checked_add(reasoning))
                == self.total_tokens;
        Usage {
            input: input - cached - written,
            cache_write_5m: written,
            cache_write_1h: 0,
            cache_read: cached,
            output: if separate {
                output.saturating_add(reasoning)
            } else {
                output
            },
        }
    }
}

/// Reads one rollout.
#[derive(Debug)]
pub(crate) struct CodexReader {
    session: String,
    model: Option<String>,
    warned_no_model: bool,
    human_turn: bool,
    compacted: bool,
    /// The first model-output item since the last request, Unix ms.
    output_started_at: Option<i64>,
    /// Whether a `reasoning` item was among the output since the last request.
    reasoning: bool,
    /// The last `total_token_usage` seen on the thread being logged, to skip re-emitted counts.
    last_total: Option<TokenUsage>,
    /// The request just counted, while no input has followed its count: output items logged
    /// now are its own (Codex 0.57–0.58 log them after the count). `Some(None)` for a count
    /// refused past the limits: its items are still its own, not the next request's.
    answered: Option<Option<RequestSlot>>,
    /// While a `/review` runs: the main thread's `last_total`, kept for when it ends.
    review: Option<Option<TokenUsage>>,
}

impl CodexReader {
    pub fn new(path: &Path) -> Self {
        let session = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        CodexReader {
            session,
            model: None,
            warned_no_model: false,
            human_turn: true,
            compacted: false,
            output_started_at: None,
            reasoning: false,
            last_total: None,
            answered: None,
            review: None,
        }
    }

    /// A `response_item`: model output right after a count is the counted request's own (the
    /// order of Codex 0.57–0.58); any other output dates the next request (the first item, when
    /// it was answering). A `reasoning` item marks the request it belongs to as having reasoned.
    fn response_item(
        &mut self,
        payload: &Payload<'_>,
        at_ms: Option<i64>,
        cx: &mut LineContext<'_, '_>,
    ) {
        let payload_kind = payload.kind.as_ref().map(Str::as_str);
        let is_input = match payload_kind {
            Some("message") => payload
                .role
                .as_ref()
                .is_none_or(|r| r.as_str() != "assistant"),
            Some("ghost_snapshot") => return, // Codex's own undo record, neither side's
            Some(kind) => kind.ends_with("_output"),
            None => true,
        };
        let reasoning = payload_kind == Some("reasoning");
        if is_input {
            // A new request needs new input: whatever output follows is the next request's.
            self.answered = None;
        } else if let Some(answered) = self.answered {
            if let Some(request) = answered.and_then(|slot| cx.sink.get_mut(slot)) {
                request.reasoning |= reasoning;
            }
        } else {
            if self.output_started_at.is_none() {
                self.output_started_at = at_ms;
            }
            self.reasoning |= reasoning;
        }
    }

    /// `entered_review_mode` / `exited_review_mode`: the review's counts (skipped) run on totals
    /// of their own, and the main thread's resume where they stopped.
    fn review_mode(&mut self, entered: bool) {
        self.answered = None;
        if entered {
            if self.review.is_none() {
                self.review = Some(self.last_total.take());
            }
        } else if let Some(main_total) = self.review.take() {
            self.last_total = main_total;
        }
    }

    /// A `token_count` event: one finished request, pushed with what the lines since the last
    /// one said of it. Skipped before the first response (`info` is null) and when Codex
    /// re-emits the last count (same `total_token_usage`).
    fn token_count(
        &mut self,
        info: Option<TokenInfo>,
        at_ms: Option<i64>,
        line: &Line<'_>,
        cx: &mut LineContext<'_, '_>,
    ) {
        let Some(info) = info else { return };
        if self.review.is_some() {
            // A review's count, echoed from its own rollout: imported from there, once.
            return;
        }
        let Some(last) = info.last_token_usage else {
            return;
        };
        if let Some(total) = info.total_token_usage {
            if self.last_total == Some(total) {
                return;
            }
            self.last_total = Some(total);
        }
        let Some(at_ms) = self.output_started_at.or(at_ms) else {
            cx.diag.warn(
                line.number,
                "token_count without a valid timestamp, skipped",
            );
            return;
        };
        if let Some(why) = last.inconsistency() {
            cx.diag.warn(line.number, why);
        }
        if self.model.is_none() && !self.warned_no_model {
            self.warned_no_model = true;
            cx.diag.warn(
                line.number,
                "no model recorded before this request, using \"unknown\"",
            );
        }
        let request = self.take_request(at_ms, last.to_usage());
        let model = self.model.as_deref().unwrap_or("unknown");
        let thread = (self.session.as_str(), "main", ThreadKind::Main);
        self.answered = Some(cx.push(thread, model, request, line.number));
    }

    /// The request a `token_count` finished, from the state gathered since the last one, which
    /// starts afresh for the next.
    fn take_request(&mut self, at_ms: i64, usage: Usage) -> TraceRequest {
        let request = TraceRequest {
            at_ms,
            usage,
            boundary: self.human_turn,
            compacted: self.compacted,
            reasoning: self.reasoning,
            // The rest (tool results, conversations, diagnoses) this format does not record.
            ..TraceRequest::default()
        };
        self.human_turn = false;
        self.compacted = false;
        self.output_started_at = None;
        self.reasoning = false;
        request
    }
}

impl FormatReader for CodexReader {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(parsed) = parse_line::<CodexLine<'_>>(line, cx.diag) else {
            return;
        };
        let at_ms = parsed
            .timestamp
            .as_ref()
            .and_then(|t| parse_timestamp_ms(t.as_str()));
        let Some(payload) = parsed.payload else {
            return;
        };
        let payload_kind = payload.kind.as_ref().map(Str::as_str);
        match parsed.kind.as_ref().map(Str::as_str) {
            Some("session_meta") => {
                if let Some(id) = &payload.id {
                    self.session = id.as_str().to_owned();
                }
                if let Some(model) = &payload.model {
                    self.model = Some(model.as_str().to_owned());
                }
            }
            Some("turn_context") => {
                if let Some(model) = &payload.model
                    && self.model.as_deref() != Some(model.as_str())
                {
                    self.model = Some(model.as_str().to_owned());
                }
            }
            Some("compacted") => {
                self.compacted = true;
                self.answered = None;
            }
            Some("response_item") => self.response_item(&payload, at_ms, cx),
            Some("event_msg") => match payload_kind {
                Some("user_message") => {
                    self.human_turn = true;
                    self.answered = None;
                }
                Some("token_count") => self.token_count(payload.info, at_ms, line, cx),
                Some("entered_review_mode") => self.review_mode(true),
                Some("exited_review_mode") => self.review_mode(false),
                _ => {}
            },
            _ => {}
        }
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}
