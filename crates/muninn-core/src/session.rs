//! Session accounting: the one owner of every counter the decider reads.
//!
//! The decider ([`crate::decide::decide`]) is pure; what it decides from is a [`SessionView`]:
//! the cached prefix, when it and the head expire, the requests of the segment, the reads paid
//! above a rehydration since the segment began, what this idle gap has spent on pings, the gaps
//! seen so far. [`Accounting`] is the only place those numbers are kept. The live host and the
//! replay engine both drive it with the same events — a segment begins, a request was answered,
//! a ping or a flush was sent, the decider let an entry go — and both ask it for the view and for
//! the next idle decision point ([`Accounting::next_decision`]). Neither keeps a counter of its
//! own, so what `muninn replay` measures about a policy is what the host does (DESIGN
//! invariant 9). The same events teach the Mind whether its refreshes and pings pay back
//! ([`crate::learn`]); that state outlives segments, and the host rebuilds it from the ledger.
//!
//! # Warmth from usage
//!
//! What is cached after a request follows from its usage and the TTLs alone, the same way for
//! the host (the provider's reported usage) and for the replay (the cache model's):
//!
//! - the cached prefix is everything up to the request's last breakpoint, `read + written`;
//! - a prefix no longer than the head *is* the head, and lives as long as the head does;
//! - any other cached prefix lives `ttl` from the request's start (a hit refreshes, a write sets);
//! - the head, under its own breakpoint, lives `head_ttl` from the request's start when the
//!   request reached it and it is at least the model's minimum cacheable size.
//!
//! A keep-warm ping through the prefix refreshes both entries; a head-only ping the head alone;
//! a flush that read the prefix (a warm flush) refreshes both like a ping, a cold one nothing.
//!
//! # Tool results and the `mask` action
//!
//! Where the caller knows how many tool-result tokens a request adds
//! ([`Accounting::tool_results`], before the request is recorded), the accounting keeps where
//! each request's results sit in the segment's prompt. What a clear would remove now is all of
//! them but the latest [`Bounds::mask_keep_tool_uses`] uses, and it would leave the prompt up to
//! the first of them as it was: the view's `clearable_tokens` and `clear_from_tokens`. A request
//! sent with a clear ([`Accounting::masked`]) drops those results and shifts the later ones down.
//! Each request's results are placed where the previous request's prompt ended — at or before
//! where they really are (the previous reply comes first), so the clear is never priced as
//! keeping more of the cache than it does. How many requests the segment still has comes from
//! the lengths of the segments the Mind has finished ([`crate::learn::SegmentLengths`]): a segment
//! is finished when the next begins, or when the session ends ([`Accounting::end_session`]).
//!
//! # Idle decision points
//!
//! While nothing arrives, the decider is asked shortly before the tail expires
//! ([`Event::Expiring`]): ping, flush or let it go. Once the tail is let go (or was already the
//! head), it is asked the same shortly before the head expires ([`Event::HeadExpiring`]). A
//! decision point never lies before the last request, and an entry that did not outlive the last
//! request has none.

use crate::cache::Ttl;
use crate::decide::{Bounds, Capabilities, Event, GapStats, Rates, SessionView};
use crate::learn::{Learned, OpenRefresh};
use crate::ledger::{RowKind, SegmentStart};
use crate::money::{MicroUsd, Tokens};
use crate::trace::Usage;
use serde::{Deserialize, Serialize};

/// Which cache entry a ping keeps, or an idle decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Keep {
    /// The whole cached prefix (head and conversation).
    Tail,
    /// The head alone (tools and system, under its own breakpoint).
    Head,
}

impl Keep {
    /// The decider's event for a decision about this entry.
    pub fn event(self) -> Event {
        match self {
            Keep::Tail => Event::Expiring,
            Keep::Head => Event::HeadExpiring,
        }
    }
}

