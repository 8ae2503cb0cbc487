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
//! flush's record, committed right after); and any cut while an answer waits uncommitted
//! (`pending.rs`: that one goes first).
//!
//! A commit made at once that meets the fence (another host took the Mind over) fails the
//! step with the fence's error, so the runner lets the lease go at once (`lease.rs`), as a
//! fenced write at a step's start does
//! (`cut_rows::a_cut_row_that_meets_the_fence_mid_step_lets_the_lease_go_at_once`).
//!
//! Once keyed, the rows wait in the role's queue of records to commit (`pending.rs`), which
//! commits them in the order they were counted, tries them again as a failed step ends
//! ([`MindRunner::ledger_after_step`]), at every step's start (before the spend cap is read:
//! `cut_rows::a_cut_row_whose_commit_answer_was_lost_is_counted_once_by_the_next_spend_cap`)
//! and before the role's next record
//! (`cut_rows::a_cut_row_the_store_refused_is_committed_once_before_the_retrys_answer`), and
//! gives them up loudly, with their cost, when the store refuses them for good
//! (`cut_rows::a_cut_row_the_store_refuses_for_good_does_not_block_the_roles_next_answers`),
//! at a clean shutdown it cannot commit them
//! (`cut_rows::a_clean_shutdown_gives_up_every_waiting_cut_row_loudly_with_its_cost`), or
//! under a new lease unless the ledger holds them already
//! (`cut_rows::a_landed_cut_row_waiting_at_a_new_lease_is_not_given_up_as_lost`). Rows that
//! wait untried (the three cases above, or what no call took) go with the role's next record,
//! or are keyed as a failed step ends. A row still waiting when the process dies is lost with
//! it: the warning logged at the take is then its only trace.

use super::accounting::Asked;
use super::pending::{ROLES, Then, Uncommitted};
use super::{MindRunner, RuntimeError};
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, FailedAttempt, TtlCheck, TurnOutcome};
use muninn_core::ledger::{ATTEMPT_FAILED, LedgerRow, RowKind};
use muninn_store::{FencingToken, LedgerQuery, Role, StoreError};

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
    /// module docs). The caller vouches that nothing `role` counted before them waits for a
    /// record not yet built (an invalid reply's retry does not come here: its rows go with the
    /// turn's record, after the reply it retries). An answer waiting uncommitted goes first, so
    /// while one waits they wait untried. A commit the store refuses keeps them in the role's
    /// queue, under their key.
    ///
    /// Fails only when the commit met the fence: another host holds the Mind, and the caller's
    /// step fails with that error rather than its own, so the runner lets the lease go at once
    /// (`lease.rs`) instead of going on — retrying its call on the backoff — under a stale
    /// token until its copy of the lease runs out.
    pub(super) async fn ledger_cut_now(
        &mut self,
        role: Role,
        at_ms: i64,
        attempted: (RowKind, bool),
    ) -> Result<(), RuntimeError> {
        if self.ledger_failed_attempts(role, at_ms, attempted) == 0 {
            return Ok(());
        }
        let mut committed = Ok(());
        if let Some(token) = self.lease.as_ref().map(|l| l.token)
            && !self.answer_waiting()
        {
            committed = self.commit_unledgered(role, token, at_ms).await;
        }
        self.host.crash_points.reached(CrashPoint::AttemptCut);
        committed
    }

    /// The rows waiting for `role`'s next record made a record of their own, under a key made
    /// from them, at the back of the role's queue.
    pub(super) fn key_unledgered(&mut self, role: Role, token: FencingToken, at_ms: i64) {
        let rows = std::mem::take(&mut self.session_mut(role).unledgered);
        if !rows.is_empty() {
            let cut = Uncommitted::rows(token, role, rows, at_ms, Then::CutRows);
            self.session_mut(role).waiting.push_back(cut);
        }
    }

    /// The rows waiting for `role`'s next record, and what waits in its queue, committed on
    /// their own; what the store refuses waits, said in the log. A commit the fence refused is
    /// returned (the rows wait all the same, for the next lease to give up): the lease is
    /// another's.
    async fn commit_unledgered(
        &mut self,
        role: Role,
        token: FencingToken,
        at_ms: i64,
    ) -> Result<(), RuntimeError> {
        self.key_unledgered(role, token, at_ms);
        match self.settle_queue(role, token).await {
            Ok(_) => Ok(()),
            Err(e @ RuntimeError::Store(StoreError::Fenced { .. })) => Err(e),
            Err(e) => {
                tracing::warn!(
                    mind = %self.mind.id,
                    role = role.as_str(),
                    error = %e,
                    "a cut attempt's row was not committed at once; it waits, under its key, for the role's next record"
                );
                Ok(())
            }
        }
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

    /// Of `rows`, tried under their key and about to be given up, those the ledger does not
    /// hold: a commit whose answer was lost may have landed, and a row in the ledger is
    /// neither lost nor to be counted again by the spend cap as abandoned money. All of them
    /// when the ledger cannot be read (the store failing): counted twice rather than not at
    /// all.
    pub(super) async fn not_in_ledger(&self, role: Role, rows: Vec<LedgerRow>) -> Vec<LedgerRow> {
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
                    "a row whose commit went unanswered is in the ledger: kept, not given up"
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
    pub(super) fn give_up_rows(&mut self, role: Role, rows: Vec<LedgerRow>, why: &str) {
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
    /// Not while an answer waits uncommitted: that one goes first, at the next step, and these
    /// after it. The step's own error stays the step's.
    pub(super) async fn ledger_after_step(&mut self, token: FencingToken, failed: bool) {
        let after = self.host.clock.now_ms();
        for role in ROLES {
            // What no call took: a request's, as far as anyone can tell.
            self.ledger_failed_attempts(role, after, (RowKind::Request, false));
        }
        let leased = self.lease.as_ref().is_some_and(|l| l.token == token);
        if !failed || !leased {
            return;
        }
        for role in ROLES {
            if self.answer_waiting() {
                return;
            }
            // The fence: the lease is let go at once, as after a fenced step (`lease.rs`).
            if self.commit_unledgered(role, token, after).await.is_err() {
                self.lost_lease(after);
                return;
            }
        }
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
