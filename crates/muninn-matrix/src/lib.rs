//! # muninn-matrix
//!
//! Matrix rooms as a Mind's ears and mouth (seed A4). A [`Connector`] runs, for each Mind with a
//! Matrix account, one `/sync` long poll that puts every message from its rooms and its direct
//! chats into the Mind's mailbox, and one sender that posts the Mind's outbox into the rooms.
//! It speaks only to the store's mailbox and outbox (and wakes the Mind through a callback):
//! nothing here knows the runtime, and the runtime knows nothing of Matrix.
//!
//! ## Layout
//!
//! - [`config`] — what a connector runs with (accounts, secrets, bounds, the test fault points).
//! - [`client`] — the Client-Server API calls, over reqwest; [`wire`] — their JSON.
//! - [`rooms`] — which rooms an account listens in and what each is: public or direct.
//! - [`history`] — a room's recent history, mail and context read from a sync.
//! - `account` (private) — the account opened: logged in, the configured rooms joined.
//! - `upgrades` (private) — an upgraded room followed to its replacement.
//! - `session` (private) — the shared login, renewed on the fixed device when refused mid-run.
//! - `joins` (private) — configured rooms not joined at the start, tried again while it runs.
//! - `invites` (private) — invites accepted: direct chats, configured rooms, replacements.
//! - `first_start` (private) — a Mind's first start across a restart: its position, the rooms
//!   joined and what was said since.
//! - `ear` (private) — the `/sync` loop; `mouth` (private) — the outbox sender.
//! - `supervise` (private) — an account whose task panicked, logged, reported and restarted.
//! - [`error`] — [`MatrixError`].
//!
//! ## Guarantees
//!
//! - **Exactly once in.** A delivery's `source_id` is its event id, so intake is idempotent;
//!   the sync position is a store cursor written by [`Store::post_batch`] in the transaction
//!   that makes the batch durable. A crash before that commit re-reads the same batch from the
//!   old position; a crash after it reads on from the new one. A `limited` timeline is paged
//!   back with `/messages` to the previous position, so nothing between two syncs is skipped.
//!   The first sync (no stored position) is history, context and not mail, in the rooms the
//!   account was in before the Mind's first start, up to that start's position: what was said
//!   after it is mail; in a room it joined at that start, what follows the join is mail, also
//!   when a later process reads that first answer again (`first_start`).
//! - **Exactly once out.** Each outbox message is `PUT …/send/m.room.message/{txn}` with its
//!   request id as the transaction id, from the account's fixed device, then acknowledged
//!   with its event id; a crash between the two sends it again, which the homeserver answers
//!   with the same event. A rate limit (`M_LIMIT_EXCEEDED`) is waited out for its
//!   `retry_after_ms`; a transient failure is retried with backoff; a refusal no retry can
//!   change is recorded on the message ([`Store::fail_outbox`]), listed by `muninn status`,
//!   and never silently dropped.
//! - **Unanswered mail is not outrun.** While the Mind has `max_pending` or more deliveries
//!   past its ack position, the account does not sync: its position stays until the Mind
//!   catches up.
//! - **Secrets stay out.** Tokens and passwords travel only in the login body and the
//!   `Authorization` header; [`config::Secret`] prints as `Secret(…)`, and errors never carry
//!   a request body.
//!
//! [`Store::post_batch`]: muninn_store::Store::post_batch
//! [`Store::fail_outbox`]: muninn_store::Store::fail_outbox

mod account;
pub mod client;
pub mod config;
mod ear;
pub mod error;
mod first_start;
pub mod history;
mod invites;
mod joins;
mod mouth;
pub mod rooms;
mod session;
mod supervise;
mod upgrades;
pub mod wire;

pub use config::{Account, ConnectorConfig, Credential, FaultPoint, Reread, Secret};
pub use error::MatrixError;
pub use joins::RoomNotJoined;

use muninn_backend::clock::Clock;
use muninn_store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// Called with a Mind's id after a batch with new mail for it was committed (`muninn serve`
/// passes the host's `signals.wake`).
pub type OnDelivered = Arc<dyn Fn(&str) + Send + Sync>;

