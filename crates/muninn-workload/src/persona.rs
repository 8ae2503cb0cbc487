//! The Persona designs priced on one generated stream ([`crate::workload`]): today's rebuild per
//! turn against muninn's append-only session under every replay plan.
//!
//! # rebuild (today, seed A1)
//!
//! Every turn is a fresh request laid out as the CLI sends it (`reference/claude-cli-2.1.332.md`
//! §3.4): `system[1]`, a short preamble with a breakpoint (below every model's minimum cacheable
//! size, so it is never cached on its own); `system[2]`, the system prompt file — doctrine, persona
//! state and campaigns in one block — with a breakpoint; and one user message with rows 4–9
//! (framing, spend line and runs, then per delivery its context lines and the message line) with
//! the breakpoint on it. All three breakpoints carry the same TTL: 1h (a subscription) or 5m (an
//! API key). Each request is priced by the cache model ([`muninn_core::cache`]) against one cache
//! that lives across turns, so the system prefix is read when warm and written when cold — and
//! written again whenever the persona state, campaigns or doctrine change, since they share its
//! block.
//!
//! # muninn sessions
//!
//! The stream is rendered by [`Renderer`] as one append-only segment (doctrine and framing in
//! `system[0]`, persona state and campaigns in `system[1]`, both under the 1h head; one user
//! message per turn with notices for changed layers, history shown once; the reply appended), and
//! turned into a [`Trace`] of one request per turn whose growth is the turn's user message plus the
//! previous reply. The replay engine then runs it under each [`Plan`] with the head's tokens as
//! `head_tokens`, the head at 1h and the tail at 5m, memory written as it happens (no flush
//! request), a rehydration of [`PersonaConfig::rehydrate_tokens`] and a minimum segment of
//! [`PersonaConfig::min_segment_requests`].
//!
//! Two things the engine cannot see are accounted for explicitly, identically for every plan:
//!
//! - **A new segment meets the layers as they are now.** The engine's head is one fixed prefix.
//!   When a segment starts after the doctrine changed, the whole head is new; after only the
//!   persona state or campaigns changed, `system[1]` is. If the engine read the head there (it was
//!   warm), the changed tokens are charged as a 1h write instead of a read. The optimum sees this
//!   charge: its program is told each turn's change ([`head_changes`]) and places refreshes with it
//!   ([`muninn_core::optimum::plan_with_head_changes`]), so it pays every charge the policies pay
//!   and is checked against brute force over every segmentation, charged the same way.
//! - **History after a refresh.** The trace's deltas come from one rendering, so history already
//!   shown is not shown again after a refresh; the memory a refresh carries
//!   ([`PersonaConfig::rehydrate_tokens`]) stands for what the new segment needs of it.
//!
//! Per design the report gives the cost per turn (mean and 95th percentile, each turn carrying the
//! pings and flushes of the gap before it), tokens written and read per turn, and how many turns
//! paid a cold write of the doctrine (wrote at least the doctrine's tokens).

use crate::workload::Stream;
use muninn_core::cache::{
    CacheRules, CacheState, Prompt, Ttl, checkpoints_from_blocks, hash_bytes,
};
use muninn_core::decide::Policy;
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::optimum::OptimumPlan;
use muninn_core::price::ModelPrice;
use muninn_core::render::{Renderer, Role};
use muninn_core::replay::{
    Assumptions, Plan, ReplayConfig, Step, StepKind, execute_plan, optimum_plan, replay_trace,
};
use muninn_core::tokenize::count;
use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use std::collections::HashMap;
use std::fmt;

/// The knobs of the comparison (besides the workload's own).
#[derive(Debug, Clone, PartialEq)]
pub struct PersonaConfig {
    /// rebuild's `system[1]` (the CLI's preamble without the billing header). About 20 tokens.
    pub preamble: String,
    /// muninn's head TTL. 1h.
    pub head_ttl: Ttl,
    /// muninn's tail TTL. 5m.
    pub tail_ttl: Ttl,
    /// Memory a refreshed segment carries beyond the head. 1,500.
    pub rehydrate_tokens: Tokens,
    /// Requests a segment holds before a voluntary refresh. 4.
    pub min_segment_requests: u32,
    /// The muninn plans to run.
    pub plans: Vec<Plan>,
}

