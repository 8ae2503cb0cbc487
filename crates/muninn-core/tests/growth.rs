//! The growth rule at an idle gap (`muninn_core::decide`, *growth.rs*): when its refresh is due
//! but a tool loop kept it from starting, and the session then goes idle, the default flushes
//! as the tail expires and restarts at the wake instead of pinging the old prefix through the
//! gap — unless the last answer awaits tool results, where no refresh may start at the wake
//! and no idle flush is sent at all.

use muninn_core::cache::{CacheRules, Ttl};
use muninn_core::decide::Policy;
use muninn_core::money::Tokens;
use muninn_core::price::{ModelPrice, PriceTable};
use muninn_core::replay::{Assumptions, Plan, ReplayConfig, Step, StepKind, replay_trace};
use muninn_core::trace::{ThreadKind, ToolResults, Trace, TraceRequest};

const HEAD: Tokens = 12_000;
const REHYDRATE: Tokens = 8_000;
const MODEL: &str = "claude-sonnet-4-5";
/// Tokens each request of the tool loop adds: the reads above a rehydration pass the growth
/// rule's break-even for a Mind with no refresh paid back yet (three rebuilds) inside the loop.
const DELTA: Tokens = 4_000;
const LOOP: usize = 40;

/// What ends the two-hour gap.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wake {
    /// A request that begins a new task.
    NewTask,
    /// The results of the tools the last answer asked for.
    ToolResults,
    /// A line that is no task boundary and answers no tool use (Claude Code's meta line from
    /// another session, after an answer that asked for no tools).
    MetaLine,
    /// A person's message carrying the results of the tools the last answer asked for, written
    /// 5 s after it: the request that sent them was refused (Claude Code's "You've hit your
    /// limit", dropped as synthetic), so they ride on the next one.
    LimitedThenTyped,
}

/// A task boundary, then a tool loop of `LOOP` requests 10 s apart (the last prompt 176,000
/// tokens), then a two-hour gap (at a 5-minute TTL) ended by `wake`.
fn trace(wake: Wake) -> Trace {
    let mut at = 1_800_000_000_000i64;
    let mut prompt = HEAD;
    let mut requests = Vec::new();
    for i in 0..=LOOP + 1 {
        at += if i == LOOP + 1 { 2 * 3_600_000 } else { 10_000 };
        let read = if i == 0 { 0 } else { prompt - 3 };
        prompt += DELTA;
        let waking = i == LOOP + 1;
        let wake_typed = matches!(wake, Wake::NewTask | Wake::LimitedThenTyped);
        let wake_answers = matches!(wake, Wake::ToolResults | Wake::LimitedThenTyped);
        requests.push(TraceRequest {
            at_ms: at,
            usage: crate::appended(prompt, read),
            boundary: i == 0 || (waking && wake_typed),
            tool_results: ToolResults {
                tokens: 500,
                uses: u32::from(i > 0 && (!waking || wake_answers)),
            },
            tool_results_at_ms: (waking && wake == Wake::LimitedThenTyped)
                .then(|| at - 2 * 3_600_000 + 5_000),
            ..TraceRequest::default()
        });
    }
    Trace {
        id: format!("gap-{wake:?}/main/{MODEL}"),
        session: format!("gap-{wake:?}"),
        thread: "main".into(),
        kind: ThreadKind::Main,
        model: MODEL.into(),
        source: "gap.jsonl".into(),
        requests,
    }
}

/// The default's steps on `t`.
fn default_steps(t: &Trace) -> Vec<Step> {
    let price: ModelPrice = PriceTable::embedded().model(MODEL).expect("priced").clone();
    let a = Assumptions {
        head_tokens: Some(HEAD),
        rehydrate_tokens: REHYDRATE,
        min_segment_requests: 4,
        ttl: Some(Ttl::FiveMinutes),
        ..Assumptions::default()
    };
    let config = ReplayConfig {
        price: &price,
        assumptions: &a,
        rules: &CacheRules::default(),
    };
    let mut steps = Vec::new();
    replay_trace(t, Plan::Online(Policy::SkiRental), &config, &mut |s| {
        steps.push(*s)
    });
    steps
}

