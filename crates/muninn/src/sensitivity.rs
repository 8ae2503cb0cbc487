//! The sensitivity of `muninn replay`'s default policy to its two largest assumptions — the
//! rehydration a refresh restarts from and the minimum segment — printed with every table report,
//! with the point where its advantage over what was recorded disappears.

use crate::output::outln;
use muninn_core::cache::CacheRules;
use muninn_core::decide::Policy;
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::price::ModelPrice;
use muninn_core::replay::{Assumptions, Plan, ReplayConfig, replay_trace};
use muninn_core::trace::Trace;

/// Rehydration sizes the table always covers (the measured median joins them).
const REHYDRATIONS: [Tokens; 5] = [4_000, 10_000, 20_000, 40_000, 80_000];
/// Minimum segments it covers.
const MIN_SEGMENTS: [u32; 2] = [4, 20];

/// The cost of `plan` over every priced trace under `assumptions`.
fn cost(
    priced: &[(&Trace, &ModelPrice)],
    plan: Plan,
    assumptions: &Assumptions,
    rules: &CacheRules,
) -> MicroUsd {
    let mut total = MicroUsd::ZERO;
    for &(trace, price) in priced {
        let config = ReplayConfig {
            price,
            assumptions,
            rules,
        };
        total += replay_trace(trace, plan, &config, &mut |_| {}).cost;
    }
    total
}

/// Prints the table: for each rehydration and minimum segment, the default's cost ÷ recorded and
/// ÷ `never` (no voluntary refresh), then where its advantage over recorded disappears.
pub fn print(
    priced: &[(&Trace, &ModelPrice)],
    base: &Assumptions,
    rules: &CacheRules,
    measured: Option<Tokens>,
) -> std::io::Result<()> {
    let recorded = cost(priced, Plan::Recorded, base, rules);
    if recorded.0 <= 0 {
        return Ok(());
    }
    let mut sizes: Vec<Tokens> = REHYDRATIONS.iter().copied().chain(measured).collect();
    sizes.sort_unstable();
    sizes.dedup();
    outln!()?;
    outln!("sensitivity: the default policy (ski-rental) ÷ recorded | ÷ never, by rehydration")?;
    let header: Vec<String> = MIN_SEGMENTS
        .iter()
        .map(|m| format!("{:>17}", format!("min segment {m}")))
        .collect();
    outln!("{:>22} {}", "rehydration tokens", header.join(" "))?;
    let mut lost_at: Option<(Tokens, u32)> = None;
    for &size in &sizes {
        let mut cells = Vec::new();
        for &min_segment in &MIN_SEGMENTS {
            let a = Assumptions {
                rehydrate_tokens: size,
                flush_output_tokens: base.flush_output_tokens,
                min_segment_requests: min_segment,
                ..*base
            };
            let default = cost(priced, Plan::Online(Policy::SkiRental), &a, rules);
            let never = cost(priced, Plan::Online(Policy::Never), &a, rules);
            let vs_recorded = default.0 as f64 / recorded.0 as f64;
            let vs_never = default.0 as f64 / never.0.max(1) as f64;
            if vs_recorded >= 1.0 && lost_at.is_none_or(|(s, _)| s > size) {
                lost_at = Some((size, min_segment));
            }
            cells.push(format!("{vs_recorded:>8.3} | {vs_never:>6.3}"));
        }
        let mark = if Some(size) == measured {
            " (measured)"
        } else {
            ""
        };
        outln!("{:>22} {}", format!("{size}{mark}"), cells.join(" "))?;
    }
    match lost_at {
        Some((size, min_segment)) => outln!(
            "the default's advantage over recorded disappears from a rehydration of {size} tokens \
             (minimum segment {min_segment}) on"
        ),
        None => outln!(
            "the default costs less than recorded at every rehydration up to {} tokens",
            sizes.last().copied().unwrap_or(0)
        ),
    }
}
