//! Assembling a streamed reply: each event's data fed in order builds the
//! [`MessagesResponse`] the non-streaming API would have returned, with the usage JSON kept
//! verbatim; a malformed or out-of-order event is a protocol failure that records whether reply
//! content had begun.

use super::{AttemptError, protocol};
use crate::wire::{ContentBlock, Delta, ErrorBody, MessagesResponse, Role, StreamEvent, Usage};
use muninn_backend::BackendError;
use serde_json::{Map, Value};

/// Builds a [`MessagesResponse`] from stream events, keeping the raw usage JSON.
#[derive(Debug, Default)]
pub struct Assembler {
    message: Option<MessagesResponse>,
    raw_usage: Map<String, Value>,
    partial_json: Vec<(usize, String)>,
    /// Whether a `message_delta` reported the output so far.
    output_reported: bool,
    /// Whether a `message_delta` came (the stop reason and the final usage).
    delta_came: bool,
    /// Per block started, whether its `content_block_stop` came.
    block_stopped: Vec<bool>,
    /// Whether reply content has begun (the first `content_block_start`).
    pub content_started: bool,
    /// Whether `message_stop` arrived.
    pub stopped: bool,
}

impl Assembler {
    /// Feeds one event's data.
    pub(super) fn on_frame(&mut self, data: &str) -> Result<(), AttemptError> {
        let after = self.content_started;
        let event = StreamEvent::parse(data).map_err(|e| protocol(e.to_string(), after))?;
        match event {
            StreamEvent::MessageStart { message } => {
                // One reply, one start: a second would silently drop what came so far.
                if self.message.is_some() {
                    return Err(protocol(
                        "a second message_start in one stream".to_string(),
                        after,
                    ));
                }
                if let Some(Value::Object(raw)) = serde_json::from_str::<Value>(data)
                    .ok()
                    .and_then(|v| v.get("message").and_then(|m| m.get("usage")).cloned())
                {
                    self.raw_usage = raw;
                }
                self.message = Some(message);
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                self.content_started = true;
                let message = self.message_mut()?;
                if index != message.content.len() {
                    return Err(protocol(
                        format!("content block {index} out of order"),
                        true,
                    ));
                }
                message.content.push(content_block);
                self.block_stopped.push(false);
            }
            StreamEvent::ContentBlockDelta { index, delta } => self.on_delta(index, delta)?,
            StreamEvent::ContentBlockStop { index } => self.on_block_stop(index)?,
            StreamEvent::MessageDelta {
                delta,
                usage,
                context_management,
            } => {
                // Laid over `message_start`'s usage: the final counts win, the rest is kept.
                if let Some(Value::Object(raw)) = serde_json::from_str::<Value>(data)
                    .ok()
                    .and_then(|v| v.get("usage").cloned())
                {
                    self.raw_usage.extend(raw);
                }
                self.output_reported |= usage.output_tokens.is_some();
                self.delta_came = true;
                let message = self.message_mut()?;
                message.stop_reason = delta.stop_reason;
                message.stop_sequence = delta.stop_sequence;
                message.usage.merge(&usage);
                // The applied edits, when the stream says them at its end, as the API does.
                if context_management.is_some() {
                    message.context_management = context_management;
                }
            }
            StreamEvent::MessageStop => self.stopped = true,
            StreamEvent::Ping | StreamEvent::Unknown(_) => {}
            StreamEvent::Error { error } => return Err(stream_error(error, after)),
        }
        Ok(())
    }

    /// Appends a delta to its block; tool input is gathered as text until the block stops.
    fn on_delta(&mut self, index: usize, delta: Delta) -> Result<(), AttemptError> {
        // A stopped block is whole: a tool call's input gathered again after its stop would
        // replace the input it had at a second stop.
        if self.block_stopped.get(index) == Some(&true) {
            return Err(protocol(
                format!("a delta for content block {index} after its content_block_stop"),
                true,
            ));
        }
        let block = self
            .message_mut()?
            .content
            .get_mut(index)
            .ok_or_else(|| protocol(format!("delta for unknown block {index}"), true))?;
        match apply(block, delta) {
            Applied::Done => {}
            Applied::Input(partial_json) => self.gather_input(index, partial_json),
            Applied::Kept(raw) => self.message_mut()?.unapplied_deltas.push((index, raw)),
            Applied::Misfit(d) => {
                return Err(protocol(
                    format!("delta {d:?} does not fit block {index}"),
                    true,
                ));
            }
        }
        Ok(())
    }

