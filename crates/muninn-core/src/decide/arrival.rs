//! The decision at a request's arrival: its alternatives priced once, then each policy's rule
//! (the default's ski-rental rule weighs the refresh, the growth rule's rebuild and a clear).

use super::{Action, Alternative, Decision, Policy, Reason, SessionView};
use crate::mask::ClearPrice;
use crate::money::{MicroUsd, Tokens};

/// A request arrives: append, refresh or clear, by `policy`'s rules over the priced
/// alternatives (the ceiling first, whatever the policy).
pub(super) fn decide_arrival(
    policy: Policy,
    view: &SessionView,
    boundary: bool,
    delta: Tokens,
    now_ms: i64,
) -> Decision {
    let prices = price_arrival(policy, view, delta, now_ms);
    let go = |(action, reason)| Decision::new(action, reason, &prices.alts[..prices.priced]);
    // The ceiling is a hard bound: it overrides boundaries and the minimum segment.
    if view.segment_requests > 0 && view.prefix_tokens + delta > view.bounds.ceiling_tokens {
        return go((Action::Refresh, Reason::Ceiling));
    }
    if view.segment_requests == 0 {
        return go((Action::Append, Reason::Warm));
    }
    let allowed = view.refresh_allowed(boundary);
    go(arrival_rule(
        policy,
        view,
        allowed,
        view.prefix_tokens + delta,
        &prices,
        now_ms,
    ))
}

/// An arrival's alternatives, priced once for every rule that weighs them.
struct ArrivalPrices {
    warm: bool,
    /// Append, refresh and mask, in the order a [`Decision`] lists them.
    alts: [Alternative; 3],
    /// How many of `alts` were priced: the mask only where a clear can be.
    priced: usize,
    /// [`SessionView::growth_rebuild`], for the policies whose rules weigh it.
    rebuild: Option<MicroUsd>,
    /// The clear (`None`: not weighed, or no clear possible).
    clear: Option<ClearPrice>,
}

/// Prices an arrival's append, refresh and (where the policy weighs one) clear.
fn price_arrival(policy: Policy, view: &SessionView, delta: Tokens, now_ms: i64) -> ArrivalPrices {
    let warm = view.warm(now_ms);
    let append = Alternative {
        action: Action::Append,
        estimate: view.append_cost(warm, delta, now_ms),
    };
    let flush = if view.flushed {
        MicroUsd::ZERO
    } else {
        view.flush_cost(warm)
    };
    let refresh = Alternative {
        action: Action::Refresh,
        estimate: flush + view.restart_write(delta, now_ms),
    };
    // The default's rules weigh the growth rule's rebuild and the clear; both are priced once
    // here (the clear only where it can be: something clearable).
    let rebuild = matches!(policy, Policy::SkiRental | Policy::Predictive)
        .then(|| view.growth_rebuild(now_ms));
    let clear = rebuild
        .filter(|_| view.can.mask)
        .and_then(|r| view.price_clear(warm, delta, now_ms, append.estimate, r));
    let mask = Alternative {
        action: Action::Mask,
        estimate: clear.map_or(MicroUsd::ZERO, |c| c.cost),
    };
    ArrivalPrices {
        warm,
        alts: [append, refresh, mask],
        priced: if clear.is_some() { 3 } else { 2 },
        rebuild,
        clear,
    }
}

/// What `policy` does at an arrival inside a segment and under the ceiling, for a `prompt` of
/// that many tokens; `allowed` says whether a refresh may happen here.
fn arrival_rule(
    policy: Policy,
    view: &SessionView,
    allowed: Result<(), Reason>,
    prompt: Tokens,
    prices: &ArrivalPrices,
    now_ms: i64,
) -> (Action, Reason) {
    match policy {
        Policy::Never | Policy::Keepalive(_) => (
            Action::Append,
            if prices.warm {
                Reason::Warm
            } else {
                Reason::ColdAppendCheaper
            },
        ),
        Policy::Rebuild => match allowed {
            Ok(()) => (Action::Refresh, Reason::EveryBoundary),
            Err(r) => (Action::Append, r),
        },
        Policy::Threshold(ppm) => {
            let limit = (view.bounds.context_window as u128 * ppm as u128 / 1_000_000) as Tokens;
            match allowed {
                Ok(()) if prompt >= limit => (Action::Refresh, Reason::SizeThreshold),
                Ok(()) => (Action::Append, Reason::Warm),
                Err(r) => (Action::Append, r),
            }
        }
        Policy::Ceiling(n) => match allowed {
            Ok(()) if prompt >= n => (Action::Refresh, Reason::SizeThreshold),
            Ok(()) => (Action::Append, Reason::Warm),
            Err(r) => (Action::Append, r),
        },
        Policy::SkiRental | Policy::Predictive => ski_rental_arrival(
            view,
            allowed,
            Priced {
                warm: prices.warm,
                append: prices.alts[0].estimate,
                refresh: prices.alts[1].estimate,
                rebuild: prices
                    .rebuild
                    .unwrap_or_else(|| view.growth_rebuild(now_ms)),
                clear: prices.clear,
            },
        ),
    }
}

/// What an arrival's rules need, priced once by [`decide_arrival`].
struct Priced {
    warm: bool,
    append: MicroUsd,
    refresh: MicroUsd,
    /// [`SessionView::growth_rebuild`].
    rebuild: MicroUsd,
    /// The clear (`None`: no clear possible).
    clear: Option<ClearPrice>,
}

/// The default's arrival rules: a cold restart when it is cheaper, the growth rule's refresh,
/// and a mask when it pays (and beats that refresh).
fn ski_rental_arrival(
    view: &SessionView,
    allowed: Result<(), Reason>,
    p: Priced,
) -> (Action, Reason) {
    let mask_pays = p.clear.is_some_and(|c| c.gain() > 0 && view.clear_due(&c));
    if let Err(r) = allowed {
        // Refreshes wait; a clear keeps the segment and the latest tool results, so it does not.
        return if mask_pays {
            (Action::Mask, Reason::MaskPaysBack)
        } else {
            (Action::Append, r)
        };
    }
    if !p.warm {
        // Cold wake: restart if it is cheaper than rewriting the prefix; else rewrite it, with
        // the old tool results cleared where there are any (the clear writes less than the
        // append, [`SessionView::price_clear`]).
        return if p.refresh < p.append {
            (Action::Refresh, Reason::ColdRestartCheaper)
        } else if mask_pays {
            (Action::Mask, Reason::MaskPaysBack)
        } else {
            (Action::Append, Reason::ColdAppendCheaper)
        };
    }
    // Growth: the reads paid above R since the last rehydration have bought one rebuild — or as
    // many as the refreshes paid so far say one is worth.
    let (action, reason) = match view.growth_bar(p.rebuild) {
        Ok(()) => (Action::Refresh, Reason::GrowthBreakEven),
        Err(waits) => (Action::Append, waits),
    };
    if action == Action::Refresh {
        // The growth rule refreshes now: the clear must gain more over the segment's expected
        // remaining requests (the refresh would end the segment; the clear keeps it going).
        let full = p.clear.map(|c| c.gain_over(view.remaining_requests));
        return match full {
            Some(g) if g > 0 && g > view.refresh_gain(p.refresh, p.append) => {
                (Action::Mask, Reason::MaskPaysBack)
            }
            _ => (action, reason),
        };
    }
    if mask_pays {
        (Action::Mask, Reason::MaskPaysBack)
    } else {
        (action, reason)
    }
}
