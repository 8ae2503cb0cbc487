//! One role's live session: its backend, its renderer and segment, its accounting, and what
//! its provider session is bound over.

use super::pending::Uncommitted;
use super::persona::Plan;
use muninn_backend::{Backend, BackendError, SessionEvent, TurnInput, TurnOutcome};
use muninn_core::closed_loop::LedgerCache;
use muninn_core::ledger::{LedgerRow, SegmentStart};
use muninn_core::render::Renderer;
use muninn_core::session::{Accounting, Params};
use muninn_store::Role;
use std::collections::VecDeque;

/// One role's live session.
pub(super) struct Session<B> {
    pub(super) role: Role,
    pub(super) backend: B,
    pub(super) renderer: Option<Renderer>,
    pub(super) segment: Option<i64>,
    /// Every counter the decider reads: the same type the replay engine drives, fed here by
    /// each ledger row as it is written ([`Accounting::record`]) and, after a new lease, by the
    /// role's ledger read back.
    pub(super) acc: Accounting,
    /// The provider's cache as the role's ledger implies it: the replay's own model of it,
    /// fed the same rows as [`Session::acc`] (as each is written, and the ledger read back
    /// after a new lease). A row that read less of the same prefix than it held found the cache
    /// gone, and says `expired` (`accounting.rs`).
    pub(super) ledger_cache: LedgerCache,
    /// Whether the backend's cache mirror is behind [`Session::ledger_cache`]: set when the
    /// ledger's cache is restored after a new lease (a new process's mirror starts empty),
    /// cleared by the next row. A short read is then judged by the ledger's cache alone.
    pub(super) mirror_behind: bool,
    /// The segment the next ledger row begins, set when a segment opens.
    pub(super) starting: Option<Starting>,
    /// The system the provider session was started (or resumed) with: its size — as the
    /// session's first request measured it, once it has — and digests. A compaction keeps it:
    /// the session continues under the system it was launched with, so a segment opened by
    /// compaction starts from it, the summary following in the conversation.
    pub(super) launched: SegmentStart,
    /// The session must be rebuilt from the transcript (a failed call left it out of step, or a
    /// new lease found it unknown).
    pub(super) broken: bool,
    /// When the session was last known to be kept, if it was lost since (a failed call, or a
    /// new lease: the last row written for it): the next ledger row says so, so a replay of the
    /// ledger takes no idle decision between the two.
    pub(super) lost_at_ms: Option<i64>,
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
    /// Set when the accounting must be rebuilt from the role's ledger before the next decision,
    /// and why: a new lease, or an answer abandoned under the lease still held (`pending.rs`).
    pub(super) restore: Option<Restore>,
    /// Session events (the backend's, and the host's own resume) not yet on a ledger row: at
    /// most `MAX_PENDING_EVENTS`, the oldest and the newest.
    pub(super) pending_events: Vec<SessionEvent>,
    /// Events dropped from between those since the last row, which that row says.
    events_dropped: u64,
    /// Rows of attempts the provider billed without a whole reply (`failed.rs`), counted by
    /// the accounting and not yet in a record: the next record of this role carries them,
    /// before its own rows.
    pub(super) unledgered: Vec<LedgerRow>,
    /// The records this role's accounting counted whose commit has not landed, in the order
    /// it counted them, each under its key (`pending.rs`).
    pub(super) waiting: VecDeque<Uncommitted>,
    /// The Self only: memory a run or an idle flush wrote; the next brief may open a segment
    /// from it.
    pub(super) flushed: Option<Flushed>,
}

/// Session events waiting for a ledger row that a session keeps at most (see
/// `Session::collect_events`).
pub(super) const MAX_PENDING_EVENTS: usize = 64;

/// Why a role's accounting is rebuilt from its ledger (`accounting.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restore {
    /// A new lease: what the role counted under the old one and no record carried is given up
    /// (no lease can commit it any more).
    NewLease,
    /// An answer was abandoned under the lease still held: the ledger lacks it, but the cut
    /// rows still waiting were counted under this lease, which can still commit them, and are
    /// kept.
    Abandoned,
}

/// A segment opened and not yet on a ledger row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Starting {
    /// The record's head and rehydration as estimated from the spec; the first request's shape,
    /// when the backend reports it, replaces them ([`Starting::measured`]).
    pub(super) start: SegmentStart,
    /// Whether the head and rehydration are the backend's own measure rather than estimates.
    pub(super) measured: bool,
}

