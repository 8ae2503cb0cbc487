//! The Li Chao program of the module docs, with the head-change charge: `OPT(e)` ends a segment
//! at e, pays its ending before a refresh at e + 1, and that ending's head cost depends on the
//! segment's start s only through its tier (the head tokens changed since s, see
//! [`TierStack`]). So each tier is a group of lines, the program takes the best line of each
//! group with the group's own ending, and the minimum over groups is exact.

use super::lines::{Line, TierStack};
use super::model::{Choices, LinearCost, Model};
use std::collections::VecDeque;

const INF: i128 = i128::MAX / 4;

/// Keeps the cheaper of `best` and (`v`, start `s`).
fn offer(best: &mut Option<(i128, usize)>, v: i128, s: usize) {
    if best.is_none_or(|(b, _)| v < b) {
        *best = Some((v, s));
    }
}

/// Prefix sums of the per-request costs once every gap's option is fixed at a representative
/// prefix: `x_e = alpha[e]`, and the part of the segment's cost that is not on its slope.
struct Sums {
    alpha: Vec<i128>,
    y: Vec<i128>,
    bd: Vec<i128>,
}

impl Model<'_> {
    fn sums(&self, gap_rep: &[i128]) -> Sums {
        let n = self.n;
        let pick = |options: &Choices<LinearCost, 4>, c: i128| -> LinearCost {
            options
                .iter()
                .copied()
                .min_by_key(|&(a, b)| a * c + b)
                .unwrap_or((self.w, 0))
        };
        let mut sums = Sums {
            alpha: vec![0; n + 1],
            y: vec![0; n + 1],
            bd: vec![0; n + 1],
        };
        for (j, &rep) in gap_rep.iter().enumerate().take(n + 1).skip(2) {
            let (alpha, beta) = pick(&self.gap_options[j], rep);
            sums.alpha[j] = sums.alpha[j - 1] + alpha;
            sums.y[j] = sums.y[j - 1] + alpha * self.y(j);
            sums.bd[j] = sums.bd[j - 1] + beta + self.fixed[j];
        }
        sums
    }

    /// A segment ending at e (a refresh at e + 1 unless e = n) owing `tier` changed head tokens:
    /// the query point of its lines and what the ending adds to a line's value.
    fn after(&self, e: usize, tier: i128, sums: &Sums, end_rep: &[i128]) -> (i128, i128) {
        let base = sums.y[e] + sums.bd[e];
        if e == self.n {
            return (sums.alpha[e], base);
        }
        let end = self.ending(e + 1, end_rep[e + 1], tier);
        let (rho, phi) = end.close;
        let close = rho * (self.len[e] - self.u[e]) + phi + self.head_cost(&end, tier);
        (sums.alpha[e] + rho, base + close)
    }

    /// The optimal segmentation when every gap and segment end is priced at a representative
    /// prefix (`gap_rep[j]`, `end_rep[s]`), by the Li Chao program of the module docs.
    pub(super) fn solve(
        &self,
        gap_rep: &[i128],
        end_rep: &[i128],
        stack: &mut TierStack,
    ) -> Vec<bool> {
        let mut program = Program::new(self, self.sums(gap_rep), end_rep);
        stack.reset(&program.xs);
        for e in 1..=self.n {
            program.retire(e, stack);
            program.admit(e, stack);
            // A layer change at the refresh after e counts for every segment ending at e.
            if e < self.n {
                stack.raise(self.changes[e + 1]);
            }
            if let Some((v, s)) = program.best(e, stack) {
                program.opt[e] = v;
                program.best_start[e] = s;
            }
        }
        self.trace_back(&program.best_start, &program.forced_start)
    }

    fn trace_back(&self, best_start: &[usize], forced_start: &[usize]) -> Vec<bool> {
        let boundary = |s: usize| s == 1 || self.turns[s - 1].may_refresh();
        let mut starts = vec![false; self.n];
        let mut e = self.n;
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
}

/// One solve's state: the program's values by segment end, and the window of changes.
struct Program<'m, 't> {
    model: &'m Model<'t>,
    sums: Sums,
    end_rep: &'m [i128],
    /// The sorted query points: x_e = A_e + ρ for every way to end at e < n, A_n for the last.
    xs: Vec<i128>,
    /// opt[e]: the cheapest plan for requests 1..=e that ends a segment at e (and its ending, if
    /// e < n), when request e + 1 starts at a boundary.
    opt: Vec<i128>,
    best_start: Vec<usize>,
    /// forced[e]: the same, restricted to segments that cannot take request e + 1 under the
    /// ceiling, so that e + 1 may start a segment inside a tool loop (a forced refresh).
    forced: Vec<i128>,
    forced_start: Vec<usize>,
    /// The largest change among the requests after the next line's start (s + 1..=e, with
    /// s = e + 1 − min_seg): a window of fixed length sliding by one, kept as a deque of falling
    /// changes.
    window: VecDeque<usize>,
}

