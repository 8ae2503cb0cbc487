//! The Anthropic cache model's side of the check: each request rebuilt as checkpoints (see the
//! parent module's docs, "How a request is rebuilt") and sent through a [`CacheState`] that has
//! seen every earlier request.

use super::{ReadClass, ValidateOptions, cached_part, classify};
use crate::cache::{CacheState, Checkpoint, Fingerprint, Prompt, Ttl, extend, hash_bytes};
use crate::miss::MissCause;
use crate::money::Tokens;
use crate::trace::{ThreadKind, Trace, TraceRequest};
use outside::{FirstLoads, HeadTallies};
use std::collections::{HashMap, HashSet};
use turns::{DROPS_BEFORE_PREDICTING, ThinkingDrop, TurnRestarts};

mod outside;
mod turns;

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
    /// How many times the client changed its tool list (`TraceRequest::tools_changed`): this
    /// session's heads and segments written before a change hold other tools, so their
    /// fingerprints carry it.
    tools_epoch: u32,
    /// Whether the thread's tools head is its own: since a first tool load that the model's
    /// loads say changes the prompt's head ([`FirstLoads`]), the thread sends another head than
    /// a fresh session of its model does, so its requests no longer keep the shared tools head
    /// warm for other sessions' openings.
    ///
    /// On `personal-git`'s tuning part (Opus 4.7, whose first loads break the prefix) 15
    /// session openings read nothing where the model held the shared head live; in 9 of them
    /// every main-thread request of that model in the hour before came from sessions past their
    /// first tool load, while each of the 16 openings that read the live head had a request of
    /// a session that had loaded nothing within the hour. A remote-control tool change
    /// (`TraceRequest::tools_changed`) does not make the head private: on `claude_backup`'s
    /// tuning part such a session, resumed hours later, read the shared head again (made
    /// private for it too, that part lost 3 requests; docs/validation.md, "Looked at a seventh
    /// time").
    own_tools_head: bool,
    tail: Option<Tail>,
    /// The conversation (`TraceRequest::conversation`) `tail` ends.
    tail_conversation: u64,
    /// The tails of the thread's other conversations, latest last (see [`parked_tail`]).
    parked: Vec<(u64, Tail)>,
    /// The cached part of the group's latest request (the reference for a forked thread).
    last_cached: Tokens,
    /// Where the current turn's first thinking sits: the end of the turn's first request whose
    /// answer held a thinking block (see [`ThinkingDrop`]).
    turn_thinking: Option<Tail>,
    /// How many turn-opening requests in a row read as if the client dropped the previous
    /// turn's thinking (0 after one that read as kept).
    thinking_drops: u32,
    /// Where the current turn began: the tail its opening request extended (see
    /// [`TurnRestarts`]).
    turn_start: Option<Tail>,
}

/// How many other conversations' tails a group keeps: two terminals and a rewind or two.
const PARKED_TAILS: usize = 4;

/// The tail a request continues when it belongs to another conversation of its thread than the
/// thread's latest request did: that conversation's own latest tail.
///
/// Claude Code does not lock a session, so one resumed in two terminals (on `claude_backup`'s
/// tuning part, two client versions at once) writes two conversations into one thread, their
/// requests alternating; each terminal sends its own conversation, so a request extends its own
/// conversation's last prompt, not the other terminal's (30 such requests on that tuning part:
/// 19 read exactly their own conversation's last cached end, where the model had predicted a
/// read of the other's). The importer names each request's conversation from the transcript's
/// `parentUuid` links, written before the request (`muninn_import`'s `conversations`), so this is
/// causal. A fork's first request (a rewind) has no tail of its own yet and keeps the thread's.
fn parked_tail(group: &Group, conversation: u64) -> Option<Tail> {
    if conversation == group.tail_conversation {
        return None;
    }
    group
        .parked
        .iter()
        .rev()
        .find(|(c, _)| *c == conversation)
        .map(|&(_, t)| t)
}

