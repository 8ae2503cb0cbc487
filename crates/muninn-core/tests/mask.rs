//! The `mask` action: the decider clears old tool results when the segment's expected remaining
//! requests pay the clear back (and not when they are too few), the remaining-requests measure
//! learned from finished segments, and the replay engine prices every clear as
//! [`muninn_core::mask::masked_usage`] does.

use muninn_core::cache::{CacheRules, Ttl};
use muninn_core::decide::{
    Action, Bounds, Capabilities, Event, Policy, Rates, Reason, SessionView, decide,
};
use muninn_core::learn::{Learned, MIN_SEGMENTS_EVIDENCE, Runs, SegmentLengths};
use muninn_core::mask::{MaskedRequest, mask_break_even, masked_usage};
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::price::{ModelPrice, PriceTable};
use muninn_core::replay::{Assumptions, Plan, ReplayConfig, RunTotals, Step, replay_trace};
use muninn_core::session::{Accounting, Params, arriving_uses};
use muninn_core::trace::{ThreadKind, ToolResults, Trace, TraceRequest, Usage};

mod pricing;

use pricing::tool_loop;

const HEAD: Tokens = 12_000;
const MODEL: &str = "claude-sonnet-4-5";
const T0: i64 = 1_800_000_000_000;

fn price() -> ModelPrice {
    PriceTable::embedded().model(MODEL).expect("priced").clone()
}

fn assumptions() -> Assumptions {
    Assumptions {
        head_tokens: Some(HEAD),
        rehydrate_tokens: 4_000,
        ttl: Some(Ttl::FiveMinutes),
        ..Assumptions::default()
    }
}

/// A session's accounting at the 5-minute TTL, able to do everything.
fn accounting() -> Accounting {
    let price = price();
    let a = assumptions();
    let ttl = Ttl::FiveMinutes;
    Accounting::new(Params {
        ttl,
        head_ttl: ttl,
        rates: Rates::of(&price, ttl, ttl),
        bounds: a.bounds(HEAD, &price),
        min_cacheable: price.min_cacheable,
        decide_before_expiry_ms: a.decide_before_expiry_ms,
        can: Capabilities::default(),
        lifetime_ms: None,
    })
}

/// A warm session of `prefix` cached tokens (five warm requests growing to it).
fn warm(prefix: Tokens) -> Accounting {
    let mut acc = accounting();
    // Five warm requests growing to `prefix`.
    let mut prompt = HEAD;
    for i in 0..5 {
        let read = if i == 0 { 0 } else { prompt };
        let next = HEAD + (prefix - HEAD) * (i + 1) / 5;
        acc.request(
            T0 + i as i64 * 10_000,
            &Usage {
                cache_write_5m: next - read,
                cache_read: read,
                ..Usage::default()
            },
        );
        prompt = next;
    }
    acc
}

/// [`warm`]'s session whose prompt holds `cleared` clearable tool-result tokens from `from` on,
/// expected to have `remaining` more requests, whose reads of them since the segment's last
/// clear have long paid for a clear (the timing rule is tested on its own,
/// `a_clear_waits_until_the_reads_of_what_it_removes_paid_its_rewrite`).
fn view(acc: &Accounting, from: Tokens, cleared: Tokens, remaining: u64) -> SessionView<'_> {
    SessionView {
        clearable_tokens: cleared,
        clear_from_tokens: from,
        remaining_requests: remaining,
        clear_rent: MicroUsd(i64::MAX / 2),
        ..acc.view()
    }
}

const NOW: i64 = T0 + 50_000;

fn arrival(delta: Tokens) -> Event {
    Event::Arrival {
        boundary: false,
        delta,
    }
}

