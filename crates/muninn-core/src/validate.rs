//! Checks the prompt-cache model ([`crate::cache`]) against recorded usage.
//!
//! Every request of a set of normalised [`Trace`]s is predicted twice, from the earlier requests
//! only, and compared with the cache read the provider reported:
//!
//! - **the cache model**: the request is rebuilt as [`Checkpoint`]s and sent through a
//!   [`CacheState`] that has seen every earlier request (of every thread, in time order);
//! - **the naive rule**: read the previous request's cached part (read + written) when the gap since
//!   the previous request of the same trace is within that request's TTL, else read nothing.
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
//! A compaction (`compacted`) starts a new segment: conversation fingerprints restart, only the
//! heads remain. A compaction agent's first request forks the main thread's conversation of the
//! same model, so it can read the main thread's prefix.
//!
//! Head sizes are learned from earlier observations only: a thread's first request that reads
//! something short of a prefix it could know reveals `H1`; a later request that reads less than
//! its previous prefix but more than `H1` reveals `H2`. Until a session has its own observation the
//! latest one of an earlier session (same model, same thread group kind) stands in.
//!
//! # Classes and figures
//!
//! Each read is classed against the *reference prefix* — the previous request's cached part, or for
//! a compaction agent's first request the main thread's — as [`ReadClass::Prefix`] (within the
//! tolerance of the reference or more), [`ReadClass::None`] (at most the tolerance) or
//! [`ReadClass::Head`] (anything between). Agreement is the share of requests whose predicted class
//! equals the recorded one; the read error is `Σ|predicted − recorded| / Σ recorded`. Every
//! disagreement gets a [`Disagreement`] label from the context.
//!
//! This module is pure: no I/O, no clock.

use crate::cache::{CacheRules, CacheState, Checkpoint, Fingerprint, Prompt, extend, hash_bytes};
use crate::money::Tokens;
use crate::trace::{ThreadKind, Trace, TraceRequest};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Parameters of a validation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateOptions {
    /// The cache rules the model runs with.
    pub rules: CacheRules,
    /// Minimum cacheable prefix, for every model (the heads of real traces are far above it).
    pub min_cacheable: Tokens,
    /// Tokens of slack when classing a read against the reference prefix.
    pub tolerance: Tokens,
    /// Whether the tools head is shared across sessions (see the module docs).
    pub share_tools_head: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            rules: CacheRules::default(),
            min_cacheable: 1024,
            tolerance: 64,
            share_tools_head: true,
        }
    }
}

/// What a request read, relative to its reference prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadClass {
    /// The whole reference prefix (or more).
    Prefix,
    /// Something, but less than the reference prefix: a head.
    Head,
    /// Nothing.
    None,
}

/// Why a prediction's class differs from the recorded one, named from the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disagreement {
    /// A head was read that nothing in the traces had written, or that had expired in the traces:
    /// a session or agent outside the traces kept it warm (the cache is organisation-wide).
    ExternalWarmHead,
    /// The prefix was predicted but only a head was read, with no compaction recorded: the client
    /// rewrote the conversation inside the TTL.
    PrefixRewrite,
    /// The prefix was predicted but nothing was read.
    PrefixLost,
    /// A head was predicted but nothing was read: the head had changed (tools, system) or was gone.
    HeadLost,
    /// A head was read where the prediction had no head to read (size not yet learned).
    HeadUnknown,
    /// The prefix was read where a miss or a head was predicted: the entry outlived the model's TTL
    /// or an unrecorded request refreshed it.
    UnexpectedPrefix,
    /// The prefix was predicted but the recorded read was a head after a compaction or model switch
    /// (only the naive rule makes this one).
    CompactionOrSwitch,
    /// The prefix was predicted on a thread's first request (only for the naive rule, which cannot
    /// see another thread's prefix).
    ForkedPrefix,
}

/// One request's comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRow {
    /// The trace's id.
    pub trace: String,
    /// The session.
    pub session: String,
    /// The thread within the session.
    pub thread: String,
    /// The thread's kind.
    pub kind: ThreadKind,
    /// The model.
    pub model: String,
    /// Index of the request in its trace.
    pub index: usize,
    /// When the request was made (Unix ms).
    pub at_ms: i64,
    /// Time since the previous request of the trace, if any.
    pub gap_ms: Option<i64>,
    /// Whether a compaction was recorded just before the request.
    pub compacted: bool,
    /// The whole prompt.
    pub prompt: Tokens,
    /// The prefix the classes are measured against.
    pub reference: Tokens,
    /// The recorded cache read.
    pub recorded_read: Tokens,
    /// Its class.
    pub recorded_class: ReadClass,
    /// The cache model's prediction.
    pub cache_model: Prediction,
    /// The naive rule's prediction.
    pub naive: Prediction,
}

