//! The Anthropic backend: a [`Backend`] whose session is a conversation kept in memory and sent
//! whole on every turn through [`AnthropicClient`].
//!
//! # Rendering
//!
//! Layers by volatility (DESIGN §3.3): tools → system layers → conversation. A breakpoint closes
//! each system layer (the last three at most, at [`SessionSpec::system_ttl`]), and one sits on the
//! last block of the last message
//! (at [`SessionSpec::conversation_ttl`], moved forward every turn). Older messages are re-sent
//! byte-identical without markers, so request N+1 begins with request N up to its last
//! breakpoint. A reply's empty text blocks are not kept, and a reply of nothing joins no
//! message (the API refuses both when sent back; the next user message then follows the last,
//! which the API joins into one turn). A session with an output schema offers the Claude Code
//! CLI's `StructuredOutput` tool (its exact name and description) and answers the model's call
//! to it at the head of the next user message, as the CLI does.
//!
//! # Prediction and the ledger
//!
//! Before sending, the request as serialised is mapped by [`crate::prompt::shape_memoized`] (the
//! blocks the last request read too are reused, not mapped again) and priced by
//! a mirror of the provider's cache ([`CacheState`]) at the injected clock's time. A request the
//! cache model refuses (5 breakpoints, 1h after 5m) is refused here, never sent. After the
//! reply, the mirror is committed, and the outcome carries: the reported usage (parsed and raw),
//! the prediction, the miss cause (the model's, or `eviction_or_unknown` when the provider read
//! less than predicted), the requested-versus-honoured TTL split (a mismatch is a flagged
//! [`TurnEvent::TtlMismatch`]), and every retry.
//!
//! # Cache diagnostics
//!
//! Every request asks the provider why its cache missed (`diagnostics.previous_message_id`, beta
//! [`crate::wire::CACHE_DIAGNOSIS_BETA`]), naming the response of the last turn sent through
//! this backend — across segments, so a new segment's first request is compared with the old
//! segment's last. The provider's answer is recorded beside muninn's own cause
//! ([`TurnOutcome::provider_miss`]). muninn's cause combines its cache mirror with the same
//! structural comparison ([`crate::prompt::diverge`]): a request that diverged from the last
//! turn is attributed to the level it diverged at (model, tools, system, messages); one that did
//! not, to what the mirror says (cold start, TTL expiry), or to eviction when the provider read
//! less than the mirror predicted. Pings ask too, but the next turn is compared with the last
//! turn, not with a ping.
//!
//! # The provider's own context tools ([`ContextTools`])
//!
//! - **Keep-warm pings with `max_tokens: 0`** (on by default): a ping is sent non-streaming
//!   with `max_tokens: 0`, which refreshes the cached prefix and generates nothing — it pays the
//!   read and no output ([`AnthropicBackend::ping_output_tokens`] tells the decider).
//! - **Server compaction** (off by default): [`Backend::compact`] sends the session with a
//!   top-level `compaction` (beta [`crate::wire::COMPACTION_BETA`]); the reply's signed
//!   `compaction` block becomes the whole history, which the provider reads in place of
//!   everything before it. The outcome's usage is the billed usage, read from
//!   `usage.iterations[]` ([`crate::wire::Usage::to_core`]): the top-level counts of an
//!   on-demand compaction are 0. A compaction answered without its block fails
//!   ([`BackendError::CompactionFailed`]), its billed usage kept as a failed attempt.
//! - **Tool-result clearing**, two ways. Configured (off by default): every turn carries a
//!   `clear_tool_uses_20250919` edit. Decided (the decider's `mask`,
//!   [`Backend::turn_cleared`]): one turn carries an edit that applies at any size, and the
//!   session continues from the cleared history. Either way the cache mirror predicts from the
//!   prompt as cleared ([`crate::context::apply_edits`]), and the provider's `applied_edits`
//!   are recorded as [`TurnEvent::ContextEdited`].
//!
//! An attempt the provider billed without a whole reply (a stream cut after `message_start`,
//! or a ping's whole reply lost after its `200`) is kept for [`Backend::take_failed_attempts`]
//! with its usage (a lost whole reply's unsaid: the prediction stands in) and the prediction
//! it was sent under, and the mirror counts it as written: the provider cached the prefix it
//! read.
//!
//! A failed turn leaves the history unchanged: the caller's transcript is the truth, and it may
//! send the turn again.

