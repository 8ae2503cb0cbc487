//! Lease renewal per host, not per Mind.
//!
//! Were each runner to renew its own lease once a third or less was left, N Minds would make
//! N writes every third of the lease — 1,000 a second for 10,000 Minds at the default 30 s —
//! to say one thing: this host is alive. A host task renews every lease its holder name holds in one statement ([`Store::renew_leases`]) every
//! quarter of the lease ([`spawn_renewer`]), and publishes what it renewed in [`HostLeases`].
//! A runner whose copy is due for renewal adopts the host's renewed lease when it has the same
//! token (`lease.rs`), and renews on its own only when the host's renewal is missing or late —
//! a host that runs no renewer (the benches, most tests), or a store that is failing.
//!
//! Correctness does not rest on this: fencing guards every write, and a renewal by holder name
//! can only extend leases nobody else took (a takeover changes the holder). What it must not
//! do is keep a Mind no runner here serves: a lease the statement renewed whose Mind has no
//! runner on this host any more (its task ended; a panicked one gets a new runner at once,
//! `supervise.rs`) is released at once, so another host can take the Mind.

use crate::Host;
use muninn_store::{Lease, StoreError};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// What the host's renewal last renewed, and which Minds have a runner here; see the module
/// docs.
#[derive(Debug, Default)]
pub struct HostLeases {
    /// The leases renewed by the last host renewal, by Mind.
    renewed: Mutex<HashMap<String, Lease>>,
    /// Runners alive on this host, by (holder, Mind): a count, since tests run two runners of
    /// one Mind under different holders on one host.
    runners: Mutex<HashMap<(String, String), usize>>,
}

impl HostLeases {
    /// The host's renewal of `held` if it is newer: the same Mind and token, a later expiry.
    pub(super) fn newer(&self, held: &Lease) -> Option<Lease> {
        let renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        renewed
            .get(&held.mind)
            .filter(|l| l.token == held.token && l.expires_at_ms > held.expires_at_ms)
            .cloned()
    }

    /// A runner for `mind` under `holder` exists on this host.
    pub(super) fn runner_started(&self, holder: &str, mind: &str) {
        let mut runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        *runners
            .entry((holder.to_owned(), mind.to_owned()))
            .or_default() += 1;
    }

    /// That runner is gone.
    pub(super) fn runner_stopped(&self, holder: &str, mind: &str) {
        let mut runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (holder.to_owned(), mind.to_owned());
        if let Some(count) = runners.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                runners.remove(&key);
            }
        }
    }

    fn has_runner(&self, holder: &str, mind: &str) -> bool {
        let runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        runners.contains_key(&(holder.to_owned(), mind.to_owned()))
    }
}

/// Renews every lease `holder` holds, in one statement, and publishes them to the runners;
/// releases the renewed leases of Minds with no runner here. Returns the leases kept.
pub async fn renew_host_leases(host: &Host, holder: &str) -> Result<Vec<Lease>, StoreError> {
    let now = host.clock.now_ms();
    let renewed = host
        .store
        .renew_leases(holder, host.config.lease_ttl_ms, now)
        .await?;
    let mut kept = Vec::with_capacity(renewed.len());
    for lease in renewed {
        if host.leases.has_runner(holder, &lease.mind) {
            kept.push(lease);
        } else {
            tracing::warn!(mind = %lease.mind, "no runner serves this Mind here: releasing its lease");
            host.store.release_lease(&lease.mind, lease.token).await?;
        }
    }
    let mut published = host
        .leases
        .renewed
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    *published = kept.iter().map(|l| (l.mind.clone(), l.clone())).collect();
    Ok(kept)
}

/// Runs [`renew_host_leases`] every quarter of the lease until `shutdown` turns true (a failure
/// is logged and tried again next time; the runners renew on their own meanwhile).
pub fn spawn_renewer(
    host: Host,
    holder: String,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let every = Duration::from_millis((host.config.lease_ttl_ms / 4).max(10) as u64);
    super::run::spawn_every("lease renewal", every, shutdown, move || {
        let (host, holder) = (host.clone(), holder.clone());
        async move {
            if let Err(e) = renew_host_leases(&host, &holder).await {
                tracing::warn!(error = %e, "the host's lease renewal failed; runners renew their own");
            }
        }
    })
}
