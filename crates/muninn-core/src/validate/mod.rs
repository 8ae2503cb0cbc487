//! Checks the prompt-cache model ([`crate::cache`]) against recorded usage.
//!
//! Every request of a set of normalised [`Trace`]s is predicted twice, from the earlier requests
//! only, and compared with the cache read the provider reported:
//!
//! - **the cache model**: the request is rebuilt as [`crate::cache::Checkpoint`]s and sent through
//!   a [`crate::cache::CacheState`] that has seen every earlier request (of every thread, in time
//!   order);
//! - **the naive rule**: read the previous request's cached part (read + written) when the gap
//!   since the previous request of the same trace is within that request's TTL, else read nothing.
//!
//! # Strictly causal
//!
//! Neither predictor looks ahead. The prediction for request k uses the requests before k (in
//! time order, across every trace) and what the client knew before sending k: its time, its
//! prompt's size, where its last breakpoint sat, the blocks it added, a compaction before it.
//! The provider's answer to k (how the cached part split into read and written tokens, the TTL
//! tier it was written at, the output) is read only after k is predicted. Where a TTL is needed
//! and the previous request wrote nothing, the tier of the trace's latest earlier write stands in
//! (5m before any): never a tier seen later in the trace. A property test perturbs request k's
//! answer and checks that no prediction at or before k moves.
//!
//! # Tuning and set-aside parts
//!
//! Every row carries the [`Part`](crate::split::Part) of its session ([`crate::split`]); the
//! report's figures are given for all requests and for each part, so that agreement on the
//! sessions set aside from tuning stands beside agreement on the sessions tuned on.
//!
//! # How a request is rebuilt
//!
//! Claude Code puts three breakpoints on a request: after the tools and the SDK preamble (the
//! *tools head*, `H1`), after the system prompt (the *system head*, `H2`), and on the last block of
//! the last message. The checkpoints are therefore:
//!
//! 1. `H1` with a breakpoint, when its size is known. Its fingerprint depends only on the model,
//!    the thread kind and the size, so it is shared across sessions: the provider's cache is shared
//!    by the whole organisation, and the tools head is the same text in every session that has the
//!    same tools.
//! 2. `H2` with a breakpoint, when its size is known; fingerprinted per session, thread group (the
//!    main thread and its compaction agent share the system prompt), model and size.
//! 3. The end of the previous request's conversation (no breakpoint: an entry an earlier request
//!    wrote there is found by the lookback), `blocks_added` blocks before
//! 4. the new end, with the breakpoint, at the TTL tier the request wrote in.
//!
//! A thread of several conversations (`TraceRequest::conversation`: one session resumed in two
//! terminals, their requests alternating) continues, at each request, the tail its own
//! conversation ended at, not the other's (`anthropic`'s `parked_tail`).
//!
//! A compaction (`compacted`) starts a new segment: conversation fingerprints restart, only the
//! heads remain. A compaction agent's first request forks the main thread's conversation of the
//! same model, so it can read the main thread's prefix. A tool list the client changed before
//! sending (`tools_changed`, on a thread's later request) also starts a new segment under a new
//! tool epoch, and skips the heads for that request: the tools come first, so nothing matches.
//! A request that opens a person's turn, on a thread whose client was seen dropping the finished
//! turn's thinking on the last two turns it opened — or right after an answer the person stopped
//! while it was only thinking (`TraceRequest::interrupted_thinking`) — continues from the end of
//! that turn's first request whose answer thought (`TraceRequest::reasoning`) in a new segment:
//! the prompt is the same up to there and new after it (`anthropic`'s `ThinkingDrop`). Likewise
//! a turn opening continues from where the previous turn began (a new segment after it) when
//! the model's earlier turn openings read back there more often than they read the whole prefix
//! and that point is still live (`anthropic`'s `TurnRestarts`).
//!
//! A session's opening request whose tools head the model's cache holds dead (or never wrote)
//! finds it warm when earlier openings on that head (the model's, of a size within 10%), dead
//! too, were read more often than not: traffic the traces do not hold keeps it warm
//! (`anthropic`'s `Openings`). A later
//! main-thread request on a dead tools head (a session resumed after its entries expired) is
//! judged the same way by a tally of its own: resumptions on that head.
//!
//! A thread's first tool load (`TraceRequest::tools_loaded`) is a tool change for a model whose
//! earlier first loads, soon after the thread's previous request, broke the prefix more often
//! than they kept it (`anthropic`'s `FirstLoads`); from that load on the thread's tools head is
//! its own (fingerprinted per session), so its requests no longer keep the shared tools head
//! warm for other sessions' openings.
//!
//! Head sizes are learned from earlier observations only: a thread's first request that reads
//! something short of a prefix it could know reveals `H1`; a later request that reads less than
//! its previous prefix but more than `H1` reveals `H2`. Until a session has its own observation the
//! latest one of an earlier session (same model, same thread group kind) stands in. A head is a
//! prefix of the conversation, so a head size at or past the thread's previous cached tail is
//! ignored for that request (a read a little short of its prefix is classed a head, and its size,
//! borrowed by another session, must not hide that session's tail).
//!
//! # Classes and figures
//!
//! Each read is classed against the *reference prefix* — the previous request's cached part, or for
//! a compaction agent's first request the main thread's — as [`ReadClass::Prefix`] (within the
//! tolerance of the reference or more), [`ReadClass::None`] (at most the tolerance) or
//! [`ReadClass::Head`] (anything between). On an OpenAI trace the reference is the previous prompt
//! and a read up to a few cache steps short of it is still the prefix (a machine a request or two
//! behind: `openai`'s module docs); the same classes judge the naive rule. Agreement is the share
//! of requests whose predicted class equals the recorded one; the read error is `Σ|predicted −
//! recorded| / Σ recorded`. Every disagreement gets a [`Disagreement`] label from the context.
//!
//! This module is pure: no I/O, no clock.

