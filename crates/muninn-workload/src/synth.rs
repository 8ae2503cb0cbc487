//! Synthetic traces: pure, seeded generators of Claude-Code-like threads, for benchmarks and for
//! tests that need more requests than the recorded transcripts hold.
//!
//! [`session`] draws one main thread from a small deterministic PRNG ([`SplitMix64`]): the same
//! seed, length and [`SynthParams`] always give the same [`Trace`], on every platform, with no
//! dependency on `rand` (whose streams change between major versions).
//!
//! # The shape of a synthetic thread
//!
//! - **Turns.** The thread is a sequence of user turns; each turn is a tool loop of
//!   [`SynthParams::turn_requests`] requests. The first request of a turn is a boundary.
//! - **Gaps.** Inside a tool loop requests come [`SynthParams::tool_gap_ms`] apart. The gap before
//!   a boundary is an idle gap drawn from [`SynthParams::idle_mix`]: mostly under a minute, some of
//!   1–5 min, a few of 5–60 min and a handful over an hour — over all gaps this is roughly what the
//!   recorded Claude Code sessions show (≈ 94 % < 1 min there).
//! - **Growth.** The prompt starts at [`SynthParams::head_tokens`] plus a first message and grows
//!   by [`SynthParams::growth_tokens`] per request (tool outputs, replies).
//! - **Compaction.** When the prompt passes [`SynthParams::compact_at_tokens`], the next request is
//!   marked `compacted` and its prompt falls back to the head plus a summary of
//!   [`SynthParams::summary_tokens`] — Claude Code's auto-compaction.
//! - **Usage** is what a 5-minute-TTL client with a breakpoint on the last message records: a
//!   small uncached tail ([`SynthParams::uncached_tokens`]); after a gap under 5 min the previous
//!   request's cached prefix is read and the rest written; after a longer gap (or on the first
//!   request) everything cached is written. After a compaction only the head is read (if warm): the
//!   conversation prefix changed.

use muninn_core::money::Tokens;
use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use std::ops::RangeInclusive;

/// SplitMix64 (Steele, Lea & Flood 2014): one 64-bit state, one add and a mix per draw. Not
/// cryptographic; chosen because it is tiny, fast, passes BigCrush and is trivially reproducible.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed` (every seed, 0 included, is fine).
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw from `range` (inclusive). Uses Lemire's multiply-shift without the rejection
    /// step: the bias is below 2⁻³² for the spans used here, irrelevant for synthetic data.
    pub fn range(&mut self, range: &RangeInclusive<u64>) -> u64 {
        let (lo, hi) = (*range.start(), *range.end());
        if hi <= lo {
            return lo;
        }
        let span = hi - lo + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64
    }
}

/// One band of the idle-gap mix: a weight and a range of gaps in milliseconds, drawn uniformly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleBand {
    /// Relative weight of the band among all bands.
    pub weight: u32,
    /// The gaps of the band, in milliseconds (inclusive).
    pub gap_ms: RangeInclusive<u64>,
}

/// The knobs of [`session`]. Token ranges and time ranges are inclusive and drawn uniformly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthParams {
    /// Model every request goes to. Default `claude-opus-4-6` (the recorded main threads' model).
    pub model: String,
    /// Time of the first request, Unix ms. Default 1,800,000,000,000 (January 2027).
    pub start_ms: i64,
    /// Head (tools + system prompt) tokens. Default 20,000.
    pub head_tokens: Tokens,
    /// Tokens the first request adds beyond the head. Default 500–3,000.
    pub first_message_tokens: RangeInclusive<Tokens>,
    /// Tokens each later request adds to the prompt. Default 200–5,000.
    pub growth_tokens: RangeInclusive<Tokens>,
    /// Requests per user turn (one tool loop). Default 5–20.
    pub turn_requests: RangeInclusive<u64>,
    /// Gap between requests inside a tool loop, ms. Default 1–30 s.
    pub tool_gap_ms: RangeInclusive<u64>,
    /// The idle gap before each turn boundary, as a weighted mix. Default: 55 % 5–60 s, 20 % 1–5
    /// min, 22 % 5–60 min, 3 % 1–8 h. With ~12 requests per turn that makes ≈ 96 % of all gaps
    /// under a minute, ≈ 2 % of 5–60 min and ≈ 0.2 % over an hour.
    pub idle_mix: Vec<IdleBand>,
    /// The prompt size past which the next request is compacted. Default 180,000.
    pub compact_at_tokens: Tokens,
    /// Summary tokens a compacted prompt carries beyond the head. Default 3,000–8,000.
    pub summary_tokens: RangeInclusive<Tokens>,
    /// Uncached input tokens after the last breakpoint. Default 1–10.
    pub uncached_tokens: RangeInclusive<Tokens>,
    /// Output tokens per request. Default 20–2,000.
    pub output_tokens: RangeInclusive<Tokens>,
}

