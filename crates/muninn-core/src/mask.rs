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
//! which the clear has paid for itself. The decider's side (what a clear now is expected to
//! gain over the requests the segment still has, and over a refresh) is the `impl SessionView`
//! at the end of this module.

use crate::cache::Ttl;
use crate::decide::SessionView;
use crate::money::{MicroUsd, Tokens};
use crate::price::ModelPrice;
use crate::trace::Usage;
use serde_json::Value;
use std::fmt;

/// What a cleared tool result says instead (the provider's placeholder; the Anthropic backend
/// and the simulator write the same).
pub const CLEARED_PLACEHOLDER: &str = "[tool result cleared]";

/// The tokens a clear removes from one `tool_result` block whose content is `content`: the block
/// as the cache model counts it — its canonical JSON (keys sorted, no whitespace, escapes
/// included), by [`crate::tokenize::count`] — less the same block holding
/// [`CLEARED_PLACEHOLDER`]. The count is additive over a JSON text's pieces (every string is
/// quoted, every other piece bounded by punctuation), so the rest of the block (its id, its
/// `is_error`) cancels out and this is the content's canonical tokens less the placeholder's,
/// [`cleared_from`]. The host counts the results it sends this way (the whole block, the
/// Anthropic backend), and the importers count a transcript's the same, so that the same
/// exchange has the same clearable tokens online and in replay. The text alone would miss the
/// escaping (a numbered file listing's tabs and newlines are a fifth of its tokens).
pub fn tool_result_tokens(content: Option<&Value>) -> Tokens {
    content.map_or(0, |c| cleared_from(canonical_tokens(c)))
}

/// What a clear removes from a block whose content has `content_tokens` canonical tokens: those
/// less the placeholder's (nothing, for a result no larger than the placeholder).
pub fn cleared_from(content_tokens: Tokens) -> Tokens {
    // The placeholder's tokens, counted once: this runs for every tool result an import reads
    // and every one the host sends.
    static PLACEHOLDER: std::sync::LazyLock<Tokens> =
        std::sync::LazyLock::new(|| canonical_tokens(&Value::String(CLEARED_PLACEHOLDER.into())));
    content_tokens.saturating_sub(*PLACEHOLDER)
}

/// The tokens of `v`'s canonical JSON, counted as it is written: no copy of it is made (a
/// tool's output of tens of megabytes was written out whole, twice over, to be counted).
pub fn canonical_tokens(v: &Value) -> Tokens {
    let mut counter = crate::tokenize::Counter::default();
    write_canonical(v, &mut counter);
    counter.total()
}

/// Appends the canonical JSON of `v` (keys sorted at every level, no whitespace, strings
/// escaped as `serde_json` writes them) to `out`: the text the cache model fingerprints a
/// block by (`muninn_anthropic::prompt` re-exports it) and counts tokens on.
pub fn canonical(v: &Value, out: &mut String) {
    write_canonical(v, out);
}

/// [`canonical`] to any text sink. Neither sink used here fails, so the write results carry
/// nothing.
fn write_canonical(v: &Value, out: &mut impl fmt::Write) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let _ = out.write_char('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    let _ = out.write_char(',');
                }
                let _ = out.write_str(&Value::String(k.clone()).to_string());
                let _ = out.write_char(':');
                write_canonical(&map[k], out);
            }
            let _ = out.write_char('}');
        }
        Value::Array(items) => {
            let _ = out.write_char('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_char(',');
                }
                write_canonical(item, out);
            }
            let _ = out.write_char(']');
        }
        // `Value`'s `Display` writes its JSON a piece at a time: a long string is not copied.
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

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
    billed(request, read, written)
}

/// The usage the same request is billed without the clear, warm: it reads `cached_prefix`
/// (P, the last request's cached prefix) and writes its new tail.
pub fn unmasked_usage(request: &MaskedRequest, cached_prefix: Tokens) -> Usage {
    let read = cached_prefix.min(request.uncleared_tokens);
    let written = request.uncleared_tokens - read;
    billed(request, read, written)
}