    /// Appends a piece of block `index`'s input JSON, parsed when the block stops.
    fn gather_input(&mut self, index: usize, partial_json: String) {
        match self.partial_json.iter_mut().find(|(i, _)| *i == index) {
            Some((_, s)) => s.push_str(&partial_json),
            None => self.partial_json.push((index, partial_json)),
        }
    }

    /// Finishes a block once it stops: a streamed compaction whose summary came becomes a
    /// [`ContentBlock::Compaction`]; a tool block's gathered input is parsed (empty input is
    /// `{}`).
    fn on_block_stop(&mut self, index: usize) -> Result<(), AttemptError> {
        // One stop per block started: a stop for another is a broken stream.
        match self.block_stopped.get_mut(index) {
            None => {
                return Err(protocol(
                    format!("content_block_stop for unknown block {index}"),
                    self.content_started,
                ));
            }
            Some(true) => {
                return Err(protocol(
                    format!("a second content_block_stop for block {index}"),
                    true,
                ));
            }
            Some(stopped) => *stopped = true,
        }
        if let Some(block) = self.message_mut()?.content.get_mut(index)
            && let ContentBlock::Unknown(raw) = block
            && is_compaction(raw)
            && let Ok(whole @ ContentBlock::Compaction { .. }) =
                serde_json::from_value::<ContentBlock>(raw.clone())
        {
            *block = whole;
        }
        let Some(pos) = self.partial_json.iter().position(|(i, _)| *i == index) else {
            return Ok(());
        };
        let (_, json) = self.partial_json.swap_remove(pos);
        let parsed: Value = if json.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(&json).map_err(|e| {
                protocol(
                    format!("tool input of block {index} is not JSON: {e}"),
                    true,
                )
            })?
        };
        match self.message_mut()?.content.get_mut(index) {
            Some(ContentBlock::ToolUse { input, .. }) => *input = parsed,
            Some(ContentBlock::Unknown(raw)) => raw["input"] = parsed,
            _ => {}
        }
        Ok(())
    }

    /// Whether a `message_delta` said the output count: if not, [`Assembler::billed_so_far`]
    /// counts the content received, an estimate.
    pub fn output_reported(&self) -> bool {
        self.output_reported
    }

    /// What the provider billed for the stream so far, once `message_start` has come (before
    /// it, nothing was billed): `message_start`'s input and cache counts, and as output the
    /// last `message_delta`'s count when one came — the provider's own — else the tokens of the
    /// content received (`received_output_tokens`), at least `message_start`'s count. Tokens
    /// stay integers; the raw usage is `message_start`'s with any `message_delta` laid over it.
    pub fn billed_so_far(&self) -> Option<(muninn_core::trace::Usage, Value)> {
        let message = self.message.as_ref()?;
        let mut usage = message.usage.to_core();
        if !self.output_reported {
            let received = received_output_tokens(&message.content, &self.partial_json);
            usage.output = usage.output.max(received);
        }
        Some((usage, Value::Object(self.raw_usage.clone())))
    }

    fn message_mut(&mut self) -> Result<&mut MessagesResponse, AttemptError> {
        let after = self.content_started;
        self.message
            .as_mut()
            .ok_or_else(|| protocol("an event before message_start".to_string(), after))
    }

    /// The whole reply, once `message_stop` came. A stream that stops without having said
    /// what the API always says is broken, and fails here rather than passing for whole: no
    /// `message_delta` (the reply would carry `message_start`'s placeholder output count as the
    /// provider's, and no stop reason), or a tool call's input gathered and never completed by
    /// its `content_block_stop` (the call would go back with its start's empty input).
    pub(super) fn finish(&mut self) -> Result<(MessagesResponse, Value), AttemptError> {
        let after = self.content_started;
        if !self.delta_came {
            return Err(protocol(
                "message_stop without message_delta: the stream never said its stop reason \
                 and output count"
                    .to_string(),
                after,
            ));
        }
        if let Some((index, _)) = self.partial_json.first() {
            return Err(protocol(
                format!(
                    "message_stop before content block {index} stopped: its input is unfinished"
                ),
                after,
            ));
        }
        let message = self
            .message
            .take()
            .ok_or_else(|| protocol("message_stop without message_start".to_string(), true))?;
        if message.role != Role::Assistant {
            return Err(protocol(
                "the reply is not from the assistant".to_string(),
                true,
            ));
        }
        Ok((message, Value::Object(std::mem::take(&mut self.raw_usage))))
    }
}

