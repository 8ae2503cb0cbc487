//! # muninn-backend
//!
//! The contract between muninn and the model behind a session: one [`Backend`] trait and the
//! types a turn goes in and comes out with, and the time every crate reads through ([`clock`]).
//! Every implementation — the Anthropic Messages API client (`muninn-anthropic`) against
//! `muninn sim-api`, the in-process simulator, the Claude Code CLI driver — passes the behaviour
//! suite, `muninn_testkit::run_backend_suite`, kept in the dev-only test kit.
//!
//! ## Layout
//!
//! - this module — [`Backend`], [`SessionSpec`], [`TurnInput`], [`TurnOutcome`],
//!   [`FailedAttempt`] (an attempt billed but not answered whole), [`BackendError`]
//!   (with [`Capability`]: what a backend may be unable to do), [`SessionEvent`].
//! - [`clock`] — injected time: the [`clock::Clock`] and [`clock::Sleeper`] traits every crate
//!   reads the time and waits through, with the system clock and the manual test doubles.
//! - [`panic`](mod@panic) — a caught panic's payload as text, for the supervisors and the test kit.
//! - [`schema`] — the small JSON Schema subset structured output uses: a deterministic example
//!   generator and a validator.
//!
//! ## Invariants
//!
//! - A backend owns one session: [`Backend::start`] opens it, each [`Backend::turn`] appends one
//!   user turn and returns the model's reply. History is append-only within the session.
//! - Every outcome carries the provider's usage parsed *and* its raw JSON verbatim, every retry
//!   the backend made, and the TTL the provider actually honoured.
//! - Credentials never appear in any value this crate defines (errors included).
//! - A backend that cannot do something at all says so with [`BackendError::Unsupported`],
//!   naming the [`Capability`], and without side effects: the session is as it was.
//!   [`BackendError::Invalid`] is kept for a turn that is wrong as given.

pub mod clock;
pub mod panic;
pub mod schema;

use muninn_core::cache::Ttl;
use muninn_core::ledger::{MissCause, ProviderMiss};
use muninn_core::trace::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::future::Future;

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its input.
    pub input_schema: Value,
}

/// What a session is: the stable layers that head every request of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSpec {
    /// The model id.
    pub model: String,
    /// System layers, most stable first (doctrine, persona, …); each is one system block.
    pub system: Vec<String>,
    /// Tools offered on every request.
    pub tools: Vec<ToolSpec>,
    /// When set, the reply must be a JSON value valid under this schema (the Claude Code CLI's
    /// `--json-schema`, offered as the `StructuredOutput` tool).
    pub output_schema: Option<Value>,
    /// The TTL of the breakpoint closing the system layers.
    pub system_ttl: Ttl,
    /// The TTL of the moving breakpoint at the end of the conversation.
    pub conversation_ttl: Ttl,
    /// The most output tokens a reply may have.
    pub max_tokens: u64,
}

/// One part of a user turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputPart {
    /// Text from the user (or a delivery).
    Text {
        /// The text.
        text: String,
    },
    /// The result of a tool call the model made in the previous turn.
    ToolResult {
        /// The call's id.
        tool_use_id: String,
        /// The result text.
        content: String,
        /// Whether the tool failed.
        is_error: bool,
    },
}

/// One user turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnInput {
    /// What the user side says, in order.
    pub parts: Vec<InputPart>,
    /// Whether the turn may be sent again after reply content has begun arriving (a keep-warm
    /// ping or a read-only question is; a turn whose reply triggers effects is not). Before the
    /// first content byte every turn may be retried.
    pub safe_to_repeat: bool,
}

impl TurnInput {
    /// A plain text turn, not safe to repeat.
    pub fn text(text: impl Into<String>) -> TurnInput {
        TurnInput {
            parts: vec![InputPart::Text { text: text.into() }],
            safe_to_repeat: false,
        }
    }
}

/// A tool call in a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, to answer with [`InputPart::ToolResult`].
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub input: Value,
}

