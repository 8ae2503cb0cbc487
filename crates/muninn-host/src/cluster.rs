//! Hosts sharing one database: cross-host wake-ups, presence, and proof that a lease's holder
//! is gone.
//!
//! - **Wake-ups.** Once this host listens ([`spawn`]), [`crate::Signals::wake`] hands the Mind
//!   to the publisher, which announces it through the store (PostgreSQL `NOTIFY`); the listener
//!   wakes the local runner of every Mind announced by *another* host. The holder of a Mind's
//!   lease therefore answers a delivery posted anywhere within milliseconds, not at its next
//!   periodic look. A lost notification costs only latency: runners read the mailbox, and an
//!   idle holder still looks every third of the lease.
//! - **Presence.** The host keeps its presence lock ([`muninn_store::hosts`]) and re-checks it
//!   every [`PRESENCE_CHECK`]; a broken presence session is logged loudly and re-taken.
//! - **Proof and watch.** A runner refused a lease asks [`Cluster::holder_state`] whether the holder
//!   is provably gone: an earlier process of this very instance ([`crate::instance`]) or a free
//!   presence lock. If the holder is alive, the runner arms [`Cluster::watch`], which blocks on
//!   the holder's presence lock and wakes the runner the moment that host's session ends — a
//!   failover in milliseconds instead of a lease TTL.

use crate::Host;
use crate::instance::Instance;
use muninn_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the presence session is checked (and re-taken if it broke).
pub const PRESENCE_CHECK: Duration = Duration::from_secs(2);
/// Wake-ups waiting for the publisher; more are dropped (the holder's periodic look covers them).
const ANNOUNCE_QUEUE: usize = 1024;
/// Back-off after the listener or a watcher failed (the database is unreachable).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why a lease's live holder may be taken over from at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// It was an earlier process of this host's instance: this process holds the instance's
    /// lock, which that one held while it ran.
    EarlierSelf,
    /// Its presence lock is free: its database session ended.
    PresenceGone,
}

impl Proof {
    /// How the log names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Proof::EarlierSelf => "earlier process of this instance",
            Proof::PresenceGone => "presence lock free",
        }
    }
}

/// What a host knows about a lease's live holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderState {
    /// Provably gone: its lease may be taken over now.
    Gone(Proof),
    /// Its presence lock is held: alive (worth watching).
    Present,
    /// The store cannot tell (SQLite): the lease must run out.
    Unknown,
}

/// What this host knows about itself among the hosts on its database.
#[derive(Debug, Default)]
pub struct Cluster {
    /// This process's identity (`None`: an embedded host with no data-directory identity,
    /// which proves nothing about earlier processes).
    instance: Option<Instance>,
    /// Holders being watched, each with the local Minds to wake when it goes.
    watched: Mutex<HashMap<String, Vec<String>>>,
    /// Why this host's presence lock is not held, while it is not (`/readyz` says so).
    presence_failure: Mutex<Option<String>>,
}

impl Cluster {
    /// The cluster view of a host running as `instance`.
    pub fn new(instance: Instance) -> Cluster {
        Cluster {
            instance: Some(instance),
            ..Cluster::default()
        }
    }

    /// Why this host's presence lock is not held, if it is not: other hosts may then take its
    /// Minds over (and fence it). `None` while held, or where the store has no presence.
    pub fn presence_failure(&self) -> Option<String> {
        self.presence_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_presence_failure(&self, failure: Option<String>) {
        *self
            .presence_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = failure;
    }

    /// Whether `holder`, refused to us as a live lease holder, is provably gone. Free of I/O
    /// for an earlier self; otherwise one presence query (`None` where the store cannot tell).
    pub async fn holder_state(
        &self,
        store: &dyn Store,
        holder: &str,
    ) -> Result<HolderState, StoreError> {
        if self
            .instance
            .as_ref()
            .is_some_and(|i| i.is_earlier_self(holder))
        {
            return Ok(HolderState::Gone(Proof::EarlierSelf));
        }
        Ok(match store.holder_gone(holder).await? {
            Some(true) => HolderState::Gone(Proof::PresenceGone),
            Some(false) => HolderState::Present,
            None => HolderState::Unknown,
        })
    }

    /// Wakes `mind`'s runner here once `holder`'s presence ends. One watcher (one database
    /// session) per holder, however many Minds wait on it; a watcher that failed is dropped
    /// and re-armed by the runner's next refused look.
    pub fn watch(self: &Arc<Self>, host: &Host, holder: &str, mind: &str) {
        let start = {
            let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
            let minds = watched.entry(holder.to_owned()).or_default();
            let start = minds.is_empty();
            if !minds.iter().any(|m| m == mind) {
                minds.push(mind.to_owned());
            }
            start
        };
        if !start {
            return;
        }
        let cluster = self.clone();
        let store = host.store.clone();
        let signals = host.signals.clone();
        let holder = holder.to_owned();
        tokio::spawn(async move {
            let gone = store.await_holder_gone(&holder).await;
            if let Err(e) = &gone {
                tracing::warn!(%holder, error = %e, "watching a lease holder failed");
                tokio::time::sleep(RETRY_AFTER).await;
            }
            let minds = cluster
                .watched
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&holder)
                .unwrap_or_default();
            if matches!(gone, Ok(true)) {
                tracing::info!(%holder, minds = minds.len(), "a lease holder's host is gone");
                for mind in minds {
                    signals.wake_local(&mind);
                }
            }
        });
    }
}

