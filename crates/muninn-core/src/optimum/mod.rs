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
//! Each gap inside a segment has up to three ways through it — keep the prefix warm with pings,
//! let it expire and rewrite it (reading the head if its own, longer TTL outlived the gap), or ping
//! only as long as the head needs — and each segment end up to two (let the head go, or keep it
//! alive until the refresh). Every one is linear in the prefix, but which is cheapest depends on
//! the prefix, which depends on the segmentation. So the program is solved with representative
//! prefixes (those of never refreshing, of refreshing at every request, and their geometric mean),
//! each refined with the prefixes of the plan it found; every plan is priced exactly under the
//! model, and the cheapest is kept. The chosen plan is then *executed* by the replay engine, which
//! takes the exact cheapest way through every gap with hindsight, so the reported optimum is priced
//! by the cache model exactly like every online policy. Tests compare it with brute force over every
//! admissible segmentation of small traces, and check that no online policy ever beats it.

use crate::cache::Ttl;
use crate::money::{MicroUsd, Tokens};
use crate::replay::{ReplayConfig, Turn};

mod execute;

/// The optimum's plan: which requests start a new segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimumPlan {
    /// `starts[j]`: request j begins a new segment (a refresh before it).
    pub starts: Vec<bool>,
    /// The program's own estimate of the plan's cost (input side, excluding recorded output), in
    /// micro-dollars.
    pub estimate: MicroUsd,
}

/// A line `m·x + k`; `id` is the segment start it stands for (`EMPTY` marks an empty tree node).
/// Slopes are token counts and fit an `i64`; intercepts are sums of costs and need an `i128`.
#[derive(Debug, Clone, Copy)]
struct Line {
    k: i128,
    m: i64,
    id: u32,
}

const EMPTY: u32 = u32::MAX;

impl Line {
    const NONE: Line = Line {
        k: 0,
        m: 0,
        id: EMPTY,
    };

    fn at(&self, x: i128) -> i128 {
        self.m as i128 * x + self.k
    }
}

/// A Li Chao tree over a fixed, sorted set of query points, with an undo log. Nodes are reset by
/// undoing, never by reallocating, so one tree serves every solve of a trace.
struct LiChao {
    xs: Vec<i128>,
    nodes: Vec<Line>,
    log: Vec<(usize, Line)>,
}