/// What the accounting of one session is configured with: prices, TTLs, bounds, what the backend
/// can do, and how long before an expiry the decider is asked. Everything here is configuration
/// or measurement, never a literal in logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// The TTL the conversation tail is written at.
    pub ttl: Ttl,
    /// The TTL of the head's own breakpoint (never shorter than `ttl`).
    pub head_ttl: Ttl,
    /// Prices of the session's model.
    pub rates: Rates,
    /// Sizes and quality bounds; `head_tokens` is replaced by each segment's own head.
    pub bounds: Bounds,
    /// The model's minimum cacheable prefix.
    pub min_cacheable: Tokens,
    /// How long before an entry expires the decider is asked about it.
    pub decide_before_expiry_ms: i64,
    /// What the session's backend can do.
    pub can: Capabilities,
    /// An automatic cache's retention, which replaces both TTLs' lifetimes (OpenAI); `None`
    /// where the TTL tiers decide.
    pub lifetime_ms: Option<i64>,
}

impl Params {
    /// How long the tail stays cached after a use.
    pub fn tail_life_ms(&self) -> i64 {
        self.lifetime_ms.unwrap_or_else(|| self.ttl.millis())
    }

    /// How long the head stays cached after a use.
    pub fn head_life_ms(&self) -> i64 {
        self.lifetime_ms.unwrap_or_else(|| self.head_ttl.millis())
    }
}

/// An idle decision to take: about which entry, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionPoint {
    /// The entry the decision is about.
    pub keep: Keep,
    /// When to decide, Unix ms.
    pub at_ms: i64,
    /// When the entry expires, Unix ms.
    pub expires_at_ms: i64,
}

/// What the current idle gap has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Gap {
    pings: u32,
    ping_spend: MicroUsd,
    head_ping_spend: MicroUsd,
    flush_spend: MicroUsd,
    flushed: bool,
    tail_let_go: bool,
    head_let_go: bool,
}

/// The tool results one request added to the segment's prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ToolChunk {
    /// Where they begin in the prompt (tokens before them).
    at: Tokens,
    /// Their tokens.
    tokens: Tokens,
    /// How many tool uses they answer.
    uses: u32,
}

/// Why a segment began, as far as learning is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentCause {
    /// The decider chose to refresh (growth, a cold restart, a size threshold): its payback is
    /// learned from when the refresh left a warm cache.
    Chosen,
    /// The first segment, the context ceiling, a rebuild after a lost session, a flush
    /// protocol: no choice, nothing to learn.
    Forced,
}

/// One session's counters, driven by events; see the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Accounting {
    params: Params,
    head_tokens: Tokens,
    segment_requests: u32,
    prefix_tokens: Tokens,
    warm_until_ms: Option<i64>,
    head_warm_until_ms: Option<i64>,
    last_request_ms: Option<i64>,
    last_activity_ms: Option<i64>,
    read_excess: MicroUsd,
    gap: Gap,
    gaps: GapStats,
    /// What the Mind has learned so far (see [`crate::learn`]); it outlives segments.
    learned: Learned,
    /// A chosen refresh whose first request has not been answered yet.
    pending_refresh: Option<OpenRefresh>,
    /// The warm voluntary refresh that opened the current segment, still counting savings.
    open_refresh: Option<OpenRefresh>,
    /// The last request's whole prompt.
    prompt_tokens: Tokens,
    /// Tool results in the current segment's prompt, oldest first.
    tool_chunks: Vec<ToolChunk>,
    /// Tokens the current segment's clears removed.
    segment_cleared: Tokens,
    /// Σ r·C over the warm requests since the segment's last clear (or its start): the rent
    /// paid so far on tool results a clear could have removed (the *Mask* rule's timing).
    clear_rent: MicroUsd,
    /// Requests of the current run: since the last request at a task boundary
    /// ([`Accounting::arrived`], [`crate::learn::Runs`]).
    run_requests: u32,
    /// A run the arriving request finished: learned at that request, which says whether the
    /// run's segment went on.
    finished_run: Option<u32>,
    /// [`crate::learn::SegmentLengths::remaining`] for the next request of the segment. The
    /// decider's remaining-requests estimate needs it and `run_left`, two bisections, on every
    /// event, while their inputs change only with a request, a task boundary, a segment's or
    /// the session's end — so they are computed there ([`Accounting::update_remaining`]).
    segment_left: u64,
    /// [`crate::learn::Runs::run_left`] for the next request of the run, if inside it.
    run_left: Option<u64>,
    /// [`SessionView::awaiting_tool_results`] until the next request is recorded.
    awaiting_tool_results: bool,
}

