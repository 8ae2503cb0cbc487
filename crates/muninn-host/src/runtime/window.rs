//! The prompt-window guard: a request whose prompt and reply cannot fit the model's context
//! window is not sent.
//!
//! The provider refuses such a request (or, through a client that trims, answers a prompt that
//! is not the transcript) — after it was paid for in time and, with some providers, in money:
//! one 9,000,776-token prompt, nine windows' worth, was sent and billed before this guard. The
//! check runs before the spend-cap check, since a batch too large for any window is not a
//! matter of waiting for room in the spend window.
//!
//! A batch that does not fit is cut before it is sent ([`MindRunner::fit_window`]): halved
//! until its request fits, the rest left for the next turns. A mailbox that filled while the
//! Mind was braked, capped or down (32 deliveries of up to 64 KiB each, ~15k tokens apiece,
//! are one batch when they share a conversation) used to be refused whole at every retry, the
//! Mind stuck on it for good, no delivery answered. A single delivery too large for any request
//! is set aside (below). [`RuntimeError::PromptTooLarge`] is left for the one request never cut:
//! the retry of an attempt already recorded, re-sent as it was (it fitted when it was recorded),
//! and for layers and memory that leave no room for any delivery; either waits `retrying` with
//! the sizes for the operator.
//!
//! muninn's token count is an estimate, so the provider may still refuse a batch it said fits:
//! a 400 whose message says the prompt is too long ([`is_prompt_too_long`]: the Messages API's
//! `invalid_request_error` "prompt is too long: …" or "input length and `max_tokens` exceed
//! context limit: …", Claude Code's `prompt_too_long` result).
//! That refusal is answered as the guard's own: the session is rebuilt (a new segment: the
//! prefix it appended to is what grew too long) and the next batch from the same delivery takes
//! at most half as many deliveries ([`Cut`]) — never the same request again, which the provider
//! would refuse again, for ever. The cut is kept in memory only: after a restart the first
//! attempt may be refused once more, and is cut again.
//!
//! # Undeliverable
//!
//! A single delivery that cannot fit any request — alone at a segment's start, by muninn's
//! count or by the provider's refusal — is set aside ([`MindRunner::set_aside`]): nothing is
//! sent for it; in one commit, under a turn key of its own, it is acknowledged, its room gets a
//! short notice through the outbox (request id `<batch>-undeliverable`, so a crash before or
//! after the commit never sends it twice), and the transcript records it as refused with the
//! sizes. It is logged at error and counted in `status` (since the host started). The mail
//! behind it flows on. A single delivery that fits a segment's start but not the open segment's
//! prefix is not set aside: the session is rebuilt and it is sent there. Nor is one that is not
//! itself what does not fit — the layers, memory and reply's bound leaving no room for any
//! delivery, or a refused start whose delivery is the smaller part of the prompt: every
//! delivery would go the same way, acknowledged unread, so the Mind waits `retrying` instead.

use super::pending::{Then, Uncommitted};
use super::persona::{Batch, Plan};
use super::{MindRunner, RuntimeError, SELF_ROOM, Step};
use muninn_backend::{Backend, BackendError};
use muninn_core::decide::Event;
use muninn_core::money::Tokens;
use muninn_store::{
    FencingToken, NewOutboxMessage, NewTranscriptItem, Role, TranscriptKind, TurnRecord,
};
use serde_json::json;

/// A batch cut after the provider refused it as too long: the next batch starting at
/// `first_seq` takes at most `most` deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cut {
    first_seq: i64,
    most: usize,
}

/// What [`MindRunner::fit_window`] makes of a batch.
pub(super) enum Fitted {
    /// Send this batch (cut to fit, or as it was) with this plan.
    Send(Batch, Plan),
    /// A single delivery no request can hold: set it aside; the prompt it would make, alone at
    /// a segment's start.
    Undeliverable(Batch, Tokens),
}

