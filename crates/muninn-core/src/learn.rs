//! What a Mind learns from the refreshes and keep-warm pings it has already paid for.
//!
//! The default policy's two gambles are break-even rules (see [`crate::decide`]): refresh once
//! the reads paid above a rehydration have bought one rebuild, and ping while the pings of a gap
//! stay within one cold wake. Each assumes the future pays like the past. Whether it does
//! depends on the Mind — how long its sessions run after a refresh, how often a wake comes
//! before the cache would have expired — and on what a refresh really restarts from. So the
//! accounting keeps, for every *warm voluntary* refresh and every gap that pinged, what it cost
//! and what it saved against the counterfactual of not doing it, and the decider scales its
//! break-evens by the running payback:
//!
//! - **Refreshes**: before any evidence the growth rule waits for [`UNPROVEN_RAISE`] rebuilds
//!   of read excess. Refreshes that paid back bring the bar down to one rebuild (the plain
//!   ski-rental rule); refreshes that did not raise it further, by `paid ÷ saved` (at most
//!   [`MAX_RAISE`] rebuilds) — and one that then pays back lowers it again.
//! - **Pings**: the tail's keep-warm pings stop early where the Mind's earlier idle gaps that
//!   lasted as long mostly outlasted the ping budget ([`Learned::gaps`],
//!   [`crate::decide::GapStats::ping_pays`]) — first those that began at the same time of day
//!   ([`Learned::gap_hours`]); gaps that ended within it keep them. Head-only
//!   pings' budget is scaled by `saved ÷ spent` (at most 1, at least 1 ÷ [`MAX_RAISE`]): pings
//!   that kept wakes warm keep their budget, pings spent on gaps that ended cold shrink it.
//!   Each gap halves the weight of the ones before ([`Payback::observe_recent`]), so a run of
//!   long pauses after short ones is followed within a gap or two.
//!
//! Everything is causal: a refresh's savings are counted request by request as the segment it
//! opened goes on, a gap's pings when the wake comes, so a decision sees only what happened
//! before it. Refreshes forced by the context ceiling and cold restarts are not counted: the
//! first are not a choice, the second are chosen on their immediate price alone (restarting is
//! cheaper than rewriting the prefix there and then), which involves no bet on the future.
//!
//! - **Segment lengths** (for the `mask` action, [`crate::mask`]): a clear pays back one
//!   cache read of the cleared tokens on every later request of its segment, so whether it
//!   pays depends on how many requests the segment still has. The Mind keeps the lengths of the
//!   segments it has finished ([`SegmentLengths`]) and the decider asks for the median of what
//!   a segment as long as the current one still had ([`SegmentLengths::remaining`]); without
//!   [`MIN_SEGMENTS_EVIDENCE`] finished segments, or when none outlived the current one, a
//!   conservative prior: half as many more requests as the segment has had.
//!
//! The learned state belongs to a Mind, not a session: the host rebuilds it from the Mind's
//! whole ledger (every row goes through [`crate::session::Accounting::record`]), and the replay
//! carries it across the traces of one project in time order
//! ([`crate::replay::replay_traces`]).

use crate::money::{MicroUsd, Rate, Tokens};
use serde::{Deserialize, Serialize};

/// The most a break-even is raised (and a ping budget shrunk): a Mind whose refreshes never paid
/// back still refreshes once the reads above a rehydration reach this many rebuilds — long
/// sessions where a refresh certainly pays — so the evidence can turn.
pub const MAX_RAISE: i64 = 16;

/// A Mind that has not yet paid for a warm voluntary refresh waits for this many rebuilds of read
/// excess before its first: a refresh must prove itself before the bar comes down to one rebuild.
/// Tuned on `../shared/traces/claude-code` (no unseen set was left): there the losing voluntary
/// refresh comes in a session that no earlier refresh could teach anything; 2 left the default
/// 1.021× `never` at the measured rehydration, 4 delayed a refresh that pays at a 4,000-token
/// rehydration into one that lost (1.049×), 3 keeps every cell of the grid within 1.02×. Checked
/// since, unchanged, on public transcripts nobody here had looked at (docs/validation.md
/// "Validation on data nobody tuned on": two Claude Code users, 8,226 requests; 15 Codex rollouts,
/// 1,267 requests): at most 1.000× `never` on every cell of every source's grid.
pub const UNPROVEN_RAISE: i64 = 3;

