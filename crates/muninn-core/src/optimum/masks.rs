//! The program with the `mask` action: a dynamic program over (segment start, last clear).
//!
//! # Why that state is enough
//!
//! A clear at request q removes every tool result of the segment before q except those of the
//! latest `keep` uses (the accounting's rule, [`crate::session`]). The results still in the prompt
//! are always a contiguous suffix of the segment's (a clear keeps a suffix, later requests append),
//! so a clear that removes anything keeps exactly the suffix it would keep had nothing been cleared
//! before: from request g(q) on. After it, the segment has lost the tool results of requests
//! [s, g(q)), whatever clears came before, and request j's prompt is
//!
//! ```text
//! P_j = A_s − B_q + L_j,   A_s = b_s − L_{s−1} + T_{s−1},   B_q = T_{g(q)−1}
//! ```
//!
//! (b_s the segment's rehydrated base, L the logical conversation, T the tool-result tokens so
//! far). So the state after request e is the segment's start s and the B of its latest clear (B =
//! T_{s−1} before any), plus whether request e itself was the clear (a cleared request carries its
//! breakpoint on its last block, so its cached prefix keeps its uncached tail). A clear at q is
//! admissible from a state when it removes something (B_q > B; a clear that removes nothing
//! rewrites the prompt for no saving) and the shorter prompt fits under the ceiling.
//!
//! # The program
//!
//! Every state carries its exact cached prefix, so each gap's cheapest way through it is taken at
//! the prefix the plan really has — no representative prefixes here: over the model's costs the
//! program is exact over every plan of the action space (refresh at a boundary once the segment
//! has its minimum length, or wherever the ceiling forces it; clear at any request after a
//! segment's first that removes something; append otherwise). States with the same start and the
//! same B have the same future, so only the cheaper is kept: at request e there are at most (starts
//! whose segment still fits) × (distinct B among their clears) states, each advanced in O(1) per
//! request, and a clear at q takes the cheapest state of each start — O(Σₑ |states|), at most
//! O(n · S · K) for S live starts and K live clear points; the ceiling bounds both.
//!
//! States another state of the same segment dominates are dropped as the program goes (exactly:
//! the same plan, to the micro-dollar; see [`super::prune`]).
//!
//! This space holds every plan an online policy can take: policies mask only where something is
//! clearable (the decider's `mask_gain` is `None` otherwise), refresh only at boundaries (or where
//! the recorded client compacted) after the minimum segment or when the ceiling forces it, and
//! never mask and refresh at one request.

use super::model::{Choices, Model};
use super::options::GapRates;
use super::prune::Pruner;
use crate::replay::{ReplayConfig, Turn};

const NONE: u32 = u32::MAX;

/// One state of the program after request e.
#[derive(Debug, Clone, Copy)]
pub(super) struct State {
    /// The segment's first request.
    pub(super) s: usize,
    /// A_s: the segment's prompt before request j is `a − b + L_j`.
    pub(super) a: i128,
    /// B of the segment's latest clear (T_{s−1} before any).
    pub(super) b: i128,
    /// Whether request e was sent with a clear.
    pub(super) masked: bool,
    /// The cheapest cost so far.
    pub(super) v: i128,
    /// The plan's latest event (segment start or clear), in the arena.
    pub(super) node: u32,
}

impl State {
    /// Where the state stands in the program's list (segments by start, then B, the cleared
    /// one last): the first of equal offers in that order wins, as the program's scan has it.
    pub(super) fn rank(&self) -> (usize, i128, bool) {
        (self.s, self.b, self.masked)
    }
}

/// A way to reach a state, and the rank of the state it comes from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offer {
    pub(super) v: i128,
    pub(super) node: u32,
    pub(super) rank: (usize, i128, bool),
}

/// What the mask program found and how much work it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskProgramRun {
    /// The plan's model cost, in rate·token units.
    pub cost: i128,
    /// Requests that start a segment.
    pub starts: Vec<bool>,
    /// Requests sent with a clear.
    pub masks: Vec<bool>,
    /// States advanced over the trace (Σ over requests).
    pub states: u64,
    /// The most states alive after one request.
    pub peak_states: usize,
}

/// An event of a plan: request `j` starts a segment or is sent with a clear.
#[derive(Debug, Clone, Copy)]
struct Event {
    prev: u32,
    j: u32,
    mask: bool,
}

