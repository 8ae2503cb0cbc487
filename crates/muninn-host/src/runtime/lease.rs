//! The Mind's lease: one writer per Mind, fenced.
//!
//! The runner takes or renews the lease before each step ([`MindRunner::token`]) and keeps it
//! renewed *while* the step runs ([`LeaseKeeper`]): a turn may wait on its backend for minutes
//! (retries with back-off, a slow model, a CLI child that relaunches), longer than the lease
//! lasts. Without the keeper another host would take the Mind over mid-turn; fencing would keep
//! the transcript whole, but the turn would be paid for and thrown away. Both first adopt the
//! host's renewal of all its leases (`host_lease.rs`) and renew alone only when it is late.

use super::{MindRunner, RuntimeError};
use crate::telemetry::LeaseChange;
use muninn_backend::Backend;
use muninn_backend::clock::Clock;
use muninn_core::ledger::RowKind;
use muninn_store::{FencingToken, Lease, Store, StoreError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Renews a lease while a step runs: every sixth of the lease it looks at the clock, and once a
/// third or less is left it renews (the same rule as between steps). It owns clones of what it
/// needs, so it runs beside the step (`tokio::select!`) without borrowing the runner; the newest
/// lease it obtained is read back after the step ([`LeaseKeeper::renewed`]).
pub(super) struct LeaseKeeper {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    mind: String,
    ttl_ms: i64,
    /// The host's renewals (`host_lease.rs`), adopted before renewing alone.
    host_leases: Arc<super::HostLeases>,
    /// The lease as last taken or renewed; `None` once a renewal was fenced.
    lease: Mutex<Option<Lease>>,
}

impl LeaseKeeper {
    /// Renews forever (the step it runs beside ends it by finishing first). A renewal refused
    /// by fencing stops it: another host holds the Mind, and the step's next write fails.
    pub(super) async fn run(&self) -> std::convert::Infallible {
        let every = Duration::from_millis((self.ttl_ms / 6).max(10) as u64);
        loop {
            tokio::time::sleep(every).await;
            let Some(lease) = self.current() else {
                continue;
            };
            let now = self.clock.now_ms();
            if lease.expires_at_ms - now > self.ttl_ms / 3 {
                continue;
            }
            if let Some(renewed) = self.host_leases.newer(&lease)
                && renewed.expires_at_ms - now > self.ttl_ms / 3
            {
                self.set(Some(renewed));
                continue;
            }
            match self
                .store
                .renew_lease(&self.mind, lease.token, self.ttl_ms, now)
                .await
            {
                Ok(renewed) => self.set(Some(renewed)),
                Err(StoreError::Fenced { .. }) => {
                    tracing::warn!(mind = %self.mind, "lease taken over while a step ran");
                    self.set(None);
                }
                // Retried at the next look; the lease still has a third left.
                Err(e) => tracing::warn!(mind = %self.mind, error = %e, "lease renewal failed"),
            }
        }
    }

    fn current(&self) -> Option<Lease> {
        self.lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, lease: Option<Lease>) {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = lease;
    }

    /// The lease the keeper ended with: renewed, as taken, or `None` if fenced.
    pub(super) fn renewed(&self) -> Option<Lease> {
        self.current()
    }
}

impl<B: Backend> MindRunner<B> {
    /// Takes or renews the lease; `None` if another host holds it.
    pub(super) async fn token(&mut self, now: i64) -> Result<Option<FencingToken>, RuntimeError> {
        let store = self.host.store.clone();
        let ttl = self.host.config.lease_ttl_ms;
        if let Some(lease) = &self.lease {
            if lease.expires_at_ms - now > ttl / 3 {
                return Ok(Some(lease.token));
            }
            // The host's renewal of every lease it holds (`host_lease.rs`) usually got there
            // first: adopt it, no write of our own.
            if let Some(renewed) = self.host.leases.newer(lease)
                && renewed.expires_at_ms - now > ttl / 3
            {
                let token = renewed.token;
                self.lease = Some(renewed);
                return Ok(Some(token));
            }
            let renewed = store
                .renew_lease(&self.mind.id, lease.token, ttl, now)
                .await;
            match renewed {
                Ok(renewed) => {
                    let token = renewed.token;
                    self.lease = Some(renewed);
                    return Ok(Some(token));
                }
                Err(StoreError::Fenced { .. }) => self.lost_lease(now),
                Err(e) => return Err(e.into()),
            }
        }
        // Whether the lease was released by a clean shutdown (no holder) or is still held, live
        // or lapsed: in the second case its holder — another host, or this host's previous
        // process — may still be writing to the provider's session.
        let previous = store.lease(&self.mind.id).await?;
        let mut taken = store
            .acquire_lease(&self.mind.id, &self.holder, ttl, now)
            .await?;
        if taken.is_none()
            && let Some(previous) = previous.as_ref().filter(|p| p.holder != self.holder)
        {
            // Refused: a live holder — unless it is provably gone (see `takeover.rs`).
            taken = self.take_over(previous, now).await?;
        }
        let token = taken.as_ref().map(|l| l.token);
        if let Some(lease) = &taken
            && self.lease.is_none()
        {
            self.took_a_new_lease(previous.as_ref(), lease, now);
        }
        self.lease = taken;
        Ok(token)
    }

    /// A new lease: what the runner held in memory of the sessions, an attempt or a brief is
    /// no longer known to match what the store holds; `previous` is the lease it replaced.
    fn took_a_new_lease(&mut self, previous: Option<&Lease>, taken: &Lease, now: i64) {
        // The sessions in memory (if any) are not known to match the
        // transcript. The next turn resumes the open segment through its stored handle when
        // that still lines up, forking the provider session unless the previous holder
        // let go cleanly (forking costs nothing in cache: the copy has the same prefix);
        // otherwise it starts a fresh segment. Either way the accounting is read back
        // from the ledger first, so the counts continue where the last holder left them.
        let fork = previous.is_some();
        let change = LeaseChange::Taken {
            token: taken.token.0,
            fork,
        };
        self.host.telemetry.lease(&self.mind.id, change);
        for session in [&mut self.persona, &mut self.selfs] {
            session.mark_broken(now);
            session.resume = Some(fork);
            session.restore = Some(super::session::Restore::NewLease);
        }
        // An unanswered attempt was rendered on the session just given up: one recorded
        // is in a segment no resume continues (it ends unanswered); one not recorded is
        // rendered again on whatever session the next turn stands on, which has not seen
        // the rendering (`attempt.rs`).
        self.attempt = None;
        // So is a held brief's: the recovery below looks at it afresh (`stranded.rs`),
        // knowing that one whose ask mark went unconfirmed was never sent.
        let held = self.held_brief.take();
        self.unsent_brief = held.and_then(|h| h.unsent_behind_its_mark());
        // Whoever held the lease before may have died in the middle of a Self run.
        self.check_stranded = true;
        // And may have died between a Persona answer and its commit (`lost.rs`).
        self.check_lost = true;
        self.stranded_by = None;
        // A run found stranded now is the previous holder's: the panic that ended the
        // runner this one replaced (`supervise.rs`) stopped it only if that holder was this
        // host. Another host that took the Mind meanwhile recovered the panicked run's brief
        // at its first step; what it left running, its own end stopped.
        if previous.is_some_and(|p| p.holder != self.holder) {
            self.panicked = None;
        }
    }

    /// The fence refused this runner's token (a renewal, or any fenced write of a step):
    /// someone else took the Mind over, so the lease is forgotten — the next step looks again
    /// instead of presenting the stale token until its copy of the lease nears expiry — and
    /// the sessions are no longer the Mind's.
    pub(super) fn lost_lease(&mut self, now: i64) {
        self.lease = None;
        self.host.telemetry.lease(&self.mind.id, LeaseChange::Lost);
        self.persona.mark_broken(now);
        self.selfs.mark_broken(now);
    }

    /// A keeper for the lease held now (see [`LeaseKeeper`]).
    pub(super) fn lease_keeper(&self) -> LeaseKeeper {
        LeaseKeeper {
            store: self.host.store.clone(),
            clock: self.host.clock.clone(),
            mind: self.mind.id.clone(),
            ttl_ms: self.host.config.lease_ttl_ms,
            host_leases: self.host.leases.clone(),
            lease: Mutex::new(self.lease.clone()),
        }
    }

    /// Takes back what the keeper renewed while the step ran. A fenced renewal leaves the lease
    /// as it was: the next [`MindRunner::token`] meets the fence and marks the sessions lost.
    pub(super) fn adopt_renewed(&mut self, keeper: &LeaseKeeper) {
        if let (Some(renewed), Some(held)) = (keeper.renewed(), self.lease.as_ref())
            && renewed.token == held.token
            && renewed.expires_at_ms > held.expires_at_ms
        {
            self.lease = Some(renewed);
        }
    }

    /// Stops both sessions' resources cleanly (a CLI child: stdin closed, SIGTERM, SIGKILL),
    /// on shutdown, before the lease is released. What a backend reports billed as it closes
    /// (a CLI child's turn of its own, finished or cut short while it was stopped) is taken
    /// then, each a ledger row that [`MindRunner::release`] commits before letting the lease
    /// go: left in the backend, nothing but the driver's warning would say it was paid for.
    pub async fn close(&mut self) {
        self.persona.backend.close().await;
        self.selfs.backend.close().await;
        let now = self.host.clock.now_ms();
        for role in super::pending::ROLES {
            // Requests of no call's: no turn's start, as for what a step's calls left behind.
            self.ledger_failed_attempts(role, now, (RowKind::Request, false));
        }
    }

    /// Lets the lease go (on shutdown), after a last attempt to commit an answer still held
    /// (`pending.rs`): released with it, the next holder would ask the provider again.
    pub async fn release(&mut self) -> Result<(), RuntimeError> {
        self.settle_before_release().await;
        self.take_mark_back(self.host.clock.now_ms()).await;
        if let Some(lease) = self.lease.take() {
            self.host
                .store
                .release_lease(&self.mind.id, lease.token)
                .await?;
            self.host
                .telemetry
                .lease(&self.mind.id, LeaseChange::Released);
            // Another host's runner waiting for the Mind takes it now, not at its next look.
            // Awaited here, not queued: the process is on its way out.
            if let Err(e) = self
                .host
                .store
                .announce_wake(&self.mind.id, &self.holder)
                .await
            {
                tracing::warn!(mind = %self.mind.id, error = %e, "announcing the release failed");
            }
        }
        Ok(())
    }
}