/// Whether request `index` of `trace` changed its tool list since the thread's previous request.
/// A thread's first request changed nothing (its tools were so from the start: another session
/// may have warmed them), and a compaction agent's fork inherits its parent's tools.
pub(super) fn changed_tools(trace: &Trace, index: usize) -> bool {
    index > 0
        && trace.kind != ThreadKind::Compaction
        && trace.requests.get(index).is_some_and(|r| r.tools_changed)
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

/// A request's heads as the model places them: (tokens, fingerprint) of the tools head and of
/// the system head, where known.
struct Heads {
    h1: Option<(Tokens, Fingerprint)>,
    h2: Option<(Tokens, Fingerprint)>,
}

/// Where a request's conversation continues from ([`conversation`]).
struct Conversation {
    /// The group's conversation segment for this request.
    segment: u32,
    segment_fp: Fingerprint,
    /// The tail the request extends, if any.
    previous: Option<Tail>,
    /// Where the previous turn's thinking began, when this request opens a turn after one
    /// that thought (see [`ThinkingDrop`]).
    dropped_at: Option<Tail>,
    /// Whether the client is predicted to drop that thinking.
    drop: bool,
    /// Where the previous turn began, when this request opens a turn (see [`TurnRestarts`]).
    restart_at: Option<Tail>,
    /// Whether the client is predicted to re-send the turn from there.
    restart: bool,
}

/// The conversation a request of `group` continues: a forked thread continues its own previous tail
/// (`own_tail`), at its first request the main group's; a compaction or a tool change restarts the
/// segment; a turn the client is predicted to send without the previous turn's thinking continues
/// from where that thinking began; otherwise the thread's own previous tail.
fn conversation(
    trace: &Trace,
    index: usize,
    key: &GroupKey,
    group: &Group,
    tools_changed: bool,
    own_tail: Option<Tail>,
    restarts_lead: bool,
) -> Conversation {
    let req = &trace.requests[index];
    let forked = trace.kind == ThreadKind::Compaction;
    let mut segment = group.segment;
    // A person's new turn on a thread whose previous turn thought: the point the client would
    // cut the prompt at if it drops that thinking.
    let opens_turn = index > 0 && req.boundary && !forked && !req.compacted && !tools_changed;
    let dropped_at = group
        .turn_thinking
        .filter(|at| opens_turn && group.tail.is_some_and(|t| at.tokens < t.tokens));
    // An answer stopped while it was thinking is dropped with its turn's thinking whatever the
    // client does otherwise (`TraceRequest::interrupted_thinking`).
    let drop = (group.thinking_drops >= DROPS_BEFORE_PREDICTING || req.interrupted_thinking)
        && dropped_at.is_some();
    let restart_at = group
        .turn_start
        .filter(|at| opens_turn && group.tail.is_some_and(|t| at.tokens < t.tokens));
    let restart = restarts_lead && !drop && restart_at.is_some();
    let previous = if forked {
        own_tail.or(group.tail)
    } else if req.compacted || tools_changed {
        segment += 1;
        None
    } else if let Some(own) = parked_tail(group, req.conversation) {
        Some(own)
    } else if drop {
        // The prompt shares the prefix up to the dropped thinking and is new after it: a new
        // segment, so that its entries cannot be mistaken for the kept branch's.
        segment += 1;
        dropped_at
    } else if restart {
        // The same: shared up to where the previous turn began, new after it.
        segment += 1;
        restart_at
    } else {
        group.tail
    };
    let segment_fp = if forked {
        hash_parts(&["fork", &trace.id])
    } else {
        let epoch = group.tools_epoch.to_string();
        hash_parts(&["seg", &key.0, &key.1, &key.2, &segment.to_string(), &epoch])
    };
    Conversation {
        segment,
        segment_fp,
        previous,
        dropped_at,
        drop,
        restart_at,
        restart,
    }
}

/// The head checkpoints a request carries (tools head, then system head, each with a
/// breakpoint), and the floor they reach: later checkpoints must lie past it.
fn head_checkpoints(
    heads: &Heads,
    previous: Option<Tail>,
    tools_changed: bool,
    end_tokens: Tokens,
    ttl: Ttl,
) -> (Vec<Checkpoint>, Tokens) {
    // A head is a prefix of the conversation, so one at or past the thread's previous tail is
    // wrong for this thread: a size borrowed from another session (where a read a little short
    // of its prefix was taken for a head) must not hide the tail this session cached.
    // After a tool change no head of the old tools matches (the shared tools head is keyed
    // by size, not by tools, so it is skipped for this request rather than re-keyed).
    let head_fits =
        |t: Tokens| !tools_changed && t < end_tokens && previous.is_none_or(|p| t < p.tokens);
    let mut checkpoints: Vec<Checkpoint> = Vec::with_capacity(4);
    let mut floor: Tokens = 0;
    for (block, head) in [(H1_BLOCK, heads.h1), (H2_BLOCK, heads.h2)] {
        if let Some((tokens, fingerprint)) = head
            && (block == H1_BLOCK || tokens > floor)
            && head_fits(tokens)
        {
            checkpoints.push(Checkpoint {
                block,
                tokens,
                fingerprint,
                breakpoint: Some(ttl),
            });
            floor = tokens;
        }
    }
    (checkpoints, floor)
}

/// What [`conversation_checkpoints`] places a request's conversation after.
struct ConversationEnd<'a> {
    conv: &'a Conversation,
    /// The group's last tail (where the previous prompt ended).
    group_tail: Option<Tail>,
    blocks_added: u32,
    /// Everything but the uncached tail: where the last breakpoint sits.
    end_tokens: Tokens,
    /// How far the head checkpoints reach.
    floor: Tokens,
    ttl: Ttl,
}

