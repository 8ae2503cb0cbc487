//! Attempts the provider billed but did not answer whole, as ledger rows.
//!
//! An attempt whose stream was cut after `message_start` (a reset connection, the attempt's
//! deadline, an `error` event) was billed: the provider read the prompt, wrote or read its
//! cache, and generated output. The Messages API backend reports each one
//! ([`Backend::take_failed_attempts`]), with its usage, the prediction it was sent under, its
//! request id and its error. Each becomes a ledger row of its own
//! ([`RowKind::FailedAttempt`], decision `attempt_failed`), priced as any row, the error and
//! request id among its `events`, so the ledger, the spend cap, `muninn status` and a replay
//! count what the provider billed.
//!
//! # When it is counted, and when it is written
//!
//! A row is counted by the role's accounting and its ledger cache when the attempt is taken
//! from the backend — right after the call that failed (the client returns every billed
//! attempt to its caller rather than retry it), or at the latest before the role's next
//! answered row or at the step's end — so every later decision sees what the attempt cached,
//! as a replay of the ledger will.
//!
//! It is written at once ([`MindRunner::ledger_cut_now`]): right after the failed call — a
//! Persona turn's, a compaction's, a keep-warm ping's, a Self request's — the rows are committed
//! on their own, a record under a key made from them, before anything else happens (the notice
//! in the transcript, the brief failed, the backoff before the retry, which a `retry-after` can
//! make an hour). So a `kill -9` after the take keeps the row, once
//! (`muninn`'s `crash_points::a_cut_attempt_killed_before_its_retry_is_in_the_ledger_once`:
//! before, the row waited in memory for the failed step's end and the kill lost it; and
//! before `AnyBackend` forwarded the backend's failed attempts, `muninn serve` ledgered none).
//! Three cases go with a record instead: an invalid reply's retry that was cut (the turn's
//! record carries it, after the reply it retries, which was counted first and is not committed
//! yet: written on its own, the row would come before it); a Self flush that was cut (the
//! flush's record, committed right after); and any cut while a record is held (`pending.rs`:
//! that one goes first).
//!
//! A commit the store refuses (or one whose answer was lost) keeps the rows on the session as
//! a [`CutRecord`] under the same key, counted by the spend cap beside the ledger's spend
//! (`budget.rs`), and they are tried again, under that key — a commit that had landed counts,
//! so nothing is written twice — before the role's next record is committed
//! (`pending.rs`, `commit_or_hold`: the cut rows before the answer's, the order they were
//! counted in), as the failed step ends ([`MindRunner::ledger_after_step`]), at the next step's
//! start, before the spend cap is read (a row whose commit landed unanswered is in the ledger
//! then, and counted there alone:
//! `cut_rows::a_cut_row_whose_commit_answer_was_lost_is_counted_once_by_the_next_spend_cap`),
//! and at a clean shutdown
//! (`cut_rows::a_cut_row_the_store_refused_is_committed_once_before_the_retrys_answer`).
//! A refusal no retry changes ([`StoreError::Invalid`], say) gives the rows up at once, loudly,
//! their cost kept for the spend cap: kept first in line, they had every later record of the
//! role refused behind them
//! (`cut_rows::a_cut_row_the_store_refuses_for_good_does_not_block_the_roles_next_answers`).
//! Rows that wait untried (the two cases above, or what no call took) go with the role's next
//! record, or on their own as a failed step ends.
//!
//! A row still waiting at a clean shutdown that the store refuses, or that no lease can commit,
//! is given up at error in the log with its cost, each role's on its own
//! (`cut_rows::a_clean_shutdown_gives_up_every_waiting_cut_row_loudly_with_its_cost`; before,
//! a refused Persona commit ended the shutdown's attempt and the Self's waiting rows went
//! with the runner, unsaid). A row waiting when the runner must rebuild the role's accounting
//! from the ledger (a new lease) is given up as loudly, its cost kept for the spend cap, as an
//! answer abandoned uncommitted is — unless the ledger holds it (its commit landed and the
//! answer was lost): then it is neither lost nor counted again
//! (`cut_rows::a_landed_cut_row_waiting_at_a_new_lease_is_not_given_up_as_lost`). A row still waiting when the process dies (the store
//! refused it, or a held record kept it back) is lost with it: the warning logged at the take
//! is then its only trace.

use super::accounting::Asked;
use super::pending::{Then, Uncommitted, content_key};
use super::{MindRunner, RuntimeError};
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, FailedAttempt, TtlCheck, TurnOutcome};
use muninn_core::ledger::{ATTEMPT_FAILED, LedgerRow, RowKind};
use muninn_store::{FencingToken, LedgerQuery, Role, StoreError, TurnRecord};