impl Default for PersonaConfig {
    fn default() -> Self {
        PersonaConfig {
            preamble: "You are a Claude agent, built on Anthropic's Claude Agent SDK.".into(),
            head_ttl: Ttl::OneHour,
            tail_ttl: Ttl::FiveMinutes,
            rehydrate_tokens: 1_500,
            min_segment_requests: 4,
            plans: vec![
                Plan::Online(Policy::Never),
                Plan::Online(Policy::SkiRental),
                Plan::Online(Policy::Predictive),
                Plan::Online(Policy::Keepalive(3)),
                Plan::Optimum,
            ],
        }
    }
}

impl fmt::Display for PersonaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plans: Vec<String> = self.plans.iter().map(Plan::to_string).collect();
        write!(
            f,
            "rebuild: preamble {} tokens + system prompt + one user message, 3 breakpoints of one TTL; \
             muninn: head {} / tail {}, memory written as it happens (no flush request), rehydration \
             {} tokens, minimum segment {} requests; plans: {}",
            count(&self.preamble),
            self.head_ttl.label(),
            self.tail_ttl.label(),
            self.rehydrate_tokens,
            self.min_segment_requests,
            plans.join(", "),
        )
    }
}

/// A design being priced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Design {
    /// Today's fresh request per turn, all breakpoints at this TTL.
    Rebuild(Ttl),
    /// muninn's session under a replay plan.
    Muninn(Plan),
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Design::Rebuild(ttl) => write!(f, "rebuild-{}", ttl.label()),
            Design::Muninn(plan) => write!(f, "{plan}"),
        }
    }
}

/// One design's result on one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignResult {
    /// The design.
    pub design: Design,
    /// Cost per turn (with the pings and flushes of the gap before it).
    pub cost: Vec<MicroUsd>,
    /// Usage per turn (likewise).
    pub usage: Vec<Usage>,
    /// Keep-warm pings sent.
    pub pings: u64,
    /// Segments started after the first.
    pub refreshes: u64,
}

/// The summary line of a design.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Turns.
    pub turns: usize,
    /// Everything paid.
    pub total: MicroUsd,
    /// Mean cost per turn, µ$.
    pub mean: f64,
    /// 95th percentile of the cost per turn, µ$.
    pub p95: MicroUsd,
    /// Tokens written per turn.
    pub written_per_turn: f64,
    /// Tokens read per turn.
    pub read_per_turn: f64,
    /// Turns that wrote at least the doctrine's tokens.
    pub doctrine_writes: usize,
}

impl DesignResult {
    /// Its summary; `doctrine_tokens` is the threshold of a cold doctrine write.
    pub fn summary(&self, doctrine_tokens: Tokens) -> Summary {
        let turns = self.cost.len();
        let total: MicroUsd = self.cost.iter().copied().sum();
        let mut sorted = self.cost.clone();
        sorted.sort_unstable();
        let p95 = if sorted.is_empty() {
            MicroUsd::ZERO
        } else {
            sorted[((sorted.len() * 95).div_ceil(100)).saturating_sub(1)]
        };
        let n = turns.max(1) as f64;
        Summary {
            turns,
            total,
            mean: total.0 as f64 / n,
            p95,
            written_per_turn: self.usage.iter().map(|u| u.written()).sum::<Tokens>() as f64 / n,
            read_per_turn: self.usage.iter().map(|u| u.cache_read).sum::<Tokens>() as f64 / n,
            doctrine_writes: self
                .usage
                .iter()
                .filter(|u| u.written() >= doctrine_tokens)
                .count(),
        }
    }
}

fn context_line(room: &str, sender: &str, text: &str) -> String {
    format!("  ({room}) {sender}: {text}\n")
}

fn message_line(a: &crate::workload::Arrival) -> String {
    format!(
        "[{}{}{}] {}: {}\n",
        a.room,
        if a.is_direct { ", direct" } else { "" },
        if a.to_you { ", to you" } else { "" },
        a.sender,
        a.text
    )
}

