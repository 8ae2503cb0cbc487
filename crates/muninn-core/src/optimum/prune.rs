//! Dropping the mask program's dominated states, exactly.
//!
//! # Dominance inside a segment
//!
//! Two states X and Y of the same segment after request q, neither sent with a clear, with
//! B_X > B_Y (X has cleared more: its prompt is smaller) and X strictly cheaper so far. Every
//! cost of a request is nondecreasing in the cached prefix (each way through a gap has a slope
//! ≥ 0), so X follows every plan of Y for no more, but one:
//!
//! - Y appends: X's prompt fits wherever Y's does, and its cached prefix is no larger.
//! - Y clears at j: both reach the same state (same start, B = B_j, the same shorter prompt),
//!   X for no more — provided X may clear wherever Y may, which holds when B_X is below every
//!   later clear point (`clear_floor[q + 1]`); only such X are used.
//! - Y refreshes at a boundary: X may too (same start, same minimum), to the same state.
//! - Y refreshes where the ceiling forces it off a boundary: Y, the larger prompt, stops
//!   fitting first, at j*_Y, and may refresh there where X still fits and may not.
//!
//! So Y is dropped and that one plan is kept as a *ghost*: Y fits until j*_Y, so the plan is
//! "append through j*_Y − 1, refresh at j*_Y", whose cost is known at q; it is offered at j*_Y
//! beside the live states' refreshes (when j*_Y is within the trace, not a boundary, and late
//! enough in the segment to refresh). Y's line cannot be met by another plan before j*_Y (no
//! later clear lands on B_Y, which is below B_X), so the ghost's cost is the one Y's line would
//! have carried. The relation chains (X may itself be dropped for a cheaper Z), and every
//! comparison is strict, so a dropped state wins no comparison the optimal plan goes through;
//! ties between offers are settled by the rank the program's scan order gives them, ghosts
//! included. The program returns the same plan, to the micro-dollar, as without dropping
//! (`optimum_mask::dropping_dominated_states_changes_no_plan`).
//!
//! # A ghost's cost in O(log n + long gaps)
//!
//! Where one way through a gap is the cheapest at every prefix at least the head (short gaps:
//! keep it warm), the append's cost is linear in the prefix and prefix sums give a ghost's run
//! of appends at once; the other requests (few: long gaps) are priced one by one. A ghost whose
//! prefix could fall below the head is priced request by request.

use super::masks::{Offer, State};
use super::model::Model;

/// The pruning's tables and the ghosts waiting for their request.
pub(super) struct Pruner {
    /// Σ slope over the linear requests 2..=k.
    slope_sum: Vec<i128>,
    /// Σ (slope·y + constant + D_k) over the linear requests 2..=k.
    constant_sum: Vec<i128>,
    /// The requests whose append is not linear at every prefix ≥ the head, ascending.
    bent: Vec<usize>,
    /// min over j ≥ k of y_j = L_{j−1} − u_{j−1} (the prefix an append at j reads, less the
    /// segment's offset).
    y_floor: Vec<i128>,
    /// The cheapest ghost (a dropped state's forced refresh) at each request.
    ghosts: Vec<Option<Offer>>,
    /// Scratch: which states of `next` go.
    dropped: Vec<bool>,
}

impl Pruner {
    pub(super) fn new(m: &Model<'_>) -> Pruner {
        let n = m.n;
        let mut slope_sum = vec![0i128; n + 1];
        let mut constant_sum = vec![0i128; n + 1];
        let mut bent = Vec::new();
        let mut y_floor = vec![i128::MAX; n + 2];
        for k in 2..=n {
            let (mut sa, mut sb) = (slope_sum[k - 1], constant_sum[k - 1]);
            match linear_from_head(m, k) {
                Some((alpha, beta)) => {
                    sa += alpha;
                    sb += alpha * m.y(k) + beta + m.fixed[k];
                }
                None => bent.push(k),
            }
            slope_sum[k] = sa;
            constant_sum[k] = sb;
        }
        for k in (2..=n).rev() {
            y_floor[k] = y_floor[k + 1].min(m.y(k));
        }
        Pruner {
            slope_sum,
            constant_sum,
            bent,
            y_floor,
            ghosts: vec![None; n + 2],
            dropped: Vec::new(),
        }
    }

    /// The cheaper of the live states' refresh at q and the ghosts' (the earlier in the
    /// program's order on a tie).
    pub(super) fn with_ghost(&mut self, q: usize, live: Option<Offer>) -> Option<Offer> {
        let ghost = self.ghosts.get_mut(q).and_then(Option::take);
        match (live, ghost) {
            (Some(l), Some(g)) => Some(if (g.v, g.rank) < (l.v, l.rank) { g } else { l }),
            (l, g) => l.or(g),
        }
    }

