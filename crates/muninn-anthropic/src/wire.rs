//! Wire types of the Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`).
//!
//! These are the bottom of the stack: the client sends and decodes them, the simulator
//! (`muninn-sim`) receives and answers with them. They follow the API as documented and as the
//! Claude Code CLI 2.1.332 uses it (`shared/reference/claude-cli-2.1.332.md`), including what the
//! public documentation does not show: `role: "system"` messages inside `messages`, and
//! message-level `output_config`.
//!
//! Forward compatibility: fields this module does not name are kept in `extra` maps on requests,
//! messages and tools, so a request round-trips; a content block, delta or stream event of a type
//! this module does not know decodes as `Unknown(serde_json::Value)` instead of failing. A *known*
//! event type with a malformed body is an error ([`StreamEvent::parse`]), never silently
//! `Unknown`.

mod context;
mod usage;

pub use context::*;
use muninn_core::cache::Ttl;
use muninn_core::miss::{ProviderMiss, ProviderMissReason};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
pub use usage::*;

/// The `anthropic-version` header value this crate speaks.
pub const API_VERSION: &str = "2023-06-01";

/// A `cache_control` marker: makes the block it sits on a cache breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheControl {
    /// Always `ephemeral` (the only kind the API has).
    #[serde(rename = "type")]
    pub kind: CacheControlKind,
    /// The entry's lifetime; absent means the default 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Ttl>,
}

impl CacheControl {
    /// A 5-minute breakpoint written the way the Claude Code CLI writes it (no `ttl` field).
    pub const EPHEMERAL: CacheControl = CacheControl {
        kind: CacheControlKind::Ephemeral,
        ttl: None,
    };

    /// A breakpoint with the given TTL: 5m as a bare `ephemeral`, 1h with `"ttl":"1h"`.
    pub fn with_ttl(ttl: Ttl) -> CacheControl {
        CacheControl {
            kind: CacheControlKind::Ephemeral,
            ttl: match ttl {
                Ttl::FiveMinutes => None,
                Ttl::OneHour => Some(Ttl::OneHour),
            },
        }
    }

    /// The TTL this marker asks for.
    pub fn requested_ttl(&self) -> Ttl {
        self.ttl.unwrap_or(Ttl::FiveMinutes)
    }
}

/// The kind of a [`CacheControl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheControlKind {
    /// The prompt cache.
    Ephemeral,
}

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user (or tool results).
    User,
    /// The model.
    Assistant,
    /// A system message inside `messages` (the CLI's per-turn environment block, beta
    /// `per-turn-control-2026-07-01`).
    System,
}