/// Whether the provider refused the request because its prompt is longer than the model's
/// window: a 400 `invalid_request_error` "prompt is too long: …" from the Messages API (and the
/// simulator), or its "input length and `max_tokens` exceed context limit: …" (the prompt fits
/// but not with the reply's bound, which muninn's own check counts too), or a result with
/// `terminal_reason: "prompt_too_long"` from Claude Code (whose text says "Prompt is too long").
/// Also inside a client's exhausted retries.
pub fn is_prompt_too_long(error: &BackendError) -> bool {
    match error {
        BackendError::Api {
            status: 400,
            kind,
            message,
            ..
        } => {
            let message = message.to_ascii_lowercase();
            kind == "prompt_too_long"
                || (kind == "invalid_request_error"
                    && (message.contains("prompt is too long")
                        || message.contains("exceed context limit")))
        }
        BackendError::RetriesExhausted { last, .. } => is_prompt_too_long(last),
        _ => false,
    }
}

/// Whether a prompt of `prompt` tokens with a reply of up to `max_output` fits `window`.
pub fn fits_window(prompt: Tokens, max_output: Tokens, window: Tokens) -> bool {
    prompt.saturating_add(max_output) <= window
}

impl<B: Backend> MindRunner<B> {
    /// The most tokens the request `plan` leads to sends for `role`: the layers, memory and
    /// the new input when it starts a segment, else the cached prefix and the new input.
    pub(super) fn prompt_tokens(&self, role: Role, plan: &Plan) -> Tokens {
        let view = self.session(role).acc.view();
        let delta = match plan.event {
            Event::Arrival { delta, .. } => delta,
            Event::Expiring | Event::HeadExpiring => 0,
        };
        let base = if plan.starts() {
            view.bounds.head_tokens.max(self.layer_tokens()) + view.bounds.rehydrate_tokens
        } else {
            view.prefix_tokens
        };
        base.saturating_add(delta)
    }

    /// The prompt a request starting a segment with `delta` new tokens sends: the layers, the
    /// memory and the new input.
    fn start_tokens(&self, delta: Tokens) -> Tokens {
        let view = self.persona.acc.view();
        let base = view.bounds.head_tokens.max(self.layer_tokens()) + view.bounds.rehydrate_tokens;
        base.saturating_add(delta)
    }

    /// `batch` and its plan, the batch halved until its request fits the model's window (the
    /// rest stays queued for the next turns; see the module docs), and first cut to what the
    /// provider's last refusal left ([`Cut`]). Not cut: the unanswered attempt a retry re-sends
    /// as it was recorded (it was checked when it was recorded). A single delivery that does
    /// not fit is sent in a rebuilt segment when it fits one, else is
    /// [`Fitted::Undeliverable`].
    pub(super) fn fit_window(&mut self, mut batch: Batch, now: i64) -> Fitted {
        if let (Some(cut), Some(first)) = (self.window_cut, batch.deliveries.first())
            && cut.first_seq == first.seq
            && batch.deliveries.len() > cut.most
            && !self.is_attempt(&batch.id)
        {
            let mut deliveries = batch.deliveries;
            deliveries.truncate(cut.most.max(1));
            batch = Batch::new(&self.mind.id, deliveries);
        }
        loop {
            let plan = self.plan(Role::Persona, batch.delta, true, 0, now);
            let n = batch.deliveries.len();
            let prompt = self.prompt_tokens(Role::Persona, &plan);
            let (max_output, window) = (self.mind.max_output_tokens, self.price.context_window);
            if fits_window(prompt, max_output, window) || self.is_attempt(&batch.id) {
                return Fitted::Send(batch, plan);
            }
            if n <= 1 {
                let alone = self.start_tokens(batch.delta);
                // Set aside only a delivery that is itself what does not fit. When the layers,
                // the memory and the reply's bound leave no room for any delivery, setting each
                // aside would acknowledge all mail unread: `check_window` refuses the turn
                // instead (`retrying` with the sizes, nothing acknowledged).
                let base_fits = fits_window(self.start_tokens(0), max_output, window);
                if !fits_window(alone, max_output, window) && base_fits {
                    return Fitted::Undeliverable(batch, alone);
                }
                // The open segment's prefix is what does not fit: a new segment holds it.
                if plan.starts() || !base_fits {
                    return Fitted::Send(batch, plan);
                }
                self.persona.mark_broken(now);
                continue;
            }
            tracing::warn!(
                mind = %self.mind.id,
                deliveries = n,
                prompt_tokens = prompt,
                context_window = window,
                "a batch too large for the model's window is halved; the rest is the next turn's"
            );
            let mut deliveries = batch.deliveries;
            deliveries.truncate(n / 2);
            batch = Batch::new(&self.mind.id, deliveries);
        }
    }