/// The decider masks exactly when the requests the segment is expected still to have pass
/// `mask::mask_break_even` for the same clear: one fewer and it appends.
#[test]
fn the_decider_masks_when_the_remaining_requests_pass_the_break_even() {
    let (prefix, from, cleared, delta) = (150_000, 30_000, 90_000, 2_000);
    let request = MaskedRequest {
        uncleared_tokens: prefix + delta,
        kept_tokens: from,
        cleared_tokens: cleared,
        cached_before_clear: HEAD,
        ttl: Ttl::FiveMinutes,
        output: 0,
    };
    let break_even = mask_break_even(&request, prefix, &price()).expect("pays back some time");
    let acc = warm(prefix);
    assert!(
        break_even >= 2,
        "a clear of a warm prefix costs extra now: {break_even}"
    );
    for policy in [Policy::SkiRental, Policy::Predictive] {
        let too_few = decide(
            policy,
            &view(&acc, from, cleared, break_even - 1),
            arrival(delta),
            NOW,
        );
        assert_eq!(too_few.action, Action::Append, "{policy}: {too_few:?}");
        let enough = decide(
            policy,
            &view(&acc, from, cleared, break_even + 1),
            arrival(delta),
            NOW,
        );
        assert_eq!(
            (enough.action, enough.reason),
            (Action::Mask, Reason::MaskPaysBack),
            "{policy}"
        );
        // The mask alternative is priced as mask::masked_usage prices the clear.
        let priced = enough
            .considered()
            .find(|a| a.action == Action::Mask)
            .expect("mask considered")
            .estimate;
        assert_eq!(priced, price().cost(&masked_usage(&request)));
    }
}