/// Finished segments the remaining-requests estimate needs before it replaces the prior.
pub const MIN_SEGMENTS_EVIDENCE: u32 = 3;

/// Buckets of [`SegmentLengths`]: bucket i holds lengths in [2^i, 2^(i+1)) requests.
const LENGTH_BUCKETS: usize = 24;

/// Bucket bounds of [`SegmentLengths`], as [`RUN_BOUNDS`] are of [`RunLengths`]: powers of two.
const SEGMENT_BOUNDS: [u32; LENGTH_BUCKETS + 1] = {
    let mut bounds = [0; LENGTH_BUCKETS + 1];
    let mut i = 0;
    while i <= LENGTH_BUCKETS {
        bounds[i] = 1 << i;
        i += 1;
    }
    bounds
};

/// The lengths, in requests, of the segments a Mind has finished (ended by a refresh of any
/// cause, or by the end of the session), in log₂ buckets. What a `mask` is worth depends on how
/// many requests its segment still has; this is the Mind's own, strictly earlier evidence of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentLengths {
    /// Counts per bucket.
    pub buckets: [u32; LENGTH_BUCKETS],
}

impl SegmentLengths {
    /// Records a finished segment of `requests` requests (an empty one teaches nothing).
    pub fn observe(&mut self, requests: u32) {
        if requests == 0 {
            return;
        }
        let bucket = (31 - requests.leading_zeros() as usize).min(LENGTH_BUCKETS - 1);
        self.buckets[bucket] = self.buckets[bucket].saturating_add(1);
    }

    /// Finished segments recorded.
    pub fn count(&self) -> u32 {
        bucket_total(&self.buckets)
    }

    /// How many more requests a segment that has had `so_far` requests is expected to have: the
    /// median of what the finished segments longer than `so_far` had left at that point. The
    /// median, not the mean: segment lengths are heavy-tailed (a few long sessions), and the
    /// mean would let one of them justify clears that most segments never pay back.
    ///
    /// The prior, used until [`MIN_SEGMENTS_EVIDENCE`] segments have finished or when less than
    /// one finished segment outlived `so_far`: `so_far ÷ 2`. For heavy-tailed lifetimes a
    /// segment that has lasted k requests is as likely as not to last about k more (the Lindy
    /// rule); halving it makes a Mind without history mask only when a clear pays back well
    /// within the requests its segment has already seen — and never in a segment's first
    /// requests, where nothing says the session will go on.
    pub fn remaining(&self, so_far: u32) -> u64 {
        self.remaining_known(so_far)
            .unwrap_or(u64::from(so_far / 2))
    }

    /// [`SegmentLengths::remaining`] from the evidence alone: `None` where the prior would
    /// answer.
    pub fn remaining_known(&self, so_far: u32) -> Option<u64> {
        let histogram = Histogram {
            counts: &self.buckets,
            bounds: &SEGMENT_BOUNDS,
        };
        median_left(self.count(), &histogram, so_far)
    }
}

// The closed form's proof ([`median_left`]) bounds the bisection's last interval for lengths up
// to 2²⁴.
const _: () = assert!(
    SEGMENT_BOUNDS[LENGTH_BUCKETS] <= 1 << 24 && RUN_BOUNDS[RUN_BOUNDS.len() - 1] <= 1 << 24
);

/// A length histogram's counts with its buckets' bounds: bucket i's mass spreads over
/// `[bounds[i], bounds[i + 1])`, none beyond the last bound. A view, built for nothing: the
/// decider asks for the remaining requests on every request.
struct Histogram<'a> {
    counts: &'a [u32],
    bounds: &'static [u32],
}