use crate::client::{AnthropicClient, Completed, Failed};
use crate::context::{apply_edits, kept_tokens};
use crate::prompt::{PromptShape, ShapeMemo, diverge, shape, shape_memoized};
use crate::wire::{
    CacheControl, ClearToolUses, CompactionRequest, Content, ContentBlock, ContextEdit,
    ContextManagementRequest, Diagnostics, DiagnosticsRequest, EditAmount, Message,
    MessagesRequest, MessagesResponse, Role, STOP_COMPACTION, System, Tool,
};
use muninn_backend::clock::Clock;
use muninn_backend::{
    Backend, BackendError, Capability, FailedAttempt, InputPart, SessionEvent, SessionSpec,
    ToolCall, ToolSpec, TtlCheck, TurnEvent, TurnInput, TurnOutcome,
};
use muninn_core::cache::{CacheRules, CacheState, Ttl};
use muninn_core::ledger::MissCause;
use muninn_core::money::Tokens;
use muninn_core::price::PriceTable;
use muninn_core::tokenize::count;
use muninn_core::trace::ToolResults;
use serde_json::{Map, Value};
use std::sync::Arc;

mod exchange;
pub use exchange::{OUTPUT_ESTIMATED, PROMPT_ESTIMATED, USAGE_ESTIMATED};

/// The name of the Claude Code CLI's structured-output tool.
pub const STRUCTURED_OUTPUT_TOOL: &str = "StructuredOutput";

/// The description the Claude Code CLI 2.1.332 gives that tool.
pub const STRUCTURED_OUTPUT_DESCRIPTION: &str = "Use this tool to return your final response in the requested structured format. You MUST call this tool exactly once at the end of your response to provide the structured output.";

/// What the CLI answers a valid structured-output call with.
const STRUCTURED_OUTPUT_ACK: &str = "Structured output provided successfully";

/// How a rendered request reaches a model: the HTTPS client, or a simulator in the same
/// process (`muninn_sim::InProcess`). The backend's rendering, prediction and ledger events are
/// the same over either.
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// Sends one request; `safe_to_repeat` allows a retry after reply content began.
    fn send(
        &self,
        request: &MessagesRequest,
        safe_to_repeat: bool,
    ) -> impl std::future::Future<Output = Result<Completed, Failed>> + Send;
}

impl Transport for AnthropicClient {
    fn send(
        &self,
        request: &MessagesRequest,
        safe_to_repeat: bool,
    ) -> impl std::future::Future<Output = Result<Completed, Failed>> + Send {
        self.messages(request, safe_to_repeat)
    }
}

/// Which of the provider's own context tools the backend uses (see the module docs). A real
/// account may lack a beta, so the two that need one are off unless configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextTools {
    /// Keep-warm pings send `max_tokens: 0`, non-streaming (the API refuses it with streaming
    /// or extended thinking, neither of which a ping uses). Default on.
    pub ping_max_tokens_zero: bool,
    /// [`Backend::compact`] asks the provider for an on-demand compaction. Default off: the
    /// backend then cannot compact ([`Capability::Compact`]).
    pub server_compaction: bool,
    /// Every turn asks the provider to clear old tool results. Default off.
    pub clear_tool_uses: Option<ClearToolUses>,
}

impl Default for ContextTools {
    fn default() -> Self {
        ContextTools {
            ping_max_tokens_zero: true,
            server_compaction: false,
            clear_tool_uses: None,
        }
    }
}

/// What an exchange does to the session once answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// A turn: the user message and the reply join the history.
    Turn,
    /// A ping: nothing changes.
    Ping,
    /// A compaction: the reply's compaction block becomes the whole history.
    Compaction,
    /// A turn sent with a tool-result clear: the cleared history, the user message and the
    /// reply become the history.
    Cleared,
}