/// A content block, in a message, a system prompt or a response.
///
/// A reply's blocks are sent back in the next request, so each goes back with every field and
/// value it came with: the named variants keep the fields they do not name in `extra` (the
/// named fields are serialised first, then the rest in sorted order — a JSON object's key order
/// carries nothing, and the same block is written the same way on every request), and a block
/// of a type this crate does not know (`redacted_thinking`, `server_tool_use`,
/// `web_search_tool_result`, …) is [`ContentBlock::Unknown`], kept whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
        /// A cache breakpoint on this block.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
        /// Fields this crate does not name (a reply's `citations`), kept verbatim: a reply's
        /// block goes back with every field it came with (see [`ContentBlock`]).
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// A tool call by the model.
    ToolUse {
        /// The call's id (`toolu_…`), answered by a `tool_result` with the same `tool_use_id`.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments, an object valid under the tool's `input_schema`.
        input: Value,
        /// A cache breakpoint on this block.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
        /// Fields this crate does not name (a programmatic call's `caller`), kept verbatim.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// The result of a tool call, sent by the user side.
    ToolResult {
        /// The `id` of the `tool_use` this answers.
        tool_use_id: String,
        /// The result: a string or an array of content blocks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Value>,
        /// Whether the tool failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        /// A cache breakpoint on this block.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// A provider-side compaction's summary (beta [`COMPACTION_BETA`]): the reply to a request
    /// with a top-level `compaction`, sent back as the first block of an assistant message; the
    /// provider then ignores every message before it.
    Compaction {
        /// The summary.
        content: String,
        /// The provider's signature over the summary (checked when sent back).
        signature: String,
        /// Fields this crate does not name, kept verbatim: the block goes back with every field
        /// the provider gave it, or it answers `compaction_content_mismatch`. Serialised after
        /// the named fields in sorted order, so the keys' order may differ from the reply's
        /// (it carries nothing in JSON), the same on every request.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// The model's visible reasoning.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The signature that lets the block be sent back (absent until a streamed block's
        /// `signature_delta`; never invented: a block without one goes back without one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// Fields this crate does not name, kept verbatim: the provider checks the block it
        /// signed, and its prefix (and the cache) breaks on one that lost a field.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// A block type this crate does not know, kept verbatim.
    #[serde(untagged)]
    Unknown(Value),
}

impl ContentBlock {
    /// A text block without a breakpoint.
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text {
            text: text.into(),
            cache_control: None,
            extra: Map::new(),
        }
    }

    /// Sets (or clears) this block's breakpoint; blocks that cannot carry one are unchanged.
    pub fn set_cache_control(&mut self, marker: Option<CacheControl>) {
        match self {
            ContentBlock::Text { cache_control, .. }
            | ContentBlock::ToolUse { cache_control, .. }
            | ContentBlock::ToolResult { cache_control, .. } => *cache_control = marker,
            ContentBlock::Thinking { .. }
            | ContentBlock::Compaction { .. }
            | ContentBlock::Unknown(_) => {}
        }
    }
}

/// A message's content: the API accepts a plain string as one text block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string (one text block without a breakpoint).
    Text(String),
    /// Content blocks.
    Blocks(Vec<ContentBlock>),
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who it is from.
    pub role: Role,
    /// What it says.
    pub content: Content,
    /// Fields this crate does not name (the CLI's message-level `output_config`), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The system prompt: a string or text blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum System {
    /// A plain string.
    Text(String),
    /// Text blocks, each of which may carry a breakpoint.
    Blocks(Vec<ContentBlock>),
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its input (absent for server tools, which carry a `type` in `extra`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// A cache breakpoint on this tool definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Fields this crate does not name (`defer_loading`, a server tool's `type`), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The body of `POST /v1/messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesRequest {
    /// The model id.
    pub model: String,
    /// The most output tokens the reply may have.
    pub max_tokens: u64,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// How the model must use tools (`auto`, `any`, `tool`, `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Top-level automatic caching: one breakpoint on the last cacheable block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Whether to answer with an SSE stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Cache diagnostics (beta `cache-diagnosis-2026-04-07`): the opt-in, and the previous
    /// response to compare this request with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<DiagnosticsRequest>,
    /// On-demand compaction (beta [`COMPACTION_BETA`]): the reply is the conversation's summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionRequest>,
    /// Context edits (beta [`CONTEXT_MANAGEMENT_BETA`]), such as tool-result clearing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_management: Option<ContextManagementRequest>,
    /// Fields this crate does not name (`thinking`, `metadata`, `output_config`,
    /// `temperature`, …), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The beta that enables cache diagnostics.
pub const CACHE_DIAGNOSIS_BETA: &str = "cache-diagnosis-2026-04-07";

/// A request's `diagnostics` object. Its presence opts in: the provider keeps a fingerprint of
/// the request under the response's id, and compares it with the fingerprint of
/// `previous_message_id` (`null` on a first turn: nothing to compare with yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticsRequest {
    /// The id of the response whose request this one should extend.
    pub previous_message_id: Option<String>,
}

/// A response's `diagnostics`: why the cache could not reuse the prefix of the request named by
/// `previous_message_id`. The object is absent (or `null`) when the comparison found no
/// divergence; `cache_miss_reason: null` means the comparison was still running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// The first divergence, or `null` while pending.
    pub cache_miss_reason: Option<CacheMissReason>,
}

/// `diagnostics.cache_miss_reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheMissReason {
    /// `model_changed`, `system_changed`, `tools_changed`, `messages_changed`,
    /// `previous_message_not_found` or `unavailable` (others may be added: kept verbatim).
    #[serde(rename = "type")]
    pub kind: String,
    /// For the `*_changed` types: how many input tokens the divergence cost (a magnitude, not a
    /// billing figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_missed_input_tokens: Option<u64>,
}

impl Diagnostics {
    /// The provider's diagnosis as the ledger records it, for a request that asked with a
    /// previous message id and got `diagnostics` (`None`: the object was absent or `null`,
    /// which is no divergence).
    pub fn provider_miss(diagnostics: Option<&Diagnostics>) -> ProviderMiss {
        match diagnostics {
            None => ProviderMiss {
                reason: ProviderMissReason::NoDivergence,
                missed_tokens: None,
            },
            Some(Diagnostics {
                cache_miss_reason: None,
            }) => ProviderMiss {
                reason: ProviderMissReason::Pending,
                missed_tokens: None,
            },
            Some(Diagnostics {
                cache_miss_reason: Some(r),
            }) => ProviderMiss {
                reason: ProviderMissReason::from_wire(&r.kind),
                missed_tokens: r.cache_missed_input_tokens,
            },
        }
    }
}

