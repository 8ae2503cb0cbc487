//! The overall bound of one attempt, beside the silence bound (`read_timeout`).
//!
//! The silence bound alone lets a provider or proxy that trickles real events — a
//! one-character `text_delta` every few minutes — or a whole reply's bytes keep one attempt,
//! and the Mind shown *working*, alive for hours, bounded only by [`super::MAX_RESPONSE_BYTES`]
//! and `max_tokens`. Every attempt therefore also has a deadline, counted from sending the
//! request to the reply's last byte; past it the attempt is a transport failure like a read
//! timeout: retried when no content had begun, else `BrokenAfterContent`, exactly as a stream
//! cut mid-content.

use super::AttemptError;
use std::time::Duration;
use tokio::time::Instant;

/// The least any attempt is given: the official SDKs' default timeout (10 minutes), which
/// also bounds their non-streaming requests.
pub const ATTEMPT_BUDGET_FLOOR: Duration = Duration::from_secs(600);

/// The deadline of one attempt asking for `max_tokens`: the official SDKs' estimate of the
/// longest a real answer of that size takes — 128,000 output tokens in an hour, ~35.6 tokens a
/// second (`_calculate_nonstreaming_timeout` in anthropic-sdk-python; the Ruby SDK's
/// `calculate_nonstreaming_timeout` is the same) — and never less than
/// [`ATTEMPT_BUDGET_FLOOR`]. The SDKs refuse a non-streaming request whose estimate passes 10
/// minutes and leave a stream unbounded; muninn streams every turn, so it takes the estimate
/// itself as the bound: 21,333 tokens or fewer get 10 minutes, 32,000 get 15, 128,000 an hour.
pub fn attempt_budget(max_tokens: u64) -> Duration {
    let expected_ms = max_tokens.saturating_mul(3_600_000) / 128_000;
    Duration::from_millis(expected_ms).max(ATTEMPT_BUDGET_FLOOR)
}

/// When an attempt must be over, and the budget it was given (for the failure's words).
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    /// The instant (Tokio's clock, so paused-time tests see it).
    pub(super) at: Instant,
    /// The budget from the attempt's start.
    budget: Duration,
}

impl Deadline {
    /// The deadline `budget` from now.
    pub(super) fn after(budget: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// Whether it has passed. Checked before each read as well as raced against it: a body
    /// whose chunks are always ready would never let a timer win the race.
    pub(super) fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// The attempt's failure at the deadline: a transport failure (retryable), marked as after
    /// content when reply content had begun, which the caller then treats as any stream cut
    /// mid-content.
    pub(super) fn failure(&self, after_content: bool) -> AttemptError {
        let mut f = super::transport_failure_text(format!(
            "no whole reply within the attempt's deadline of {:?} (timed out)",
            self.budget
        ));
        f.after_content = after_content;
        f
    }
}
