//! Room upgrades followed: a room the Mind listens in that is upgraded (`m.room.tombstone`
//! naming a `replacement_room`) is replaced by the new room, which the account joins (the
//! homeserver lets the old room's members join it), and the Mind's conversation goes on there.
//!
//! The directory follows: a configured room's name names the replacement, a direct chat's
//! replacement is direct with the same person (and added to `m.direct`), a reply to the old
//! room id goes to the new one.
//!
//! Nothing of an upgrade is kept in memory only; it is read again from the rooms' state, so a
//! restart at any point (between the tombstone's answer and the join's, or long after) neither
//! loses the replacement's first messages nor its name:
//! - A replacement is read **from its start** (paged back at most `max_gap_events`) in the
//!   answer that holds the account's join, whichever process reads it: what people said there
//!   between the upgrade and the join is mail, not the history a room newly joined has before
//!   its join. A room is a replacement when its `m.room.create` names a room the Mind listens
//!   in as its `predecessor`; that is looked up for the rooms the account joined since the
//!   position (new to the process, or its first join in the timeline). On the first sync (no
//!   position) only a room joined since the Mind's first start, replacing a room the account
//!   was in that was upgraded since (`first_start`), is one: what a process that read the
//!   tombstone and stopped before its first commit would have read from its start. A replacement read
//!   twice (an answer read again after a failed commit) delivers nothing twice: deliveries
//!   are unique per event id.
//! - At the account's open, the `m.room.tombstone` of each configured room and each direct
//!   chat is followed (a chain of them too) to the replacement, joined: a room configured by
//!   its id is not moved by an upgrade as an alias is, and a reply to a direct chat's old room
//!   id (or to the person, whose first direct room it is) goes to the replacement after a
//!   restart as before it. (One state lookup per such room at each start; the direct chats'
//!   eight at a time.)
//! - A replacement the homeserver will not let the account join (an invite-only room's: a
//!   client's upgrade invites nobody) is reported with the rooms not joined and tried again on
//!   their backoff (`joins`) until it is joined or someone invites the account (`invites`);
//!   an open finds it again from the tombstone.
//! - The sync's filter asks for tombstones in the state before a `limited` timeline too: more
//!   said in the old room after the tombstone than a timeline holds does not hide it.

use crate::account::lock;
use crate::client::MatrixClient;
use crate::error::MatrixError;
use crate::first_start::SinceFirstStart;
use crate::history::joins_first;
use crate::rooms::{Directory, RoomKind};
use crate::wire::{JoinedRoom, RoomEvent};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

/// The most upgrades followed from one configured room at the account's open: a chain longer
/// (or a cycle, which no homeserver makes) stops there.
const MAX_CHAIN: usize = 16;

/// The rooms among `rooms` that were upgraded: (room, replacement), from a tombstone in the
/// timeline or in the state before it.
fn tombstones(rooms: &BTreeMap<String, JoinedRoom>) -> Vec<(String, String)> {
    let is_tombstone =
        |e: &&RoomEvent| e.kind == "m.room.tombstone" && e.state_key.as_deref() == Some("");
    rooms
        .iter()
        .filter_map(|(room_id, room)| {
            let tombstone = room.timeline.events.iter().rfind(is_tombstone);
            let tombstone = tombstone.or_else(|| room.state.events.iter().rfind(is_tombstone))?;
            let replacement = tombstone.content.get("replacement_room")?.as_str()?;
            Some((room_id.clone(), replacement.to_owned()))
        })
        .collect()
}

/// A replacement the homeserver will not let the account join (for `joins` to report and try
/// again).
#[derive(Debug)]
pub(crate) struct Refused {
    /// The upgraded room.
    pub(crate) old: String,
    /// What it is to the Mind.
    pub(crate) kind: Option<RoomKind>,
    /// Its replacement.
    pub(crate) new: String,
    /// The homeserver's refusal.
    pub(crate) error: MatrixError,
}

/// Joins the replacement of each upgraded room among `rooms` the Mind listens in and points
/// the directory at it. Returns the replacements the homeserver will not let the account join
/// (logged at error; the old room stays the Mind's until they are joined); a transient failure
/// fails the answer, to be read again.
pub(crate) async fn follow(
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    (mind, own): (&str, &str),
    rooms: &BTreeMap<String, JoinedRoom>,
) -> Result<Vec<Refused>, MatrixError> {
    let mut refused = Vec::new();
    for (old, new) in tombstones(rooms) {
        let Some(kind) = lock(directory).kind(&old) else {
            continue;
        };
        if let Some(error) = join(client, mind, &old, &new).await? {
            let kind = Some(kind);
            refused.push(Refused {
                old,
                kind,
                new,
                error,
            });
            continue;
        }
        let direct = lock(directory).follow_upgrade(&old, &new);
        if let Some(content) = direct {
            client.set_account_data(own, "m.direct", &content).await?;
        }
        tracing::info!(%mind, room = %old, replacement = %new,
            "matrix: a room was upgraded; following it to its replacement");
    }
    Ok(refused)
}