/// Appends to `checkpoints` the tail the request extends (no breakpoint of its own) and the
/// request's new end (with one), and returns that end.
fn conversation_checkpoints(checkpoints: &mut Vec<Checkpoint>, at: ConversationEnd<'_>) -> Tail {
    let mut end_block = CONVERSATION_BLOCK;
    if let Some(p) = at.conv.previous
        && p.tokens > at.floor
        && p.tokens <= at.end_tokens
    {
        checkpoints.push(Checkpoint {
            block: p.block,
            tokens: p.tokens,
            fingerprint: p.fingerprint,
            breakpoint: None,
        });
        end_block = p.block;
    }
    if (at.conv.drop || at.conv.restart)
        && let Some(t) = at.group_tail
    {
        // The dropped point lies back in the previous turn; the new end is counted from where
        // the previous prompt ended (the 20-block lookback may not reach back that far).
        end_block = end_block.max(t.block);
    }
    // Unknown block counts are taken as one block: the common case of a short turn.
    end_block += at.blocks_added.max(1);
    let end = Tail {
        fingerprint: extend(at.conv.segment_fp, at.end_tokens),
        tokens: at.end_tokens,
        block: end_block,
    };
    if at.end_tokens > at.floor {
        checkpoints.push(Checkpoint {
            block: end.block,
            tokens: end.tokens,
            fingerprint: end.fingerprint,
            breakpoint: Some(at.ttl),
        });
    }
    end
}

/// A request rebuilt by [`ModelReplay::rebuild`]: its checkpoints, and the state its group
/// carries on from once the answer is known.
struct Rebuilt {
    key: GroupKey,
    /// The group as it stood before this request (its tools epoch already moved on a change).
    group: Group,
    tools_changed: bool,
    /// Whether the tool change is a first tool load the model's loads say breaks the prefix.
    load_breaks: bool,
    segment: u32,
    dropped_at: Option<Tail>,
    restart_at: Option<Tail>,
    /// Whether the request is predicted to diverge from its predecessor in the messages: its
    /// client dropped the previous turn's thinking or re-sent the turn (a compaction is named
    /// by the caller, from the trace).
    rewritten: bool,
    checkpoints: Vec<Checkpoint>,
    /// Where this request's conversation ends.
    end: Tail,
}

/// The replay state of the cache model.
#[derive(Debug, Default)]
pub(super) struct ModelReplay {
    cache: CacheState,
    groups: HashMap<GroupKey, Group>,
    /// Latest observed head sizes per (model, main group?), for sessions without their own.
    h1_estimate: HashMap<(String, bool), Tokens>,
    h2_estimate: HashMap<(String, bool), Tokens>,
    /// Tail of a compaction (or other forked) thread's own previous request.
    thread_tails: HashMap<String, Tail>,
    /// Per model and tools-head size: the session openings on it while nothing in the traces
    /// kept it warm, by whether they read it (see [`Openings`]).
    openings: HeadTallies,
    /// Per model and tools-head size: the later main-thread requests on it while nothing in the
    /// traces kept it warm (a session resumed after its entries expired), by whether they read
    /// it — tallied apart from the openings (see [`Openings`]).
    resumptions: HeadTallies,
    /// The (session, thread) pairs that have sent a request, on any model: a trace's first
    /// request in one of them follows a model switch and opens nothing
    /// ([`ModelReplay::opens_session`]).
    started: HashSet<(String, String)>,
    /// Per (model, main group?): threads' first tool loads, by whether the prefix survived
    /// (see [`FirstLoads`]).
    first_loads: HashMap<(String, bool), FirstLoads>,
    /// Per (model, main group?): turn openings by whether they read back to where the previous
    /// turn began (see [`TurnRestarts`]).
    turn_restarts: HashMap<(String, bool), TurnRestarts>,
    /// Requests the cache model refused (a malformed reconstruction).
    pub(super) errors: usize,
}

