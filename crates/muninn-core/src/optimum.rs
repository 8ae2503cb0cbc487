//! The hindsight optimum: a dynamic program over a reconstructed trace, with full knowledge of
//! every future gap and size, over the same actions the online policies have (append, ping,
//! flush, refresh at a boundary), within the same quality bounds (minimum segment, ceiling).
//!
//! # The program
//!
//! A plan partitions the requests into segments `[s, e]`. With the segment's rehydrated base
//! `b_s` (head H for the first segment, H + X after a refresh) and the logical conversation length
//! `L`, request j's cached prefix is `c_j(s) = b_s − L_{s−1} + (L_j − u_j) = m_s + y'_j`: the
//! segment enters only through the constant `m_s`. Every cost is linear in the prefix it touches:
//!
//! - a request after gap g either pays a cold rewrite `w·c_{j−1}` or keeps warm with `k(g)` pings
//!   and reads: `(k+1)·r·c_{j−1} + k·φ` (the choice is taken per gap, see below); the new tail and
//!   uncached input do not depend on s;
//! - a segment followed by a refresh ends with a flush `r·c_e + φ_F`, made at the latest warm
//!   moment so that the head stays warm as long as it can;
//! - a refreshed segment starts by reading (or rewriting) the head and writing `X + Δ_s`.
//!
//! So `OPT(e) = G(e) + min_s (K_s + m_s·x_e)`, a minimum over lines with slope `m_s` evaluated at
//! `x_e` = the sum of per-request coefficients — a Li Chao tree answers each query in O(log n). The
//! ceiling (`P_e(s) ≤ C`) removes the oldest segment starts as e grows, a sliding window over lines;
//! a two-stack queue of Li Chao trees with undo handles the deletions, so the whole program is
//! O(n log n). The minimum segment delays each line's insertion; restarts are allowed only at
//! boundaries (the first request always starts a segment; a refresh the ceiling forces may fall
//! inside a tool loop, as it would online).
//!
//! The per-gap keep-warm choice is made with the prefix the gap would have without refreshes
//! (capped at the ceiling). The chosen plan is then *executed* by the replay engine, which takes the
//! exact cheaper choice for the actual prefix at every gap, so the reported optimum is priced by the
//! cache model exactly like every online policy.

use crate::cache::Ttl;
use crate::decide::{Action, Alternative, Decision, Event, Reason, SessionView};
use crate::money::{MicroUsd, Tokens};
use crate::replay::{Hindsight, ReplayConfig, Turn};

/// The optimum's plan: which requests start a new segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimumPlan {
    /// `starts[j]`: request j begins a new segment (a refresh before it).
    pub starts: Vec<bool>,
    /// The program's own estimate of the plan's cost (input side, excluding recorded output), in
    /// micro-dollars.
    pub estimate: MicroUsd,
}

#[derive(Debug, Clone, Copy)]
struct Line {
    m: i128,
    k: i128,
    id: u32,
}

impl Line {
    fn at(&self, x: i128) -> i128 {
        self.m * x + self.k
    }
}

/// A Li Chao tree over a fixed, sorted set of query points, with an undo log.
struct LiChao {
    xs: Vec<i128>,
    nodes: Vec<Option<Line>>,
    log: Vec<(usize, Option<Line>)>,
}

impl LiChao {
    fn new(xs: Vec<i128>) -> LiChao {
        let size = 4 * xs.len().max(1);
        LiChao {
            xs,
            nodes: vec![None; size],
            log: Vec::new(),
        }
    }

