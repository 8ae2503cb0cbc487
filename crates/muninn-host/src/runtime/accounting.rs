//! What the decider sees of a session, and the ledger rows of its requests.

#[allow(unused_imports)]
use super::*;

impl<B: Backend> MindRunner<B> {
    pub(super) fn bounds(&self) -> Bounds {
        Bounds {
            head_tokens: 0,
            rehydrate_tokens: self.mind.memory_tokens,
            flush_prompt_tokens: 0,
            flush_output_tokens: 0,
            ping_tokens: 12,
            min_segment_requests: self.mind.min_segment,
            ceiling_tokens: self
                .mind
                .ceiling_tokens
                .unwrap_or(self.price.context_window),
            context_window: self.price.context_window,
        }
    }

    /// What the decider sees of a session; its head is the renderer's system prompt.
    pub(super) fn view(&self, session: &Session<B>) -> SessionView {
        let mut bounds = self.bounds();
        bounds.head_tokens = session.renderer.as_ref().map_or(0, |r| {
            r.rendered().system.iter().map(|b| count(&b.text)).sum()
        });
        if session.role == Role::SelfRole {
            // The Self flushes through a request at each refresh.
            bounds.flush_prompt_tokens = count(SELF_FLUSH_PROMPT);
            bounds.flush_output_tokens = self.mind.memory_tokens;
        }
        SessionView {
            prefix_tokens: session.prefix_tokens,
            warm_until_ms: session.warm_until_ms,
            head_ttl: self.mind.head_ttl,
            head_warm_until_ms: session.head_warm_until_ms,
            last_request_ms: session.last_request_ms,
            ttl: self.mind.tail_ttl,
            segment_requests: session.requests,
            read_excess: session.read_excess,
            gap_pings: session.gap_pings,
            gap_ping_spend: session.gap_ping_spend,
            gap_head_ping_spend: session.gap_head_ping_spend,
            flushed: false,
            rates: Rates::of(&self.price, self.mind.tail_ttl, self.mind.head_ttl),
            bounds,
            gaps: session.gaps,
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
        LedgerRow {
            mind: self.mind.id.clone(),
            role: session.role.as_str().to_string(),
            segment: session.segment.unwrap_or(0).max(0) as u64,
            turn: session.requests as u64,
            at_ms: now,
            idle_gap_ms: if session.last_request_ms > 0 {
                now - session.last_request_ms
            } else {
                0
            },
            model: self.mind.model.clone(),
            prefix_tokens: outcome.usage.cache_read + outcome.usage.written(),
            rehydration_tokens: if session.requests == 0 {
                session.rehydration
            } else {
                0
            },
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
        }
    }

    /// The ledger row of a turn the role's session answered (with its pending session events),
    /// after which the session counts the request: its prefix, warmth and gap statistics.
    pub(super) fn answered(
        &mut self,
        role: Role,
        outcome: &TurnOutcome,
        now: i64,
        decision: &str,
        state: &str,
        boundary: bool,
    ) -> LedgerRow {
        let session = match role {
            Role::Persona => &self.persona,
            Role::SelfRole => &self.selfs,
        };
        let mut row = self.ledger_row(session, outcome, now, decision, state, boundary);
        let rates = Rates::of(&self.price, self.mind.tail_ttl, self.mind.head_ttl);
        let (tail, head) = (self.mind.tail_ttl, self.mind.head_ttl);
        let session = self.session_mut(role);
        session.attach_events(&mut row);
        if session.requests > 0 && outcome.usage.cache_read > 0 {
            let excess = outcome.usage.prompt().saturating_sub(session.rehydration);
            session.read_excess += MicroUsd::of(excess, rates.read);
        }
        if session.last_request_ms > 0 {
            session.gaps.observe(now - session.last_request_ms);
        }
        session.requests += 1;
        session.prefix_tokens = outcome.usage.cache_read + outcome.usage.written();
        session.last_request_ms = now;
        session.warm_until_ms = Some(now + tail.millis());
        session.head_warm_until_ms = Some(now + head.millis());
        session.gap_pings = 0;
        session.gap_ping_spend = MicroUsd::ZERO;
        session.let_expire = false;
        session.head_let_expire = false;
        session.gap_head_ping_spend = MicroUsd::ZERO;
        row
    }
}
