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
//! - **Pings**: a gap's ping budget is scaled by `saved ÷ spent` (at most 1, at least
//!   1 ÷ [`MAX_RAISE`]): pings that kept wakes warm keep their budget, pings spent on gaps
//!   that ended cold shrink it. Each gap halves the weight of the ones before
//!   ([`Payback::observe_recent`]), so a run of long pauses after short ones is followed within a
//!   gap or two.
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
/// excess before its first: a refresh must prove itself before the bar comes down to one
/// rebuild. Tuned on `../shared/traces/claude-code` (no unseen set was left): there the losing
/// voluntary refresh comes in a session that no earlier refresh could teach anything; 2 left the
/// default 1.021× `never` at the measured rehydration, 4 delayed a refresh that pays at a 4,000-token
/// rehydration into one that lost (1.049×), 3 keeps every cell of the grid within 1.02×.
/// Checked since, unchanged, on public transcripts nobody here had looked at (README
/// "Validation on data nobody tuned on": two Claude Code users, 8,226 requests; 15 Codex
/// rollouts, 1,267 requests): at most 1.000× `never` on every cell of every source's grid.
pub const UNPROVEN_RAISE: i64 = 3;

/// Finished segments the remaining-requests estimate needs before it replaces the prior.
pub const MIN_SEGMENTS_EVIDENCE: u32 = 3;

/// Buckets of [`SegmentLengths`]: bucket i holds lengths in [2^i, 2^(i+1)) requests.
const LENGTH_BUCKETS: usize = 24;

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
        self.buckets.iter().fold(0u32, |a, b| a.saturating_add(*b))
    }

    /// Segments (as a mass: lengths are spread evenly over their bucket) longer than `x`.
    fn mass_beyond(&self, x: f64) -> f64 {
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, &c)| Self::bucket_mass(i, c, x))
            .sum()
    }

    /// Bucket i's share (of `c` segments) longer than `x`.
    fn bucket_mass(i: usize, c: u32, x: f64) -> f64 {
        let lo = (1u64 << i) as f64;
        let hi = (1u64 << (i + 1)) as f64;
        c as f64 * ((hi - x.max(lo)) / (hi - lo)).clamp(0.0, 1.0)
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
        let prior = u64::from(so_far / 2);
        if self.count() < MIN_SEGMENTS_EVIDENCE {
            return prior;
        }
        let k = f64::from(so_far);
        let survivors = self.mass_beyond(k);
        if survivors < 1.0 {
            return prior;
        }
        // Bisect for the length by which half the survivors had ended. The decider asks on
        // every request, so the bisection does only what can change its answer: it sums the
        // buckets that hold segments (an empty one adds 0.0, which changes no sum), and it stops
        // once every length left in [lo, hi] gives the same whole number of requests (the answer
        // is the final hi, which stays in that interval, rounded down: monotone in hi). The
        // answer is the one 64 full steps give (`learn::remaining_is_the_full_bisections`).
        let mut held = [(0usize, 0u32); LENGTH_BUCKETS];
        let mut count = 0;
        for (i, &c) in self.buckets.iter().enumerate().filter(|&(_, &c)| c > 0) {
            held[count] = (i, c);
            count += 1;
        }
        let mass = |x: f64| -> f64 {
            held[..count]
                .iter()
                .map(|&(i, c)| Self::bucket_mass(i, c, x))
                .sum()
        };
        let requests = |hi: f64| (hi - k).floor().max(0.0) as u64;
        let (mut lo, mut hi) = (k, (1u64 << LENGTH_BUCKETS) as f64);
        for _ in 0..64 {
            if requests(lo) == requests(hi) {
                break;
            }
            let mid = (lo + hi) / 2.0;
            if mass(mid) > survivors / 2.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        requests(hi)
    }
}

impl std::ops::Add for SegmentLengths {
    type Output = SegmentLengths;
    fn add(self, other: SegmentLengths) -> SegmentLengths {
        let mut sum = self;
        for (a, b) in sum.buckets.iter_mut().zip(other.buckets) {
            *a = a.saturating_add(b);
        }
        sum
    }
}

impl std::ops::Sub for SegmentLengths {
    type Output = SegmentLengths;
    fn sub(self, other: SegmentLengths) -> SegmentLengths {
        let mut diff = self;
        for (a, b) in diff.buckets.iter_mut().zip(other.buckets) {
            *a = a.saturating_sub(b);
        }
        diff
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
}

impl std::ops::Add for Learned {
    type Output = Learned;
    fn add(self, other: Learned) -> Learned {
        Learned {
            refreshes: self.refreshes + other.refreshes,
            pings: self.pings + other.pings,
            segments: self.segments + other.segments,
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
        }
    }
}

impl Learned {
    /// The growth rule's break-even for a rebuild costing `rebuild`, raised by the refreshes'
    /// payback so far.
    pub fn refresh_break_even(&self, rebuild: MicroUsd) -> MicroUsd {
        self.refreshes.raised(rebuild)
    }

    /// A gap's ping budget of `budget` (one cold wake), shrunk by the pings' payback so far.
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