/// The Anthropic Messages API as a [`Backend`], over the HTTPS client by default.
#[derive(Debug)]
pub struct AnthropicBackend<T: Transport = AnthropicClient> {
    client: T,
    tools: ContextTools,
    /// Session events not yet taken: a server compaction's [`SessionEvent::Compacted`].
    events: Vec<SessionEvent>,
    /// Attempts billed without a whole reply, not yet taken.
    failed: Vec<FailedAttempt>,
    clock: Arc<dyn Clock>,
    prices: PriceTable,
    rules: CacheRules,
    mirror: CacheState,
    session: Option<Session>,
    /// The last turn's response id and its request's shape: what the next request is compared
    /// with, by the provider's diagnostics and by muninn's own cause.
    last_turn: Option<(String, PromptShape)>,
    /// The last request as read, kept so that the next one maps only its new blocks for the
    /// cache model (see [`crate::prompt::shape_memoized`]).
    shape_memo: ShapeMemo,
}

#[derive(Debug)]
struct Session {
    spec: SessionSpec,
    min_cacheable: Tokens,
    history: Vec<Message>,
    /// A structured-output call awaiting its acknowledgement in the next user message.
    pending_ack: Option<String>,
}

impl<T: Transport> AnthropicBackend<T> {
    /// A backend over `client`, reading time from `clock`, pricing cache sizes from `prices`.
    pub fn new(client: T, clock: Arc<dyn Clock>, prices: PriceTable) -> AnthropicBackend<T> {
        AnthropicBackend {
            client,
            tools: ContextTools::default(),
            events: Vec::new(),
            failed: Vec::new(),
            clock,
            prices,
            rules: CacheRules::default(),
            mirror: CacheState::new(),
            session: None,
            last_turn: None,
            shape_memo: ShapeMemo::default(),
        }
    }

    /// The backend using `tools` of the provider's context tools.
    pub fn with_context_tools(mut self, tools: ContextTools) -> AnthropicBackend<T> {
        self.tools = tools;
        self
    }

    /// The context tools in use.
    pub fn context_tools(&self) -> &ContextTools {
        &self.tools
    }

    /// Output tokens a keep-warm ping pays: 0 with `max_tokens: 0`, else the one token it asks
    /// for.
    pub fn ping_output_tokens(&self) -> u64 {
        if self.tools.ping_max_tokens_zero {
            0
        } else {
            1
        }
    }

    fn session(&self) -> Result<&Session, BackendError> {
        self.session
            .as_ref()
            .ok_or_else(|| BackendError::Invalid("no session started".to_string()))
    }

    /// The request the next turn with `input` would send (for inspection and tests).
    pub fn render(&self, input: &TurnInput) -> Result<MessagesRequest, BackendError> {
        let session = self.session()?;
        let mut messages = session.history.clone();
        // What the backend adds ([`Backend::pending_input`]) heads the message, as the CLI
        // answers its structured-output call: the caller planned the request with it.
        let pending = self.pending_input();
        messages.push(user_message(pending.iter().chain(&input.parts))?);
        set_last_marker(
            &mut messages,
            Some(CacheControl::with_ttl(session.spec.conversation_ttl)),
        );
        let mut request = self.request_with(messages)?;
        request.context_management =
            self.tools
                .clear_tool_uses
                .clone()
                .map(|clear| ContextManagementRequest {
                    edits: vec![ContextEdit::ClearToolUses(clear)],
                });
        Ok(request)
    }

    /// The request that asks the provider to compact the session as it stands: the history
    /// (with the pending structured-output acknowledgement, so no tool call is left open) under
    /// the conversation breakpoint, and a top-level `compaction`.
    pub fn render_compaction(&self, instructions: &str) -> Result<MessagesRequest, BackendError> {
        let session = self.session()?;
        let mut messages = session.history.clone();
        let pending = self.pending_input();
        if !pending.is_empty() {
            messages.push(user_message(&pending)?);
        }
        set_last_marker(
            &mut messages,
            Some(CacheControl::with_ttl(session.spec.conversation_ttl)),
        );
        let mut request = self.request_with(messages)?;
        request.compaction = Some(CompactionRequest::summarize(
            (!instructions.is_empty()).then(|| instructions.to_string()),
        ));
        Ok(request)
    }

