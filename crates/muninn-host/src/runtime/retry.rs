//! When a Mind tries a failed step again: exponential backoff with a cap, on the Mind's own
//! (injected) clock, at least as late as the provider's `retry-after`.
//!
//! A failed step (a 401 after a key rotation, a 5xx or 529 whose client-side retries ran out, a
//! timeout, a Claude Code child that died or hung) leaves its batch in the mailbox. The runner
//! does not wait for new mail to try again: it schedules its own next attempt, `base · 2ⁿ⁻¹`
//! after the n-th failure in a row, never more than `cap`, and never earlier than the
//! `retry-after` the provider sent with its refusal — up to [`RETRY_AFTER_CAP_MS`], an hour: a
//! `retry-after` is an input like any other, and one of a year (a gateway's misconfiguration, a
//! typo in a proxy) would have stopped the Mind for a year. New mail arriving meanwhile does not bring
//! the attempt forward (a rate-limited provider is not hammered because the rooms are busy).
//!
//! # What the transcript holds of the attempts
//!
//! A delivery is recorded **once per segment it is sent in**, not once per attempt
//! (`persona.rs`): when an attempt fails on a backend whose session lives in the host (the
//! Messages API, the simulator), or on the Claude Code CLI when nothing of the turn was answered
//! (the API refused it, it timed out, its child died: the driver takes it back out of the CLI's
//! session file, `Backend::failure_left_session`), nothing joined the provider's session, so the
//! next attempt re-sends the message already recorded and adds nothing to the transcript but,
//! when the error changed, a notice of why the attempt failed. Two cases record the delivery
//! again: a retry that opens a new segment (the session had to be rebuilt, or the decider
//! refreshed), whose transcript must replay on its own; and a Claude Code child that died or hung
//! after its model acted (`Backend::failure_kept_turn`), whose resumed session holds the turn,
//! so the re-sent line is a second one on both sides.
//!
//! The delivery is appended under the attempt's key (`attempt.rs`): an append whose commit
//! landed though its answer was lost (a PostgreSQL call past its deadline) fails the step, and
//! the retry finds it under that key instead of recording the delivery a second time.
//!
//! An attempt that failed after opening a segment (a refresh, a first or rebuilt start) leaves
//! the segment open and its first request unanswered: the next attempt is that request again,
//! in that segment, planned as its start (`MindRunner::plan`) — not decided again on the
//! accounting of the segment before, which the provider no longer holds.

use muninn_backend::BackendError;

/// The first retry's delay (the second waits twice as long, …).
pub const RETRY_BASE_MS: i64 = 250;

/// The longest backoff between two attempts (a provider's `retry-after` may ask for longer).
pub const RETRY_CAP_MS: i64 = 30_000;

/// The longest `retry-after` honoured (an hour): a longer one waits this long, then tries.
pub const RETRY_AFTER_CAP_MS: i64 = 3_600_000;

/// The backoff schedule: `base · 2ⁿ⁻¹` after the n-th failure in a row, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The delay after the first failure, ms.
    pub base_ms: i64,
    /// The longest delay, ms.
    pub cap_ms: i64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            base_ms: RETRY_BASE_MS,
            cap_ms: RETRY_CAP_MS,
        }
    }
}

impl RetryPolicy {
    /// How long to wait after the `failures`-th failure in a row (1 for the first), given the
    /// provider's `retry-after`, if it sent one: the later of the two, and the backoff part
    /// never over the cap (a provider's longer `retry-after` is honoured, up to
    /// [`RETRY_AFTER_CAP_MS`]).
    pub fn delay_ms(&self, failures: u32, retry_after_ms: Option<u64>) -> i64 {
        let doublings = failures.saturating_sub(1).min(32);
        let backoff = self
            .base_ms
            .saturating_mul(1i64 << doublings)
            .min(self.cap_ms)
            .max(0);
        let hint = retry_after_ms.map_or(0, |ms| {
            i64::try_from(ms).map_or(RETRY_AFTER_CAP_MS, |ms| ms.min(RETRY_AFTER_CAP_MS))
        });
        backoff.max(hint)
    }
}

/// The provider's `retry-after` inside a failure, if it sent one (also when the client's own
/// retries ran out on it).
pub fn retry_after_ms(error: &BackendError) -> Option<u64> {
    match error {
        BackendError::Api { retry_after_ms, .. } => *retry_after_ms,
        BackendError::RetriesExhausted { last, .. } | BackendError::BrokenAfterContent(last) => {
            retry_after_ms(last)
        }
        _ => None,
    }
}

/// A run of failed steps: since when, how many, and when the next attempt is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// When the first failure of the run happened, Unix ms.
    pub since_ms: i64,
    /// Failed steps in a row.
    pub attempts: u32,
    /// When the next attempt is due, Unix ms.
    pub next_attempt_ms: i64,
}

impl Failing {
    /// The run after one more failure at `now_ms` (the first when `previous` is `None`).
    pub fn after(
        previous: Option<&Failing>,
        policy: &RetryPolicy,
        retry_after_ms: Option<u64>,
        now_ms: i64,
    ) -> Failing {
        let (since_ms, attempts) = previous.map_or((now_ms, 1), |f| (f.since_ms, f.attempts + 1));
        Failing {
            since_ms,
            attempts,
            next_attempt_ms: now_ms.saturating_add(policy.delay_ms(attempts, retry_after_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_to_the_cap_and_honours_a_longer_retry_after() {
        let p = RetryPolicy::default();
        let delays: Vec<i64> = (1..=10).map(|n| p.delay_ms(n, None)).collect();
        assert_eq!(
            delays,
            [
                250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000
            ]
        );
        assert_eq!(p.delay_ms(1, Some(7_000)), 7_000);
        assert_eq!(p.delay_ms(9, Some(7_000)), 30_000);
        assert_eq!(p.delay_ms(9, Some(90_000)), 90_000);
        assert_eq!(p.delay_ms(u32::MAX, None), 30_000);
    }

    #[test]
    fn a_retry_after_past_an_hour_waits_an_hour() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_ms(1, Some(3_600_000)), 3_600_000);
        // A year, and more than any duration holds: the Mind tries again within the hour.
        assert_eq!(p.delay_ms(1, Some(31_536_000_000)), RETRY_AFTER_CAP_MS);
        assert_eq!(p.delay_ms(3, Some(u64::MAX)), RETRY_AFTER_CAP_MS);
    }

    #[test]
    fn a_run_of_failures_keeps_its_start_and_counts() {
        let p = RetryPolicy::default();
        let first = Failing::after(None, &p, None, 1_000);
        assert_eq!(
            first,
            Failing {
                since_ms: 1_000,
                attempts: 1,
                next_attempt_ms: 1_250
            }
        );
        let second = Failing::after(Some(&first), &p, Some(5_000), 2_000);
        assert_eq!(
            second,
            Failing {
                since_ms: 1_000,
                attempts: 2,
                next_attempt_ms: 7_000
            }
        );
    }

    #[test]
    fn retry_after_is_found_inside_exhausted_retries() {
        let limited = BackendError::Api {
            status: 429,
            kind: "rate_limit_error".into(),
            message: "slow down".into(),
            retryable: true,
            retry_after_ms: Some(3_000),
            request_id: None,
        };
        let exhausted = BackendError::RetriesExhausted {
            attempts: 3,
            last: Box::new(limited),
        };
        assert_eq!(retry_after_ms(&exhausted), Some(3_000));
        assert_eq!(retry_after_ms(&BackendError::Transport("x".into())), None);
    }
}
