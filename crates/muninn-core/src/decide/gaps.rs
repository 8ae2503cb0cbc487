//! The idle-gap statistics keep-warm pings are fitted to: the `predictive` policy's one-ping
//! expectation, and the default's threshold for the gaps its Mind has shown
//! ([`GapStats::ping_pays`]).

use super::SessionView;
use crate::cache::Ttl;
use crate::money::MicroUsd;
use serde::{Deserialize, Serialize};

/// Gaps that lasted as long as the current one, seen before, that [`GapStats::ping_pays`] needs
/// to judge on: as many as the segment-length estimate needs
/// ([`crate::learn::MIN_SEGMENTS_EVIDENCE`]); not tuned.
pub const MIN_GAPS_EVIDENCE: u32 = crate::learn::MIN_SEGMENTS_EVIDENCE;

/// Idle gaps seen so far, in log₂-second buckets: bucket i holds gaps in [2^i, 2^(i+1)) seconds
/// (bucket 0 also holds gaps under a second). Fitted from the ledger (live) or from the trace so
/// far (replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GapStats {
    /// Counts per bucket.
    pub buckets: [u32; 24],
}

impl GapStats {
    /// The bucket of a gap.
    pub fn bucket(gap_ms: i64) -> usize {
        let secs = (gap_ms / 1000).max(1) as u64;
        (63 - secs.leading_zeros() as usize).min(23)
    }

    /// Records a gap.
    pub fn observe(&mut self, gap_ms: i64) {
        let b = GapStats::bucket(gap_ms);
        self.buckets[b] = self.buckets[b].saturating_add(1);
    }

    /// The observed gaps (no prior) that lasted beyond `t_ms`, mass spread uniformly in log-time
    /// within a bucket.
    fn seen_beyond(&self, t_ms: i64) -> f64 {
        let pos = (t_ms as f64 / 1000.0).max(1.0).log2();
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, &c)| c as f64 * (i as f64 + 1.0 - pos).clamp(0.0, 1.0))
            .sum()
    }

    /// Whether a keep-warm ping is worth sending in a gap already `elapsed_ms` long, judged on
    /// the gaps seen so far that lasted as long (`None`: fewer than [`MIN_GAPS_EVIDENCE`] of
    /// them, nothing to judge on). A ping now, then one every `ttl_ms` while the gap lasts,
    /// costs `ping` each; a wake after the last one costs `penalty` more than a warm one.
    /// Pinging pays when some number of pings k ≥ 1 (at most `max_pings`, what the ski-rental
    /// budget has left) has an expected cost `ping·Σᵢ₌₀..ₖ₋₁ S(tᵢ) + penalty·S(tₖ)`, with S the
    /// share of those gaps still going at `tᵢ = elapsed + i·ttl`, below `penalty`, the cost of
    /// letting the cache expire now: the break-even for the gaps this Mind has shown rather than
    /// for the worst case. Gaps that always outlast the budget stop the pings at once; gaps that
    /// end within it keep them.
    pub fn ping_pays(
        &self,
        elapsed_ms: i64,
        ttl_ms: i64,
        ping: MicroUsd,
        penalty: MicroUsd,
        max_pings: u32,
    ) -> Option<bool> {
        let now = self.seen_beyond(elapsed_ms);
        if now < MIN_GAPS_EVIDENCE as f64 || ttl_ms <= 0 {
            return None;
        }
        let (ping, penalty) = (ping.0 as f64, penalty.0 as f64);
        let at = |i: u32| elapsed_ms.saturating_add((i as i64).saturating_mul(ttl_ms));
        let mut spent = 0.0;
        for k in 1..=max_pings {
            spent += ping * self.seen_beyond(at(k - 1)) / now;
            if spent >= penalty {
                break;
            }
            if spent + penalty * self.seen_beyond(at(k)) / now < penalty {
                return Some(true);
            }
        }
        Some(false)
    }

    /// The estimated probability, with a uniform-over-buckets prior of weight one, that a gap
    /// already `elapsed_ms` long ends by `until_ms`.
    pub fn p_end_by(&self, elapsed_ms: i64, until_ms: i64) -> f64 {
        // Mass is spread uniformly in log-time within a bucket.
        let mass_beyond = |t_ms: i64| -> f64 {
            let secs = (t_ms as f64 / 1000.0).max(1.0);
            let pos = secs.log2();
            let mut total = 0.0;
            let mut beyond = 0.0;
            for (i, &c) in self.buckets.iter().enumerate() {
                let w = c as f64 + 1.0 / 24.0;
                total += w;
                let (lo, hi) = (i as f64, i as f64 + 1.0);
                let frac = if pos <= lo {
                    1.0
                } else if pos >= hi {
                    0.0
                } else {
                    hi - pos
                };
                beyond += w * frac;
            }
            beyond / total
        };
        let s_now = mass_beyond(elapsed_ms);
        if s_now <= 0.0 {
            return 1.0;
        }
        ((s_now - mass_beyond(until_ms)) / s_now).clamp(0.0, 1.0)
    }
}

/// The default's keep-warm break-even for the gaps its Mind has shown: within the ski-rental
/// budget (`left` of `penalty`, one cold wake), ping only while the gaps seen so far that lasted
/// this long make some run of pings cheaper in expectation than letting go now
/// ([`GapStats::ping_pays`]). Without enough such gaps, the budget alone decides.
///
/// This replaced shrinking the budget by the pings' payback so far (`saved ÷ spent`, down to
/// 1 ÷ [`crate::learn::MAX_RAISE`]): one gap that outlasted its pings then cut the next gap's
/// pings short, and a gap just past a budget b < penalty costs b + penalty against the
/// optimum's b — up to 17× where the plain rule is 2× (below one ping, no gap pinged again to
/// teach otherwise). Gap lengths, not paybacks, say whether the next gap is likely to outlast
/// the budget. Head-only pings keep the payback's budget: judged on the gap lengths too, they
/// cost more on the tuning sources (README "The idle decisions against the optimum").
pub(super) fn gaps_say_ping(
    view: &SessionView,
    elapsed_ms: i64,
    ttl: Ttl,
    ping: MicroUsd,
    penalty: MicroUsd,
    left: MicroUsd,
) -> bool {
    let max_pings = (left.0 / ping.0.max(1)).clamp(0, u32::MAX as i64) as u32;
    view.learned
        .gaps
        .ping_pays(elapsed_ms, ttl.millis(), ping, penalty, max_pings)
        .unwrap_or(true)
}

/// Gap statistics add up: what several sessions of a Mind showed is the sum of what each did.
impl std::ops::Add for GapStats {
    type Output = GapStats;
    fn add(mut self, other: GapStats) -> GapStats {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a = a.saturating_add(b);
        }
        self
    }
}

impl std::ops::Sub for GapStats {
    type Output = GapStats;
    fn sub(mut self, other: GapStats) -> GapStats {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a = a.saturating_sub(b);
        }
        self
    }
}