/// Joins `new`, the replacement of `old`, refused before (`joins` tries it again), and points
/// the directory at it.
pub(crate) async fn join_late(
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    (mind, own): (&str, &str),
    (old, new): (&str, &str),
) -> Result<(), MatrixError> {
    client.join_via(new, server_of(old)).await?;
    let direct = lock(directory).follow_upgrade(old, new);
    if let Some(content) = direct {
        client.set_account_data(own, "m.direct", &content).await?;
    }
    tracing::info!(%mind, room = %old, replacement = %new,
        "matrix: the replacement of an upgraded room joined at last; following it");
    Ok(())
}

/// Of an answer's joined rooms, those the account joined since the position (new to the
/// process, `joined` being the rooms it knew at its last commit, or with its first join in the
/// timeline) that replace a room the Mind listens in: to be read from their start. The
/// directory follows each (a process that read the tombstone may have stopped before it read
/// the join).
pub(crate) async fn replacements(
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    (mind, own): (&str, &str),
    (since, rooms, joined): (
        Option<&str>,
        &BTreeMap<String, JoinedRoom>,
        &HashSet<String>,
    ),
    first: Option<&SinceFirstStart>,
) -> Result<HashSet<String>, MatrixError> {
    let joined_since = rooms.iter().filter(|(room_id, room)| match (since, first) {
        (Some(_), _) => {
            !joined.contains(*room_id) || room.timeline.events.iter().any(|e| joins_first(e, own))
        }
        // On the first sync, only a room joined since the first start began whose old room was
        // upgraded since: the one a process that read the tombstone joined, and would have read
        // from its start in its next answer, read again by a process after it. Any other
        // replacement's backlog is history, the Mind never listened in its old room.
        (None, Some(first)) => !first.upgraded.is_empty() && first.joined.contains(*room_id),
        (None, None) => false,
    });
    let upgraded_since =
        |old: &str| since.is_some() || first.is_some_and(|f| f.upgraded.contains(old));
    let mut found = HashSet::new();
    for (room, _) in joined_since {
        let room = room.clone();
        let Some(create) = client.state(&room, "m.room.create").await? else {
            continue;
        };
        let old = create
            .pointer("/predecessor/room_id")
            .and_then(Value::as_str);
        let known = |old: &&str| lock(directory).kind(old).is_some() && upgraded_since(old);
        let Some(old) = old.filter(known) else {
            continue;
        };
        let direct = lock(directory).follow_upgrade(old, &room);
        if let Some(content) = direct {
            client.set_account_data(own, "m.direct", &content).await?;
        }
        tracing::info!(%mind, room = %old, replacement = %room,
            "matrix: the replacement of an upgraded room joined; reading it from its start");
        found.insert(room);
    }
    Ok(found)
}

/// At the account's open: follows a room's upgrades (its tombstone, the replacement's, …) to
/// the latest replacement, joining each, and points the directory at it (a direct chat's
/// replacement added to `m.direct`). Returns a replacement the homeserver will not let the
/// account join.
pub(crate) async fn follow_at_open(
    client: &MatrixClient,
    directory: &mut Directory,
    (mind, own): (&str, &str),
    room_id: &str,
) -> Result<Option<Refused>, MatrixError> {
    let mut room = room_id.to_owned();
    for _ in 0..MAX_CHAIN {
        let Some(tombstone) = client.state(&room, "m.room.tombstone").await? else {
            return Ok(None);
        };
        let new = tombstone.get("replacement_room").and_then(Value::as_str);
        let Some(new) = new.map(str::to_owned) else {
            return Ok(None);
        };
        if let Some(error) = join(client, mind, &room, &new).await? {
            let kind = directory.kind(&room);
            return Ok(Some(Refused {
                old: room,
                kind,
                new,
                error,
            }));
        }
        if let Some(content) = directory.follow_upgrade(&room, &new) {
            client.set_account_data(own, "m.direct", &content).await?;
        }
        tracing::info!(%mind, room = %room, replacement = %new,
            "matrix: a room was upgraded; following it to its replacement");
        room = new;
    }
    Ok(None)
}

/// Joins `new`, the replacement of `old`; `Some`: the homeserver refuses for good (logged at
/// error).
async fn join(
    client: &MatrixClient,
    mind: &str,
    old: &str,
    new: &str,
) -> Result<Option<MatrixError>, MatrixError> {
    match client.join_via(new, server_of(old)).await {
        Ok(_) => Ok(None),
        Err(error) if error.retry_after().is_none() && !error.is_unauthorized() => {
            tracing::error!(%mind, room = %old, replacement = %new, %error,
                "matrix: a room was upgraded and its replacement cannot be joined; trying again while the account runs");
            Ok(Some(error))
        }
        Err(error) => Err(error),
    }
}

/// The server to join a replacement through. The replacement is on the server of whoever
/// upgraded the room, which the old room's creator's server need not be; the old room id's
/// server is the likeliest to know it.
fn server_of(old: &str) -> Option<&str> {
    old.split_once(':').map(|(_, server)| server)
}
