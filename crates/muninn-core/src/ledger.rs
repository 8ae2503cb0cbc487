//! The ledger row: one per request muninn makes, the measured economics of the system.
//!
//! `muninn ledger --export` writes these as JSON Lines (one [`LedgerRow`] per line); the importer
//! reads them back as traces, one per Mind, role and model, so muninn's own history can be
//! replayed under every policy like any Claude Code transcript.

use crate::money::{MicroUsd, Tokens};
use crate::trace::Usage;
use serde::{Deserialize, Serialize};

/// Why a request did not read the prefix it could have read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissCause {
    /// Nothing was cached for this model yet.
    ColdStart,
    /// The matching entry existed but its TTL had run out.
    TtlExpiry,
    /// Entries existed, but none matched this prompt's prefix (the content changed).
    PrefixChange,
    /// The model predicted a hit the provider did not report (eviction, routing, or unknown).
    EvictionOrUnknown,
}

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
    /// `warm` or `cold`, as the cache model saw it before the request.
    pub cache_state: String,
    /// Why the request missed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss_cause: Option<MissCause>,
    /// The decider's action for this request.
    pub decision: String,
    /// Whether this request began a new turn (as opposed to a tool-loop step).
    #[serde(default = "default_true")]
    pub boundary: bool,
    /// Flagged events of the request: every retry the backend made (status, delay, kind), a
    /// TTL the provider did not honour, a read shortfall against the prediction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<serde_json::Value>,
}

fn default_true() -> bool {
    true
}