/// One predictor's view of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    /// Predicted read tokens.
    pub read: Tokens,
    /// Predicted class.
    pub class: ReadClass,
    /// Whether the class matches the recorded one.
    pub agree: bool,
    /// Why not, when it does not.
    pub disagreement: Option<Disagreement>,
}

/// Agreement and read error over a set of requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Requests counted.
    pub requests: usize,
    /// Requests whose class matched.
    pub agree: usize,
    /// `agree / requests` (1 when empty).
    pub agreement: f64,
    /// Σ recorded read tokens.
    pub recorded_read: Tokens,
    /// Σ |predicted − recorded| read tokens.
    pub abs_error: Tokens,
    /// `abs_error / recorded_read` (0 when nothing was read).
    pub read_error: f64,
    /// Disagreements by label.
    pub disagreements: BTreeMap<Disagreement, usize>,
}

impl Aggregate {
    fn add(&mut self, recorded: Tokens, p: &Prediction) {
        self.requests += 1;
        self.agree += usize::from(p.agree);
        self.recorded_read += recorded;
        self.abs_error += p.read.abs_diff(recorded);
        if let Some(d) = p.disagreement {
            *self.disagreements.entry(d).or_default() += 1;
        }
    }

    fn finish(&mut self) {
        self.agreement = if self.requests == 0 {
            1.0
        } else {
            self.agree as f64 / self.requests as f64
        };
        self.read_error = if self.recorded_read == 0 {
            0.0
        } else {
            self.abs_error as f64 / self.recorded_read as f64
        };
    }
}

/// A predictor's aggregates: main threads and all threads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// Requests of [`ThreadKind::Main`] traces.
    pub main: Aggregate,
    /// Every request.
    pub all: Aggregate,
}

/// The result of [`validate`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationReport {
    /// One row per request, in replay (time) order.
    pub rows: Vec<RequestRow>,
    /// The cache model's figures.
    pub model: Side,
    /// The naive rule's figures.
    pub naive: Side,
    /// Requests the cache model refused (malformed reconstruction); counted as predicting 0.
    pub model_errors: usize,
}

/// Classes `read` against `reference` (see the module docs).
pub fn classify(read: Tokens, reference: Tokens, tolerance: Tokens) -> ReadClass {
    if reference > 0 && read + tolerance >= reference {
        ReadClass::Prefix
    } else if read <= tolerance {
        ReadClass::None
    } else {
        ReadClass::Head
    }
}

/// The naive rule for request `index` of `trace`: the previous request's cached part if the gap is
/// within the previous write's TTL, else 0.
pub fn naive_read(trace: &Trace, index: usize) -> Tokens {
    let Some(prev) = index.checked_sub(1).and_then(|i| trace.requests.get(i)) else {
        return 0;
    };
    let Some(cur) = trace.requests.get(index) else {
        return 0;
    };
    let ttl = prev.write_ttl().unwrap_or_else(|| trace.recorded_ttl());
    if cur.at_ms - prev.at_ms <= ttl.millis() {
        cached_part(prev)
    } else {
        0
    }
}

/// The part of a request's prompt up to its last breakpoint.
fn cached_part(r: &TraceRequest) -> Tokens {
    r.usage.cache_read + r.usage.written()
}

/// Block index of the tools head, the system head, and the first conversation block.
const H1_BLOCK: u32 = 1;
const H2_BLOCK: u32 = 2;
const CONVERSATION_BLOCK: u32 = 3;

/// The key of a thread group's state: session, group, model. The main thread and its compaction
/// agents form one group (same system prompt, same conversation).
type GroupKey = (String, String, String);

/// Where a thread's conversation ended at its last request.
#[derive(Debug, Clone, Copy)]
struct Tail {
    fingerprint: Fingerprint,
    tokens: Tokens,
    block: u32,
}

/// Per thread group: the learned head sizes, the conversation segment and its last tail.
#[derive(Debug, Clone, Default)]
struct Group {
    h1: Option<Tokens>,
    h2: Option<Tokens>,
    segment: u32,
    tail: Option<Tail>,
    /// The cached part of the group's latest request (the reference for a forked thread).
    last_cached: Tokens,
}

fn group_name(trace: &Trace) -> &str {
    match trace.kind {
        ThreadKind::Main | ThreadKind::Compaction => "main",
        ThreadKind::Subagent | ThreadKind::Mind => &trace.thread,
    }
}

