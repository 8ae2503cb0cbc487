//! Records the provider billed whose commit has not landed: one queue per role, in the order
//! the role's accounting counted them, each committed under its own turn key.
//!
//! The session's accounting counts a request as it is answered (`accounting.rs`), before the
//! record that carries its ledger row is committed. Every such record goes through its role's
//! queue: an answer (a Persona turn, a ping's or a compaction's row, a Self flush, a Self run's
//! end, a tool-loop request), or the rows of attempts the provider billed but cut, committed on
//! their own (`failed.rs`, [`Then::CutRows`]). The queue is committed front to back, so the
//! ledger gets every row in the order it was counted — a cut attempt's row before its retry's
//! answer — and `muninn replay` of the ledger takes the host's decisions.
//!
//! A commit that fails (a full disk, a busy SQLite file, a PostgreSQL server gone) rolls
//! nothing back and asks for nothing again — the money was spent and the provider's session
//! holds the exchange: the record stays first in line with what is behind it, and the spend cap
//! counts the waiting rows (`budget.rs`). A waiting *answer* holds the Mind up: the step fails
//! as a store failure ([`RuntimeError::Held`], retried on the backoff of `retry.rs`), and the
//! next step commits it first, does what the commit was waiting for (its [`Then`]: bind the
//! session, report a Self run back, open the compacted segment, …) and only then goes on. Cut
//! rows alone hold nothing up: they are tried again as a failed step ends, at every step's
//! start (before the spend cap is read: one whose commit landed unanswered is in the ledger
//! already) and before the role's next record.
//!
//! A commit tried again after its acknowledgement was lost writes nothing twice: the key is the
//! same ([`StoreError::TurnAlreadyRecorded`] counts as committed). A record is committed only
//! under the lease it was counted under. After a takeover, at a clean shutdown the store still
//! refuses, or at a refusal no retry changes, it is given up loudly with its cost, which the
//! spend cap keeps — unless the ledger holds it (its commit landed, the acknowledgement lost):
//! it is looked up first, and then neither said lost nor counted again. An answer is abandoned
//! and the role's accounting rebuilt from the ledger (a Persona batch left unacknowledged is
//! answered again by whoever holds the Mind) — the cut rows still waiting under the same lease
//! kept, counted after the ledger's rows and committed before the role's next record
//! (`MindRunner::still_to_commit`); cut rows are given up at once when refused for
//! good rather than kept first in line, where every later answer of the role would be refused
//! behind them.
//!
//! # Order of operations
//!
//! [`MindRunner::settle`] puts an answer at the back of its role's queue and settles the queue:
//! `commit_next` commits from the front (reading a Self memory from the segment's tail first
//! when the record waits for one, [`TailMemory`]) up to the first answer, which `follow_up`
//! completes. The step's first act ([`MindRunner::settle_waiting`]) settles both queues the
//! same way; a clean shutdown does it a last time ([`MindRunner::settle_before_release`]) and
//! gives up, loudly, what is left.

use super::session::{Flushed, Restore};
use super::tool_loop::{Driven, StopCause, Stopped};
use super::{MindRunner, RuntimeError, Step};
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, FlushStage, TurnOutcome};
use muninn_core::cache::hash_bytes;
use muninn_core::ledger::LedgerRow;
use muninn_core::session::Keep;
use muninn_store::{Brief, FencingToken, Role, StoreError, TranscriptKind, TurnRecord};
use serde_json::Value;

/// The roles, in the order their queues are settled.
pub(super) const ROLES: [Role; 2] = [Role::Persona, Role::SelfRole];

/// A record the provider billed, waiting in its role's queue to be committed, and what its
/// commit is waiting for.
#[derive(Debug)]
pub(super) struct Uncommitted {
    /// The lease it was answered under: only that lease commits it.
    token: FencingToken,
    /// The session that answered it.
    role: Role,
    /// What to commit, under a turn key.
    record: TurnRecord,
    /// Whether the record is committed (what follows it failed).
    committed: bool,
    /// The ack position the commit moved to, when it did.
    acked: Option<i64>,
    /// When it was answered.
    at_ms: i64,
    /// What follows the commit.
    then: Then,
    /// A memory still to read from the store, just before the commit.
    tail: Option<TailMemory>,
}