impl ModelReplay {
    /// Predicts the read of `trace.requests[index]` and the cache model's miss cause, commits it
    /// to the cache, and learns from the recorded usage afterwards.
    ///
    /// Strictly causal: the read predicted for request k depends only on requests before k and
    /// on what the client knew before sending k — its time, its prompt's size and where its last
    /// breakpoint sat (everything but the uncached tail), the blocks it added and whether a
    /// compaction preceded it. The provider's answer (how the cached part split into read,
    /// 5m and 1h writes) is read only after the prediction ([`ModelReplay::learn`]), to place the
    /// entries k wrote at the tier it wrote them in and to learn head sizes for the requests that
    /// follow. A request that wrote nothing writes, in the model, at `fallback_ttl`: the tier of
    /// the trace's latest earlier write.
    pub(super) fn step(
        &mut self,
        trace: &Trace,
        index: usize,
        reference: Tokens,
        fallback_ttl: Ttl,
        options: &ValidateOptions,
    ) -> (Tokens, Option<MissCause>) {
        let Some(req) = trace.requests.get(index) else {
            return (0, None);
        };
        let rebuilt = self.rebuild(
            trace,
            index,
            req.write_ttl().unwrap_or(fallback_ttl),
            options,
        );
        let dead_head =
            self.open_on_dead_head(trace, index, &rebuilt.checkpoints, fallback_ttl, options);
        let rewritten = rebuilt.rewritten;
        let load_breaks = rebuilt.load_breaks;
        let prompt = Prompt {
            model: &trace.model,
            checkpoints: &rebuilt.checkpoints,
            total_tokens: req.usage.prompt(),
        };
        let (read, miss) =
            match self
                .cache
                .apply(&prompt, req.at_ms, options.min_cacheable, &options.rules)
            {
                Ok(outcome) => (outcome.read, outcome.miss),
                Err(_) => {
                    self.errors += 1;
                    (0, None)
                }
            };
        self.learn(trace, index, reference, rebuilt, dead_head, options);
        // A prompt rebuilt without the previous turn's thinking diverges from its predecessor
        // in the messages, whatever the cache still held of it.
        (
            read,
            if load_breaks {
                Some(MissCause::ToolsChange)
            } else if rewritten {
                Some(MissCause::MessagesChange)
            } else {
                miss
            },
        )
    }

    /// Request `index` of `trace` rebuilt as checkpoints, from what the client knew before
    /// sending it, and what its thread group will carry on from.
    fn rebuild(&self, trace: &Trace, index: usize, ttl: Ttl, options: &ValidateOptions) -> Rebuilt {
        let req = &trace.requests[index];
        let key: GroupKey = (
            trace.session.clone(),
            group_name(trace).to_string(),
            trace.model.clone(),
        );
        let mut group = self.groups.get(&key).cloned().unwrap_or_default();
        // A tool list changed before sending: tools come first, so nothing cached before
        // matches (known to the client before the request; the fork of a compaction agent
        // inherits its parent's tools and never carries the flag).
        let load_breaks = self.load_breaks(trace, index);
        let tools_changed = changed_tools(trace, index) || load_breaks;
        if tools_changed {
            group.tools_epoch += 1;
        }
        // A first load that changes the prompt's head changes it for the rest of the thread:
        // its head is no longer the one a fresh session sends (see `Group::own_tools_head`).
        if load_breaks {
            group.own_tools_head = true;
        }
        // Where the last breakpoint sits: everything but the uncached tail. Known to the client
        // before sending; it only places the new entry and never decides this request's read.
        let end_tokens = req.usage.prompt().saturating_sub(req.usage.input);
        let heads = self.heads(trace, &key, &group, options);
        let own_tail = self.thread_tails.get(&trace.id).copied();
        // Followed only where the model still holds the point live: on `bradymholt/dotfiles`'
        // tuning part, predicting the restart where the point had expired in the model read
        // only the system head, and the read error doubled (1.44% to 3.29%) for the same class.
        let restart_live = group.turn_start.is_some_and(|at| {
            self.cache
                .expiry(&trace.model, at.fingerprint)
                .is_some_and(|expires| req.at_ms < expires)
        });
        let restarts_lead = restart_live
            && self
                .turn_restarts
                .get(&(trace.model.clone(), is_main_group(trace)))
                .is_some_and(TurnRestarts::lead);
        let conv = conversation(
            trace,
            index,
            &key,
            &group,
            tools_changed,
            own_tail,
            restarts_lead,
        );

        let (mut checkpoints, floor) =
            head_checkpoints(&heads, conv.previous, tools_changed, end_tokens, ttl);
        let end = conversation_checkpoints(
            &mut checkpoints,
            ConversationEnd {
                conv: &conv,
                group_tail: group.tail,
                blocks_added: req.blocks_added,
                end_tokens,
                floor,
                ttl,
            },
        );
        Rebuilt {
            key,
            group,
            tools_changed,
            load_breaks,
            segment: conv.segment,
            dropped_at: conv.dropped_at,
            restart_at: conv.restart_at,
            rewritten: conv.drop || conv.restart,
            checkpoints,
            end,
        }
    }

