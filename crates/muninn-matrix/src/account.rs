//! One account: log in on its fixed device, learn and join its rooms, then run its ear (the
//! `/sync` loop) and its mouth (the sender) side by side until the connector stops.

use crate::client::MatrixClient;
use crate::config::{Account, ConnectorConfig};
use crate::error::MatrixError;
use crate::joins::{self, NotJoined, RoomNotJoined};
use crate::rooms::{Directory, RoomKind};
use crate::session::Session;
use crate::upgrades;
use crate::{OnDelivered, Stats, ear, first_start, mouth};
use muninn_backend::clock::Clock;
use muninn_store::Store;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// What an account's tasks share.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) config: ConnectorConfig,
    pub(crate) account: Account,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) on_health: crate::OnHealth,
    pub(crate) on_gap_cut: crate::OnGapCut,
    pub(crate) on_rooms_not_joined: crate::OnRoomsNotJoined,
}

impl Context {
    /// Reports the account's health for its Mind.
    pub(crate) fn health(&self, health: crate::AccountHealth) {
        (self.on_health)(&self.account.mind, health);
    }

    /// Reports the configured rooms the account is not in yet (empty: all joined).
    pub(crate) fn rooms_not_joined(&self, rooms: &[RoomNotJoined]) {
        (self.on_rooms_not_joined)(&self.account.mind, rooms);
    }

    /// Counts a gap cut in an answer now committed and reports the account's record.
    pub(crate) fn gap_cut(&self, cut: crate::GapCut) {
        let gaps = self.stats.gap_cut(&self.account.mind, cut);
        (self.on_gap_cut)(&self.account.mind, &gaps);
    }
}

/// A logged-in account with its rooms.
pub(crate) struct Opened {
    pub(crate) session: Arc<Session>,
    pub(crate) client: MatrixClient,
    pub(crate) directory: Arc<Mutex<Directory>>,
    /// Rooms the account was in before it joined its configured rooms at this start: a room
    /// not among them is new to it, and its history before the join is context.
    pub(crate) joined: HashSet<String>,
    /// Rooms it could not join (tried again while it runs): configured rooms, replacements.
    pub(crate) not_joined: NotJoined,
}

/// Runs the account until `stop`: opens it (retrying with backoff), then its ear and mouth.
pub(crate) async fn run(
    context: Context,
    on_delivered: OnDelivered,
    outbox_changed: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let mind = context.account.mind.clone();
    let mut backoff = Backoff::default();
    context.health(crate::AccountHealth::Opening);
    let opened = loop {
        match open(&context).await {
            Ok(opened) => break opened,
            Err(error) => {
                context.health(crate::AccountHealth::Failing {
                    stage: "login",
                    error: error.to_string(),
                });
                let wait = backoff.after(&error);
                tracing::error!(%mind, %error, "matrix: cannot open the account; retrying in {wait:?}");
                if pause(&mut stop, wait).await {
                    return;
                }
            }
        }
    };
    tracing::info!(%mind, user = %context.account.user_id, "matrix: account open");
    context.health(crate::AccountHealth::Open);
    opened.not_joined.report(&context);
    let joins = joins::retry(
        context.clone(),
        opened.client.clone(),
        opened.directory.clone(),
        opened.not_joined.clone(),
        stop.clone(),
    );
    let ear = ear::Ear::new(context.clone(), &opened, on_delivered);
    let mouth = mouth::Mouth::new(context, &opened, outbox_changed);
    tokio::join!(ear.run(stop.clone()), mouth.run(stop), joins);
}