/// One retry a backend made within a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryEvent {
    /// 1 for the first retry.
    pub attempt: u32,
    /// How long the backend waited before it.
    pub delay_ms: u64,
    /// The HTTP status that caused it (none for a transport failure or a stream error event).
    pub status: Option<u16>,
    /// The API error type (`rate_limit_error`, `overloaded_error`, …) or `transport`.
    pub kind: String,
    /// The server's `retry-after`, when given.
    pub retry_after_ms: Option<u64>,
    /// The provider's id for the attempt that failed (its `request-id` header), when it gave
    /// one: the failure a user can quote to the provider, in the answered request's ledger
    /// row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The TTLs a request asked for and the split the provider reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtlCheck {
    /// Tokens the cache model expected written at 5m and at 1h for the request as sent.
    pub expected_5m: u64,
    /// See `expected_5m`.
    pub expected_1h: u64,
    /// Tokens the provider reported written at 5m.
    pub honoured_5m: u64,
    /// Tokens the provider reported written at 1h.
    pub honoured_1h: u64,
}

impl TtlCheck {
    /// The TTL the provider honoured for this request's writes: 1h if it wrote any at 1h, 5m if
    /// only at 5m, none if it wrote nothing.
    pub fn honoured(&self) -> Option<Ttl> {
        if self.honoured_1h > 0 {
            Some(Ttl::OneHour)
        } else if self.honoured_5m > 0 {
            Some(Ttl::FiveMinutes)
        } else {
            None
        }
    }

    /// Whether the provider wrote at 1h when only 5m was expected or the reverse — a provider
    /// that ignores `ttl` (a missing beta, a policy), which changes every later decision.
    pub fn mismatch(&self) -> bool {
        (self.expected_1h > 0 && self.honoured_1h == 0 && self.honoured_5m > 0)
            || (self.expected_1h == 0 && self.honoured_1h > 0)
    }
}

/// A ledger event a turn raises beside its row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// The provider honoured another TTL than the request asked for (flagged).
    TtlMismatch {
        /// What was expected and what was reported.
        check: TtlCheck,
    },
    /// The provider edited the prompt before reading it (Anthropic `context_management`:
    /// tool-result clearing, the `mask` action). The clear rewrote the prompt from the first
    /// cleared block on, so this request wrote the cache from there.
    ContextEdited {
        /// The edit's type (`clear_tool_uses_20250919`).
        edit: String,
        /// Tool uses whose results were cleared.
        cleared_tool_uses: u64,
        /// Prompt tokens the edit removed.
        cleared_input_tokens: u64,
        /// Prompt tokens before the first cleared block, as muninn applied the same edit to
        /// predict the cache (`None` when its own application cleared nothing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept_tokens: Option<u64>,
    },
    /// The provider read less than the cache model predicted.
    ReadShortfall {
        /// Predicted cache read.
        predicted: u64,
        /// Reported cache read.
        reported: u64,
    },
    /// A streamed reply carried a `content_block_delta` the backend could not apply: of a type
    /// it does not know, or for a block of a type it does not know (the Anthropic API may add
    /// either under its version). The reply was assembled without it — its block goes back in
    /// the next request without what it said — and this keeps what it said.
    UnappliedDelta {
        /// The index of the content block the delta was for.
        index: u64,
        /// The delta, verbatim.
        delta: Value,
    },
}