/// A Self memory made of its segment's tail (a flush whose answer missed a pinned item, or
/// failed), read from the store just before the record is committed: a read that fails holds
/// the answer as a refused commit does, where reading it first would lose the answer.
#[derive(Debug)]
pub(super) struct TailMemory {
    /// The segment whose tail it is.
    pub(super) segment: i64,
    /// What follows the tail (a run's result), if anything.
    pub(super) after: Option<String>,
}

impl TailMemory {
    /// The memory, from the tail read.
    fn memory(&self, mut tail: String) -> String {
        if let Some(after) = &self.after {
            if !tail.is_empty() {
                tail.push('\n');
            }
            tail.push_str(after);
        }
        tail
    }
}

/// What follows a record's commit.
#[derive(Debug)]
pub(super) enum Then {
    /// A Persona turn: bind the session, wake the outbox (and the Self for a brief).
    PersonaTurn {
        /// The batch's last seq.
        max_seq: i64,
        /// Whether the reply was valid.
        valid: bool,
    },
    /// A keep-warm ping's row: nothing more.
    Ping,
    /// Rows of attempts the provider billed but cut, committed on their own (`failed.rs`):
    /// nothing more, and nothing waits for them.
    CutRows,
    /// A Self flush: its memory is where the next segment may start; an idle one lets the tail go.
    SelfFlush {
        /// The memory written.
        memory: String,
        /// Whether the decider flushed while idle (else at a task boundary).
        idle: bool,
    },
    /// A Persona compaction's row: open the segment it summarised into.
    Compacted {
        /// The summary.
        summary: String,
    },
    /// A Self run's end: finish the brief and report it back.
    SelfRun(Box<SelfRun>),
    /// One request of a tool loop: on a later step the loop cannot go on (its state was the
    /// failed step's), so the run stops there, its brief failed and reported as stopped by the
    /// store, and its record lists the reply without the tool results (never sent).
    ToolRequest(Box<ToolRequest>),
}

/// A Self run's end, as recorded.
#[derive(Debug)]
pub(super) struct SelfRun {
    pub(super) brief: Brief,
    pub(super) flush: FlushStage,
    /// What ended the run before its answer, if anything did.
    pub(super) stopped: Option<StopCause>,
    pub(super) result: String,
    /// The memory the flush protocol left, when it ended the run.
    pub(super) memory: Option<String>,
}

/// A tool-loop request, as recorded.
#[derive(Debug)]
pub(super) struct ToolRequest {
    pub(super) brief: Brief,
    pub(super) plan: super::persona::Plan,
    pub(super) segment: i64,
    pub(super) outcome: TurnOutcome,
    /// Where the run stood.
    pub(super) at: Stopped,
}

impl Uncommitted {
    /// `record`, answered by `role`'s session at `at_ms` under `token`; a record without a turn
    /// key gets one made from its rows and items, so trying it again writes nothing twice.
    pub(super) fn new(
        token: FencingToken,
        role: Role,
        mut record: TurnRecord,
        at_ms: i64,
        then: Then,
    ) -> Uncommitted {
        if record.turn_key.is_none() {
            record.turn_key = Some(content_key(role, at_ms, &record));
        }
        Uncommitted {
            token,
            role,
            record,
            committed: false,
            acked: None,
            at_ms,
            then,
            tail: None,
        }
    }

    /// A record of ledger rows alone (a ping, a compaction).
    pub(super) fn rows(
        token: FencingToken,
        role: Role,
        rows: Vec<LedgerRow>,
        at_ms: i64,
        then: Then,
    ) -> Uncommitted {
        let record = TurnRecord {
            ledger: rows,
            ..TurnRecord::default()
        };
        Uncommitted::new(token, role, record, at_ms, then)
    }

    /// With its memory read from the segment's tail at the commit (see [`TailMemory`]).
    pub(super) fn with_tail(mut self, tail: Option<TailMemory>) -> Uncommitted {
        self.tail = tail;
        self
    }