impl Accounting {
    /// A session that has sent nothing yet.
    pub fn new(params: Params) -> Accounting {
        Accounting {
            head_tokens: params.bounds.head_tokens,
            params,
            segment_requests: 0,
            prefix_tokens: 0,
            warm_until_ms: None,
            head_warm_until_ms: None,
            last_request_ms: None,
            last_activity_ms: None,
            read_excess: MicroUsd::ZERO,
            gap: Gap::default(),
            gaps: GapStats::default(),
            learned: Learned::default(),
            pending_refresh: None,
            open_refresh: None,
            prompt_tokens: 0,
            tool_chunks: Vec::new(),
            segment_cleared: 0,
            clear_rent: MicroUsd::ZERO,
            run_requests: 0,
            finished_run: None,
            segment_left: 0,
            run_left: None,
            awaiting_tool_results: false,
        }
        .with_remaining()
    }

    /// A session that starts with what its Mind learned in earlier sessions.
    pub fn with_learned(params: Params, learned: Learned) -> Accounting {
        Accounting {
            learned,
            ..Accounting::new(params)
        }
        .with_remaining()
    }

    /// Computes the remaining-requests estimate for the state built.
    fn with_remaining(mut self) -> Accounting {
        self.update_remaining();
        self
    }

    /// Both parts of the estimate: after a request or the session's end, which change the
    /// segment's and the run's requests and what was learned of both.
    fn update_remaining(&mut self) {
        self.update_segment_left();
        self.update_run_left();
    }

    /// After the segment's requests or the segment lengths learned changed.
    fn update_segment_left(&mut self) {
        self.segment_left = self
            .learned
            .segments
            .remaining(self.segment_requests.saturating_add(1));
    }

    /// After the run's requests or the runs learned changed.
    fn update_run_left(&mut self) {
        self.run_left = self
            .learned
            .runs
            .run_left(self.run_requests.saturating_add(1));
    }

    /// What the Mind has learned so far, to carry into its next session.
    pub fn learned(&self) -> Learned {
        self.learned
    }

    /// The configuration.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Replaces the configuration (a Mind's settings changed, or a ledger row says what the
    /// host ran with); the counters stay.
    pub fn set_params(&mut self, params: Params) {
        self.params = params;
    }

    /// A new segment begins on a head of `head_tokens`: its requests and the read excess start
    /// again. What is cached is whatever the provider still holds, so warmth is unchanged. A
    /// segment the decider chose is a refresh whose payback is learned (if it left a warm cache:
    /// its first request says).
    pub fn begin_segment(&mut self, head_tokens: Tokens, cause: SegmentCause) {
        let old_prefix = self.prefix_tokens;
        let had_requests = self.segment_requests > 0;
        self.learned.segments.observe(self.segment_requests);
        self.tool_chunks.clear();
        self.segment_cleared = 0;
        self.clear_rent = MicroUsd::ZERO;
        self.head_tokens = head_tokens;
        // The new segment's prompt starts from the rehydration: later tool results sit after it.
        self.prompt_tokens = self.rehydrated();
        self.segment_requests = 0;
        // The run and the runs learned are unchanged.
        self.update_segment_left();
        self.read_excess = MicroUsd::ZERO;
        self.open_refresh = None;
        self.pending_refresh =
            (cause == SegmentCause::Chosen && had_requests).then(|| OpenRefresh {
                old_prefix,
                head: head_tokens,
                rehydrated: self.rehydrated(),
            });
    }