use crate::cache::{CacheRules, Ttl};
use crate::miss::{MissCause, agrees};
use crate::money::Tokens;
use crate::price::{ModelPrice, PriceTable, Provider};
use crate::split::part_of;
use crate::trace::{Trace, TraceRequest};
use anthropic::ModelReplay;
use openai::OpenAiReplay;
use std::collections::HashMap;

mod anthropic;
mod openai;
mod report;

pub use report::{
    Aggregate, CauseFigures, Disagreement, Figures, Prediction, ReadClass, RequestRow, Side,
    ValidationReport,
};

/// Parameters of a validation run.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// The cache rules the model runs with.
    pub rules: CacheRules,
    /// Minimum cacheable prefix, for every model (the heads of real traces are far above it).
    pub min_cacheable: Tokens,
    /// Tokens of slack when classing a read against the reference prefix.
    pub tolerance: Tokens,
    /// Whether the tools head is shared across sessions (see the module docs).
    pub share_tools_head: bool,
    /// Which provider each model sits behind, and that provider's cache parameters: a trace on
    /// an OpenAI model is predicted by the OpenAI cache model (`openai`), every other by the
    /// Anthropic one.
    pub prices: PriceTable,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            rules: CacheRules::default(),
            min_cacheable: 1024,
            tolerance: 64,
            share_tools_head: true,
            prices: PriceTable::embedded(),
        }
    }
}

/// Classes `read` against `reference` with one tolerance for both bounds (see the module docs).
pub fn classify(read: Tokens, reference: Tokens, tolerance: Tokens) -> ReadClass {
    classify_within(
        read,
        reference,
        Slack {
            prefix: tolerance,
            none: tolerance,
        },
    )
}

/// How far a read may miss a class's bound and still take the class (see [`classify_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slack {
    /// A read at most this many tokens short of the reference is still [`ReadClass::Prefix`].
    pub prefix: Tokens,
    /// A read of at most this many tokens is [`ReadClass::None`].
    pub none: Tokens,
}

/// Classes `read` against `reference`: [`ReadClass::Prefix`] within `slack.prefix` of it or past
/// it, [`ReadClass::None`] at most `slack.none`, [`ReadClass::Head`] in between. An OpenAI
/// trace's prefix slack is wider than its step (`openai`'s `slack`), an Anthropic trace's is the
/// tolerance. A read of nothing is [`ReadClass::None`] whatever the prefix slack, unless the
/// reference itself is within the none slack (found in review: an eight-step slack covered a
/// whole 1,024-token reference, and a read of nothing counted as the prefix).
pub fn classify_within(read: Tokens, reference: Tokens, slack: Slack) -> ReadClass {
    if read <= slack.none && reference > slack.none {
        ReadClass::None
    } else if reference > 0 && read + slack.prefix >= reference {
        ReadClass::Prefix
    } else if read <= slack.none {
        ReadClass::None
    } else {
        ReadClass::Head
    }
}

