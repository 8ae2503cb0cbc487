//! The ledger row: one per request muninn makes, the measured economics of the system.
//!
//! `muninn ledger --export` writes these as JSON Lines (one [`LedgerRow`] per line); the importer
//! reads them back as traces, one per Mind, role and model, so muninn's own history can be
//! replayed under every policy like any Claude Code transcript.

use crate::cache::Ttl;
use crate::decide::{Action, Bounds, Capabilities, Event, Reason};
use crate::money::{MicroUsd, Tokens};
use crate::trace::Usage;
use serde::{Deserialize, Serialize};

pub use crate::miss::{MissCause, ProviderMiss};

/// One request's row in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRow {
    /// The Mind.
    pub mind: String,
    /// `persona` or `self`.
    pub role: String,
    /// The segment (0-based) within the role's session.
    pub segment: u64,
    /// The turn within the segment.
    pub turn: u64,
    /// When the request started, Unix milliseconds.
    pub at_ms: i64,
    /// Milliseconds since the previous request of this session (0 for the first).
    pub idle_gap_ms: i64,
    /// The model the request went to.
    pub model: String,
    /// Tokens in the prompt up to the last breakpoint.
    pub prefix_tokens: Tokens,
    /// Tokens the segment was rehydrated with (system + memory), 0 if not a segment start.
    pub rehydration_tokens: Tokens,
    /// The usage the provider reported.
    pub usage: Usage,
    /// The provider's raw usage JSON, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_usage: Option<serde_json::Value>,
    /// The cost of the request.
    pub cost: MicroUsd,
    /// The cache read the cache model predicted.
    pub predicted_read: Tokens,
    /// The cache write the cache model predicted.
    pub predicted_write: Tokens,
    /// `warm` or `cold`, as the decider saw the cache before the request; `expired` when the
    /// provider's answer read less than the host's cache model predicted (the entry expired
    /// before the request reached the provider, or was evicted early) — what happened, not
    /// what was believed. The usage is what the provider reported, either way.
    pub cache_state: String,
    /// Why the request missed, if it did: muninn's cause, predicted from its cache model and
    /// from what the request changed against its predecessor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss_cause: Option<MissCause>,
    /// The provider's own diagnosis of the request (`diagnostics.cache_miss_reason`, asked for
    /// with the previous response's id), beside muninn's cause; none when the backend did not
    /// ask for one or the provider gave none. See [`crate::miss`] for how the two compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_miss: Option<ProviderMiss>,
    /// The decider's action for this request.
    pub decision: String,
    /// Whether this request began a new turn (as opposed to a tool-loop step).
    #[serde(default = "default_true")]
    pub boundary: bool,
    /// Flagged events of the request: every retry the backend made (status, delay, kind), a
    /// TTL the provider did not honour, a read shortfall against the prediction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<serde_json::Value>,
    /// What the session accounting and the decider made of this request: its kind, the
    /// question the decider was asked and its answer, a segment it began, and the policy and
    /// parameters in force. Rows written before this field existed (and rows of sessions that
    /// keep no accounting) have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<Decided>,
}

/// What a request was to its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// A turn (or a tool-loop step, or a retry) of the session's conversation.
    Request,
    /// A keep-warm ping through the whole cached prefix.
    Ping,
    /// A head-only keep-warm ping.
    HeadPing,
    /// A memory flush or a compaction: the session writes what its next segment starts from.
    Flush,
    /// An attempt the provider billed but did not answer whole (its stream was cut after
    /// `message_start`): it read and wrote the cache as the request it was, and the next row
    /// (the retry, or whatever the runner sent next) came after it. No decision behind it: the
    /// decider was asked for the request it attempted, on that request's own row.
    FailedAttempt,
}

/// The ledger's `decision` text of a [`RowKind::FailedAttempt`] row.
pub const ATTEMPT_FAILED: &str = "attempt_failed";

/// The ledger's `decision` text of a [`RowKind::FailedAttempt`] row written for a request whose
/// answer was lost with its host (a crash or a kill between the answer and its commit): the
/// next holder ledgers it at the cache model's prediction recorded before it was sent, an
/// estimate of a request that may not have been billed.
pub const ATTEMPT_LOST: &str = "attempt_lost";

