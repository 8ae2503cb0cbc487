//! What the decider sees of a session, and the ledger rows of its requests.
//!
//! The counters live in [`muninn_core::session::Accounting`], the type the replay engine drives
//! too. The host feeds it one way only: each ledger row, as it is written, goes through
//! [`Accounting::record`] — the very call `muninn replay --closed-loop` makes for the same row —
//! and after a new lease the role's ledger is read back through it ([`MindRunner::restore`]). So
//! a restart or a takeover continues the counts where they were, and replaying the ledger
//! re-derives every decision the host took.

use super::prompts::{PERSONA_COMPACT_INSTRUCTIONS, SELF_FLUSH_PROMPT};
use super::session::{Restore, Session};
use super::{MindRunner, RuntimeError};
use crate::config::{MindConfig, RefreshMode};
use crate::telemetry::Answered;
use muninn_backend::{Backend, TurnOutcome};
use muninn_core::cache::CacheRules;
use muninn_core::cache::hash_bytes;
use muninn_core::closed_loop::{EXPIRED, LedgerCache, idle_kind, read_less_of_the_same_prefix};
use muninn_core::decide::{Bounds, Capabilities, Decision, Event, Rates};
use muninn_core::ledger::{Decided, ForcedStart, LedgerRow, MissCause, RowKind, SegmentStart};
use muninn_core::money::Tokens;

/// Tool uses a clear keeps: the provider's default `keep` for `clear_tool_uses_20250919`.
const MASK_KEEP_TOOL_USES: u32 = 3;
use muninn_core::price::ModelPrice;
use muninn_core::render::Renderer;
use muninn_core::session::{Accounting, Params};
use muninn_core::tokenize::count;
use muninn_core::trace::Usage;
use muninn_store::{FencingToken, LedgerQuery, Role};

/// The decision a ledger row records: what the request was, and what the decider was asked
/// and answered (none for a forced start or a retry).
#[derive(Debug, Clone, Copy)]
pub(super) struct Asked<'a> {
    /// What the request was.
    pub(super) kind: RowKind,
    /// The bounds the decider was asked with (the accounting's at the time, when it was not).
    pub(super) bounds: Option<Bounds>,
    /// The question, if the decider was asked one.
    pub(super) event: Option<Event>,
    /// Its answer.
    pub(super) decision: Option<&'a Decision>,
    /// The ledger's `decision` text.
    pub(super) label: &'a str,
    /// `warm` or `cold`, as the decider saw the cache (the row says `expired` instead when the
    /// answer read less of the same prefix than the session's ledger says was cached).
    pub(super) state: &'a str,
    /// Whether the request began a turn.
    pub(super) boundary: bool,
}

/// The cache rules a replay of the ledger prices with (`muninn replay --closed-loop` uses the
/// documented defaults): the host's `expired` mark must be that replay's verdict.
fn replay_rules() -> CacheRules {
    CacheRules::default()
}

/// Ledger rows read per page when a session's accounting is restored.
const RESTORE_PAGE: i64 = 1_000;

/// Tokens a keep-warm ping sends after the cached prefix (the backend's short question and the
/// structured-output acknowledgement): an estimate for pricing pings, not a limit.
const PING_TOKENS: Tokens = 12;

/// What a role's backend can do besides turns: whether it pings at all, the output tokens one
/// ping pays ([`Backend::ping_output_tokens`]), and whether it can clear old tool results
/// ([`Backend::can_clear_tool_results`]).
pub(super) fn pinging<B: Backend>(backend: &B) -> (bool, Tokens, bool) {
    (
        backend.can_ping(),
        backend.ping_output_tokens(),
        backend.can_clear_tool_results(),
    )
}

