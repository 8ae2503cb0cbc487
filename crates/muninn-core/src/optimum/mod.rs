//! The hindsight optimum: a dynamic program over a reconstructed trace, with full knowledge of
//! every future gap and size, over the same actions the online policies have (append, ping,
//! flush, refresh at a boundary, and the `mask` action where the session may clear tool
//! results), within the same quality bounds (minimum segment, ceiling).
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
//! ceiling (`P_e(s) ≤ C`) removes the oldest segment starts as e grows, a sliding window over
//! lines; a two-stack queue of Li Chao trees with undo handles the deletions, so the whole program
//! is O(n log n). The minimum segment delays each line's insertion; restarts are allowed only at
//! boundaries and where the recorded client compacted ([`Turn::may_refresh`]: the recorded plan's
//! own refreshes are among the optimum's) — the first request always starts a segment; a refresh
//! the ceiling forces may fall inside a tool loop, as it would online.
//!
//! Each gap inside a segment has up to three ways through it — keep the prefix warm with pings, let
//! it expire and rewrite it (reading the head if its own, longer TTL outlived the gap), or ping
//! only as long as the head needs — and each segment end up to two (let the head go, or keep it
//! alive until the refresh). Every one is linear in the prefix, but which is cheapest depends on
//! the prefix, which depends on the segmentation. So the program is solved with representative
//! prefixes (those of never refreshing, of refreshing at every request, and their geometric mean),
//! each refined with the prefixes of the plan it found; every plan is priced exactly under the
//! model, and the cheapest is kept. The chosen plan is then *executed* by the replay engine, which
//! takes the exact cheapest way through every gap with hindsight, so the reported optimum is priced
//! by the cache model exactly like every online policy. Tests compare it with brute force over
//! every admissible segmentation of small traces, and check that no online policy ever beats it.
//!
//! # The `mask` action
//!
//! Where the trace has tool results and the session may clear them ([`crate::decide::Capabilities`]
//! and the assumptions' `mask`), a second program (`masks`) runs over states (segment start,
//! latest clear): a clear keeps the latest tool uses' results, so what a segment has lost after any
//! number of clears is fixed by its start and its latest clear. That program is exact over its
//! model (each state carries its exact prefix), O(Σ states) — at most O(n · S · K) for S segment
//! starts and K clear points alive under the ceiling — and its plan is the optimum's (its space
//! holds every admissible plan without clears as well). The executor sends the plan's clears as
//! [`Action::Mask`] decisions, so the replay engine prices them as it prices every policy's, and
//! the gap before a clear keeps only the head (the clear rewrites the rest).
//!
//! [`Action::Mask`]: crate::decide::Action::Mask
//!
//! # Layer changes in the head
//!
//! A session whose head is rendered from layers that change (the Persona Mind's doctrine, persona
//! state and campaigns) shows each change in the conversation while a segment lasts, but a refresh
//! meets the head as it is *now*: the head's tokens from the earliest changed layer to its end are
//! new, and where the head was warm they are written instead of read. With Δ_p the tokens a change
//! at request p made new (counted from the head's end), a refresh at s after a segment begun at s′
//! pays `(w_head − r)·max Δ_p` over p ∈ (s′, s] — a pairwise term, but one that depends on s′ only
//! through which changes it has seen. Lines are kept in groups of equal charge (older starts have
//! seen more changes, so charges fall from the oldest group to the youngest, and a change at the
//! next request merges the groups it dominates); each group is queried with its own charge and its
//! own cheapest ending, and the minimum over groups is exact. With G distinct change sizes the
//! program is O(n·G·log² n) ([`plan_with_head_changes`]; G is 0 for traces without layers).

use crate::cache::Ttl;
use crate::money::{MicroUsd, Tokens};
use crate::replay::{ReplayConfig, Turn};

mod execute;
mod lines;
mod masks;
mod model;
mod options;
mod prune;
mod solve;

use lines::TierStack;
pub use masks::MaskProgramRun;
use model::{Choices, Model};
use options::GapRates;