/// Rows of cut attempts committed on their own under a key made from them, tried once and
/// refused: kept with that key, so trying again after a commit whose answer was lost writes
/// nothing twice, and committed before the role's next record (`pending.rs`), at a failed
/// step's end, or at a clean shutdown.
#[derive(Debug)]
pub(super) struct CutRecord {
    /// The lease the rows were counted under: only that lease commits them.
    token: FencingToken,
    /// The rows, under their key.
    record: TurnRecord,
}

impl<B: Backend> MindRunner<B> {
    /// Takes the attempts `role`'s backend reports billed but not answered whole, each a ledger
    /// row sent at `at_ms` (when the call that made it began), counted now and kept on the
    /// session for the role's next record. `attempted`: the kind of the request they attempted
    /// (a ping, a flush or a compaction is the recorded policy's side request), and whether it
    /// began a turn (a Persona turn, a Self brief's first request) — the first try of that
    /// request, a cut attempt opens the turn in a counterfactual replay, where every policy
    /// decides the arrival before paying it (`muninn_import`'s `ledger` mapping). Returns how
    /// many it took.
    pub(super) fn ledger_failed_attempts(
        &mut self,
        role: Role,
        at_ms: i64,
        (attempted, boundary): (RowKind, bool),
    ) -> usize {
        let attempts = self.session_mut(role).backend.take_failed_attempts();
        let taken = attempts.len();
        for attempt in attempts {
            let u = attempt.usage;
            tracing::warn!(
                mind = %self.mind.id,
                role = role.as_str(),
                request_id = attempt.request_id.as_deref().unwrap_or(""),
                tokens_uncached = u.input,
                tokens_write_5m = u.cache_write_5m,
                tokens_write_1h = u.cache_write_1h,
                tokens_read = u.cache_read,
                tokens_output = u.output,
                error = %attempt.error,
                "an attempt the provider billed failed before its reply was whole; it is a ledger row"
            );
            let events = serde_json::json!({
                "attempt_failed": attempt.error,
                "request_id": attempt.request_id,
            });
            let state = if self.session(role).acc.view().warm(at_ms) {
                "warm"
            } else {
                "cold"
            };
            let asked = Asked {
                kind: RowKind::FailedAttempt,
                bounds: None,
                event: None,
                decision: None,
                label: ATTEMPT_FAILED,
                state,
                boundary,
            };
            let cleared = attempt.cleared;
            let mut row = self.counted(role, &outcome_of(attempt), at_ms, asked, cleared);
            if let Some(decided) = row.decided.as_mut() {
                decided.attempted = Some(attempted);
            }
            row.events.push(events);
            self.session_mut(role).unledgered.push(row);
        }
        taken
    }

    /// Right after a call of `role`'s that failed: takes its cut attempts
    /// ([`Self::ledger_failed_attempts`]) and commits their rows at once, on their own (see the
    /// module docs). The caller vouches that nothing `role` counted before them waits in a
    /// record not yet committed (an invalid reply's retry does not come here: its rows go with
    /// the turn's record, after the reply it retries). A held record goes first, so while one
    /// is held they wait. A commit the store refuses keeps them, under their key, for later.
    pub(super) async fn ledger_cut_now(
        &mut self,
        role: Role,
        at_ms: i64,
        attempted: (RowKind, bool),
    ) {
        if self.ledger_failed_attempts(role, at_ms, attempted) == 0 {
            return;
        }
        if let Some(token) = self.lease.as_ref().map(|l| l.token)
            && self.uncommitted.is_none()
        {
            self.key_unledgered(role, token, at_ms);
            if let Err(e) = self.commit_cut_records(role, token).await {
                tracing::warn!(
                    mind = %self.mind.id,
                    role = role.as_str(),
                    error = %e,
                    "a cut attempt's row was not committed at once; it waits, under its key, for the role's next record"
                );
            }
        }
        self.host.crash_points.reached(CrashPoint::AttemptCut);
    }

    /// The rows waiting for `role`'s next record, made a record of their own under a key made
    /// from them, at the end of the role's cut records.
    fn key_unledgered(&mut self, role: Role, token: FencingToken, at_ms: i64) {
        let rows = std::mem::take(&mut self.session_mut(role).unledgered);
        if rows.is_empty() {
            return;
        }
        let mut record = TurnRecord {
            ledger: rows,
            ..TurnRecord::default()
        };
        record.turn_key = Some(content_key(role, at_ms, &record));
        let cut = CutRecord { token, record };
        self.session_mut(role).cut_records.push(cut);
    }

