//! One exchange with the provider: the request as the provider reads it (after its context
//! edits), the cache model's prediction checked against the reply's usage, and the reply
//! committed to the session — shared by turns, clears, compactions and pings.

use super::*;
use crate::client::BilledAttempt;
use muninn_core::cache::{CacheOutcome, Prediction};
use muninn_core::ledger::ProviderMiss;
use muninn_core::trace::Usage;

/// The most failed attempts kept for [`Backend::take_failed_attempts`] between two takes.
const MAX_FAILED_ATTEMPTS: usize = 64;

/// `request` as the provider reads it — after its context edits —, that prompt mapped for the
/// cache model (reusing `memo`'s blocks for what the last request read too), and, when an edit
/// cleared something, the tokens it left as they were (the prompt is rewritten from there on).
fn as_read(
    request: &MessagesRequest,
    memo: &mut ShapeMemo,
) -> Result<(MessagesRequest, PromptShape, Option<Tokens>), BackendError> {
    let invalid = |e: String| BackendError::Invalid(e);
    let body_of = |r: &MessagesRequest| {
        serde_json::to_value(r).map_err(|e| invalid(format!("request does not serialise: {e}")))
    };
    let (read, cleared) = apply_edits(request).map_err(|e| invalid(e.to_string()))?;
    let shaped = shape_memoized(&body_of(&read)?, memo).map_err(|e| invalid(e.to_string()))?;
    let kept = if cleared.is_empty() {
        None
    } else {
        // Rare (an edit applied): the request before its edits is mapped without the memo,
        // which holds what the provider reads.
        let before = shape(&body_of(request)?).map_err(|e| invalid(e.to_string()))?;
        Some(kept_tokens(&before, &shaped))
    };
    Ok((read, shaped, kept))
}

/// What a reply says, read from its blocks.
struct ReplyParts {
    /// Text blocks (and a compaction's summary) joined.
    text: String,
    /// Tool calls other than the structured-output call.
    tool_calls: Vec<ToolCall>,
    /// The structured-output call's input.
    structured: Option<Value>,
    /// That call's id, to acknowledge in the next user message.
    pending_ack: Option<String>,
}

impl ReplyParts {
    fn of(content: &[ContentBlock]) -> ReplyParts {
        let mut parts = ReplyParts {
            text: String::new(),
            tool_calls: Vec::new(),
            structured: None,
            pending_ack: None,
        };
        for block in content {
            match block {
                ContentBlock::Text { text, .. } => parts.text.push_str(text),
                ContentBlock::Compaction { content, .. } => parts.text.push_str(content),
                ContentBlock::ToolUse {
                    id, name, input, ..
                } if name == STRUCTURED_OUTPUT_TOOL => {
                    parts.structured = Some(input.clone());
                    parts.pending_ack = Some(id.clone());
                }
                ContentBlock::ToolUse {
                    id, name, input, ..
                } => parts.tool_calls.push(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                _ => {}
            }
        }
        parts
    }
}

/// A reply's usage checked against its prediction ([`AnthropicBackend::check_usage`]).
struct UsageCheck {
    /// What the provider billed (the ledger's usage).
    usage: Usage,
    /// What the cache model predicted, with the reply's output.
    predicted: Usage,
    /// muninn's cause for a read below the best possible.
    miss: Option<MissCause>,
    /// The provider's own diagnosis, once there is a previous turn to compare with.
    provider_miss: Option<ProviderMiss>,
    /// The TTLs asked for against those honoured.
    ttl: TtlCheck,
    /// A read shortfall, the applied edits, a TTL mismatch, the deltas not applied.
    events: Vec<TurnEvent>,
}

/// muninn's cause for a read below the best possible: a read short of the prediction is an
/// eviction (or unknown) and is reported as a [`TurnEvent::ReadShortfall`]; else the level where
/// this prompt departs from the previous turn's; else the cache model's own cause.
fn miss_cause(
    usage: &Usage,
    predicted: &Usage,
    outcome: &CacheOutcome,
    previous: Option<&PromptShape>,
    shaped: &PromptShape,
) -> (Option<MissCause>, Option<TurnEvent>) {
    if usage.cache_read < predicted.cache_read {
        let shortfall = TurnEvent::ReadShortfall {
            predicted: predicted.cache_read,
            reported: usage.cache_read,
        };
        (Some(MissCause::EvictionOrUnknown), Some(shortfall))
    } else if let Some((level, _)) = previous.and_then(|p| diverge(p, shaped)) {
        (Some(MissCause::of_level(level)), None)
    } else {
        (outcome.miss, None)
    }
}

/// One [`TurnEvent::ContextEdited`] per edit the provider says it applied.
fn edit_events(
    response: &MessagesResponse,
    kept: Option<Tokens>,
) -> impl Iterator<Item = TurnEvent> + '_ {
    response
        .context_management
        .iter()
        .flat_map(|c| &c.applied_edits)
        .map(move |edit| TurnEvent::ContextEdited {
            edit: edit.kind.clone(),
            cleared_tool_uses: edit.cleared_tool_uses,
            cleared_input_tokens: edit.cleared_input_tokens,
            kept_tokens: kept,
        })
}