/// The optimum's plan: which requests start a new segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimumPlan {
    /// `starts[j]`: request j begins a new segment (a refresh before it).
    pub starts: Vec<bool>,
    /// The program's own estimate of the plan's cost (input side, excluding recorded output), in
    /// micro-dollars.
    pub estimate: MicroUsd,
    /// `head_rewritten[j]`: head tokens a refresh at request j writes whatever was done before it
    /// (the layers changed since the segment before it began); empty without layer changes. The
    /// executor weighs keeping the head warm for a refresh against the part it can still read.
    pub head_rewritten: Vec<Tokens>,
    /// `masks[j]`: request j is sent with the provider's tool-result clear (the `mask` action);
    /// empty when the plan never clears.
    pub masks: Vec<bool>,
}

impl OptimumPlan {
    /// A given segmentation with the head changes it meets (`head_changes[j]`: tokens request j's
    /// layers made new, from the head's end; see [`plan_with_head_changes`]), to be executed.
    pub fn for_starts(starts: Vec<bool>, head_changes: &[Tokens]) -> OptimumPlan {
        let mut head_rewritten = Vec::new();
        if head_changes.iter().any(|&d| d > 0) {
            head_rewritten = vec![0; starts.len()];
            let mut since = 0;
            for (j, &start) in starts.iter().enumerate().skip(1) {
                since = since.max(head_changes.get(j).copied().unwrap_or(0));
                if start {
                    head_rewritten[j] = since;
                    since = 0;
                }
            }
        }
        OptimumPlan {
            starts,
            estimate: MicroUsd::ZERO,
            head_rewritten,
            masks: Vec::new(),
        }
    }

    /// The same plan, sending the requests `masks` marks with a clear.
    pub fn with_masks(self, masks: Vec<bool>) -> OptimumPlan {
        OptimumPlan { masks, ..self }
    }

