//! The per-request cost structure of a trace (everything that does not depend on the
//! segmentation), and the exact model cost of a plan.

use crate::replay::Turn;

/// A cost linear in a prefix `c`: `slope·c + constant`, in rate·token units.
pub(super) type LinearCost = (i128, i128);

/// A few alternatives, inline (one per request of a million-request trace must not allocate).
#[derive(Debug, Clone, Copy)]
pub(super) struct Choices<T: Copy + Default, const N: usize> {
    items: [T; N],
    len: usize,
}

impl<T: Copy + Default, const N: usize> Default for Choices<T, N> {
    fn default() -> Self {
        Choices {
            items: [T::default(); N],
            len: 0,
        }
    }
}

impl<T: Copy + Default, const N: usize> Choices<T, N> {
    pub(super) fn push(&mut self, item: T) {
        if self.len < N {
            self.items[self.len] = item;
            self.len += 1;
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items[..self.len].iter()
    }
}

/// One way to end a segment before a refresh: its cost on the old segment's last prefix, what
/// the head costs at the refresh, and whether the refresh reads the head (then a layer changed
/// since the segment began is written instead of read: the head-change charge).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ending {
    pub(super) close: LinearCost,
    pub(super) head: i128,
    pub(super) reads_head: bool,
}

/// The per-request cost structure of a trace, independent of the segmentation.
pub(super) struct Model<'t> {
    pub(super) n: usize,
    pub(super) turns: &'t [Turn],
    pub(super) w: i128,
    pub(super) inp: i128,
    pub(super) h: i128,
    pub(super) x_mem: i128,
    pub(super) ceiling: i128,
    pub(super) min_seg: usize,
    /// L_j: the logical conversation after request j.
    pub(super) len: Vec<i128>,
    /// u_j: request j's uncached tail.
    pub(super) u: Vec<i128>,
    /// Ways through the gap before request j inside a segment (keep warm, rewrite, keep the head
    /// alive), each a cost linear in the previous cached prefix.
    pub(super) gap_options: Vec<Choices<LinearCost, 4>>,
    /// D_j: the part of request j's cost that does not depend on the segmentation.
    pub(super) fixed: Vec<i128>,
    /// Ways to end a segment before a refresh at s.
    pub(super) end_options: Vec<Choices<Ending, 3>>,
    /// Δ_j: the head's tokens, counted from its end, that request j's layers changed (0: none).
    /// A refresh at s after a segment begun at s′ writes `max Δ` over (s′, s] of the head instead
    /// of reading it.
    pub(super) changes: Vec<i128>,
    /// What writing a head token costs more than reading it (`w_head − r`).
    pub(super) head_change_rate: i128,
    /// Whether a plan may clear old tool results (the provider can, the assumptions allow it,
    /// and the trace says where tool results are).
    pub(super) can_mask: bool,
    /// T_j: tool-result tokens of requests 1..=j.
    pub(super) tools: Vec<i128>,
    /// B_q = T_{g(q)−1}, where g(q) is the oldest request whose results a clear at q keeps (the
    /// latest `mask_keep_tool_uses` uses before q): a clear at q leaves every tool result of the
    /// segment before g(q) cleared. Nondecreasing in q.
    pub(super) clear_to: Vec<i128>,
    /// min over j ≥ q of `clear_to[j]` (index n + 1: none left): a state whose B is below
    /// `clear_floor[q + 1]` can make every clear any other state of its segment can after q.
    pub(super) clear_floor: Vec<i128>,
    /// Whether the mask program drops the states another state of the same segment dominates
    /// (see [`crate::optimum`]'s `masks` module). Off only to check that it changes nothing.
    pub(super) prune: bool,
    /// Ways through the gap before a request sent with a clear (only the head is read).
    pub(super) mask_options: Vec<Choices<Ending, 3>>,
}