impl Starting {
    /// The segment's record, measured by the breakpoints of its first request when the backend
    /// reports them (the head's end and the whole system's end, before the conversation's).
    pub(super) fn measured(self, breakpoints: &[u64]) -> SegmentStart {
        let mut start = self.start;
        if !self.measured
            && let [head, system, _, ..] = breakpoints
        {
            start.head = *head;
            start.rehydration = *system;
        }
        start
    }
}

/// Memory a Self flush wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Flushed {
    /// The memory.
    pub(super) memory: String,
    /// The flush protocol ended the run: the next brief must start from it. Otherwise the
    /// decider flushed while idle and decides at the next brief whether to use it.
    pub(super) forced: bool,
}

impl<B: Backend> Session<B> {
    /// Sends one turn as the decider planned it: through [`Backend::turn_cleared`] (keeping the
    /// latest uses the accounting keeps) when it masked, else as a plain turn.
    pub(super) async fn send(
        &mut self,
        plan: &Plan,
        input: TurnInput,
    ) -> Result<TurnOutcome, BackendError> {
        if plan.masks() {
            let keep = self.acc.params().bounds.mask_keep_tool_uses;
            self.backend.turn_cleared(input, keep).await
        } else {
            self.backend.turn(input).await
        }
    }
}

impl<B> Session<B> {
    pub(super) fn new(role: Role, params: Params, backend: B) -> Session<B> {
        Session {
            role,
            backend,
            renderer: None,
            segment: None,
            acc: Accounting::new(params),
            ledger_cache: LedgerCache::new(),
            mirror_behind: false,
            starting: None,
            launched: SegmentStart {
                head: 0,
                rehydration: 0,
                forced: None,
                head_digest: None,
                system_digest: None,
            },
            broken: false,
            lost_at_ms: None,
            bind_from: 1,
            bound: None,
            resume: None,
            restore: None,
            pending_events: Vec::new(),
            events_dropped: 0,
            unledgered: Vec::new(),
            waiting: VecDeque::new(),
            flushed: None,
        }
    }

    /// Starts a new segment on `renderer`; its first ledger row will carry `start`.
    pub(super) fn begin_segment(&mut self, renderer: Renderer, number: i64, start: Starting) {
        self.renderer = Some(renderer);
        self.segment = Some(number);
        self.starting = Some(start);
        self.broken = false;
    }

    /// The session is out of step with the transcript from `now_ms` on; the next turn rebuilds
    /// it.
    pub(super) fn mark_broken(&mut self, now_ms: i64) {
        self.broken = true;
        self.lost_at_ms.get_or_insert(now_ms);
    }

    /// Whether the session can be asked anything now (not broken, a segment open).
    pub(super) fn live(&self) -> bool {
        !self.broken && self.renderer.is_some()
    }

    /// Moves the backend's session events into [`Session::pending_events`] (after a call that
    /// leaves no ledger row, e.g. a failed one).
    pub(super) fn collect_events(&mut self)
    where
        B: Backend,
    {
        let events = self.backend.take_session_events();
        self.pending_events.extend(events);
        // A backend that fails every attempt for hours may report an event with each (a Claude
        // Code child relaunched after every death): one per retry, all waiting for the next
        // row, which would carry thousands. The first say how the outage began, the newest
        // what the answer ran on; the row says how many went between.
        let over = self.pending_events.len().saturating_sub(MAX_PENDING_EVENTS);
        if over > 0 {
            let half = MAX_PENDING_EVENTS / 2;
            self.pending_events.drain(half..half + over);
            // Said once between two rows, not at every retry.
            if self.events_dropped == 0 {
                tracing::warn!(
                    role = self.role.as_str(),
                    "session events pile up waiting for a ledger row; only the oldest and the newest are kept"
                );
            }
            self.events_dropped += over as u64;
        }
    }

    /// Puts every pending session event on `row` (the row of the call that just returned), and
    /// returns them.
    pub(super) fn attach_events(&mut self, row: &mut LedgerRow) -> Vec<SessionEvent>
    where
        B: Backend,
    {
        self.collect_events();
        let events = std::mem::take(&mut self.pending_events);
        // A `SessionEvent` is plain data: serialising it cannot fail.
        row.events
            .extend(events.iter().filter_map(|e| serde_json::to_value(e).ok()));
        if self.events_dropped > 0 {
            let dropped = std::mem::take(&mut self.events_dropped);
            row.events
                .push(serde_json::json!({ "session_events_dropped": dropped }));
        }
        events
    }
}

/// A segment's transcript as read for a session binding.
pub(super) struct Bound {
    pub(super) segment: i64,
    /// Each item's binding bytes, oldest first.
    pub(super) items: Vec<Vec<u8>>,
    /// Where the next read starts: after the last item read (of any segment).
    pub(super) next: i64,
}
