//! The program's line containers: a Li Chao tree over fixed query points with an undo log, a
//! queue of lines (oldest first) built from two such trees, and [`TierStack`], which keeps the
//! queue's lines in groups by the head-change charge a refresh after them pays.

/// A line `m·x + k`; `id` is the segment start it stands for (`EMPTY` marks an empty tree node).
/// Slopes are token counts and fit an `i64`; intercepts are sums of costs and need an `i128`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Line {
    pub(super) k: i128,
    pub(super) m: i64,
    pub(super) id: u32,
}

pub(super) const EMPTY: u32 = u32::MAX;

impl Line {
    const NONE: Line = Line {
        k: 0,
        m: 0,
        id: EMPTY,
    };

    pub(super) fn at(&self, x: i128) -> i128 {
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

    /// Puts a line older than every line held in front of them (a merge of two adjacent groups,
    /// see [`TierStack`]): it goes on top of the front stack, so popping it undoes exactly it.
    fn push_front(&mut self, line: Line) {
        let mark = self.front.log.len();
        self.front.insert(line);
        self.front_lines.push((mark, line));
    }

    fn len(&self) -> usize {
        self.front_lines.len() + self.back_lines.len()
    }

    /// The lines held, oldest first.
    fn lines(&self) -> Vec<Line> {
        let front = self.front_lines.iter().rev().map(|&(_, l)| l);
        front.chain(self.back_lines.iter().copied()).collect()
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

/// The lines of the window (segment starts a segment ending now may have), oldest first, in
/// groups by their *tier*: the head tokens a refresh after the segment must rewrite because a
/// layer of the head changed since the segment began, `T_s = max Δ_p` over the requests p after s
/// so far (Δ_p: the head's tokens, counted from its end, that request p's layers changed). Older
/// starts have seen more changes, so tiers fall from the oldest group to the youngest, and a
/// change Δ at the next request raises every group whose tier is ≤ Δ to Δ: those groups merge.
///
/// Merging moves the smaller group's lines into the larger (appended behind it or put in front
/// of it, so the order stays by start), so a line moves O(log n) times; each group answers its
/// own minimum, and the program adds the group's charge. Groups are at most the distinct change
/// sizes plus one (three for the Persona head: none, `system[1]`, all), and their trees are
/// pooled, so memory is O(n · groups).
pub(super) struct TierStack {
    xs: Vec<i128>,
    /// Oldest first: (tier, lines).
    groups: Vec<(i128, LineQueue)>,
    pool: Vec<LineQueue>,
}

impl TierStack {
    pub(super) fn new() -> TierStack {
        TierStack {
            xs: Vec::new(),
            groups: Vec::new(),
            pool: Vec::new(),
        }
    }

    /// Empties the stack and sets new query points, reusing the trees' memory.
    pub(super) fn reset(&mut self, xs: &[i128]) {
        self.xs.clear();
        self.xs.extend_from_slice(xs);
        let groups = std::mem::take(&mut self.groups);
        self.pool.extend(groups.into_iter().map(|(_, q)| q));
        for queue in &mut self.pool {
            queue.reset(xs);
        }
    }

    fn fresh(&mut self) -> LineQueue {
        let mut queue = self.pool.pop().unwrap_or_else(LineQueue::new);
        queue.reset(&self.xs);
        queue
    }

    fn recycle(&mut self, mut queue: LineQueue) {
        queue.reset(&self.xs);
        self.pool.push(queue);
    }

    /// Adds the youngest line with its tier (≤ the youngest group's: it has seen fewer changes).
    pub(super) fn push(&mut self, line: Line, tier: i128) {
        match self.groups.last_mut() {
            Some((t, queue)) if *t == tier => queue.push(line),
            _ => {
                debug_assert!(self.groups.last().is_none_or(|(t, _)| *t > tier));
                let mut queue = self.fresh();
                queue.push(line);
                self.groups.push((tier, queue));
            }
        }
    }

    /// The oldest line and its tier.
    pub(super) fn oldest(&self) -> Option<(Line, i128)> {
        let (tier, queue) = self.groups.first()?;
        queue.oldest().map(|l| (l, *tier))
    }

    pub(super) fn pop_front(&mut self) {
        let Some((_, queue)) = self.groups.first_mut() else {
            return;
        };
        queue.pop_front();
        if queue.len() == 0 {
            let (_, queue) = self.groups.remove(0);
            self.recycle(queue);
        }
    }

    /// A layer change of `delta` head tokens at the next request: every line whose tier is below
    /// it now owes `delta`.
    pub(super) fn raise(&mut self, delta: i128) {
        if delta <= 0 {
            return;
        }
        let Some(first) = self.groups.iter().position(|(t, _)| *t <= delta) else {
            return;
        };
        while self.groups.len() > first + 1 {
            let Some((_, younger)) = self.groups.pop() else {
                break;
            };
            let Some((_, older)) = self.groups.last_mut() else {
                break;
            };
            let merged = if older.len() >= younger.len() {
                for line in younger.lines() {
                    older.push(line);
                }
                younger
            } else {
                let mut younger = younger;
                for line in older.lines().into_iter().rev() {
                    younger.push_front(line);
                }
                std::mem::replace(older, younger)
            };
            self.recycle(merged);
        }
        self.groups[first].0 = delta;
    }

    /// Calls `found(tier, value, start)` with each group's best line at query point `xi(tier)`.
    pub(super) fn each_best(
        &self,
        xi: impl Fn(i128) -> usize,
        mut found: impl FnMut(i128, i128, u32),
    ) {
        for (tier, queue) in &self.groups {
            if let Some((v, id)) = queue.query(xi(*tier)) {
                found(*tier, v, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Line, TierStack};

    /// A deterministic stream of numbers (no dependency needed for a test's choices).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % below
        }
    }

    /// The stack against a plain list of (line, tier), oldest first, under random pushes, pops,
    /// raises and queries: each group's minimum must be the list's minimum over that tier, whatever
    /// merges (appending or prepending) the raises caused.
    #[test]
    fn the_tier_stack_answers_like_a_plain_list() {
        let xs: Vec<i128> = (0..16).map(|i| i * 7 - 40).collect();
        let tiers = [0i128, 5, 10, 20, 40];
        for seed in 0..200 {
            let mut rng = Lcg(seed);
            let mut stack = TierStack::new();
            stack.reset(&xs);
            let mut plain: Vec<(Line, i128)> = Vec::new();
            let mut id = 0;
            for _ in 0..300 {
                match rng.next(10) {
                    0..=4 => {
                        let youngest = plain.last().map_or(i128::MAX, |&(_, t)| t);
                        let allowed: Vec<i128> =
                            tiers.iter().copied().filter(|&t| t <= youngest).collect();
                        let tier = allowed[rng.next(allowed.len() as u64) as usize];
                        let line = Line {
                            k: rng.next(2_000) as i128 - 1_000,
                            m: rng.next(60) as i64 - 30,
                            id,
                        };
                        id += 1;
                        stack.push(line, tier);
                        plain.push((line, tier));
                    }
                    5..=6 => {
                        if let Some((oldest, tier)) = stack.oldest() {
                            assert_eq!((oldest.id, tier), (plain[0].0.id, plain[0].1));
                            stack.pop_front();
                            plain.remove(0);
                        }
                    }
                    _ => {
                        let delta = tiers[rng.next(tiers.len() as u64) as usize];
                        stack.raise(delta);
                        if delta > 0 {
                            for (_, t) in plain.iter_mut().filter(|(_, t)| *t <= delta) {
                                *t = delta;
                            }
                        }
                    }
                }
                let xi = |tier: i128| (tier as usize * 3 + 1) % xs.len();
                let mut seen = Vec::new();
                stack.each_best(xi, |tier, v, _| seen.push((tier, v)));
                let mut expected: Vec<(i128, i128)> = Vec::new();
                for &(line, tier) in &plain {
                    let v = line.at(xs[xi(tier)]);
                    match expected.iter_mut().find(|(t, _)| *t == tier) {
                        Some((_, best)) => *best = (*best).min(v),
                        None => expected.push((tier, v)),
                    }
                }
                assert_eq!(seen, expected, "seed {seed}");
            }
        }
    }
}