    /// Whether request `j` is sent with a clear.
    pub fn masks_at(&self, j: usize) -> bool {
        self.masks.get(j).copied().unwrap_or(false)
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

/// Head-only pings that keep a head last touched at `t` alive to `t + gap` once the tail is let
/// go: the first shortly before the head's own expiry, then one per head TTL.
pub fn head_only_pings(gap_ms: i64, head_ttl: Ttl, before_ms: i64) -> u64 {
    // Head-only pings are paced by the head's own decision points.
    head_pings_needed(gap_ms, head_ttl, head_ttl, before_ms)
}

/// Computes the optimum's plan for a reconstructed trace whose head never changes.
pub fn plan(turns: &[Turn], head: Tokens, ttl: Ttl, config: &ReplayConfig<'_>) -> OptimumPlan {
    plan_with_head_changes(turns, head, ttl, config, &[])
}

/// Computes the optimum's plan for a reconstructed trace whose head is rendered from layers that
/// change: `head_changes[j]` is how many of the head's tokens, counted from its end, request j's
/// layers made new relative to request j − 1 (0 or absent: none). A refresh that reads the head
/// writes the largest such change since its segment began instead (see the module docs).
///
/// The per-gap choices are linear only once a representative prefix is fixed, so the program is
/// solved first with the prefixes of never refreshing, then again with the prefixes of the plan it
/// found, keeping whichever plan is cheaper under the exact model — a few rounds at O(n log n)
/// each.
pub fn plan_with_head_changes(
    turns: &[Turn],
    head: Tokens,
    ttl: Ttl,
    config: &ReplayConfig<'_>,
    head_changes: &[Tokens],
) -> OptimumPlan {
    if turns.is_empty() {
        return OptimumPlan::for_starts(Vec::new(), head_changes);
    }
    let model = build_model(turns, head, ttl, config, head_changes);
    // Clears where the trace has tool results and the provider and assumptions allow them;
    // not with layer changes in the head (the mask program has no head-change charge, and the
    // heads that change, the Persona's, carry no tool results worth clearing).
    let (estimate, starts, masks) = if model.can_mask && head_changes.iter().all(|&d| d == 0) {
        // Exact over a space that holds every admissible plan without clears too, so the Li
        // Chao program is not needed (its plan could be cheaper only by being inadmissible:
        // after a refresh the ceiling forces, its "nothing fits" fallback can end a segment
        // shorter than the minimum).
        let (cost, starts, masks) = model.solve_masked();
        debug_assert_eq!(model.evaluate_masked(&starts, &masks), cost);
        (cost, starts, masks)
    } else {
        let (estimate, starts) = search(&model);
        (estimate, starts, Vec::new())
    };
    OptimumPlan {
        estimate: MicroUsd(((estimate.max(0) + 500_000) / 1_000_000) as i64),
        ..OptimumPlan::for_starts(starts, head_changes).with_masks(masks)
    }
}

/// The mask program alone on a trace whose head never changes, with or without dropping
/// dominated states (`prune`): its plan and how many states it advanced. `None` where nothing
/// can be cleared (the Li Chao program alone runs there). For the check that dropping changes
/// no plan and for the bench.
pub fn mask_program(
    turns: &[Turn],
    head: Tokens,
    ttl: Ttl,
    config: &ReplayConfig<'_>,
    prune: bool,
) -> Option<MaskProgramRun> {
    if turns.is_empty() {
        return None;
    }
    let model = Model {
        prune,
        ..build_model(turns, head, ttl, config, &[])
    };
    model.can_mask.then(|| model.run_masked())
}

/// The cost structure of a trace: every way through every gap and segment end, per request.
fn build_model<'t>(
    turns: &'t [Turn],
    head: Tokens,
    ttl: Ttl,
    config: &ReplayConfig<'_>,
    head_changes: &[Tokens],
) -> Model<'t> {
    let n = turns.len();
    let a = config.assumptions;
    let rates = GapRates::new(head, ttl, config);
    let h = head as i128;
    let mut len = vec![0i128; n + 1];
    let mut u = vec![0i128; n + 1];
    let mut gap_options = vec![Choices::default(); n + 1];
    let mut fixed = vec![0i128; n + 1];
    let mut end_options = vec![Choices::default(); n + 2];
    for j in 1..=n {
        let t = &turns[j - 1];
        len[j] = len[j - 1] + t.delta as i128;
        u[j] = t.uncached as i128;
        if j == 1 {
            continue;
        }
        let gap = t.at_ms - turns[j - 2].at_ms;
        gap_options[j] = rates.inside(gap);
        fixed[j] = rates.w * ((len[j] - u[j]) - (len[j - 1] - u[j - 1])) + rates.inp * u[j];
        end_options[j] = rates.ending(gap);
    }
    let mut changes = vec![0i128; n + 1];
    for (j, &d) in head_changes.iter().enumerate().take(n).skip(1) {
        changes[j + 1] = (d as i128).min(h);
    }
    Model {
        n,
        turns,
        w: rates.w,
        inp: rates.inp,
        h,
        x_mem: a.rehydrate_tokens as i128,
        ceiling: a.bounds(head, config.price).ceiling_tokens as i128,
        min_seg: a.min_segment_requests.max(1) as usize,
        len,
        u,
        gap_options,
        fixed,
        end_options,
        changes,
        head_change_rate: (rates.w_head - rates.r).max(0),
        can_mask: false,
        tools: Vec::new(),
        clear_to: Vec::new(),
        clear_floor: Vec::new(),
        prune: true,
        mask_options: Vec::new(),
    }
    .with_tool_results(turns, &rates, config)
}

/// The cheapest plan the program finds from a few starting representatives, each refined with the
/// prefixes of the plan it yields, priced exactly by the model: (model cost, starts).
fn search(model: &Model<'_>) -> (i128, Vec<bool>) {
    let n = model.n;
    let ceiling = model.ceiling;
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
    let mut stack = TierStack::new();
    for (mut gap_rep, mut end_rep) in starting_points {
        let mut previous: Option<Vec<bool>> = None;
        for _round in 0..3 {
            // Representatives are capped at the ceiling: no segment holds more.
            for c in gap_rep.iter_mut().chain(end_rep.iter_mut()) {
                *c = (*c).min(ceiling);
            }
            let starts = model.solve(&gap_rep, &end_rep, &mut stack);
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
    best.unwrap_or((0, never))
}