impl Histogram<'_> {
    /// The buckets that hold lengths, in order: (lower bound, upper bound, count). Every sum
    /// skips the others: an empty bucket adds 0.0 to a mass, which changes no sum.
    fn held(&self) -> impl DoubleEndedIterator<Item = (f64, f64, u32)> + '_ {
        self.counts
            .iter()
            .zip(self.bounds.windows(2))
            .filter(|&(&c, _)| c > 0)
            .map(|(&c, b)| (f64::from(b[0]), f64::from(b[1]), c))
    }

    /// The last bound: no length lies beyond it.
    fn top(&self) -> f64 {
        self.bounds.last().map_or(0.0, |&b| f64::from(b))
    }

    /// Lengths (as a mass: spread evenly over their bucket) longer than `x`.
    ///
    /// The bisection this estimate is defined by summed `c × clamp((hi − max(x, lo)) ÷ (hi −
    /// lo), 0, 1)` over the buckets in order. That term is exactly `c` below the bucket (a
    /// width divided by itself is 1) and exactly 0 above it (and adding 0 changes no sum), so
    /// only the bucket holding `x` divides: the same sum, bit for bit, with one division.
    /// It is non-increasing in `x`, as computed: every term is, and rounded addition is
    /// monotone.
    fn mass_beyond(&self, x: f64) -> f64 {
        let mut mass = 0.0;
        for (lo, hi, c) in self.held() {
            mass += part_beyond(lo, hi, c, x);
        }
        mass
    }

    /// [`Histogram::mass_beyond`] at two points, in one pass over the buckets.
    fn masses_beyond(&self, a: f64, b: f64) -> (f64, f64) {
        let (mut mass_a, mut mass_b) = (0.0, 0.0);
        for (lo, hi, c) in self.held() {
            mass_a += part_beyond(lo, hi, c, a);
            mass_b += part_beyond(lo, hi, c, b);
        }
        (mass_a, mass_b)
    }

    /// Where the mass beyond `x` falls to `half`, solved on the linear piece it falls in:
    /// walking down from the top bucket, the first whose own count brings the mass above it
    /// past `half` holds the crossing. Rounding makes this a guess at the bisection's answer,
    /// which [`Histogram::settles`] checks.
    fn crossing(&self, half: f64) -> f64 {
        let mut above = 0.0;
        for (lo, hi, c) in self.held().rev() {
            let c = f64::from(c);
            if above + c > half {
                return hi - (half - above) * (hi - lo) / c;
            }
            above += c;
        }
        0.0
    }

    /// Whether the bisection for `half` from `k` certainly answers `n` (see [`median_left`]).
    /// Below `top` (at most 2²⁴) both points checked are exact: 20 bits of fraction fit.
    fn settles(&self, k: f64, top: f64, half: f64, n: u64) -> bool {
        let start = k + n as f64;
        if start + 1.0 > top {
            return false;
        }
        let (at_start, before_next) = self.masses_beyond(start, start + 1.0 - SETTLED_MARGIN);
        at_start > half && before_next <= half
    }

    /// The least length (a float in [k, top]) whose mass beyond is at most `half`: where every
    /// test of the bisection turns. Found from `guess` by doubling steps of one float at a time
    /// until bracketed, then bisecting on the floats' bits (non-negative floats order as their
    /// bits), so a guess a few floats off costs a few evaluations. Every float below it has
    /// more than `half` beyond (the mass is non-increasing), every float from it on at most.
    fn boundary(&self, k: f64, top: f64, half: f64, guess: f64) -> f64 {
        let ends = |x: f64| self.mass_beyond(x) <= half;
        let start = guess.clamp(k, top);
        // Invariant: the mass beyond `before` is above half, beyond `at` at most half. The
        // search stays in [k, top]: beyond k lies all the mass, beyond top none.
        let (mut before, mut at) = (start, start);
        let mut step = 1u64;
        if ends(start) {
            loop {
                before = f64::from_bits(at.to_bits().saturating_sub(step)).max(k);
                if !ends(before) {
                    break;
                }
                at = before;
                step = step.saturating_mul(2);
            }
        } else {
            loop {
                at = f64::from_bits(before.to_bits().saturating_add(step)).min(top);
                if ends(at) {
                    break;
                }
                before = at;
                step = step.saturating_mul(2);
            }
        }
        while at.to_bits() - before.to_bits() > 1 {
            let mid = f64::from_bits(before.to_bits() + (at.to_bits() - before.to_bits()) / 2);
            if ends(mid) {
                at = mid;
            } else {
                before = mid;
            }
        }
        at
    }
}

/// The mass of a bucket `[lo, hi)` of `c` lengths beyond `x` ([`Histogram::mass_beyond`]).
fn part_beyond(lo: f64, hi: f64, c: u32, x: f64) -> f64 {
    if x <= lo {
        f64::from(c)
    } else if x < hi {
        f64::from(c) * ((hi - x) / (hi - lo))
    } else {
        0.0
    }
}

