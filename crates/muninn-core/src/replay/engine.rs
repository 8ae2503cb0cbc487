//! The replay engine: one session's requests, idle gaps, refreshes and clears, priced by the
//! cache model around the session's [`Accounting`], with a [`Driver`] (an online policy or the
//! optimum's plan) answering each decision.

use super::*;

/// What only hindsight knows: the requests still to come. Online policies never see it.
#[derive(Debug, Clone, Copy)]
pub struct Hindsight<'a> {
    /// Index of the next request.
    pub next: usize,
    /// Every request of the trace.
    pub turns: &'a [Turn],
    /// The session's TTL tier.
    pub ttl: Ttl,
    /// How long before expiry the host decides.
    pub before_ms: i64,
}

/// Who makes the decisions during a replay.
#[derive(Debug)]
pub(super) enum Driver {
    Online(Policy),
    Optimum(crate::optimum::OptimumPlan),
}

impl Driver {
    fn decide(
        &self,
        view: &SessionView,
        event: Event,
        now_ms: i64,
        future: &Hindsight<'_>,
    ) -> Decision {
        match self {
            Driver::Online(policy) => decide(*policy, view, event, now_ms),
            Driver::Optimum(plan) => plan.decide(view, event, now_ms, future),
        }
    }
}

/// A bound on the decisions of one gap, per entry: each ping moves the decision point on by
/// nearly a TTL, so only a degenerate configuration (a zero-length step) gets near it.
const IDLE_DECISIONS_MAX: u32 = 10_000;

/// The replay engine's session: the cache model's state and the synthetic prompt structure it
/// prices, around the session's [`Accounting`] (every counter the decider reads lives there).
pub(super) struct Engine<'a> {
    config: &'a ReplayConfig<'a>,
    model: &'a str,
    ttl: Ttl,
    head_ttl: Ttl,
    head: Tokens,
    head_fp: Fingerprint,
    trace_fp: Fingerprint,
    cache: CacheState,
    prediction: Prediction,
    checkpoints: Vec<Checkpoint>,
    acc: Accounting,
    // The current segment's synthetic structure.
    segment: u64,
    segment_base: Tokens,
    segment_start_len: Tokens,
    segment_blocks: u32,
    // Where the last request's cached prefix ends: its tokens, fingerprint and block (0: the
    // prefix is the head).
    end_tokens: Tokens,
    end_fp: Fingerprint,
    end_block: u32,
}