/// What a billed attempt's error adds when the provider never said its usage (a whole reply
/// lost before its body, or before its status): the row's usage is the cache model's estimate,
/// and the request may not have been billed at all.
pub const USAGE_ESTIMATED: &str = "no usage came: counted at the cache model's prediction \
     (an estimate; a request lost before its status may not have been billed)";

/// What a billed attempt's error adds when the stream was cut before its `message_delta`: the
/// output is the count of the content received, and the provider may have generated more.
pub const OUTPUT_ESTIMATED: &str = "cut before the provider's output count: output counted \
     from the content received (an estimate; the provider may have generated more)";

/// What a billed attempt's error adds when `message_start` said nothing of the prompt (a
/// compaction's top-level counts are 0, its pass reported in `usage.iterations[]`, which a cut
/// stream may never reach): the prompt's side is the cache model's prediction.
pub const PROMPT_ESTIMATED: &str = "no prompt usage came before the cut: input and cache \
     counted at the cache model's prediction (an estimate)";

/// What a billed attempt is ledgered at, and its error with what of that is an estimate: the
/// usage the provider said, the prediction for what it never said (see [`USAGE_ESTIMATED`],
/// [`PROMPT_ESTIMATED`], [`OUTPUT_ESTIMATED`]).
fn billed_usage(
    attempt: &BilledAttempt,
    prediction: &Prediction,
    breakpoints: &[(Tokens, Ttl)],
) -> (Usage, String) {
    // A whole reply lost after its status (a ping's), or before it, never said its usage: what
    // the cache model predicts is the best account of what the provider billed — an estimate,
    // which the row's error says (its usage reads as reported otherwise, and a request lost
    // before its status may not have been billed at all).
    if attempt.raw_usage.is_null() {
        let error = format!("{}; {USAGE_ESTIMATED}", attempt.error);
        return (prediction.outcome.usage(attempt.usage.output), error);
    }
    let mut usage = attempt.usage;
    // The client, which knows no request, counted the writes of a pass that gave no split of
    // its own at 5 minutes; the request's breakpoints say at which TTLs they were made
    // (`crate::wire::Usage::to_core_under`).
    if let Ok(said) = serde_json::from_value::<crate::wire::Usage>(attempt.raw_usage.clone()) {
        let under = said.to_core_under(breakpoints);
        usage.cache_write_5m = under.cache_write_5m;
        usage.cache_write_1h = under.cache_write_1h;
    }
    let mut error = attempt.error.to_string();
    // Every prompt is at least one token, so a prompt of 0 is one the stream never said.
    if usage.prompt() == 0 {
        usage = prediction.outcome.usage(usage.output);
        error = format!("{error}; {PROMPT_ESTIMATED}");
    }
    if attempt.output_estimated {
        error = format!("{error}; {OUTPUT_ESTIMATED}");
    }
    (usage, error)
}

/// Keeps a billed attempt for [`Backend::take_failed_attempts`] in `failed`, bounded for a
/// caller that never takes them: the oldest go first.
fn keep_failed(failed: &mut Vec<FailedAttempt>, attempt: FailedAttempt) {
    if failed.len() >= MAX_FAILED_ATTEMPTS {
        failed.remove(0);
    }
    failed.push(attempt);
}

/// The request's breakpoints the provider caches at — those at least `min_cacheable` long —
/// each with its TTL, in prompt order: what a pass over the prompt writes at
/// ([`crate::wire::Usage::to_core_under`]).
fn breakpoint_ttls(shaped: &PromptShape, min_cacheable: Tokens) -> Vec<(Tokens, Ttl)> {
    shaped
        .prompt()
        .checkpoints
        .iter()
        .filter(|c| c.tokens >= min_cacheable)
        .filter_map(|c| c.breakpoint.map(|ttl| (c.tokens, ttl)))
        .collect()
}

/// The prompt lengths at which the request placed a cache breakpoint.
fn breakpoints_of(shaped: &PromptShape) -> Vec<Tokens> {
    shaped
        .prompt()
        .checkpoints
        .iter()
        .filter(|c| c.breakpoint.is_some())
        .map(|c| c.tokens)
        .collect()
}