    /// The provider refused `batch`'s request as too long (see the module docs): the session is
    /// rebuilt and the batch cut for the next attempt; a single delivery refused at a segment's
    /// start is set aside. Nothing was answered, so nothing is acknowledged but a delivery set
    /// aside.
    pub(super) async fn refused_as_too_long(
        &mut self,
        token: FencingToken,
        batch: Batch,
        plan: &Plan,
        error: BackendError,
        now: i64,
    ) -> Result<Step, RuntimeError> {
        // The recorded attempt is not re-sent: the provider would refuse it again.
        self.attempt = None;
        self.persona.mark_broken(now);
        let n = batch.deliveries.len();
        let prompt = self.prompt_tokens(Role::Persona, plan);
        // Alone at a segment's start, the delivery is at fault only when it is most of the
        // prompt: otherwise what precedes it (the layers, the memory, a CLI's own system prompt
        // and tools) is what the provider cannot hold, every delivery would be refused the same
        // way, and setting each aside would acknowledge all mail unread. That waits `retrying`
        // with the provider's error for the operator.
        let the_deliverys_fault = batch.delta >= prompt.saturating_sub(batch.delta);
        if n == 1 && plan.starts() && the_deliverys_fault {
            return self
                .set_aside(token, batch, prompt, Some(error.to_string()), now)
                .await;
        }
        if n == 1 && plan.starts() {
            tracing::error!(
                mind = %self.mind.id,
                delivery_tokens = batch.delta,
                prompt_tokens = prompt,
                error = %error,
                "the provider refused a segment's start as too long though the delivery is the \
                 smaller part: the layers and memory do not fit its window; not set aside"
            );
            return Err(RuntimeError::Backend(error));
        }
        if let Some(first) = batch.deliveries.first().filter(|_| n > 1) {
            self.window_cut = Some(Cut {
                first_seq: first.seq,
                most: n / 2,
            });
        }
        tracing::warn!(
            mind = %self.mind.id,
            deliveries = n,
            error = %error,
            "the provider refused the batch as too long; the next attempt is cut and starts a new segment"
        );
        Err(RuntimeError::Backend(error))
    }

    /// Sets aside a single delivery no request can hold (see the module docs): acknowledged,
    /// its room told once, the transcript recording it refused with the sizes, logged at error
    /// and counted. `provider` is the provider's refusal, when it was the provider's.
    pub(super) async fn set_aside(
        &mut self,
        token: FencingToken,
        batch: Batch,
        prompt: Tokens,
        provider: Option<String>,
        now: i64,
    ) -> Result<Step, RuntimeError> {
        let (max_output, window) = (self.mind.max_output_tokens, self.price.context_window);
        let segment = self.persona.segment.unwrap_or(0);
        let mut record = TurnRecord {
            turn_key: Some(format!("persona-{}-undeliverable", batch.id)),
            ack_through: Some(batch.max_seq),
            ..TurnRecord::default()
        };
        // One delivery: `fit_window` and `refused_as_too_long` set aside only a batch of one.
        if let Some(d) = batch.deliveries.first() {
            tracing::error!(
                mind = %self.mind.id,
                seq = d.seq,
                room = %d.room,
                sender = %d.sender,
                prompt_tokens = prompt,
                max_output_tokens = max_output,
                context_window = window,
                provider = provider.as_deref().unwrap_or(""),
                "a delivery too large for any request is set aside as undeliverable; its room is told"
            );
            let body = json!({"undeliverable": {
                "batch": batch.id, "seq": d.seq, "source_id": d.source_id, "room": d.room,
                "sender": d.sender, "text_bytes": d.text.len(), "prompt_tokens": prompt,
                "max_output_tokens": max_output, "context_window": window, "provider": provider,
            }});
            record.transcript.push(NewTranscriptItem {
                role: Role::Persona,
                segment,
                kind: TranscriptKind::Notice,
                body,
                created_at_ms: now,
            });
            // A Self run's result comes from no room anyone reads: the transcript and the log
            // say it instead.
            if d.room != SELF_ROOM {
                // After the provider's refusal muninn's own count fits the window: quoting it
                // against the window would contradict the notice.
                let why = match &provider {
                    None => format!("~{prompt} tokens against my model's window of {window}"),
                    Some(_) => "my model's provider refused it as too long".to_string(),
                };
                record.outbox.push(NewOutboxMessage {
                    request_id: format!("{}-undeliverable", batch.id),
                    room: d.room.clone(),
                    text: format!(
                        "{}: your message ({} bytes) is too large for me to read ({why}); it was \
                         not read. Please send it in smaller parts.",
                        d.sender,
                        d.text.len()
                    ),
                    created_at_ms: now,
                });
            }
        }
        let then = Then::PersonaTurn {
            max_seq: batch.max_seq,
            valid: false,
        };
        let turn = Uncommitted::new(token, Role::Persona, record, now, then);
        let step = self.settle(turn).await?;
        // Counted once committed (one held and committed at a later step goes uncounted: the
        // transcript still holds it).
        self.host.signals.set_aside(&self.mind.id);
        Ok(step.unwrap_or(Step::PersonaTurn {
            acked_through: batch.max_seq,
            valid: false,
        }))
    }