    fn insert(&mut self, mut line: Line) {
        if self.xs.is_empty() {
            return;
        }
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.xs.len() - 1);
        loop {
            let Some(current) = self.nodes[node] else {
                self.log.push((node, None));
                self.nodes[node] = Some(line);
                return;
            };
            let mid = (lo + hi) / 2;
            let left_better = line.at(self.xs[lo]) < current.at(self.xs[lo]);
            let mid_better = line.at(self.xs[mid]) < current.at(self.xs[mid]);
            let mut loser = line;
            if mid_better {
                self.log.push((node, Some(current)));
                self.nodes[node] = Some(line);
                loser = current;
            }
            if lo == hi {
                return;
            }
            if left_better != mid_better {
                node *= 2;
                hi = mid;
            } else {
                node = node * 2 + 1;
                lo = mid + 1;
            }
            line = loser;
        }
    }

    fn query(&self, xi: usize) -> Option<(i128, u32)> {
        if self.xs.is_empty() {
            return None;
        }
        let x = self.xs[xi];
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.xs.len() - 1);
        let mut best: Option<(i128, u32)> = None;
        loop {
            if let Some(line) = self.nodes[node] {
                let v = line.at(x);
                if best.is_none_or(|(b, _)| v < b) {
                    best = Some((v, line.id));
                }
            }
            if lo == hi {
                return best;
            }
            let mid = (lo + hi) / 2;
            if xi <= mid {
                node *= 2;
                hi = mid;
            } else {
                node = node * 2 + 1;
                lo = mid + 1;
            }
        }
    }

    fn undo_to(&mut self, mark: usize) {
        while self.log.len() > mark {
            if let Some((node, old)) = self.log.pop() {
                self.nodes[node] = old;
            }
        }
    }
}

/// A queue of lines (oldest first) supporting push-back, pop-front and min-queries, built from two
/// stacks of Li Chao trees with undo: every line is inserted at most twice and undone at most
/// twice, so each operation is amortised O(log n).
struct LineQueue {
    front: LiChao,
    /// Stack of (undo mark before insertion, line); the top is the oldest line.
    front_lines: Vec<(usize, Line)>,
    back: LiChao,
    back_lines: Vec<Line>,
}

impl LineQueue {
    fn new(xs: Vec<i128>) -> LineQueue {
        LineQueue {
            front: LiChao::new(xs.clone()),
            front_lines: Vec::new(),
            back: LiChao::new(xs),
            back_lines: Vec::new(),
        }
    }

    fn push(&mut self, line: Line) {
        self.back.insert(line);
        self.back_lines.push(line);
    }

    fn oldest(&self) -> Option<Line> {
        self.front_lines
            .last()
            .map(|&(_, l)| l)
            .or_else(|| self.back_lines.first().copied())
    }

    fn pop_front(&mut self) {
        if self.front_lines.is_empty() {
            self.back.undo_to(0);
            for line in self.back_lines.drain(..).rev() {
                let mark = self.front.log.len();
                self.front.insert(line);
                self.front_lines.push((mark, line));
            }
        }
        if let Some((mark, _)) = self.front_lines.pop() {
            self.front.undo_to(mark);
        }
    }

