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
//! answered row or at the step's end — so every later decision sees what
//! the attempt cached, as a replay of the ledger will. It is written with the next record the
//! runner commits for the role, before that record's own rows: the answer's turn, or the failed
//! step's record — the turn's own when it has one (a Persona turn whose invalid reply's retry
//! was cut, a Self flush that was cut), else one of the rows alone, committed as the failed step
//! ends ([`MindRunner::ledger_after_step`]). Until then it waits on the session
//! ([`super::session::Session::unledgered`]), and the spend cap counts its cost beside the
//! ledger's (`budget.rs`).
//!
//! Moved into a record, a row is committed once: the record is committed under its turn key, and
//! a held record is tried again under that key (`pending.rs`). A row still waiting when the
//! process dies (a kill -9 between the call and the step's end, or while a held record blocks
//! its commit) is lost with it — the provider billed it and the ledger does not show it; a clean
//! shutdown commits what waits first. A row waiting when the runner must rebuild the role's
//! accounting from the ledger (a new lease) is given up loudly, its cost kept for the spend
//! cap, as an answer abandoned uncommitted is.

use super::accounting::Asked;
use super::pending::{Then, Uncommitted};
use super::{MindRunner, RuntimeError};
use muninn_backend::{Backend, FailedAttempt, TtlCheck, TurnOutcome};
use muninn_core::ledger::{ATTEMPT_FAILED, LedgerRow, RowKind};
use muninn_store::{FencingToken, Role};

impl<B: Backend> MindRunner<B> {
    /// Takes the attempts `role`'s backend reports billed but not answered whole, each a ledger
    /// row sent at `at_ms` (when the call that made it began), counted now and kept on the
    /// session for the role's next record. `attempted`: the kind of the request they attempted
    /// (a ping, a flush or a compaction is the recorded policy's side request), and whether it
    /// began a turn (a Persona turn, a Self brief's first request) — the first try of that
    /// request, a cut attempt opens the turn in a counterfactual replay, where every policy
    /// decides the arrival before paying it (`muninn_import`'s `ledger` mapping).
    pub(super) fn ledger_failed_attempts(
        &mut self,
        role: Role,
        at_ms: i64,
        (attempted, boundary): (RowKind, bool),
    ) {
        let attempts = self.session_mut(role).backend.take_failed_attempts();
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
    }

    /// The failed attempts' rows waiting for `role`'s next record, taken for it (after taking
    /// any the backend still holds, sent at `at_ms` for a request of kind `attempted` that began
    /// no turn).
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
            .flat_map(|role| &self.session(*role).unledgered)
            .filter(|row| row.at_ms >= from_ms)
            .map(|row| row.cost.0)
            .sum()
    }

    /// Gives up the rows waiting for `role`'s next record, loudly (the role's accounting is
    /// about to be rebuilt from the ledger, which does not hold them): their cost stays counted
    /// for the spend cap.
    pub(super) fn abandon_unledgered(&mut self, role: Role) {
        let rows = std::mem::take(&mut self.session_mut(role).unledgered);
        for row in rows {
            tracing::error!(
                mind = %self.mind.id,
                role = role.as_str(),
                at_ms = row.at_ms,
                cost_micro_usd = row.cost.0,
                "a failed attempt's row was abandoned uncommitted: the lease changed before a record carried it"
            );
            self.abandoned.add(row.at_ms, row.cost);
        }
    }

    /// After a step under `token`: the attempts no call of the step took from its backend yet
    /// are ledgered, and when the step `failed`, the rows waiting for a record are committed on
    /// their own at once — the failed step's record — rather than left in memory until the
    /// role's next record (a retry an hour away under a `retry-after`, a Self's next brief).
    /// Not while a record is held: that one goes first, at the next step, and these with the
    /// records after it. A commit the store refuses is held or abandoned as any record is
    /// (`pending.rs`); the step's own error stays the step's.
    pub(super) async fn ledger_after_step(&mut self, token: FencingToken, failed: bool) {
        let after = self.host.clock.now_ms();
        for role in [Role::Persona, Role::SelfRole] {
            // What no call took: a request's, as far as anyone can tell.
            self.ledger_failed_attempts(role, after, (RowKind::Request, false));
        }
        let leased = self.lease.as_ref().is_some_and(|l| l.token == token);
        if !failed || !leased || self.uncommitted.is_some() {
            return;
        }
        if let Err(e) = self.commit_unledgered(token).await {
            tracing::debug!(mind = %self.mind.id, error = %e, "failed attempts' rows not committed after a failed step");
        }
    }

    /// Before a clean shutdown lets the lease go: the rows waiting for a record are committed
    /// on their own, for both roles, under the lease still held; what the store refuses (or
    /// what no lease can commit) is abandoned, loudly.
    pub(super) async fn unledgered_before_release(&mut self) {
        let Some(token) = self.lease.as_ref().map(|l| l.token) else {
            for role in [Role::Persona, Role::SelfRole] {
                self.abandon_unledgered(role);
            }
            return;
        };
        if let Err(e) = self.commit_unledgered(token).await {
            let why =
                format!("the store refused it at shutdown, before the lease was released: {e}");
            if let Some(u) = self.uncommitted.take() {
                self.abandon(u, &why);
            }
        }
    }

    async fn commit_unledgered(&mut self, token: FencingToken) -> Result<(), RuntimeError> {
        let now = self.host.clock.now_ms();
        for role in [Role::Persona, Role::SelfRole] {
            let rows = self.take_unledgered(role, now, RowKind::Request);
            if rows.is_empty() {
                continue;
            }
            let record = Uncommitted::rows(token, role, rows, now, Then::Nothing);
            self.settle(record).await?;
        }
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