impl LiChao {
    fn new() -> LiChao {
        LiChao {
            xs: Vec::new(),
            nodes: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Empties the tree and sets new query points.
    fn reset(&mut self, xs: &[i128]) {
        self.undo_to(0);
        self.xs.clear();
        self.xs.extend_from_slice(xs);
        let size = 2 * xs.len().max(1).next_power_of_two();
        if self.nodes.len() < size {
            self.nodes.resize(size, Line::NONE);
        }
    }

    fn insert(&mut self, mut line: Line) {
        if self.xs.is_empty() {
            return;
        }
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.xs.len() - 1);
        loop {
            let current = self.nodes[node];
            if current.id == EMPTY {
                self.log.push((node, current));
                self.nodes[node] = line;
                return;
            }
            let mid = (lo + hi) / 2;
            let left_better = line.at(self.xs[lo]) < current.at(self.xs[lo]);
            let mid_better = line.at(self.xs[mid]) < current.at(self.xs[mid]);
            let mut loser = line;
            if mid_better {
                self.log.push((node, current));
                self.nodes[node] = line;
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
            let line = self.nodes[node];
            if line.id != EMPTY {
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
    fn new() -> LineQueue {
        LineQueue {
            front: LiChao::new(),
            front_lines: Vec::new(),
            back: LiChao::new(),
            back_lines: Vec::new(),
        }
    }

    /// Empties the queue and sets new query points, reusing the trees' memory.
    fn reset(&mut self, xs: &[i128]) {
        self.front.reset(xs);
        self.back.reset(xs);
        self.front_lines.clear();
        self.back_lines.clear();
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

/// Touches (requests that refresh an entry), made at `0, step, 2·step, …`, needed for an entry that
/// lives `life` after each touch to be alive at `span`.
fn touches(span: i64, life: i64, step: i64) -> u64 {
    if span < life {
        1
    } else {
        ((span - life) / step.max(1)) as u64 + 2
    }
}

/// Pings needed to carry a prefix written at `t` warm to `t + gap` when the host decides
/// `before_ms` ahead of each expiry (the first ping at `t + ttl − before`).
pub fn pings_needed(gap_ms: i64, ttl: Ttl, before_ms: i64) -> u64 {
    head_pings_needed(gap_ms, ttl, ttl, before_ms)
}

/// Pings (at the tail's decision points) needed to keep a head with its own, longer TTL alive
/// from `t` to `t + gap`.
pub fn head_pings_needed(gap_ms: i64, ttl: Ttl, head_ttl: Ttl, before_ms: i64) -> u64 {
    let step = ttl.millis() - before_ms;
    if gap_ms < head_ttl.millis() {
        0
    } else {
        touches(gap_ms - step, head_ttl.millis(), step)
    }
}

/// A cost linear in a prefix `c`: `slope·c + constant`, in rate·token units.
type LinearCost = (i128, i128);

/// A few alternatives, inline (one per request of a million-request trace must not allocate).
#[derive(Debug, Clone, Copy)]
struct Choices<T: Copy + Default, const N: usize> {
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
    fn push(&mut self, item: T) {
        if self.len < N {
            self.items[self.len] = item;
            self.len += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.items[..self.len].iter()
    }
}

/// The per-request cost structure of a trace, independent of the segmentation.
struct Model<'t> {
    n: usize,
    turns: &'t [Turn],
    w: i128,
    inp: i128,
    h: i128,
    x_mem: i128,
    ceiling: i128,
    min_seg: usize,
    /// L_j: the logical conversation after request j.
    len: Vec<i128>,
    /// u_j: request j's uncached tail.
    u: Vec<i128>,
    /// Ways through the gap before request j inside a segment (keep warm, rewrite, keep the head
    /// alive), each a cost linear in the previous cached prefix.
    gap_options: Vec<Choices<LinearCost, 4>>,
    /// D_j: the part of request j's cost that does not depend on the segmentation.
    fixed: Vec<i128>,
    /// Ways to end a segment before a refresh at s: (cost on the old prefix, head cost at s).
    end_options: Vec<Choices<(LinearCost, i128), 3>>,
}

impl Model<'_> {
    fn base(&self, s: usize) -> i128 {
        if s == 1 { self.h } else { self.h + self.x_mem }
    }

    /// m_s: the cached prefix before request j of a segment started at s is `m_s + y_j`.
    fn slope(&self, s: usize) -> i128 {
        self.base(s) - self.len[s - 1]
    }

    /// y_j for the prefix request j reads (that of request j − 1).
    fn y(&self, j: usize) -> i128 {
        self.len[j - 1] - self.u[j - 1]
    }

    fn start_cost(&self, s: usize, head_cost: i128) -> i128 {
        let c_s = self.base(s) + self.len[s] - self.len[s - 1] - self.u[s];
        if s == 1 {
            self.w * c_s + self.inp * self.u[s]
        } else {
            head_cost + self.w * (c_s - self.h) + self.inp * self.u[s]
        }
    }

    fn fits(&self, s: usize, e: usize) -> bool {
        self.slope(s) + self.len[e] <= self.ceiling
    }

    /// The exact model cost of a plan: every gap and segment end takes its cheapest option at
    /// the prefix the plan actually has there.
    fn evaluate(&self, starts: &[bool]) -> i128 {
        let mut total = 0;
        let mut s = 1;
        for j in 1..=self.n {
            if j > 1 && starts[j - 1] {
                let old = self.slope(s) + self.len[j - 1] - self.u[j - 1];
                let ((rho, phi), head) = self.end_options[j]
                    .iter()
                    .copied()
                    .min_by_key(|&((rho, phi), head)| rho * old + phi + head)
                    .unwrap_or(((0, 0), 0));
                total += rho * old + phi + self.start_cost(j, head);
                s = j;
            } else if j == 1 {
                total += self.start_cost(1, 0);
            } else {
                let c = self.slope(s) + self.y(j);
                total += self.gap_options[j]
                    .iter()
                    .map(|&(a, b)| a * c + b)
                    .min()
                    .unwrap_or(0)
                    + self.fixed[j];
            }
        }
        total
    }

    /// The optimal segmentation when every gap and segment end is priced at a representative
    /// prefix (`gap_rep[j]`, `end_rep[s]`), by the Li Chao program of the module docs.
    fn solve(&self, gap_rep: &[i128], end_rep: &[i128], queue: &mut LineQueue) -> Vec<bool> {
        let n = self.n;
        let pick = |options: &Choices<LinearCost, 4>, c: i128| -> LinearCost {
            options
                .iter()
                .copied()
                .min_by_key(|&(a, b)| a * c + b)
                .unwrap_or((self.w, 0))
        };
        let mut alpha_sum = vec![0i128; n + 1];
        let mut y_sum = vec![0i128; n + 1];
        let mut bd_sum = vec![0i128; n + 1];
        for j in 2..=n {
            let (alpha, beta) = pick(&self.gap_options[j], gap_rep[j]);
            alpha_sum[j] = alpha_sum[j - 1] + alpha;
            y_sum[j] = y_sum[j - 1] + alpha * self.y(j);
            bd_sum[j] = bd_sum[j - 1] + beta + self.fixed[j];
        }
        let mut end = vec![((0i128, 0i128), 0i128); n + 2];
        for s in 2..=n {
            end[s] = self.end_options[s]
                .iter()
                .copied()
                .min_by_key(|&((rho, phi), head)| rho * end_rep[s] + phi + head)
                .unwrap_or(((0, 0), 0));
        }
        // Query points: x_e = A_e + ρ for e < n (the old segment's end), A_n for the last.
        let x_of = |e: usize| {
            if e < n {
                alpha_sum[e] + end[e + 1].0.0
            } else {
                alpha_sum[e]
            }
        };
        let mut xs: Vec<i128> = (1..=n).map(x_of).collect();
        xs.sort_unstable();
        xs.dedup();
        let x_index = |x: i128| xs.partition_point(|&v| v < x);
        let g = |e: usize| -> i128 {
            let close = if e < n {
                let ((rho, phi), _) = end[e + 1];
                rho * (self.len[e] - self.u[e]) + phi
            } else {
                0
            };
            y_sum[e] + bd_sum[e] + close
        };
        let head_at = |s: usize| if s == 1 { 0 } else { end[s].1 };

        const INF: i128 = i128::MAX / 4;
        // opt[e]: the cheapest plan for requests 1..=e that ends a segment at e (and its end
        // costs, if e < n), when request e + 1 starts at a boundary.
        let mut opt = vec![INF; n + 1];
        opt[0] = 0;
        let mut best_start = vec![0usize; n + 1];
        // forced[e]: the same, restricted to segments that cannot take request e + 1 under the
        // ceiling, so that e + 1 may start a segment inside a tool loop (a forced refresh).
        let mut forced = vec![INF; n + 1];
        let mut forced_start = vec![0usize; n + 1];
        queue.reset(&xs);
        let boundary = |s: usize| s == 1 || self.turns[s - 1].boundary;
        let line_for = |s: usize, opt: &[i128], forced: &[i128]| -> Option<Line> {
            let before = if boundary(s) {
                opt[s - 1]
            } else {
                forced[s - 1]
            };
            if before >= INF {
                return None;
            }
            let m = self.slope(s);
            let k =
                before + self.start_cost(s, head_at(s)) - m * alpha_sum[s] - y_sum[s] - bd_sum[s];
            Some(Line {
                m: m as i64,
                k,
                id: s as u32,
            })
        };

        for e in 1..=n {
            // Starts whose segment cannot take request e leave the window; the best of them,
            // ended at e − 1, is what a forced refresh before e builds on.
            while let Some(oldest) = queue.oldest() {
                if self.fits(oldest.id as usize, e) {
                    break;
                }
                if e >= 2 {
                    let total = g(e - 1) + oldest.at(x_of(e - 1));
                    if total < forced[e - 1] {
                        forced[e - 1] = total;
                        forced_start[e - 1] = oldest.id as usize;
                    }
                }
                queue.pop_front();
            }
            // Segment starts that have reached the minimum length become available.
            if e >= self.min_seg {
                let s = e + 1 - self.min_seg;
                if let Some(line) = line_for(s, &opt, &forced).filter(|_| self.fits(s, e)) {
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
                for s in (e + 1).saturating_sub(self.min_seg).max(1)..=e {
                    if self.fits(s, e) {
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
        starts
    }

    /// The prefixes a plan has at each gap and at each segment end (the representatives of the
    /// next refinement round).
    fn prefixes(&self, starts: &[bool]) -> (Vec<i128>, Vec<i128>) {
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

/// Head-only pings that keep a head last touched at `t` alive to `t + gap` once the tail is let
/// go: the first shortly before the head's own expiry, then one per head TTL.
pub fn head_only_pings(gap_ms: i64, head_ttl: Ttl, before_ms: i64) -> u64 {
    // Head-only pings are paced by the head's own decision points.
    head_pings_needed(gap_ms, head_ttl, head_ttl, before_ms)
}

/// Computes the optimum's plan for a reconstructed trace.
///
/// The per-gap choices are linear only once a representative prefix is fixed, so the program is
/// solved first with the prefixes of never refreshing, then again with the prefixes of the plan it
/// found, keeping whichever plan is cheaper under the exact model — a few rounds at O(n log n)
/// each.
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
    let h = head as i128;
    let bounds = a.bounds(head, price);
    let ceiling = bounds.ceiling_tokens as i128;
    let before = a.decide_before_expiry_ms;
    let step = config.rules.lifetime_ms.unwrap_or_else(|| ttl.millis()) - before;
    let phi_ping = inp * a.ping_tokens as i128 + out * a.ping_output_tokens as i128;
    // With memory written as it happens there is no flush request: a refresh costs only the
    // rewrite of the new segment.
    let needs_flush = bounds.needs_flush();
    let (flush_read, phi_flush) = if needs_flush {
        (
            r,
            inp * bounds.flush_prompt_tokens as i128 + out * bounds.flush_output_tokens as i128,
        )
    } else {
        (0, 0)
    };
    let head_cacheable = head >= price.min_cacheable;
    // The head sits under its own breakpoint, possibly with a longer TTL than the tail's.
    let head_ttl = a.head_ttl_for(ttl);
    let w_head = price.write(head_ttl).0 as i128;
    // An automatic cache's retention replaces both tiers' lifetimes (OpenAI).
    let life = |tier: Ttl| config.rules.lifetime_ms.unwrap_or_else(|| tier.millis());
    let head_warm_after = |gap: i64| head_cacheable && gap < life(head_ttl);
    // What the provider lets a session do: no keep-warm pings where it has no TTL to extend.
    let can = price.provider.capabilities();

    let mut len = vec![0i128; n + 1];
    let mut u = vec![0i128; n + 1];
    let mut gap_options = vec![Choices::default(); n + 1];
    let mut fixed = vec![0i128; n + 1];
    let mut end_options = vec![Choices::default(); n + 2];
    // A head-only ping: the head read, a tiny uncached question, one output token.
    let head_ping = r * h + phi_ping;
    for j in 1..=n {
        let t = &turns[j - 1];
        len[j] = len[j - 1] + t.delta as i128;
        u[j] = t.uncached as i128;
        if j == 1 {
            continue;
        }
        let gap = t.at_ms - turns[j - 2].at_ms;
        // Inside a segment: keep the prefix warm with k pings; let it expire and rewrite it,
        // reading the head if its own TTL outlived the gap; or ping only as long as it takes to
        // keep the head alive, then rewrite the tail.
        let k = if gap < life(ttl) {
            0
        } else {
            pings_needed(gap, ttl, before) as i128
        };
        let mut options = Choices::default();
        if k == 0 || can.ping {
            options.push(((k + 1) * r, k * phi_ping));
        }
        if head_warm_after(gap) {
            options.push((w, -(w - r) * h));
        } else {
            options.push((w, (w_head - w) * h));
            if head_cacheable {
                let kh = head_pings_needed(gap, ttl, head_ttl, before) as i128;
                if kh == 0 || can.ping {
                    options.push((kh * r + w, kh * phi_ping - (w - r) * h));
                }
                // Or let the tail go and keep only the head, with head-only pings.
                let k = head_only_pings(gap, head_ttl, before) as i128;
                if k == 0 || can.ping_head {
                    options.push((w, k * head_ping - (w - r) * h));
                }
            }
        }
        gap_options[j] = options;
        fixed[j] = w * ((len[j] - u[j]) - (len[j - 1] - u[j - 1])) + inp * u[j];
        // Ending the segment before a refresh at j: the flush (if any) at the latest warm moment
        // touches the head once more; if the head is cold at j anyway, touching it with pings
        // (the flush the last of them) until j may be cheaper than rewriting it.
        let late_flush = if needs_flush && gap >= step { step } else { 0 };
        let mut ends = Choices::default();
        if head_warm_after(gap - late_flush) {
            ends.push(((flush_read, phi_flush), r * h));
        } else {
            ends.push(((flush_read, phi_flush), w_head * h));
            if head_cacheable {
                let k =
                    touches(gap - step, head_ttl.millis(), step) as i128 - i128::from(needs_flush);
                if k > 0 && can.ping {
                    ends.push(((flush_read + k * r, phi_flush + k * phi_ping), r * h));
                }
                // Or end now and keep only the head alive, with head-only pings.
                let k = head_only_pings(gap - late_flush, head_ttl, before) as i128;
                if k == 0 || can.ping_head {
                    ends.push(((flush_read, phi_flush + k * head_ping), r * h));
                }
            }
        }
        end_options[j] = ends;
    }
    let model = Model {
        n,
        turns,
        w,
        inp,
        h,
        x_mem: a.rehydrate_tokens as i128,
        ceiling,
        min_seg: a.min_segment_requests.max(1) as usize,
        len,
        u,
        gap_options,
        fixed,
        end_options,
    };
    let never = vec![false; n];
    // Starting points: the prefixes of never refreshing (the largest a gap can see), of refreshing
    // at every request (the smallest), and their geometric mean; each refined with the prefixes of
    // the plan it yields. The cheapest plan under the exact model wins.
    let (large_gap, large_end) = model.prefixes(&never);
    let (small_gap, small_end) = model.prefixes(&vec![true; n]);
    let mean = |a: &[i128], b: &[i128]| -> Vec<i128> {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (((x.max(1) as f64) * (y.max(1) as f64)).sqrt()) as i128)
            .collect()
    };
    let starting_points = [
        (mean(&large_gap, &small_gap), mean(&large_end, &small_end)),
        (small_gap, small_end),
        (large_gap, large_end),
    ];
    let mut best: Option<(i128, Vec<bool>)> = None;
    let mut queue = LineQueue::new();
    for (mut gap_rep, mut end_rep) in starting_points {
        let mut previous: Option<Vec<bool>> = None;
        for _round in 0..3 {
            // Representatives are capped at the ceiling: no segment holds more.
            for c in gap_rep.iter_mut().chain(end_rep.iter_mut()) {
                *c = (*c).min(ceiling);
            }
            let starts = model.solve(&gap_rep, &end_rep, &mut queue);
            if previous.as_ref() == Some(&starts) {
                break;
            }
            let cost = model.evaluate(&starts);
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, starts.clone()));
            }
            (gap_rep, end_rep) = model.prefixes(&starts);
            previous = Some(starts);
        }
    }
    let (estimate, starts) = best.unwrap_or((0, never));
    OptimumPlan {
        starts,
        estimate: MicroUsd(((estimate.max(0) + 500_000) / 1_000_000) as i64),
    }
}
