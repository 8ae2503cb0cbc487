//! The idle-gap statistics keep-warm pings are fitted to: the `predictive` policy's one-ping
//! expectation, and the default's threshold for the gaps its Mind has shown
//! ([`GapStats::ping_pays`]), judged first on the gaps that began at the same hour of day
//! ([`GapHours`]).

use super::SessionView;
use crate::cache::Ttl;
use crate::money::MicroUsd;
use serde::{Deserialize, Serialize};

/// Gaps that lasted as long as the current one, seen before, that [`GapStats::ping_pays`] needs
/// to judge on: as many as the segment-length estimate needs
/// ([`crate::learn::MIN_SEGMENTS_EVIDENCE`]); not tuned.
pub const MIN_GAPS_EVIDENCE: u32 = crate::learn::MIN_SEGMENTS_EVIDENCE;

/// How many hours either side of a gap's starting hour (of the UTC day) count as the same time of
/// day for [`GapHours::band`]: a band of seven hours. Chosen on the tuning parts (docs/replay.md
/// "The idle decisions against the optimum"): ±1, ±2 and ±4 came within $0.2 of it; ±6 lost the
/// gain (a band of 13 hours holds a Mind's nights whatever hour a gap began).
pub const GAP_HOUR_BAND: i64 = 3;

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

    /// Whether a gap already `elapsed_ms` long has outlasted every gap seen, where at least
    /// [`MIN_GAPS_EVIDENCE`] gaps lasted a `ttl` (less than one lasted as long as this one).
    ///
    /// The default's keep-warm rule (`gaps_say_ping`) stops there on a 5-minute cache: the
    /// Mind's gaps say nothing of how soon it ends, and the budget would ping for 50 minutes
    /// (about 11 pings of 4.5 minutes) on a bet its gaps never showed. A 1-hour cache keeps the
    /// budget (not measured there: its budget spans a night, and the hour-of-day rule judges
    /// those). Chosen on the tuning parts (docs/replay.md "The idle decisions against the
    /// optimum", "A gap past every gap seen").
    pub fn outlasted(&self, elapsed_ms: i64, ttl: Ttl) -> bool {
        self.seen_beyond(ttl.millis()) >= MIN_GAPS_EVIDENCE as f64
            && self.seen_beyond(elapsed_ms) < 1.0
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

/// A Mind's idle gaps by the hour of the UTC day they began: [`GapStats`] for each hour.
///
/// A Mind's long pauses are mostly the ends of its days, and they begin at about the same hour
/// each day; the pauses that begin at other hours (a meeting, lunch) are shorter. Gap lengths
/// alone mix the two: once a gap has lasted an hour or two, the Mind's earlier gaps that lasted
/// as long are mostly its nights, whatever hour this gap began. The hour of the UTC day is
/// enough to tell them apart without knowing the Mind's time zone: its nights begin at the same
/// UTC hours too. Fitted from the ledger (live) or the trace so far (replay), like
/// [`GapStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GapHours {
    /// Gaps by the hour of the UTC day (0–23) they began.
    pub by_hour: [GapStats; 24],
}

impl GapHours {
    /// The hour of the UTC day of `at_ms`.
    fn hour(at_ms: i64) -> i64 {
        at_ms.div_euclid(3_600_000).rem_euclid(24)
    }

    /// Records a gap of `gap_ms` that began at `start_ms` (Unix ms).
    pub fn observe(&mut self, start_ms: i64, gap_ms: i64) {
        self.by_hour[GapHours::hour(start_ms) as usize].observe(gap_ms);
    }

    /// The gaps that began within [`GAP_HOUR_BAND`] hours of the hour `start_ms` falls in.
    pub fn band(&self, start_ms: i64) -> GapStats {
        let hour = GapHours::hour(start_ms);
        (-GAP_HOUR_BAND..=GAP_HOUR_BAND)
            .map(|d| self.by_hour[(hour + d).rem_euclid(24) as usize])
            .fold(GapStats::default(), |sum, g| sum + g)
    }
}

impl std::ops::Add for GapHours {
    type Output = GapHours;
    fn add(self, other: GapHours) -> GapHours {
        GapHours {
            by_hour: std::array::from_fn(|h| self.by_hour[h] + other.by_hour[h]),
        }
    }
}

impl std::ops::Sub for GapHours {
    type Output = GapHours;
    fn sub(self, other: GapHours) -> GapHours {
        GapHours {
            by_hour: std::array::from_fn(|h| self.by_hour[h] - other.by_hour[h]),
        }
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
/// cost more on the tuning sources (docs/replay.md "The idle decisions against the optimum").
///
/// The gaps judged on are first those that began at the same time of day as this one (the
/// last request's hour, [`GapHours::band`]): with three that lasted as long, they decide. With
/// less than one, none of the Mind's gaps this long began at this time of day — its long gaps
/// are its nights, and this is not one of them — so the budget alone decides rather than the
/// nights' evidence. In between, all the Mind's gaps decide, as before. Where neither has the
/// evidence, the budget decides — except on a 5-minute cache once the gap has outlasted every
/// gap the Mind has shown ([`GapStats::outlasted`]).
pub(super) fn gaps_say_ping(
    view: &SessionView,
    elapsed_ms: i64,
    ttl: Ttl,
    ping: MicroUsd,
    penalty: MicroUsd,
    left: MicroUsd,
) -> bool {
    let max_pings = (left.0 / ping.0.max(1)).clamp(0, u32::MAX as i64) as u32;
    let pays = |gaps: &GapStats| gaps.ping_pays(elapsed_ms, ttl.millis(), ping, penalty, max_pings);
    let band = view.learned.gap_hours.band(view.last_request_ms);
    // Without evidence the budget decides, except on a 5-minute cache past every gap seen.
    let unjudged = || ttl != Ttl::FiveMinutes || !view.learned.gaps.outlasted(elapsed_ms, ttl);
    if let Some(judged) = pays(&band) {
        return judged;
    }
    if band.seen_beyond(elapsed_ms) < 1.0 {
        return unjudged();
    }
    pays(&view.learned.gaps).unwrap_or_else(unjudged)
}

// Gap statistics add up: what several sessions of a Mind showed is the sum of what each did.
crate::learn::bucket_ops!(GapStats);
