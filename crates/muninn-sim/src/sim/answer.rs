//! What a messages request is answered with: a refusal in the API's shape, or an accepted
//! request's reply and usage, and how that usage is reported on the wire.

use super::faults::FaultKind;
use crate::reply::Reply;
use muninn_anthropic::wire::{
    CacheCreation, ContextManagementResponse, Diagnostics, ErrorResponse, MessagesResponse, Role,
    Usage as WireUsage, UsageIteration,
};
use muninn_core::ledger::{MissCause, ProviderMiss};
use muninn_core::trace::Usage;

/// A refusal in the API's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// The error body.
    pub body: ErrorResponse,
    /// `retry-after` seconds.
    pub retry_after_s: Option<f64>,
}

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(status: u16, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorResponse::new(kind, message),
            retry_after_s: None,
        }
    }
}

/// An accepted messages request: the reply and its usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The message id.
    pub id: String,
    /// The model.
    pub model: String,
    /// The reply.
    pub reply: Reply,
    /// The usage (cache model + output tokens).
    pub usage: Usage,
    /// The miss cause.
    pub miss: Option<MissCause>,
    /// The cache diagnostics answered (`None`: not asked, or no divergence).
    pub diagnostics: Option<Diagnostics>,
    /// The diagnosis as recorded, for a request that asked with a previous message id.
    pub provider_miss: Option<ProviderMiss>,
    /// Whether this is a compaction: its usage is then reported in `usage.iterations[]` alone.
    pub compaction: bool,
    /// A threshold compaction that went on to answer: the `compaction` pass's usage, billed on
    /// top of `usage` (then the `message` pass's).
    pub compacted: Option<Usage>,
    /// The context edits applied, for `context_management.applied_edits[]` (`None`: none).
    pub context_management: Option<ContextManagementResponse>,
}

impl Answer {
    /// Applies a fault that changes what is reported rather than whether it is answered
    /// ([`FaultKind::InflateUsage`]); other faults leave the answer as it is.
    pub fn apply_report_fault(&mut self, fault: Option<&FaultKind>) {
        if let Some(FaultKind::InflateUsage { cache_read_tokens }) = fault {
            self.usage.cache_read = self.usage.cache_read.saturating_add(*cache_read_tokens);
        }
    }

    /// What the request is billed: `usage`, and a threshold compaction's own pass.
    pub fn billed(&self) -> Usage {
        let mut billed = self.usage;
        if let Some(compacted) = &self.compacted {
            billed.add(compacted);
        }
        billed
    }

    /// The usage as the wire reports it. A compaction's is reported only as one `compaction`
    /// entry of `iterations[]`, the top-level counts 0 — as the API does, which is why a ledger
    /// must read the iterations. A threshold compaction that went on to answer reports a
    /// `compaction` and a `message` entry, the top-level counts the `message` entry's alone.
    pub fn wire_usage(&self) -> WireUsage {
        if let Some(compacted) = &self.compacted {
            let mut wire = WireUsage::from_core(&self.usage);
            wire.iterations = Some(vec![
                iteration("compaction", compacted),
                iteration("message", &self.usage),
            ]);
            return wire;
        }
        if !self.compaction {
            return WireUsage::from_core(&self.usage);
        }
        let mut wire = WireUsage::from_core(&Usage::default());
        wire.iterations = Some(vec![iteration("compaction", &self.usage)]);
        wire
    }

    /// The whole reply as one (non-streamed) message.
    pub fn into_message(self) -> MessagesResponse {
        let usage = self.wire_usage();
        MessagesResponse {
            id: self.id,
            kind: "message".to_string(),
            role: Role::Assistant,
            model: self.model,
            content: self.reply.content,
            stop_reason: Some(self.reply.stop_reason.to_string()),
            stop_sequence: None,
            usage,
            diagnostics: self.diagnostics,
            context_management: self.context_management,
            unapplied_deltas: Vec::new(),
        }
    }
}

/// One `usage.iterations[]` entry, its writes split by TTL as the top level's are: the pass
/// writes the prefix the request's breakpoints mark, at their TTLs.
fn iteration(kind: &str, usage: &Usage) -> UsageIteration {
    UsageIteration {
        kind: kind.to_string(),
        input_tokens: usage.input,
        output_tokens: usage.output,
        cache_read_input_tokens: usage.cache_read,
        cache_creation_input_tokens: usage.written(),
        cache_creation: Some(CacheCreation {
            ephemeral_5m_input_tokens: usage.cache_write_5m,
            ephemeral_1h_input_tokens: usage.cache_write_1h,
        }),
        extra: serde_json::Map::new(),
    }
}