impl Default for SynthParams {
    fn default() -> Self {
        const S: u64 = 1_000;
        const M: u64 = 60 * S;
        const H: u64 = 60 * M;
        SynthParams {
            model: "claude-opus-4-6".to_string(),
            start_ms: 1_800_000_000_000,
            head_tokens: 20_000,
            first_message_tokens: 500..=3_000,
            growth_tokens: 200..=5_000,
            turn_requests: 5..=20,
            tool_gap_ms: S..=30 * S,
            idle_mix: vec![
                IdleBand {
                    weight: 55,
                    gap_ms: 5 * S..=60 * S,
                },
                IdleBand {
                    weight: 20,
                    gap_ms: M..=5 * M,
                },
                IdleBand {
                    weight: 22,
                    gap_ms: 5 * M..=H,
                },
                IdleBand {
                    weight: 3,
                    gap_ms: H..=8 * H,
                },
            ],
            compact_at_tokens: 180_000,
            summary_tokens: 3_000..=8_000,
            uncached_tokens: 1..=10,
            output_tokens: 20..=2_000,
        }
    }
}

/// The 5-minute TTL the synthetic client writes at, in ms.
const TTL_5M_MS: i64 = 5 * 60 * 1000;

/// One synthetic main thread of `requests` requests, determined entirely by `seed` and `params`.
pub fn session(seed: u64, requests: usize, params: &SynthParams) -> Trace {
    let mut rng = SplitMix64::new(seed);
    let total_weight: u64 = params.idle_mix.iter().map(|b| u64::from(b.weight)).sum();
    let head = params.head_tokens;
    let mut out = Vec::with_capacity(requests);
    let mut at_ms = params.start_ms;
    let mut prompt = head;
    // The previous request's cached prefix (prompt minus its uncached tail).
    let mut previous_cached: Tokens = 0;
    let mut left_in_turn = 0u64;
    let mut compact_next = false;
    for i in 0..requests {
        let boundary = left_in_turn == 0;
        if boundary {
            left_in_turn = rng.range(&params.turn_requests).max(1);
        }
        left_in_turn -= 1;
        let gap_ms = if i == 0 {
            0
        } else if boundary {
            idle_gap(&mut rng, &params.idle_mix, total_weight)
        } else {
            rng.range(&params.tool_gap_ms)
        };
        at_ms += i64::try_from(gap_ms).unwrap_or(i64::MAX);
        let compacted = compact_next;
        compact_next = false;
        prompt = if i == 0 {
            head + rng.range(&params.first_message_tokens)
        } else if compacted {
            head + rng.range(&params.summary_tokens)
        } else {
            prompt + rng.range(&params.growth_tokens)
        };
        let input = rng.range(&params.uncached_tokens).min(prompt);
        let cached = prompt - input;
        let warm = i > 0 && (gap_ms as i64) < TTL_5M_MS;
        // What the cache still holds that this prompt starts with: the previous prefix when the
        // conversation carried on, only the head after a compaction rewrote it.
        let read = match (warm, compacted) {
            (false, _) => 0,
            (true, false) => previous_cached.min(cached),
            (true, true) => head.min(cached),
        };
        let usage = Usage {
            input,
            cache_write_5m: cached - read,
            cache_write_1h: 0,
            cache_read: read,
            output: rng.range(&params.output_tokens),
        };
        out.push(synth_request(at_ms, usage, boundary, compacted));
        previous_cached = cached;
        if prompt > params.compact_at_tokens {
            compact_next = true;
        }
    }
    main_thread(seed, params, out)
}

