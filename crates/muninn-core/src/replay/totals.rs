//! What a replay reports: each priced request ([`Step`]) and the totals of a run ([`RunTotals`]).

use crate::cache::Ttl;
use crate::ledger::MissCause;
use crate::money::{MicroUsd, Tokens};
use crate::trace::Usage;
use serde::{Deserialize, Serialize};

/// What kind of request a step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// One of the trace's requests.
    Request,
    /// A keep-warm ping.
    Ping,
    /// A memory flush.
    Flush,
}

/// One request the replay made, priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Index of the trace request this step belongs to (a ping or flush belongs to the gap before it).
    pub index: usize,
    /// When it was sent.
    pub at_ms: i64,
    /// What it was.
    pub kind: StepKind,
    /// Its usage.
    pub usage: Usage,
    /// Its cost.
    pub cost: MicroUsd,
    /// For requests: the idle gap since the previous request of the trace.
    pub gap_ms: i64,
    /// For requests: why it missed, if it did.
    pub miss: Option<MissCause>,
    /// For requests: whether it began a new segment.
    pub refreshed: bool,
    /// For a request sent with a clear (the `mask` action): the clear as [`crate::mask`] prices
    /// it.
    pub mask: Option<crate::mask::MaskedRequest>,
}

/// Totals of one trace (or many) under one plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTotals {
    /// Everything paid.
    pub cost: MicroUsd,
    /// All usage, requests + pings + flushes.
    pub usage: Usage,
    /// The trace's requests.
    pub requests: u64,
    /// Keep-warm pings sent.
    pub pings: u64,
    /// Memory flushes.
    pub flushes: u64,
    /// New segments started.
    pub refreshes: u64,
    /// Requests sent with a tool-result clear (the `mask` action).
    #[serde(default)]
    pub masks: u64,
    /// Tool-result tokens those clears removed.
    #[serde(default)]
    pub cleared_tokens: Tokens,
    /// Tokens written by requests that followed an idle gap longer than the TTL.
    pub writes_after_long_gap: Tokens,
    /// Requests that missed, per cause (indexed by `cause as usize`, see [`MissCause::ALL`]).
    pub misses: [u64; MissCause::COUNT],
}

impl RunTotals {
    /// Adds another run's totals.
    pub fn add(&mut self, other: &RunTotals) {
        self.cost += other.cost;
        self.usage.add(&other.usage);
        self.requests += other.requests;
        self.pings += other.pings;
        self.flushes += other.flushes;
        self.refreshes += other.refreshes;
        self.masks += other.masks;
        self.cleared_tokens += other.cleared_tokens;
        self.writes_after_long_gap += other.writes_after_long_gap;
        for (a, b) in self.misses.iter_mut().zip(other.misses) {
            *a += b;
        }
    }

    /// Cache reads over all prompt tokens.
    pub fn hit_ratio(&self) -> f64 {
        let prompt = self.usage.prompt();
        if prompt == 0 {
            0.0
        } else {
            self.usage.cache_read as f64 / prompt as f64
        }
    }

    /// The share of cache writes that followed an idle gap longer than the TTL.
    pub fn long_gap_write_share(&self) -> f64 {
        let w = self.usage.written();
        if w == 0 {
            0.0
        } else {
            self.writes_after_long_gap as f64 / w as f64
        }
    }

    /// Adds one step, the way [`super::replay_trace`] does (a request after a gap longer than `ttl`
    /// counts its writes as long-gap writes); for callers that keep only some steps (a time
    /// window).
    pub fn record(&mut self, step: &Step, ttl: Ttl) {
        self.cost += step.cost;
        self.usage.add(&step.usage);
        match step.kind {
            StepKind::Request => {
                self.requests += 1;
                if step.gap_ms > ttl.millis() {
                    self.writes_after_long_gap += step.usage.written();
                }
                if let Some(cause) = step.miss {
                    self.misses[cause as usize] += 1;
                }
                if step.refreshed {
                    self.refreshes += 1;
                }
                if let Some(mask) = step.mask {
                    self.masks += 1;
                    self.cleared_tokens += mask.cleared_tokens;
                }
            }
            StepKind::Ping => self.pings += 1,
            StepKind::Flush => self.flushes += 1,
        }
    }
}
