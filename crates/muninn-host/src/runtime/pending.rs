//! An answer the provider gave whose commit failed: held on the runner and committed first at
//! the next step, before any new work or decision.
//!
//! The session's accounting counts a request as it is answered (`accounting.rs`), before the
//! record that carries its ledger row is committed. When that commit fails (a full disk, a busy
//! SQLite file, a PostgreSQL server gone) the money was spent and the provider's session holds
//! the exchange, so the answer is neither rolled back nor asked for again: its record — the
//! turn, the ledger-only row of a ping or a compaction, a Self flush, a tool-loop request —
//! is held here as an [`Uncommitted`], and the step fails as any store failure does (logged
//! with its cause, counted in `muninn_step_failures_total{cause="store"}`, shown as `retrying`
//! in status, retried on the backoff of `retry.rs`). The next step commits it first, then does
//! what the commit was waiting for (bind the session, report a Self run back, open the
//! compacted segment, …), and only then goes on. So the ledger gets every row the accounting
//! counted, in the order it counted them, and `muninn replay` of the ledger takes the host's
//! decisions.
//!
//! Every held record is committed under a turn key (a Persona batch's, a brief's, or one made
//! from the rows themselves), so a commit whose acknowledgement was lost and is tried again
//! writes nothing twice ([`StoreError::TurnAlreadyRecorded`] counts as committed). A record is
//! committed only under the lease it was answered under: after a takeover (or a refusal no
//! retry can change) it is abandoned, loudly, as a crash would lose it — the role's accounting
//! is then rebuilt from the ledger and the session from the transcript, and a Persona batch
//! left unacknowledged is answered again by whoever holds the Mind.
//!
//! # Order of operations
//!
//! Every answer goes through `settle`:
//!
//! 1. `commit_or_hold` — reads the memory from the segment's tail when the record waits for one
//!    ([`TailMemory`]), then commits the record under its turn key;
//! 2. `follow_up` — does what the commit was waiting for (the record's [`Then`]);
//! 3. when either fails, `hold_or_abandon` — a failure the store may get over (busy,
//!    unreachable) holds the record on the runner, marked committed if step 1 went through;
//!    any other failure abandons it.
//!
//! The next step's first act (`settle_held`, at the top of the runner's `work`) settles the
//! held record the same way; step 1 is skipped when it is marked committed.

use super::session::Flushed;
use super::tool_loop::{Driven, StopCause, Stopped};
use super::{MindRunner, RuntimeError, Step};
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, FlushStage, TurnOutcome};
use muninn_core::cache::hash_bytes;
use muninn_core::ledger::LedgerRow;
use muninn_core::session::Keep;
use muninn_store::{Brief, FencingToken, Role, StoreError, TranscriptKind, TurnRecord};
use serde_json::Value;

/// A record answered but not (yet) committed, and what its commit was waiting for.
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
    /// Rows of failed attempts committed on their own (`failed.rs`: as a failed step ends, at
    /// a clean shutdown): nothing more.
    Nothing,
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
}

/// A turn key made from what `record` holds (its rows and items), answered by `role` at
/// `at_ms`: the same record tried again gets the same key, so its second commit writes nothing.
pub(super) fn content_key(role: Role, at_ms: i64, record: &TurnRecord) -> String {
    let bodies: Vec<_> = record.transcript.iter().map(|i| &i.body).collect();
    let bytes = serde_json::to_vec(&(&record.ledger, bodies)).unwrap_or_default();
    format!("{}-{at_ms}-{:016x}", role.as_str(), hash_bytes(&bytes))
}

impl<B: Backend> MindRunner<B> {
    /// The held record, committed first (see the module docs): the step it completes, if it
    /// completes one; `None` when the step goes on (nothing was held, it was abandoned, or what
    /// it waited for was part of a step that goes on from here).
    pub(super) async fn settle_held(
        &mut self,
        token: FencingToken,
    ) -> Result<Option<Step>, RuntimeError> {
        let Some(held) = self.uncommitted.take() else {
            return Ok(None);
        };
        if held.token != token {
            self.abandon(held, "the Mind's lease changed before it was committed");
            return Ok(None);
        }
        self.working = Some(held.role);
        let step = self.settle(held).await?;
        if matches!(step, Some(Step::PersonaTurn { .. })) {
            self.wake.turn_taken();
        }
        Ok(step)
    }

    /// The record held and not yet committed, to change what it lists before it is.
    pub(super) fn held_record_mut(&mut self) -> Option<&mut TurnRecord> {
        self.uncommitted
            .as_mut()
            .filter(|u| !u.committed)
            .map(|u| &mut u.record)
    }