    /// The heads a request of `group` carries, with their fingerprints: this session's own
    /// observation, else the latest of an earlier session.
    fn heads(
        &self,
        trace: &Trace,
        key: &GroupKey,
        group: &Group,
        options: &ValidateOptions,
    ) -> Heads {
        let est_key = (trace.model.clone(), is_main_group(trace));
        let epoch = group.tools_epoch.to_string();
        let h1 = group.h1.or_else(|| {
            options
                .share_tools_head
                .then(|| self.h1_estimate.get(&est_key).copied())
                .flatten()
        });
        let h2 = group.h2.or_else(|| self.h2_estimate.get(&est_key).copied());
        let kind = if is_main_group(trace) { "main" } else { "sub" };
        let h1_fp = if options.share_tools_head && !group.own_tools_head {
            h1.map(|t| hash_parts(&["h1", &trace.model, kind, &t.to_string()]))
        } else {
            Some(hash_parts(&["h1", &key.0, &key.1, &key.2, &epoch]))
        };
        // The size is part of the key: when a better size is learned, entries stamped with the
        // old guess must not be read back with the old token count.
        let h2_fp = h2.map(|t| hash_parts(&["h2", &key.0, &key.1, &key.2, &t.to_string(), &epoch]));
        Heads {
            h1: h1.zip(h1_fp),
            h2: h2.zip(h2_fp),
        }
    }

    /// Learns from what request `index` recorded, for the requests that follow: the openings
    /// tally, head sizes, the thinking-drop state and where the thread's conversation ended.
    fn learn(
        &mut self,
        trace: &Trace,
        index: usize,
        reference: Tokens,
        rebuilt: Rebuilt,
        dead_head: Option<Checkpoint>,
        options: &ValidateOptions,
    ) {
        let req = &trace.requests[index];
        let forked = trace.kind == ThreadKind::Compaction;
        let recorded = req.usage.cache_read;
        if let Some(c) = dead_head {
            self.tally_dead_head(trace, index, c, recorded, options);
        }
        self.started
            .insert((trace.session.clone(), trace.thread.clone()));
        self.count_load(trace, index, reference, options);
        let Rebuilt {
            key,
            group,
            tools_changed,
            segment,
            dropped_at,
            restart_at,
            end,
            ..
        } = rebuilt;
        let group_tail = group.tail;
        // A request of another conversation of the thread (a second terminal) extended that
        // conversation's own tail: where its turn began, and no read back to be counted.
        let own_tail = parked_tail(&group, req.conversation);
        let mut updated = group;
        updated.segment = segment;
        let seen = dropped_at.zip(group_tail).and_then(|(at, t)| {
            ThinkingDrop::observed(recorded, at.tokens, t.tokens, options.tolerance)
        });
        // A read back to where the previous turn began still teaches a head size: on
        // `bradymholt/dotfiles`' tuning part such a size, taken for a system head, was what the
        // model predicted (close to the read) at three later turns whose tail it could not
        // reach; kept out of the heads, those read only the real system head.
        // A switch of terminal reads its own tail, which may sit where the thread's turn began:
        // counted, two terminals taking turns made restarts lead (review of `TurnRestarts`).
        if own_tail.is_none() {
            self.count_restart(trace, req, seen, restart_at.zip(group_tail), options);
        }
        // A read that stopped at a dropped thinking block is a prefix of the conversation, not
        // a head: it must not teach a head size.
        if seen != Some(ThinkingDrop::Dropped)
            && classify(recorded, reference, options.tolerance) == ReadClass::Head
        {
            self.learn_head(trace, index, recorded, &mut updated, options);
        }
        if forked {
            self.thread_tails.insert(trace.id.clone(), end);
        } else {
            // A person's turn begins where the previous prompt ended.
            if req.compacted || tools_changed {
                updated.turn_start = None;
            } else if req.boundary {
                updated.turn_start = own_tail.or(group_tail);
            }
            continue_tail(&mut updated, req, seen, tools_changed, end);
        }
        self.groups.insert(key, updated);
    }