/// The naive rule for request `index` of `trace`: the previous request's cached part if the gap is
/// within the previous write's TTL, else 0. A previous request that wrote nothing counts at
/// `fallback_ttl` (the caller passes the tier of the trace's latest earlier write: see the
/// module docs on causality).
pub fn naive_read(trace: &Trace, index: usize, fallback_ttl: Ttl) -> Tokens {
    let Some(prev) = index.checked_sub(1).and_then(|i| trace.requests.get(i)) else {
        return 0;
    };
    let Some(cur) = trace.requests.get(index) else {
        return 0;
    };
    let ttl = prev.write_ttl().unwrap_or(fallback_ttl);
    if cur.at_ms - prev.at_ms <= ttl.millis() {
        cached_part(prev)
    } else {
        0
    }
}

/// The part of a request's prompt up to its last breakpoint.
pub(crate) fn cached_part(r: &TraceRequest) -> Tokens {
    r.usage.cache_read + r.usage.written()
}

/// Names a disagreement from the predicted and recorded classes and the context.
fn label(
    predicted: ReadClass,
    recorded: ReadClass,
    index: usize,
    compacted_or_switched: bool,
) -> Option<Disagreement> {
    use ReadClass as C;
    match (predicted, recorded) {
        (p, r) if p == r => None,
        (C::Prefix, C::Head) if index == 0 => Some(Disagreement::ForkedPrefix),
        (C::Prefix, C::Head) if compacted_or_switched => Some(Disagreement::CompactionOrSwitch),
        (C::Prefix, C::Head) => Some(Disagreement::PrefixRewrite),
        (C::Prefix, C::None) => Some(Disagreement::PrefixLost),
        (C::Head, C::None) => Some(Disagreement::HeadLost),
        (C::None, C::Head) if index == 0 => Some(Disagreement::ExternalWarmHead),
        (C::None, C::Head) if compacted_or_switched => Some(Disagreement::HeadUnknown),
        (C::None, C::Head) => Some(Disagreement::ExternalWarmHead),
        (C::None | C::Head, C::Prefix) if index == 0 => Some(Disagreement::ForkedPrefix),
        (C::None | C::Head, C::Prefix) => Some(Disagreement::UnexpectedPrefix),
        _ => Some(Disagreement::PrefixRewrite),
    }
}

/// Replays every request of `traces` in time order through the cache model and the naive rule and
/// compares both with the recorded reads.
pub fn validate(traces: &[Trace], options: &ValidateOptions) -> ValidationReport {
    // Time order across traces; ties keep the input order (a main request before the compaction
    // agent that forks it when both were logged in the same millisecond is not expected).
    let mut order: Vec<(i64, usize, usize)> = traces
        .iter()
        .enumerate()
        .flat_map(|(t, tr)| {
            tr.requests
                .iter()
                .enumerate()
                .map(move |(i, r)| (r.at_ms, t, i))
        })
        .collect();
    order.sort_by_key(|&(at, t, i)| (at, t, i));

    let mut predictors = Predictors::default();
    let mut report = ValidationReport::default();
    let mut all = Figures::default();
    for (_, t, i) in order {
        let Some(trace) = traces.get(t) else { continue };
        let Some(row) = predictors.row(trace, t, i, options) else {
            continue;
        };
        report.parts.entry(row.part).or_default().add(&row);
        all.add(&row);
        report.rows.push(row);
    }
    all.finish();
    report.model = all.model;
    report.naive = all.naive;
    report.causes = all.causes;
    for figures in report.parts.values_mut() {
        figures.finish();
    }
    report.model_errors = predictors.anthropic.errors;
    report
}

/// Both predictors' state across the requests replayed so far (every trace, in time order).
#[derive(Debug, Default)]
struct Predictors {
    anthropic: ModelReplay,
    openai: OpenAiReplay,
    /// The model of each (session, thread)'s latest request: a model switch shows as the same
    /// session and thread continuing on another model.
    last_model: HashMap<(String, String), String>,
    /// The TTL tier of each trace's latest write so far (the causal fallback).
    last_ttl: HashMap<usize, Ttl>,
}