/// Starts the host's side of the cluster until `shutdown`: the wake-up publisher and
/// listener, and the presence keeper, for `holder` (this process's holder name). Returns once
/// the first presence check ran, so no lease is taken before this host is seen present.
pub async fn spawn(host: &Host, holder: &str, shutdown: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(listen(host.clone(), holder.to_owned(), shutdown.clone()));
    let (store, cluster) = (host.store.clone(), host.cluster.clone());
    let holder = holder.to_owned();
    if !keep_presence(store.as_ref(), &cluster, &holder).await {
        return;
    }
    let mut shutdown = shutdown;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(PRESENCE_CHECK) => {}
                _ = shutdown.changed() => return,
            }
            keep_presence(store.as_ref(), &cluster, &holder).await;
        }
    });
}

/// One presence check, its outcome kept for `/readyz`; `false` if the store has none.
async fn keep_presence(store: &dyn Store, cluster: &Cluster, holder: &str) -> bool {
    match store.hold_presence(holder).await {
        Ok(held) => {
            if cluster.presence_failure().is_some() {
                tracing::info!(%holder, "presence lock held again");
            }
            cluster.set_presence_failure(None);
            held
        }
        Err(e) => {
            tracing::error!(
                %holder,
                error = %e,
                "presence lock not held: other hosts may take this host's Minds over (fencing \
                 stops its writes); retrying"
            );
            cluster.set_presence_failure(Some(e.to_string()));
            true
        }
    }
}

/// Announces each local wake-up to the other hosts, in order, one `NOTIFY` each.
async fn publish(store: Arc<dyn Store>, holder: String, mut rx: mpsc::Receiver<String>) {
    while let Some(mind) = rx.recv().await {
        if let Err(e) = store.announce_wake(&mind, &holder).await {
            tracing::warn!(%mind, error = %e, "announcing a wake-up to other hosts failed");
        }
    }
}

/// Wakes local runners for wake-ups other hosts announce, until `shutdown`. Only once it
/// listens does this host announce its own (a store without a listener, SQLite, has no one
/// to tell, and [`crate::Signals::wake`] then keeps waking every local runner itself).
async fn listen(host: Host, holder: String, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut listener = loop {
        match host.store.listen_wakes().await {
            Ok(Some(listener)) => break listener,
            Ok(None) => return,
            Err(e) => tracing::warn!(error = %e, "listening for other hosts' wake-ups failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_AFTER) => {}
            _ = shutdown.changed() => return,
        }
    };
    let (tx, rx) = mpsc::channel(ANNOUNCE_QUEUE);
    host.signals.announce_to(tx);
    tokio::spawn(publish(host.store.clone(), holder.clone(), rx));
    let local: Vec<String> = host.config.minds.iter().map(|m| m.id.clone()).collect();
    loop {
        let received = tokio::select! {
            received = listener.recv() => received,
            _ = shutdown.changed() => return,
        };
        match received {
            Ok(Some(wake)) if wake.from != holder && local.contains(&wake.mind) => {
                host.signals.wake_local(&wake.mind);
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                // Reconnected: what was announced meanwhile is lost, so every Mind looks once.
                tracing::warn!("wake-up listener reconnected: waking every Mind once");
                for mind in &local {
                    host.signals.wake_local(mind);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listening for other hosts' wake-ups failed");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}
