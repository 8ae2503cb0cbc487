//! Idle: shortly before a session's tail (then its head) expires, the decider keeps it warm,
//! flushes memory while it is warm (the Self), or lets it go.
//!
//! When to ask is the session accounting's answer ([`muninn_core::session::Accounting::
//! next_decision`]), the same schedule the replay engine follows, so the host takes its idle
//! decisions exactly where replay takes them.

use super::accounting::Asked;
use super::pending::{Then, Uncommitted};
use super::{MindRunner, RuntimeError, Step};
use muninn_backend::{Backend, BackendError};
use muninn_core::decide::{Action, Bounds, Decision, decide};
use muninn_core::ledger::RowKind;
use muninn_core::session::{DecisionPoint, Keep};
use muninn_store::{FencingToken, Role};

/// What one session's idle check came to.
enum Idle {
    /// A ping or a flush was sent.
    Acted,
    /// Nothing to do until then (`None`: until something arrives).
    Until(Option<i64>),
}

impl<B: Backend> MindRunner<B> {
    /// Nothing queued: each session's next idle decision, if it is due.
    pub(super) async fn idle(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<Step, RuntimeError> {
        let mut until: Option<i64> = None;
        for role in [Role::Persona, Role::SelfRole] {
            match self.idle_session(role, token, now).await? {
                Idle::Acted => return Ok(Step::Ping),
                Idle::Until(Some(t)) => until = Some(until.map_or(t, |u| u.min(t))),
                Idle::Until(None) => {}
            }
        }
        Ok(Step::Idle { until_ms: until })
    }

    async fn idle_session(
        &mut self,
        role: Role,
        token: FencingToken,
        now: i64,
    ) -> Result<Idle, RuntimeError> {
        self.working = Some(role);
        // A decision that lets an entry go moves on to the next one at once (the head's).
        for _ in 0..3 {
            let session = self.session(role);
            if !session.live() {
                return Ok(Idle::Until(None));
            }
            let Some(point) = session.acc.next_decision() else {
                return Ok(Idle::Until(None));
            };
            if now < point.at_ms {
                return Ok(Idle::Until(Some(point.at_ms)));
            }
            if now >= point.expires_at_ms {
                // Too late to keep it (the runner was busy or asleep past the expiry: backing
                // off a failed step, running the other role, braked). Nobody decided it at its
                // time, and the session's next row says so: a replay lets it go unasked too.
                tracing::warn!(mind = %self.mind.id, role = role.as_str(), ?point, "an idle decision came after its expiry");
                let session = self.session_mut(role);
                session.acc.let_go(point.keep);
                session.lost_at_ms.get_or_insert(point.at_ms);
                continue;
            }
            // Decided as of the point's own time, not of `now`: a runner that comes to it late
            // (busy with the other role, a slow machine, a late timer — `run_mind` always
            // wakes a little after it) takes the decision a punctual one would have, the one a
            // replay of the ledger takes there. Nothing happened to the session since the
            // point (else the point would be another), so the state is the same; only a
            // time-dependent policy (the gaps' expected remaining idle time) could answer
            // otherwise. What it decides is sent now, and its row is at now with what the
            // provider answered then: a late ping reads the cache as it is when it arrives (a
            // write, should the entry have expired on the way: the row then says `expired`, and
            // the replay takes its usage), and the replay prices it there.
            let view = session.acc.view();
            let decision = decide(self.policy, &view, point.keep.event(), point.at_ms);
            let flush = point.keep == Keep::Tail
                && decision.action == Action::Flush
                && !view.flushed
                && view.needs_flush();
            if decision.action == Action::Ping {
                return self
                    .ping(role, token, now, point, &decision, view.bounds)
                    .await;
            }
            if flush && role == Role::SelfRole {
                return self
                    .idle_flush(token, now, point.at_ms, &decision, view.bounds)
                    .await;
            }
            self.session_mut(role).acc.let_go(point.keep);
        }
        Ok(Idle::Until(Some(now)))
    }

    /// A keep-warm ping the decider chose: through the whole prefix (the tail) or the head
    /// alone. It is ledgered, and counted against this gap's budget.
    async fn ping(
        &mut self,
        role: Role,
        token: FencingToken,
        now: i64,
        point: DecisionPoint,
        decision: &Decision,
        bounds: Bounds,
    ) -> Result<Idle, RuntimeError> {
        let session = self.session_mut(role);
        let sent = match point.keep {
            Keep::Tail => session.backend.ping().await,
            Keep::Head => session.backend.ping_head().await,
        };
        let outcome = match sent {
            Ok(o) => o,
            Err(e @ (BackendError::Unsupported { .. } | BackendError::Invalid(_))) => {
                // The backend cannot keep this session warm after all: let both go.
                tracing::warn!(mind = %self.mind.id, role = role.as_str(), error = %e, "a keep-warm ping was refused");
                let session = self.session_mut(role);
                session.acc.let_go(Keep::Tail);
                session.acc.let_go(Keep::Head);
                return Ok(Idle::Until(None));
            }
            Err(e) => {
                // A ping cut after the provider read it was billed: its row is committed now
                // (`failed.rs`).
                let kind = match point.keep {
                    Keep::Tail => RowKind::Ping,
                    Keep::Head => RowKind::HeadPing,
                };
                self.ledger_cut_now(role, now, (kind, false)).await?;
                return Err(e.into());
            }
        };
        let (kind, name) = match point.keep {
            Keep::Tail => (RowKind::Ping, "ping"),
            Keep::Head => (RowKind::HeadPing, "ping_head"),
        };
        let label = format!("{name}:{:?}", decision.reason);
        let rows = self.answered(
            role,
            &outcome,
            now,
            Asked {
                kind,
                bounds: Some(bounds),
                event: Some(point.keep.event()),
                decision: Some(decision),
                label: &label,
                state: "warm",
                boundary: false,
            },
        );
        // A failed commit is held and committed first at the next step (`pending.rs`).
        let ping = Uncommitted::rows(token, role, rows, now, Then::Ping);
        self.settle(ping).await?;
        Ok(Idle::Acted)
    }

    /// The Self writes its memory while the cache is still warm; the next brief decides whether
    /// to start from it.
    async fn idle_flush(
        &mut self,
        token: FencingToken,
        now: i64,
        point_at_ms: i64,
        decision: &Decision,
        bounds: Bounds,
    ) -> Result<Idle, RuntimeError> {
        let asked = Asked {
            kind: RowKind::Flush,
            bounds: Some(bounds),
            event: Some(Keep::Tail.event()),
            decision: Some(decision),
            label: "flush",
            state: "warm",
            boundary: false,
        };
        // The tail is let go and the memory kept for the next brief once the flush is
        // recorded (`pending.rs`) — also when it failed and left no row.
        let (_, failed) = self.flush_self(token, now, asked).await?;
        // The tail stands in for the memory, but the failure is the step's, so `run_mind`
        // logs it with its cause, counts it and shows it as the Mind's last error like any
        // failed turn (it was dropped with no trace); the state is already where the
        // next step goes on from.
        let Some(e) = failed else {
            return Ok(Idle::Acted);
        };
        // Its decision has no row to carry it, so the Self's next row says the point went
        // unrecorded: a replay lets the tail go there, as the host did, instead of asking it
        // and flushing where the ledger has nothing.
        self.selfs.lost_at_ms.get_or_insert(point_at_ms);
        Err(e.into())
    }
}
