//! The sensitivity of `muninn replay`'s default policy to its two largest assumptions — the
//! rehydration a refresh restarts from and the minimum segment — printed with every table report,
//! with the point where its advantage over what was recorded disappears.

use crate::output::outln;
use muninn_core::cache::CacheRules;
use muninn_core::decide::Policy;
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::price::ModelPrice;
use muninn_core::replay::{Assumptions, Plan, replay_traces};
use muninn_core::trace::Trace;

/// Rehydration sizes the table always covers (the measured median joins them).
const REHYDRATIONS: [Tokens; 5] = [4_000, 10_000, 20_000, 40_000, 80_000];
/// Minimum segments it covers.
const MIN_SEGMENTS: [u32; 2] = [4, 20];

/// The cost of `plan` over every priced trace under `assumptions`; an error if it saturated
/// (the grid's assumptions differ from the policy table's, so its costs are checked apart).
fn cost(
    priced: &[(&Trace, &ModelPrice)],
    plan: Plan,
    assumptions: &Assumptions,
    rules: &CacheRules,
) -> anyhow::Result<MicroUsd> {
    // Each Mind's traces in time order, carrying what it learned (as the policy table does).
    let cost = replay_traces(priced, plan, assumptions, rules, &mut |_, _| {})
        .iter()
        .map(|t| t.cost)
        .sum();
    crate::replay::refuse_saturated(
        cost,
        &format!(
            "plan {plan} at a rehydration of {} tokens (the sensitivity grid)",
            assumptions.rehydrate_tokens
        ),
    )?;
    Ok(cost)
}

/// One cell of the grid: the default's cost ÷ recorded and ÷ `never` at one rehydration and
/// minimum segment.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    /// The rehydration a refresh restarts from.
    pub rehydration: Tokens,
    /// The minimum segment.
    pub min_segment: u32,
    /// The default's cost ÷ recorded.
    pub vs_recorded: f64,
    /// The default's cost ÷ `never` (no voluntary refresh).
    pub vs_never: f64,
}

/// The grid: every rehydration of [`REHYDRATIONS`] and the measured one, by every minimum
/// segment of [`MIN_SEGMENTS`]. Empty when nothing was recorded; an error if a cost saturated.
pub fn grid(
    priced: &[(&Trace, &ModelPrice)],
    base: &Assumptions,
    rules: &CacheRules,
    measured: Option<Tokens>,
) -> anyhow::Result<Vec<Cell>> {
    let recorded = cost(priced, Plan::Recorded, base, rules)?;
    if recorded.0 <= 0 {
        return Ok(Vec::new());
    }
    let mut sizes: Vec<Tokens> = REHYDRATIONS.iter().copied().chain(measured).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut cells = Vec::new();
    for &size in &sizes {
        for &min_segment in &MIN_SEGMENTS {
            let a = Assumptions {
                rehydrate_tokens: size,
                flush_output_tokens: base.flush_output_tokens,
                min_segment_requests: min_segment,
                ..*base
            };
            let default = cost(priced, Plan::Online(Policy::SkiRental), &a, rules)?;
            let never = cost(priced, Plan::Online(Policy::Never), &a, rules)?;
            cells.push(Cell {
                rehydration: size,
                min_segment,
                vs_recorded: default.0 as f64 / recorded.0 as f64,
                vs_never: default.0 as f64 / never.0.max(1) as f64,
            });
        }
    }
    Ok(cells)
}

/// The cell where the default costs most against `never`.
pub fn worst_vs_never(cells: &[Cell]) -> Option<Cell> {
    cells
        .iter()
        .copied()
        .max_by(|a, b| a.vs_never.total_cmp(&b.vs_never))
}

/// Prints the grid: for each rehydration and minimum segment, the default's cost ÷ recorded and
/// ÷ `never` (no voluntary refresh), then where its advantage over recorded disappears.
pub fn print(cells: &[Cell], measured: Option<Tokens>) -> std::io::Result<()> {
    if cells.is_empty() {
        return Ok(());
    }
    outln!()?;
    outln!("sensitivity: the default policy (ski-rental) ÷ recorded | ÷ never, by rehydration")?;
    let header: Vec<String> = MIN_SEGMENTS
        .iter()
        .map(|m| format!("{:>17}", format!("min segment {m}")))
        .collect();
    outln!("{:>22} {}", "rehydration tokens", header.join(" "))?;
    let mut lost_at: Option<(Tokens, u32)> = None;
    for row in cells.chunks(MIN_SEGMENTS.len()) {
        let size = row[0].rehydration;
        let mut texts = Vec::new();
        for cell in row {
            if cell.vs_recorded >= 1.0 && lost_at.is_none_or(|(s, _)| s > size) {
                lost_at = Some((size, cell.min_segment));
            }
            texts.push(format!(
                "{:>8.3} | {:>6.3}",
                cell.vs_recorded, cell.vs_never
            ));
        }
        let mark = if Some(size) == measured {
            " (measured)"
        } else {
            ""
        };
        outln!("{:>22} {}", format!("{size}{mark}"), texts.join(" "))?;
    }
    match lost_at {
        Some((size, min_segment)) => outln!(
            "the default's advantage over recorded disappears from a rehydration of {size} tokens \
             (minimum segment {min_segment}) on"
        )?,
        None => outln!(
            "the default costs less than recorded at every rehydration up to {} tokens",
            cells.last().map_or(0, |c| c.rehydration)
        )?,
    }
    if let Some(worst) = worst_vs_never(cells) {
        outln!(
            "the default costs at most {:.3}× never (rehydration {} tokens, minimum segment {})",
            worst.vs_never,
            worst.rehydration,
            worst.min_segment
        )?;
    }
    Ok(())
}