/// How far below a whole number of requests the crossing must be for the closed form to answer
/// without the bisection ([`median_left`]): more than the bisection's last interval can be wide.
const SETTLED_MARGIN: f64 = 1.0 / (1u64 << 20) as f64;

/// The median of what the finished lengths longer than `so_far` had left at that point (as
/// masses spread evenly over their buckets, `histogram`), or `None` with fewer
/// than [`MIN_SEGMENTS_EVIDENCE`] of them (`count`) or less than one outliving `so_far`.
///
/// The estimate is defined by a bisection in floating point for the length by which half the
/// survivors had ended ([`bisect_left`]), and the decider asks for it twice on every request;
/// so it is answered in closed form, where that provably gives the bisection's answer, and
/// otherwise by the bisection with its tests answered without summing. Writing f for
/// `mass_beyond` (non-increasing as computed) and n for the closed form's whole number: the
/// bisection keeps f(lo) > half ≥ f(hi) and answers ⌊hi − k⌋. If f(k + n) > half, every hi
/// lies above k + n; if f(k + n + 1 − 2⁻²⁰) ≤ half, every lo lies below that point, and 64
/// halvings of [k, top] (top ≤ 2²⁴; each midpoint rounded by at most 2⁻³⁰) leave hi within
/// 2⁻²⁸ of lo: so hi − k rounds down to n. Where a check fails — the crossing within 2⁻²⁰ below
/// a whole number, as when it falls exactly on one and rounding decides the answer, or the
/// guess one off — the least length whose f is at most half ([`Histogram::boundary`]) answers
/// every test the bisection makes.
///
/// Why not the exact median (rational arithmetic on the integer bounds and counts), which would
/// need no bisection at all: it is not this estimate. It differs from the bisection exactly at
/// crossings on whole numbers — common: a median on a bucket's bound, or in the runs'
/// one-request buckets — and would move decisions the replays measured.
fn median_left(count: u32, histogram: &Histogram, so_far: u32) -> Option<u64> {
    if count < MIN_SEGMENTS_EVIDENCE {
        return None;
    }
    let k = f64::from(so_far);
    let survivors = histogram.mass_beyond(k);
    if survivors < 1.0 {
        return None;
    }
    let half = survivors / 2.0;
    let top = histogram.top();
    let crossing = histogram.crossing(half);
    // Non-negative, so the cast rounds down.
    let guess = (crossing - k).max(0.0) as u64;
    if histogram.settles(k, top, half, guess) {
        return Some(guess);
    }
    Some(bisect_left(
        k,
        top,
        histogram.boundary(k, top, half, crossing),
    ))
}

/// The bisection that defines [`median_left`]'s answer, for the length by which the mass beyond
/// `k` fell to half, less `k`, rounded down; its tests (is the mass beyond the midpoint above
/// half?) answered by comparing with `boundary`, the least length where it is not
/// ([`Histogram::boundary`]; the mass is non-increasing). It stops once every length left in [lo,
/// hi] gives the same whole number of requests (the answer is the final hi, which stays in that
/// interval, rounded down: monotone in hi), so the answer is the one 64 full steps give
/// (`learn::remaining_is_the_full_bisections`, `learn::run_remaining_is_the_full_bisections`).
fn bisect_left(k: f64, top: f64, boundary: f64) -> u64 {
    // Every point tried is at least k: the cast of the non-negative difference rounds down.
    let requests = |x: f64| (x - k) as u64;
    let (mut lo, mut hi) = (k, top);
    for _ in 0..64 {
        if requests(lo) == requests(hi) {
            break;
        }
        let mid = (lo + hi) / 2.0;
        if mid < boundary {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    requests(hi)
}

/// The lengths recorded in a histogram's buckets, summed without overflow.
fn bucket_total(buckets: &[u32]) -> u32 {
    buckets.iter().fold(0u32, |a, b| a.saturating_add(*b))
}

/// Two histograms combined bucket by bucket (`op`: a saturating sum or difference), for the
/// `Add`/`Sub` of [`Learned`]'s parts.
pub(crate) fn bucket_wise<const N: usize>(
    a: [u32; N],
    b: [u32; N],
    op: fn(u32, u32) -> u32,
) -> [u32; N] {
    std::array::from_fn(|i| op(a[i], b[i]))
}

/// `Add` and `Sub` for histograms of `buckets: [u32; N]`, saturating bucket by bucket: what a
/// Mind learned is summed over sessions and one session's share taken back out
/// ([`Learned`]'s `Add`/`Sub`).
macro_rules! bucket_ops {
    ($($histogram:ty),+) => {$(
        impl std::ops::Add for $histogram {
            type Output = $histogram;
            fn add(self, other: $histogram) -> $histogram {
                Self {
                    buckets: $crate::learn::bucket_wise(
                        self.buckets,
                        other.buckets,
                        u32::saturating_add,
                    ),
                }
            }
        }

        impl std::ops::Sub for $histogram {
            type Output = $histogram;
            fn sub(self, other: $histogram) -> $histogram {
                Self {
                    buckets: $crate::learn::bucket_wise(
                        self.buckets,
                        other.buckets,
                        u32::saturating_sub,
                    ),
                }
            }
        }
    )+};
}
pub(crate) use bucket_ops;

/// Bucket bounds of [`RunLengths`]: bucket i holds lengths in `[RUN_BOUNDS[i], RUN_BOUNDS[i +
/// 1])`. Exact up to 20 requests, where a loop's last requests are told apart (a loop of 18
/// requests in a log₂ bucket would look like one of 16 to 31, and the 17th request would seem to
/// have 7 more), coarser above.
const RUN_BOUNDS: [u32; 33] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 24, 28, 32, 40, 48,
    64, 96, 128, 256, 512, 1024, 4096,
];

/// The lengths, in requests, of the runs a Mind has finished ([`Runs`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLengths {
    /// Counts per bucket of `RUN_BOUNDS` (the last also holds anything longer).
    pub buckets: [u32; 32],
}