    /// Fails with [`RuntimeError::PromptTooLarge`] when `plan`'s request cannot fit the model's
    /// window (see the module docs).
    pub(super) fn check_window(&self, role: Role, plan: &Plan) -> Result<(), RuntimeError> {
        let prompt = self.prompt_tokens(role, plan);
        let max_output = self.mind.max_output_tokens;
        let window = self.price.context_window;
        if fits_window(prompt, max_output, window) {
            return Ok(());
        }
        tracing::error!(
            mind = %self.mind.id,
            role = role.as_str(),
            prompt_tokens = prompt,
            max_output_tokens = max_output,
            context_window = window,
            "prompt would exceed the model's context window; not sending (the deliveries stay queued)"
        );
        Err(RuntimeError::PromptTooLarge {
            prompt,
            max_output,
            window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{fits_window, is_prompt_too_long};
    use muninn_backend::BackendError;

    fn api(status: u16, kind: &str, message: &str) -> BackendError {
        BackendError::Api {
            status,
            kind: kind.into(),
            message: message.into(),
            retryable: false,
            retry_after_ms: None,
            request_id: None,
        }
    }

    #[test]
    fn the_providers_prompt_too_long_is_recognised_and_nothing_else() {
        // The Messages API (and the simulator), and the Claude Code CLI's result.
        let messages = api(
            400,
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum",
        );
        let cli = api(
            400,
            "prompt_too_long",
            "Prompt is too long · the request is ~250000 tokens (limit 200000)",
        );
        assert!(is_prompt_too_long(&messages));
        assert!(is_prompt_too_long(&cli));
        assert!(is_prompt_too_long(&BackendError::RetriesExhausted {
            attempts: 1,
            last: Box::new(messages),
        }));
        let breakpoints = api(
            400,
            "invalid_request_error",
            "A maximum of 4 blocks with cache_control may be provided",
        );
        assert!(!is_prompt_too_long(&breakpoints));
        assert!(!is_prompt_too_long(&api(
            529,
            "overloaded_error",
            "prompt is too long"
        )));
        assert!(!is_prompt_too_long(&BackendError::Transport(
            "prompt is too long".into()
        )));
    }

    #[test]
    fn the_providers_refusal_of_the_prompt_with_its_reply_bound_is_too_long_too() {
        // The Messages API's refusal when the prompt fits but not with `max_tokens`: the same
        // cut answers it (muninn's own check counts the reply's bound too).
        let with_reply = api(
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, \
             decrease input length or `max_tokens` and try again",
        );
        assert!(is_prompt_too_long(&with_reply));
        // `max_tokens` alone past the model's output limit is not the prompt's length.
        let max_tokens = api(
            400,
            "invalid_request_error",
            "max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens \
             for claude-sonnet-4-5",
        );
        assert!(!is_prompt_too_long(&max_tokens));
    }

    #[test]
    fn the_reply_counts_against_the_window() {
        assert!(fits_window(190_000, 10_000, 200_000));
        assert!(!fits_window(190_001, 10_000, 200_000));
        assert!(!fits_window(9_000_776, 2_048, 200_000));
        assert!(!fits_window(u64::MAX, 1, 200_000), "no wrap");
    }
}