impl Predictors {
    /// Predicts request `index` of trace `t` with both predictors, compares the predictions with
    /// the recorded read, and only then reads the provider's answer for what follows.
    fn row(
        &mut self,
        trace: &Trace,
        t: usize,
        index: usize,
        options: &ValidateOptions,
    ) -> Option<RequestRow> {
        let req = trace.requests.get(index)?;
        let thread_key = (trace.session.clone(), trace.thread.clone());
        let switched = self
            .last_model
            .get(&thread_key)
            .is_some_and(|m| *m != trace.model);
        self.last_model.insert(thread_key, trace.model.clone());
        let fallback_ttl = self.last_ttl.get(&t).copied().unwrap_or(Ttl::FiveMinutes);

        let Predicted {
            reference,
            slack,
            model: (model_read, model_miss),
            naive,
            tools_head,
        } = self.predict(trace, index, fallback_ttl, options);
        // The level a change is known at: a model switch, a tool list the client changed, a
        // recorded compaction (a rewrite of the messages); otherwise what the cache model says.
        let cause = if switched {
            Some(MissCause::ModelChange)
        } else if anthropic::changed_tools(trace, index) {
            Some(MissCause::ToolsChange)
        } else if req.compacted {
            Some(MissCause::MessagesChange)
        } else {
            model_miss
        };
        // The answer to this request is read from here on only.
        if let Some(ttl) = req.write_ttl() {
            self.last_ttl.insert(t, ttl);
        }
        let mut row = compare(
            trace,
            req,
            index,
            (reference, switched),
            (model_read, naive),
            slack,
        );
        row.cause = cause.or_else(|| {
            shortfall_cause(
                &row,
                index > 0 && req.version_changed,
                tools_head,
                slack.none,
            )
        });
        row.cause_agrees = req
            .provider_miss
            .and_then(|label| agrees(row.cause, &label));
        Some(row)
    }

    /// Request `index` of `trace` predicted by its provider's cache model and by the naive
    /// rule, before the model learns from the request's answer.
    fn predict(
        &mut self,
        trace: &Trace,
        index: usize,
        fallback_ttl: Ttl,
        options: &ValidateOptions,
    ) -> Predicted {
        match openai_price(options, &trace.model) {
            Some(price) => {
                let reference = openai::reference(trace, index, price);
                let head = self.openai.head(&trace.model);
                Predicted {
                    reference,
                    slack: openai::slack(price, reference, head, options.tolerance),
                    model: self.openai.step(trace, index, price),
                    naive: openai::naive_read(trace, index, price),
                    // OpenAI's cache has no breakpoints, so no tools head: a short read names
                    // no level.
                    tools_head: None,
                }
            }
            None => {
                let reference = self.anthropic.reference(trace, index);
                // Before the step, which learns from this request's answer.
                let tools_head = self.anthropic.tools_head(trace, options);
                Predicted {
                    reference,
                    slack: Slack {
                        prefix: options.tolerance,
                        none: options.tolerance,
                    },
                    model: (self.anthropic).step(trace, index, reference, fallback_ttl, options),
                    naive: naive_read(trace, index, fallback_ttl),
                    tools_head,
                }
            }
        }
    }
}

/// One request as the predictors see it before its answer: the prefix it could read (the
/// reference), the tolerance, the cache model's read and miss cause, the naive rule's read, and
/// the tools head a short read is measured against.
struct Predicted {
    reference: Tokens,
    slack: Slack,
    model: (Tokens, Option<MissCause>),
    naive: Tokens,
    tools_head: Option<Tokens>,
}

/// How far past the tools head a read must reach to have been read back to a breakpoint after
/// the system prompt. The tools head a session is measured against may be another session's
/// (another client version): on the tuning parts of `claude_backup` and `dotsv2` the heads of
/// successive versions differ by up to 728 tokens (12,826 → 13,371 → 13,447 → 14,175;
/// 14,028 → 14,095 → 14,104), while the one read that stopped at a system head stopped 6,137
/// past its tools head (the dynamic system prompt: environment, memory files, git status).
const PAST_TOOLS_HEAD: Tokens = 1_024;