/// The accounting parameters of a role's session: the Mind's TTLs and bounds, its model's
/// prices, and what the role's backend can do (`(can_ping, ping_output_tokens, can_clear)`).
pub(super) fn session_params(
    mind: &MindConfig,
    price: &ModelPrice,
    role: Role,
    (can_ping, ping_output_tokens, can_clear): (bool, Tokens, bool),
) -> Params {
    let (flush_prompt_tokens, flush_output_tokens) = match role {
        // The Self flushes through a request at each refresh.
        Role::SelfRole => (count(SELF_FLUSH_PROMPT), mind.memory_tokens),
        // A compacting Persona's refresh is a compaction: a request reading the session and
        // writing its summary. Otherwise it writes memory as it happens and a refresh sends
        // nothing first.
        Role::Persona if mind.refresh == RefreshMode::Compact => {
            (count(PERSONA_COMPACT_INSTRUCTIONS), mind.memory_tokens)
        }
        Role::Persona => (0, 0),
    };
    Params {
        ttl: mind.tail_ttl,
        head_ttl: mind.head_ttl,
        rates: Rates::of(price, mind.tail_ttl, mind.head_ttl),
        bounds: Bounds {
            head_tokens: 0,
            rehydrate_tokens: mind.memory_tokens,
            flush_prompt_tokens,
            flush_output_tokens,
            ping_tokens: PING_TOKENS,
            ping_output_tokens,
            min_segment_requests: mind.min_segment,
            ceiling_tokens: mind.ceiling_tokens.unwrap_or(price.context_window),
            context_window: price.context_window,
            mask_keep_tool_uses: MASK_KEEP_TOOL_USES,
        },
        min_cacheable: price.min_cacheable,
        decide_before_expiry_ms: super::DECIDE_BEFORE_EXPIRY_MS,
        can: Capabilities {
            ping: can_ping,
            ping_head: can_ping,
            // Only the Self flushes while idle; a Persona writes memory as it happens, and a
            // compacting one compacts at its next turn, not in the gap.
            idle_flush: role == Role::SelfRole,
            // The backend can clear; whether there is anything to clear, and whether it pays,
            // is the accounting's and the decider's: a Self tool loop's results
            // (`tool_loop.rs`), a Persona's structured-output acknowledgements — each request
            // planned with the tool results it carries, the backend's own included
            // (`Backend::pending_input`), so a clear the decider weighs is the one its ledger
            // row replays.
            mask: can_clear,
        },
        lifetime_ms: None,
    }
}

impl<B: Backend> MindRunner<B> {
    /// The accounting parameters of a role's session.
    pub(super) fn params(&self, role: Role, pinging: (bool, Tokens, bool)) -> Params {
        session_params(&self.mind, &self.price, role, pinging)
    }

    /// The record a segment rendered by `renderer` starts with, estimated from its layers: the
    /// head (the first system layer) and the whole system, as the segment row counts them. The
    /// first request's shape replaces the estimate when the backend reports it (it also counts
    /// the tools the backend adds, such as the reply schema).
    pub(super) fn segment_start(
        &self,
        role: Role,
        renderer: &Renderer,
        forced: Option<ForcedStart>,
    ) -> SegmentStart {
        let system: Vec<String> = renderer
            .rendered()
            .system
            .into_iter()
            .map(|b| b.text)
            .collect();
        // The digests cover what the provider caches before each breakpoint: the reply schema
        // the backend offers as a tool, then the system layers.
        let tools = match role {
            Role::Persona => self.persona_schema.to_string(),
            Role::SelfRole => String::new(),
        };
        let mut content = tools.into_bytes();
        content.extend(system.first().map_or(&[][..], |s| s.as_bytes()));
        let head_digest = hash_bytes(&content);
        for layer in system.iter().skip(1) {
            content.push(0);
            content.extend(layer.as_bytes());
        }
        SegmentStart {
            head: system.first().map_or(0, |s| count(s)),
            rehydration: system.iter().map(|s| count(s)).sum(),
            forced,
            head_digest: Some(head_digest),
            system_digest: Some(hash_bytes(&content)),
        }
    }