    fn query(&self, xi: usize) -> Option<(i128, u32)> {
        match (self.front.query(xi), self.back.query(xi)) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Pings needed to carry a prefix written at `t` warm to `t + gap` when the host decides
/// `before_ms` ahead of each expiry.
pub fn pings_needed(gap_ms: i64, ttl: Ttl, before_ms: i64) -> u64 {
    let t = ttl.millis();
    if gap_ms < t {
        0
    } else {
        let step = (t - before_ms).max(1);
        ((gap_ms - t) / step) as u64 + 1
    }
}

/// Computes the optimum's plan for a reconstructed trace.
pub fn plan(turns: &[Turn], head: Tokens, ttl: Ttl, config: &ReplayConfig<'_>) -> OptimumPlan {
    let n = turns.len();
    if n == 0 {
        return OptimumPlan {
            starts: Vec::new(),
            estimate: MicroUsd::ZERO,
        };
    }
    let a = config.assumptions;
    let price = config.price;
    let (r, w, inp, out) = (
        price.read.0 as i128,
        price.write(ttl).0 as i128,
        price.input.0 as i128,
        price.output.0 as i128,
    );
    let x_mem = a.rehydrate_tokens as i128;
    let h = head as i128;
    let ceiling = a.ceiling_tokens.unwrap_or(price.context_window) as i128;
    let before = a.decide_before_expiry_ms;
    let phi_ping = inp * a.ping_tokens as i128 + out;
    let phi_flush = inp * a.flush_prompt_tokens as i128 + out * x_mem;
    let min_seg = a.min_segment_requests.max(1) as usize;
    let head_cacheable = head >= price.min_cacheable;

    // Prefix sums over requests (1-indexed; index 0 is "before the first request").
    let mut len = vec![0i128; n + 1]; // L_j
    let mut u = vec![0i128; n + 1];
    let mut alpha_sum = vec![0i128; n + 1]; // A_j
    let mut y_sum = vec![0i128; n + 1]; // Σ α_j·(L_{j−1} − u_{j−1})
    let mut bd_sum = vec![0i128; n + 1]; // Σ β_j + D_j
    for j in 1..=n {
        let t = &turns[j - 1];
        len[j] = len[j - 1] + t.delta as i128;
        u[j] = t.uncached as i128;
        if j == 1 {
            continue;
        }
        let gap = t.at_ms - turns[j - 2].at_ms;
        let k = pings_needed(gap, ttl, before) as i128;
        let y = len[j - 1] - u[j - 1];
        let c_rep = (h + y).min(ceiling);
        let warm_alpha = (k + 1) * r;
        let (alpha, beta) = if warm_alpha * c_rep + k * phi_ping < w * c_rep {
            (warm_alpha, k * phi_ping)
        } else {
            (w, 0)
        };
        let d = w * ((len[j] - u[j]) - y) + inp * u[j];
        alpha_sum[j] = alpha_sum[j - 1] + alpha;
        y_sum[j] = y_sum[j - 1] + alpha * y;
        bd_sum[j] = bd_sum[j - 1] + beta + d;
    }
    alpha_sum[1] = 0;
    // Query points: x_e = A_e + r for e < n (a flush follows), A_n for the last.
    let x_of = |e: usize| {
        if e < n {
            alpha_sum[e] + r
        } else {
            alpha_sum[e]
        }
    };
    let mut xs: Vec<i128> = (1..=n).map(x_of).collect();
    xs.sort_unstable();
    xs.dedup();
    let x_index = |x: i128| xs.partition_point(|&v| v < x);

    let base = |s: usize| if s == 1 { h } else { h + x_mem };
    let slope = |s: usize| base(s) - len[s - 1];
    let start_cost = |s: usize| -> i128 {
        let t = &turns[s - 1];
        let c_s = base(s) + t.delta as i128 - u[s];
        if s == 1 {
            return w * c_s + inp * u[s];
        }
        let gap = t.at_ms - turns[s - 2].at_ms;
        let head_warm = head_cacheable && gap < 2 * ttl.millis() - before;
        let head_cost = if head_warm { r * h } else { w * h };
        head_cost + w * (c_s - h) + inp * u[s]
    };
    let g = |e: usize| -> i128 {
        let flush = if e < n {
            r * (len[e] - u[e]) + phi_flush
        } else {
            0
        };
        y_sum[e] + bd_sum[e] + flush
    };

    const INF: i128 = i128::MAX / 4;
    // opt[e]: the cheapest plan for requests 1..=e that ends a segment at e (flushing after it if
    // e < n), when request e + 1 starts at a boundary.
    let mut opt = vec![INF; n + 1];
    opt[0] = 0;
    let mut best_start = vec![0usize; n + 1];
    // forced[e]: the same, restricted to segments that cannot take request e + 1 under the
    // ceiling, so that e + 1 may start a segment inside a tool loop (a forced refresh).
    let mut forced = vec![INF; n + 1];
    let mut forced_start = vec![0usize; n + 1];
    let mut queue = LineQueue::new(xs.clone());
    let boundary = |s: usize| s == 1 || turns[s - 1].boundary;
    let line_for = |s: usize, opt: &[i128], forced: &[i128]| -> Option<Line> {
        let before = if boundary(s) {
            opt[s - 1]
        } else {
            forced[s - 1]
        };
        if before >= INF {
            return None;
        }
        let m = slope(s);
        let k = before + start_cost(s) - m * alpha_sum[s] - y_sum[s] - bd_sum[s];
        Some(Line { m, k, id: s as u32 })
    };
    let fits = |s: usize, e: usize| slope(s) + len[e] <= ceiling;

    for e in 1..=n {
        // Starts whose segment cannot take request e leave the window; the best of them, ended at
        // e − 1 and flushed, is what a forced refresh before e builds on.
        while let Some(oldest) = queue.oldest() {
            if fits(oldest.id as usize, e) {
                break;
            }
            if e >= 2 {
                let v = oldest.at(x_of(e - 1));
                let total = g(e - 1) + v;
                if total < forced[e - 1] {
                    forced[e - 1] = total;
                    forced_start[e - 1] = oldest.id as usize;
                }
            }
            queue.pop_front();
        }
        // Segment starts that have reached the minimum length become available.
        if e >= min_seg {
            let s = e + 1 - min_seg;
            if let Some(line) = line_for(s, &opt, &forced).filter(|_| fits(s, e)) {
                queue.push(line);
            }
        }
        let mut best = queue
            .query(x_index(x_of(e)))
            .map(|(v, id)| (v, id as usize));
        let consider =
            |s: usize, best: &mut Option<(i128, usize)>, opt: &[i128], forced: &[i128]| {
                if let Some(line) = line_for(s, opt, forced) {
                    let v = line.at(x_of(e));
                    if best.is_none_or(|(b, _)| v < b) {
                        *best = Some((v, s));
                    }
                }
            };
        if e == n {
            // The last segment needs no minimum length.
            for s in (e + 1).saturating_sub(min_seg).max(1)..=e {
                if fits(s, e) {
                    consider(s, &mut best, &opt, &forced);
                }
            }
        }
        if best.is_none() {
            // Nothing fits under the ceiling (a single request larger than it, or a minimum
            // segment the ceiling does not leave room for): start a segment here regardless.
            if forced[e - 1] >= INF && e >= 2 {
                forced[e - 1] = opt[e - 1];
                forced_start[e - 1] = best_start[e - 1];
            }
            consider(e, &mut best, &opt, &forced);
        }
        if let Some((v, s)) = best {
            opt[e] = g(e) + v;
            best_start[e] = s;
        }
    }

    let mut starts = vec![false; n];
    let mut e = n;
    let mut via_forced = false;
    while e > 0 {
        let s = if via_forced {
            forced_start[e]
        } else {
            best_start[e]
        }
        .max(1);
        starts[s - 1] = true;
        via_forced = !boundary(s);
        e = s - 1;
    }
    let estimate = if opt[n] >= INF { 0 } else { opt[n] };
    OptimumPlan {
        starts,
        estimate: MicroUsd(((estimate + 500_000) / 1_000_000) as i64),
    }
}

impl OptimumPlan {
    /// The plan's decision, answering the engine's events with hindsight: refresh where the plan
    /// starts a segment (flushing at the latest warm moment before it), and keep the cache warm
    /// through a gap exactly when that is cheaper than the cold rewrite it prevents.
    pub(crate) fn decide(
        &self,
        view: &SessionView,
        event: Event,
        now_ms: i64,
        future: &Hindsight<'_>,
    ) -> Decision {
        let Hindsight {
            next,
            turns,
            ttl,
            before_ms,
        } = *future;
        let restart = next > 0 && self.starts.get(next).copied().unwrap_or(false);
        let single = |action, reason, estimate| Decision {
            action,
            reason,
            alternatives: [Some(Alternative { action, estimate }), None, None],
        };
        match event {
            Event::Arrival { .. } => {
                if restart {
                    single(Action::Refresh, Reason::GrowthBreakEven, MicroUsd::ZERO)
                } else {
                    single(Action::Append, Reason::Warm, MicroUsd::ZERO)
                }
            }
            Event::Expiring => {
                if restart {
                    return single(
                        Action::Flush,
                        Reason::ColdRestartCheaper,
                        view.flush_cost(true),
                    );
                }
                let Some(expiry) = view.warm_until_ms else {
                    return single(Action::LetExpire, Reason::NoKeepWarm, MicroUsd::ZERO);
                };
                let Some(turn) = turns.get(next) else {
                    return single(Action::LetExpire, Reason::NoKeepWarm, MicroUsd::ZERO);
                };
                if expiry > turn.at_ms {
                    return single(Action::LetExpire, Reason::Warm, MicroUsd::ZERO);
                }
                // Pings from now: the first now, each later one TTL − before after the previous.
                // Counted as for a gap that began one ping interval before now.
                let remaining = turn.at_ms - now_ms;
                let k = pings_needed(remaining + ttl.millis() - before_ms, ttl, before_ms).max(1);
                let keep = MicroUsd(view.ping_cost().0 * k as i64)
                    + MicroUsd::of(view.prefix_tokens, view.rates.read);
                let rewrite = MicroUsd::of(view.prefix_tokens, view.rates.write);
                if keep < rewrite {
                    single(Action::Ping, Reason::ExpectedSavingExceedsPing, keep)
                } else {
                    single(Action::LetExpire, Reason::RentExhausted, rewrite)
                }
            }
        }
    }
}
