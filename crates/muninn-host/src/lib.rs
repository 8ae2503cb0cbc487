//! # muninn-host
//!
//! `muninn serve`: the host that runs Minds as persistent, append-only sessions.
//!
//! ## Layout
//!
//! - [`config`] — `muninn.toml`: Minds, their doctrine, persona state, rooms, backend, policy and
//!   bounds; validated at load, with a checked-in JSON Schema.
//! - [`backends`] — the simulator or the Anthropic API behind the sessions.
//! - [`runtime`] — the Persona and Self loops, a file per job: mailbox → batch → decider →
//!   render → backend → ledger → validated reply → outbox → ack, one writer per Mind under a
//!   lease, every decision taken from the core's session accounting.
//! - [`http`] — the HTTP API's server (axum, loopback, bearer token). Its wire types, token and
//!   client are in `muninn-api`, which clients use without linking the server. Beside the API:
//!   `/healthz`, `/readyz` and `/metrics` (no token) and the [`dashboard`].
//! - [`telemetry`] — what the host tells its operator: one log event and one set of counters per
//!   request, retry, session event, failed step and lease or settings change, fed from a few
//!   named points of the runtime; the Prometheus exposition and the readiness checks.
//! - [`cluster`] and [`instance`] — several hosts on one database: wake-ups across hosts,
//!   presence, and the proof that a lease's holder is gone (a crashed earlier process of this
//!   data directory, or a host whose database session ended), so its Minds move at once.
//! - [`crash_points`] — named places where a test's `MUNINN_FAULT` stops the process dead
//!   (inert unless armed), for the crash harness.
//! - [`dashboard`] — server-rendered pages (HTML, inline SVG charts) over the store and the
//!   telemetry: each Mind's state, segments, costs against the simple designs, decisions, ledger.
//!
//! ## Invariants
//!
//! - The transcript is the truth: everything shown to or said by a Mind is recorded durably before
//!   it is acted on; a backend session is a cache of it.
//! - Exactly-once effects: a batch is acknowledged only in the same transaction that records its
//!   replies in the outbox, with idempotent request ids `<batch>-<index>`.
//! - One writer per Mind: every write carries the Mind's lease fencing token.
//! - One economy: the decider's counters are `muninn_core::session::Accounting`, fed by each
//!   ledger row as it is written (and read back from the ledger after a new lease), so replaying
//!   the ledger (`muninn replay --closed-loop`) reproduces every decision the host took.

pub mod backends;
pub mod cluster;
pub mod config;
pub mod crash_points;
pub mod dashboard;
pub mod http;
pub mod instance;
pub mod runtime;
pub mod telemetry;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use tokio::sync::{Notify, mpsc};

/// Wake-ups between the HTTP layer and the runtime.
///
/// Each Mind has its own wake-up ([`Signals::wake`] / [`Signals::waiter`]), so a delivery wakes
/// the one runner that will answer it. (One `Notify` shared by every runner woke an arbitrary
/// one; the Mind concerned then looked only on its own timer, a third of the lease, 10 s by
/// default.) A wake-up is a [`Notify`] permit: sent while the runner is busy, or before
/// it first waits (even before it started), it is kept, and the runner's next wait returns at
/// once, so none is lost; several in a row collapse into one, which is enough because the
/// runner reads the store, not the wake-up.
#[derive(Debug, Default)]
pub struct Signals {
    /// Each Mind's wake-up by Mind id, made by whichever comes first: its runner asking for it
    /// or a wake-up sent to it. One entry per Mind that exists (intake checks the Mind first).
    minds: Mutex<HashMap<String, Arc<Notify>>>,
    /// The runtime recorded outbox messages or transcript items: long-polls re-read. Shared by
    /// every Mind and fired with `notify_waiters`, which wakes every waiting long poll, each of
    /// which re-reads its own Mind; so none waits for a wake-up meant for another.
    pub outbox: Notify,
    /// What each Mind's runner on this host is doing, by Mind id (see [`Signals::set_activity`]).
    activity: Mutex<HashMap<String, Activity>>,
    /// How many wake-ups each Mind was sent on this host, by Mind id ([`Signals::wakes`]): a
    /// runner keeps what it read of the store between turns only while this stays put.
    wakes: Mutex<HashMap<String, Arc<AtomicU64>>>,
    /// Where wake-ups go to reach the other hosts on the database ([`cluster`]); unset for a
    /// host alone.
    announce: OnceLock<mpsc::Sender<String>>,
    /// Deliveries each Mind's runner on this host set aside as undeliverable (too large for
    /// any request: `runtime/window.rs`), by Mind id, since the host started.
    undeliverable: Mutex<HashMap<String, u64>>,
}

/// What a runner is doing: [`muninn_api::wire::Activity`], shown by `GET /v1/minds/{mind}`.
pub use muninn_api::wire::Activity;

impl Signals {
    /// Something arrived for `mind` (a delivery, a brief, a settings change, the brake): its
    /// runner looks at the store now, or right after the step it is in.
    /// Other hosts on the database are told too ([`cluster`]), so the holder of the Mind's
    /// lease wakes wherever it runs.
    ///
    /// With other hosts to tell, a local runner that another host holds the Mind from is not
    /// woken: it could only be refused again (a lease and a presence query on every delivery
    /// posted through this host, beside the holder's turn). It moves when the holder goes — its
    /// watch on the holder's presence, or the holder's release announcing a wake-up.
    pub fn wake(&self, mind: &str) {
        let Some(announce) = self.announce.get() else {
            self.wake_local(mind);
            return;
        };
        if self.activity(mind) != Some(Activity::NotLeader) {
            self.wake_local(mind);
        }
        if announce.try_send(mind.to_owned()).is_err() {
            // Full (or stopped): the holder's periodic look still finds the work.
            tracing::debug!(mind, "cross-host wake-up dropped");
        }
    }