impl RowKind {
    /// The kind of a row written before decision records existed, from its decision text.
    pub fn of_decision(decision: &str) -> RowKind {
        if decision.starts_with("ping_head") {
            RowKind::HeadPing
        } else if decision.starts_with("ping") {
            RowKind::Ping
        } else if decision == "flush" || decision == "compact" {
            RowKind::Flush
        } else if decision == ATTEMPT_FAILED || decision == ATTEMPT_LOST {
            RowKind::FailedAttempt
        } else {
            RowKind::Request
        }
    }
}

/// Why a segment began although the decider did not choose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForcedStart {
    /// The role's first segment.
    First,
    /// The provider session was lost — a restart or a lease taken over that could not continue
    /// the segment, or a failed call that left it out of step — and was rebuilt from the
    /// transcript.
    Rebuilt,
    /// A long run flushed its memory under the flush protocol; the next one starts from it.
    Flushed,
}

/// A segment that begins with this row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentStart {
    /// Tokens of the head (tools and the first system layer) every segment shares.
    pub head: Tokens,
    /// Tokens the segment was rehydrated with: the whole system, memory included (and a
    /// compaction's summary).
    pub rehydration: Tokens,
    /// Set when the segment began without the decider choosing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<ForcedStart>,
    /// A digest of the head's content ([`crate::cache::hash_bytes`]): two segments whose heads
    /// have the same digest share the provider's cache entry for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_digest: Option<u64>,
    /// A digest of the whole system's content: a segment rebuilt on the very layers of an
    /// earlier one reads them from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_digest: Option<u64>,
}

/// The decider's question and answer behind a ledger row, and everything a replay of the
/// ledger needs to ask the same question: `muninn replay --closed-loop` re-derives the session's
/// state from the rows before this one and checks the decision against [`Decided::action`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    /// What the request was.
    pub kind: RowKind,
    /// The question, when the decider was asked one (none for a forced segment start or a
    /// retry inside a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// The decider's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// The decider's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// When the row began a segment: its head and rehydration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<SegmentStart>,
    /// Set on the first row after the host lost the session — a failed call, a restart, a lease
    /// taken over — to when it was last known to be kept (the failure, or the previous holder's
    /// last row); and on a row before which the runner passed an idle decision point without
    /// asking it when it came (it was backing off a failed step, running the other role, braked
    /// or capped), to that point's time. Between then and this row no host decided anything
    /// at its time, so a replay takes no idle decision in that span: it lets the points go, as
    /// the host did, and compares only the row itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_at_ms: Option<i64>,
    /// The policy (as `--policy` spells it).
    pub policy: String,
    /// The tail's TTL.
    pub ttl: Ttl,
    /// The head's TTL.
    pub head_ttl: Ttl,
    /// The decider's bounds (`head_tokens` is the segment's).
    pub bounds: Bounds,
    /// How long before an expiry the decider is asked.
    pub decide_before_expiry_ms: i64,
    /// What the backend could do.
    pub can: Capabilities,
    /// The tool results the request added (what a later clear could remove), as the backend
    /// counted them; the accounting learns them from here, live and in replay.
    #[serde(default, skip_serializing_if = "crate::trace::ToolResults::is_none")]
    pub tool_results: crate::trace::ToolResults,
    /// A [`RowKind::FailedAttempt`]'s: the kind of the request it attempted. A cut ping,
    /// flush or compaction is the recorded policy's own side request, which a counterfactual
    /// replay counts for that policy alone (`muninn_import`'s `ledger` mapping); none (rows
    /// written before it was recorded) reads as a request of the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted: Option<RowKind>,
}

fn default_true() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row without its decision record (an export edited by hand, or cut to the columns)
    /// still reads as the failed attempt it was, cut or lost with its host — not as a request
    /// of the segment, which would grow the conversation by a request it never held.
    #[test]
    fn a_failed_or_lost_attempt_without_its_record_reads_as_a_failed_attempt() {
        for decision in [ATTEMPT_FAILED, ATTEMPT_LOST] {
            assert_eq!(RowKind::of_decision(decision), RowKind::FailedAttempt);
        }
        assert_eq!(RowKind::of_decision("append:Warm"), RowKind::Request);
    }
}