impl<T: Transport> AnthropicBackend<T> {
    /// A ping generates nothing with `max_tokens: 0` (which the API takes only without
    /// streaming), else one token.
    pub(super) fn set_ping_budget(&self, request: &mut MessagesRequest) {
        if self.tools.ping_max_tokens_zero {
            request.max_tokens = 0;
            request.stream = false;
        } else {
            request.max_tokens = 1;
        }
    }

    /// Sends a rendered request, predicts and checks its usage, and — for a turn — commits the
    /// exchange to the session.
    pub(super) async fn exchange(
        &mut self,
        mut request: MessagesRequest,
        safe_to_repeat: bool,
        commit: Commit,
    ) -> Result<TurnOutcome, BackendError> {
        let min_cacheable = self.session()?.min_cacheable;
        request.diagnostics = Some(DiagnosticsRequest {
            previous_message_id: self.last_turn.as_ref().map(|(id, _)| id.clone()),
        });
        let (read, shaped, kept) = as_read(&request, &mut self.shape_memo)?;
        // A clear's history goes on from the messages as the provider read them.
        let cleared_messages = (commit == Commit::Cleared).then_some(read.messages);
        let (completed, prediction) = self
            .send_predicted(&request, &shaped, min_cacheable, safe_to_repeat, commit)
            .await?;
        let checked = self.check_usage(
            &completed.response,
            &prediction,
            &shaped,
            min_cacheable,
            kept,
        );
        let tool_results = tool_results_of(request.messages.last());
        let breakpoints = breakpoints_of(&shaped);
        let sent = cleared_messages.unwrap_or(request.messages);
        let parts = ReplyParts::of(&completed.response.content);
        if let Err(refused) = self.commit(
            commit,
            sent,
            &completed.response,
            parts.pending_ack.clone(),
            shaped,
        ) {
            // Answered, so billed in full, but not what was asked for (a compaction without
            // its block): the usage is reported as an attempt billed without a usable reply.
            keep_failed(
                &mut self.failed,
                FailedAttempt {
                    usage: checked.usage,
                    raw_usage: completed.raw_usage,
                    predicted: Some(checked.predicted),
                    request_id: completed.request_id,
                    error: refused.to_string(),
                    breakpoints,
                    cleared: commit == Commit::Cleared,
                },
            );
            return Err(refused);
        }
        Ok(TurnOutcome {
            text: parts.text,
            tool_calls: parts.tool_calls,
            structured: parts.structured,
            stop_reason: completed.response.stop_reason.unwrap_or_default(),
            usage: checked.usage,
            raw_usage: completed.raw_usage,
            predicted: Some(checked.predicted),
            miss: checked.miss,
            provider_miss: checked.provider_miss,
            ttl: checked.ttl,
            retries: completed.retries,
            events: checked.events,
            request_id: completed.request_id,
            breakpoints,
            tool_results,
        })
    }

    /// The reply's usage checked against the prediction it was sent under: the miss causes
    /// (muninn's and the provider's), the TTLs honoured, and the events that explain them.
    fn check_usage(
        &self,
        response: &MessagesResponse,
        prediction: &Prediction,
        shaped: &PromptShape,
        min_cacheable: Tokens,
        kept: Option<Tokens>,
    ) -> UsageCheck {
        let usage = response
            .usage
            .to_core_under(&breakpoint_ttls(shaped, min_cacheable));
        let predicted = prediction.outcome.usage(usage.output);
        let previous = self.last_turn.as_ref().map(|(_, shape)| shape);
        let (miss, shortfall) =
            miss_cause(&usage, &predicted, &prediction.outcome, previous, shaped);
        let provider_miss = previous
            .is_some()
            .then(|| Diagnostics::provider_miss(response.diagnostics.as_ref()));
        let ttl = TtlCheck {
            expected_5m: predicted.cache_write_5m,
            expected_1h: predicted.cache_write_1h,
            honoured_5m: usage.cache_write_5m,
            honoured_1h: usage.cache_write_1h,
        };
        let mut events: Vec<TurnEvent> = shortfall.into_iter().collect();
        events.extend(edit_events(response, kept));
        // One line per reply, however many: a new delta type may come with every token.
        if let Some((index, delta)) = response.unapplied_deltas.first() {
            let count = response.unapplied_deltas.len();
            tracing::warn!(count, index, %delta, "deltas muninn cannot apply, kept in the ledger");
        }
        for (index, delta) in &response.unapplied_deltas {
            events.push(TurnEvent::UnappliedDelta {
                index: u64::try_from(*index).unwrap_or(u64::MAX),
                delta: delta.clone(),
            });
        }
        if ttl.mismatch() {
            tracing::warn!(
                ?ttl,
                "the provider honoured another cache TTL than requested"
            );
            events.push(TurnEvent::TtlMismatch { check: ttl });
        }
        UsageCheck {
            usage,
            predicted,
            miss,
            provider_miss,
            ttl,
            events,
        }
    }