    /// What a refresh is expected to bring beyond the head, as measured on the segment
    /// `renderer` starts: the layers after the first (persona state, campaigns) as they are,
    /// and the memory budget in place of the memory this segment happened to select.
    pub(super) fn rehydrate_estimate(&self, renderer: &Renderer) -> Tokens {
        let layers: Tokens = renderer
            .rendered()
            .system
            .iter()
            .skip(1)
            .map(|b| count(&b.text))
            .sum();
        layers.saturating_sub(count(&renderer.base().memory)) + self.mind.memory_tokens
    }

    /// Sets the role's rehydration estimate for the segment `renderer` starts.
    pub(super) fn estimate_rehydration(&mut self, role: Role, renderer: &Renderer) {
        let estimate = self.rehydrate_estimate(renderer);
        let acc = &mut self.session_mut(role).acc;
        let mut params = *acc.params();
        params.bounds.rehydrate_tokens = estimate;
        acc.set_params(params);
    }

    fn decided(
        &self,
        acc: &Accounting,
        asked: &Asked<'_>,
        segment: Option<SegmentStart>,
        lost_at_ms: Option<i64>,
    ) -> Decided {
        let params = acc.params();
        Decided {
            kind: asked.kind,
            event: asked.event,
            action: asked.decision.map(|d| d.action),
            reason: asked.decision.map(|d| d.reason),
            segment,
            lost_at_ms,
            policy: self.policy.to_string(),
            ttl: params.ttl,
            head_ttl: params.head_ttl,
            bounds: asked.bounds.unwrap_or_else(|| acc.bounds()),
            decide_before_expiry_ms: params.decide_before_expiry_ms,
            can: params.can,
            tool_results: Default::default(),
            attempted: None,
        }
    }

    pub(super) fn ledger_row(
        &self,
        session: &Session<B>,
        outcome: &TurnOutcome,
        now: i64,
        decision: &str,
        state: &str,
        boundary: bool,
    ) -> LedgerRow {
        let predicted = outcome.predicted.unwrap_or_default();
        let last = session.acc.last_request_ms();
        LedgerRow {
            mind: self.mind.id.clone(),
            role: session.role.as_str().to_string(),
            segment: session.segment.unwrap_or(0).max(0) as u64,
            turn: session.acc.segment_requests() as u64,
            at_ms: now,
            idle_gap_ms: last.map_or(0, |last| now - last),
            model: self.mind.model.clone(),
            prefix_tokens: outcome.usage.cache_read + outcome.usage.written(),
            rehydration_tokens: 0,
            usage: outcome.usage,
            raw_usage: Some(outcome.raw_usage.clone()),
            cost: self.price.cost(&outcome.usage),
            predicted_read: predicted.cache_read,
            predicted_write: predicted.written(),
            cache_state: state.to_string(),
            miss_cause: outcome.miss,
            decision: decision.to_string(),
            boundary,
            events: (outcome.retries.iter().map(serde_json::to_value))
                .chain(outcome.events.iter().map(serde_json::to_value))
                .filter_map(Result::ok)
                .collect(),
            decided: None,
            provider_miss: outcome.provider_miss,
        }
    }

    /// The ledger rows of a request the role's session answered: the rows of the attempts the
    /// provider billed but did not answer whole that wait for a record (`failed.rs`: those
    /// before this answer, taken from the backend now, and those of earlier failed calls), then
    /// the answer's own ([`MindRunner::counted`]). The record that carries the answer carries
    /// them all, in this order — the order the accounting counted them in.
    pub(super) fn answered(
        &mut self,
        role: Role,
        outcome: &TurnOutcome,
        now: i64,
        asked: Asked<'_>,
    ) -> Vec<LedgerRow> {
        // Attempts before the answer in the same call tried the answer's own request.
        self.ledger_failed_attempts(role, now, (asked.kind, asked.boundary));
        let row = self.counted(role, outcome, now, asked, false);
        let mut rows = std::mem::take(&mut self.session_mut(role).unledgered);
        rows.push(row);
        rows
    }

