//! The Mind's lease: one writer per Mind, fenced.

use super::{MindRunner, RuntimeError};
use crate::telemetry::LeaseChange;
use muninn_backend::Backend;
use muninn_store::{FencingToken, StoreError};

impl<B: Backend> MindRunner<B> {
    /// Takes or renews the lease; `None` if another host holds it.
    pub(super) async fn token(&mut self, now: i64) -> Result<Option<FencingToken>, RuntimeError> {
        let store = &self.host.store;
        let ttl = self.host.config.lease_ttl_ms;
        if let Some(lease) = &self.lease {
            if lease.expires_at_ms - now > ttl / 3 {
                return Ok(Some(lease.token));
            }
            match store
                .renew_lease(&self.mind.id, lease.token, ttl, now)
                .await
            {
                Ok(renewed) => {
                    let token = renewed.token;
                    self.lease = Some(renewed);
                    return Ok(Some(token));
                }
                Err(StoreError::Fenced { .. }) => {
                    // Someone else took over: our sessions are no longer the Mind's.
                    self.lease = None;
                    self.host.telemetry.lease(&self.mind.id, LeaseChange::Lost);
                    self.persona.mark_broken(now);
                    self.selfs.mark_broken(now);
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Whether the lease was released by a clean shutdown (no holder) or is still held, live
        // or lapsed: in the second case its holder — another host, or this host's previous
        // process — may still be writing to the provider's session.
        let previous = store.lease(&self.mind.id).await?;
        let taken = store
            .acquire_lease(&self.mind.id, &self.holder, ttl, now)
            .await?;
        let token = taken.as_ref().map(|l| l.token);
        if taken.is_some() && self.lease.is_none() {
            // A new lease: the sessions in memory (if any) are not known to match the
            // transcript. The next turn resumes the open segment through its stored handle when
            // that still lines up, forking the provider session unless the previous holder
            // let go cleanly (forking costs nothing in cache: the copy has the same prefix);
            // otherwise it starts a fresh segment. Either way the accounting is read back
            // from the ledger first, so the counts continue where the last holder left them.
            let fork = previous.is_some();
            if let Some(lease) = &taken {
                let token = lease.token.0;
                let change = LeaseChange::Taken { token, fork };
                self.host.telemetry.lease(&self.mind.id, change);
            }
            for session in [&mut self.persona, &mut self.selfs] {
                session.mark_broken(now);
                session.resume = Some(fork);
                session.restore = true;
            }
        }
        self.lease = taken;
        Ok(token)
    }

    /// Lets the lease go (on shutdown).
    pub async fn release(&mut self) -> Result<(), RuntimeError> {
        if let Some(lease) = self.lease.take() {
            self.host
                .store
                .release_lease(&self.mind.id, lease.token)
                .await?;
            self.host
                .telemetry
                .lease(&self.mind.id, LeaseChange::Released);
        }
        Ok(())
    }
}