    /// Predicts the request's cache outcome, sends it, and — once it is answered — commits the
    /// prediction to the mirror. An attempt the provider billed without a whole reply read the
    /// prompt as an answered one does, so it commits its prediction too (the next attempt, the
    /// client's retry or the caller's, reads what it wrote) and is kept as a
    /// [`FailedAttempt`] for [`Backend::take_failed_attempts`]; an attempt refused before
    /// `message_start` leaves the mirror unchanged.
    async fn send_predicted(
        &mut self,
        request: &MessagesRequest,
        shaped: &PromptShape,
        min_cacheable: Tokens,
        safe_to_repeat: bool,
        commit: Commit,
    ) -> Result<(Completed, Prediction), BackendError> {
        let now = self.clock.now_ms();
        let prompt = shaped.prompt();
        let predict = |mirror: &CacheState| {
            mirror
                .predict(&prompt, now, min_cacheable, &self.rules)
                .map_err(|e| BackendError::Invalid(e.to_string()))
        };
        let mut prediction = predict(&self.mirror)?;
        let sent = self.client.send(request, safe_to_repeat).await;
        let billed: &[_] = match &sent {
            Ok(_) => &[],
            Err(failed) => &failed.billed,
        };
        for attempt in billed {
            let (usage, error) = billed_usage(
                attempt,
                &prediction,
                &breakpoint_ttls(shaped, min_cacheable),
            );
            keep_failed(
                &mut self.failed,
                FailedAttempt {
                    usage,
                    raw_usage: attempt.raw_usage.clone(),
                    predicted: Some(prediction.outcome.usage(attempt.usage.output)),
                    request_id: attempt.request_id.clone(),
                    error,
                    breakpoints: breakpoints_of(shaped),
                    cleared: commit == Commit::Cleared,
                },
            );
            self.mirror
                .commit(&shaped.model, &prediction, now, &self.rules);
            prediction = predict(&self.mirror)?;
        }
        let completed = sent.map_err(|f| {
            tracing::warn!(retries = f.retries.len(), billed = f.billed.len(), error = %f.error, "turn failed");
            f.error
        })?;
        self.mirror
            .commit(&shaped.model, &prediction, now, &self.rules);
        Ok((completed, prediction))
    }

    /// What an answered exchange does to the session (see [`Commit`]). A compaction answered
    /// without its block is [`BackendError::CompactionFailed`], the session unchanged.
    fn commit(
        &mut self,
        commit: Commit,
        mut sent: Vec<Message>,
        response: &MessagesResponse,
        pending_ack: Option<String>,
        shaped: PromptShape,
    ) -> Result<(), BackendError> {
        let session = self
            .session
            .as_mut()
            .ok_or_else(|| BackendError::Invalid("no session started".to_string()))?;
        // An empty text block is a 400 once sent back ("text content blocks must be
        // non-empty"), and so is a message with no content: an answer of nothing (the provider
        // may end a turn saying nothing) joins nothing, and the next user message follows this
        // one, which the API joins into one turn — the prefix sent stays the same bytes.
        let said: Vec<ContentBlock> = response
            .content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::Text { text, .. } if text.is_empty()))
            .cloned()
            .collect();
        let reply = (!said.is_empty()).then(|| Message {
            role: Role::Assistant,
            content: Content::Blocks(said),
            extra: Map::new(),
        });
        match commit {
            Commit::Ping => return Ok(()),
            // The user message without its marker, the reply verbatim (after a clear, the
            // history as cleared).
            Commit::Turn | Commit::Cleared => {
                set_last_marker(&mut sent, None);
                session.history = sent;
                session.history.extend(reply);
                session.pending_ack = pending_ack;
            }
            // The signed block alone: the provider reads it in place of everything before it,
            // so nothing before it is sent again. Its acknowledgement went with the request.
            Commit::Compaction => {
                let stop = response.stop_reason.as_deref();
                let compacted = stop == Some(STOP_COMPACTION)
                    && matches!(
                        response.content.first(),
                        Some(ContentBlock::Compaction { .. })
                    );
                if !compacted {
                    return Err(BackendError::CompactionFailed(format!(
                        "the provider answered without a compaction block (stop reason {stop:?})"
                    )));
                }
                session.history = reply.into_iter().collect();
                session.pending_ack = None;
            }
        }
        self.last_turn = Some((response.id.clone(), shaped));
        Ok(())
    }
}
