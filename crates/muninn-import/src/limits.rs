//! The limits on what one request may claim. Numbers come from files muninn does not control, as
//! any `u64` or `i64`; past these no real request goes, and the cache model and the replay add,
//! subtract and multiply them (a prompt's parts, the gap between two requests, a TTL's expiry),
//! so a request beyond them is refused with its line instead of overflowing downstream — a panic
//! in a debug build, a small, plausible figure wrapped in a release one (found by review,
//! `cargo test -p muninn-import --test all bad_input::`).

use muninn_core::trace::{TraceRequest, Usage};

/// The most tokens one usage field may hold: 2^32, thousands of times the largest context
/// window offered. Five fields at the limit still sum, and price, far inside a `u64`.
pub(crate) const MAX_TOKENS: u64 = 1 << 32;

/// The earliest time a request may have: 0000-01-01T00:00:00Z, the first an RFC 3339 timestamp
/// can name (what the transcript formats carry).
pub(crate) const MIN_AT_MS: i64 = -62_167_219_200_000;

/// The latest: 9999-12-31T23:59:59.999Z, the last an RFC 3339 timestamp can name.
pub(crate) const MAX_AT_MS: i64 = 253_402_300_799_999;

/// Why `usage` is past the limits, if it is: a field above 2^32 tokens. Exported so that readers
/// of transcripts outside this crate (`muninn replay --vs-ccusage`) refuse what it refuses.
pub fn usage_problem(usage: &Usage) -> Option<String> {
    let fields = [
        ("uncached input", usage.input),
        ("cache write (5m)", usage.cache_write_5m),
        ("cache write (1h)", usage.cache_write_1h),
        ("cache read", usage.cache_read),
        ("output", usage.output),
    ];
    let (name, tokens) = fields.into_iter().find(|&(_, n)| n > MAX_TOKENS)?;
    Some(format!(
        "{name} of {tokens} tokens is past the limit of {MAX_TOKENS}"
    ))
}

/// Why `at_ms` is outside the years 0000–9999, if it is.
pub(crate) fn time_problem(what: &str, at_ms: i64) -> Option<String> {
    (!(MIN_AT_MS..=MAX_AT_MS).contains(&at_ms))
        .then(|| format!("{what} {at_ms} ms is past the limit (the years 0000 to 9999)"))
}

/// Why `request` is past the limits, if it is: its usage, the tokens of its tool results, or
/// one of its times.
pub(crate) fn request_problem(request: &TraceRequest) -> Option<String> {
    usage_problem(&request.usage)
        .or_else(|| {
            let tokens = request.tool_results.tokens;
            (tokens > MAX_TOKENS).then(|| {
                format!("tool results of {tokens} tokens are past the limit of {MAX_TOKENS}")
            })
        })
        .or_else(|| time_problem("a time of", request.at_ms))
        .or_else(|| {
            let at_ms = request.tool_results_at_ms?;
            time_problem("a tool results' time of", at_ms)
        })
}
