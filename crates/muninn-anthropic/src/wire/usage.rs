//! Token usage as the API reports it, and the numbers muninn's ledger keeps from it: the
//! top-level counts, every `usage.iterations[]` pass billed on top of them, and each write
//! split by TTL.

use super::UsageIteration;
use muninn_core::cache::Ttl;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The split of cache writes by TTL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCreation {
    /// Tokens written with the 5-minute TTL.
    #[serde(default)]
    pub ephemeral_5m_input_tokens: u64,
    /// Tokens written with the 1-hour TTL.
    #[serde(default)]
    pub ephemeral_1h_input_tokens: u64,
}

/// Token usage as the API reports it. Every field is optional because a streaming
/// `message_delta` carries only some of them; [`Usage::merge`] lays a later report over an
/// earlier one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens after the last breakpoint (neither read nor written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Prompt tokens written to the cache (the sum of the `cache_creation` split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    /// The write split by TTL: how the server actually honoured the requested TTLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation: Option<CacheCreation>,
    /// Output tokens (in `message_start`, a small placeholder; final in `message_delta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// `standard`, `priority` or `batch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// Per-pass usage: where a compaction's own tokens are reported (and only there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<Vec<UsageIteration>>,
    /// Fields this crate does not name (`server_tool_use`, `inference_geo`, …), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Usage {
    /// Lays `later` over `self`: every field `later` carries wins, as the real API's
    /// `message_delta` overrides `message_start` (and as the Claude Code CLI merges them).
    pub fn merge(&mut self, later: &Usage) {
        if later.input_tokens.is_some() {
            self.input_tokens = later.input_tokens;
        }
        if later.cache_creation_input_tokens.is_some() {
            self.cache_creation_input_tokens = later.cache_creation_input_tokens;
        }
        if later.cache_read_input_tokens.is_some() {
            self.cache_read_input_tokens = later.cache_read_input_tokens;
        }
        if later.cache_creation.is_some() {
            self.cache_creation = later.cache_creation;
        }
        if later.output_tokens.is_some() {
            self.output_tokens = later.output_tokens;
        }
        if later.service_tier.is_some() {
            self.service_tier.clone_from(&later.service_tier);
        }
        if later.iterations.is_some() {
            self.iterations.clone_from(&later.iterations);
        }
        for (k, v) in &later.extra {
            self.extra.insert(k.clone(), v.clone());
        }
    }

    /// The parsed numbers muninn's ledger keeps: what the request is billed, which is the
    /// top-level counts plus every `iterations[]` entry billed separately (a compaction's,
    /// which the top-level counts exclude). Writes, top-level and iteration alike, are split
    /// by TTL as `write_split` reads them: a compaction pass writes the prefix the request's
    /// breakpoints mark, at their TTL, and its entry's `cache_creation` says so. An entry
    /// without that split is counted as 5-minute writes here, the request's breakpoints being
    /// unknown; [`Usage::to_core_under`] knows them.
    pub fn to_core(&self) -> muninn_core::trace::Usage {
        self.to_core_under(&[])
    }

    /// [`Usage::to_core`] for a request whose cache breakpoints are `breakpoints` — each the
    /// prompt length it closes and its TTL, in prompt order, only those the provider caches
    /// at (at least the model's minimum cacheable length). An `iterations[]` entry that gives
    /// no `cache_creation` split of its own has its writes split by them
    /// (`writes_under_breakpoints`): a pass over the request's prompt reads the cached head and
    /// writes from there to the last breakpoint, each span at the TTL of the breakpoint that
    /// closes it, so its writes are the last ones before that breakpoint. Neither the
    /// top-level split applied pro rata (an on-demand compaction's top level is 0, and a
    /// threshold compaction's is another pass, over the compacted prompt) nor the API's
    /// default 5 minutes (a compaction under 1-hour breakpoints writes at 1 hour) says that.
    pub fn to_core_under(&self, breakpoints: &[(u64, Ttl)]) -> muninn_core::trace::Usage {
        let mut usage = self.top_level();
        for it in self.iterations.iter().flatten() {
            if it.billed_separately() {
                let (w5, w1) = match it.cache_creation {
                    Some(split) => write_split(it.cache_creation_input_tokens, Some(split)),
                    None => writes_under_breakpoints(it.cache_creation_input_tokens, breakpoints),
                };
                usage.input = usage.input.saturating_add(it.input_tokens);
                usage.output = usage.output.saturating_add(it.output_tokens);
                usage.cache_read = usage.cache_read.saturating_add(it.cache_read_input_tokens);
                usage.cache_write_5m = usage.cache_write_5m.saturating_add(w5);
                usage.cache_write_1h = usage.cache_write_1h.saturating_add(w1);
            }
        }
        usage
    }

    /// The top-level counts alone, without `iterations[]`: what a ledger that ignored the
    /// iterations would record (it under-counts a compaction).
    pub fn top_level(&self) -> muninn_core::trace::Usage {
        let (w5, w1) = write_split(
            self.cache_creation_input_tokens.unwrap_or(0),
            self.cache_creation,
        );
        muninn_core::trace::Usage {
            input: self.input_tokens.unwrap_or(0),
            cache_write_5m: w5,
            cache_write_1h: w1,
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
        }
    }

    /// The wire form of core usage, with the `cache_creation` split and `service_tier`.
    pub fn from_core(usage: &muninn_core::trace::Usage) -> Usage {
        Usage {
            input_tokens: Some(usage.input),
            cache_creation_input_tokens: Some(usage.written()),
            cache_read_input_tokens: Some(usage.cache_read),
            cache_creation: Some(CacheCreation {
                ephemeral_5m_input_tokens: usage.cache_write_5m,
                ephemeral_1h_input_tokens: usage.cache_write_1h,
            }),
            output_tokens: Some(usage.output),
            service_tier: Some("standard".to_string()),
            iterations: None,
            extra: Map::new(),
        }
    }
}

