//! Pricing the `mask` action: the provider's tool-result clearing (Anthropic
//! `clear_tool_uses_20250919`) seen by the cache.
//!
//! A clear replaces old tool results with a placeholder, which rewrites the prompt from the
//! first cleared block on: the request that clears reads the cache only up to the longest live
//! cached prefix that ends at or before that block, and writes everything after it — the whole
//! rest of the (now shorter) prompt is a new cache write. Every later request of the segment then
//! reads `cleared` fewer tokens. So a mask costs a rewrite premium now and saves `r · cleared`
//! on each warm request after it:
//!
//! ```text
//! append now:  r·P + w·Δ                      (P: the cached prefix, Δ: the new tail)
//! mask now:    r·R₀ + w·(P + Δ − C − R₀)      (R₀ ≤ F: the cached prefix before the clear)
//! extra now:   w·(P − C − R₀) − r·(P − R₀)
//! saved later: r·C per warm request
//! ```
//!
//! [`masked_usage`] is the usage of the clearing request (the same the simulator bills, which a
//! test checks against it); [`mask_break_even`] is the number of later warm requests after
//! which the clear has paid for itself — what a decider weighs against a refresh.

use crate::cache::Ttl;
use crate::money::{MicroUsd, Tokens};
use crate::price::ModelPrice;
use crate::trace::Usage;

/// A clearing request as the cache sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskedRequest {
    /// The request's prompt tokens had nothing been cleared (its breakpoint on the last block).
    pub uncleared_tokens: Tokens,
    /// Tokens before the first cleared block: the part the clear leaves as it was (F).
    pub kept_tokens: Tokens,
    /// Tokens the clear removed (C, the provider's `cleared_input_tokens`).
    pub cleared_tokens: Tokens,
    /// The longest prefix still cached that ends at or before the first cleared block (R₀; 0
    /// when nothing is cached there).
    pub cached_before_clear: Tokens,
    /// The TTL the request's last breakpoint writes at.
    pub ttl: Ttl,
    /// Output tokens of the reply.
    pub output: Tokens,
}

/// The usage a clearing request is billed: it reads the prefix cached before the clear and
/// writes the rest of the cleared prompt.
pub fn masked_usage(request: &MaskedRequest) -> Usage {
    let read = request.cached_before_clear.min(request.kept_tokens);
    let total = request
        .uncleared_tokens
        .saturating_sub(request.cleared_tokens);
    let written = total.saturating_sub(read);
    let (cache_write_5m, cache_write_1h) = match request.ttl {
        Ttl::FiveMinutes => (written, 0),
        Ttl::OneHour => (0, written),
    };
    Usage {
        input: 0,
        cache_write_5m,
        cache_write_1h,
        cache_read: read,
        output: request.output,
    }
}

/// The usage the same request is billed without the clear, warm: it reads `cached_prefix`
/// (P, the last request's cached prefix) and writes its new tail.
pub fn unmasked_usage(request: &MaskedRequest, cached_prefix: Tokens) -> Usage {
    let read = cached_prefix.min(request.uncleared_tokens);
    let written = request.uncleared_tokens - read;
    let (cache_write_5m, cache_write_1h) = match request.ttl {
        Ttl::FiveMinutes => (written, 0),
        Ttl::OneHour => (0, written),
    };
    Usage {
        input: 0,
        cache_write_5m,
        cache_write_1h,
        cache_read: read,
        output: request.output,
    }
}

/// How many later warm requests of the segment a clear needs before it has paid for itself
/// (the extra it costs now over appending warm on `cached_prefix`, divided by the `r · C` each
/// later request saves, rounded up); `Some(0)` when it is cheaper at once, `None` when it never
/// pays (it clears nothing).
pub fn mask_break_even(
    request: &MaskedRequest,
    cached_prefix: Tokens,
    price: &ModelPrice,
) -> Option<u64> {
    let mask = price.cost(&masked_usage(request));
    let append = price.cost(&unmasked_usage(request, cached_prefix));
    let saved_each = MicroUsd::of(request.cleared_tokens, price.read);
    if mask <= append {
        return Some(0);
    }
    if saved_each == MicroUsd::ZERO {
        return None;
    }
    let extra = u64::try_from(mask.0 - append.0).unwrap_or(u64::MAX);
    let each = u64::try_from(saved_each.0).unwrap_or(u64::MAX);
    Some(extra.div_ceil(each))
}
