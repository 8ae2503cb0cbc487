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
//! breakpoint. A session with an output schema offers the Claude Code CLI's `StructuredOutput`
//! tool (its exact name and description) and answers the model's call to it at the head of the
//! next user message, as the CLI does.
//!
//! # Prediction and the ledger
//!
//! Before sending, the request as serialised is mapped by [`crate::prompt::shape`] and priced by
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
//! A failed turn leaves the history unchanged: the caller's transcript is the truth, and it may
//! send the turn again.

use crate::client::{AnthropicClient, Completed, Failed};
use crate::prompt::{PromptShape, diverge, shape};
use crate::wire::{
    CacheControl, Content, ContentBlock, Diagnostics, DiagnosticsRequest, Message, MessagesRequest,
    Role, System, Tool,
};
use muninn_backend::clock::Clock;
use muninn_backend::{
    Backend, BackendError, InputPart, SessionSpec, ToolCall, TtlCheck, TurnEvent, TurnInput,
    TurnOutcome,
};
use muninn_core::cache::{CacheRules, CacheState, Ttl};
use muninn_core::ledger::MissCause;
use muninn_core::money::Tokens;
use muninn_core::price::PriceTable;
use serde_json::{Map, Value};
use std::sync::Arc;

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

/// The Anthropic Messages API as a [`Backend`], over the HTTPS client by default.
#[derive(Debug)]
pub struct AnthropicBackend<T: Transport = AnthropicClient> {
    client: T,
    clock: Arc<dyn Clock>,
    prices: PriceTable,
    rules: CacheRules,
    mirror: CacheState,
    session: Option<Session>,
    /// The last turn's response id and its request's shape: what the next request is compared
    /// with, by the provider's diagnostics and by muninn's own cause.
    last_turn: Option<(String, PromptShape)>,
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
            clock,
            prices,
            rules: CacheRules::default(),
            mirror: CacheState::new(),
            session: None,
            last_turn: None,
        }
    }

    /// The request the next turn with `input` would send (for inspection and tests).
    pub fn render(&self, input: &TurnInput) -> Result<MessagesRequest, BackendError> {
        let session = self
            .session
            .as_ref()
            .ok_or_else(|| BackendError::Invalid("no session started".to_string()))?;
        let mut messages = session.history.clone();
        messages.push(user_message(input, session.pending_ack.as_deref())?);
        set_last_marker(
            &mut messages,
            Some(CacheControl::with_ttl(session.spec.conversation_ttl)),
        );
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
            })
            .collect::<Vec<_>>();
        let mut tools: Vec<Tool> = spec
            .tools
            .iter()
            .map(|t| Tool {
                name: t.name.clone(),
                description: Some(t.description.clone()),
                input_schema: Some(t.input_schema.clone()),
                cache_control: None,
                extra: Map::new(),
            })
            .collect();
        if let Some(schema) = &spec.output_schema {
            tools.push(Tool {
                name: STRUCTURED_OUTPUT_TOOL.to_string(),
                description: Some(STRUCTURED_OUTPUT_DESCRIPTION.to_string()),
                input_schema: Some(schema.clone()),
                cache_control: None,
                extra: Map::new(),
            });
        }
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
            extra: Map::new(),
        })
    }
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

fn user_message(input: &TurnInput, pending_ack: Option<&str>) -> Result<Message, BackendError> {
    let mut blocks = Vec::new();
    if let Some(id) = pending_ack {
        blocks.push(ContentBlock::ToolResult {
            tool_use_id: id.to_string(),
            content: Some(Value::String(STRUCTURED_OUTPUT_ACK.to_string())),
            is_error: None,
            cache_control: None,
        });
    }
    for part in &input.parts {
        blocks.push(match part {
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
        });
    }
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
        self.exchange(request, input.safe_to_repeat, true).await
    }

    fn can_ping(&self) -> bool {
        true
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
        request.max_tokens = 1;
        self.exchange(request, true, false).await
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
        request.max_tokens = 1;
        self.exchange(request, true, false).await
    }
}