/// How an account is doing, reported when it changes (`muninn serve` hands it to the host's
/// telemetry, so `muninn status` and `/readyz` show an account that cannot log in or sync).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountHealth {
    /// Logging in and joining its rooms.
    Opening,
    /// Syncing and sending.
    Open,
    /// The Mind has `max_pending` or more unanswered deliveries: the sync position stays.
    Held {
        /// Deliveries waiting (all of them: the store's count).
        pending: usize,
    },
    /// Failing, retried with a backoff: `stage` is `login`, `sync`, `store`, or `panic` (the
    /// account's task panicked and is opened again).
    Failing {
        /// Where it fails.
        stage: &'static str,
        /// The error, as logged (never a credential).
        error: String,
    },
}

/// Called with a Mind's id and its account's health whenever that changes (and at every
/// failure, so a count of failures in a row can be kept).
pub type OnHealth = Arc<dyn Fn(&str, AccountHealth) + Send + Sync>;

/// One gap paged only to `max_gap_events`: the events beyond it were skipped, never to be
/// delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapCut {
    /// The room whose gap it was.
    pub room_id: String,
    /// When the answer that held it was committed (the skip became final), Unix ms.
    pub at_ms: i64,
    /// Events read from the gap before the cut (the limit). How many lay beyond is not known:
    /// `/messages` pages give no count, and counting them would mean paging what the limit is
    /// there not to page.
    pub events_read: u64,
}

/// The gaps one account cut, since the connector started.
///
/// Kept in memory, not in the store: what a cut lost is lost for good whether or not the record
/// survives a restart (the position is past it and the error log names it), and the operator
/// needs to see that it happened on a running host, not an exact lifetime tally. A record
/// in the store would be a migration on two backends for an operator's mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapsCut {
    /// Gaps cut since the connector started.
    pub count: u64,
    /// The latest.
    pub last: GapCut,
}

/// Called with a Mind's id and its account's gaps cut after a commit made a cut final.
pub type OnGapCut = Arc<dyn Fn(&str, &GapsCut) + Send + Sync>;

/// Called with a Mind's id and the configured rooms its account is not in yet, when the account
/// opens and whenever that list changes (empty: every configured room is joined).
pub type OnRoomsNotJoined = Arc<dyn Fn(&str, &[RoomNotJoined]) + Send + Sync>;

/// What the connector did so far, summed over its accounts (and the gaps cut, per account).
#[derive(Debug, Default)]
pub struct Stats {
    syncs: AtomicU64,
    delivered: AtomicU64,
    holds: AtomicU64,
    pages: AtomicU64,
    context_fetches: AtomicU64,
    gaps_cut: AtomicU64,
    sent: AtomicU64,
    rate_limited: AtomicU64,
    failed: AtomicU64,
    gaps_by_mind: Mutex<BTreeMap<String, GapsCut>>,
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// `/sync` answers committed.
    pub syncs: u64,
    /// New deliveries committed.
    pub delivered: u64,
    /// Times a sync was held back by `max_pending`.
    pub holds: u64,
    /// `/messages` pages read to fill a `limited` timeline's gap or find a join.
    pub pages: u64,
    /// `/messages` pages read for context the account never saw.
    pub context_fetches: u64,
    /// Gaps paged only to `max_gap_events` in committed answers: the events beyond were skipped
    /// (each logged at error; per account in [`Stats::gaps_cut_of`]).
    pub gaps_cut: u64,
    /// Outbox messages the homeserver accepted and the outbox acknowledged.
    pub sent: u64,
    /// Sends answered with a rate limit (and retried after its wait).
    pub rate_limited: u64,
    /// Outbox messages recorded as failed.
    pub failed: u64,
}