/// Something that happened to a session itself (not to one reply), as the ledger records it: a
/// row's `events` hold each as a JSON object with a `type` (`{"type": "relaunched",
/// "session_id": "…"}`), beside the turn's own events. Backends raise them through
/// [`Backend::take_session_events`]; the host raises [`SessionEvent::ResumedSegment`] and
/// [`SessionEvent::CompactFailed`] itself. Every variant is ours (no provider stream is decoded
/// into it), so there is no catch-all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionEvent {
    /// The provider session's process was (re)started with its session kept (Claude Code
    /// `--resume`), after it had died.
    Relaunched {
        /// The session resumed.
        session_id: String,
    },
    /// The session's process was stopped on purpose to free its memory (its session kept on
    /// disk).
    Parked {
        /// The session parked.
        session_id: String,
        /// The process that exited.
        pid: u32,
        /// Its resident memory just before, if `/proc` said.
        rss_kib: Option<u64>,
    },
    /// A parked session got a process again (`--resume`), for the turn that carries this
    /// event.
    Unparked {
        /// The session resumed.
        session_id: String,
    },
    /// The session was lost (or could not be vouched for) and a fresh one started, seeded from
    /// muninn's transcript: the caller's seed ([`Backend::set_seed`]) and the turns of this
    /// start, sent ahead of the next turn's input.
    Reseeded {
        /// The lost session.
        old_session_id: String,
        /// The new one.
        new_session_id: String,
        /// What the provider (or the file check) said.
        reason: String,
        /// The seed's size under `muninn_core::tokenize::count` (0: nothing to seed): the
        /// rehydration the new session pays for on top of its input.
        seed_tokens: u64,
    },
    /// A claimed session was continued as a copy (Claude Code `--resume <from>
    /// --fork-session`), because another writer may still hold it; the provider picked the new
    /// id, and `from` is left as it was.
    Forked {
        /// The session copied.
        from: String,
        /// The copy this backend now writes.
        to: String,
    },
    /// The provider compacted the session (Claude Code's `system/compact_boundary`): the
    /// conversation now continues from a summary, and the cached prefix was rewritten.
    Compacted {
        /// The session compacted.
        session_id: String,
        /// `manual` (asked for) or `auto` (the provider decided by itself).
        trigger: String,
        /// The context size the provider measured before, if it said.
        pre_tokens: Option<u64>,
        /// And after.
        post_tokens: Option<u64>,
        /// Not asked for through [`Backend::compact`]: a compaction from outside muninn's
        /// decisions (an auto- or reactive compaction), which muninn's settings should have
        /// prevented.
        outside: bool,
        /// The compaction request's own usage, when the turn's report allowed telling it apart.
        usage: Option<Usage>,
    },
    /// Raised by the host: after a new lease it continued a role's open segment through the
    /// provider session handle stored with it.
    ResumedSegment {
        /// The segment continued.
        segment: i64,
        /// Whether the provider session was continued as a copy (another writer may exist).
        fork: bool,
        /// Transcript items the session handle was verified over.
        items: u64,
        /// When, Unix ms.
        at_ms: i64,
    },
    /// Raised by the host: a configured compaction did not happen (the backend cannot compact,
    /// or the compaction failed), so the segment was rebuilt instead; carried by the rebuilt
    /// turn's row.
    CompactFailed {
        /// The backend's error, as displayed.
        error: String,
    },
}

/// What one turn produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnOutcome {
    /// The reply's text (text blocks joined).
    pub text: String,
    /// Tool calls in the reply (other than the structured-output call).
    pub tool_calls: Vec<ToolCall>,
    /// The structured reply, when the session has an output schema and the model gave one.
    pub structured: Option<Value>,
    /// Why generation stopped.
    pub stop_reason: String,
    /// The usage the provider reported, parsed.
    pub usage: Usage,
    /// The provider's usage JSON, verbatim (streaming: `message_start`'s object with
    /// `message_delta`'s fields laid over it).
    pub raw_usage: Value,
    /// What the cache model predicted for the request as sent, when the backend predicts.
    pub predicted: Option<Usage>,
    /// Why the request read less than it could have, if it did (muninn's cause).
    pub miss: Option<MissCause>,
    /// The provider's own diagnosis of the request, when the backend asked for one with a
    /// previous response to compare against (the Anthropic backend's cache diagnostics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_miss: Option<ProviderMiss>,
    /// Requested against honoured TTL.
    pub ttl: TtlCheck,
    /// Every retry made, in order.
    pub retries: Vec<RetryEvent>,
    /// Flagged events for the ledger.
    pub events: Vec<TurnEvent>,
    /// The provider's request id, when it gives one.
    pub request_id: Option<String>,
    /// The request's shape as sent: the prompt tokens through each cache breakpoint, in order
    /// (for a Persona turn: the head, the whole system, the conversation's end). Empty when the
    /// backend cannot see the request (the Claude Code CLI builds its own).
    #[serde(default)]
    pub breakpoints: Vec<u64>,
    /// The tool results the request's new user message carried (how many, and the tokens of
    /// their text by `muninn_core::tokenize::count`): what a later clear could remove. Zero when
    /// there were none, or the backend cannot see the request (the Claude Code CLI).
    #[serde(default)]
    pub tool_results: muninn_core::trace::ToolResults,
}