    /// The ledger row of a request the role's session sent — with its decision record, the
    /// segment it began (if it is the segment's first) and, for an answer, the pending session
    /// events — after which the session's accounting counts it exactly as a replay of the row
    /// will, and the host's telemetry logs and counts it (every row passes here). A failed
    /// attempt at a segment's first request carries the segment too (a replay prices it in that
    /// segment) but leaves it to the answered retry to begin; one `cleared` (sent with a clear
    /// of old tool results) says so with the `mask` action, the decider unasked, so a replay
    /// prices the prompt it wrote as the cleared one.
    pub(super) fn counted(
        &mut self,
        role: Role,
        outcome: &TurnOutcome,
        now: i64,
        asked: Asked<'_>,
        cleared: bool,
    ) -> LedgerRow {
        let failed = asked.kind == RowKind::FailedAttempt;
        let session = self.session(role);
        let mut row = self.ledger_row(
            session,
            outcome,
            now,
            asked.label,
            asked.state,
            asked.boundary,
        );
        let starting = session
            .starting
            .filter(|_| asked.kind == RowKind::Request || failed);
        let start = starting.map(|s| s.measured(&outcome.breakpoints));
        if let Some(start) = &start {
            row.rehydration_tokens = start.rehydration;
            row.turn = 0;
        }
        let mut decided = self.decided(&session.acc, &asked, start, session.lost_at_ms);
        if cleared {
            decided.action = Some(muninn_core::decide::Action::Mask);
        }
        // An idle decision point that came before this row and was never asked (the runner was
        // backing off a failed step, running the other role, braked or capped, and this row is
        // not that point's ping or flush): nobody decided it at its time, so a replay of the
        // row must not either.
        if idle_kind(&decided).is_none()
            && let Some(point) = session.acc.next_decision()
            && point.at_ms < now
        {
            let lost = decided
                .lost_at_ms
                .map_or(point.at_ms, |t| t.min(point.at_ms));
            decided.lost_at_ms = Some(lost);
        }
        if asked.kind == RowKind::Request {
            decided.tool_results = outcome.tool_results;
        }
        let min_cacheable = self.price.min_cacheable;
        let session = self.session_mut(role);
        session.lost_at_ms = None;
        if let (Some(starting), Some(start), false) = (starting, start, failed) {
            session.starting = None;
            // A session just launched is now measured: a compaction continues it under the
            // system it was launched with, so the compacted segment starts from this measure
            // (tools and reply schema included) and not from the layers' estimate, which the
            // provider does not read.
            if !starting.measured {
                session.launched = start;
            }
        }
        // Session events go on the answer's row (a failed attempt's comes before it).
        let events = if failed {
            Vec::new()
        } else {
            session.attach_events(&mut row)
        };
        mark_expired(session, outcome, &mut row, &decided, min_cacheable);
        // A clear drops what it cleared; the turn's tool results join the segment.
        session
            .acc
            .record_decided(&decided, now, &outcome.usage, row.cost);
        row.decided = Some(decided);
        self.host.telemetry.answered(&Answered {
            row: &row,
            latency: self.step_started.elapsed(),
            retries: &outcome.retries,
            session_events: &events,
        });
        row
    }

    /// Rebuilds a role's accounting from its ledger (after a new lease, or an answer abandoned
    /// under the lease held now, `token`): every row of the role through [`Accounting::record`],
    /// under the parameters it was written with, then the current ones. Rows written before
    /// decision records existed count by their decision text.
    ///
    /// What the old accounting counted and no committed record carries: under a new lease it is
    /// given up (`pending.rs`), as no lease can commit it; after an abandoned answer, the cut
    /// rows still waiting under this lease are kept — they are committed before the role's next
    /// record, so they are counted after the ledger's rows, in the order they will join it.
    pub(super) async fn restore(
        &mut self,
        role: Role,
        token: FencingToken,
        why: Restore,
    ) -> Result<(), RuntimeError> {
        let kept = match why {
            Restore::NewLease => {
                // Rows counted by the accounting being replaced, and in no ledger the new one
                // is read from: given up.
                (self.give_up_waiting(role, "the lease changed before a record carried it")).await;
                Vec::new()
            }
            Restore::Abandoned => self.still_to_commit(role, token).await,
        };
        let params = self.params(role, pinging(&self.session(role).backend));
        let (mut acc, cache) = self.read_back(role, params, kept).await?;
        // The current configuration, with the estimate the last segment was measured at.
        let mut current = params;
        current.bounds.rehydrate_tokens = acc.params().bounds.rehydrate_tokens;
        acc.set_params(current);
        let session = self.session_mut(role);
        // No host kept the session since the last row: the next row says so.
        session.lost_at_ms = acc.last_activity_ms();
        session.acc = acc;
        session.ledger_cache = cache;
        // Restored from rows the backend's mirror may never have seen (a new process's starts
        // empty): until the next row, it cannot tell a lost entry from a changed prefix.
        session.mirror_behind = true;
        session.restore = None;
        Ok(())
    }