/// The body of `POST /v1/messages/count_tokens`: a messages request without `max_tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountTokensRequest {
    /// The model id.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    /// Tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Fields this crate does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The answer to `count_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountTokensResponse {
    /// Prompt tokens of the request.
    pub input_tokens: u64,
}

/// A complete (non-streaming) reply, also the `message` of `message_start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesResponse {
    /// The message id (`msg_…`).
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type", default = "message_type")]
    pub kind: String,
    /// Always `assistant`.
    pub role: Role,
    /// The model that answered.
    pub model: String,
    /// The reply's blocks (empty in `message_start`).
    pub content: Vec<ContentBlock>,
    /// Why generation stopped: `end_turn`, `tool_use`, `max_tokens`, `stop_sequence`, `refusal`,
    /// `pause_turn`, `compaction`; `null` in `message_start`.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence that matched, if any.
    #[serde(default)]
    pub stop_sequence: Option<String>,
    /// Token usage.
    pub usage: Usage,
    /// Cache diagnostics, when asked for and the comparison found a divergence (or is
    /// pending); on a stream, in `message_start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Diagnostics>,
    /// The context edits applied to the request (beta [`CONTEXT_MANAGEMENT_BETA`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_management: Option<ContextManagementResponse>,
    /// Not the API's: each `content_block_delta` the client could not apply to its block, with
    /// the block's index, in order — one of a type this crate does not know
    /// ([`Delta::Unknown`], verbatim), or one for a block of a type it does not know
    /// ([`ContentBlock::Unknown`], as decoded). Empty but for a streamed reply; never
    /// serialised.
    #[serde(skip)]
    pub unapplied_deltas: Vec<(usize, Value)>,
}

fn message_type() -> String {
    "message".to_string()
}

/// An incremental change to a content block in a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    /// More text for a text block.
    TextDelta {
        /// The text to append.
        text: String,
    },
    /// More of a tool call's input JSON (the pieces concatenate to the whole JSON text).
    InputJsonDelta {
        /// The JSON text to append.
        partial_json: String,
    },
    /// More reasoning text for a thinking block.
    ThinkingDelta {
        /// The text to append.
        thinking: String,
    },
    /// The signature of a thinking block (or of a compaction block whose start had none).
    SignatureDelta {
        /// The signature.
        signature: String,
    },
    /// A compaction block's summary: the API starts the block with `"content": null` and
    /// sends the summary in one such delta (several are joined in order).
    CompactionDelta {
        /// The summary text (`null` adds nothing).
        #[serde(default)]
        content: Option<String>,
        /// Fields this crate does not name (`encrypted_content`, opaque metadata to be sent
        /// back verbatim), laid on the block as they come.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// One more citation of a text block (`citations`, a reply grounded in documents or
    /// search results): appended to the block's `citations`, as the official SDKs' accumulators
    /// do.
    CitationsDelta {
        /// The citation, verbatim.
        citation: Value,
    },
    /// A delta type this crate does not know (the API may add one under its version), kept
    /// verbatim. The client cannot apply it to its block, which is assembled without it, and
    /// keeps it in [`MessagesResponse::unapplied_deltas`] for the ledger; the stream goes on.
    #[serde(untagged)]
    Unknown(Value),
}

/// The message-level part of a `message_delta` event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageDeltaBody {
    /// The final stop reason.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence that matched, if any.
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

/// The API's error body: `{"type":"error","error":{"type":…,"message":…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// `invalid_request_error`, `authentication_error`, `permission_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error`, `api_error`, `overloaded_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A human-readable explanation.
    pub message: String,
}

/// An error response, the body of every non-2xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The error.
    pub error: ErrorBody,
    /// The server's request id, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ErrorResponse {
    /// An error response of the given kind and message.
    pub fn new(kind: &str, message: impl Into<String>) -> ErrorResponse {
        ErrorResponse {
            kind: "error".to_string(),
            error: ErrorBody {
                kind: kind.to_string(),
                message: message.into(),
            },
            request_id: None,
        }
    }
}