impl RunLengths {
    /// Records a finished run of `requests` requests (an empty one teaches nothing).
    pub fn observe(&mut self, requests: u32) {
        if requests == 0 {
            return;
        }
        let bucket = RUN_BOUNDS[1..]
            .iter()
            .position(|&hi| requests < hi)
            .unwrap_or(self.buckets.len() - 1);
        self.buckets[bucket] = self.buckets[bucket].saturating_add(1);
    }

    /// Finished runs recorded.
    pub fn count(&self) -> u32 {
        bucket_total(&self.buckets)
    }

    /// How many more requests a run that has had `so_far` is expected to have (the median of
    /// what the longer finished runs had left), or `None` without the evidence
    /// (`median_left`).
    pub fn remaining_known(&self, so_far: u32) -> Option<u64> {
        let histogram = Histogram {
            counts: &self.buckets,
            bounds: &RUN_BOUNDS,
        };
        median_left(self.count(), &histogram, so_far)
    }
}

bucket_ops!(RunLengths, SegmentLengths);

/// The Mind's finished runs: a request at a task boundary (a batch of deliveries, a brief, a
/// user turn) and the non-boundary requests that follow it (its tool loop), until the next
/// boundary. Inside a run the segment-length estimate alone is a poor horizon for a clear: it
/// does not know where in the loop the request stands, while the Mind's own loops say how long
/// they run — and whether its segments go on after a loop (a later brief appends to it) or end
/// with it (the next brief starts a new segment).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runs {
    /// Their lengths in requests.
    pub lengths: RunLengths,
    /// Finished runs whose segment went on after them (the next run's first request continued
    /// it).
    pub continued: u32,
    /// Finished runs whose segment ended with them (the next run began a new segment, or the
    /// session ended).
    pub ended: u32,
}

impl Runs {
    /// A run of `requests` requests finished; `ended` whether its segment ended with it.
    pub fn observe(&mut self, requests: u32, ended: bool) {
        if requests == 0 {
            return;
        }
        self.lengths.observe(requests);
        if ended {
            self.ended = self.ended.saturating_add(1);
        } else {
            self.continued = self.continued.saturating_add(1);
        }
    }

    /// Finished runs recorded.
    pub fn count(&self) -> u32 {
        self.lengths.count()
    }