    /// A request of the segment was answered at `at_ms` with `usage`. It ends the idle gap (whose
    /// length joins the gap statistics), counts the reads above a rehydration (the growth rule's
    /// Σ r·(Pₜ − R)), and leaves its cached prefix warm.
    pub fn request(&mut self, at_ms: i64, usage: &Usage) {
        if let Some(last) = self.last_request_ms {
            self.gaps.observe(at_ms - last);
            self.learned.gaps.observe(at_ms - last);
            self.learned.gap_hours.observe(last, at_ms - last);
        }
        self.learn_from_request(at_ms, usage);
        if self.segment_requests > 0 && usage.cache_read > 0 {
            // Cleared tokens count as if still read: a clear does not postpone the growth
            // rule's refresh, so what it saves is what the decider priced it on (the requests
            // before that refresh, `SessionView::mask_horizon`), and the refresh keeps its
            // ski-rental timing whatever was cleared.
            let excess = (usage.prompt() + self.segment_cleared).saturating_sub(self.rehydrated());
            self.read_excess += MicroUsd::of(excess, self.params.rates.read);
            // The clearable results this request read again: rent a clear would have saved.
            self.clear_rent += MicroUsd::of(self.clearable(0).1, self.params.rates.read);
        }
        if let Some(run) = self.finished_run.take() {
            self.learned.runs.observe(run, self.segment_requests == 0);
        }
        self.segment_requests += 1;
        self.run_requests = self.run_requests.saturating_add(1);
        self.update_remaining();
        self.prompt_tokens = usage.prompt();
        self.last_request_ms = Some(at_ms);
        // Whether its answer asked for tools is told after it ([`Accounting::awaiting_tools`]).
        self.awaiting_tool_results = false;
        self.gap = Gap::default();
        self.cached(at_ms, usage);
    }

    /// The last answer asked for tools whose results are still to be sent (`awaiting`): the
    /// request that ends the idle gap continues its run ([`SessionView::awaiting_tool_results`]).
    /// Recording a request forgets it.
    pub fn awaiting_tools(&mut self, awaiting: bool) {
        self.awaiting_tool_results = awaiting;
    }

    /// The request about to be recorded arrived at a task boundary (`boundary`: it begins a
    /// run, and the run before it is finished) or inside the current run. Call it before
    /// [`Accounting::request`] records the request, which learns the finished run — whether
    /// its segment went on is known there (the request is the first of a new segment or not).
    pub fn arrived(&mut self, boundary: bool) {
        if boundary {
            self.finished_run = Some(self.run_requests);
            self.run_requests = 0;
            self.update_run_left();
        }
    }

    /// The next request adds `tokens` of tool results answering `uses` tool uses (call it before
    /// [`Accounting::request`] records that request). They sit after the previous prompt.
    pub fn tool_results(&mut self, tokens: Tokens, uses: u32) {
        // Results too small to clear (no larger than the placeholder) still take their uses of
        // the provider's `keep`.
        if tokens == 0 && uses == 0 {
            return;
        }
        // Before the session's first request there is no previous prompt: the results still
        // sit after the head (a clear of them would otherwise be described as reading nothing,
        // while the provider reads the warm head before them).
        self.tool_chunks.push(ToolChunk {
            at: self.prompt_tokens.max(self.head_tokens),
            tokens,
            uses,
        });
    }

    /// How many of the oldest tool-result chunks a clear sent with a request carrying
    /// `arriving_uses` tool results would remove (all but those of the latest
    /// `mask_keep_tool_uses` uses, the arriving ones counted first as the provider counts them,
    /// [`crate::mask::kept_before`]), and their tokens.
    fn clearable(&self, arriving_uses: u32) -> (usize, Tokens) {
        let uses = self.tool_chunks.iter().rev().map(|c| c.uses);
        let keep = self.params.bounds.mask_keep_tool_uses;
        let kept = crate::mask::kept_before(arriving_uses, uses, keep);
        let keep_from = self.tool_chunks.len() - kept;
        let tokens = self.tool_chunks[..keep_from].iter().map(|c| c.tokens).sum();
        (keep_from, tokens)
    }

    /// The request about to be recorded, carrying `arriving_uses` tool results, was sent with a
    /// clear: the clearable results are gone from the prompt, and what followed them moved down.
    /// Returns the tokens cleared.
    pub fn masked(&mut self, arriving_uses: u32) -> Tokens {
        let (count, cleared) = self.clearable(arriving_uses);
        self.tool_chunks.drain(..count);
        for chunk in &mut self.tool_chunks {
            chunk.at = chunk.at.saturating_sub(cleared);
        }
        self.prompt_tokens = self.prompt_tokens.saturating_sub(cleared);
        self.segment_cleared += cleared;
        self.clear_rent = MicroUsd::ZERO;
        cleared
    }

    /// The session ended: its open segment is finished, and joins the lengths the Mind has
    /// learned (the replay calls this at the end of a trace; a host's session does not end).
    pub fn end_session(&mut self) {
        self.learned.segments.observe(self.segment_requests);
        self.learned.runs.observe(self.run_requests, true);
        self.run_requests = 0;
        self.segment_requests = 0;
        self.update_remaining();
        self.tool_chunks.clear();
    }