    /// Drops from `next` (the states after request q) every state another state of its segment
    /// dominates, keeping its forced refresh as a ghost.
    pub(super) fn drop_dominated(&mut self, m: &Model<'_>, q: usize, next: &mut Vec<State>) {
        if q >= m.n || !m.can_mask {
            return;
        }
        let mut dropped = std::mem::take(&mut self.dropped);
        dropped.clear();
        dropped.resize(next.len(), false);
        let mut end = next.len();
        while end > 0 {
            let s = next[end - 1].s;
            let start = end - next[..end].iter().rev().take_while(|st| st.s == s).count();
            self.drop_in_segment(m, q, &next[start..end], &mut dropped[start..end]);
            end = start;
        }
        let mut i = 0;
        next.retain(|_| {
            i += 1;
            !dropped[i - 1]
        });
        self.dropped = dropped;
    }

    /// One segment's states (B ascending, the cleared one last), scanned from the largest B
    /// down: a state is dropped when a state with a larger B that may clear wherever it may is
    /// strictly cheaper.
    fn drop_in_segment(&mut self, m: &Model<'_>, q: usize, group: &[State], dropped: &mut [bool]) {
        let floor = m.clear_floor[q + 1];
        let mut cheapest: Option<i128> = None;
        let mut larger_b: Option<i128> = None;
        for (i, st) in group.iter().enumerate().rev() {
            if st.masked {
                continue;
            }
            if larger_b.is_some_and(|b| st.b >= b) {
                // Not in the order the argument needs: keep the rest as they are.
                return;
            }
            larger_b = Some(st.b);
            if cheapest.is_some_and(|c| st.v > c) {
                dropped[i] = true;
                self.keep_ghost(m, q, st);
            } else if st.b < floor {
                cheapest = Some(cheapest.map_or(st.v, |c| c.min(st.v)));
            }
        }
    }

    /// Records a dropped state's forced refresh, if it has one.
    fn keep_ghost(&mut self, m: &Model<'_>, q: usize, st: &State) {
        let offset = st.a - st.b;
        let at = first_unfit(m, q, offset);
        if at > m.n || m.turns[at - 1].may_refresh() || at - st.s < m.min_seg {
            return;
        }
        let v =
            st.v + self.appends(m, offset, q + 1, at - 1) + m.refresh_cost(at, offset + m.y(at));
        let offer = Offer {
            v,
            node: st.node,
            rank: st.rank(),
        };
        let slot = &mut self.ghosts[at];
        if slot.is_none_or(|g| (v, offer.rank) < (g.v, g.rank)) {
            *slot = Some(offer);
        }
    }

    /// Σ over j in [from, to] of appending j to a segment of offset `offset` (no clear before).
    fn appends(&self, m: &Model<'_>, offset: i128, from: usize, to: usize) -> i128 {
        if from > to {
            return 0;
        }
        if offset + self.y_floor[from] < m.h {
            return (from..=to)
                .map(|j| m.append_cost(j, offset + m.y(j), false))
                .sum();
        }
        let linear = offset * (self.slope_sum[to] - self.slope_sum[from - 1])
            + (self.constant_sum[to] - self.constant_sum[from - 1]);
        let lo = self.bent.partition_point(|&k| k < from);
        let hi = self.bent.partition_point(|&k| k <= to);
        let bent: i128 = self.bent[lo..hi]
            .iter()
            .map(|&j| m.append_cost(j, offset + m.y(j), false))
            .sum();
        linear + bent
    }
}

/// The way through the gap before request k that is cheapest at every prefix at least the
/// head, if one is: (slope, constant). None where the cheapest way changes above the head.
fn linear_from_head(m: &Model<'_>, k: usize) -> Option<(i128, i128)> {
    let options = &m.gap_options[k];
    let Some(&best) = options.iter().min_by_key(|&&(a, b)| (a * m.h + b, a)) else {
        return Some((0, 0));
    };
    options
        .iter()
        .all(|&(a, b)| best.0 <= a && best.0 * m.h + best.1 <= a * m.h + b)
        .then_some(best)
}

/// The first request after q whose prompt does not fit under the ceiling for a segment whose
/// prompt at request j is `offset + L_j` (n + 1: none; L never decreases).
fn first_unfit(m: &Model<'_>, q: usize, offset: i128) -> usize {
    let room = m.ceiling - offset;
    q + 1 + m.len[q + 1..=m.n].partition_point(|&l| l <= room)
}