/// Whether a trace belongs to the main group (for head estimates across sessions).
fn is_main_group(trace: &Trace) -> bool {
    matches!(trace.kind, ThreadKind::Main | ThreadKind::Compaction)
}

fn hash_parts(parts: &[&str]) -> Fingerprint {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(p.as_bytes());
        bytes.push(0);
    }
    hash_bytes(&bytes)
}

/// The replay state of the cache model.
#[derive(Debug, Default)]
struct ModelReplay {
    cache: CacheState,
    groups: HashMap<GroupKey, Group>,
    /// Latest observed head sizes per (model, main group?), for sessions without their own.
    h1_estimate: HashMap<(String, bool), Tokens>,
    h2_estimate: HashMap<(String, bool), Tokens>,
    /// Tail of a compaction (or other forked) thread's own previous request.
    thread_tails: HashMap<String, Tail>,
    errors: usize,
}

impl ModelReplay {
    /// Predicts the read of `trace.requests[index]`, commits it to the cache, and learns from the
    /// recorded usage afterwards.
    fn step(
        &mut self,
        trace: &Trace,
        index: usize,
        reference: Tokens,
        options: &ValidateOptions,
    ) -> Tokens {
        let Some(req) = trace.requests.get(index) else {
            return 0;
        };
        let key: GroupKey = (
            trace.session.clone(),
            group_name(trace).to_string(),
            trace.model.clone(),
        );
        let est_key = (trace.model.clone(), is_main_group(trace));
        let group = self.groups.get(&key).cloned().unwrap_or_default();
        let ttl = req.write_ttl().unwrap_or_else(|| trace.recorded_ttl());
        let prompt_tokens = req.usage.prompt();
        // Where the last breakpoint sits: everything but the uncached tail. Known to the client
        // before sending; it only places the new entry and never decides this request's read.
        let end_tokens = prompt_tokens.saturating_sub(req.usage.input);

        // Heads: this session's own observation, else the latest of an earlier session.
        let h1 = group.h1.or_else(|| {
            options
                .share_tools_head
                .then(|| self.h1_estimate.get(&est_key).copied())
                .flatten()
        });
        let h2 = group.h2.or_else(|| self.h2_estimate.get(&est_key).copied());
        let kind = if is_main_group(trace) { "main" } else { "sub" };
        let h1_fp = if options.share_tools_head {
            h1.map(|t| hash_parts(&["h1", &trace.model, kind, &t.to_string()]))
        } else {
            Some(hash_parts(&["h1", &key.0, &key.1, &key.2]))
        };
        // The size is part of the key: when a better size is learned, entries stamped with the
        // old guess must not be read back with the old token count.
        let h2_fp = h2.map(|t| hash_parts(&["h2", &key.0, &key.1, &key.2, &t.to_string()]));

        // The conversation: a fork (compaction agent's first request) continues the main group's
        // tail; a compaction restarts the segment; otherwise the thread's own previous tail.
        let forked = trace.kind == ThreadKind::Compaction;
        let mut segment = group.segment;
        let previous: Option<Tail> = if forked {
            self.thread_tails.get(&trace.id).copied().or(group.tail)
        } else if req.compacted {
            segment += 1;
            None
        } else {
            group.tail
        };
        let segment_fp = if forked {
            hash_parts(&["fork", &trace.id])
        } else {
            hash_parts(&["seg", &key.0, &key.1, &key.2, &segment.to_string()])
        };

        let mut cps: Vec<Checkpoint> = Vec::with_capacity(4);
        let mut floor: Tokens = 0;
        if let (Some(t), Some(fp)) = (h1, h1_fp)
            && t < end_tokens
        {
            cps.push(Checkpoint {
                block: H1_BLOCK,
                tokens: t,
                fingerprint: fp,
                breakpoint: Some(ttl),
            });
            floor = t;
        }
        if let (Some(t), Some(h2_fp)) = (h2, h2_fp)
            && t > floor
            && t < end_tokens
        {
            cps.push(Checkpoint {
                block: H2_BLOCK,
                tokens: t,
                fingerprint: h2_fp,
                breakpoint: Some(ttl),
            });
            floor = t;
        }
        let mut end_block = CONVERSATION_BLOCK;
        if let Some(p) = previous
            && p.tokens > floor
            && p.tokens <= end_tokens
        {
            cps.push(Checkpoint {
                block: p.block,
                tokens: p.tokens,
                fingerprint: p.fingerprint,
                breakpoint: None,
            });
            end_block = p.block;
        }
        // Unknown block counts are taken as one block: the common case of a short turn.
        end_block += req.blocks_added.max(1);
        let end = Tail {
            fingerprint: extend(segment_fp, end_tokens),
            tokens: end_tokens,
            block: end_block,
        };
        if end_tokens > floor {
            cps.push(Checkpoint {
                block: end.block,
                tokens: end.tokens,
                fingerprint: end.fingerprint,
                breakpoint: Some(ttl),
            });
        }
        let prompt = Prompt {
            model: &trace.model,
            checkpoints: &cps,
            total_tokens: prompt_tokens,
        };
        let read = match self
            .cache
            .apply(&prompt, req.at_ms, options.min_cacheable, &options.rules)
        {
            Ok(outcome) => outcome.read,
            Err(_) => {
                self.errors += 1;
                0
            }
        };

        // Learn from what was recorded, for the requests that follow.
        let recorded = req.usage.cache_read;
        let mut updated = group;
        updated.segment = segment;
        if classify(recorded, reference, options.tolerance) == ReadClass::Head {
            let first = index == 0;
            let within_h1 = updated
                .h1
                .is_some_and(|t| recorded <= t + options.tolerance);
            // A thread's first request can only have found a head some other thread or session
            // wrote: the tools head. A fork's first request normally reads the forked prefix, so
            // a head there is the tools head only when none is known yet.
            if first && (!forked || updated.h1.is_none()) {
                updated.h1 = Some(recorded);
                self.h1_estimate.insert(est_key.clone(), recorded);
            } else if !within_h1 {
                updated.h2 = Some(recorded);
                self.h2_estimate.insert(est_key.clone(), recorded);
            }
        }
        if forked {
            self.thread_tails.insert(trace.id.clone(), end);
        } else {
            updated.tail = Some(end);
            updated.last_cached = cached_part(req);
        }
        self.groups.insert(key, updated);
        read
    }

