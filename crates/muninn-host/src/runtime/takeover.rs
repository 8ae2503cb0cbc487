//! Taking a Mind over from a lease holder proven gone, instead of waiting out its lease.
//!
//! The runner's plain acquire is refused while another holder's lease is live. That holder may
//! be dead: this host's own previous process (crashed, restarted on the same data directory)
//! or another host whose database session ended. [`crate::cluster::Cluster::holder_state`]
//! says which; a proven-gone holder's lease is taken by compare-and-set on its token
//! (`Store::take_over_lease`), so two hosts racing for it get one lease between them, and the
//! old holder — should it somehow still run — is fenced from its next write. A holder that is
//! present is watched: its end wakes this runner at once.

use super::{MindRunner, RuntimeError};
use crate::cluster::HolderState;
use muninn_backend::Backend;
use muninn_store::Lease;

impl<B: Backend> MindRunner<B> {
    /// After a refused acquire: the lease taken from `previous` (the live holder read before
    /// the acquire) if that holder is proven gone, else `None` (and a watch on it if present).
    pub(super) async fn take_over(
        &self,
        previous: &Lease,
        now: i64,
    ) -> Result<Option<Lease>, RuntimeError> {
        let cluster = &self.host.cluster;
        let store = self.host.store.as_ref();
        match cluster.holder_state(store, &previous.holder).await? {
            HolderState::Gone(proof) => {
                let ttl = self.host.config.lease_ttl_ms;
                let taken = store
                    .take_over_lease(&self.mind.id, &self.holder, previous.token, ttl, now)
                    .await?;
                if taken.is_some() {
                    tracing::info!(
                        mind = %self.mind.id,
                        from = %previous.holder,
                        proof = proof.as_str(),
                        "lease taken over from a holder proven gone"
                    );
                }
                Ok(taken)
            }
            HolderState::Present => {
                cluster.watch(&self.host, &previous.holder, &self.mind.id);
                Ok(None)
            }
            HolderState::Unknown => Ok(None),
        }
    }
}