    /// Commits `role`'s cut records in order, each under its key (one committed before counts),
    /// under `token`; one counted under another lease cannot be, nor one the store refuses for
    /// good, and is given up loudly. Stops at the first the store refuses for now, which waits
    /// with those after it.
    pub(super) async fn commit_cut_records(
        &mut self,
        role: Role,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        while let Some(cut) = self.session(role).cut_records.first() {
            if cut.token != token {
                let cut = self.session_mut(role).cut_records.remove(0);
                let lost = self.not_in_ledger(role, cut.record.ledger).await;
                self.give_up_rows(role, lost, "the lease changed");
                continue;
            }
            let recorded = self
                .host
                .store
                .record_turn(&self.mind.id, token, &cut.record)
                .await;
            match recorded {
                Ok(_) | Err(StoreError::TurnAlreadyRecorded { .. }) => {
                    self.session_mut(role).cut_records.remove(0);
                }
                // A refusal no retry changes (the lease aside, which the step's own commit
                // meets and `lease.rs` handles): kept first in line, the rows would have every
                // later record of the role refused behind them, each answer abandoned. Given
                // up instead, loudly, their cost kept for the spend cap.
                Err(e) if !e.is_retryable() && !matches!(e, StoreError::Fenced { .. }) => {
                    let cut = self.session_mut(role).cut_records.remove(0);
                    let why = format!("the store refused it for good: {e}");
                    self.give_up_rows(role, cut.record.ledger, &why);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The failed attempts' rows waiting for a record, taken for it (after taking any the
    /// backend still holds, sent at `at_ms` for a request of kind `attempted` that began no
    /// turn). Those already tried under a key of their own are not among them: they go first,
    /// under that key, when the record is committed.
    pub(super) fn take_unledgered(
        &mut self,
        role: Role,
        at_ms: i64,
        attempted: RowKind,
    ) -> Vec<LedgerRow> {
        self.ledger_failed_attempts(role, at_ms, (attempted, false));
        std::mem::take(&mut self.session_mut(role).unledgered)
    }

    /// What the spend cap counts of the rows waiting for a record, in `[from_ms, ∞)`.
    pub(super) fn unledgered_spend(&self, from_ms: i64) -> i64 {
        [Role::Persona, Role::SelfRole]
            .iter()
            .map(|role| self.session(*role))
            .flat_map(|s| {
                (s.unledgered.iter()).chain(s.cut_records.iter().flat_map(|c| &c.record.ledger))
            })
            .filter(|row| row.at_ms >= from_ms)
            .map(|row| row.cost.0)
            .sum()
    }

    /// Gives up the rows waiting for `role`'s next record, loudly (the role's accounting is
    /// about to be rebuilt from the ledger, which does not hold them, or a clean shutdown could
    /// not commit them): their cost stays counted for the spend cap.
    pub(super) async fn abandon_unledgered(&mut self, role: Role, why: &str) {
        let session = self.session_mut(role);
        let tried: Vec<LedgerRow> = (session.cut_records.drain(..))
            .flat_map(|c| c.record.ledger)
            .collect();
        let untried = std::mem::take(&mut session.unledgered);
        let mut rows = self.not_in_ledger(role, tried).await;
        rows.extend(untried);
        self.give_up_rows(role, rows, why);
    }

    /// Of `rows`, tried under their key and about to be given up, those the ledger does not
    /// hold: a commit whose answer was lost may have landed, and a row in the ledger is
    /// neither lost nor to be counted again by the spend cap as abandoned money. All of them
    /// when the ledger cannot be read (the store failing): counted twice rather than not at
    /// all.
    async fn not_in_ledger(&self, role: Role, rows: Vec<LedgerRow>) -> Vec<LedgerRow> {
        let mut lost = Vec::with_capacity(rows.len());
        for row in rows {
            let query = LedgerQuery {
                mind: Some(self.mind.id.clone()),
                from_ms: Some(row.at_ms),
                to_ms: Some(row.at_ms.saturating_add(1)),
                ..LedgerQuery::default()
            };
            match self.host.store.ledger(&query).await {
                Ok(entries) if entries.iter().any(|e| e.row == row) => tracing::info!(
                    mind = %self.mind.id,
                    role = role.as_str(),
                    at_ms = row.at_ms,
                    "a cut attempt's row whose commit went unanswered is in the ledger: kept, not given up"
                ),
                Ok(_) => lost.push(row),
                Err(e) => {
                    tracing::warn!(mind = %self.mind.id, role = role.as_str(), error = %e, "the ledger could not be read to tell whether a cut attempt's row landed");
                    lost.push(row);
                }
            }
        }
        lost
    }

    /// `rows` given up uncommitted, each said with its cost, which the spend cap keeps.
    fn give_up_rows(&mut self, role: Role, rows: Vec<LedgerRow>, why: &str) {
        for row in rows {
            tracing::error!(
                mind = %self.mind.id,
                role = role.as_str(),
                at_ms = row.at_ms,
                cost_micro_usd = row.cost.0,
                "a failed attempt's row was abandoned uncommitted: {why}"
            );
            self.abandoned.add(row.at_ms, row.cost);
        }
    }

    /// After a step under `token`: the attempts no call of the step took from its backend yet
    /// are ledgered, and when the step `failed`, the rows waiting for a record are committed on
    /// their own at once — the failed step's record — rather than left in memory until the
    /// role's next record (a retry an hour away under a `retry-after`, a Self's next brief).
    /// Not while a record is held: that one goes first, at the next step, and these with the
    /// records after it. Rows never tried that the store refuses are held or abandoned as any
    /// record is (`pending.rs`); cut records it refuses keep waiting under their keys. The
    /// step's own error stays the step's.
    pub(super) async fn ledger_after_step(&mut self, token: FencingToken, failed: bool) {
        let after = self.host.clock.now_ms();
        for role in [Role::Persona, Role::SelfRole] {
            // What no call took: a request's, as far as anyone can tell.
            self.ledger_failed_attempts(role, after, (RowKind::Request, false));
        }
        let leased = self.lease.as_ref().is_some_and(|l| l.token == token);
        if !failed || !leased {
            return;
        }
        for role in [Role::Persona, Role::SelfRole] {
            if self.uncommitted.is_some() {
                return;
            }
            if let Err(e) = self.commit_unledgered(role, token, after).await {
                tracing::warn!(mind = %self.mind.id, role = role.as_str(), error = %e, "failed attempts' rows not committed after a failed step; they wait for the role's next record");
            }
        }
    }

    /// Before a clean shutdown lets the lease go: the rows waiting for a record are committed
    /// on their own, for each role, under the lease still held; what the store refuses (or
    /// what no lease can commit) is abandoned, loudly, with its cost — each role's on its own,
    /// so one role's refusal gives up nothing of the other's unsaid.
    pub(super) async fn unledgered_before_release(&mut self) {
        let token = self.lease.as_ref().map(|l| l.token);
        let now = self.host.clock.now_ms();
        for role in [Role::Persona, Role::SelfRole] {
            let Some(token) = token else {
                (self.abandon_unledgered(role, "the lease was lost before a record carried it"))
                    .await;
                continue;
            };
            if let Err(e) = self.commit_unledgered(role, token, now).await {
                let why =
                    format!("the store refused it at shutdown, before the lease was released: {e}");
                if let Some(u) = self.uncommitted.take() {
                    self.abandon(u, &why);
                }
                self.abandon_unledgered(role, &why).await;
            }
        }
    }

    /// Commits what waits for `role`'s next record on its own: the cut records under their
    /// keys, then the rows never tried as a record of their own (held when the store refuses
    /// it, as any record: `pending.rs`).
    async fn commit_unledgered(
        &mut self,
        role: Role,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let rows = self.take_unledgered(role, now, RowKind::Request);
        if rows.is_empty() {
            return Ok(self.commit_cut_records(role, token).await?);
        }
        let record = Uncommitted::rows(token, role, rows, now, Then::Nothing);
        self.settle(record).await?;
        Ok(())
    }
}

/// A failed attempt as the outcome its row is built from: its usage, raw usage, prediction,
/// request id and shape; no reply.
fn outcome_of(attempt: FailedAttempt) -> TurnOutcome {
    TurnOutcome {
        text: String::new(),
        tool_calls: Vec::new(),
        structured: None,
        stop_reason: String::new(),
        usage: attempt.usage,
        raw_usage: attempt.raw_usage,
        predicted: attempt.predicted,
        miss: None,
        provider_miss: None,
        ttl: TtlCheck {
            expected_5m: 0,
            expected_1h: 0,
            honoured_5m: 0,
            honoured_1h: 0,
        },
        retries: Vec::new(),
        events: Vec::new(),
        request_id: attempt.request_id,
        breakpoints: attempt.breakpoints,
        tool_results: Default::default(),
    }
}