    /// How many more requests a segment that has had `segment_so_far` is expected to have, when
    /// the arriving request is the `run_so_far`-th of its run (`None` at a task boundary, which
    /// begins a run), given `segment` as the segment-length estimate alone would say
    /// ([`SegmentLengths::remaining`]).
    ///
    /// Inside a run, once [`MIN_SEGMENTS_EVIDENCE`] runs have finished and at least one
    /// outlived this one so far, the run's own rest (the median of what the longer finished
    /// runs had left, [`RunLengths::remaining_known`]) is known better than the
    /// segment's: where the Mind's runs have mostly ended their segments, the segment ends with
    /// this run and that rest is the horizon; where they mostly went on, the segment has at
    /// least that rest, and the segment estimate may say more. Otherwise `segment`, as before.
    pub fn remaining(&self, segment: u64, run_so_far: Option<u32>) -> u64 {
        self.remaining_with(segment, run_so_far.and_then(|k| self.run_left(k)))
    }

    /// The run's own expected rest when the arriving request is its `run_so_far`-th: `None` at
    /// its first request or without the evidence. The part of [`Runs::remaining`] that bisects,
    /// so that the accounting can keep it until the run or the runs learned change.
    pub fn run_left(&self, run_so_far: u32) -> Option<u64> {
        if run_so_far > 1 {
            self.lengths.remaining_known(run_so_far)
        } else {
            None
        }
    }

    /// [`Runs::remaining`] given the run's own rest, [`Runs::run_left`] (`None` at a task
    /// boundary).
    pub fn remaining_with(&self, segment: u64, run_left: Option<u64>) -> u64 {
        match run_left {
            None => segment,
            Some(run_left) if self.ended > self.continued => run_left,
            Some(run_left) => segment.max(run_left),
        }
    }
}

impl std::ops::Add for Runs {
    type Output = Runs;
    fn add(self, other: Runs) -> Runs {
        Runs {
            lengths: self.lengths + other.lengths,
            continued: self.continued.saturating_add(other.continued),
            ended: self.ended.saturating_add(other.ended),
        }
    }
}

impl std::ops::Sub for Runs {
    type Output = Runs;
    fn sub(self, other: Runs) -> Runs {
        Runs {
            lengths: self.lengths - other.lengths,
            continued: self.continued.saturating_sub(other.continued),
            ended: self.ended.saturating_sub(other.ended),
        }
    }
}

/// What a kind of gamble has cost and saved so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payback {
    /// Paid for it: flushes and rehydration writes, or pings.
    pub paid: MicroUsd,
    /// Saved by it against not doing it.
    pub saved: MicroUsd,
    /// How many (refreshes, or gaps that pinged).
    pub count: u32,
}

impl Payback {
    /// `amount` once the refreshes so far have paid back; before any, `amount ×
    /// UNPROVEN_RAISE`; while they have not, that times `paid ÷ saved` — at most `amount ×
    /// MAX_RAISE` either way.
    fn raised(&self, amount: MicroUsd) -> MicroUsd {
        if self.count > 0 && self.saved >= self.paid {
            return amount;
        }
        let cap = amount.0 as i128 * MAX_RAISE as i128;
        let unproven = amount.0 as i128 * UNPROVEN_RAISE as i128;
        let raised = if self.count == 0 {
            unproven
        } else if self.saved.0 <= 0 {
            cap
        } else {
            unproven * self.paid.0 as i128 / self.saved.0 as i128
        };
        MicroUsd(raised.min(cap).min(i64::MAX as i128) as i64)
    }

    /// `amount × saved ÷ paid`, clamped to `[amount ÷ MAX_RAISE, amount]`; `amount` itself
    /// without evidence.
    fn shrunk(&self, amount: MicroUsd) -> MicroUsd {
        if self.count == 0 || self.saved >= self.paid {
            return amount;
        }
        let floor = amount.0 as i128 / MAX_RAISE as i128;
        let shrunk = amount.0 as i128 * self.saved.0.max(0) as i128 / self.paid.0.max(1) as i128;
        MicroUsd(shrunk.max(floor) as i64)
    }

    /// Adds one observation, halving what was known before: recent gaps weigh most, so a Mind
    /// whose gaps have changed (a session of long pauses after one of short ones) follows
    /// within a few gaps.
    pub fn observe_recent(&mut self, paid: MicroUsd, saved: MicroUsd) {
        self.paid = MicroUsd(self.paid.0 / 2) + paid;
        self.saved = MicroUsd(self.saved.0 / 2) + saved;
        self.count = self.count.saturating_add(1);
    }

    /// Saved ÷ paid (1 without evidence): the payback ratio reports print.
    pub fn ratio(&self) -> f64 {
        if self.paid.0 <= 0 {
            1.0
        } else {
            self.saved.0 as f64 / self.paid.0 as f64
        }
    }
}