/// rebuild's user message for turn `i` (rows 4–9): framing, status, then per delivery its whole
/// context and the message line — re-sent every turn.
pub fn rebuild_message(stream: &Stream, i: usize) -> String {
    let mut text = String::new();
    text.push_str(&stream.framing);
    text.push_str("\n\n");
    if let Some(t) = stream.turns.get(i) {
        text.push_str(&t.status);
        text.push_str("\n\n");
    }
    let batch = stream.batch(i);
    if batch.is_empty() {
        text.push_str("No new messages. This is a scheduled wake.\n");
    }
    for a in batch {
        for line in &a.context {
            text.push_str(&context_line(&a.room, &line.sender, &line.text));
        }
        text.push_str(&message_line(a));
    }
    text
}

/// rebuild's system prompt file for turn `i` (`format!("{doctrine}{persona}\n\n{campaigns}")`).
fn rebuild_system(stream: &Stream, i: usize) -> String {
    let layers = stream.layers(i);
    let doctrine = stream
        .turns
        .get(i)
        .and_then(|t| stream.doctrine.get(t.doctrine))
        .map_or("", String::as_str);
    format!(
        "{doctrine}\nYou are the persona whose state follows.\n{}\n\n{}",
        layers.persona, layers.campaigns
    )
}

/// Prices today's design: a fresh request per turn, every breakpoint at `ttl`.
pub fn rebuild(
    stream: &Stream,
    price: &ModelPrice,
    ttl: Ttl,
    config: &PersonaConfig,
) -> DesignResult {
    let rules = CacheRules::default();
    let mut cache = CacheState::new();
    let preamble = (
        count(&config.preamble),
        hash_bytes(config.preamble.as_bytes()),
    );
    let mut systems: HashMap<(usize, usize, usize), (Tokens, u64)> = HashMap::new();
    let mut result = DesignResult {
        design: Design::Rebuild(ttl),
        cost: Vec::with_capacity(stream.turns.len()),
        usage: Vec::with_capacity(stream.turns.len()),
        pings: 0,
        refreshes: 0,
    };
    for (i, t) in stream.turns.iter().enumerate() {
        let system = *systems
            .entry((t.doctrine, t.persona, t.campaigns))
            .or_insert_with(|| {
                let text = rebuild_system(stream, i);
                (count(&text), hash_bytes(text.as_bytes()))
            });
        let message = rebuild_message(stream, i);
        let blocks = [
            (preamble.0, preamble.1, Some(ttl)),
            (system.0, system.1, Some(ttl)),
            (count(&message), hash_bytes(message.as_bytes()), Some(ttl)),
        ];
        let (checkpoints, total) = checkpoints_from_blocks(&blocks);
        let prompt = Prompt {
            model: &price.name,
            checkpoints: &checkpoints,
            total_tokens: total,
        };
        let outcome = cache
            .apply(&prompt, t.at_ms, price.min_cacheable, &rules)
            .unwrap_or(muninn_core::cache::CacheOutcome {
                uncached: total,
                ..Default::default()
            });
        let usage = outcome.usage(count(&t.reply));
        result.cost.push(price.cost(&usage));
        result.usage.push(usage);
    }
    result
}