/// What became of a delta laid on its block (`apply`).
enum Applied {
    /// The block took it.
    Done,
    /// A piece of the block's input JSON, gathered until the block stops.
    Input(String),
    /// A delta the block cannot take, kept beside the reply
    /// ([`MessagesResponse::unapplied_deltas`]).
    Kept(Value),
    /// A known delta that does not fit its known block: the stream is broken.
    Misfit(Delta),
}

/// Lays `delta` on `block`: text, thinking and a signature appended or set, a citation
/// gathered into the block's `citations` as the official SDKs' accumulators gather them (the
/// block goes back with them), a piece of a tool call's input handed back to be gathered.
fn apply(block: &mut ContentBlock, delta: Delta) -> Applied {
    if is_compaction_block(block) {
        return apply_to_compaction(block, delta);
    }
    match (block, delta) {
        (ContentBlock::Text { text, .. }, Delta::TextDelta { text: more }) => {
            text.push_str(&more);
        }
        (ContentBlock::Thinking { thinking, .. }, Delta::ThinkingDelta { thinking: more }) => {
            thinking.push_str(&more);
        }
        (ContentBlock::Thinking { signature, .. }, Delta::SignatureDelta { signature: s }) => {
            *signature = Some(s);
        }
        (ContentBlock::Text { extra, .. }, Delta::CitationsDelta { citation }) => {
            match extra.get_mut("citations") {
                Some(Value::Array(citations)) => citations.push(citation),
                _ => {
                    extra.insert("citations".to_string(), Value::Array(vec![citation]));
                }
            }
        }
        // A tool call's input, and that of a call this crate does not name (a server tool's
        // `server_tool_use`, an `mcp_tool_use`: any block with an `input`), which streams it
        // the same way.
        (ContentBlock::ToolUse { .. }, Delta::InputJsonDelta { partial_json }) => {
            return Applied::Input(partial_json);
        }
        (ContentBlock::Unknown(raw), Delta::InputJsonDelta { partial_json })
            if raw.get("input").is_some() =>
        {
            return Applied::Input(partial_json);
        }
        (block, delta) => return not_applied(block, delta),
    }
    Applied::Done
}

/// `apply` for a compaction block. A streamed compaction starts with `"content": null`, which
/// is no `ContentBlock::Compaction` yet (a block whose summary never comes stays the verbatim
/// `null` block the non-streaming API answers for a failed compaction): the summary and
/// signature are gathered on the raw block, and it becomes a `Compaction` when it stops. The
/// delta's other fields (`encrypted_content`) are laid on the block as they come, as the
/// official SDKs' accumulators do: the block goes back with them.
fn apply_to_compaction(block: &mut ContentBlock, delta: Delta) -> Applied {
    match (block, delta) {
        (ContentBlock::Unknown(raw), Delta::CompactionDelta { content, extra }) => {
            // Appended in place: copying the summary so far on every delta is quadratic in the
            // number of deltas.
            let more = content.unwrap_or_default();
            match raw.get_mut("content") {
                Some(Value::String(so_far)) => so_far.push_str(&more),
                _ => raw["content"] = Value::String(more),
            }
            if let Value::Object(fields) = raw {
                fields.extend(extra);
            }
        }
        (ContentBlock::Unknown(raw), Delta::SignatureDelta { signature }) => {
            raw["signature"] = Value::String(signature);
        }
        (
            ContentBlock::Compaction { content, extra, .. },
            Delta::CompactionDelta {
                content: more,
                extra: more_fields,
            },
        ) => {
            content.push_str(&more.unwrap_or_default());
            extra.extend(more_fields);
        }
        (ContentBlock::Compaction { signature, .. }, Delta::SignatureDelta { signature: s }) => {
            *signature = s;
        }
        (block, delta) => return not_applied(block, delta),
    }
    Applied::Done
}