/// A request of `request`'s TTL and output that read `read` cached tokens and wrote `written`.
fn billed(request: &MaskedRequest, read: Tokens, written: Tokens) -> Usage {
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

/// A clear priced once for one arrival with something clearable: the *Mask* rule reads
/// its cost, its extra over appending and its horizon up to three times, each a few prices, the
/// learned break-even and a division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearPrice {
    /// [`SessionView::mask_cost`].
    pub cost: MicroUsd,
    /// What it costs over appending: warm, [`SessionView::mask_extra`]; cold, at most 0 (the
    /// prompt is written either way, and the clear writes fewer tokens).
    pub extra: i128,
    /// `r·C`: what each later warm request saves.
    pub each: i128,
    /// [`SessionView::mask_horizon`].
    pub horizon: u64,
}

impl ClearPrice {
    /// [`SessionView::mask_gain`]: the gain within the horizon.
    pub fn gain(&self) -> i128 {
        self.gain_over(self.horizon)
    }

    /// The gain over `horizon` later requests.
    pub fn gain_over(&self, horizon: u64) -> i128 {
        self.each * horizon as i128 - self.extra
    }
}

/// What the decider weighs a clear by (see [`crate::decide`]'s *Mask* rule).
impl SessionView<'_> {
    /// The clear at an arrival, priced once: `None` when nothing is clearable. `append` is
    /// [`SessionView::append_cost`] and `rebuild` [`SessionView::growth_rebuild`], both at this
    /// arrival, warm or not (the caller has them).
    ///
    /// Warm, the clear rewrites what appending would read ([`SessionView::mask_cost`]). Cold
    /// — a wake after the cache expired — appending rewrites the whole prompt anyway, so the
    /// clear costs less than appending now ([`SessionView::cold_mask_cost`]) and saves `r·C` on
    /// each later request: its extra is negative, so it pays and is due at once. Keeping the
    /// rule to warm requests left those clears to the next warm one, a rewrite later (the
    /// optimum made 5 of its 44 clears at such wakes on `IDAHO-VAULT`'s tuning part,
    /// docs/replay.md "Where `IDAHO-VAULT`'s gap is, gap by gap").
    pub fn price_clear(
        &self,
        warm: bool,
        delta: Tokens,
        now_ms: i64,
        append: MicroUsd,
        rebuild: MicroUsd,
    ) -> Option<ClearPrice> {
        if self.clearable_tokens == 0 {
            return None;
        }
        let cost = if warm {
            self.mask_cost(delta, now_ms)
        } else {
            self.cold_mask_cost(delta, now_ms)
        };
        Some(ClearPrice {
            cost,
            extra: cost.0 as i128 - append.0 as i128,
            each: MicroUsd::of(self.clearable_tokens, self.rates.read).0 as i128,
            horizon: self.horizon_before(delta, rebuild),
        })
    }

    /// [`SessionView::mask_due`] for a priced clear.
    pub fn clear_due(&self, clear: &ClearPrice) -> bool {
        clear.horizon < self.remaining_requests || self.clear_rent.0 as i128 >= clear.extra
    }

    /// The cost of sending the next request (adding `delta`) with a clear at `now_ms`, warm: it
    /// reads the head when the head is warm and the clear begins after it (the longest cached
    /// prefix that ends before the first cleared block, R₀), and writes the rest of the shorter
    /// prompt — [`crate::mask::masked_usage`] priced, without the output both requests pay.
    pub fn mask_cost(&self, delta: Tokens, now_ms: i64) -> MicroUsd {
        let head = self.bounds.head_tokens;
        let kept_read = if self.head_warm(now_ms) && self.clear_from_tokens >= head {
            head
        } else {
            0
        };
        let written = (self.prefix_tokens + delta)
            .saturating_sub(self.clearable_tokens)
            .saturating_sub(kept_read);
        MicroUsd::of(kept_read, self.rates.read) + MicroUsd::of(written, self.rates.write)
    }

    /// The cost of sending the next request (adding `delta`) with a clear at `now_ms`, cold:
    /// the shorter prompt written from the head on (the head read if it is still warm), as a
    /// cold append writes the whole one.
    pub fn cold_mask_cost(&self, delta: Tokens, now_ms: i64) -> MicroUsd {
        let shorter = (self.prefix_tokens + delta).saturating_sub(self.clearable_tokens);
        self.write_from_head(shorter, now_ms)
    }

    /// What clearing now is expected to gain over appending: `r·C` saved on each later request
    /// of the segment within [`SessionView::mask_horizon`], less the extra the clear costs now.
    /// `None` when nothing is clearable or the cache is cold (a cold request rewrites its prompt
    /// anyway; the rule is kept to the warm case, where the clear's price is a rewrite against a
    /// read).
    pub fn mask_gain(&self, warm: bool, delta: Tokens, now_ms: i64) -> Option<i128> {
        self.mask_gain_over(warm, delta, now_ms, self.mask_horizon(delta, now_ms))
    }

    /// [`SessionView::mask_gain`] over `horizon` later requests.
    pub(crate) fn mask_gain_over(
        &self,
        warm: bool,
        delta: Tokens,
        now_ms: i64,
        horizon: u64,
    ) -> Option<i128> {
        if !warm || self.clearable_tokens == 0 {
            return None;
        }
        let extra = self.mask_extra(delta, now_ms);
        let each = MicroUsd::of(self.clearable_tokens, self.rates.read).0 as i128;
        Some(each * horizon as i128 - extra)
    }

    /// What clearing costs now over appending, warm: the rewrite of the shorter prompt after
    /// the kept prefix against reading it.
    pub fn mask_extra(&self, delta: Tokens, now_ms: i64) -> i128 {
        self.mask_cost(delta, now_ms).0 as i128 - self.append_cost(true, delta, now_ms).0 as i128
    }

    /// Whether a clear that pays back over its horizon should go now rather than wait for
    /// more to clear. Each clear rewrites the prompt after the kept prefix whatever it removes,
    /// so clearing as soon as the horizon pays for one clear clears in small bites, one rewrite
    /// each, at consecutive requests of a tool loop where more results keep coming (51 clears
    /// on `../shared/traces/claude-code` where the optimum made 21 of about the same tokens).
    /// So a clear waits until the rent paid since the segment's last clear on what it would
    /// remove ([`SessionView::clear_rent`]) reaches its extra cost now: ski-rental's timing for
    /// a cost paid again at every clear, at most twice the best single clear whatever comes, and
    /// for results that grow steadily by g a request exactly the economic-order-quantity
    /// interval √(2K ÷ r·g) that minimises rewrites plus reads. Waiting assumes a later clear
    /// still has the requests to pay back; it does not when the growth rule's refresh bounds
    /// the horizon ([`SessionView::mask_horizon`] below the segment's expected remaining
    /// requests): every request waited is one fewer the clear saves on, and no later clear
    /// follows in the segment, so there the clear goes as soon as it pays.
    pub fn mask_due(&self, delta: Tokens, now_ms: i64) -> bool {
        self.mask_horizon(delta, now_ms) < self.remaining_requests
            || self.clear_rent.0 as i128 >= self.mask_extra(delta, now_ms)
    }

    /// The later requests a clear now can save on: those the segment is expected still to have
    /// ([`SessionView::remaining_requests`]), but no more than the growth rule leaves it before
    /// it refreshes — a refresh ends the segment and with it the clear's saving. Each request
    /// adds about `r·(P + Δ − R)` to the read excess (cleared tokens count as if still read, so
    /// a clear does not postpone the refresh, [`crate::session`]); the refresh comes once the
    /// excess reaches the (learned) break-even. Counting that excess as constant, not growing,
    /// errs towards a longer horizon; the segment-length estimate bounds it.
    pub fn mask_horizon(&self, delta: Tokens, now_ms: i64) -> u64 {
        self.horizon_before(delta, self.growth_rebuild(now_ms))
    }

    /// [`SessionView::mask_horizon`] given the growth rule's rebuild cost.
    fn horizon_before(&self, delta: Tokens, rebuild: MicroUsd) -> u64 {
        let left = self.learned.refresh_break_even(rebuild).0 as i128 - self.read_excess.0 as i128;
        let each = MicroUsd::of(
            (self.prefix_tokens + delta).saturating_sub(self.rehydrated()),
            self.rates.read,
        )
        .0 as i128;
        if left <= 0 {
            // The growth rule is due: it refreshes at this boundary (where the caller weighs
            // the clear against that refresh) or at the next one, which may come at once.
            return 0;
        }
        if each <= 0 {
            return self.remaining_requests;
        }
        let until_refresh = (left + each - 1) / each;
        self.remaining_requests
            .min(u64::try_from(until_refresh).unwrap_or(u64::MAX))
    }

    /// What refreshing now is expected to gain over appending (warm, `append_warm`) across the
    /// same horizon: each later request reads about R instead of P, less the refresh's extra
    /// cost now.
    pub(crate) fn refresh_gain(&self, refresh: MicroUsd, append_warm: MicroUsd) -> i128 {
        let extra = refresh.0 as i128 - append_warm.0 as i128;
        let each = MicroUsd::of(
            self.prefix_tokens.saturating_sub(self.rehydrated()),
            self.rates.read,
        )
        .0 as i128;
        each * self.remaining_requests as i128 - extra
    }
}