/// A synthetic request: an assistant reply and the next user message (two blocks), no tool,
/// client or tool-list change.
fn synth_request(at_ms: i64, usage: Usage, boundary: bool, compacted: bool) -> TraceRequest {
    TraceRequest {
        at_ms,
        usage,
        boundary,
        compacted,
        // The user message is a tool result or human text.
        blocks_added: 2,
        ..Default::default()
    }
}

/// The main thread of the synthetic session `seed`, holding `requests`.
fn main_thread(seed: u64, params: &SynthParams, requests: Vec<TraceRequest>) -> Trace {
    let session = format!("synth-{seed:016x}");
    Trace {
        id: format!("{session}/main/{}", params.model),
        session,
        thread: "main".to_string(),
        kind: ThreadKind::Main,
        model: params.model.clone(),
        source: format!(
            "muninn_workload::synth::session({seed}, {})",
            requests.len()
        ),
        requests,
    }
}

/// A gap drawn from `mix`: a band picked by weight (`total_weight` is their sum), then a gap
/// uniformly within it. The Persona workload draws its quiet gaps with it too.
pub(crate) fn idle_gap(rng: &mut SplitMix64, mix: &[IdleBand], total_weight: u64) -> u64 {
    if total_weight == 0 {
        return 0;
    }
    let mut pick = rng.range(&(0..=total_weight - 1));
    for band in mix {
        let w = u64::from(band.weight);
        if pick < w {
            return rng.range(&band.gap_ms);
        }
        pick -= w;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_stream() {
        // First outputs for seed 0 from the reference implementation (Vigna's splitmix64.c).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(rng.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let params = SynthParams::default();
        let a = session(42, 2_000, &params);
        assert_eq!(a, session(42, 2_000, &params));
        assert_ne!(a.requests, session(43, 2_000, &params).requests);
        // A shorter run is a prefix of a longer one: the stream does not depend on the length.
        assert_eq!(session(42, 500, &params).requests, a.requests[..500]);
    }

    #[test]
    fn traces_have_the_promised_shape() {
        let params = SynthParams::default();
        let t = session(7, 20_000, &params);
        assert_eq!(t.requests.len(), 20_000);
        assert!(t.requests[0].boundary);
        let mut compactions = 0;
        let mut long = 0;
        let mut boundaries = 0;
        for pair in t.requests.windows(2) {
            let (prev, r) = (&pair[0], &pair[1]);
            let u = &r.usage;
            assert!(r.at_ms > prev.at_ms);
            assert_eq!(u.cache_write_1h, 0);
            assert!(u.prompt() <= params.compact_at_tokens + 5_000);
            let gap = r.at_ms - prev.at_ms;
            if !r.boundary {
                assert!(gap <= 30_000, "tool-loop gap {gap}");
            }
            if gap >= TTL_5M_MS {
                long += 1;
                assert_eq!(u.cache_read, 0, "cold after a gap of {gap} ms");
            } else if !r.compacted {
                assert_eq!(u.cache_read, prev.usage.prompt() - prev.usage.input);
            }
            if r.compacted {
                compactions += 1;
                assert!(u.prompt() <= params.head_tokens + 8_000);
            }
            boundaries += usize::from(r.boundary);
        }
        // Growth averages 2,600 tokens a request, so a cycle from ~25k to 180k is ~60 requests.
        assert!(compactions > 100, "{compactions} compactions");
        // ~1 in 12.5 requests is a boundary, a quarter of whose gaps are ≥ 5 min.
        assert!((1_000..2_500).contains(&boundaries), "{boundaries}");
        assert!((200..800).contains(&long), "{long} gaps ≥ 5 min");
    }
}
