//! The replay engine: one loop that replays a trace under a policy.
//!
//! A recorded trace says, for each request, how big the prompt was and when it was sent. From that
//! the engine reconstructs the session's *growth* ([`reconstruct`]): a static head (tools +
//! system), then a conversation that grows by Δⱼ tokens per request (a recorded compaction is
//! treated as new content, so the logical conversation keeps growing). A policy then decides, at
//! every request and every time the cache is about to expire, whether to append, refresh (flush
//! memory and start a new segment from head + memory), ping, flush or let the cache expire. Every
//! request the policy causes — real requests, pings, flushes — is priced by the cache model
//! ([`crate::cache`]) on a synthetic prompt with the same prefix structure: a head breakpoint, the
//! previous request's end, and the new end with the last breakpoint.
//!
//! The counterfactual needs assumptions, all explicit in [`Assumptions`] and printed with every
//! report: the head size, the memory a refresh carries, the flush instruction, the ping tail, the
//! minimum segment, the ceiling, and how long before expiry the host decides.
//!
//! Two things are the same under every plan: the first request of a trace is priced as recorded
//! (it meets whatever the cache held before the trace began), and a Claude Code compaction thread
//! (`ThreadKind::Compaction`) counts only for `recorded` — it is the recorded policy's own refresh,
//! and every other plan pays for its own flushes instead.
//!
//! The `recorded` plan prices the recorded usage itself; the `optimum` plan is the hindsight
//! dynamic program of [`crate::optimum`], executed by the same engine so that it is priced exactly
//! like every online policy. The optimum chooses among the same actions, the `mask` action
//! included where the session may mask ([`crate::optimum`]'s mask program): its clears are sent by
//! this engine exactly as a policy's are, so no policy costs less than it.
//!
//! # Masks
//!
//! Where the trace records the tool results each request added ([`crate::trace::ToolResults`]),
//! the engine tells the accounting ([`Accounting::tool_results`]), and a policy may clear them
//! ([`Action::Mask`]). A masked request is sent as the provider sends a cleared prompt: the head
//! (read if warm), then the rest of the prompt without the cleared tokens under a new
//! fingerprint, written in full (its breakpoint on the last block) — the usage of
//! [`crate::mask::masked_usage`], which a test checks step by step. Every later request of the
//! segment is shorter by the cleared tokens.

use crate::cache::{
    CacheRules, CacheState, Checkpoint, Fingerprint, Prediction, Prompt, Ttl, extend, hash_bytes,
};
use crate::decide::{Action, Decision, Event, Policy, Rates, Reason, SessionView, decide};
use crate::learn::Learned;
use crate::ledger::MissCause;
use crate::money::{MicroUsd, Tokens};
use crate::price::{ModelPrice, Provider};
use crate::session::{Accounting, Keep, Params, SegmentCause};
use crate::trace::{Trace, Usage};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

mod assumptions;
pub mod branches;
mod engine;
mod growth;
mod minds;
pub mod rehydration;
mod totals;

pub use assumptions::Assumptions;
pub use engine::Hindsight;
use engine::{Driver, Engine};
use growth::reconstruct_for;
pub use growth::{Turn, reconstruct};
pub use minds::{mind_of, replay_traces};
pub use totals::{RunTotals, Step, StepKind};

/// What to replay a trace under.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Plan {
    /// What was actually paid: the recorded usage, priced.
    Recorded,
    /// An online policy run through the decider.
    Online(Policy),
    /// The hindsight optimum over the same action set.
    Optimum,
}

impl Plan {
    /// Every plan `--policy all` runs, in report order.
    pub fn all() -> Vec<Plan> {
        vec![
            Plan::Recorded,
            Plan::Online(Policy::SkiRental),
            Plan::Online(Policy::Predictive),
            Plan::Online(Policy::Rebuild),
            Plan::Online(Policy::Never),
            Plan::Online(Policy::Threshold(800_000)),
            Plan::Online(Policy::Ceiling(300_000)),
            Plan::Online(Policy::Keepalive(3)),
            Plan::Optimum,
        ]
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Plan::Recorded => write!(f, "recorded"),
            Plan::Online(p) => write!(f, "{p}"),
            Plan::Optimum => write!(f, "optimum"),
        }
    }
}