/// An attempt the provider billed that did not give a whole reply: its stream was cut (a reset
/// connection, the attempt's deadline, an `error` event) after `message_start`, which is when
/// the provider has read the prompt — billed its input, written or read its cache (so the
/// prefix is now cached) — and began generating; or a reply that does not stream (a keep-warm
/// ping) whose body failed after its `2xx` status, which the provider sends once it has
/// answered. An attempt refused before `message_start` (a 5xx, a 529, a refused connection)
/// was not billed and is not one of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedAttempt {
    /// What the provider billed, as far as the client could see: `message_start`'s input and
    /// cache counts, and as output the last `message_delta`'s count when one came, else the
    /// tokens of the content received (`muninn_core::tokenize::count`), at least
    /// `message_start`'s. A provider that generated more than reached the client before the cut
    /// billed more output than this; the input side is exact. A whole reply lost before its
    /// body said its usage (`raw_usage` null) is counted at the cache model's prediction.
    pub usage: Usage,
    /// `message_start`'s usage JSON verbatim (with any `message_delta` laid over it); a whole
    /// reply's `usage`, or `null` when its body never said it.
    pub raw_usage: Value,
    /// What the cache model predicted for the request, when the backend predicts.
    pub predicted: Option<Usage>,
    /// The provider's request id, when it gave one.
    pub request_id: Option<String>,
    /// Why the attempt failed, as displayed.
    pub error: String,
    /// The request's shape as sent, as [`TurnOutcome::breakpoints`] says it: a failed first
    /// request of a segment is measured by it as its answered retry will be.
    #[serde(default)]
    pub breakpoints: Vec<u64>,
    /// Whether the request was sent with a clear of old tool results
    /// ([`Backend::turn_cleared`]): the prompt it wrote is the cleared one.
    #[serde(default)]
    pub cleared: bool,
}

/// The flush protocol of a long run (seed A2), every timing from configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlushProtocol {
    /// The context size (tokens of one request's prompt: input + cache read + cache write) the
    /// session must not pass.
    pub ceiling_tokens: u64,
    /// The flush is asked for this many tokens before the ceiling, so the answer still fits.
    pub headroom_tokens: u64,
    /// What the session is told when the flush is asked for.
    pub message: String,
    /// How long the run may take to finish after the flush was asked for.
    pub grace: std::time::Duration,
    /// After the interrupt, how long before the process is terminated.
    pub escalate_after: std::time::Duration,
    /// After SIGTERM, how long before SIGKILL.
    pub exit_drain: std::time::Duration,
}

impl FlushProtocol {
    /// The context size at which the flush is asked for.
    pub fn trigger_tokens(&self) -> u64 {
        self.ceiling_tokens.saturating_sub(self.headroom_tokens)
    }
}

/// How far the flush protocol went in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushStage {
    /// The run ended below the trigger.
    NotNeeded,
    /// The flush was asked for and the run ended within the grace period (the reply is the
    /// flush's answer).
    Flushed,
    /// The grace period ran out; the run was interrupted and ended.
    Interrupted,
    /// The interrupt did not end it either; the process was terminated (its session is
    /// resumed or reseeded on the next turn).
    Terminated,
}

/// What one long run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// The run's last reply and its usage (the sum over the run's requests).
    pub outcome: TurnOutcome,
    /// How far the flush protocol went.
    pub flush: FlushStage,
}

/// Something a backend may be unable to do at all, named in [`BackendError::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// [`Backend::ping`]: a keep-warm request that leaves the session unchanged.
    Ping,
    /// [`Backend::ping_head`]: a keep-warm request of the system layers alone.
    PingHead,
    /// [`Backend::compact`]: summarising the session in place on the provider side.
    Compact,
    /// Tools of muninn's own in [`SessionSpec::tools`].
    CustomTools,
    /// [`Backend::turn_cleared`]: a turn that clears old tool results (the decider's `mask`).
    ClearToolResults,
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::Ping => "ping",
            Capability::PingHead => "ping the head",
            Capability::Compact => "compact",
            Capability::CustomTools => "offer custom tools",
            Capability::ClearToolResults => "clear old tool results",
        })
    }
}