    /// The session's tools and system layers around `messages`.
    fn request_with(&self, messages: Vec<Message>) -> Result<MessagesRequest, BackendError> {
        let session = self.session()?;
        let spec = &session.spec;
        // An empty layer (no doctrine configured, say) is left out: the API refuses an empty
        // text block.
        let layers: Vec<&String> = spec.system.iter().filter(|t| !t.is_empty()).collect();
        let n = layers.len();
        // Every system layer closes with its own breakpoint (the last three, leaving the fourth
        // for the conversation): a layer that stays the same across segments — the doctrine —
        // is then read from cache by a new segment even when a later layer changed.
        let system = layers
            .into_iter()
            .enumerate()
            .map(|(i, text)| ContentBlock::Text {
                text: text.clone(),
                cache_control: (i + 3 >= n).then(|| CacheControl::with_ttl(spec.system_ttl)),
                extra: Map::new(),
            })
            .collect::<Vec<_>>();
        let tools = tools_of(&spec.tools, spec.output_schema.as_ref());
        Ok(MessagesRequest {
            model: spec.model.clone(),
            max_tokens: spec.max_tokens,
            messages,
            system: (!system.is_empty()).then_some(System::Blocks(system)),
            tools,
            tool_choice: None,
            cache_control: None,
            stream: true,
            diagnostics: None,
            compaction: None,
            context_management: None,
            extra: Map::new(),
        })
    }
}

/// The tool definitions a request of a session offering `tools`, and replying under
/// `output_schema`, sends: each of muninn's own, then the structured-output tool. One list for
/// the request and for [`Backend::tool_tokens`], so what the head is estimated to hold is what
/// is sent.
fn tools_of(tools: &[ToolSpec], output_schema: Option<&Value>) -> Vec<Tool> {
    let mut sent: Vec<Tool> = tools
        .iter()
        .map(|t| Tool {
            name: t.name.clone(),
            description: Some(t.description.clone()),
            input_schema: Some(t.input_schema.clone()),
            cache_control: None,
            extra: Map::new(),
        })
        .collect();
    if let Some(schema) = output_schema {
        sent.push(Tool {
            name: STRUCTURED_OUTPUT_TOOL.to_string(),
            description: Some(STRUCTURED_OUTPUT_DESCRIPTION.to_string()),
            input_schema: Some(schema.clone()),
            cache_control: None,
            extra: Map::new(),
        });
    }
    sent
}

/// Sets (or with `None` clears) the cache marker on the last block of the last message, when
/// that message is made of blocks.
fn set_last_marker(messages: &mut [Message], marker: Option<CacheControl>) {
    if let Some(Message {
        content: Content::Blocks(blocks),
        ..
    }) = messages.last_mut()
        && let Some(last) = blocks.last_mut()
    {
        last.set_cache_control(marker);
    }
}

/// The tool results a message carries: how many, and the tokens a clear would remove from
/// them — each block as the cache model counts it ([`crate::prompt::shape`]: the block's
/// canonical JSON, escapes included) less the same block holding the clear's placeholder. Counting
/// the text alone would miss the escaping (a numbered file listing's tabs and newlines come to a
/// fifth of its tokens), so the decider would see less to clear than a clear removes.
fn tool_results_of(message: Option<&Message>) -> ToolResults {
    let Some(Message {
        content: Content::Blocks(blocks),
        ..
    }) = message
    else {
        return ToolResults::default();
    };
    let tokens = |block: &ContentBlock| {
        serde_json::to_value(block).map_or(0, |v| count(&crate::prompt::canonical_string(&v)))
    };
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                let sent = ContentBlock::ToolResult {
                    tool_use_id: tool_use_id.clone(),
                    content: content.clone(),
                    is_error: *is_error,
                    cache_control: None,
                };
                let cleared = ContentBlock::ToolResult {
                    tool_use_id: tool_use_id.clone(),
                    content: Some(Value::String(
                        crate::context::CLEARED_PLACEHOLDER.to_string(),
                    )),
                    is_error: *is_error,
                    cache_control: None,
                };
                Some(tokens(&sent).saturating_sub(tokens(&cleared)))
            }
            _ => None,
        })
        .fold(ToolResults::default(), |acc, tokens| ToolResults {
            tokens: acc.tokens + tokens,
            uses: acc.uses + 1,
        })
}