/// A delta `block` does not take. The API may add delta types and block types under its
/// version (new variants of an enum-like output), so a delta of a type this crate does not
/// know, or any delta for a block of a type it does not know, does not fail the stream — that
/// would fail, and bill, every reply from the day the API sends it: the block stays as it is,
/// as the official SDKs' accumulators leave it, and the delta is kept (verbatim, or as decoded)
/// for the ledger to record (`TurnEvent::UnappliedDelta`). A known delta that does not fit a
/// known block is a broken stream.
fn not_applied(block: &ContentBlock, delta: Delta) -> Applied {
    match (block, delta) {
        (_, Delta::Unknown(raw)) => Applied::Kept(raw),
        (ContentBlock::Unknown(_), known) => {
            Applied::Kept(serde_json::to_value(&known).unwrap_or_default())
        }
        (_, misfit) => Applied::Misfit(misfit),
    }
}

/// Whether `block` is a compaction, whole or still streaming.
fn is_compaction_block(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Compaction { .. } => true,
        ContentBlock::Unknown(raw) => is_compaction(raw),
        _ => false,
    }
}

/// Whether a block this crate did not decode is a compaction block (a streamed one starts with
/// `"content": null`).
fn is_compaction(raw: &Value) -> bool {
    raw.get("type").and_then(Value::as_str) == Some("compaction")
}

/// The output tokens of reply content received, by `muninn_core::tokenize::count`: each text
/// and thinking block's text, each compaction's summary (gathered so far, or whole once its
/// block stopped), and each tool call's name and input (the input's JSON as gathered so far,
/// or as parsed once its block stopped). A count of what arrived, not of what the provider
/// generated: the simulator bills a stream it cuts by the same count of what it sent, so the
/// two agree exactly.
fn received_output_tokens(content: &[ContentBlock], partial_json: &[(usize, String)]) -> u64 {
    use muninn_core::tokenize::count;
    content
        .iter()
        .enumerate()
        .map(|(index, block)| match block {
            ContentBlock::Text { text, .. } => count(text),
            ContentBlock::Thinking { thinking, .. } => count(thinking),
            ContentBlock::Compaction { content, .. } => count(content),
            // A streamed compaction still open: its summary so far, on the raw block.
            ContentBlock::Unknown(raw) if is_compaction(raw) => {
                raw.get("content").and_then(Value::as_str).map_or(0, count)
            }
            ContentBlock::ToolUse { name, input, .. } => {
                let gathered = partial_json.iter().find(|(i, _)| *i == index);
                count(name)
                    + gathered.map_or_else(
                        || count(&crate::prompt::canonical_string(input)),
                        |(_, json)| count(json),
                    )
            }
            _ => 0,
        })
        .sum()
}

/// An `error` event inside a stream: retryable for the kinds an HTTP status would retry
/// (overloaded 529, rate limit 429, api 500); `status` stays 0 because the HTTP reply was 200.
fn stream_error(error: ErrorBody, after_content: bool) -> AttemptError {
    let retryable = matches!(
        error.kind.as_str(),
        "overloaded_error" | "rate_limit_error" | "api_error"
    );
    AttemptError {
        error: BackendError::Api {
            status: 0,
            kind: error.kind,
            message: error.message,
            retryable,
            retry_after_ms: None,
            // The response's, set by the client with the header's.
            request_id: None,
        },
        retryable,
        retry_after: None,
        after_content,
        billed: None,
    }
}

/// Assembles a complete event stream (for tests and tools): the reply and the raw usage, or the
/// first error.
pub fn assemble(events_data: &[String]) -> Result<(MessagesResponse, Value, Usage), BackendError> {
    let mut a = Assembler::default();
    for data in events_data {
        a.on_frame(data).map_err(|f| f.error)?;
    }
    if !a.stopped {
        return Err(BackendError::Protocol("no message_stop".to_string()));
    }
    let (m, raw) = a.finish().map_err(|f| f.error)?;
    let usage = m.usage.clone();
    Ok((m, raw, usage))
}

/// What the provider bills for a stream cut after the events `events_data` (each event's data,
/// in order; an `error` event among them ends it): [`Assembler::billed_so_far`] of the events
/// before the cut, `None` when `message_start` was not among them. The client records a cut
/// attempt by this rule, and the simulator bills a stream it cuts by it.
pub fn billed_by_cut(events_data: &[String]) -> Option<(muninn_core::trace::Usage, Value)> {
    let mut a = Assembler::default();
    for data in events_data {
        if a.on_frame(data).is_err() {
            break;
        }
    }
    a.billed_so_far()
}