    /// Puts `memory` where the record and what follows it carry it.
    fn fill_memory(&mut self, memory: String) {
        for item in &mut self.record.transcript {
            if item.kind == TranscriptKind::MemoryFlush {
                item.body["memory"] = Value::String(memory.clone());
            }
        }
        match &mut self.then {
            Then::SelfFlush { memory: m, .. } => *m = memory,
            Then::SelfRun(run) => run.memory = Some(memory),
            _ => {}
        }
    }

    /// The key it is committed under.
    fn turn_key(&self) -> &str {
        self.record.turn_key.as_deref().unwrap_or_default()
    }

    /// Whether it is an answer, which the Mind waits for (not cut rows alone).
    fn is_answer(&self) -> bool {
        !matches!(self.then, Then::CutRows)
    }
}

/// A tool loop's request that landed though its commit was given up (the store's answer lost,
/// then the lease changed): its brief, and the result the recovery under the next lease fails
/// it with — the run stopped there, its last answer saved, its tool results never sent.
fn landed_request(req: &ToolRequest) -> (i64, String) {
    let result = format!(
        "stopped: the store failed to answer the commit of its request {}; the request and its \
         answer were saved, but the Mind's lease changed before the run could go on (its tool \
         results were never sent). Last reply: {}",
        req.at.request,
        super::persona::outcome_text(&req.outcome)
    );
    (req.brief.seq, result)
}

/// A turn key made from what `record` holds (its rows and items), answered by `role` at
/// `at_ms`: the same record tried again gets the same key, so its second commit writes nothing.
fn content_key(role: Role, at_ms: i64, record: &TurnRecord) -> String {
    let bodies: Vec<_> = record.transcript.iter().map(|i| &i.body).collect();
    let bytes = serde_json::to_vec(&(&record.ledger, bodies)).unwrap_or_default();
    format!("{}-{at_ms}-{:016x}", role.as_str(), hash_bytes(&bytes))
}

impl<B: Backend> MindRunner<B> {
    /// The step's first act: both roles' queues settled (see the module docs). Returns the
    /// step a waiting answer completes, if it completes one; fails when an answer still waits
    /// (no decision is taken on an accounting that counts a row the ledger lacks) or a commit
    /// met the fence. Cut rows that still wait are counted by the spend cap and tried again
    /// later.
    pub(super) async fn settle_waiting(
        &mut self,
        token: FencingToken,
    ) -> Result<Option<Step>, RuntimeError> {
        for role in ROLES {
            // One counted under another lease is given up without failing the step.
            let answer =
                (self.session(role).waiting.iter()).any(|u| u.is_answer() && u.token == token);
            if answer {
                self.working = Some(role);
            }
            match self.settle_queue(role, token).await {
                Ok(Some(step)) => {
                    if matches!(step, Step::PersonaTurn { .. }) {
                        self.wake.turn_taken();
                    }
                    return Ok(Some(step));
                }
                Ok(None) => {}
                // A write the fence refused: the step fails with it, so the runner lets the
                // lease go at once (`lease.rs`) rather than go on as the leader under a stale
                // token until its copy of the lease runs out.
                Err(e @ RuntimeError::Store(StoreError::Fenced { .. })) => return Err(e),
                Err(e) if answer => return Err(e),
                Err(e) => tracing::warn!(
                    mind = %self.mind.id,
                    role = role.as_str(),
                    error = %e,
                    "cut attempts' rows still not committed; they wait for the role's next record"
                ),
            }
        }
        Ok(None)
    }

    /// `u` committed after what waits before it in its role's queue, then what follows its
    /// commit done: the step it completes, if any. When either fails, `u` waits (marked
    /// committed if it is) or is given up when no retry can help; the error is the step's.
    pub(super) async fn settle(&mut self, u: Uncommitted) -> Result<Option<Step>, RuntimeError> {
        let (role, token) = (u.role, u.token);
        self.session_mut(role).waiting.push_back(u);
        self.settle_queue(role, token).await
    }