/// Why a turn failed. Each variant says whether trying again later could help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The provider refused the request (a 4xx other than 429, or a 5xx/429 once retries ran
    /// out). `retryable` tells whether a later attempt could succeed. Its text ends with the
    /// provider's request id when it gave one, the id a user quotes to the provider.
    #[error("API error {status} {kind}: {message}{}", request_id_suffix(.request_id.as_deref()))]
    Api {
        /// HTTP status (0 for an `error` event inside a stream).
        status: u16,
        /// The API error type.
        kind: String,
        /// The API's message.
        message: String,
        /// Whether the same request could succeed later.
        retryable: bool,
        /// The server's `retry-after`, if it gave one.
        retry_after_ms: Option<u64>,
        /// The provider's id for the request it refused (the `request-id` header), if it gave
        /// one (boxed: every `Result` of a backend carries this error, and it stays small).
        request_id: Option<Box<str>>,
    },
    /// Retries ran out; the last failure is inside.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// Requests made.
        attempts: u32,
        /// The last failure.
        last: Box<BackendError>,
    },
    /// The reply broke off after content had arrived, and the turn is not safe to repeat: the
    /// caller must decide (its effects may have been seen).
    #[error("the reply broke off after content arrived and the turn is not safe to repeat: {0}")]
    BrokenAfterContent(Box<BackendError>),
    /// The connection failed or timed out. Retryable.
    #[error("transport: {0}")]
    Transport(String),
    /// The provider's answer did not follow the protocol (malformed JSON or SSE, a truncated
    /// stream). Retryable before content arrived.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The turn cannot be sent as given (no session started, a malformed schema, …). Not
    /// retryable.
    #[error("invalid turn: {0}")]
    Invalid(String),
    /// This backend cannot do this at all (the [`Backend`] trait's defaults, and every backend
    /// that lacks the capability). Nothing was sent and the session is as it was. Never
    /// retryable: the caller does without (lets the cache expire, rebuilds instead of
    /// compacting).
    #[error("this backend cannot {capability}")]
    Unsupported {
        /// What it cannot do.
        capability: Capability,
    },
    /// The backend can compact, but this compaction did not happen: the provider side answered
    /// the request without summarising (Claude Code's `/compact` answered in text, with no
    /// `compact_boundary`: its summary request failed, or the conversation was too short to
    /// summarise). The session was not compacted. A later attempt may succeed.
    #[error("compaction failed: {0}")]
    CompactionFailed(String),
}

impl BackendError {
    /// The failure without the provider's request ids: what stays the same across the
    /// attempts of one outage, whose every refusal has an id of its own — for telling one
    /// failure from another (an hour of 401s is one failure, not one per retry).
    pub fn without_request_id(&self) -> BackendError {
        match self {
            BackendError::Api { .. } => {
                let mut error = self.clone();
                if let BackendError::Api { request_id, .. } = &mut error {
                    *request_id = None;
                }
                error
            }
            BackendError::RetriesExhausted { attempts, last } => BackendError::RetriesExhausted {
                attempts: *attempts,
                last: Box::new(last.without_request_id()),
            },
            BackendError::BrokenAfterContent(inner) => {
                BackendError::BrokenAfterContent(Box::new(inner.without_request_id()))
            }
            other => other.clone(),
        }
    }
}

/// ` (request-id …)` after an [`BackendError::Api`]'s message, when the provider gave one.
fn request_id_suffix(request_id: Option<&str>) -> String {
    request_id
        .map(|id| format!(" (request-id {id})"))
        .unwrap_or_default()
}

/// A model behind a session.
pub trait Backend: Send {
    /// A short name for logs and the ledger (`anthropic`, `claude-cli`, `sim`).
    fn name(&self) -> &str;

    /// Opens the session (replacing any previous one).
    fn start(&mut self, spec: SessionSpec)
    -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Appends one user turn and returns the reply.
    fn turn(
        &mut self,
        input: TurnInput,
    ) -> impl Future<Output = Result<TurnOutcome, BackendError>> + Send;

    /// A keep-warm request: the session's prefix as it stands, with its breakpoint, then a
    /// one-token reply that is *not* added to the session. It refreshes the cached prefix's TTL
    /// for the price of a read. Backends that cannot ping say so with
    /// [`BackendError::Unsupported`] ([`Capability::Ping`]).
    fn ping(&mut self) -> impl Future<Output = Result<TurnOutcome, BackendError>> + Send {
        async {
            Err(BackendError::Unsupported {
                capability: Capability::Ping,
            })
        }
    }

    /// Whether the session may offer tools of muninn's own ([`SessionSpec::tools`]) whose calls
    /// come back in [`TurnOutcome::tool_calls`] for the caller to run and answer with
    /// [`InputPart::ToolResult`] on the next turn — so a host can drive a tool loop request by
    /// request. A backend that runs its own tools (the Claude Code CLI) refuses them
    /// ([`Capability::CustomTools`]) and says `false`.
    fn can_offer_tools(&self) -> bool {
        false
    }