    /// Counts a turn opening's read against where the previous turn began (`points`: that
    /// point and the previous prompt's end), for [`TurnRestarts`]. A read at a dropped thinking
    /// point, or after an interrupt, is the thinking rule's.
    fn count_restart(
        &mut self,
        trace: &Trace,
        req: &TraceRequest,
        seen: Option<ThinkingDrop>,
        points: Option<(Tail, Tail)>,
        options: &ValidateOptions,
    ) {
        let Some((at, previous)) = points else {
            return;
        };
        if seen == Some(ThinkingDrop::Dropped) || req.interrupted_thinking {
            return;
        }
        self.turn_restarts
            .entry((trace.model.clone(), is_main_group(trace)))
            .or_default()
            .observe(
                req.usage.cache_read,
                at.tokens,
                previous.tokens,
                options.tolerance,
            );
    }

    /// A head read by request `index`: the tools head at a thread's first request, else a
    /// second head when it is beyond the first.
    fn learn_head(
        &mut self,
        trace: &Trace,
        index: usize,
        recorded: Tokens,
        group: &mut Group,
        options: &ValidateOptions,
    ) {
        let forked = trace.kind == ThreadKind::Compaction;
        let est_key = (trace.model.clone(), is_main_group(trace));
        let within_h1 = group.h1.is_some_and(|t| recorded <= t + options.tolerance);
        // A thread's first request can only have found a head some other thread or session
        // wrote: the tools head. A fork's first request normally reads the forked prefix, so
        // a head there is the tools head only when none is known yet.
        if index == 0 && (!forked || group.h1.is_none()) {
            group.h1 = Some(recorded);
            self.h1_estimate.insert(est_key, recorded);
        } else if !within_h1 {
            group.h2 = Some(recorded);
            self.h2_estimate.insert(est_key, recorded);
        }
    }

    /// The tools head a request of `trace` carries, as the model places it before stepping it:
    /// the size its session read at its start, else the latest an earlier session read (when
    /// the head is shared). What a read short of the expected prefix is measured against
    /// (`shortfall_cause`).
    pub(super) fn tools_head(&self, trace: &Trace, options: &ValidateOptions) -> Option<Tokens> {
        let key: GroupKey = (
            trace.session.clone(),
            group_name(trace).to_string(),
            trace.model.clone(),
        );
        self.groups.get(&key).and_then(|g| g.h1).or_else(|| {
            let est_key = (trace.model.clone(), is_main_group(trace));
            options
                .share_tools_head
                .then(|| self.h1_estimate.get(&est_key).copied())
                .flatten()
        })
    }

    /// The reference prefix of a request before it is stepped.
    pub(super) fn reference(&self, trace: &Trace, index: usize) -> Tokens {
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

/// A thread's state after `req`, which ends its conversation at `end`: the thinking-drop count
/// (`seen`), where its turn's thinking began, and the tail it continues — parking the tail of
/// another conversation the request left.
fn continue_tail(
    group: &mut Group,
    req: &TraceRequest,
    seen: Option<ThinkingDrop>,
    tools_changed: bool,
    end: Tail,
) {
    // A drop the person caused by interrupting says nothing of what the client does with a
    // finished turn's thinking.
    if let Some(seen) = seen.filter(|_| !req.interrupted_thinking) {
        group.thinking_drops = match seen {
            ThinkingDrop::Dropped => group.thinking_drops.saturating_add(1),
            ThinkingDrop::Kept => 0,
        };
    }
    // A turn starts afresh at a person's message, a compaction or a tool change; its first
    // answer that thought marks where a later drop would cut.
    if req.boundary || req.compacted || tools_changed {
        group.turn_thinking = None;
    }
    if req.reasoning && group.turn_thinking.is_none() {
        group.turn_thinking = Some(end);
    }
    if req.conversation != group.tail_conversation {
        let left = group.tail_conversation;
        group
            .parked
            .retain(|(c, _)| *c != left && *c != req.conversation);
        if let Some(t) = group.tail {
            group.parked.push((left, t));
        }
        if group.parked.len() > PARKED_TAILS {
            group.parked.remove(0);
        }
        group.tail_conversation = req.conversation;
    }
    group.tail = Some(end);
    group.last_cached = cached_part(req);
}