/// The acknowledgement of a structured-output call `id`, as the CLI answers it.
fn ack(id: &str) -> InputPart {
    InputPart::ToolResult {
        tool_use_id: id.to_string(),
        content: STRUCTURED_OUTPUT_ACK.to_string(),
        is_error: false,
    }
}

/// A user message of `parts`, in order.
fn user_message<'a>(
    parts: impl IntoIterator<Item = &'a InputPart>,
) -> Result<Message, BackendError> {
    let blocks: Vec<ContentBlock> = parts
        .into_iter()
        .map(|part| match part {
            InputPart::Text { text } => ContentBlock::text(text.clone()),
            InputPart::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => ContentBlock::ToolResult {
                tool_use_id: tool_use_id.clone(),
                content: Some(Value::String(content.clone())),
                is_error: is_error.then_some(true),
                cache_control: None,
            },
        })
        .collect();
    if blocks.is_empty() {
        return Err(BackendError::Invalid(
            "a turn needs at least one part".to_string(),
        ));
    }
    Ok(Message {
        role: Role::User,
        content: Content::Blocks(blocks),
        extra: Map::new(),
    })
}

impl<T: Transport> Backend for AnthropicBackend<T> {
    fn name(&self) -> &str {
        "anthropic"
    }

    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        if spec.system_ttl == Ttl::FiveMinutes
            && spec.conversation_ttl == Ttl::OneHour
            && !spec.system.is_empty()
        {
            return Err(BackendError::Invalid(
                "a 1h conversation breakpoint cannot follow a 5m system breakpoint".to_string(),
            ));
        }
        let min_cacheable = self
            .prices
            .model(&spec.model)
            .map_err(|e| BackendError::Invalid(e.to_string()))?
            .min_cacheable;
        self.session = Some(Session {
            spec,
            min_cacheable,
            history: Vec::new(),
            pending_ack: None,
        });
        Ok(())
    }

    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        let request = self.render(&input)?;
        self.exchange(request, input.safe_to_repeat, Commit::Turn)
            .await
    }

    /// The acknowledgement of the last reply's structured-output call, while one is pending:
    /// the next turn's message opens with it (and a compaction's request ends with it).
    fn pending_input(&self) -> Vec<InputPart> {
        let pending = self.session.as_ref().and_then(|s| s.pending_ack.as_deref());
        pending.map(ack).into_iter().collect()
    }

    fn can_clear_tool_results(&self) -> bool {
        true
    }

    fn can_offer_tools(&self) -> bool {
        true
    }

    /// Each tool definition `tools_of` sends, counted as the cache model counts a tool block
    /// ([`crate::prompt::shape`]: its canonical JSON without `cache_control`).
    fn tool_tokens(&self, tools: &[ToolSpec], output_schema: Option<&Value>) -> u64 {
        tools_of(tools, output_schema)
            .iter()
            .filter_map(|tool| serde_json::to_value(tool).ok())
            .map(|tool| count(&crate::prompt::canonical_string(&tool)))
            .sum()
    }

    /// The turn carries a `clear_tool_uses_20250919` edit that applies at any size (trigger 0)
    /// and keeps the latest `keep_tool_uses` uses; once answered, the session's history is the
    /// cleared one ([`crate::context::apply_edits`], the function the simulator bills by), so
    /// later turns send the placeholders themselves and read the prefix this turn wrote. That
    /// the provider caches a cleared result under the same bytes as a placeholder the client
    /// sends is what the simulator does; against the real API it is unverified here.
    async fn turn_cleared(
        &mut self,
        input: TurnInput,
        keep_tool_uses: u32,
    ) -> Result<TurnOutcome, BackendError> {
        let mut request = self.render(&input)?;
        let edits = request
            .context_management
            .get_or_insert_with(|| ContextManagementRequest { edits: Vec::new() });
        edits.edits.push(ContextEdit::ClearToolUses(ClearToolUses {
            trigger: Some(EditAmount::tokens(0)),
            keep: Some(EditAmount::tool_uses(u64::from(keep_tool_uses))),
            ..ClearToolUses::default()
        }));
        self.exchange(request, input.safe_to_repeat, Commit::Cleared)
            .await
    }

    async fn compact(&mut self, instructions: &str) -> Result<TurnOutcome, BackendError> {
        if !self.tools.server_compaction {
            return Err(BackendError::Unsupported {
                capability: Capability::Compact,
            });
        }
        if self.session()?.history.is_empty() {
            return Err(BackendError::CompactionFailed(
                "nothing to compact yet".to_string(),
            ));
        }
        let request = self.render_compaction(instructions)?;
        // Nothing of the session changes until the compaction block arrives, so it is safe to
        // send again.
        let outcome = match self.exchange(request, true, Commit::Compaction).await {
            Err(e) => {
                return Err(match compaction_refusal(&e) {
                    Some(said) => BackendError::CompactionFailed(said),
                    None => e,
                });
            }
            Ok(outcome) => outcome,
        };
        self.events.push(SessionEvent::Compacted {
            session_id: outcome.request_id.clone().unwrap_or_default(),
            trigger: "manual".to_string(),
            pre_tokens: Some(outcome.usage.prompt()),
            post_tokens: Some(outcome.usage.output),
            outside: false,
            usage: Some(outcome.usage),
        });
        Ok(outcome)
    }

    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        std::mem::take(&mut self.events)
    }

    fn take_failed_attempts(&mut self) -> Vec<FailedAttempt> {
        std::mem::take(&mut self.failed)
    }

    fn can_ping(&self) -> bool {
        true
    }

    fn ping_output_tokens(&self) -> u64 {
        AnthropicBackend::ping_output_tokens(self)
    }

    async fn ping(&mut self) -> Result<TurnOutcome, BackendError> {
        let session = self
            .session
            .as_ref()
            .ok_or_else(|| BackendError::Invalid("no session started".to_string()))?;
        if session.history.is_empty() {
            return Err(BackendError::Invalid(
                "nothing to keep warm yet".to_string(),
            ));
        }
        // The prefix exactly as the next turn will send it, the breakpoint on its last block,
        // then a tiny uncached question. Nothing of it joins the session.
        let mut request = self.render(&TurnInput::text("(keep-warm: answer with one word)"))?;
        set_last_marker(&mut request.messages, None);
        let prefix = request.messages.len().saturating_sub(1);
        set_last_marker(
            &mut request.messages[..prefix],
            Some(CacheControl::with_ttl(session.spec.conversation_ttl)),
        );
        self.set_ping_budget(&mut request);
        self.exchange(request, true, Commit::Ping).await
    }

    async fn ping_head(&mut self) -> Result<TurnOutcome, BackendError> {
        let mut request = self.render(&TurnInput::text("(keep-warm: answer with one word)"))?;
        // The head alone: no conversation (and so no pending structured-output answer).
        request.messages = vec![Message {
            role: Role::User,
            content: Content::Blocks(vec![ContentBlock::text(
                "(keep-warm: answer with one word)",
            )]),
            extra: Map::new(),
        }];
        request.context_management = None;
        self.set_ping_budget(&mut request);
        self.exchange(request, true, Commit::Ping).await
    }
}

/// The provider's refusal of a compaction (`compaction_nothing_to_summarize`, a 529
/// `compaction_unavailable` after the retries, …), in words: the compaction did not happen, and
/// the caller rebuilds instead.
fn compaction_refusal(e: &BackendError) -> Option<String> {
    match e {
        BackendError::Api { kind, message, .. } if kind.starts_with("compaction_") => {
            Some(format!("{kind}: {message}"))
        }
        BackendError::RetriesExhausted { last, .. } => compaction_refusal(last),
        _ => None,
    }
}
