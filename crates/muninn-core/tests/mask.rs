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

/// The accounting's rent: r·C for each warm request over the results a clear would have
/// removed when it was sent, from the segment's last clear on.
#[test]
fn the_accounting_counts_the_rent_of_what_a_clear_would_remove() {
    let mut acc = five_results();
    // Clearable when sent: nothing until the fourth result (three uses are kept), then 1k, then
    // 1k + 2k.
    let r = price().read;
    assert_eq!(
        acc.view().clear_rent,
        MicroUsd::of(1_000, r) + MicroUsd::of(3_000, r)
    );
    acc.masked(0);
    assert_eq!(acc.view().clear_rent, MicroUsd::ZERO);
    warm_request(&mut acc, 6, 6_000);
    // After the clear the kept 3k, 4k, 5k and the new 6k: the 3k is clearable again.
    assert_eq!(acc.view().clear_rent, MicroUsd::of(3_000, r));
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

/// A tool loop of `n` requests, 10 s apart, each adding `delta` tokens of which `tools` are one
/// tool result; the recorded usage is a warm append with the breakpoint on the last block.
fn tool_loop(n: usize, delta: Tokens, tools: Tokens) -> Trace {
    let mut prompt = HEAD;
    let requests = (0..n)
        .map(|i| {
            let read = if i == 0 { 0 } else { prompt };
            prompt += delta;
            TraceRequest {
                at_ms: T0 + i as i64 * 10_000,
                usage: Usage {
                    cache_write_5m: prompt - read,
                    cache_read: read,
                    output: 300,
                    ..Usage::default()
                },
                boundary: i % 20 == 0,
                tool_results: ToolResults {
                    tokens: if i == 0 { 0 } else { tools },
                    uses: u32::from(i > 0),
                },
                ..TraceRequest::default()
            }
        })
        .collect();
    Trace {
        id: format!("loop/main/{MODEL}"),
        session: "loop".into(),
        thread: "main".into(),
        kind: ThreadKind::Main,
        model: MODEL.into(),
        source: "loop.jsonl".into(),
        requests,
    }
}

fn replay(t: &Trace, plan: Plan, a: &Assumptions, steps: &mut Vec<Step>) -> RunTotals {
    let price = price();
    let config = ReplayConfig {
        price: &price,
        assumptions: a,
        rules: &CacheRules::default(),
    };
    replay_trace(t, plan, &config, &mut |s| steps.push(*s))
}

/// On a tool loop whose results dominate its growth, the default masks; every masked request
/// is billed what `mask::masked_usage` says for its clear, the totals count each mask and the
/// tokens it cleared, and the run costs less than the same policy without masks. `never` does
/// not mask.
#[test]
fn replay_counts_and_prices_masks_as_masked_usage() {
    let t = tool_loop(120, 6_000, 5_000);
    let a = assumptions();
    let mut steps = Vec::new();
    let with = replay(&t, Plan::Online(Policy::SkiRental), &a, &mut steps);
    let masks: Vec<&Step> = steps.iter().filter(|s| s.mask.is_some()).collect();
    assert!(with.masks >= 1, "{with:?}");
    assert_eq!(with.masks, masks.len() as u64);
    let mut cleared = 0;
    for step in &masks {
        let mask = step.mask.expect("a mask");
        assert_eq!(step.usage, masked_usage(&mask), "{step:?}");
        assert!(
            mask.cleared_tokens > 0 && mask.kept_tokens >= HEAD,
            "{mask:?}"
        );
        cleared += mask.cleared_tokens;
    }
    assert_eq!(with.cleared_tokens, cleared);

    let off = Assumptions { mask: false, ..a };
    let without = replay(&t, Plan::Online(Policy::SkiRental), &off, &mut Vec::new());
    assert_eq!(without.masks, 0);
    assert!(
        with.cost < without.cost,
        "with masks {} µ$, without {} µ$",
        with.cost.0,
        without.cost.0
    );
    let never = replay(&t, Plan::Online(Policy::Never), &a, &mut Vec::new());
    assert_eq!(never.masks, 0);
}

/// A masked request's results are gone from the prompt: the next request of the segment reads
/// a prefix shorter by the cleared tokens, and a segment's first requests never mask (the prior
/// expects nothing of a segment that has barely begun).
#[test]
fn after_a_mask_the_segment_carries_fewer_tokens() {
    let t = tool_loop(120, 6_000, 5_000);
    let mut steps = Vec::new();
    replay(
        &t,
        Plan::Online(Policy::SkiRental),
        &assumptions(),
        &mut steps,
    );
    let first = steps.iter().position(|s| s.mask.is_some()).expect("a mask");
    assert!(steps[first].index >= 4, "masked at {}", steps[first].index);
    let mask = steps[first].mask.expect("a mask");
    let next = &steps[first + 1];
    assert_eq!(
        next.usage.prompt(),
        mask.uncleared_tokens - mask.cleared_tokens + 6_000,
        "{next:?}"
    );
    assert!(next.usage.cache_read > mask.kept_tokens, "{next:?}");
}

/// Warm request `i` of [`five_results`]' pattern: each after the first adds 2k tokens to the
/// prompt, of which `tools` of tool results (one use; none when 0).
fn warm_request(acc: &mut Accounting, i: u64, tools: Tokens) {
    if tools > 0 {
        acc.tool_results(tools, 1);
    }
    let prompt = HEAD + 2_000 * (i + 1);
    let read = if i == 0 { 0 } else { prompt - 2_000 };
    acc.request(
        T0 + i as i64 * 1000,
        &Usage {
            cache_write_5m: prompt - read,
            cache_read: read,
            ..Usage::default()
        },
    );
}

/// An accounting after six warm requests, each after the first adding 2k tokens to the prompt,
/// of which tool results of 1k, 2k, .. 5k tokens (one use each).
fn five_results() -> Accounting {
    let mut acc = accounting();
    for i in 0..6u64 {
        warm_request(&mut acc, i, 1_000 * i);
    }
    acc
}

/// Tool results in the accounting: a clear removes all but the latest `mask_keep_tool_uses`
/// uses, from where the oldest began.
#[test]
fn the_accounting_keeps_the_latest_tool_uses() {
    let mut acc = five_results();
    // Results of 1k..5k tokens; the latest three (3k, 4k, 5k) stay.
    let view = acc.view();
    assert_eq!(view.clearable_tokens, 1_000 + 2_000);
    assert_eq!(view.clear_from_tokens, HEAD + 2_000);
    assert_eq!(acc.masked(0), 3_000);
    assert_eq!(acc.view().clearable_tokens, 0);
}

/// The provider's `keep` counts the newest tool uses of the request it clears, and the newest
/// are the ones the request itself answers: a clear sent with one more result keeps that one
/// and two earlier, so it removes one earlier result more than the earlier results alone say —
/// in the decider's view, in what the accounting then drops, and in the optimum's plan.
#[test]
fn a_clear_counts_the_arriving_results_among_the_kept() {
    let mut acc = five_results();
    // Results of 1k..5k, and a request arriving with a sixth: the provider keeps 4k, 5k and
    // the sixth, and clears 1k + 2k + 3k.
    let view = acc.arrival_view(false, 1);
    assert_eq!(view.clearable_tokens, 1_000 + 2_000 + 3_000);
    assert_eq!(view.clear_from_tokens, HEAD + 2_000);
    // Two arriving uses: they take two of the three kept, the 5k alone stays.
    assert_eq!(acc.arrival_view(false, 2).clearable_tokens, 10_000);
    assert_eq!(acc.masked(1), 6_000);
}

/// One economy for masks: the replay's steps fed as ledger rows through
/// `Accounting::record_decided` (the host's path, and the closed loop's) put the same clearable
/// tokens before every mask as the replay engine cleared, and leave the Mind knowing what the
/// replay's did.
#[test]
fn ledger_rows_clear_what_the_replay_cleared() {
    use crate::learn::{default_steps, row_kind, segment_start};
    use muninn_core::ledger::{Decided, RowKind};
    let t = tool_loop(120, 6_000, 5_000);
    let price = price();
    let a = assumptions();
    let (_, steps, learned) = default_steps(&t, &a, &price);
    let ttl = Ttl::FiveMinutes;
    let mut acc = accounting();
    let mut masks = 0;
    for s in &steps {
        let kind = row_kind(s.kind);
        let boundary = t.requests[s.index].boundary || s.index == 0;
        if let Some(mask) = s.mask {
            let tools = arriving_uses(&t.requests[s.index].tool_results);
            let view = acc.arrival_view(boundary, tools);
            assert_eq!(
                (view.clearable_tokens, view.clear_from_tokens),
                (mask.cleared_tokens, mask.kept_tokens),
                "step {}",
                s.index
            );
            masks += 1;
        }
        let decided = Decided {
            kind,
            event: (kind == RowKind::Request).then_some(Event::Arrival { boundary, delta: 0 }),
            action: s.mask.map(|_| Action::Mask),
            reason: None,
            segment: s.refreshed.then(|| segment_start(&a)),
            lost_at_ms: None,
            policy: "ski-rental".into(),
            ttl,
            head_ttl: ttl,
            bounds: a.bounds(HEAD, &price),
            decide_before_expiry_ms: a.decide_before_expiry_ms,
            can: Capabilities::default(),
            tool_results: if kind == RowKind::Request {
                t.requests[s.index].tool_results
            } else {
                ToolResults::default()
            },
        };
        acc.record_decided(&decided, s.at_ms, &s.usage, s.cost);
    }
    assert!(masks >= 1);
    acc.end_session();
    assert_eq!(acc.learned(), learned);
}

/// The clear the decider prices once per arrival (`SessionView::price_clear`) is the clear its
/// definitions price: cost, extra over appending, horizon, gain, due — over prefixes, clearable
/// tokens, read excess (which bounds the horizon), rent and remaining requests, warm and cold.
#[test]
fn a_clear_priced_once_is_the_clear_its_definitions_price() {
    let mut checked = 0;
    // Horizons bounded by the growth rule's refresh (0 < h < remaining), by the segment, and 0.
    let (mut by_refresh, mut by_segment, mut none) = (false, false, false);
    for (prefix, from, cleared) in [(150_000, 30_000, 90_000), (40_000, 12_000, 5_000)] {
        let acc = warm(prefix);
        for remaining in [0, 3, 40, 1_000] {
            for excess in [0, 200_000, 2_000_000] {
                for rent in [0, 150_000, i64::MAX / 2] {
                    for delta in [0, 2_000] {
                        let v = SessionView {
                            read_excess: MicroUsd(excess),
                            clear_rent: MicroUsd(rent),
                            ..view(&acc, from, cleared, remaining)
                        };
                        let append = v.append_cost(true, delta, NOW);
                        let rebuild = v.growth_rebuild(NOW);
                        let c = v
                            .price_clear(true, delta, NOW, append, rebuild)
                            .expect("warm, something clearable");
                        assert_eq!(c.cost, v.mask_cost(delta, NOW));
                        assert_eq!(c.extra, v.mask_extra(delta, NOW));
                        assert_eq!(c.horizon, v.mask_horizon(delta, NOW));
                        assert_eq!(Some(c.gain()), v.mask_gain(true, delta, NOW));
                        assert_eq!(v.clear_due(&c), v.mask_due(delta, NOW));
                        by_refresh |= c.horizon > 0 && c.horizon < remaining;
                        by_segment |= c.horizon > 0 && c.horizon == remaining;
                        none |= c.horizon == 0 && remaining > 0;
                        // Cold, the clear is priced against the cold append: it writes C fewer
                        // tokens, so it costs less now.
                        let rewrite = v.append_cost(false, delta, NOW);
                        let cold = v
                            .price_clear(false, delta, NOW, rewrite, rebuild)
                            .expect("something clearable");
                        assert_eq!(cold.cost, v.cold_mask_cost(delta, NOW));
                        assert_eq!(cold.extra, cold.cost.0 as i128 - rewrite.0 as i128);
                        assert!(cold.extra < 0 && v.clear_due(&cold), "{cold:?}");
                        assert_eq!(cold.horizon, c.horizon);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 3 * 3 * 2);
    assert!(by_refresh && by_segment && none);
}

/// The accounting keeps the remaining-requests estimate current as requests come and segments
/// end (it computes it when they do, not on every view): after every event the view's is what
/// the learned lengths say for the next request.
#[test]
fn the_views_remaining_requests_follow_every_request_and_segment() {
    let mut acc = accounting();
    let mut at = T0;
    let mut seen = std::collections::BTreeSet::new();
    for segment in 0..12u32 {
        // Segments of 1, 3, 7, … requests: the estimate leaves its prior after three.
        for i in 0..(1 + segment * 3) {
            at += 10_000;
            acc.request(
                at,
                &Usage {
                    cache_write_5m: 100,
                    cache_read: if i == 0 { 0 } else { HEAD },
                    ..Usage::default()
                },
            );
            let expected = acc.learned().segments.remaining(acc.segment_requests() + 1);
            assert_eq!(acc.view().remaining_requests, expected);
            seen.insert(expected);
        }
        acc.begin_segment(HEAD, muninn_core::session::SegmentCause::Chosen);
        let expected = acc.learned().segments.remaining(1);
        assert_eq!(acc.view().remaining_requests, expected);
    }
    acc.end_session();
    assert_eq!(
        acc.view().remaining_requests,
        acc.learned().segments.remaining(1)
    );
    // The estimate moved: the check compared more than one value.
    assert!(seen.len() > 5, "{seen:?}");
}

/// The estimate the accounting keeps inside a run follows the run and the runs learned as well
/// as the segment: after every event, at a boundary and inside the run, the arrival view's
/// remaining requests are what the learned segments and runs say for the next request.
#[test]
fn the_arrival_views_remaining_requests_follow_every_run() {
    let mut acc = accounting();
    let mut at = T0;
    let mut run = 0u32;
    let mut inside = std::collections::BTreeSet::new();
    let check = |acc: &Accounting, run: u32, inside: &mut std::collections::BTreeSet<u64>| {
        let learned = acc.learned();
        let segment = learned.segments.remaining(acc.segment_requests() + 1);
        assert_eq!(acc.arrival_view(true, 0).remaining_requests, segment);
        let expected = learned.runs.remaining(segment, Some(run + 1));
        assert_eq!(acc.arrival_view(false, 0).remaining_requests, expected);
        if expected != segment {
            inside.insert(expected);
        }
    };
    for r in 0..15u32 {
        // Runs of 6, 12 and 18 requests; two in three begin a new segment (their runs end
        // their segments), so the runs' own rest is the horizon inside a run.
        if r % 3 != 0 {
            acc.begin_segment(HEAD, muninn_core::session::SegmentCause::Chosen);
            check(&acc, run, &mut inside);
        }
        for i in 0..6 * (1 + r % 3) {
            acc.arrived(i == 0);
            if i == 0 {
                run = 0;
            }
            check(&acc, run, &mut inside);
            at += 10_000;
            acc.request(
                at,
                &Usage {
                    cache_write_5m: 100,
                    cache_read: if acc.segment_requests() == 0 { 0 } else { HEAD },
                    ..Usage::default()
                },
            );
            run += 1;
            check(&acc, run, &mut inside);
        }
    }
    acc.end_session();
    check(&acc, 0, &mut inside);
    // The runs' evidence moved the estimate inside runs, to more than one value.
    assert!(inside.len() > 2, "{inside:?}");
}