    /// The prompt tokens the tool definitions of a session offering `tools` and replying under
    /// `output_schema` take, as the backend sends them (muninn's own tools and, for a reply
    /// schema, the tool it is offered as) and the provider counts them: they head every request,
    /// before the system layers, so a caller estimating a request before any was measured (the
    /// head of a segment not yet sent) adds them to the layers. 0 by default, and for a backend
    /// that cannot see its requests (the Claude Code CLI sends tools of its own).
    fn tool_tokens(&self, tools: &[ToolSpec], output_schema: Option<&Value>) -> u64 {
        let _ = (tools, output_schema);
        0
    }

    /// What the next [`Backend::turn`] (or [`Backend::turn_cleared`]) will send ahead of its
    /// input, in its user message, added by the backend itself: the Anthropic backend's
    /// acknowledgement of the last reply's structured-output call, a tool result. A caller that
    /// plans the request — its size, and the tool uses a clear sent with it keeps among the
    /// newest — counts these parts as it counts the input's own. None by default, and for a
    /// backend that cannot see its requests (the Claude Code CLI builds its own).
    fn pending_input(&self) -> Vec<InputPart> {
        Vec::new()
    }

    /// Whether [`Backend::turn_cleared`] can clear old tool results. The host tells the decider
    /// (`Capabilities::mask`), which then never chooses a mask that would not happen.
    fn can_clear_tool_results(&self) -> bool {
        false
    }

    /// [`Backend::turn`] with the provider's tool-result clearing (the decider's `mask`): in
    /// this request the results of all but the latest `keep_tool_uses` tool uses are replaced
    /// by a placeholder, which rewrites the prompt from the first cleared block on, and the
    /// session goes on from the cleared history (every later request is that much shorter).
    /// Backends that cannot say so with [`BackendError::Unsupported`]
    /// ([`Capability::ClearToolResults`]), the session unchanged.
    fn turn_cleared(
        &mut self,
        input: TurnInput,
        keep_tool_uses: u32,
    ) -> impl Future<Output = Result<TurnOutcome, BackendError>> + Send {
        let _ = (input, keep_tool_uses);
        async {
            Err(BackendError::Unsupported {
                capability: Capability::ClearToolResults,
            })
        }
    }

    /// Output tokens one keep-warm ping pays (the decider prices pings with it): 1 by default,
    /// 0 for a backend whose pings send `max_tokens: 0`.
    fn ping_output_tokens(&self) -> u64 {
        1
    }

    /// Whether [`Backend::ping`] and [`Backend::ping_head`] can keep this backend's cache warm.
    /// The host tells the decider, which then never chooses a ping that would not happen.
    fn can_ping(&self) -> bool {
        false
    }

    /// Whether this backend binds its provider session to the caller's transcript: if so, the
    /// caller hands it the transcript after each turn ([`Backend::session_handle`]) and before a
    /// restart ([`Backend::resume_session`]). Backends whose sessions live only in memory (or
    /// are stateless) return `false`, and the caller skips reading the transcript.
    fn binds_sessions(&self) -> bool {
        false
    }

    /// Whether the last call that failed left the provider session as it was before the call:
    /// nothing of it joined the session, so the caller may send the same input again in the
    /// same session and the model sees it once. `true` by default: a backend whose session
    /// lives in the caller's process (the Messages API, the simulator) adds an exchange only
    /// when it succeeds. A backend with its own durable session says so per failure: the Claude
    /// Code CLI takes a turn with nothing answered (refused, timed out, its child dead) back out
    /// of its session file, and keeps one whose model acted — then `false`, and
    /// [`Backend::failure_kept_turn`] says whether the session carries on or is rebuilt.
    fn failure_left_session(&self) -> bool {
        true
    }

    /// After a failure that did not leave the session as it was
    /// ([`Backend::failure_left_session`] `false`): whether the session holds the failed call's
    /// input as it stood and carries on from it (a Claude Code child that died or hung after its
    /// model acted, resumed with `--resume`), so the caller continues the session and records
    /// the input again — sending it again makes a second copy there. `false` (the default):
    /// the session may be out of step with the caller, who rebuilds it.
    fn failure_kept_turn(&self) -> bool {
        false
    }

    /// A handle for the provider session as it stands, bound to `items` (the caller's own
    /// transcript of the session, each item in the caller's canonical bytes, in order), for the
    /// caller to store beside that transcript. `None` when the backend has nothing to bind.
    fn session_handle(&self, items: &[Vec<u8>]) -> Option<String> {
        let _ = items;
        None
    }