impl<'m, 't> Program<'m, 't> {
    fn new(model: &'m Model<'t>, sums: Sums, end_rep: &'m [i128]) -> Program<'m, 't> {
        let n = model.n;
        let mut xs: Vec<i128> = vec![sums.alpha[n]];
        for e in 1..n {
            xs.push(sums.alpha[e]);
            let ways = model.end_options[e + 1].iter();
            xs.extend(ways.map(|o| sums.alpha[e] + o.close.0));
        }
        xs.sort_unstable();
        xs.dedup();
        let mut opt = vec![INF; n + 1];
        opt[0] = 0;
        Program {
            model,
            sums,
            end_rep,
            xs,
            opt,
            best_start: vec![0; n + 1],
            forced: vec![INF; n + 1],
            forced_start: vec![0; n + 1],
            window: VecDeque::new(),
        }
    }

    fn x_index(&self, x: i128) -> usize {
        self.xs.partition_point(|&v| v < x)
    }

    fn boundary(&self, s: usize) -> bool {
        s == 1 || self.model.turns[s - 1].may_refresh()
    }

    /// The line of a segment started at s, if a plan can reach s.
    fn line_for(&self, s: usize) -> Option<Line> {
        let before = if self.boundary(s) {
            self.opt[s - 1]
        } else {
            self.forced[s - 1]
        };
        if before >= INF {
            return None;
        }
        let (m, sums) = (self.model.slope(s), &self.sums);
        let k = before + self.model.start_cost(s) - m * sums.alpha[s] - sums.y[s] - sums.bd[s];
        Some(Line {
            m: m as i64,
            k,
            id: s as u32,
        })
    }

    /// A segment started at s and ended at e, with the ending the tier of e + 1 asks for.
    fn value(&self, s: usize, e: usize) -> Option<(i128, usize)> {
        let tier = if e < self.model.n {
            self.model.changes[e + 1]
        } else {
            0
        };
        self.line_for(s).map(|line| {
            let (x, add) = self.model.after(e, tier, &self.sums, self.end_rep);
            (line.at(x) + add, s)
        })
    }

    /// Starts whose segment cannot take request e leave the window; the best of them, ended at
    /// e − 1, is what a forced refresh before e builds on.
    fn retire(&mut self, e: usize, stack: &mut TierStack) {
        while let Some((oldest, tier)) = stack.oldest() {
            if self.model.fits(oldest.id as usize, e) {
                break;
            }
            if e >= 2 {
                let (x, add) = self.model.after(e - 1, tier, &self.sums, self.end_rep);
                let total = add + oldest.at(x);
                if total < self.forced[e - 1] {
                    self.forced[e - 1] = total;
                    self.forced_start[e - 1] = oldest.id as usize;
                }
            }
            stack.pop_front();
        }
    }

    /// The segment start that has just reached the minimum length becomes available, with the
    /// changes it has seen.
    fn admit(&mut self, e: usize, stack: &mut TierStack) {
        let changes = &self.model.changes;
        if e >= 2 {
            while self
                .window
                .back()
                .is_some_and(|&b| changes[b] <= changes[e])
            {
                self.window.pop_back();
            }
            self.window.push_back(e);
        }
        if e < self.model.min_seg {
            return;
        }
        let s = e + 1 - self.model.min_seg;
        while self.window.front().is_some_and(|&f| f <= s) {
            self.window.pop_front();
        }
        let tier = self.window.front().map_or(0, |&f| changes[f]);
        if let Some(line) = self.line_for(s).filter(|_| self.model.fits(s, e)) {
            stack.push(line, tier);
        }
    }

    /// The cheapest segment ending at e: each tier's best line with its own ending, the short
    /// last segments, or, where nothing fits, a segment of its own.
    fn best(&mut self, e: usize, stack: &TierStack) -> Option<(i128, usize)> {
        let (model, n) = (self.model, self.model.n);
        let mut best: Option<(i128, usize)> = None;
        let after = |tier| model.after(e, tier, &self.sums, self.end_rep);
        stack.each_best(
            |tier| self.x_index(after(tier).0),
            |tier, v, id| offer(&mut best, v + after(tier).1, id as usize),
        );
        if e == n {
            // The last segment needs no minimum length (and no ending, so no tier).
            for s in (e + 1).saturating_sub(model.min_seg).max(1)..=e {
                if model.fits(s, e)
                    && let Some((v, s)) = self.value(s, e)
                {
                    offer(&mut best, v, s);
                }
            }
        }
        // Before the first segment has its minimum length no segment may end here unless the
        // ceiling forces it: the window is empty then because no start is admissible yet, not
        // because nothing fits.
        let too_early = e < model.min_seg && model.fits(1, (e + 1).min(n));
        if best.is_none() && !too_early {
            // Nothing fits under the ceiling (a single request larger than it, or a minimum
            // segment the ceiling does not leave room for): start a segment here regardless.
            if e >= 2 && self.forced[e - 1] >= INF {
                self.forced[e - 1] = self.opt[e - 1];
                self.forced_start[e - 1] = self.best_start[e - 1];
            }
            best = self.value(e, e);
        }
        best
    }
}