/// A write of `total` tokens split into its 5-minute and 1-hour parts. When the server gives
/// no `cache_creation` split, every written token is a 5-minute write (the API's default TTL).
/// When the split disagrees with the total, the split wins for each tier and any remainder of
/// the total is a 5-minute write.
fn write_split(total: u64, split: Option<CacheCreation>) -> (u64, u64) {
    match split {
        Some(split) => {
            // Saturating: these are the server's numbers, and a broken or hostile stream may
            // send any u64 (found by fuzzing: two near-maximal tiers overflowed).
            let named = split
                .ephemeral_5m_input_tokens
                .saturating_add(split.ephemeral_1h_input_tokens);
            (
                split
                    .ephemeral_5m_input_tokens
                    .saturating_add(total.saturating_sub(named)),
                split.ephemeral_1h_input_tokens,
            )
        }
        None => (total, 0),
    }
}

/// `written` tokens of a pass over a prompt with `breakpoints` (see [`Usage::to_core_under`])
/// split into their 5-minute and 1-hour parts: the last `written` tokens before the last
/// breakpoint, each span between two breakpoints at the TTL of the one that closes it — the
/// cache model's rule (`muninn_core::cache`). What lies beyond the spans (more written than the
/// prefix holds, or no breakpoint known) is a 5-minute write, the API's default.
fn writes_under_breakpoints(written: u64, breakpoints: &[(u64, Ttl)]) -> (u64, u64) {
    let (mut w5, mut w1) = (0u64, 0u64);
    let mut left = written;
    for (i, &(end, ttl)) in breakpoints.iter().enumerate().rev() {
        if left == 0 {
            break;
        }
        let start = if i == 0 { 0 } else { breakpoints[i - 1].0 };
        let span = end.saturating_sub(start).min(left);
        match ttl {
            Ttl::FiveMinutes => w5 = w5.saturating_add(span),
            Ttl::OneHour => w1 = w1.saturating_add(span),
        }
        left -= span;
    }
    (w5.saturating_add(left), w1)
}