impl FromStr for Plan {
    type Err = String;
    fn from_str(s: &str) -> Result<Plan, String> {
        match s {
            "recorded" => Ok(Plan::Recorded),
            "optimum" => Ok(Plan::Optimum),
            other => other.parse().map(Plan::Online),
        }
    }
}

/// The cache rules of the trace model's provider: on an automatic cache (OpenAI) every entry
/// lives the provider's retention after its last use, whatever tier the session writes at.
fn provider_rules(config: &ReplayConfig<'_>) -> CacheRules {
    let mut rules = *config.rules;
    if config.price.provider == Provider::OpenAi {
        rules.lifetime_ms = Some(config.price.retention_ms);
    }
    rules
}

/// Everything the engine needs besides the trace and the plan.
#[derive(Debug, Clone, Copy)]
pub struct ReplayConfig<'a> {
    /// The trace model's prices.
    pub price: &'a ModelPrice,
    /// Counterfactual assumptions.
    pub assumptions: &'a Assumptions,
    /// The provider's cache rules.
    pub rules: &'a CacheRules,
}

/// Replays one trace under one plan, calling `on_step` for every priced request, and returns the
/// totals. The session starts knowing nothing of earlier ones; [`replay_traces`] carries what a
/// Mind learned across its traces.
pub fn replay_trace(
    trace: &Trace,
    plan: Plan,
    config: &ReplayConfig<'_>,
    on_step: &mut dyn FnMut(&Step),
) -> RunTotals {
    replay_trace_learning(trace, plan, config, &mut Learned::default(), on_step)
}

/// [`replay_trace`] for a session that starts with what its Mind learned before (`learned`),
/// which it leaves holding what the Mind knows after the session.
pub fn replay_trace_learning(
    trace: &Trace,
    plan: Plan,
    config: &ReplayConfig<'_>,
    learned: &mut Learned,
    on_step: &mut dyn FnMut(&Step),
) -> RunTotals {
    let rules = provider_rules(config);
    let config = &ReplayConfig {
        rules: &rules,
        ..*config
    };
    if let Plan::Recorded = plan {
        return replay_recorded(trace, config, on_step);
    }
    if trace.kind == crate::trace::ThreadKind::Compaction {
        // A compaction thread is the recorded policy's own refresh (Claude Code's compaction
        // request); every other plan pays for its own flushes on the main thread instead.
        return RunTotals::default();
    }
    // Conversations alive at once in one thread (a session resumed in two terminals); a muninn
    // ledger's thread is one by construction (one writer per session). Most threads never fork:
    // they are replayed as they are, without listing their requests.
    let forked = trace.requests.iter().any(|r| r.conversation != 0);
    let conversations = if forked {
        branches::branches(trace)
    } else {
        Vec::new()
    };
    if conversations.len() <= 1 {
        return replay_conversation(trace, plan, config, learned, on_step);
    }
    replay_apart(trace, &conversations, plan, config, learned, on_step)
}

/// The `recorded` plan: each request priced as it was billed.
fn replay_recorded(
    trace: &Trace,
    config: &ReplayConfig<'_>,
    on_step: &mut dyn FnMut(&Step),
) -> RunTotals {
    let ttl = trace_ttl(trace, config);
    let mut totals = RunTotals::default();
    let mut previous: Option<i64> = None;
    for (index, r) in trace.requests.iter().enumerate() {
        let step = Step {
            index,
            at_ms: r.at_ms,
            kind: StepKind::Request,
            usage: r.usage,
            cost: config.price.cost(&r.usage),
            gap_ms: previous.map_or(0, |p| r.at_ms - p),
            miss: None,
            refreshed: r.compacted,
            mask: None,
        };
        previous = Some(r.at_ms);
        totals.record(&step, ttl);
        on_step(&step);
    }
    totals
}