/// The cause of a request the cache model expected to read its whole reference prefix (no miss
/// of its own) but that read less: the prompt changed before the prefix's end. At the system
/// prompt when the client's version changed since the thread's previous request (`new_client`,
/// `TraceRequest::version_changed`). Otherwise the level is named from where the read stopped,
/// for a prompt laid out as Claude Code lays it out (tools, then the system prompt with a
/// breakpoint after its static preamble — `tools_head`, where the cache model placed one (never
/// on OpenAI's cache, which has no breakpoints) — and, in some versions, one
/// at its end; then the messages with breakpoints near their end). The provider reads back to
/// the last breakpoint before the divergence, within the 20-block lookback, so:
///
/// - nothing read (at most `tolerance`), although the tools head was warm (the model expected
///   the whole prefix, so the previous request had just read or written it): the prompt
///   diverged before the first breakpoint, in the tools or the system preamble
///   ([`MissCause::ToolsOrSystemChange`]);
/// - read more than [`PAST_TOOLS_HEAD`] past the tools head: a breakpoint past the system
///   preamble still matched, which (with none inside the dynamic system prompt) lies at the
///   system's end or in the messages: the messages diverged ([`MissCause::MessagesChange`]);
/// - read about the tools head: the system or the messages diverged — both were labelled so on
///   `dotsv2`'s tuning part (a client without a breakpoint at the system's end reads the tools
///   head back either way) — so the level stays unknown ([`MissCause::PrefixChange`]), as it
///   does without a tools head or without the layout (OpenAI's cache).
///
/// A diagnosis from the request's own answer, not a prediction: the recorded read is part of
/// the request's lines, and a cause may use them (never a later request's). Why a change and
/// not an eviction ([`MissCause::EvictionOrUnknown`], what the host names a shortfall on a
/// prompt whose structure it knows): a transcript does not hold the prompt, and on the tuning
/// parts of the two public users whose transcripts carry the provider's diagnosis, every such
/// shortfall it diagnosed conclusively was a divergence (`messages_changed` 3, one of them an
/// interrupted thought the model now follows, `system_changed` 2, one of them after a new
/// client version), none a diagnosis of no divergence.
fn shortfall_cause(
    row: &RequestRow,
    new_client: bool,
    tools_head: Option<Tokens>,
    tolerance: Tokens,
) -> Option<MissCause> {
    let short =
        row.cache_model.class == ReadClass::Prefix && row.recorded_class != ReadClass::Prefix;
    if !short {
        return None;
    }
    if new_client {
        return Some(MissCause::SystemChange);
    }
    let read = row.recorded_read;
    Some(match tools_head {
        // Without a tools head known nothing says the head was warm: a prompt with no cacheable
        // head reads nothing after a change of its messages too (found in review).
        Some(_) if read <= tolerance => MissCause::ToolsOrSystemChange,
        Some(head) if read > head + PAST_TOOLS_HEAD.max(tolerance) => MissCause::MessagesChange,
        _ => MissCause::PrefixChange,
    })
}

/// The prices of `model` when it sits behind OpenAI's automatic cache.
fn openai_price<'a>(options: &'a ValidateOptions, model: &str) -> Option<&'a ModelPrice> {
    options
        .prices
        .model(model)
        .ok()
        .filter(|p| p.provider == Provider::OpenAi)
}

/// One request's row: both predictions classed against the recorded read.
fn compare(
    trace: &Trace,
    req: &TraceRequest,
    index: usize,
    (reference, switched): (Tokens, bool),
    (model_read, naive_read): (Tokens, Tokens),
    slack: Slack,
) -> RequestRow {
    let gap_ms = index
        .checked_sub(1)
        .and_then(|p| trace.requests.get(p))
        .map(|p| req.at_ms - p.at_ms);
    let recorded = req.usage.cache_read;
    let recorded_class = classify_within(recorded, reference, slack);
    let predict = |read: Tokens| {
        let class = classify_within(read, reference, slack);
        Prediction {
            read,
            class,
            agree: class == recorded_class,
            disagreement: label(class, recorded_class, index, req.compacted || switched),
        }
    };
    RequestRow {
        trace: trace.id.clone(),
        session: trace.session.clone(),
        thread: trace.thread.clone(),
        kind: trace.kind,
        model: trace.model.clone(),
        part: part_of(&trace.session),
        index,
        at_ms: req.at_ms,
        gap_ms,
        compacted: req.compacted,
        prompt: req.usage.prompt(),
        reference,
        recorded_read: recorded,
        recorded_class,
        cache_model: predict(model_read),
        naive: predict(naive_read),
        cause: None,
        provider_miss: req.provider_miss,
        cause_agrees: None,
    }
}