/// How many of the newest tool-result chunks a clear keeps, given each chunk's uses newest
/// first: chunks are kept until `keep` uses are (each chunk counts as at least one use). The
/// accounting and the optimum both clear by this rule, so that the plan clears what the engine
/// then clears.
fn kept_newest(uses_newest_first: impl Iterator<Item = u32>, keep: u32) -> usize {
    let mut kept_uses = 0u32;
    let mut kept = 0;
    for uses in uses_newest_first {
        if kept_uses >= keep {
            break;
        }
        kept_uses = kept_uses.saturating_add(uses.max(1));
        kept += 1;
    }
    kept
}

/// How many of the earlier chunks (uses newest first) a clear sent with a request that itself
/// carries `arriving_uses` tool results keeps. The provider's `keep` counts the newest tool uses
/// of the prompt it clears, and the newest are the ones this request answers
/// (`clear_tool_uses_20250919` counts every use of the request, as the simulator's does):
/// they take their share of `keep` first, so one more earlier result is cleared than a count
/// over the earlier results alone would say. The arriving chunk itself is always kept (with
/// `keep: 0` the provider would clear it too; the accounting never clears what it has not yet
/// placed).
pub(crate) fn kept_before(
    arriving_uses: u32,
    earlier_newest_first: impl Iterator<Item = u32>,
    keep: u32,
) -> usize {
    let arriving = (arriving_uses > 0).then_some(arriving_uses);
    let kept = kept_newest(arriving.into_iter().chain(earlier_newest_first), keep);
    kept.saturating_sub(usize::from(arriving.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting the canonical JSON as it is written counts what writing it out would: nested
    /// keys out of order, escapes, numbers, a long string.
    #[test]
    fn canonical_tokens_count_the_canonical_text() {
        let long = "line\twith a tab and ünïcode\n".repeat(1_000);
        let v = serde_json::json!({"z": [1, 2.5, null, true, {"b": "x\"y", "a": long}], "a": "hé"});
        let mut text = String::new();
        canonical(&v, &mut text);
        assert_eq!(canonical_tokens(&v), crate::tokenize::count(&text));
        assert!(text.starts_with(r#"{"a":"hé","z":[1,2.5,null,true,{"a":"line\twith"#));
    }
}