    /// `u` committed after what waits before it, and no more: the caller goes on from it in the
    /// same step (a tool loop's next request). On failure it waits as any answer does.
    pub(super) async fn commit_or_hold(&mut self, u: Uncommitted) -> Result<(), RuntimeError> {
        let (role, token) = (u.role, u.token);
        self.session_mut(role).waiting.push_back(u);
        self.commit_next(role, token).await.map(drop)
    }

    /// `role`'s queue committed under `token` from the front, each answer followed up in turn:
    /// the step the first to complete one completes.
    pub(super) async fn settle_queue(
        &mut self,
        role: Role,
        token: FencingToken,
    ) -> Result<Option<Step>, RuntimeError> {
        let mut step = None;
        while let Some(u) = self.commit_next(role, token).await? {
            match self.follow_up(&u).await {
                Ok(done) => step = step.or(done),
                Err(e) => return Err(self.follow_up_failed(u, e)),
            }
        }
        Ok(step)
    }

    /// Commits `role`'s queue under `token` from the front up to its first answer, which is
    /// taken out for what follows its commit (`None`: the queue is empty). A record counted
    /// under another lease is given up; a refused one waits, first in line, unless no retry
    /// can help ([`Self::refused`]).
    async fn commit_next(
        &mut self,
        role: Role,
        token: FencingToken,
    ) -> Result<Option<Uncommitted>, RuntimeError> {
        while let Some(mut u) = self.session_mut(role).waiting.pop_front() {
            if u.token != token {
                self.give_up(u, "the Mind's lease changed before it was committed")
                    .await;
                continue;
            }
            match self.commit(&mut u).await {
                Ok(()) if u.is_answer() => return Ok(Some(u)),
                Ok(()) => {}
                // Another host took the Mind over: this answer can never be committed. An
                // earlier try whose acknowledgement was lost may have landed (the fence is
                // checked before the key), so it is looked up before it is said lost and its
                // cost counted again as abandoned money.
                Err(RuntimeError::Store(e @ StoreError::Fenced { .. })) if u.is_answer() => {
                    self.give_up(u, &format!("store: {e}")).await;
                    return Err(e.into());
                }
                Err(e) => self.refused(u, e)?,
            }
        }
        Ok(None)
    }