    /// `role`'s accounting and ledger cache as a replay of its ledger, then of the `kept` rows
    /// that will join it, leaves them (`params`: the accounting's to start with).
    async fn read_back(
        &self,
        role: Role,
        params: Params,
        kept: Vec<LedgerRow>,
    ) -> Result<(Accounting, LedgerCache), RuntimeError> {
        let mut acc = Accounting::new(params);
        // As a replay of the ledger does, the rows before decision records left out.
        let mut cache = LedgerCache::new();
        let mut kept = kept.into_iter().map(Some).collect::<Vec<_>>();
        let mut after = None;
        let mut segment = None;
        loop {
            let page = self
                .host
                .store
                .ledger(&LedgerQuery {
                    mind: Some(self.mind.id.clone()),
                    after_id: after,
                    limit: Some(RESTORE_PAGE),
                    ..LedgerQuery::default()
                })
                .await?;
            let full = page.len() as i64 == RESTORE_PAGE;
            after = page.last().map(|e| e.id).or(after);
            for entry in page.iter().filter(|e| e.row.role == role.as_str()) {
                let row = &entry.row;
                // A kept row whose commit landed unanswered: counted here, once.
                if let Some(landed) = kept.iter_mut().find(|k| k.as_ref() == Some(row)) {
                    *landed = None;
                }
                if let Some(d) = &row.decided {
                    acc.set_params(muninn_core::closed_loop::params_of(d, &self.price));
                    segment = Some(row.segment);
                    acc.record_decided(d, row.at_ms, &row.usage, row.cost);
                    cache.price(row, d, self.price.min_cacheable, &replay_rules());
                    continue;
                }
                // Before decision records: the segment's first row says its size.
                let new = segment != Some(row.segment);
                let start = new.then_some(SegmentStart {
                    head: acc.head_tokens(),
                    rehydration: row.rehydration_tokens.max(acc.head_tokens()),
                    forced: None,
                    head_digest: None,
                    system_digest: None,
                });
                let kind = RowKind::of_decision(&row.decision);
                segment = Some(row.segment);
                if kind == RowKind::Request {
                    acc.arrived(row.boundary);
                }
                acc.record(kind, row.at_ms, &row.usage, row.cost, start.as_ref());
            }
            if !full {
                break;
            }
        }
        // The kept rows, after the ledger's, as a replay of the ledger they join will count them.
        for row in kept.iter().flatten() {
            if let Some(d) = &row.decided {
                acc.set_params(muninn_core::closed_loop::params_of(d, &self.price));
                acc.record_decided(d, row.at_ms, &row.usage, row.cost);
                cache.price(row, d, self.price.min_cacheable, &replay_rules());
            }
        }
        Ok((acc, cache))
    }
}

