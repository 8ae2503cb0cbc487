//! Plots (being written).

/// One policy's cumulative cost over time.
#[derive(Debug, Clone, PartialEq)]
pub struct CostSeries {
    /// The policy.
    pub label: String,
    /// `(Unix ms, cumulative dollars)`, in time order.
    pub points: Vec<(i64, f64)>,
}

/// One bucket of the idle-gap histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct GapBucket {
    /// Lower bound of the gap, seconds (inclusive).
    pub from_s: u64,
    /// Upper bound of the gap, seconds (exclusive; `u64::MAX` for the last).
    pub to_s: u64,
    /// Requests that followed a gap in this bucket.
    pub requests: u64,
    /// Cache-write tokens of those requests.
    pub write_tokens: u64,
}