impl Model<'_> {
    pub(super) fn base(&self, s: usize) -> i128 {
        if s == 1 { self.h } else { self.h + self.x_mem }
    }

    /// m_s: the cached prefix before request j of a segment started at s is `m_s + y_j`.
    pub(super) fn slope(&self, s: usize) -> i128 {
        self.base(s) - self.len[s - 1]
    }

    /// y_j for the prefix request j reads (that of request j − 1).
    pub(super) fn y(&self, j: usize) -> i128 {
        self.len[j - 1] - self.u[j - 1]
    }

    /// The first request of a segment started at s, without the head's own cost at a refresh
    /// (that belongs to the ending, which knows whether the head was kept).
    pub(super) fn start_cost(&self, s: usize) -> i128 {
        let c_s = self.base(s) + self.len[s] - self.len[s - 1] - self.u[s];
        if s == 1 {
            self.w * c_s + self.inp * self.u[s]
        } else {
            self.w * (c_s - self.h) + self.inp * self.u[s]
        }
    }

    pub(super) fn fits(&self, s: usize, e: usize) -> bool {
        self.slope(s) + self.len[e] <= self.ceiling
    }

    /// What an ending costs besides its close (the head at the refresh and, if it reads the head,
    /// the `tier` head tokens a layer change made new).
    pub(super) fn head_cost(&self, ending: &Ending, tier: i128) -> i128 {
        let charge = if ending.reads_head {
            self.head_change_rate * tier.min(self.h)
        } else {
            0
        };
        ending.head + charge
    }

    /// The cheapest way through the gap before request j inside a segment, after a request that
    /// cached `c`.
    pub(super) fn gap_cost(&self, j: usize, c: i128) -> i128 {
        self.gap_options[j]
            .iter()
            .map(|&(a, b)| a * c + b)
            .min()
            .unwrap_or(0)
    }

    /// What the cheapest ending before a refresh at s costs (see [`Model::ending`]).
    pub(super) fn end_cost(&self, s: usize, prefix: i128, tier: i128) -> i128 {
        let end = self.ending(s, prefix, tier);
        end.close.0 * prefix + end.close.1 + self.head_cost(&end, tier)
    }

    /// The cheapest way to end a segment before a refresh at s, at the old prefix `prefix`, for a
    /// segment that owes `tier` changed head tokens.
    pub(super) fn ending(&self, s: usize, prefix: i128, tier: i128) -> Ending {
        self.end_options[s]
            .iter()
            .copied()
            .min_by_key(|o| o.close.0 * prefix + o.close.1 + self.head_cost(o, tier))
            .unwrap_or_default()
    }

    /// The exact model cost of a plan: every gap and segment end takes its cheapest option at
    /// the prefix the plan actually has there, and every refresh that reads the head pays for
    /// the layers changed since its segment began.
    pub(super) fn evaluate(&self, starts: &[bool]) -> i128 {
        let mut total = 0;
        let mut s = 1;
        let mut tier = 0;
        for j in 1..=self.n {
            if j == 1 {
                total += self.start_cost(1);
                continue;
            }
            tier = tier.max(self.changes[j]);
            if starts[j - 1] {
                let old = self.slope(s) + self.len[j - 1] - self.u[j - 1];
                total += self.end_cost(j, old, tier) + self.start_cost(j);
                s = j;
                tier = 0;
            } else {
                let c = self.slope(s) + self.y(j);
                total += self.gap_cost(j, c) + self.fixed[j];
            }
        }
        total
    }

    /// The prefixes a plan has at each gap and at each segment end (the representatives of the
    /// next refinement round).
    pub(super) fn prefixes(&self, starts: &[bool]) -> (Vec<i128>, Vec<i128>) {
        let mut gap_rep = vec![0i128; self.n + 1];
        let mut end_rep = vec![0i128; self.n + 2];
        let mut s = 1;
        for j in 2..=self.n {
            let c = self.slope(s) + self.y(j);
            gap_rep[j] = c;
            end_rep[j] = c;
            if starts[j - 1] {
                s = j;
            }
        }
        (gap_rep, end_rep)
    }
}
