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
        let n = self.n;
        let sums = self.sums(gap_rep);
        // Query points: x_e = A_e + ρ for every way to end at e < n, A_n for the last.
        let mut xs: Vec<i128> = vec![sums.alpha[n]];
        for e in 1..n {
            xs.push(sums.alpha[e]);
            xs.extend(
                self.end_options[e + 1]
                    .iter()
                    .map(|o| sums.alpha[e] + o.close.0),
            );
        }
        xs.sort_unstable();
        xs.dedup();
        let x_index = |x: i128| xs.partition_point(|&v| v < x);

        // opt[e]: the cheapest plan for requests 1..=e that ends a segment at e (and its ending,
        // if e < n), when request e + 1 starts at a boundary.
        let mut opt = vec![INF; n + 1];
        opt[0] = 0;
        let mut best_start = vec![0usize; n + 1];
        // forced[e]: the same, restricted to segments that cannot take request e + 1 under the
        // ceiling, so that e + 1 may start a segment inside a tool loop (a forced refresh).
        let mut forced = vec![INF; n + 1];
        let mut forced_start = vec![0usize; n + 1];
        stack.reset(&xs);
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
            let k = before + self.start_cost(s) - m * sums.alpha[s] - sums.y[s] - sums.bd[s];
            Some(Line {
                m: m as i64,
                k,
                id: s as u32,
            })
        };
        // The largest change among the requests after the next line's start (s + 1..=e, with
        // s = e + 1 − min_seg): a window of fixed length sliding by one, kept as a deque of
        // falling changes.
        let mut window: VecDeque<usize> = VecDeque::new();

        for e in 1..=n {
            // Starts whose segment cannot take request e leave the window; the best of them,
            // ended at e − 1, is what a forced refresh before e builds on.
            while let Some((oldest, tier)) = stack.oldest() {
                if self.fits(oldest.id as usize, e) {
                    break;
                }
                if e >= 2 {
                    let (x, add) = self.after(e - 1, tier, &sums, end_rep);
                    let total = add + oldest.at(x);
                    if total < forced[e - 1] {
                        forced[e - 1] = total;
                        forced_start[e - 1] = oldest.id as usize;
                    }
                }
                stack.pop_front();
            }
            if e >= 2 {
                while window
                    .back()
                    .is_some_and(|&b| self.changes[b] <= self.changes[e])
                {
                    window.pop_back();
                }
                window.push_back(e);
            }
            // Segment starts that have reached the minimum length become available.
            if e >= self.min_seg {
                let s = e + 1 - self.min_seg;
                while window.front().is_some_and(|&f| f <= s) {
                    window.pop_front();
                }
                let tier = window.front().map_or(0, |&f| self.changes[f]);
                if let Some(line) = line_for(s, &opt, &forced).filter(|_| self.fits(s, e)) {
                    stack.push(line, tier);
                }
            }
            // A layer change at the refresh after e counts for every segment ending at e.
            if e < n {
                stack.raise(self.changes[e + 1]);
            }
            let mut best: Option<(i128, usize)> = None;
            stack.each_best(
                |tier| x_index(self.after(e, tier, &sums, end_rep).0),
                |tier, v, id| {
                    let v = v + self.after(e, tier, &sums, end_rep).1;
                    offer(&mut best, v, id as usize);
                },
            );
            let consider = |s: usize, opt: &[i128], forced: &[i128]| {
                let tier = if e < n { self.changes[e + 1] } else { 0 };
                line_for(s, opt, forced).map(|line| {
                    let (x, add) = self.after(e, tier, &sums, end_rep);
                    (line.at(x) + add, s)
                })
            };
            if e == n {
                // The last segment needs no minimum length (and no ending, so no tier).
                for s in (e + 1).saturating_sub(self.min_seg).max(1)..=e {
                    if self.fits(s, e)
                        && let Some((v, s)) = consider(s, &opt, &forced)
                    {
                        offer(&mut best, v, s);
                    }
                }
            }
            // Before the first segment has its minimum length no segment may end here unless the
            // ceiling forces it: the window is empty then because no start is admissible yet,
            // not because nothing fits.
            let too_early = e < self.min_seg && self.fits(1, (e + 1).min(n));
            if best.is_none() && !too_early {
                // Nothing fits under the ceiling (a single request larger than it, or a minimum
                // segment the ceiling does not leave room for): start a segment here regardless.
                if forced[e - 1] >= INF && e >= 2 {
                    forced[e - 1] = opt[e - 1];
                    forced_start[e - 1] = best_start[e - 1];
                }
                if let Some((v, s)) = consider(e, &opt, &forced) {
                    offer(&mut best, v, s);
                }
            }
            if let Some((v, s)) = best {
                opt[e] = v;
                best_start[e] = s;
            }
        }
        self.trace_back(&best_start, &forced_start)
    }

    fn trace_back(&self, best_start: &[usize], forced_start: &[usize]) -> Vec<bool> {
        let boundary = |s: usize| s == 1 || self.turns[s - 1].boundary;
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