/// Replays the conversations alive at once in `trace` (`conversations`: each one's request
/// indices, [`branches::branches`]) as sessions of their own: each from what the Mind knew when
/// the trace began — none learns from another, earlier or later, so nothing a conversation
/// decides rests on requests it could not have seen — and the trace teaches what they taught
/// together. Steps are reported under the trace's indices, conversation by conversation.
fn replay_apart(
    trace: &Trace,
    conversations: &[Vec<usize>],
    plan: Plan,
    config: &ReplayConfig<'_>,
    learned: &mut Learned,
    on_step: &mut dyn FnMut(&Step),
) -> RunTotals {
    let mut totals = RunTotals::default();
    let known = *learned;
    let mut taught = Learned::default();
    for (n, indices) in conversations.iter().enumerate() {
        let branch = Trace {
            id: format!("{}#{n}", trace.id),
            session: trace.session.clone(),
            thread: trace.thread.clone(),
            kind: trace.kind,
            model: trace.model.clone(),
            source: trace.source.clone(),
            requests: indices.iter().map(|&i| trace.requests[i]).collect(),
        };
        let mut branch_learned = known;
        let branch_totals =
            replay_conversation(&branch, plan, config, &mut branch_learned, &mut |step| {
                on_step(&Step {
                    index: indices[step.index],
                    ..*step
                })
            });
        totals.add(&branch_totals);
        taught = taught + (branch_learned - known);
    }
    *learned = known + taught;
    totals
}

/// Replays one conversation (a trace, or one of the conversations interleaved in it) under a
/// plan other than `recorded`.
fn replay_conversation(
    trace: &Trace,
    plan: Plan,
    config: &ReplayConfig<'_>,
    learned: &mut Learned,
    on_step: &mut dyn FnMut(&Step),
) -> RunTotals {
    let ttl = trace_ttl(trace, config);
    let mut totals = RunTotals::default();
    let (head, turns) = reconstruct_for(trace, config);
    let mut driver = match plan {
        Plan::Online(policy) => Driver::Online(policy),
        // `Plan::Recorded` returned above.
        Plan::Optimum | Plan::Recorded => {
            Driver::Optimum(crate::optimum::plan(&turns, head, ttl, config))
        }
    };
    let mut engine = Engine::new(trace, head, ttl, config, *learned);
    engine.run(&turns, &mut driver, &mut |step| {
        totals.record(step, ttl);
        on_step(step);
    });
    *learned = engine.finish();
    totals
}

/// The TTL a trace is replayed at: the assumption's, or the trace's own when none is assumed.
fn trace_ttl(trace: &Trace, config: &ReplayConfig<'_>) -> Ttl {
    config
        .assumptions
        .ttl
        .unwrap_or_else(|| trace.whole_trace_ttl())
}

/// The optimum's plan for a trace whose head is rendered from layers that change
/// (`head_changes[j]`: the head's tokens, from its end, that request j's layers made new; see
/// [`crate::optimum::plan_with_head_changes`]), to be run by [`execute_plan`] — with the caller
/// charging each refresh that reads the head for the changed tokens, as the program assumed.
pub fn optimum_plan(
    trace: &Trace,
    config: &ReplayConfig<'_>,
    head_changes: &[Tokens],
) -> crate::optimum::OptimumPlan {
    let rules = provider_rules(config);
    let config = &ReplayConfig {
        rules: &rules,
        ..*config
    };
    let ttl = trace_ttl(trace, config);
    let (head, turns) = reconstruct_for(trace, config);
    crate::optimum::plan_with_head_changes(&turns, head, ttl, config, head_changes)
}

/// Executes a given segmentation (`plan.starts`) with hindsight keep-warm choices: the optimum's
/// executor, public so that tests can price every possible plan of a small trace.
pub fn execute_plan(
    trace: &Trace,
    plan: crate::optimum::OptimumPlan,
    config: &ReplayConfig<'_>,
    on_step: &mut dyn FnMut(&Step),
) -> RunTotals {
    let rules = provider_rules(config);
    let config = &ReplayConfig {
        rules: &rules,
        ..*config
    };
    let ttl = trace_ttl(trace, config);
    let (head, turns) = reconstruct_for(trace, config);
    let mut totals = RunTotals::default();
    let mut engine = Engine::new(trace, head, ttl, config, Learned::default());
    engine.run(&turns, &mut Driver::Optimum(plan), &mut |step| {
        totals.record(step, ttl);
        on_step(step);
    });
    totals
}