/// Logs in and learns the account's rooms.
async fn open(context: &Context) -> Result<Opened, MatrixError> {
    let account = &context.account;
    let who = (account.mind.as_str(), account.user_id.as_str());
    let session = Session::open(&context.config.homeserver, account).await?;
    let client = session.client().clone();
    let mut directory = Directory::default();
    // Before joining anything: what the account was already in, and where a first start began.
    let joined: HashSet<String> = client.joined_rooms().await?.into_iter().collect();
    first_start::mark(context, &client).await?;
    // A fresh list at each open: what is still out of reach is found again below.
    let not_joined = NotJoined::default();
    for name in &account.rooms {
        match join_configured(&client, account, name).await {
            Ok(room_id) => {
                directory.add_public(name, &room_id);
                // An upgrade followed before this start is known only from the room's state.
                let refused = upgrades::follow_at_open(&client, &mut directory, who, &room_id);
                if let Some(refused) = refused.await? {
                    not_joined.replacement(context, refused);
                }
            }
            // One room out of reach must not keep the Mind deaf in the others: it is tried
            // again while the account runs, and reported until joined.
            Err(error) if error.retry_after().is_none() && !error.is_unauthorized() => {
                not_joined.configured(context, name, &error);
            }
            Err(error) => return Err(error),
        }
    }
    if let Some(direct) = client.account_data(&account.user_id, "m.direct").await? {
        directory.set_direct(&direct);
    }
    for room in &joined {
        if directory.needs_members(room) {
            let count = client.joined_member_count(room).await?;
            directory.set_members(room, u64::try_from(count).unwrap_or(u64::MAX));
        }
    }
    // A direct chat upgraded before this start, like a configured room: a reply to its old id
    // (or to the person, whose first direct room it is) goes to the replacement.
    let direct = joined
        .iter()
        .filter(|room| directory.kind(room) == Some(RoomKind::Direct));
    let direct = direct.cloned().collect();
    for room in upgraded(&client, direct).await? {
        let refused = upgrades::follow_at_open(&client, &mut directory, who, &room);
        if let Some(refused) = refused.await? {
            not_joined.replacement(context, refused);
        }
    }
    Ok(Opened {
        session: Arc::new(session),
        client,
        directory: Arc::new(Mutex::new(directory)),
        joined,
        not_joined,
    })
}

/// How many rooms' tombstones the open looks up at once. An account with hundreds of direct
/// chats makes as many lookups at each start before its ear reads anything: one after another,
/// they would delay its intake by as many round trips to the homeserver.
const LOOKUPS_IN_FLIGHT: usize = 8;

/// The rooms among `rooms` that hold a tombstone (were upgraded), looked up
/// [`LOOKUPS_IN_FLIGHT`] at a time; a failed lookup fails the open, as any of its calls does.
async fn upgraded(client: &MatrixClient, rooms: Vec<String>) -> Result<Vec<String>, MatrixError> {
    use futures_util::stream::{self, StreamExt, TryStreamExt};
    let lookups = stream::iter(rooms).map(|room| async move {
        let tombstone = client.state(&room, "m.room.tombstone").await?;
        Ok::<_, MatrixError>(tombstone.map(|_| room))
    });
    let found: Vec<Option<String>> = lookups
        .buffer_unordered(LOOKUPS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(found.into_iter().flatten().collect())
}

/// Joins a configured room (`!id`, `#alias:server`, or `#alias` on the account's server) and
/// returns its room id.
pub(crate) async fn join_configured(
    client: &MatrixClient,
    account: &Account,
    name: &str,
) -> Result<String, MatrixError> {
    let address = match (name.starts_with('#'), name.contains(':')) {
        (true, false) => {
            let server = account.user_id.split_once(':').map_or("", |(_, s)| s);
            format!("{name}:{server}")
        }
        _ => name.to_owned(),
    };
    client.join(&address).await
}

/// Waits `wait`, or until `stop`; returns whether the connector is stopping.
pub(crate) async fn pause(stop: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(wait) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

/// Exponential backoff from 1 s to 30 s; a rate limit's own wait wins.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The wait after `error`: its `retry_after` if it names one, else the next step; an error
    /// no retry can fix (a configuration error) waits the longest.
    pub(crate) fn after(&mut self, error: &MatrixError) -> Duration {
        let step = self.step();
        match error.retry_after() {
            Some(wait) if !wait.is_zero() => wait,
            Some(_) => step,
            None => MAX_BACKOFF,
        }
    }

    /// The next step of the backoff, whatever the failure: 1 s, 2 s, 4 s, … up to 30 s.
    pub(crate) fn step(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        Duration::from_secs(1 << self.failures.min(6).saturating_sub(1)).min(MAX_BACKOFF)
    }

    /// Clears the failures after a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The longest backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Locks the directory (a poisoned lock still holds a valid directory: nothing panics while
/// holding it).
pub(crate) fn lock(directory: &Mutex<Directory>) -> std::sync::MutexGuard<'_, Directory> {
    directory.lock().unwrap_or_else(PoisonError::into_inner)
}
