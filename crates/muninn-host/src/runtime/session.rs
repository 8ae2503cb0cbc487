//! One role's live session: its backend, renderer, segment and counters.

#[allow(unused_imports)]
use super::*;

/// One role's live session.
pub(super) struct Session<B> {
    pub(super) role: Role,
    pub(super) backend: B,
    pub(super) renderer: Option<Renderer>,
    pub(super) segment: Option<i64>,
    /// Requests sent in the current segment.
    pub(super) requests: u32,
    /// Tokens of the cached prefix after the last request.
    pub(super) prefix_tokens: Tokens,
    /// Tokens the segment was rehydrated with (reported on its first ledger row).
    pub(super) rehydration: Tokens,
    /// Tokens of the system prompt the provider session was started (or resumed) with. A
    /// compaction keeps it: the session continues under the system it was launched with, so a
    /// segment opened by compaction is rehydrated with it and the summary.
    pub(super) launched_system: Tokens,
    pub(super) last_request_ms: i64,
    pub(super) warm_until_ms: Option<i64>,
    pub(super) head_warm_until_ms: Option<i64>,
    pub(super) read_excess: MicroUsd,
    pub(super) gap_pings: u32,
    pub(super) gap_ping_spend: MicroUsd,
    /// The decider was asked about this gap's expiry and let it go.
    pub(super) let_expire: bool,
    /// The same for the head, once the tail was let go.
    pub(super) head_let_expire: bool,
    /// What head-only pings cost in this gap.
    pub(super) gap_head_ping_spend: MicroUsd,
    pub(super) gaps: GapStats,
    /// The session must be rebuilt from the transcript (a failed call left it out of step).
    pub(super) broken: bool,
    /// Where reading this role's transcript for the current segment starts: no later than the
    /// segment's first item, so binding a session never rescans earlier segments twice.
    pub(super) bind_from: i64,
    /// The transcript the session handle was last bound over, so the binding after the next
    /// turn reads only the items that turn added (not the whole segment again).
    pub(super) bound: Option<Bound>,
    /// Set when a new lease was taken: the role's open segment may be resumed through its stored
    /// handle, forking the provider session when the value is `true` (another writer may
    /// exist). Taken by the next turn.
    pub(super) resume: Option<bool>,
    /// Session events (the backend's, and the host's own resume) not yet on a ledger row.
    pub(super) pending_events: Vec<SessionEvent>,
    /// The Self only: memory a run flushed under the flush protocol; the next brief opens a new
    /// segment from it.
    pub(super) flushed_memory: Option<String>,
}

impl<B> Session<B> {
    pub(super) fn new(role: Role, backend: B) -> Session<B> {
        Session {
            role,
            backend,
            renderer: None,
            segment: None,
            requests: 0,
            prefix_tokens: 0,
            rehydration: 0,
            launched_system: 0,
            last_request_ms: 0,
            warm_until_ms: None,
            head_warm_until_ms: None,
            read_excess: MicroUsd::ZERO,
            gap_pings: 0,
            gap_ping_spend: MicroUsd::ZERO,
            let_expire: false,
            head_let_expire: false,
            gap_head_ping_spend: MicroUsd::ZERO,
            gaps: GapStats::default(),
            broken: false,
            bind_from: 1,
            bound: None,
            resume: None,
            pending_events: Vec::new(),
            flushed_memory: None,
        }
    }

    /// Starts counting a new segment on `renderer`: its number, no requests yet, and the tokens
    /// it was rehydrated with.
    pub(super) fn begin_segment(&mut self, renderer: Renderer, number: i64, rehydration: Tokens) {
        self.renderer = Some(renderer);
        self.segment = Some(number);
        self.requests = 0;
        self.read_excess = MicroUsd::ZERO;
        self.rehydration = rehydration;
    }

    /// Moves the backend's session events into [`Session::pending_events`] (after a call that
    /// leaves no ledger row, e.g. a failed one).
    pub(super) fn collect_events(&mut self)
    where
        B: Backend,
    {
        let events = self.backend.take_session_events();
        self.pending_events.extend(events);
    }

    /// Puts every pending session event on `row` (the row of the call that just returned).
    pub(super) fn attach_events(&mut self, row: &mut LedgerRow)
    where
        B: Backend,
    {
        self.collect_events();
        // A `SessionEvent` is plain data: serialising it cannot fail.
        let events = self.pending_events.drain(..);
        row.events
            .extend(events.filter_map(|e| serde_json::to_value(e).ok()));
    }
}

/// A segment's transcript as read for a session binding.
pub(super) struct Bound {
    pub(super) segment: i64,
    /// Each item's [`binding_bytes`], oldest first.
    pub(super) items: Vec<Vec<u8>>,
    /// Where the next read starts: after the last item read (of any segment).
    pub(super) next: i64,
}

impl<B: Backend> MindRunner<B> {
    pub(super) fn session_mut(&mut self, role: Role) -> &mut Session<B> {
        match role {
            Role::Persona => &mut self.persona,
            Role::SelfRole => &mut self.selfs,
        }
    }
}
