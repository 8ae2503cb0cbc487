//! The assumptions a counterfactual replay rests on, each with its documented default.

use crate::cache::Ttl;
use crate::decide::{Bounds, Capabilities};
use crate::money::Tokens;
use crate::price::ModelPrice;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The assumptions a counterfactual replay needs. Defaults are documented on each field and are
/// printed with every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assumptions {
    /// Head (tools + system) tokens. Default: estimated per trace as the smallest cached prefix any
    /// request of the trace had, an upper bound of the real head.
    pub head_tokens: Option<Tokens>,
    /// Tokens of memory a refreshed segment starts with beyond the head, and the output tokens of
    /// the flush that writes them. Default 4,000 (a structured memory note or compaction summary).
    pub rehydrate_tokens: Tokens,
    /// Tokens of the flush instruction. Default 300.
    pub flush_prompt_tokens: Tokens,
    /// Output tokens of the flush. Default: the rehydration size (the flush writes the memory the
    /// next segment starts from). With memory written as it happens, 0 together with
    /// `flush_prompt_tokens`: a refresh then sends no flush request at all.
    pub flush_output_tokens: Option<Tokens>,
    /// Uncached tokens a keep-warm ping adds after the cached prefix. Default 8.
    pub ping_tokens: Tokens,
    /// Output tokens a keep-warm ping pays. Default 0: muninn's Anthropic backend pings with
    /// `max_tokens: 0` (1 for a backend that cannot).
    #[serde(default)]
    pub ping_output_tokens: Tokens,
    /// Requests a segment must hold before a voluntary refresh. Default 4.
    pub min_segment_requests: u32,
    /// The context ceiling in tokens. Default: the model's context window from the price table.
    pub ceiling_tokens: Option<Tokens>,
    /// How long before the cache expires the host decides (and pings). Default 30 s.
    pub decide_before_expiry_ms: i64,
    /// The TTL tier the session writes at. Default: the tier the trace recorded, judged over the
    /// whole trace (1h if any 1h write, [`crate::trace::Trace::whole_trace_ttl`]) — an assumption about the
    /// session's configuration, taken with hindsight; it prices the counterfactual and predicts
    /// nothing of the recorded usage.
    pub ttl: Option<Ttl>,
    /// The TTL of the head's own breakpoint. Default: the session's TTL. A head TTL shorter than
    /// the session's is raised to it (a 1h breakpoint may not follow a 5m one).
    pub head_ttl: Option<Ttl>,
    /// Whether the session may clear old tool results (the `mask` action) where the trace says
    /// how big they are and the provider can. Default on; off replays the policy without it.
    #[serde(default = "yes")]
    pub mask: bool,
    /// Tool uses whose results a clear keeps (the latest). Default 3, the provider's default.
    #[serde(default = "three")]
    pub mask_keep_tool_uses: u32,
}

fn yes() -> bool {
    true
}

fn three() -> u32 {
    3
}

impl Default for Assumptions {
    fn default() -> Self {
        Assumptions {
            head_tokens: None,
            rehydrate_tokens: 4_000,
            flush_prompt_tokens: 300,
            flush_output_tokens: None,
            ping_tokens: 8,
            ping_output_tokens: 0,
            min_segment_requests: 4,
            ceiling_tokens: None,
            decide_before_expiry_ms: 30_000,
            ttl: None,
            head_ttl: None,
            mask: true,
            mask_keep_tool_uses: 3,
        }
    }
}

impl Assumptions {
    /// The TTL of the head's breakpoint in a session written at `ttl`: never shorter than `ttl`.
    pub fn head_ttl_for(&self, ttl: Ttl) -> Ttl {
        self.head_ttl.map_or(ttl, |h| h.max(ttl))
    }

    /// What the decider may do on the model priced by `price`: its provider's capabilities, and
    /// no clears where these assumptions turn them off (`--no-mask`). The engine and the optimum
    /// both take them from here.
    pub fn capabilities(&self, price: &ModelPrice) -> Capabilities {
        let can = price.provider.capabilities();
        Capabilities {
            mask: self.mask && can.mask,
            ..can
        }
    }

    /// The decider's bounds for a trace of `head` tokens on the model priced by `price`, the
    /// defaults filled in. The engine and the optimum both take them from here, so that the plan
    /// is computed for the session the engine then runs.
    pub fn bounds(&self, head: Tokens, price: &ModelPrice) -> Bounds {
        Bounds {
            head_tokens: head,
            rehydrate_tokens: self.rehydrate_tokens,
            flush_prompt_tokens: self.flush_prompt_tokens,
            flush_output_tokens: self.flush_output_tokens.unwrap_or(self.rehydrate_tokens),
            ping_tokens: self.ping_tokens,
            ping_output_tokens: self.ping_output_tokens,
            min_segment_requests: self.min_segment_requests,
            ceiling_tokens: self.ceiling_tokens.unwrap_or(price.context_window),
            context_window: price.context_window,
            mask_keep_tool_uses: self.mask_keep_tool_uses,
        }
    }
}

impl fmt::Display for Assumptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = self.head_tokens.map_or(
            "estimated per trace (smallest cached prefix)".to_string(),
            |h| h.to_string(),
        );
        let ceiling = self
            .ceiling_tokens
            .map_or("the model's context window".to_string(), |c| c.to_string());
        let ttl = self.ttl.map_or("as recorded per trace", |t| t.label());
        let head_ttl = self.head_ttl.map_or("as the session", |t| t.label());
        let mask = if self.mask {
            format!(
                "clears keep the latest {} tool uses",
                self.mask_keep_tool_uses
            )
        } else {
            "no clears".to_string()
        };
        write!(
            f,
            "head tokens: {head}; rehydration (memory/summary) tokens: {}; flush instruction tokens: {}; \
             flush output tokens: {}; ping tail tokens: {}; ping output tokens: {}; minimum segment: {} requests; ceiling: {ceiling}; \
             decide {} s before expiry; TTL: {ttl}; head TTL: {head_ttl}; mask: {mask}",
            self.rehydrate_tokens,
            self.flush_prompt_tokens,
            self.flush_output_tokens.unwrap_or(self.rehydrate_tokens),
            self.ping_tokens,
            self.ping_output_tokens,
            self.min_segment_requests,
            self.decide_before_expiry_ms / 1000,
        )
    }
}