    /// A keep-warm ping was answered at `at_ms`: a tail ping keeps the whole prefix (and the head
    /// under it), a head-only ping the head. `cost` counts against this gap's budget.
    pub fn ping(&mut self, at_ms: i64, keep: Keep, usage: &Usage, cost: MicroUsd) {
        match keep {
            Keep::Tail => {
                self.gap.pings += 1;
                self.gap.ping_spend += cost;
                if let Some(open) = &self.open_refresh {
                    // A ping on the refreshed segment reads less than one on the old prefix.
                    self.learned.refreshes.saved += open.later(self.params.rates.read);
                }
                self.cached(at_ms, usage);
            }
            Keep::Head => {
                self.gap.head_ping_spend += cost;
                self.head_cached(at_ms);
            }
        }
    }

    /// Memory was flushed at `at_ms` for `cost` (the session wrote what the next segment starts
    /// from). A flush that read the prefix refreshed it like a ping; the decider lets the tail go
    /// after it. Its cost counts against the refresh it precedes.
    pub fn flush(&mut self, at_ms: i64, usage: &Usage, cost: MicroUsd) {
        self.gap.flushed = true;
        self.gap.flush_spend += cost;
        self.gap.tail_let_go = true;
        if usage.cache_read > 0 {
            self.cached(at_ms, usage);
        }
    }

    /// An attempt the provider billed but did not answer whole was sent at `at_ms` with `usage`
    /// (its stream was cut after `message_start`): the provider read and wrote the cache as for
    /// the request it attempted, so what it cached is warm from then on — the retry reads it.
    /// It is no request of the segment (the retry is), ends no gap and teaches nothing. One
    /// that sent less than the cached prefix (a head ping, a rebuilt segment's first request)
    /// left that prefix as it was, and changes nothing here.
    pub fn attempt_failed(&mut self, at_ms: i64, usage: &Usage) {
        if usage.cache_read + usage.written() >= self.prefix_tokens {
            self.cached(at_ms, usage);
        }
    }

    /// The decider let `keep` go for the rest of this gap.
    pub fn let_go(&mut self, keep: Keep) {
        match keep {
            Keep::Tail => self.gap.tail_let_go = true,
            Keep::Head => self.gap.head_let_go = true,
        }
    }

    /// Requests sent in the current segment.
    pub fn segment_requests(&self) -> u32 {
        self.segment_requests
    }

    /// Tool-result tokens the current segment's clears removed.
    pub fn segment_cleared(&self) -> Tokens {
        self.segment_cleared
    }

    /// When the last request was sent.
    pub fn last_request_ms(&self) -> Option<i64> {
        self.last_request_ms
    }

    /// When the session last sent anything (a request, a ping, a flush).
    pub fn last_activity_ms(&self) -> Option<i64> {
        self.last_activity_ms
    }

    /// The current segment's head.
    pub fn head_tokens(&self) -> Tokens {
        self.head_tokens
    }

    /// The rehydration size R = head + memory (the configured or measured estimate of what a
    /// refresh brings) that the growth rule measures reads against.
    pub fn rehydrated(&self) -> Tokens {
        self.head_tokens + self.params.bounds.rehydrate_tokens
    }

    /// The next idle decision, if any: shortly before the tail expires (unless it was let go),
    /// then shortly before the head does (unless it was let go).
    pub fn next_decision(&self) -> Option<DecisionPoint> {
        let last = self.last_request_ms?;
        let point = |keep, expiry: Option<i64>| {
            let expires_at_ms = expiry.filter(|e| *e > last)?;
            let at_ms = (expires_at_ms - self.params.decide_before_expiry_ms).max(last);
            Some(DecisionPoint {
                keep,
                at_ms,
                expires_at_ms,
            })
        };
        if !self.gap.tail_let_go
            && let Some(p) = point(Keep::Tail, self.warm_until_ms)
        {
            return Some(p);
        }
        if self.gap.head_let_go {
            return None;
        }
        point(Keep::Head, self.head_warm_until_ms)
    }