/// The requests before which the session flushed.
fn flush_indices(steps: &[Step]) -> Vec<usize> {
    steps
        .iter()
        .filter(|s| s.kind == StepKind::Flush)
        .map(|s| s.index)
        .collect()
}

/// Pings that read more than the head and a rehydration: the old prefix kept warm.
fn tail_pings(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| s.kind == StepKind::Ping && s.usage.cache_read > HEAD + REHYDRATE)
        .count()
}

/// The refresh the tool loop held back is due when the session goes idle and the wake is a
/// task boundary: the default flushes as the tail expires, pings nothing of the old prefix
/// through the two hours, and restarts at the wake. Before the rule it kept the old prefix
/// warm with tail pings for as long as the ski-rental budget allowed.
#[test]
fn a_due_refresh_begins_at_the_gap_instead_of_pinging_the_old_prefix() {
    let steps = default_steps(&trace(Wake::NewTask));
    let wake = LOOP + 1;
    let inside_loop_refreshes = steps
        .iter()
        .filter(|s| s.kind == StepKind::Request && s.refreshed && s.index < wake)
        .count();
    assert_eq!(inside_loop_refreshes, 0, "no refresh inside the tool loop");
    assert_eq!(tail_pings(&steps), 0, "{steps:#?}");
    let flushes = flush_indices(&steps);
    assert_eq!(flushes, vec![wake], "one flush, in the gap before the wake");
    let at_wake = steps
        .iter()
        .find(|s| s.kind == StepKind::Request && s.index == wake)
        .expect("the wake");
    assert!(at_wake.refreshed, "the wake restarts from the rehydration");
}

/// The same gap ended by the tool results the last answer asked for: no refresh may start at
/// that wake, so no idle flush is sent (neither the growth rule's nor the one before letting
/// the tail go) — the keep-warm rule alone decides, and the wake continues the segment.
#[test]
fn no_idle_flush_while_the_last_answer_awaits_tool_results() {
    let steps = default_steps(&trace(Wake::ToolResults));
    assert!(
        steps.iter().all(|s| s.kind != StepKind::Flush),
        "{steps:#?}"
    );
    assert!(tail_pings(&steps) > 0, "the keep-warm rule pings as before");
    assert!(
        steps
            .iter()
            .all(|s| !(s.kind == StepKind::Request && s.refreshed && s.index > 0))
    );
}

/// A wake that is no task boundary but answers no tool use either: nothing before the gap says
/// the next request will continue a run (the last answer asked for no tools), so the session
/// flushes in the gap as it does before a new task. Reading "awaits tool results" from the
/// wake's not being a boundary would have known the future here.
#[test]
fn a_wake_that_answers_no_tool_use_does_not_hold_the_flush_back() {
    let steps = default_steps(&trace(Wake::MetaLine));
    let flushes = flush_indices(&steps);
    assert_eq!(flushes, vec![LOOP + 1], "{steps:#?}");
    assert_eq!(tail_pings(&steps), 0);
}

/// Tool results written 5 s after the answer that asked for them, whose request the API
/// refused (a usage limit), then a person's message hours later carrying them: nothing was
/// awaited through the gap — the results existed before its first decision — so the session
/// flushes as it does before a new task and restarts at the wake (IDAHO-VAULT, session
/// 25924d0f, a 19-hour gap). Awaiting them until sent held the flush back and rewrote the
/// old prefix cold at the wake.
#[test]
fn tool_results_written_before_the_gap_are_not_awaited_through_it() {
    let steps = default_steps(&trace(Wake::LimitedThenTyped));
    let flushes = flush_indices(&steps);
    assert_eq!(flushes, vec![LOOP + 1], "{steps:#?}");
    assert_eq!(tail_pings(&steps), 0);
    let at_wake = steps
        .iter()
        .find(|s| s.kind == StepKind::Request && s.index == LOOP + 1)
        .expect("the wake");
    assert!(at_wake.refreshed, "the wake restarts from the rehydration");
}