    /// Commits `u`'s record under its key (one committed before counts), after reading its
    /// tail memory if it has one. A no-op once it is committed.
    async fn commit(&mut self, u: &mut Uncommitted) -> Result<(), RuntimeError> {
        if u.committed {
            return Ok(());
        }
        if let Some(tail) = &u.tail {
            let read = self.self_tail(tail.segment).await?;
            let memory = tail.memory(read);
            u.tail = None;
            u.fill_memory(memory);
        }
        let store = &self.host.store;
        match store.record_turn(&self.mind.id, u.token, &u.record).await {
            Ok(receipt) => u.acked = Some(receipt.ack_position),
            Err(StoreError::TurnAlreadyRecorded { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        u.committed = true;
        Ok(())
    }

    /// `u`'s commit failed with `error`. An answer no retry can help is abandoned; cut rows
    /// the store refuses for good are given up and the queue goes on (`Ok`): first in line,
    /// they had every later record of the role refused behind them. Anything else waits, first
    /// in line — cut rows meeting the fence too: the next lease gives them up after looking
    /// them up in the ledger. The step's error is [`RuntimeError::Held`] while an answer waits
    /// uncommitted for a store that may get over it, so status and the log say so.
    fn refused(&mut self, u: Uncommitted, error: RuntimeError) -> Result<(), RuntimeError> {
        let (retryable, fenced) = match &error {
            RuntimeError::Store(e) => (e.is_retryable(), matches!(e, StoreError::Fenced { .. })),
            _ => (false, false),
        };
        if !retryable && u.is_answer() {
            self.abandon(u, &error.to_string());
            return Err(error);
        }
        if !retryable && !fenced {
            let why = format!("the store refused it for good: {error}");
            self.give_up_rows(u.role, u.record.ledger, &why);
            return Ok(());
        }
        let role = u.role;
        let queue = &mut self.session_mut(role).waiting;
        queue.push_front(u);
        let answer = queue.iter().find(|u| u.is_answer() && !u.committed);
        let turn_key = answer.map(|u| u.turn_key().to_string());
        let held = retryable && turn_key.is_some();
        // Cut rows alone are said by whoever tried them (`failed.rs`): they hold nothing up.
        if let Some(turn_key) = &turn_key {
            tracing::warn!(
                mind = %self.mind.id,
                role = role.as_str(),
                %turn_key,
                error = %error,
                "an answer is held uncommitted; it is committed first at the next step"
            );
        }
        Err(match error {
            RuntimeError::Store(e) if held => RuntimeError::Held(e),
            error => error,
        })
    }

    /// What followed `u`'s commit failed with `error`: `u` waits, marked committed, for a store
    /// that may get over it, else only what followed is given up. Returns the step's error.
    fn follow_up_failed(&mut self, u: Uncommitted, error: RuntimeError) -> RuntimeError {
        // What follows a tool request ends the run, which settles a record of its own: when
        // that one waits, it carries the rest of the work, and `u` is let go.
        if self
            .session(u.role)
            .waiting
            .iter()
            .any(Uncommitted::is_answer)
        {
            return error;
        }
        match error {
            RuntimeError::Store(e) | RuntimeError::Held(e) if e.is_retryable() => {
                tracing::warn!(
                    mind = %self.mind.id,
                    role = u.role.as_str(),
                    turn_key = u.turn_key(),
                    error = %e,
                    "what follows a committed answer failed; it is done first at the next step"
                );
                self.session_mut(u.role).waiting.push_front(u);
                RuntimeError::Store(e)
            }
            error => {
                self.abandon(u, &error.to_string());
                error
            }
        }
    }

    /// The answer waiting uncommitted in `role`'s queue, to change what it lists before it is
    /// committed.
    pub(super) fn held_record_mut(&mut self, role: Role) -> Option<&mut TurnRecord> {
        let waiting = self.session_mut(role).waiting.iter_mut();
        waiting
            .filter(|u| u.is_answer() && !u.committed)
            .map(|u| &mut u.record)
            .next_back()
    }

    /// Whether an answer waits in either role's queue: it goes first, so cut rows taken
    /// meanwhile wait behind it rather than be committed before it.
    pub(super) fn answer_waiting(&self) -> bool {
        ROLES
            .iter()
            .any(|r| self.session(*r).waiting.iter().any(Uncommitted::is_answer))
    }

    /// What the spend cap counts beside the ledger, in `[from_ms, ∞)`: the rows the provider
    /// billed that wait uncommitted in the queues, or for a record to carry them (`failed.rs`).
    pub(super) fn waiting_spend(&self, from_ms: i64) -> i64 {
        let rows = ROLES.iter().map(|r| self.session(*r)).flat_map(|s| {
            let queued = s.waiting.iter().filter(|u| !u.committed);
            let queued = queued.flat_map(|u| &u.record.ledger);
            s.unledgered.iter().chain(queued)
        });
        rows.filter(|row| row.at_ms >= from_ms)
            .map(|row| row.cost.0)
            .sum()
    }

    /// Before a clean shutdown lets the lease go: each role's queue settled a last time under
    /// the lease still held, with the cut rows no record took as a record of their own; what
    /// the store refuses (or what no lease can commit) is given up loudly, each role's on its
    /// own, so one role's refusal gives up nothing of the other's unsaid. Released with an
    /// answer uncommitted, the next holder would ask the provider again.
    pub(super) async fn settle_before_release(&mut self) {
        let token = self.lease.as_ref().map(|l| l.token);
        let now = self.host.clock.now_ms();
        for role in ROLES {
            let Some(token) = token else {
                let why = "the Mind's lease was lost before it was committed";
                self.give_up_waiting(role, why).await;
                continue;
            };
            self.key_unledgered(role, token, now);
            let answer = (self.session(role).waiting.iter())
                .find(|u| u.is_answer() && u.token == token)
                .map(|u| u.turn_key().to_string());
            match self.settle_queue(role, token).await {
                Ok(_) => {
                    if let Some(turn_key) = answer {
                        tracing::info!(
                            mind = %self.mind.id,
                            %turn_key,
                            "a held answer was committed before the lease was released"
                        );
                    }
                }
                Err(e) => {
                    let why = format!(
                        "the store refused it at shutdown, before the lease was released: {e}"
                    );
                    self.give_up_waiting(role, &why).await;
                }
            }
        }
    }

    /// Gives up everything that waits for `role`, loudly (the role's accounting is about to be
    /// rebuilt from the ledger, which does not hold it, or a clean shutdown could not commit
    /// it): the spend cap keeps its cost.
    pub(super) async fn give_up_waiting(&mut self, role: Role, why: &str) {
        while let Some(u) = self.session_mut(role).waiting.pop_front() {
            self.give_up(u, why).await;
        }
        let untried = std::mem::take(&mut self.session_mut(role).unledgered);
        self.give_up_rows(role, untried, why);
    }

    /// After an answer was abandoned under `token`, the lease still held: the rows that wait for
    /// `role` under it — cut rows in its queue, and those no record took yet — are kept, to be
    /// committed before the role's next record, and returned (in that order) for the rebuilt
    /// accounting to count after the ledger's. Giving them up would lose rows this lease can
    /// still commit, and say the lease changed when it did not.
    pub(super) async fn still_to_commit(
        &mut self,
        role: Role,
        token: FencingToken,
    ) -> Vec<LedgerRow> {
        let waiting = std::mem::take(&mut self.session_mut(role).waiting);
        let mut kept = std::collections::VecDeque::with_capacity(waiting.len());
        let mut rows = Vec::new();
        for u in waiting {
            if u.token != token {
                (self.give_up(u, "the Mind's lease changed before it was committed")).await;
                continue;
            }
            if !u.committed {
                rows.extend(u.record.ledger.iter().cloned());
            }
            kept.push_back(u);
        }
        let session = self.session_mut(role);
        session.waiting = kept;
        rows.extend(session.unledgered.iter().cloned());
        rows
    }

    /// Gives `u` up, after looking its rows up in the ledger: a commit whose acknowledgement was
    /// lost may have landed, and what the ledger holds is neither lost nor to be counted again by
    /// the spend cap as abandoned money. An answer is abandoned (only what follows its commit,
    /// when it landed); cut rows are given up.
    async fn give_up(&mut self, mut u: Uncommitted, why: &str) {
        let rows = std::mem::take(&mut u.record.ledger);
        let tried = !u.committed && !rows.is_empty();
        let lost = match tried {
            true => self.not_in_ledger(u.role, rows).await,
            false => rows,
        };
        if u.is_answer() {
            // A record commits whole: none of its rows lost, it landed.
            u.committed |= tried && lost.is_empty();
            // A run's end with no row (its last reply's went with that reply) has none to look
            // up, and a ledger read that failed said nothing: its result item says whether it
            // landed (with its rows, if any: a record commits whole).
            u.committed |= !u.committed && self.run_end_landed(&u).await;
            u.record.ledger = if u.committed { Vec::new() } else { lost };
            // A tool loop's request that landed: what stopped its run is known here, and only
            // here; the recovery under the next lease reports it (`stranded.rs`).
            if u.committed
                && let Then::ToolRequest(req) = &u.then
            {
                self.request_landed = Some(landed_request(req));
            }
            self.abandon(u, why);
        } else {
            self.give_up_rows(u.role, lost, why);
        }
    }

    /// Whether `u` is a Self run's end whose result item is in the store (its commit landed, the
    /// answer lost): only brief `seq`'s run writes one, and a brief sent is never run again
    /// (`stranded.rs`), so no other run's end can pass for this one. A read that fails says no:
    /// the answer is said abandoned, as before the read.
    async fn run_end_landed(&self, u: &Uncommitted) -> bool {
        let Then::SelfRun(run) = &u.then else {
            return false;
        };
        match self.committed_end(run.brief.seq).await {
            Ok(end) => end.is_some(),
            Err(e) => {
                tracing::warn!(mind = %self.mind.id, error = %e, "the Self transcript could not be read to tell whether a run's end landed");
                false
            }
        }
    }

    /// Abandons the answer `u` (see the module docs): said loudly, and the role's accounting and
    /// session rebuilt from what the store holds.
    pub(super) fn abandon(&mut self, u: Uncommitted, why: &str) {
        // A committed record is in the ledger: only what followed its commit is given up.
        let what = if u.committed {
            "what followed a committed answer was abandoned"
        } else {
            "an answer was abandoned uncommitted"
        };
        tracing::error!(
            mind = %self.mind.id,
            role = u.role.as_str(),
            turn_key = u.turn_key(),
            rows = u.record.ledger.len(),
            cost_micro_usd = u.record.ledger.iter().map(|r| r.cost.0).sum::<i64>(),
            committed = u.committed,
            "{what}: {why}"
        );
        if !u.committed {
            // The provider billed it: the spend cap counts it (`budget.rs`), the ledger cannot.
            for row in &u.record.ledger {
                self.abandoned.add(row.at_ms, row.cost);
            }
            let now = self.host.clock.now_ms();
            let session = self.session_mut(u.role);
            session.mark_broken(now);
            // A new lease pending its restore stays one: what waits was counted under the old.
            session.restore.get_or_insert(Restore::Abandoned);
        }
    }

    /// Does what follows `u`'s commit (its [`Then`]): the step it completes, if any.
    async fn follow_up(&mut self, u: &Uncommitted) -> Result<Option<Step>, RuntimeError> {
        let token = u.token;
        match &u.then {
            Then::PersonaTurn { max_seq, valid } => {
                self.host.crash_points.reached(CrashPoint::PersonaCommitted);
                self.bind_session(Role::Persona, token).await?;
                self.host.signals.outbox.notify_waiters();
                if !u.record.briefs.is_empty() {
                    self.host.signals.wake_local(&self.mind.id);
                }
                Ok(Some(Step::PersonaTurn {
                    acked_through: u.acked.unwrap_or(*max_seq),
                    valid: *valid,
                }))
            }
            Then::Ping => Ok(Some(Step::Ping)),
            Then::CutRows => Ok(None),
            Then::SelfFlush { memory, idle } => {
                if *idle {
                    self.selfs.acc.let_go(Keep::Tail);
                }
                self.selfs.flushed = Some(Flushed {
                    memory: memory.clone(),
                    forced: false,
                });
                Ok(idle.then_some(Step::Ping))
            }
            Then::Compacted { summary } => {
                self.open_compacted_segment(token, u.at_ms, summary.clone())
                    .await?;
                Ok(None)
            }
            Then::SelfRun(run) => {
                self.host.crash_points.reached(CrashPoint::SelfRunCommitted);
                match &run.memory {
                    Some(memory) => {
                        self.selfs.flushed = Some(Flushed {
                            memory: memory.clone(),
                            forced: true,
                        });
                    }
                    None => self.bind_session(Role::SelfRole, token).await?,
                }
                self.report_back(
                    token,
                    &run.brief,
                    run.flush,
                    run.stopped,
                    &run.result,
                    u.at_ms,
                )
                .await?;
                Ok(Some(Step::SelfTurn {
                    brief: run.brief.seq,
                }))
            }
            Then::ToolRequest(req) => {
                let driven = self.tool_run_cut_short(req, u.at_ms);
                // Boxed: the run's end settles a record of its own.
                let finish = self.finish_self_run(
                    token,
                    &req.brief,
                    req.segment,
                    &req.plan,
                    driven,
                    u.at_ms,
                );
                Ok(Some(Box::pin(finish).await?))
            }
        }
    }

    /// A tool loop whose request was committed on a later step: the run ends there.
    /// (Its brief's result when the commit landed but was given up under a new lease is
    /// [`landed_request`]'s.)
    fn tool_run_cut_short(&mut self, req: &ToolRequest, at_ms: i64) -> Driven {
        let stop = format!(
            "the store failed to record its request {}; the request and its answer were saved \
             at a later step, but the run could not go on from there (its tool results were \
             never sent)",
            req.at.request
        );
        let at = Stopped {
            at: at_ms,
            ..req.at
        };
        self.stop_run(
            &req.brief,
            req.outcome.clone(),
            at,
            StopCause::StoreFailed,
            stop,
        )
    }
}
