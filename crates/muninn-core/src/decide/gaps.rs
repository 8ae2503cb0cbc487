//! The idle-gap statistics the `predictive` policy fits its pings to.

use serde::{Deserialize, Serialize};

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
