//! How a clear is counted and priced: the replay engine prices every clear as
//! [`muninn_core::mask::masked_usage`] does, ledger rows clear what the replay cleared, and the
//! accounting keeps the latest tool uses and follows the remaining requests.

use super::*;

/// A tool loop of `n` requests, 10 s apart, each adding `delta` tokens of which `tools` are one
/// tool result; the recorded usage is a warm append with the breakpoint on the last block.
pub(super) fn tool_loop(n: usize, delta: Tokens, tools: Tokens) -> Trace {
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
            attempted: None,
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
