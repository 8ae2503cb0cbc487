//! A compaction the recorded client made inside a tool loop (Claude Code compacts automatically
//! near its threshold, whatever the loop is doing): the optimum may refresh there, so the
//! recorded plan is one of the optimum's and the optimum costs no more than what was paid; an
//! online policy keeps to turn boundaries (no refresh inside a tool loop).

use super::*;
use muninn_core::trace::ToolResults;

/// Tokens each request of the loop adds.
const DELTA: Tokens = 2_000;
/// The request the client compacted before.
const COMPACTED_AT: usize = 60;
/// What the compaction left beyond the head (the summary and the next message).
const SUMMARY: Tokens = 3_000;

/// One task boundary (the first request), then one tool loop of 120 requests 10 s apart, each
/// a warm append of `DELTA`; before request `COMPACTED_AT` (prompt 132,003 tokens) the client
/// compacted: that request read the head and wrote the summary, and the loop went on from it.
/// Uncompacted, the loop would pass the 200,000-token window near its end. With `results`,
/// each request carries one tool result of half its tokens (a clear may remove them: the
/// optimum's mask program).
fn compacted_in_a_tool_loop(results: bool) -> Trace {
    let mut at = 1_800_000_000_000i64;
    let mut prompt = HEAD;
    let mut requests = Vec::new();
    for i in 0..120 {
        at += 10_000;
        let (read, compacted) = match i {
            0 => (0, false),
            COMPACTED_AT => (HEAD, true),
            _ => (prompt - 3, false),
        };
        prompt = if compacted {
            HEAD + SUMMARY
        } else {
            prompt + DELTA
        };
        requests.push(TraceRequest {
            at_ms: at,
            usage: crate::appended(prompt, read),
            boundary: i == 0,
            compacted,
            tool_results: ToolResults {
                tokens: if results && i > 0 { DELTA / 2 } else { 0 },
                uses: u32::from(results && i > 0),
            },
            ..TraceRequest::default()
        });
    }
    Trace {
        id: "c/agent/claude-sonnet-4-5".into(),
        session: "c".into(),
        thread: "agent".into(),
        kind: ThreadKind::Subagent,
        model: "claude-sonnet-4-5".into(),
        source: "test".into(),
        requests,
    }
}

/// The replay's own assumptions set to what the recorded compaction did: no memory beyond what
/// the trace shows after it, and no flush request (the compaction's own request is not in the
/// trace, as in Claude Code's sub-agent files).
fn as_the_client_compacted() -> Assumptions {
    Assumptions {
        rehydrate_tokens: 0,
        flush_prompt_tokens: 0,
        flush_output_tokens: Some(0),
        ..assumptions()
    }
}

#[test]
fn the_optimum_may_refresh_where_the_client_compacted_inside_a_tool_loop() {
    // Without tool results the segment program plans; with them, the mask program.
    for results in [false, true] {
        let t = compacted_in_a_tool_loop(results);
        let a = as_the_client_compacted();
        let plan = with_config(&t, &a, |config| optimum_plan(&t, config, &[]));
        assert!(
            plan.starts[COMPACTED_AT],
            "results {results}: the optimum starts a segment where the client compacted"
        );
        let recorded = cost(&t, Plan::Recorded, &a);
        let optimum = cost(&t, Plan::Optimum, &a);
        // Before, no plan could refresh there: the optimum carried the uncompacted prompt to
        // the ceiling and cost 1.17× what was paid (without tool results).
        assert!(
            optimum <= recorded,
            "results {results}: optimum {optimum:?} costs more than recorded {recorded:?}"
        );
        // Not refreshing is still priced as it would have cost.
        assert!(cost(&t, Plan::Online(Policy::Never), &a) > recorded);
    }
}

#[test]
fn an_online_policy_does_not_refresh_where_the_client_compacted() {
    let t = compacted_in_a_tool_loop(false);
    let mut first_refresh = None;
    replay(
        &t,
        Plan::Online(Policy::Ceiling(100_000)),
        &as_the_client_compacted(),
        &mut |step| {
            if step.refreshed && first_refresh.is_none() {
                first_refresh = Some(step.index);
            }
        },
    );
    // It waits until the window forces it (request 93), as the decider's bound says, however
    // far past its own threshold the prompt is at the compaction point.
    assert_eq!(first_refresh, Some(93));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Brute force over every segmentation whose refreshes fall where a turn begins or where the
    /// client compacted (after the minimum segment), on small traces with compactions at random
    /// requests: the optimum is no dearer than the cheapest (the tolerance of
    /// `the_optimum_matches_brute_force_on_small_traces`).
    #[test]
    fn the_optimum_matches_brute_force_where_the_client_compacted(
        steps in steps_strategy(9),
        compacted in prop::collection::vec(prop::bool::weighted(0.3), 9),
        one_hour in any::<bool>(),
    ) {
        let ttl = if one_hour { Ttl::OneHour } else { Ttl::FiveMinutes };
        let mut t = trace(&steps, ttl);
        for (r, &c) in t.requests.iter_mut().zip(&compacted).skip(1) {
            r.compacted = c;
        }
        let a = assumptions();
        let optimum = cost(&t, Plan::Optimum, &a);
        let brute = cheapest_admissible(&t, &a, &[], |turns, _, starts| {
            let mut s = 0;
            starts.iter().enumerate().skip(1).all(|(j, &start)| {
                let ok = !start || (turns[j].may_refresh() && j - s >= a.min_segment_requests as usize);
                if start {
                    s = j;
                }
                ok
            })
        })
        .unwrap_or(MicroUsd(i64::MAX));
        prop_assert!(optimum.0 <= brute.0 + brute.0 / 1000 + 5, "optimum {optimum} > brute force {brute}");
    }
}