/// `view` at the start of the growth rule's count (no read excess yet), expected to go on
/// exactly as long as that rule leaves it: the clear's horizon is the segment's, not bounded by
/// a refresh that comes first.
fn uncapped(view: SessionView<'_>, delta: Tokens) -> SessionView<'_> {
    let fresh = SessionView {
        read_excess: MicroUsd::ZERO,
        ..view
    };
    SessionView {
        remaining_requests: fresh.mask_horizon(delta, NOW),
        ..fresh
    }
}

/// A clear that would pay back over the segment's remaining requests still waits until the
/// reads of the clearable results since the segment's last clear (its rent) reach the clear's
/// extra cost now: one micro-dollar short it appends, at the cost it masks. Clearing as soon as
/// the horizon paid for one clear cleared in small bites, a rewrite each, at consecutive
/// requests of a tool loop (51 clears where the optimum made 21 on `../shared/traces`).
#[test]
fn a_clear_waits_until_the_reads_of_what_it_removes_paid_its_rewrite() {
    let (prefix, from, cleared, delta) = (150_000, 30_000, 90_000, 2_000);
    let acc = warm(prefix);
    let paying = uncapped(view(&acc, from, cleared, 1_000), delta);
    let extra = paying.mask_extra(delta, NOW);
    assert!(extra > 0, "a warm clear costs a rewrite now: {extra}");
    // The segment's own length bounds the horizon, not the growth rule's refresh.
    assert_eq!(paying.mask_horizon(delta, NOW), paying.remaining_requests);
    for policy in [Policy::SkiRental, Policy::Predictive] {
        let short = SessionView {
            clear_rent: MicroUsd(extra as i64 - 1),
            ..paying
        };
        let d = decide(policy, &short, arrival(delta), NOW);
        assert_eq!(d.action, Action::Append, "{policy}: {d:?}");
        let paid = SessionView {
            clear_rent: MicroUsd(extra as i64),
            ..paying
        };
        let d = decide(policy, &paid, arrival(delta), NOW);
        assert_eq!(
            (d.action, d.reason),
            (Action::Mask, Reason::MaskPaysBack),
            "{policy}"
        );
    }
}

/// A wake after the cache expired rewrites its prompt whatever it does, so a clear there costs
/// less than appending, not more: the default clears at once, with no rent paid and no later
/// request expected — inside a tool loop, and at a boundary where restarting from memory is
/// dearer than the rewrite. Before, it priced clears only warm and appended
/// (`ColdAppendCheaper`), leaving the clear to a later warm request that pays a rewrite for it.
#[test]
fn a_cold_wake_clears_the_tool_results_it_rewrites_anyway() {
    let (prefix, from, cleared, delta) = (150_000, 30_000, 90_000, 2_000);
    let acc = warm(prefix);
    let cold_at = T0 + 3_600_000;
    let base = SessionView {
        clear_rent: MicroUsd::ZERO,
        ..view(&acc, from, cleared, 0)
    };
    assert!(!base.warm(cold_at) && !base.head_warm(cold_at));
    // At a boundary a restart from 4,000 tokens of memory beats the rewrite; from memory as
    // large as the prompt it does not.
    let large_memory = SessionView {
        bounds: Bounds {
            rehydrate_tokens: prefix,
            ..base.bounds
        },
        ..base
    };
    let request = MaskedRequest {
        uncleared_tokens: prefix + delta,
        kept_tokens: from,
        cleared_tokens: cleared,
        cached_before_clear: 0,
        ttl: Ttl::FiveMinutes,
        output: 0,
    };
    for policy in [Policy::SkiRental, Policy::Predictive] {
        for (v, boundary) in [(&base, false), (&large_memory, true)] {
            let d = decide(policy, v, Event::Arrival { boundary, delta }, cold_at);
            assert_eq!(
                (d.action, d.reason),
                (Action::Mask, Reason::MaskPaysBack),
                "{policy}, boundary {boundary}: {d:?}"
            );
            let estimate = |action| {
                d.considered()
                    .find(|a| a.action == action)
                    .expect("considered")
                    .estimate
            };
            assert_eq!(
                estimate(Action::Mask),
                price().cost(&masked_usage(&request))
            );
            assert!(estimate(Action::Mask) < estimate(Action::Append));
        }
    }
    // Nothing clearable: the cold wake rewrites the prompt as it is.
    let nothing = SessionView {
        clearable_tokens: 0,
        ..base
    };
    let d = decide(
        Policy::SkiRental,
        &nothing,
        Event::Arrival {
            boundary: false,
            delta,
        },
        cold_at,
    );
    assert_eq!(d.action, Action::Append);
}

/// Where the growth rule's refresh bounds the clear's horizon, no later clear in the segment
/// would follow and every request waited is one fewer it saves on: a clear that pays goes at
/// once, whatever rent was paid. The same view with the refresh far away waits.
#[test]
fn a_clear_the_growth_rule_bounds_does_not_wait() {
    let (prefix, from, cleared, delta) = (150_000, 30_000, 90_000, 2_000);
    let acc = warm(prefix);
    let unpaid = SessionView {
        clear_rent: MicroUsd::ZERO,
        ..uncapped(view(&acc, from, cleared, 1_000), delta)
    };
    assert_eq!(
        decide(Policy::SkiRental, &unpaid, arrival(delta), NOW).action,
        Action::Append
    );
    // The read excess a few requests short of one rebuild: the refresh comes within a few.
    let rebuild = unpaid.flush_cost(true) + unpaid.restart_write(0, NOW);
    let each = MicroUsd::of(prefix + delta - unpaid.rehydrated(), unpaid.rates.read);
    let near = SessionView {
        read_excess: MicroUsd(unpaid.learned.refresh_break_even(rebuild).0 - 9 * each.0),
        ..unpaid
    };
    let horizon = near.mask_horizon(delta, NOW);
    assert!(
        horizon > 0 && horizon < near.remaining_requests,
        "bounded by the refresh: {horizon}"
    );
    assert!(near.mask_gain(true, delta, NOW).is_some_and(|g| g > 0));
    let d = decide(Policy::SkiRental, &near, arrival(delta), NOW);
    assert_eq!((d.action, d.reason), (Action::Mask, Reason::MaskPaysBack));
}

/// Nothing clearable, a backend that cannot clear, or a policy that never masks: no mask,
/// however long the segment is expected to go on.
#[test]
fn policies_and_backends_that_cannot_mask_do_not() {
    let arrival = arrival(2_000);
    let acc = warm(150_000);
    let paying = view(&acc, 30_000, 90_000, 1_000);
    assert_eq!(
        decide(Policy::SkiRental, &paying, arrival, NOW).action,
        Action::Mask
    );
    for policy in [
        Policy::Never,
        Policy::Rebuild,
        Policy::Threshold(800_000),
        Policy::Ceiling(300_000),
        Policy::Keepalive(3),
    ] {
        let d = decide(policy, &paying, arrival, NOW);
        assert_ne!(d.action, Action::Mask, "{policy}: {d:?}");
    }
    let cannot = SessionView {
        can: Capabilities {
            mask: false,
            ..Capabilities::default()
        },
        ..paying
    };
    assert_eq!(
        decide(Policy::SkiRental, &cannot, arrival, NOW).action,
        Action::Append
    );
    let nothing = view(&acc, 0, 0, 1_000);
    assert_eq!(
        decide(Policy::SkiRental, &nothing, arrival, NOW).action,
        Action::Append
    );
    // Cold, the baselines still never clear (the default does: the next test).
    for policy in [Policy::Never, Policy::Keepalive(3)] {
        let d = decide(policy, &paying, arrival, NOW + 3_600_000);
        assert_ne!(d.action, Action::Mask, "{policy}: {d:?}");
    }
}

/// Where the growth rule would refresh, the decider takes whichever gains more over the
/// segment's expected remaining requests: a refresh that drops far more than the clear would,
/// or a clear that drops nearly as much as the refresh, more cheaply.
#[test]
fn a_mask_is_weighed_against_the_refresh_the_growth_rule_takes() {
    let arrival = Event::Arrival {
        boundary: true,
        delta: 2_000,
    };
    let acc = warm(150_000);
    let mut small_clear = view(&acc, 140_000, 5_000, 1_000);
    small_clear.read_excess = muninn_core::money::MicroUsd(1_000_000_000);
    let d = decide(Policy::SkiRental, &small_clear, arrival, NOW);
    assert_eq!(
        (d.action, d.reason),
        (Action::Refresh, Reason::GrowthBreakEven)
    );
    let mut big_clear = view(&acc, 14_000, 134_000, 1_000);
    big_clear.read_excess = small_clear.read_excess;
    let d = decide(Policy::SkiRental, &big_clear, arrival, NOW);
    assert_eq!((d.action, d.reason), (Action::Mask, Reason::MaskPaysBack));
}

/// The remaining-requests measure: the prior (half the requests so far) until enough segments
/// have finished, then the median of what the finished segments longer than the current one
/// still had; more long segments raise it, and it never looks at an unfinished segment.
#[test]
fn the_remaining_requests_are_learned_from_finished_segments() {
    let mut lengths = SegmentLengths::default();
    assert_eq!(lengths.remaining(0), 0);
    assert_eq!(lengths.remaining(10), 5);
    for _ in 0..MIN_SEGMENTS_EVIDENCE - 1 {
        lengths.observe(100);
    }
    assert_eq!(lengths.remaining(10), 5, "too little evidence: the prior");
    lengths.observe(100);
    // Three segments of 100 (spread over 64..128): the median survivor of 10 ends at 96.
    assert_eq!(lengths.remaining(10), 86);
    // None outlived 500: the prior again.
    assert_eq!(lengths.remaining(500), 250);
    // Short segments pull the median of a young segment down, not that of an old one.
    let mut mixed = lengths;
    for _ in 0..6 {
        mixed.observe(6);
    }
    assert!(mixed.remaining(2) < lengths.remaining(2), "{mixed:?}");
    assert_eq!(mixed.remaining(10), lengths.remaining(10));
    // Evidence adds up across sessions.
    let sum = Learned {
        segments: lengths,
        ..Learned::default()
    } + Learned {
        segments: mixed,
        ..Learned::default()
    };
    assert_eq!(sum.segments.count(), lengths.count() + mixed.count());
}

/// Inside a run the Mind's finished runs say how many requests the run still has: once runs of
/// 18 requests have ended their segments, the 17th has one more, while a Mind whose runs went on
/// in their segments keeps at least the segment estimate. Without the evidence (or at a
/// boundary, where a run begins) the segment estimate alone, as before.
#[test]
fn the_remaining_requests_inside_a_run_are_learned_from_finished_runs() {
    let mut runs = Runs::default();
    for _ in 0..MIN_SEGMENTS_EVIDENCE - 1 {
        runs.observe(18, true);
    }
    assert_eq!(runs.remaining(8, Some(17)), 8, "too little evidence");
    runs.observe(18, true);
    assert_eq!(runs.remaining(8, Some(17)), 1);
    assert_eq!(runs.remaining(8, Some(10)), 8);
    assert_eq!(runs.remaining(8, None), 8, "a boundary begins a run");
    assert_eq!(runs.remaining(8, Some(30)), 8, "none outlived it");
    let mut going_on = Runs::default();
    for _ in 0..MIN_SEGMENTS_EVIDENCE {
        going_on.observe(18, false);
    }
    assert_eq!(going_on.remaining(8, Some(17)), 8);
    assert_eq!(going_on.remaining(0, Some(10)), 8);
}

/// A Mind whose tool loops run 18 requests, one a session (each segment ends with its loop):
/// once its finished loops say so, no clear comes where the loop has fewer requests left than
/// the clear needs to pay back — the segment estimate alone (finished segments of 18 in a log₂
/// bucket, read as 16 to 31 requests) cleared at the 11th of every later session, 7 requests
/// before the end where it needed 8. The accounting learns the runs from the replay's requests,
/// carried across sessions as the rest of what a Mind learns.
#[test]
fn a_mind_whose_loops_run_18_requests_does_not_clear_near_their_end() {
    let price = price();
    let a = assumptions();
    let config = ReplayConfig {
        price: &price,
        assumptions: &a,
        rules: &CacheRules::default(),
    };
    let mut learned = Learned::default();
    let mut late = Vec::new();
    for session in 0..8 {
        let t = tool_loop(18, 6_000, 5_000);
        let mut steps = Vec::new();
        muninn_core::replay::replay_trace_learning(
            &t,
            Plan::Online(Policy::SkiRental),
            &config,
            &mut learned,
            &mut |s| steps.push(*s),
        );
        for (i, s) in steps.iter().enumerate() {
            let Some(mask) = s.mask else { continue };
            let before = steps[..i]
                .iter()
                .rev()
                .find(|p| p.kind == muninn_core::replay::StepKind::Request)
                .map_or(0, |p| p.usage.cache_read + p.usage.written());
            let pays_after = mask_break_even(&mask, before, &price).unwrap_or(u64::MAX);
            let left = (t.requests.len() - 1 - s.index) as u64;
            if session >= MIN_SEGMENTS_EVIDENCE as usize && left < pays_after {
                late.push((session, s.index, left, pays_after));
            }
        }
    }
    assert_eq!(learned.runs.count(), 8, "{learned:?}");
    assert_eq!(late, vec![], "clears that could not pay back in their loop");
}

/// The usage the cache model predicts before a request is sent (what the host records to ledger
/// a request whose answer a crash lost) costs what the decider prices the request at: a warm
/// append, a cold one and a segment's start, within the micro-dollar the split rounds.
#[test]
fn the_predicted_usage_costs_what_the_decider_prices() {
    let price = price();
    let acc = warm(60_000);
    let v = acc.view();
    let delta = 1_500;
    let warm_now = NOW;
    let cold_now = NOW + 3_600_000;
    assert!(v.warm(warm_now) && !v.warm(cold_now));
    let cases = [
        (false, warm_now, v.append_cost(true, delta, warm_now)),
        (false, cold_now, v.append_cost(false, delta, cold_now)),
        (true, warm_now, v.restart_write(delta, warm_now)),
        (true, cold_now, v.restart_write(delta, cold_now)),
    ];
    for (starts, now, priced) in cases {
        let usage = v.predicted_usage(starts, delta, now);
        let cost = price.cost(&usage);
        assert!(
            (cost.0 - priced.0).abs() <= 1,
            "starts {starts}, at {now}: {usage:?} costs {cost:?}, priced {priced:?}"
        );
        assert_eq!(usage.output, 0, "no output is predicted");
    }
    let warm_append = v.predicted_usage(false, delta, warm_now);
    assert_eq!(
        (warm_append.cache_read, warm_append.cache_write_5m),
        (60_000, delta)
    );
}