/// muninn's session as a trace: the stream rendered as one append-only segment, one request per
/// turn. Returns the trace and the head's tokens (both system blocks), and the tokens of
/// `system[1]` alone (persona state and campaigns), which change without the doctrine.
pub fn session_trace(
    stream: &Stream,
    model: &str,
    config: &PersonaConfig,
) -> (Trace, Tokens, Tokens) {
    let mut requests = Vec::with_capacity(stream.turns.len());
    let first = stream.layers(0);
    let (mut head, mut context) = (0, 0);
    if let Ok(mut renderer) = Renderer::new(first, config.head_ttl, config.tail_ttl) {
        let (checkpoints, _) = renderer.rendered().checkpoints();
        head = checkpoints.last().map_or(0, |c| c.tokens);
        context = match checkpoints.as_slice() {
            [a, b] => b.tokens - a.tokens,
            _ => 0,
        };
        let mut prompt = head;
        let mut previous_reply: Tokens = 0;
        for (i, t) in stream.turns.iter().enumerate() {
            let message = renderer.append_turn(&stream.layers(i), &stream.input(i));
            debug_assert_eq!(message.role, Role::User);
            let added: Tokens = message.blocks.iter().map(|b| count(&b.text)).sum();
            let before = prompt;
            prompt += previous_reply + added;
            let output = count(&t.reply);
            renderer.reply(&t.reply);
            previous_reply = output;
            let usage = if i == 0 {
                let mut first = Usage {
                    cache_write_5m: prompt - head,
                    output,
                    ..Usage::default()
                };
                written_at(&mut first, config.head_ttl, head);
                first
            } else {
                Usage {
                    cache_read: before,
                    cache_write_5m: prompt - before,
                    output,
                    ..Usage::default()
                }
            };
            requests.push(TraceRequest {
                at_ms: t.at_ms,
                usage,
                boundary: true,
                blocks_added: 2,
                ..Default::default()
            });
        }
    }
    let id = format!("persona-{}-{}", stream.variant, stream.seed);
    (
        Trace {
            id: format!("{id}/main/{model}"),
            session: id,
            thread: "main".into(),
            kind: ThreadKind::Mind,
            model: model.to_string(),
            source: "muninn_workload::workload".into(),
            requests,
        },
        head,
        context,
    )
}

/// The replay assumptions of a muninn session on this stream.
pub fn assumptions(head: Tokens, config: &PersonaConfig) -> Assumptions {
    Assumptions {
        head_tokens: Some(head),
        rehydrate_tokens: config.rehydrate_tokens,
        flush_prompt_tokens: 0,
        flush_output_tokens: Some(0),
        min_segment_requests: config.min_segment_requests,
        ttl: Some(config.tail_ttl),
        head_ttl: Some(config.head_ttl),
        ..Assumptions::default()
    }
}

/// The head's tokens each turn's layers made new, counted from the head's end: all of it after a
/// doctrine edit (`system[0]` changed, and `system[1]` after it), `system[1]` (`context`) after a
/// persona state or campaign change, 0 otherwise. A refresh that reads the head writes the largest
/// of these since its segment began (the layer-change charge of the module docs).
pub fn head_changes(stream: &Stream, head: (Tokens, Tokens)) -> Vec<Tokens> {
    let (head_tokens, context_tokens) = head;
    let version = |t: &crate::workload::PersonaTurn| (t.doctrine, t.persona, t.campaigns);
    let mut changes = vec![0; stream.turns.len()];
    for (i, pair) in stream.turns.windows(2).enumerate() {
        let (before, now) = (version(&pair[0]), version(&pair[1]));
        changes[i + 1] = if now.0 != before.0 {
            head_tokens
        } else if (now.1, now.2) != (before.1, before.2) {
            context_tokens
        } else {
            0
        };
    }
    changes
}

/// Prices muninn's session under `plan` (see the module docs for the layer-change charge). The
/// optimum's program is told the layer changes, so it weighs the charge when it places refreshes.
pub fn muninn(
    stream: &Stream,
    trace: &Trace,
    head: (Tokens, Tokens),
    price: &ModelPrice,
    plan: Plan,
    config: &PersonaConfig,
) -> DesignResult {
    let changes = head_changes(stream, head);
    charged(
        (Design::Muninn(plan), &changes),
        head.0,
        price,
        config,
        |replay, on_step| match plan {
            Plan::Optimum => {
                let optimum = optimum_plan(trace, replay, &changes);
                execute_plan(trace, optimum, replay, on_step);
            }
            other => {
                replay_trace(trace, other, replay, on_step);
            }
        },
    )
}

/// Prices muninn's session under a given segmentation (`starts[i]`: turn i begins a segment),
/// executed by the optimum's executor with hindsight keep-warm choices and charged like every plan:
/// what a brute force over every segmentation compares the optimum with.
pub fn muninn_segmented(
    stream: &Stream,
    trace: &Trace,
    head: (Tokens, Tokens),
    price: &ModelPrice,
    starts: Vec<bool>,
    config: &PersonaConfig,
) -> DesignResult {
    let changes = head_changes(stream, head);
    let plan = OptimumPlan::for_starts(starts, &changes);
    charged(
        (Design::Muninn(Plan::Optimum), &changes),
        head.0,
        price,
        config,
        |replay, on_step| {
            execute_plan(trace, plan, replay, on_step);
        },
    )
}

