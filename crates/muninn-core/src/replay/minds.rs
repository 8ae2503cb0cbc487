//! Replaying many traces the way a Mind lives them: what a session learned about its refreshes
//! and pings ([`crate::learn`]) is known to the Mind's later sessions, never to earlier or
//! overlapping ones.

use super::{Plan, ReplayConfig, RunTotals, Step, replay_trace_learning};
use crate::cache::CacheRules;
use crate::learn::Learned;
use crate::price::ModelPrice;
use crate::trace::{ThreadKind, Trace};
use std::collections::BTreeMap;

/// The Mind a trace belongs to in a replay: a muninn ledger's thread by its session (the Mind's
/// id); any other by the directory its file lies in (a Claude Code project, a Codex day) and its
/// kind of thread, since a sub-agent's sessions are not its parent's.
pub fn mind_of(trace: &Trace) -> (String, ThreadKind) {
    if trace.kind == ThreadKind::Mind {
        return (trace.session.clone(), trace.kind);
    }
    let dir = std::path::Path::new(&trace.source)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, trace.kind)
}

/// Replays every trace under `plan`, calling `on_step` with each priced request and the index
/// of its trace in `priced`, and returns each trace's totals (in `priced`'s order).
///
/// The traces of one Mind ([`mind_of`]) run in the order they began, and each starts with what
/// the Mind learned in the traces that *ended* before it began — strictly causal even where a
/// project ran sessions side by side. Evidence adds up, so a trace's own lesson is what it
/// added to the state it started with.
pub fn replay_traces(
    priced: &[(&Trace, &ModelPrice)],
    plan: Plan,
    assumptions: &super::Assumptions,
    rules: &CacheRules,
    on_step: &mut dyn FnMut(usize, &Step),
) -> Vec<RunTotals> {
    let mut order: Vec<usize> = (0..priced.len()).collect();
    let span = |i: usize| {
        let r = &priced[i].0.requests;
        (
            r.first().map_or(i64::MIN, |q| q.at_ms),
            r.last().map_or(i64::MIN, |q| q.at_ms),
        )
    };
    order.sort_by_key(|&i| (mind_of(priced[i].0), span(i).0, i));
    let mut totals = vec![RunTotals::default(); priced.len()];
    // Per Mind: what the traces that ended before the current one began taught (`known`), and
    // the lessons of those that had not ended by then (`pending`, by end). Traces run in the
    // order they began, so a lesson known to one trace is known to every later one: each joins
    // `known` once, when the first trace that began after its end comes. (Summing every earlier
    // lesson again for each trace cost a Mind of n sessions n² additions of 2.3 KB: 20,000
    // sessions ran for minutes.) Integer sums do not depend on their order, so `known` is that
    // sum — the counts' saturating sums of non-negative lessons included; only a micro-dollar
    // sum that saturated, past 9.2 × 10¹² dollars, could differ.
    let mut pending: BTreeMap<(i64, usize), Learned> = BTreeMap::new();
    let mut known = Learned::default();
    let mut mind: Option<(String, ThreadKind)> = None;
    for i in order {
        let (trace, price) = priced[i];
        let this = mind_of(trace);
        if mind.as_ref() != Some(&this) {
            pending.clear();
            known = Learned::default();
            mind = Some(this);
        }
        let (start, end) = span(i);
        while let Some(lesson) = pending.first_entry() {
            if lesson.key().0 >= start {
                break;
            }
            known = known + lesson.remove();
        }
        let config = ReplayConfig {
            price,
            assumptions,
            rules,
        };
        let mut learned = known;
        totals[i] = replay_trace_learning(trace, plan, &config, &mut learned, &mut |step| {
            on_step(i, step)
        });
        pending.insert((end, i), learned - known);
    }
    totals
}