/// One server-sent event of a streaming reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The reply begins: the message with empty content and the input-side usage.
    MessageStart {
        /// The message so far.
        message: MessagesResponse,
    },
    /// A content block begins.
    ContentBlockStart {
        /// The block's index in the reply.
        index: usize,
        /// The block, with empty text or empty input.
        content_block: ContentBlock,
    },
    /// More of a content block.
    ContentBlockDelta {
        /// The block's index.
        index: usize,
        /// The change.
        delta: Delta,
    },
    /// A content block is complete.
    ContentBlockStop {
        /// The block's index.
        index: usize,
    },
    /// The reply's stop reason and final usage. Its usage fields override those of
    /// `message_start`.
    MessageDelta {
        /// Stop reason and sequence.
        delta: MessageDeltaBody,
        /// Final usage (at least `output_tokens`).
        usage: Usage,
        /// The context edits the provider applied (beta [`CONTEXT_MANAGEMENT_BETA`]): a
        /// streamed reply says them here (the official SDKs' `BetaRawMessageDeltaEvent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_management: Option<ContextManagementResponse>,
    },
    /// The reply is complete.
    MessageStop,
    /// Keep-alive; carries nothing.
    Ping,
    /// The stream failed (for example `overloaded_error`); nothing follows.
    Error {
        /// The error.
        error: ErrorBody,
    },
    /// An event type this crate does not know, kept verbatim.
    #[serde(untagged)]
    Unknown(Value),
}

/// Event type names this module decodes into named variants.
const KNOWN_EVENTS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
];

/// A stream event's `data` that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The data is not JSON. The server or the connection is broken; retrying may help.
    #[error("stream event is not JSON: {0}")]
    NotJson(String),
    /// A known event type whose body does not have the documented shape.
    #[error("malformed {event} event: {message}")]
    Malformed {
        /// The event's `type`.
        event: String,
        /// What the decoder said.
        message: String,
    },
}

impl StreamEvent {
    /// Decodes one event's `data`. Unknown types become [`StreamEvent::Unknown`]; a known type
    /// with a malformed body is an error, never silently `Unknown`.
    pub fn parse(data: &str) -> Result<StreamEvent, EventError> {
        let value: Value =
            serde_json::from_str(data).map_err(|e| EventError::NotJson(e.to_string()))?;
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !KNOWN_EVENTS.contains(&kind.as_str()) {
            return Ok(StreamEvent::Unknown(value));
        }
        // Decode the known body without the untagged fallback, so its error is reported.
        let strict =
            serde_json::from_value::<Strict>(value).map_err(|e| EventError::Malformed {
                event: kind.clone(),
                message: e.to_string(),
            })?;
        Ok(strict.0)
    }

    /// The SSE `event:` name of this event (its `type`).
    pub fn name(&self) -> &str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
            StreamEvent::Ping => "ping",
            StreamEvent::Error { .. } => "error",
            StreamEvent::Unknown(v) => v.get("type").and_then(Value::as_str).unwrap_or("unknown"),
        }
    }
}

/// The known events without the untagged `Unknown` arm, for strict decoding.
struct Strict(StreamEvent);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        #[derive(Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Known {
            MessageStart {
                message: MessagesResponse,
            },
            ContentBlockStart {
                index: usize,
                content_block: ContentBlock,
            },
            ContentBlockDelta {
                index: usize,
                delta: Delta,
            },
            ContentBlockStop {
                index: usize,
            },
            MessageDelta {
                #[serde(default)]
                delta: MessageDeltaBody,
                #[serde(default)]
                usage: Usage,
                #[serde(default)]
                context_management: Option<ContextManagementResponse>,
            },
            MessageStop,
            Ping,
            Error {
                error: ErrorBody,
            },
        }
        Ok(Strict(match Known::deserialize(d)? {
            Known::MessageStart { message } => StreamEvent::MessageStart { message },
            Known::ContentBlockStart {
                index,
                content_block,
            } => StreamEvent::ContentBlockStart {
                index,
                content_block,
            },
            Known::ContentBlockDelta { index, delta } => {
                StreamEvent::ContentBlockDelta { index, delta }
            }
            Known::ContentBlockStop { index } => StreamEvent::ContentBlockStop { index },
            Known::MessageDelta {
                delta,
                usage,
                context_management,
            } => StreamEvent::MessageDelta {
                delta,
                usage,
                context_management,
            },
            Known::MessageStop => StreamEvent::MessageStop,
            Known::Ping => StreamEvent::Ping,
            Known::Error { error } => StreamEvent::Error { error },
        }))
    }
}