/// Runs `run` under the session's replay configuration and adds the layer-change charge to every
/// refresh that read the head: the tokens the layers changed since the segment began (the largest
/// of `changes` since then) are written at the head's TTL instead of read.
fn charged(
    (design, changes): (Design, &[Tokens]),
    head_tokens: Tokens,
    price: &ModelPrice,
    config: &PersonaConfig,
    run: impl FnOnce(&ReplayConfig<'_>, &mut dyn FnMut(&Step)),
) -> DesignResult {
    let assumptions = assumptions(head_tokens, config);
    let rules = CacheRules::default();
    let replay = ReplayConfig {
        price,
        assumptions: &assumptions,
        rules: &rules,
    };
    let n = changes.len();
    let mut result = DesignResult {
        design,
        cost: vec![MicroUsd::ZERO; n],
        usage: vec![Usage::default(); n],
        pings: 0,
        refreshes: 0,
    };
    let mut since: Tokens = 0;
    let extra_rate = price.write(config.head_ttl);
    run(&replay, &mut |step| {
        let i = step.index.min(n.saturating_sub(1));
        let mut usage = step.usage;
        let mut cost = step.cost;
        match step.kind {
            StepKind::Ping => result.pings += 1,
            StepKind::Flush => {}
            StepKind::Request => {
                since = since.max(changes.get(i).copied().unwrap_or(0));
                if step.refreshed {
                    result.refreshes += 1;
                    let changed = std::mem::take(&mut since);
                    if changed > 0 && usage.cache_read >= head_tokens {
                        usage.cache_read -= changed;
                        written_at(&mut usage, config.head_ttl, changed);
                        cost = cost + MicroUsd::of(changed, extra_rate)
                            - MicroUsd::of(changed, price.read);
                    }
                }
            }
        }
        if let Some(c) = result.cost.get_mut(i) {
            *c += cost;
        }
        if let Some(u) = result.usage.get_mut(i) {
            u.add(&usage);
        }
    });
    result
}

/// Every design on one stream and one model.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The model priced.
    pub model: String,
    /// The doctrine's tokens (the cold-write threshold).
    pub doctrine_tokens: Tokens,
    /// The head muninn's sessions start from.
    pub head_tokens: Tokens,
    /// rebuild under 1h and 5m, then each plan of the config.
    pub results: Vec<DesignResult>,
}

impl Comparison {
    /// The result of a design, if it was run.
    pub fn get(&self, design: Design) -> Option<&DesignResult> {
        self.results.iter().find(|r| r.design == design)
    }

    /// The summary of a design, if it was run.
    pub fn summary(&self, design: Design) -> Option<Summary> {
        self.get(design).map(|r| r.summary(self.doctrine_tokens))
    }
}

/// Prices rebuild (1h and 5m) and every plan of `config` on `stream`.
pub fn compare(stream: &Stream, price: &ModelPrice, config: &PersonaConfig) -> Comparison {
    let (trace, head, context) = session_trace(stream, &price.name, config);
    let mut results = vec![
        rebuild(stream, price, Ttl::OneHour, config),
        rebuild(stream, price, Ttl::FiveMinutes, config),
    ];
    for &plan in &config.plans {
        results.push(muninn(stream, &trace, (head, context), price, plan, config));
    }
    let doctrine_tokens = stream.doctrine.first().map_or(0, |d| count(d));
    Comparison {
        model: price.name.clone(),
        doctrine_tokens,
        head_tokens: head,
        results,
    }
}

/// Counts `tokens` written under `ttl`: the head is written at the configured head TTL, so its
/// usage and its price (`price.write(head_ttl)`) agree.
fn written_at(usage: &mut Usage, ttl: Ttl, tokens: Tokens) {
    match ttl {
        Ttl::FiveMinutes => usage.cache_write_5m += tokens,
        Ttl::OneHour => usage.cache_write_1h += tokens,
    }
}