impl<T: Transport> AnthropicBackend<T> {
    /// Sends a rendered request, predicts and checks its usage, and — for a turn — commits the
    /// exchange to the session.
    async fn exchange(
        &mut self,
        mut request: MessagesRequest,
        safe_to_repeat: bool,
        commit: bool,
    ) -> Result<TurnOutcome, BackendError> {
        let session = self
            .session
            .as_mut()
            .ok_or_else(|| BackendError::Invalid("no session started".to_string()))?;
        request.diagnostics = Some(DiagnosticsRequest {
            previous_message_id: self.last_turn.as_ref().map(|(id, _)| id.clone()),
        });
        let body = serde_json::to_value(&request)
            .map_err(|e| BackendError::Invalid(format!("request does not serialise: {e}")))?;
        let shaped = shape(&body).map_err(|e| BackendError::Invalid(e.to_string()))?;
        let now = self.clock.now_ms();
        let prediction = self
            .mirror
            .predict(&shaped.prompt(), now, session.min_cacheable, &self.rules)
            .map_err(|e| BackendError::Invalid(e.to_string()))?;

        let completed = self
            .client
            .send(&request, safe_to_repeat)
            .await
            .map_err(|f| {
                tracing::warn!(retries = f.retries.len(), error = %f.error, "turn failed");
                f.error
            })?;
        self.mirror
            .commit(&shaped.model, &prediction, now, &self.rules);

        let response = completed.response;
        let usage = response.usage.to_core();
        let predicted = prediction.outcome.usage(usage.output);
        let mut events = Vec::new();
        let previous = self.last_turn.as_ref().map(|(_, shape)| shape);
        let miss = if usage.cache_read < predicted.cache_read {
            events.push(TurnEvent::ReadShortfall {
                predicted: predicted.cache_read,
                reported: usage.cache_read,
            });
            Some(MissCause::EvictionOrUnknown)
        } else if let Some((level, _)) = previous.and_then(|p| diverge(p, &shaped)) {
            Some(MissCause::of_level(level))
        } else {
            prediction.outcome.miss
        };
        let provider_miss = previous
            .is_some()
            .then(|| Diagnostics::provider_miss(response.diagnostics.as_ref()));
        let ttl = TtlCheck {
            expected_5m: predicted.cache_write_5m,
            expected_1h: predicted.cache_write_1h,
            honoured_5m: usage.cache_write_5m,
            honoured_1h: usage.cache_write_1h,
        };
        if ttl.mismatch() {
            tracing::warn!(
                ?ttl,
                "the provider honoured another cache TTL than requested"
            );
            events.push(TurnEvent::TtlMismatch { check: ttl });
        }

        let mut text = String::new();
        let mut tool_calls = Vec::new();
        let mut structured = None;
        let mut pending_ack = None;
        for block in &response.content {
            match block {
                ContentBlock::Text { text: t, .. } => text.push_str(t),
                ContentBlock::ToolUse {
                    id, name, input, ..
                } if name == STRUCTURED_OUTPUT_TOOL => {
                    structured = Some(input.clone());
                    pending_ack = Some(id.clone());
                }
                ContentBlock::ToolUse {
                    id, name, input, ..
                } => tool_calls.push(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                _ => {}
            }
        }
        // Commit the turn to the session: the user message without its marker, the reply
        // verbatim. A ping leaves the session as it was.
        if commit {
            let mut sent = request.messages;
            set_last_marker(&mut sent, None);
            session.history = sent;
            session.history.push(Message {
                role: Role::Assistant,
                content: Content::Blocks(response.content.clone()),
                extra: Map::new(),
            });
            session.pending_ack = pending_ack;
            self.last_turn = Some((response.id.clone(), shaped.clone()));
        }
        Ok(TurnOutcome {
            text,
            tool_calls,
            structured,
            stop_reason: response.stop_reason.unwrap_or_default(),
            usage,
            raw_usage: completed.raw_usage,
            predicted: Some(predicted),
            miss,
            provider_miss,
            ttl,
            retries: completed.retries,
            events,
            request_id: completed.request_id,
            breakpoints: shaped
                .prompt()
                .checkpoints
                .iter()
                .filter(|c| c.breakpoint.is_some())
                .map(|c| c.tokens)
                .collect(),
        })
    }
}