/// Says what happened, not what the decider believed: prices `row` on the cache the session's
/// ledger implies (and counts it there, as a replay of the row will) and marks the row
/// `expired` when the answer found an entry gone ([`found_expired`]). The usage, which the
/// accounting counts, says so already; the mark lets a replay take the row's usage for its own
/// there (`muninn_core::closed_loop`).
fn mark_expired<B>(
    session: &mut Session<B>,
    outcome: &TurnOutcome,
    row: &mut LedgerRow,
    decided: &Decided,
    min_cacheable: Tokens,
) {
    let priced = session
        .ledger_cache
        .price(row, decided, min_cacheable, &replay_rules());
    let mirror = outcome.predicted.as_ref();
    if found_expired(&row.usage, &priced, mirror, session.mirror_behind) {
        row.cache_state = EXPIRED.to_string();
        row.miss_cause = Some(MissCause::EvictionOrUnknown);
    }
    // The row just answered went through the backend's mirror as well: it is level with the
    // ledger's cache from here on.
    session.mirror_behind = false;
}

/// Whether an answer (`usage`) found the provider's cache lost an entry: it read less of the
/// same prefix than the ledger's cache held (`ledger`, what a replay of the row prices), and the
/// backend's cache mirror, which sees the bytes sent, does not explain the shortfall — it
/// predicted more than was read too (the entry expired on the way, or was evicted early), or it
/// is `behind` the ledger (a new process's mirror starts empty, where the ledger, and a replay
/// of it, still holds what the last host left). A mirror that predicted the short read itself
/// saw a prefix the request changed, which sizes alone cannot show: that is the host's doing,
/// its cause is the mirror's (a tools, system or messages change), and the replay must price
/// the row apart rather than take it as found expired. A backend that predicts nothing (the
/// Claude Code CLI builds its own requests) marks nothing.
fn found_expired(usage: &Usage, ledger: &Usage, mirror: Option<&Usage>, behind: bool) -> bool {
    let Some(mirror) = mirror else {
        return false;
    };
    read_less_of_the_same_prefix(usage, ledger) && (behind || usage.cache_read < mirror.cache_read)
}

#[cfg(test)]
mod tests {
    use super::found_expired;
    use muninn_core::trace::Usage;

    /// A turn whose 10,000-token prefix the ledger's cache holds up to 9,000 tokens.
    fn ledger() -> Usage {
        Usage {
            input: 20,
            cache_read: 9_000,
            cache_write_5m: 1_000,
            output: 50,
            ..Usage::default()
        }
    }

    /// The same prompt, `read` of its prefix read and the rest written.
    fn reading(read: u64) -> Usage {
        Usage {
            cache_read: read,
            cache_write_5m: 10_000 - read,
            ..ledger()
        }
    }

    #[test]
    fn an_answer_that_read_less_than_both_caches_found_the_entry_gone() {
        assert!(found_expired(
            &reading(0),
            &ledger(),
            Some(&ledger()),
            false
        ));
        // After a restart the mirror is empty: it expected nothing, the ledger the entry.
        assert!(found_expired(
            &reading(0),
            &ledger(),
            Some(&reading(0)),
            true
        ));
        assert!(found_expired(
            &reading(2_000),
            &ledger(),
            Some(&reading(0)),
            true
        ));
    }

    #[test]
    fn a_short_read_the_mirror_predicted_is_a_prefix_the_request_changed() {
        // The mirror saw the bytes: the conversation changed after 2,000 tokens, and the
        // provider read exactly that. Nothing was lost; the request is not what the ledger's
        // sizes say, and a replay must show it priced apart.
        assert!(!found_expired(
            &reading(2_000),
            &ledger(),
            Some(&reading(2_000)),
            false
        ));
        assert!(!found_expired(
            &reading(0),
            &ledger(),
            Some(&reading(0)),
            false
        ));
    }

    #[test]
    fn nothing_is_marked_without_a_shortfall_or_a_prediction() {
        assert!(!found_expired(&ledger(), &ledger(), Some(&ledger()), true));
        assert!(!found_expired(&reading(0), &ledger(), None, true));
        // Read less, but of another prefix (the prompt's size differs): not the same request.
        let other = Usage {
            cache_read: 0,
            cache_write_5m: 8_000,
            ..ledger()
        };
        assert!(!found_expired(&other, &ledger(), Some(&ledger()), false));
    }
}