impl std::ops::Add for Payback {
    type Output = Payback;
    fn add(self, other: Payback) -> Payback {
        Payback {
            paid: self.paid + other.paid,
            saved: self.saved + other.saved,
            count: self.count.saturating_add(other.count),
        }
    }
}

impl std::ops::Sub for Payback {
    type Output = Payback;
    fn sub(self, other: Payback) -> Payback {
        Payback {
            paid: self.paid - other.paid,
            saved: self.saved - other.saved,
            count: self.count.saturating_sub(other.count),
        }
    }
}

/// What a Mind has learned: the payback of its warm voluntary refreshes and of its pings.
/// Evidence adds up: what several sessions taught is the sum of what each taught.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    /// Warm voluntary refreshes (the growth rule's).
    pub refreshes: Payback,
    /// Gaps that sent keep-warm pings (tail or head).
    pub pings: Payback,
    /// The lengths of the segments finished so far (for the `mask` action).
    #[serde(default)]
    pub segments: SegmentLengths,
    /// The runs (a boundary's request and its tool loop) finished so far (for the `mask`
    /// action's horizon inside a run).
    #[serde(default)]
    pub runs: Runs,
    /// The idle gaps of every session so far: the keep-warm rule's evidence
    /// ([`crate::decide::GapStats::ping_pays`]). A Mind's pauses are its own, not one session's.
    #[serde(default)]
    pub gaps: crate::decide::GapStats,
    /// The same gaps by the hour of the UTC day they began: the keep-warm rule judges a gap
    /// first on those that began at the same time of day ([`crate::decide::GapHours`]).
    #[serde(default)]
    pub gap_hours: crate::decide::GapHours,
}

impl std::ops::Add for Learned {
    type Output = Learned;
    fn add(self, other: Learned) -> Learned {
        Learned {
            refreshes: self.refreshes + other.refreshes,
            pings: self.pings + other.pings,
            segments: self.segments + other.segments,
            runs: self.runs + other.runs,
            gaps: self.gaps + other.gaps,
            gap_hours: self.gap_hours + other.gap_hours,
        }
    }
}

impl std::ops::Sub for Learned {
    type Output = Learned;
    fn sub(self, other: Learned) -> Learned {
        Learned {
            refreshes: self.refreshes - other.refreshes,
            pings: self.pings - other.pings,
            segments: self.segments - other.segments,
            runs: self.runs - other.runs,
            gaps: self.gaps - other.gaps,
            gap_hours: self.gap_hours - other.gap_hours,
        }
    }
}

impl Learned {
    /// The growth rule's break-even for a rebuild costing `rebuild`, raised by the refreshes'
    /// payback so far.
    pub fn refresh_break_even(&self, rebuild: MicroUsd) -> MicroUsd {
        self.refreshes.raised(rebuild)
    }

    /// A gap's head-ping budget of `budget` (one rewrite of the head), shrunk by the pings'
    /// payback so far.
    pub fn ping_budget(&self, budget: MicroUsd) -> MicroUsd {
        self.pings.shrunk(budget)
    }
}

/// A warm voluntary refresh whose savings are still being counted: the segment it opened is
/// the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenRefresh {
    /// The cached prefix the refresh left (what continuing would have read).
    pub(crate) old_prefix: Tokens,
    /// The head both prompts share.
    pub(crate) head: Tokens,
    /// The rehydration R (head included) the new segment starts from.
    pub(crate) rehydrated: Tokens,
}

impl OpenRefresh {
    /// The first request of the new segment: it paid the flush and wrote the rehydration
    /// beyond the head, where continuing would have read the old prefix beyond the head.
    pub(crate) fn first(&self, flush: MicroUsd, read: Rate, write: Rate) -> (MicroUsd, MicroUsd) {
        let paid = flush + MicroUsd::of(self.rehydrated.saturating_sub(self.head), write);
        let saved = MicroUsd::of(self.old_prefix.saturating_sub(self.head), read);
        (paid, saved)
    }

    /// A later request or ping of the segment: continuing would have carried the old prefix's
    /// surplus over R at the rate this request paid for its prefix (read warm, written cold).
    pub(crate) fn later(&self, rate: Rate) -> MicroUsd {
        MicroUsd::of(self.old_prefix.saturating_sub(self.rehydrated), rate)
    }
}