impl<'a> Engine<'a> {
    pub(super) fn new(
        trace: &'a Trace,
        head: Tokens,
        ttl: Ttl,
        config: &'a ReplayConfig<'a>,
        learned: Learned,
    ) -> Engine<'a> {
        let a = config.assumptions;
        let trace_fp = hash_bytes(trace.id.as_bytes());
        let head_ttl = a.head_ttl_for(ttl);
        let params = Params {
            ttl,
            head_ttl,
            rates: Rates::of(config.price, ttl, head_ttl),
            bounds: a.bounds(head, config.price),
            min_cacheable: config.price.min_cacheable,
            decide_before_expiry_ms: a.decide_before_expiry_ms,
            can: a.capabilities(config.price),
            lifetime_ms: config.rules.lifetime_ms,
        };
        Engine {
            config,
            model: &trace.model,
            ttl,
            head_ttl,
            head,
            head_fp: extend(trace_fp, hash_bytes(b"head")),
            trace_fp,
            cache: CacheState::new(),
            prediction: Prediction::default(),
            checkpoints: Vec::with_capacity(4),
            acc: Accounting::with_learned(params, learned),
            segment: 0,
            segment_base: head,
            segment_start_len: 0,
            segment_blocks: 1,
            end_tokens: 0,
            end_fp: 0,
            end_block: 0,
        }
    }

    fn conversation_fp(&self, index: usize) -> Fingerprint {
        extend(extend(self.trace_fp, self.segment), index as u64 + 1)
    }

    /// Sends the prompt in `self.checkpoints` and prices it.
    fn send(
        &mut self,
        total: Tokens,
        output: Tokens,
        now_ms: i64,
    ) -> (Usage, MicroUsd, Option<MissCause>) {
        let prompt = Prompt {
            model: self.model,
            checkpoints: &self.checkpoints,
            total_tokens: total,
        };
        let rules = self.config.rules;
        let usage = match self.cache.predict_into(
            &prompt,
            now_ms,
            self.config.price.min_cacheable,
            rules,
            &mut self.prediction,
        ) {
            Ok(()) => {
                self.cache
                    .commit(self.model, &self.prediction, now_ms, rules);
                self.prediction.outcome
            }
            // The engine builds at most two breakpoints in TTL order, so this cannot happen; if it
            // did, the request would be priced as fully uncached rather than silently free.
            Err(e) => {
                debug_assert!(
                    false,
                    "the replay engine built a prompt the cache model refuses: {e}"
                );
                crate::cache::CacheOutcome {
                    uncached: total,
                    ..Default::default()
                }
            }
        };
        let u = usage.usage(output);
        (u, self.config.price.cost(&u), usage.miss)
    }

    fn head_checkpoint(&self) -> Checkpoint {
        Checkpoint {
            block: 0,
            tokens: self.head,
            fingerprint: self.head_fp,
            breakpoint: Some(self.head_ttl),
        }
    }

    /// A ping or flush: the cached prefix (read if warm) plus a few uncached tokens; a head-only
    /// ping: the head alone. Reports the step and returns its usage and cost.
    fn side_request(
        &mut self,
        kind: StepKind,
        keep: Keep,
        index: usize,
        now_ms: i64,
        on_step: &mut dyn FnMut(&Step),
    ) -> (Usage, MicroUsd) {
        let bounds = &self.acc.params().bounds;
        let (extra, output) = match kind {
            StepKind::Flush => (bounds.flush_prompt_tokens, bounds.flush_output_tokens),
            _ => (bounds.ping_tokens, bounds.ping_output_tokens),
        };
        self.checkpoints.clear();
        let total = if keep == Keep::Head {
            self.checkpoints.push(self.head_checkpoint());
            self.head + extra
        } else {
            let warm = self
                .cache
                .expiry(self.model, self.end_fp)
                .is_some_and(|t| t > now_ms);
            // A cold flush carries no breakpoint: nothing of this segment will be read again, so
            // sending it uncached (1×) is cheaper than writing it (1.25× or 2×).
            if warm || kind == StepKind::Ping {
                self.checkpoints.push(self.head_checkpoint());
                if self.end_block > 0 {
                    self.checkpoints.push(Checkpoint {
                        block: self.end_block,
                        tokens: self.end_tokens,
                        fingerprint: self.end_fp,
                        breakpoint: Some(self.ttl),
                    });
                }
            }
            self.end_tokens + extra
        };
        let (usage, cost, _) = self.send(total, output, now_ms);
        on_step(&Step {
            index,
            at_ms: now_ms,
            kind,
            usage,
            cost,
            gap_ms: 0,
            miss: None,
            refreshed: false,
            mask: None,
        });
        (usage, cost)
    }

    /// The idle gap before request `index` (`turn`): every decision the accounting schedules
    /// before it, carried out.
    fn idle(
        &mut self,
        index: usize,
        turn: &Turn,
        driver: &Driver,
        future: &Hindsight<'_>,
        on_step: &mut dyn FnMut(&Step),
    ) {
        let now = turn.at_ms;
        for _ in 0..=IDLE_DECISIONS_MAX {
            let Some(point) = self.acc.next_decision().filter(|p| p.at_ms < now) else {
                return;
            };
            let at = point.at_ms;
            // The answer before this gap asked for tools exactly when this request carries
            // `tool_result` blocks: the API refuses a request that leaves a `tool_use`
            // unanswered, and accepts a result only after its use. They are awaited until
            // written — known at `at` — not until sent: results written before the gap whose
            // request the API refused (a usage limit) ride on the next one, a person's message
            // hours later, and nothing was awaited meanwhile. A trace that records no tool
            // results never awaits them; one that does not say when, awaits them until sent.
            let written = turn.tools_at_ms.is_some_and(|w| w <= at);
            self.acc.awaiting_tools(turn.tools.uses > 0 && !written);
            let view = self.acc.view();
            let decision = driver.decide(&view, point.keep.event(), at, future);
            match (point.keep, decision.action) {
                (keep, Action::Ping) => {
                    let (usage, cost) = self.side_request(StepKind::Ping, keep, index, at, on_step);
                    self.acc.ping(at, keep, &usage, cost);
                }
                (Keep::Tail, Action::Flush) if !view.flushed && view.needs_flush() => {
                    let (usage, cost) =
                        self.side_request(StepKind::Flush, Keep::Tail, index, at, on_step);
                    self.acc.flush(at, &usage, cost);
                }
                (keep, _) => self.acc.let_go(keep),
            }
        }
    }

    /// The request for `turn` is sent with a clear (the `mask` action): the accounting drops
    /// the clearable results, the segment is that much shorter from now on, and the clear is
    /// described as [`crate::mask`] prices it — the head read if warm (the longest cached prefix
    /// before the first cleared block), the rest of the shorter prompt written. `kept`: the
    /// tokens before that block ([`SessionView::clear_from_tokens`]).
    fn clear(
        &mut self,
        kept: Tokens,
        turn: &Turn,
        length: Tokens,
        now: i64,
    ) -> crate::mask::MaskedRequest {
        let head_warm = self
            .cache
            .expiry(self.model, self.head_fp)
            .is_some_and(|t| t > now);
        let uncleared = self.prompt_tokens(length + turn.delta);
        let cleared = self.acc.masked(crate::session::arriving_uses(&turn.tools));
        crate::mask::MaskedRequest {
            uncleared_tokens: uncleared,
            kept_tokens: kept,
            cleared_tokens: cleared,
            cached_before_clear: if head_warm && kept >= self.head {
                self.head
            } else {
                0
            },
            ttl: self.ttl,
            output: turn.output,
        }
    }

    /// The trace, turn by turn: the idle gap before it, the decision at its arrival, then its
    /// request.
    /// Ends the session — its last segment is finished, which masks weigh their payback by —
    /// and returns what the Mind learned, for its next session.
    pub(super) fn finish(mut self) -> Learned {
        self.acc.end_session();
        self.acc.learned()
    }

    pub(super) fn run(
        &mut self,
        turns: &[Turn],
        driver: &mut Driver,
        on_step: &mut dyn FnMut(&Step),
    ) {
        let before = self.config.assumptions.decide_before_expiry_ms;
        let mut length: Tokens = 0; // L: the logical conversation so far
        for (index, turn) in turns.iter().enumerate() {
            let now = turn.at_ms;
            let gap_ms = self.acc.last_request_ms().map_or(0, |last| now - last);
            let future = Hindsight {
                next: index,
                turns,
                ttl: self.ttl,
                before_ms: before,
            };
            if index > 0 {
                self.idle(index, turn, driver, &future, on_step);
            }
            // The arrival.
            let view = self
                .acc
                .arrival_view(turn.boundary, crate::session::arriving_uses(&turn.tools));
            // An online policy refreshes only where a turn begins: the decider's quality bound
            // (no refresh inside a tool loop). The optimum's plan may also start a segment
            // where the recorded client compacted (`Turn::may_refresh`), so that the recorded
            // plan's own refreshes are among its plans; it does not read this flag.
            let decision = driver.decide(
                &view,
                Event::Arrival {
                    boundary: turn.boundary,
                    delta: turn.delta,
                },
                now,
                &future,
            );
            // What the view says is read out before the accounting moves on (the view
            // borrows it).
            let flush_first = !view.flushed && view.needs_flush();
            let kept = view.clear_from_tokens;
            let refreshed = decision.action == Action::Refresh && index > 0;
            if refreshed {
                self.refresh(flush_first, decision.reason, index, length, now, on_step);
            }
            let masked = decision.action == Action::Mask && index > 0;
            let mask = masked.then(|| self.clear(kept, turn, length, now));
            length += turn.delta;
            let arrived = Arrived {
                index,
                gap_ms,
                refreshed,
                mask,
            };
            self.request(&arrived, turn, length, on_step);
        }
    }

    /// Starts a new segment before request `index`, flushing first if memory needs it and this
    /// gap has not flushed it yet (`flush_first`).
    fn refresh(
        &mut self,
        flush_first: bool,
        reason: Reason,
        index: usize,
        length: Tokens,
        now: i64,
        on_step: &mut dyn FnMut(&Step),
    ) {
        if flush_first {
            let (usage, cost) = self.side_request(StepKind::Flush, Keep::Tail, index, now, on_step);
            self.acc.flush(now, &usage, cost);
        }
        self.segment += 1;
        self.segment_base = self.head + self.acc.params().bounds.rehydrate_tokens;
        self.segment_start_len = length;
        self.segment_blocks = 2;
        let cause = if reason == Reason::Ceiling {
            SegmentCause::Forced
        } else {
            SegmentCause::Chosen
        };
        self.acc.begin_segment(self.head, cause);
    }

    /// The prompt of a request in the current segment when the conversation is `length` tokens
    /// long: the segment's base, what the conversation added since it began, less what its
    /// clears removed (the accounting counts those).
    fn prompt_tokens(&self, length: Tokens) -> Tokens {
        self.segment_base + (length - self.segment_start_len) - self.acc.segment_cleared()
    }

    /// Sends the turn's request (the conversation now `length` tokens long), prices it on the
    /// cache model and feeds the accounting.
    fn request(
        &mut self,
        arrived: &Arrived,
        turn: &Turn,
        length: Tokens,
        on_step: &mut dyn FnMut(&Step),
    ) {
        let (index, now) = (arrived.index, turn.at_ms);
        let masked = arrived.mask.is_some();
        let prompt_tokens = self.prompt_tokens(length);
        // A cleared prompt carries its breakpoint on its last block, as the host sends it.
        let cached = prompt_tokens - if masked { 0 } else { turn.uncached };
        let block = self.segment_blocks + turn.blocks;
        let fp = self.conversation_fp(index);
        self.place_checkpoints(masked, cached, block, fp);
        let (priced, mut cost, mut miss) = self.send(prompt_tokens, turn.output, now);
        let mut usage = priced;
        if index == 0 {
            usage = self.first_request_usage(turn.recorded, &priced);
            cost = self.config.price.cost(&usage);
            miss = None;
        }
        on_step(&Step {
            index,
            at_ms: now,
            kind: StepKind::Request,
            usage,
            cost,
            gap_ms: arrived.gap_ms,
            miss,
            refreshed: arrived.refreshed,
            mask: arrived.mask,
        });
        // The accounting follows the cache model's state, which the priced request built.
        self.acc.arrived(turn.boundary);
        self.acc.tool_results(turn.tools.tokens, turn.tools.uses);
        self.acc.request(now, &priced);
        self.segment_blocks = block;
        self.end_tokens = cached.max(self.head);
        self.end_fp = if cached > self.head { fp } else { self.head_fp };
        self.end_block = if cached > self.head { block } else { 0 };
    }

    /// What a plan pays for the trace's first request. It meets whatever the provider's cache
    /// held before the trace began (a head warmed by another session, say): no policy can change
    /// that, so every plan pays what was recorded — but at its own tiers. A plan whose head has a
    /// longer TTL than the session's (the host's hour over a 5-minute client) wrote that head at
    /// the hour's price in the cache model, which keeps it alive for the hour from here; the
    /// part of the head the client wrote is priced at the hour, or the plan would get an hour's
    /// head for a 5-minute write.
    fn first_request_usage(&self, recorded: Usage, priced: &Usage) -> Usage {
        let mut usage = recorded;
        if self.head_ttl > self.ttl {
            let head_written = self.head.saturating_sub(recorded.cache_read);
            let moved = priced
                .cache_write_1h
                .min(head_written)
                .min(usage.cache_write_5m);
            usage.cache_write_5m -= moved;
            usage.cache_write_1h += moved;
        }
        usage
    }

    /// The request's checkpoints: the head, then the previous request's end (or, at a segment's
    /// start or after a clear, the rehydrated memory), then its own breakpoint.
    fn place_checkpoints(&mut self, masked: bool, cached: Tokens, block: u32, fp: Fingerprint) {
        self.checkpoints.clear();
        self.checkpoints.push(self.head_checkpoint());
        if self.acc.segment_requests() > 0 && self.end_block > 0 && !masked {
            self.checkpoints.push(Checkpoint {
                block: self.end_block,
                tokens: self.end_tokens,
                fingerprint: self.end_fp,
                breakpoint: None,
            });
        } else if self.segment > 0 {
            // The rehydrated memory: a boundary of its own, without a breakpoint.
            self.checkpoints.push(Checkpoint {
                block: 1,
                tokens: self.segment_base,
                fingerprint: extend(extend(self.trace_fp, self.segment), 0),
                breakpoint: None,
            });
        }
        if cached > self.head {
            self.checkpoints.push(Checkpoint {
                block,
                tokens: cached,
                fingerprint: fp,
                breakpoint: Some(self.ttl),
            });
        }
    }
}

/// What the arrival of one turn decided, for its request.
struct Arrived {
    index: usize,
    gap_ms: i64,
    refreshed: bool,
    mask: Option<crate::mask::MaskedRequest>,
}
