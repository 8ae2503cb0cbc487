//! The ways through one gap, each a cost linear in the prefix it touches: inside a segment (keep
//! the prefix warm, let it expire, keep only the head) and before a refresh (let the head go, keep
//! it alive with pings, keep only the head).

use super::model::{Choices, Ending, LinearCost};
use super::{head_only_pings, head_pings_needed, pings_needed, touches};
use crate::cache::Ttl;
use crate::decide::Capabilities;
use crate::money::Tokens;
use crate::replay::ReplayConfig;

/// A trace's rates and sizes, in rate·token units, as the gap options need them.
pub(super) struct GapRates {
    pub(super) r: i128,
    pub(super) w: i128,
    pub(super) inp: i128,
    pub(super) w_head: i128,
    h: i128,
    ttl: Ttl,
    head_ttl: Ttl,
    /// An automatic cache's retention, which replaces both tiers' lifetimes (OpenAI).
    lifetime_ms: Option<i64>,
    before: i64,
    step: i64,
    phi_ping: i128,
    /// A head-only ping: the head read, a tiny uncached question, one output token.
    head_ping: i128,
    needs_flush: bool,
    flush_read: i128,
    phi_flush: i128,
    head_cacheable: bool,
    /// What the provider lets a session do: no keep-warm pings where it has no TTL to extend.
    can: Capabilities,
}

impl GapRates {
    pub(super) fn new(head: Tokens, ttl: Ttl, config: &ReplayConfig<'_>) -> GapRates {
        let a = config.assumptions;
        let price = config.price;
        let (r, inp, out) = (
            price.read.0 as i128,
            price.input.0 as i128,
            price.output.0 as i128,
        );
        let h = head as i128;
        let bounds = a.bounds(head, price);
        let before = a.decide_before_expiry_ms;
        let phi_ping = inp * a.ping_tokens as i128 + out * a.ping_output_tokens as i128;
        // With memory written as it happens there is no flush request: a refresh costs only the
        // rewrite of the new segment.
        let needs_flush = bounds.needs_flush();
        let (flush_read, phi_flush) = if needs_flush {
            let tokens = bounds.flush_prompt_tokens as i128;
            (r, inp * tokens + out * bounds.flush_output_tokens as i128)
        } else {
            (0, 0)
        };
        // The head sits under its own breakpoint, possibly with a longer TTL than the tail's.
        let head_ttl = a.head_ttl_for(ttl);
        GapRates {
            r,
            w: price.write(ttl).0 as i128,
            inp,
            w_head: price.write(head_ttl).0 as i128,
            h,
            ttl,
            head_ttl,
            lifetime_ms: config.rules.lifetime_ms,
            before,
            step: config.rules.lifetime_ms.unwrap_or_else(|| ttl.millis()) - before,
            phi_ping,
            head_ping: r * h + phi_ping,
            needs_flush,
            flush_read,
            phi_flush,
            head_cacheable: head >= price.min_cacheable,
            can: price.provider.capabilities(),
        }
    }

    fn life(&self, tier: Ttl) -> i64 {
        self.lifetime_ms.unwrap_or_else(|| tier.millis())
    }

    fn head_warm_after(&self, gap: i64) -> bool {
        self.head_cacheable && gap < self.life(self.head_ttl)
    }

    /// Inside a segment: keep the prefix warm with k pings; let it expire and rewrite it, reading
    /// the head if its own TTL outlived the gap; or ping only as long as it takes to keep the head
    /// alive, then rewrite the tail.
    pub(super) fn inside(&self, gap: i64) -> Choices<LinearCost, 4> {
        let (r, w, h, phi_ping) = (self.r, self.w, self.h, self.phi_ping);
        let k = if gap < self.life(self.ttl) {
            0
        } else {
            pings_needed(gap, self.ttl, self.before) as i128
        };
        let mut options = Choices::default();
        if k == 0 || self.can.ping {
            options.push(((k + 1) * r, k * phi_ping));
        }
        if self.head_warm_after(gap) {
            options.push((w, -(w - r) * h));
        } else {
            options.push((w, (self.w_head - w) * h));
            if self.head_cacheable {
                let kh = head_pings_needed(gap, self.ttl, self.head_ttl, self.before) as i128;
                if kh == 0 || self.can.ping {
                    options.push((kh * r + w, kh * phi_ping - (w - r) * h));
                }
                // Or let the tail go and keep only the head, with head-only pings.
                let k = head_only_pings(gap, self.head_ttl, self.before) as i128;
                if k == 0 || self.can.ping_head {
                    options.push((w, k * self.head_ping - (w - r) * h));
                }
            }
        }
        options
    }

    /// Ending the segment before a refresh after `gap`: the flush (if any) at the latest warm
    /// moment touches the head once more; if the head is cold at the refresh anyway, touching it
    /// with pings (the flush the last of them) until then may be cheaper than rewriting it.
    pub(super) fn ending(&self, gap: i64) -> Choices<Ending, 3> {
        self.head_only_after(gap, self.needs_flush)
    }

    /// The gap before a request sent with a clear: the clear rewrites the prompt from the head on,
    /// so only the head is worth keeping — the ways of [`GapRates::ending`] without a flush.
    pub(super) fn before_mask(&self, gap: i64) -> Choices<Ending, 3> {
        self.head_only_after(gap, false)
    }

    /// The ways through a gap after which only the head is read: let it go, keep it alive with
    /// tail pings (the flush, if any, the last of them), or keep only the head with head-only
    /// pings. Each is a cost linear in the prefix before the gap plus the head's cost after it.
    fn head_only_after(&self, gap: i64, needs_flush: bool) -> Choices<Ending, 3> {
        let (r, h, step) = (self.r, self.h, self.step);
        let (flush_read, phi_flush) = if needs_flush {
            (self.flush_read, self.phi_flush)
        } else {
            (0, 0)
        };
        let late_flush = if needs_flush && gap >= step { step } else { 0 };
        let reading = |close: LinearCost| Ending {
            close,
            head: r * h,
            reads_head: true,
        };
        let mut ends = Choices::default();
        if self.head_warm_after(gap - late_flush) {
            ends.push(reading((flush_read, phi_flush)));
            return ends;
        }
        ends.push(Ending {
            close: (flush_read, phi_flush),
            head: self.w_head * h,
            reads_head: false,
        });
        if self.head_cacheable {
            let k =
                touches(gap - step, self.head_ttl.millis(), step) as i128 - i128::from(needs_flush);
            if k > 0 && self.can.ping {
                ends.push(reading((flush_read + k * r, phi_flush + k * self.phi_ping)));
            }
            // Or end now and keep only the head alive, with head-only pings.
            let k = head_only_pings(gap - late_flush, self.head_ttl, self.before) as i128;
            if k == 0 || self.can.ping_head {
                ends.push(reading((flush_read, phi_flush + k * self.head_ping)));
            }
        }
        ends
    }
}