    /// Asks the next [`Backend::start`] to continue the session `handle` names instead of a
    /// fresh one, if `handle` still verifies over the session spec given to `start` and `items`
    /// (the caller's transcript now); if it does not, `start` seeds a fresh session. With `fork`
    /// (another writer may still hold the provider session — a lease taken over from a host
    /// that may be alive), the backend continues a *copy* of it under a new id (Claude Code
    /// `--resume <id> --fork-session`), so two writers never append to one session file.
    /// Returns whether the handle could be read at all (a backend that cannot resume returns
    /// `false`).
    fn resume_session(&mut self, handle: &str, items: &[Vec<u8>], fork: bool) -> bool {
        let _ = (handle, items, fork);
        false
    }

    /// The text a fresh provider session starts from when the next [`Backend::start`] (or a
    /// session lost later, e.g. a deleted or corrupt session file) cannot continue the
    /// provider's copy: muninn's own transcript of the segment, rendered. The backend sends it
    /// ahead of the first turn's input in the new session and reports the rehydration in
    /// [`Backend::take_session_events`]. `None` clears it. Backends that never lose a session
    /// ignore it.
    fn set_seed(&mut self, seed: Option<String>) {
        let _ = seed;
    }

    /// Summarises the session in place on the provider side (Claude Code `/compact`): the
    /// session continues from the summary. The outcome's usage is the compaction's own (which
    /// Claude Code leaves out of the turn's `usage`), so its cost is recorded; `text` is the
    /// summary when the backend can see it. Backends that cannot compact say so with
    /// [`BackendError::Unsupported`] ([`Capability::Compact`]); a compaction that was tried and
    /// did not happen is [`BackendError::CompactionFailed`].
    fn compact(
        &mut self,
        instructions: &str,
    ) -> impl Future<Output = Result<TurnOutcome, BackendError>> + Send {
        let _ = instructions;
        async {
            Err(BackendError::Unsupported {
                capability: Capability::Compact,
            })
        }
    }

    /// Runs one long turn (a Self run: a tool loop of many requests) under the flush protocol
    /// (seed A2): once the session's context reaches `ceiling − headroom` the backend asks for
    /// the flush (writes [`FlushProtocol::message`] into the running loop), waits
    /// [`FlushProtocol::grace`] for the run to end, then interrupts it, then after
    /// [`FlushProtocol::escalate_after`] terminates the process (SIGTERM, and SIGKILL after
    /// [`FlushProtocol::exit_drain`]). Backends whose turns are single requests run the turn
    /// as [`Backend::turn`] and report no flush.
    fn run(
        &mut self,
        input: TurnInput,
        protocol: &FlushProtocol,
    ) -> impl Future<Output = Result<RunOutcome, BackendError>> + Send {
        let _ = protocol;
        async move {
            Ok(RunOutcome {
                outcome: self.turn(input).await?,
                flush: FlushStage::NotNeeded,
            })
        }
    }

    /// The attempts the provider billed without giving a whole reply
    /// ([`FailedAttempt`]) since the last call, in order, for the ledger: those behind a
    /// failed call, and those the backend retried on its own before a call that succeeded.
    /// Drained by the call. Backends that cannot see their attempts have none; the Claude Code
    /// CLI, which hides its attempts, reports here what it billed beside the turns it answered
    /// (a subagent's requests, a turn it started by itself).
    fn take_failed_attempts(&mut self) -> Vec<FailedAttempt> {
        Vec::new()
    }

    /// What happened to the session itself (not to one reply) since the last call — a relaunch,
    /// a park or resume, a reseed with its rehydration, a fork, a compaction the provider side
    /// ran on its own — in order, for the ledger. Drained by the call.
    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        Vec::new()
    }

    /// Ends the session's resources cleanly when the host stops (a child process: stdin closed,
    /// then SIGTERM, then SIGKILL). The provider session itself is kept, to be resumed by the
    /// next host. Backends with nothing to stop keep the default, which does nothing.
    fn close(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// A head-only keep-warm request: the session's system layers with their breakpoints and a
    /// tiny question, no conversation. Once the conversation tail has been let go, it keeps the
    /// head (under its own, longer TTL) cached for the price of reading the head alone.
    /// Backends that cannot say so with [`BackendError::Unsupported`]
    /// ([`Capability::PingHead`]).
    fn ping_head(&mut self) -> impl Future<Output = Result<TurnOutcome, BackendError>> + Send {
        async {
            Err(BackendError::Unsupported {
                capability: Capability::PingHead,
            })
        }
    }
}

#[cfg(test)]
mod tests;