impl Model<'_> {
    /// Adds what the mask program needs: the tool-result tokens, the clear points, and the ways
    /// through a gap before a clear. Masks are possible only where the provider and the
    /// assumptions allow them and the trace has tool results.
    pub(super) fn with_tool_results(
        mut self,
        turns: &[Turn],
        rates: &GapRates,
        config: &ReplayConfig<'_>,
    ) -> Self {
        let n = self.n;
        let keep = config.assumptions.mask_keep_tool_uses;
        self.tools = vec![0; n + 1];
        for j in 1..=n {
            self.tools[j] = self.tools[j - 1] + turns[j - 1].tools.tokens as i128;
        }
        self.can_mask = config.assumptions.capabilities(config.price).mask && self.tools[n] > 0;
        if !self.can_mask {
            return self;
        }
        // g(q): walk back over the requests that added tool results, keeping `keep` uses (each
        // request's results count as at least one use, as the accounting counts them) — request
        // q's own results first, as the provider counts the uses of the request it clears.
        self.clear_to = vec![0; n + 1];
        let mut with_tools: Vec<usize> = Vec::new();
        for q in 1..=n {
            let uses = with_tools.iter().rev().map(|&i| turns[i - 1].tools.uses);
            let arriving = crate::session::arriving_uses(&turns[q - 1].tools);
            let kept = crate::mask::kept_before(arriving, uses, keep);
            let keep_from = if kept == 0 {
                q
            } else {
                with_tools[with_tools.len() - kept]
            };
            self.clear_to[q] = self.tools[keep_from - 1];
            if !turns[q - 1].tools.is_none() {
                with_tools.push(q);
            }
        }
        self.clear_floor = vec![i128::MAX; n + 2];
        for q in (1..=n).rev() {
            self.clear_floor[q] = self.clear_floor[q + 1].min(self.clear_to[q]);
        }
        self.mask_options = vec![Choices::default(); n + 1];
        for j in 2..=n {
            let gap = turns[j - 1].at_ms - turns[j - 2].at_ms;
            self.mask_options[j] = rates.before_mask(gap);
        }
        self
    }

    /// A_s of a segment started at s (see the module docs).
    fn kept_base(&self, s: usize) -> i128 {
        self.base(s) - self.len[s - 1] + self.tools[s - 1]
    }

    /// The cached prefix after request j in a state (a cleared request caches its whole prompt).
    fn cached_after(&self, a: i128, b: i128, j: usize, masked: bool) -> i128 {
        a - b + self.len[j] - if masked { 0 } else { self.u[j] }
    }

    /// Request j appended to its segment after a request that cached `c`.
    pub(super) fn append_cost(&self, j: usize, c: i128, after_mask: bool) -> i128 {
        let gap = self.gap_cost(j, c);
        // After a clear the previous request cached its uncached tail too: less to write now.
        let tail = if after_mask {
            self.w * self.u[j - 1]
        } else {
            0
        };
        gap + self.fixed[j] - tail
    }

    /// Request j sent with a clear, its prompt `prompt`: the head (read if kept warm through the
    /// gap), the rest of the shorter prompt written.
    fn mask_cost(&self, j: usize, c: i128, prompt: i128) -> i128 {
        let head = self.mask_options[j]
            .iter()
            .map(|o| o.close.0 * c + o.close.1 + o.head)
            .min()
            .unwrap_or(0);
        head + self.w * (prompt - self.h)
    }

    /// The segment before request j ended (a refresh), and j begins the next.
    pub(super) fn refresh_cost(&self, j: usize, c: i128) -> i128 {
        self.end_cost(j, c, 0) + self.start_cost(j)
    }

    /// The exact model cost of a plan with clears (`masks[j − 1]`: request j is sent with one; a
    /// clear that removes nothing is priced as the rewrite it is).
    pub(super) fn evaluate_masked(&self, starts: &[bool], masks: &[bool]) -> i128 {
        let mut total = self.start_cost(1);
        let (mut a, mut b, mut masked) = (self.kept_base(1), self.tools[0], false);
        for j in 2..=self.n {
            let c = self.cached_after(a, b, j - 1, masked);
            if starts[j - 1] {
                total += self.refresh_cost(j, c);
                (a, b, masked) = (self.kept_base(j), self.tools[j - 1], false);
            } else if masks.get(j - 1).copied().unwrap_or(false) {
                b = b.max(self.clear_to.get(j).copied().unwrap_or(b));
                total += self.mask_cost(j, c, a - b + self.len[j]);
                masked = true;
            } else {
                total += self.append_cost(j, c, masked);
                masked = false;
            }
        }
        total
    }

    /// The cheapest plan with clears: (model cost, starts, masks). See the module docs.
    pub(super) fn solve_masked(&self) -> (i128, Vec<bool>, Vec<bool>) {
        let run = self.run_masked();
        (run.cost, run.starts, run.masks)
    }

    /// [`Model::solve_masked`] with what the program did.
    pub(super) fn run_masked(&self) -> MaskProgramRun {
        let n = self.n;
        let mut arena = vec![Event {
            prev: NONE,
            j: 1,
            mask: false,
        }];
        let mut states = vec![State {
            s: 1,
            a: self.kept_base(1),
            b: self.tools[0],
            masked: false,
            v: self.start_cost(1),
            node: 0,
        }];
        let mut next: Vec<State> = Vec::new();
        let mut pruner = self.prune.then(|| Pruner::new(self));
        let (mut advanced, mut peak) = (0u64, 1usize);
        for q in 2..=n {
            next.clear();
            advanced += states.len() as u64;
            let mut refresh = self.step(q, &states, &mut next, &mut arena);
            if let Some(pruner) = pruner.as_mut() {
                refresh = pruner.with_ghost(q, refresh);
                pruner.drop_dominated(self, q, &mut next);
            }
            let refresh = refresh.map(|o| (o.v, o.node));
            let fallback = next.is_empty();
            let refresh = refresh.or_else(|| {
                // Nothing may continue (a request larger than the ceiling, or a minimum segment
                // it leaves no room for): start a segment here regardless, as the Li Chao
                // program does.
                fallback
                    .then(|| {
                        states.iter().map(|st| {
                            let c = self.cached_after(st.a, st.b, q - 1, st.masked);
                            (st.v + self.refresh_cost(q, c), st.node)
                        })
                    })
                    .and_then(|costs| costs.min_by_key(|&(v, _)| v))
            });
            if let Some((v, prev)) = refresh {
                arena.push(Event {
                    prev,
                    j: q as u32,
                    mask: false,
                });
                next.push(State {
                    s: q,
                    a: self.kept_base(q),
                    b: self.tools[q - 1],
                    masked: false,
                    v,
                    node: (arena.len() - 1) as u32,
                });
            }
            std::mem::swap(&mut states, &mut next);
            peak = peak.max(states.len());
        }
        let best = states.iter().min_by_key(|st| st.v).copied();
        let mut starts = vec![false; n];
        let mut masks = vec![false; n];
        let mut node = best.map_or(NONE, |st| st.node);
        while node != NONE {
            let event = arena[node as usize];
            let flags = if event.mask { &mut masks } else { &mut starts };
            flags[event.j as usize - 1] = true;
            node = event.prev;
        }
        starts[0] = true;
        MaskProgramRun {
            cost: best.map_or(0, |st| st.v),
            starts,
            masks,
            states: advanced,
            peak_states: peak,
        }
    }

    /// Request q from every state after q − 1: appends and clears go to `next` (the cheapest of
    /// equal futures kept), the cheapest refresh is returned (cost including q, and its event).
    fn step(
        &self,
        q: usize,
        states: &[State],
        next: &mut Vec<State>,
        arena: &mut Vec<Event>,
    ) -> Option<Offer> {
        let boundary = self.turns[q - 1].may_refresh();
        let clear_to = if self.can_mask { self.clear_to[q] } else { 0 };
        let mut refresh: Option<Offer> = None;
        let mut group = 0;
        while group < states.len() {
            let s = states[group].s;
            let end = group + states[group..].iter().take_while(|st| st.s == s).count();
            let mut mask: Option<Offer> = None;
            for st in &states[group..end] {
                let c = self.cached_after(st.a, st.b, q - 1, st.masked);
                let fits = st.a - st.b + self.len[q] <= self.ceiling;
                if q - s >= self.min_seg && (boundary || !fits) {
                    offer(&mut refresh, st, st.v + self.refresh_cost(q, c));
                }
                if fits {
                    let v = st.v + self.append_cost(q, c, st.masked);
                    push_merged(
                        next,
                        State {
                            masked: false,
                            v,
                            ..*st
                        },
                    );
                }
                let prompt = st.a - clear_to + self.len[q];
                if self.can_mask && clear_to > st.b && prompt <= self.ceiling {
                    offer(&mut mask, st, st.v + self.mask_cost(q, c, prompt));
                }
            }
            if let Some(Offer { v, node: prev, .. }) = mask {
                arena.push(Event {
                    prev,
                    j: q as u32,
                    mask: true,
                });
                next.push(State {
                    s,
                    a: states[group].a,
                    b: clear_to,
                    masked: true,
                    v,
                    node: (arena.len() - 1) as u32,
                });
            }
            group = end;
        }
        refresh
    }
}

/// Keeps the cheaper of `best` and reaching it from `from` for `v` (the earlier on a tie).
fn offer(best: &mut Option<Offer>, from: &State, v: i128) {
    if best.is_none_or(|b| v < b.v) {
        *best = Some(Offer {
            v,
            node: from.node,
            rank: from.rank(),
        });
    }
}

/// Appends a state, or keeps the cheaper of it and the last one when both have the same future
/// (same start, same clears, neither request a clear).
fn push_merged(next: &mut Vec<State>, state: State) {
    if let Some(last) = next.last_mut()
        && last.s == state.s
        && last.b == state.b
        && !last.masked
    {
        if state.v < last.v {
            *last = state;
        }
        return;
    }
    next.push(state);
}