    /// The reference prefix of a request before it is stepped.
    fn reference(&self, trace: &Trace, index: usize) -> Tokens {
        if let Some(prev) = index.checked_sub(1).and_then(|i| trace.requests.get(i)) {
            return cached_part(prev);
        }
        if trace.kind == ThreadKind::Compaction {
            let key: GroupKey = (
                trace.session.clone(),
                group_name(trace).to_string(),
                trace.model.clone(),
            );
            return self.groups.get(&key).map_or(0, |g| g.last_cached);
        }
        0
    }
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

    // A model switch shows as the same session and thread continuing on another model: remember the
    // model of each (session, thread)'s latest request.
    let mut last_model: HashMap<(String, String), String> = HashMap::new();
    let mut replay = ModelReplay::default();
    let mut report = ValidationReport::default();
    for (_, t, i) in order {
        let Some(trace) = traces.get(t) else { continue };
        let Some(req) = trace.requests.get(i) else {
            continue;
        };
        let reference = replay.reference(trace, i);
        let gap_ms = i
            .checked_sub(1)
            .and_then(|p| trace.requests.get(p))
            .map(|p| req.at_ms - p.at_ms);
        let thread_key = (trace.session.clone(), trace.thread.clone());
        let switched = last_model
            .get(&thread_key)
            .is_some_and(|m| *m != trace.model);
        last_model.insert(thread_key, trace.model.clone());

        let model_read = replay.step(trace, i, reference, options);
        let naive = naive_read(trace, i);
        let recorded = req.usage.cache_read;
        let recorded_class = classify(recorded, reference, options.tolerance);
        let predict = |read: Tokens| {
            let class = classify(read, reference, options.tolerance);
            Prediction {
                read,
                class,
                agree: class == recorded_class,
                disagreement: label(class, recorded_class, i, req.compacted || switched),
            }
        };
        let row = RequestRow {
            trace: trace.id.clone(),
            session: trace.session.clone(),
            thread: trace.thread.clone(),
            kind: trace.kind,
            model: trace.model.clone(),
            index: i,
            at_ms: req.at_ms,
            gap_ms,
            compacted: req.compacted,
            prompt: req.usage.prompt(),
            reference,
            recorded_read: recorded,
            recorded_class,
            cache_model: predict(model_read),
            naive: predict(naive),
        };
        if trace.kind == ThreadKind::Main {
            report.model.main.add(recorded, &row.cache_model);
            report.naive.main.add(recorded, &row.naive);
        }
        report.model.all.add(recorded, &row.cache_model);
        report.naive.all.add(recorded, &row.naive);
        report.rows.push(row);
    }
    for agg in [
        &mut report.model.main,
        &mut report.model.all,
        &mut report.naive.main,
        &mut report.naive.all,
    ] {
        agg.finish();
    }
    report.model_errors = replay.errors;
    report
}