    /// What the decider sees between requests (at an idle decision point, where no request has
    /// arrived: its tool results are not known, and it may begin a run).
    pub fn view(&self) -> SessionView<'_> {
        self.arrival_view(true, 0)
    }

    /// What the decider sees at the arrival of a request — at a task boundary or inside the
    /// current run (`boundary`) — that carries `tool_uses` tool results (0 when it carries
    /// none): a clear sent with it keeps them among the newest `keep` uses, and inside a run the
    /// run's own expected rest bounds or extends the horizon ([`crate::learn::Runs::remaining`]).
    pub fn arrival_view(&self, boundary: bool, tool_uses: u32) -> SessionView<'_> {
        SessionView {
            prefix_tokens: self.prefix_tokens,
            warm_until_ms: self.warm_until_ms,
            head_ttl: self.params.head_ttl,
            head_warm_until_ms: self.head_warm_until_ms,
            last_request_ms: self.last_request_ms.unwrap_or(i64::MIN),
            ttl: self.params.ttl,
            segment_requests: self.segment_requests,
            read_excess: self.read_excess,
            gap_pings: self.gap.pings,
            gap_ping_spend: self.gap.ping_spend,
            gap_head_ping_spend: self.gap.head_ping_spend,
            flushed: self.gap.flushed,
            rates: self.params.rates,
            bounds: self.bounds(),
            gaps: self.gaps,
            can: self.params.can,
            learned: &self.learned,
            clearable_tokens: self.clearable(tool_uses).1,
            clear_from_tokens: self.tool_chunks.first().map_or(0, |c| c.at),
            clear_rent: self.clear_rent,
            remaining_requests: self
                .learned
                .runs
                .remaining_with(self.segment_left, self.run_left.filter(|_| !boundary)),
            awaiting_tool_results: self.awaiting_tool_results,
        }
    }

    /// The decider's bounds: the configured ones with the segment's head.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            head_tokens: self.head_tokens,
            ..self.params.bounds
        }
    }

    /// What one ledger row did to the session: the one way a row reaches the accounting, for
    /// the host as it writes the row, for the host restoring a session from its ledger after a
    /// new lease, and for `muninn replay --closed-loop`. `segment` is the segment the row began,
    /// if it began one.
    pub fn record(
        &mut self,
        kind: RowKind,
        at_ms: i64,
        usage: &Usage,
        cost: MicroUsd,
        segment: Option<&SegmentStart>,
    ) {
        if let Some(start) = segment {
            self.start_segment(start, usage);
        }
        self.last_activity_ms = Some(self.last_activity_ms.map_or(at_ms, |t| t.max(at_ms)));
        match kind {
            RowKind::Request => self.request(at_ms, usage),
            RowKind::Ping => self.ping(at_ms, Keep::Tail, usage, cost),
            RowKind::HeadPing => self.ping(at_ms, Keep::Head, usage, cost),
            RowKind::Flush => self.flush(at_ms, usage, cost),
            RowKind::FailedAttempt => self.attempt_failed(at_ms, usage),
        }
    }

    /// [`Accounting::record`] for a row with its decision record: a request sent with a clear
    /// drops what was cleared ([`Accounting::masked`]), and the tool results it added join the
    /// segment ([`Accounting::tool_results`]) — the one way the host (as it writes the row, and
    /// restoring from its ledger) and the closed loop feed a row's clear and tool results.
    pub fn record_decided(
        &mut self,
        decided: &crate::ledger::Decided,
        at_ms: i64,
        usage: &Usage,
        cost: MicroUsd,
    ) {
        if decided.kind == RowKind::FailedAttempt && decided.segment.is_some() {
            // A failed attempt at a segment's first request carries the segment for the
            // cache's sake (`LedgerCache` prices it in that segment); the segment begins with
            // the request's own row, the retry, which the decider was asked for. Until then the
            // accounting's prefix is the old segment's, which the attempt did not change.
            self.last_activity_ms = Some(self.last_activity_ms.map_or(at_ms, |t| t.max(at_ms)));
            return;
        }
        // The segment begins first, so that the row's tool results sit after its rehydration,
        // as the replay engine places them.
        if let Some(start) = &decided.segment {
            self.start_segment(start, usage);
        }
        if decided.kind == RowKind::Request {
            // A row decided at an arrival says whether it was a boundary's; one started without
            // asking (a first, rebuilt or flushed start) begins a segment at a boundary.
            let boundary = match decided.event {
                Some(crate::decide::Event::Arrival { boundary, .. }) => boundary,
                _ => decided.segment.is_some(),
            };
            self.arrived(boundary);
            if decided.action == Some(crate::decide::Action::Mask) {
                self.masked(arriving_uses(&decided.tool_results));
            }
            self.tool_results(decided.tool_results.tokens, decided.tool_results.uses);
        }
        self.record(decided.kind, at_ms, usage, cost, None);
    }

    /// The segment a row begins, begun (its cause judged from the row, [`Accounting::cause_of`]).
    fn start_segment(&mut self, start: &SegmentStart, usage: &Usage) {
        let cause = self.cause_of(start, usage);
        self.begin_segment(start.head, cause);
    }

    /// Why the segment a row begins began: forced when its record says so, or when the old
    /// prefix plus what the row added (its prompt beyond the rehydration) would have passed the
    /// ceiling — the decider's ceiling rule, checked on the row itself because a ledger row
    /// carries the refresh's question, not always its reason.
    fn cause_of(&self, start: &SegmentStart, usage: &Usage) -> SegmentCause {
        let delta = usage.prompt().saturating_sub(start.rehydration);
        if start.forced.is_some()
            || self.prefix_tokens.saturating_add(delta) > self.params.bounds.ceiling_tokens
        {
            SegmentCause::Forced
        } else {
            SegmentCause::Chosen
        }
    }

    /// What a request teaches, before it changes the state: the first request after a chosen
    /// refresh books what the refresh paid and first saved (if it left a warm cache; a cold
    /// restart was chosen on its immediate price and teaches nothing), a later one what
    /// continuing on the old prefix would have paid more; a wake after pings books what they
    /// spent and, if they kept the entry warm, the rewrite they spared.
    fn learn_from_request(&mut self, at_ms: i64, usage: &Usage) {
        let rates = self.params.rates;
        let warm = self.warm_until_ms.is_some_and(|t| t > at_ms);
        if let Some(open) = self.pending_refresh.take()
            && warm
            && open.old_prefix > open.rehydrated
        {
            let (paid, saved) = open.first(self.gap.flush_spend, rates.read, rates.write);
            let refreshes = &mut self.learned.refreshes;
            refreshes.count += 1;
            refreshes.paid += paid;
            refreshes.saved += saved;
            self.open_refresh = Some(open);
        } else if let Some(open) = &self.open_refresh {
            let rate = if usage.cache_read > self.head_tokens {
                rates.read
            } else {
                rates.write
            };
            self.learned.refreshes.saved += open.later(rate);
        }
        let spent = self.gap.ping_spend + self.gap.head_ping_spend;
        if spent > MicroUsd::ZERO {
            let view = self.view();
            let kept = if self.gap.pings > 0 && warm && self.prefix_tokens > self.head_tokens {
                view.cold_wake_penalty()
            } else if view.head_warm(at_ms) && self.gap.head_ping_spend > MicroUsd::ZERO {
                view.head_rewrite_penalty()
            } else {
                MicroUsd::ZERO
            };
            self.learned.pings.observe_recent(spent, kept);
        }
    }

    /// The prefix of `usage` is cached from `at_ms` on (see the module docs for the rule).
    fn cached(&mut self, at_ms: i64, usage: &Usage) {
        self.prefix_tokens = usage.cache_read + usage.written();
        if self.prefix_tokens >= self.head_tokens {
            self.head_cached(at_ms);
        }
        self.warm_until_ms = if self.prefix_tokens == 0 {
            None
        } else if self.prefix_tokens <= self.head_tokens {
            self.head_warm_until_ms
        } else {
            Some(at_ms + self.params.tail_life_ms())
        };
    }

    fn head_cached(&mut self, at_ms: i64) {
        if self.head_tokens > 0 && self.head_tokens >= self.params.min_cacheable {
            self.head_warm_until_ms = Some(at_ms + self.params.head_life_ms());
        }
    }
}

/// The tool uses a request's results count for in a clear sent with it (the provider's `keep`
/// counts uses, whatever their size).
pub fn arriving_uses(tools: &crate::trace::ToolResults) -> u32 {
    tools.uses
}