    /// Wakes `mind`'s runner on this host only (a wake-up from another host, or the runner
    /// waking itself).
    pub fn wake_local(&self, mind: &str) {
        // Counted before the permit, so a runner woken by it sees the new count.
        self.wakes(mind).fetch_add(1, Ordering::SeqCst);
        self.waiter(mind).notify_one();
    }

    /// The count of wake-ups sent to `mind` on this host (the same counter on every call): a
    /// change means a delivery, brief, settings change or brake may be waiting for it, so its
    /// runner re-reads what it held (`runtime/held.rs`).
    pub fn wakes(&self, mind: &str) -> Arc<AtomicU64> {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        wakes.entry(mind.to_owned()).or_default().clone()
    }

    /// Sends every later [`Signals::wake`] to `announce` as well (set once, at start).
    pub fn announce_to(&self, announce: mpsc::Sender<String>) {
        if self.announce.set(announce).is_err() {
            tracing::warn!("cross-host wake-ups were already set up");
        }
    }

    /// The wake-up `mind`'s runner waits on (`waiter.notified().await`); the same one on every
    /// call, so take it once, before the first look at the store.
    pub fn waiter(&self, mind: &str) -> Arc<Notify> {
        // No code panics while holding the lock, but a poisoned map is still a valid map.
        let mut minds = self.minds.lock().unwrap_or_else(PoisonError::into_inner);
        match minds.get(mind) {
            Some(waiter) => waiter.clone(),
            None => minds.entry(mind.to_owned()).or_default().clone(),
        }
    }

    /// `mind`'s runner reports what it is doing (after each step, and as a turn starts).
    pub fn set_activity(&self, mind: &str, activity: Activity) {
        let mut map = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(mind.to_owned(), activity);
    }

    /// `mind`'s runner set a delivery aside as undeliverable (`runtime/window.rs`).
    pub fn set_aside(&self, mind: &str) {
        let mut map = self
            .undeliverable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *map.entry(mind.to_owned()).or_default() += 1;
    }

    /// Deliveries `mind`'s runner on this host set aside as undeliverable since it started.
    pub fn undeliverable(&self, mind: &str) -> u64 {
        let map = self
            .undeliverable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(mind).copied().unwrap_or(0)
    }

    /// What `mind`'s runner on this host last reported, if it runs here.
    pub fn activity(&self, mind: &str) -> Option<Activity> {
        let map = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(mind).cloned()
    }
}

/// What every part of a running host shares.
#[derive(Clone)]
pub struct Host {
    /// The durable state.
    pub store: Arc<dyn muninn_store::Store>,
    /// The validated configuration.
    pub config: Arc<config::Config>,
    /// The clock.
    pub clock: Arc<dyn muninn_backend::clock::Clock>,
    /// Wake-ups.
    pub signals: Arc<Signals>,
    /// Logs and counters (see [`telemetry`]).
    pub telemetry: Arc<telemetry::Telemetry>,
    /// The prices the Minds' models are charged at (the dashboard prices the simple designs
    /// with them).
    pub prices: Arc<muninn_core::price::PriceTable>,
    /// This host among the hosts on its database ([`cluster`]).
    pub cluster: Arc<cluster::Cluster>,
    /// The leases the host renewed for all its Minds at once ([`runtime::HostLeases`]).
    pub leases: Arc<runtime::HostLeases>,
    /// The crash point a test armed, if any ([`crash_points`]).
    pub crash_points: Arc<crash_points::CrashPoints>,
}

impl Host {
    /// A host over `store` with `config` and `clock`, the embedded prices, no wake-up pending
    /// and its counters at zero.
    pub fn new(
        store: Arc<dyn muninn_store::Store>,
        config: config::Config,
        clock: Arc<dyn muninn_backend::clock::Clock>,
    ) -> Host {
        Host {
            store,
            config: Arc::new(config),
            clock,
            signals: Arc::new(Signals::default()),
            telemetry: Arc::new(telemetry::Telemetry::default()),
            prices: Arc::new(muninn_core::price::PriceTable::embedded()),
            cluster: Arc::new(cluster::Cluster::default()),
            leases: Arc::new(runtime::HostLeases::default()),
            crash_points: Arc::new(crash_points::CrashPoints::default()),
        }
    }

    /// The same host armed at a crash point (tests only: [`crash_points`]).
    pub fn with_crash_points(self, crash_points: crash_points::CrashPoints) -> Host {
        Host {
            crash_points: Arc::new(crash_points),
            ..self
        }
    }

    /// The same host running as `instance` (its holder name and restart proof).
    pub fn with_instance(self, instance: instance::Instance) -> Host {
        Host {
            cluster: Arc::new(cluster::Cluster::new(instance)),
            ..self
        }
    }

    /// The same host charging `prices` (a configured price table).
    pub fn with_prices(self, prices: muninn_core::price::PriceTable) -> Host {
        Host {
            prices: Arc::new(prices),
            ..self
        }
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
