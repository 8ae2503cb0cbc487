//! The prompt-window guard: a request whose prompt and reply cannot fit the model's context
//! window is not sent.
//!
//! The provider refuses such a request (or, through a client that trims, answers a prompt that
//! is not the transcript) — after it was paid for in time and, with some providers, in money:
//! one 9,000,776-token prompt, nine windows' worth, was sent and billed before this guard. The
//! check runs before the spend-cap check, since a batch too large for any window is not a
//! matter of waiting for room in the spend window. A refused turn is a
//! [`RuntimeError::PromptTooLarge`]: nothing is recorded or sent, the deliveries stay in the
//! mailbox, and the runner reports it as its activity (`retrying`, with the sizes) in status and
//! the logs until the operator acts (a larger-window model, a smaller batch).
//!
//! A batch that does not fit is cut before it is refused ([`MindRunner::fit_window`]): halved
//! until its request fits, the rest left for the next turns. A mailbox that filled while the
//! Mind was braked, capped or down (32 deliveries of up to 64 KiB each, ~15k tokens apiece,
//! are one batch when they share a conversation) used to be refused whole at every retry, the
//! Mind stuck on it for good, no delivery answered; only a single delivery too large for any
//! request is refused now.

use super::persona::{Batch, Plan};
use super::{MindRunner, RuntimeError};
use muninn_backend::Backend;
use muninn_core::decide::Event;
use muninn_core::money::Tokens;
use muninn_store::Role;

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

    /// `batch` and its plan, the batch halved until its request fits the model's window (the
    /// rest stays queued for the next turns; see the module docs). Not cut: a single delivery
    /// (then [`MindRunner::check_window`] refuses it), and the unanswered attempt a retry
    /// re-sends as it was recorded (it was checked when it was recorded).
    pub(super) fn fit_window(&self, mut batch: Batch, now: i64) -> (Batch, Plan) {
        loop {
            let plan = self.plan(Role::Persona, batch.delta, true, 0, now);
            let n = batch.deliveries.len();
            let prompt = self.prompt_tokens(Role::Persona, &plan);
            let fits = fits_window(
                prompt,
                self.mind.max_output_tokens,
                self.price.context_window,
            );
            if fits || n <= 1 || self.is_attempt(&batch.id) {
                return (batch, plan);
            }
            tracing::warn!(
                mind = %self.mind.id,
                deliveries = n,
                prompt_tokens = prompt,
                context_window = self.price.context_window,
                "a batch too large for the model's window is halved; the rest is the next turn's"
            );
            let mut deliveries = batch.deliveries;
            deliveries.truncate(n / 2);
            batch = Batch::new(&self.mind.id, deliveries);
        }
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
    use super::fits_window;

    #[test]
    fn the_reply_counts_against_the_window() {
        assert!(fits_window(190_000, 10_000, 200_000));
        assert!(!fits_window(190_001, 10_000, 200_000));
        assert!(!fits_window(9_000_776, 2_048, 200_000));
        assert!(!fits_window(u64::MAX, 1, 200_000), "no wrap");
    }
}