    /// A held record's last commit, under the lease still held, before a clean shutdown lets
    /// it go: what the store still refuses is abandoned, loudly, and the next holder asks the
    /// provider again. With no lease (another host took the Mind over, and this runner's
    /// fenced token can commit nothing any more) a held record is abandoned at once, as loudly:
    /// it used to be dropped with the runner, without a word in the log.
    pub(super) async fn settle_before_release(&mut self) {
        let Some(token) = self.lease.as_ref().map(|l| l.token) else {
            if let Some(u) = self.uncommitted.take() {
                self.abandon(u, "the Mind's lease was lost before it was committed");
            }
            return;
        };
        let Some(held) = self.uncommitted.as_ref() else {
            return;
        };
        let (turn_key, same_lease) = (held.turn_key().to_string(), held.token == token);
        match self.settle_held(token).await {
            // Answered under another lease: `settle_held` gave it up, and said so.
            Ok(_) if !same_lease => {}
            Ok(_) => tracing::info!(
                mind = %self.mind.id,
                %turn_key,
                "a held answer was committed before the lease was released"
            ),
            Err(e) => {
                if let Some(u) = self.uncommitted.take() {
                    let why = format!(
                        "the store refused it at shutdown, before the lease was released: {e}"
                    );
                    self.abandon(u, &why);
                }
            }
        }
    }

    /// Settles `u`: commits its record ([`Self::commit_or_hold`]), then does what follows the
    /// commit ([`Self::follow_up`]). When either fails, `u` is held for the next step — marked
    /// committed if the commit went through, so the next step only does what follows — or
    /// abandoned when no retry can help ([`Self::hold_or_abandon`]); the error is the step's.
    pub(super) async fn settle(&mut self, u: Uncommitted) -> Result<Option<Step>, RuntimeError> {
        let u = self.commit_or_hold(u).await?;
        match self.follow_up(&u).await {
            Ok(step) => Ok(step),
            Err(e) => {
                // What follows a tool request ends the run, which settles a record of its own:
                // when that one is held, it carries the rest of the work, and `u` (committed,
                // its follow-up done as far as it goes) is let go.
                if self.uncommitted.is_none() {
                    return Err(self.hold_or_abandon(u, e));
                }
                Err(e)
            }
        }
    }

    /// Commits `u`'s record, after reading its tail memory if it has one and committing the
    /// role's waiting cut-attempt records (`failed.rs`); a record already committed under its
    /// key counts. On failure holds or abandons `u`
    /// ([`Self::hold_or_abandon`]) and returns the error.
    pub(super) async fn commit_or_hold(
        &mut self,
        mut u: Uncommitted,
    ) -> Result<Uncommitted, RuntimeError> {
        if u.committed {
            return Ok(u);
        }
        if let Some(tail) = u.tail.take() {
            match self.self_tail(tail.segment).await {
                Ok(read) => u.fill_memory(tail.memory(read)),
                Err(e) => {
                    u.tail = Some(tail);
                    return Err(self.hold_or_abandon(u, e));
                }
            }
        }
        // Rows of cut attempts whose commit on their own failed were counted before this
        // record: they go first, each under its own key (`failed.rs`).
        if let Err(e) = self.commit_cut_records(u.role, u.token).await {
            return Err(self.hold_or_abandon(u, RuntimeError::Store(e)));
        }
        match self
            .host
            .store
            .record_turn(&self.mind.id, u.token, &u.record)
            .await
        {
            Ok(receipt) => u.acked = Some(receipt.ack_position),
            Err(StoreError::TurnAlreadyRecorded { .. }) => {}
            Err(e) => return Err(self.hold_or_abandon(u, RuntimeError::Store(e))),
        }
        u.committed = true;
        Ok(u)
    }

    /// Keeps `u` for the next step when the failure may pass (the store is busy or unreachable),
    /// else abandons it. Returns the step's error: [`RuntimeError::Held`] when an answer is held
    /// uncommitted, so status and the log say so.
    fn hold_or_abandon(&mut self, u: Uncommitted, error: RuntimeError) -> RuntimeError {
        let store = match error {
            RuntimeError::Store(e) | RuntimeError::Held(e) if e.is_retryable() => e,
            error => {
                self.abandon(u, &error.to_string());
                return error;
            }
        };
        tracing::warn!(
            mind = %self.mind.id,
            role = u.role.as_str(),
            turn_key = u.turn_key(),
            rows = u.record.ledger.len(),
            committed = u.committed,
            error = %store,
            "an answer is held uncommitted; it is committed first at the next step"
        );
        let committed = u.committed;
        self.uncommitted = Some(u);
        if committed {
            RuntimeError::Store(store)
        } else {
            RuntimeError::Held(store)
        }
    }

    /// Gives `u` up (see the module docs): said loudly, and the role's accounting and session
    /// rebuilt from what the store holds.
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
            session.restore = true;
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
            Then::Nothing => Ok(None),
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