impl Stats {
    /// The counts now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            syncs: get(&self.syncs),
            delivered: get(&self.delivered),
            holds: get(&self.holds),
            pages: get(&self.pages),
            context_fetches: get(&self.context_fetches),
            gaps_cut: get(&self.gaps_cut),
            sent: get(&self.sent),
            rate_limited: get(&self.rate_limited),
            failed: get(&self.failed),
        }
    }

    /// The gaps `mind`'s account cut since the connector started (`None`: none).
    pub fn gaps_cut_of(&self, mind: &str) -> Option<GapsCut> {
        self.gaps().get(mind).cloned()
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `cut` for `mind` and returns the account's record.
    fn gap_cut(&self, mind: &str, cut: GapCut) -> GapsCut {
        Stats::add(&self.gaps_cut, 1);
        let mut gaps = self.gaps();
        let count = gaps.get(mind).map_or(0, |g| g.count).saturating_add(1);
        let record = GapsCut { count, last: cut };
        gaps.insert(mind.to_owned(), record.clone());
        record
    }

    /// The per-account records (a poisoned lock still holds valid counts: nothing panics while
    /// holding it).
    fn gaps(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, GapsCut>> {
        self.gaps_by_mind
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The Matrix connector of a host: every configured account's `/sync` loop and sender.
pub struct Connector {
    config: ConnectorConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    on_delivered: OnDelivered,
    on_health: OnHealth,
    on_gap_cut: OnGapCut,
    on_rooms_not_joined: OnRoomsNotJoined,
    outbox_changed: Option<watch::Receiver<u64>>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How often a sender looks at the outbox when nothing told it to.
const OUTBOX_POLL: Duration = Duration::from_secs(2);

impl Connector {
    /// A connector over `store`, reading the time from `clock`.
    pub fn new(config: ConnectorConfig, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Connector {
        Connector {
            config,
            store,
            clock,
            on_delivered: Arc::new(|_| {}),
            on_health: Arc::new(|_, _| {}),
            on_gap_cut: Arc::new(|_, _| {}),
            on_rooms_not_joined: Arc::new(|_, _| {}),
            outbox_changed: None,
            stats: Arc::new(Stats::default()),
        }
    }

    /// Calls `wake` with the Mind's id after each committed batch that brought it new mail.
    pub fn on_delivered(mut self, wake: OnDelivered) -> Connector {
        self.on_delivered = wake;
        self
    }

    /// Calls `report` with a Mind's id and its account's health as it changes.
    pub fn on_health(mut self, report: OnHealth) -> Connector {
        self.on_health = report;
        self
    }

    /// Calls `report` with a Mind's id and its account's gaps cut each time a committed answer
    /// cut one (a cut is not a failure: the sync goes on, so it is not part of the health).
    pub fn on_gap_cut(mut self, report: OnGapCut) -> Connector {
        self.on_gap_cut = report;
        self
    }

    /// Calls `report` with a Mind's id and the configured rooms its account could not join yet
    /// (at its open, then at each change; tried again on a backoff while it runs).
    pub fn on_rooms_not_joined(mut self, report: OnRoomsNotJoined) -> Connector {
        self.on_rooms_not_joined = report;
        self
    }

    /// Senders look at the outbox whenever `changed` changes (the host bumps it after a turn
    /// recorded replies), besides every couple of seconds.
    pub fn outbox_changed(mut self, changed: watch::Receiver<u64>) -> Connector {
        self.outbox_changed = Some(changed);
        self
    }

    /// The connector's counts, live.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Runs every account until `stop` turns true (or its sender is dropped). An account whose
    /// login or rooms fail keeps retrying with backoff, each failure logged with its cause; no
    /// failure of one account stops another, and an account whose task panicked is reported
    /// and opened again (`supervise`).
    pub async fn run(self, stop: watch::Receiver<bool>) {
        let Connector {
            config,
            store,
            clock,
            on_delivered,
            on_health,
            on_gap_cut,
            on_rooms_not_joined,
            outbox_changed,
            stats,
        } = self;
        let outbox_changed = outbox_changed.unwrap_or_else(|| watch::channel(0).1);
        let contexts = config
            .accounts
            .iter()
            .map(|account| account::Context {
                config: config.clone(),
                account: account.clone(),
                store: store.clone(),
                clock: clock.clone(),
                stats: stats.clone(),
                on_health: on_health.clone(),
                on_gap_cut: on_gap_cut.clone(),
                on_rooms_not_joined: on_rooms_not_joined.clone(),
            })
            .collect();
        supervise::run_accounts(contexts, on_delivered, outbox_changed, stop).await;
    }
}
