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
//!   position (new to the process, or its first join in the timeline). A replacement read
//!   twice (an answer read again after a failed commit) delivers nothing twice: deliveries
//!   are unique per event id.
//! - At the account's open, each configured room's `m.room.tombstone` is followed (a chain of
//!   them too) to the replacement, joined: a room configured by its id is not moved by an
//!   upgrade as an alias is.
//! - The sync's filter asks for tombstones in the state before a `limited` timeline too: more
//!   said in the old room after the tombstone than a timeline holds does not hide it.

use crate::account::lock;
use crate::client::MatrixClient;
use crate::error::MatrixError;
use crate::history::joins_first;
use crate::rooms::Directory;
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

/// Joins the replacement of each upgraded room among `rooms` the Mind listens in and points the directory at
/// it. A replacement the homeserver will not let the account join is logged at error and left
/// (the old room stays the Mind's); a transient failure fails the answer, to be read again.
pub(crate) async fn follow(
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    (mind, own): (&str, &str),
    rooms: &BTreeMap<String, JoinedRoom>,
) -> Result<(), MatrixError> {
    for (old, new) in tombstones(rooms) {
        if lock(directory).kind(&old).is_none() || !join(client, mind, &old, &new).await? {
            continue;
        }
        let direct = lock(directory).follow_upgrade(&old, &new);
        if let Some(content) = direct {
            client.set_account_data(own, "m.direct", &content).await?;
        }
        tracing::info!(%mind, room = %old, replacement = %new,
            "matrix: a room was upgraded; following it to its replacement");
    }
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
) -> Result<HashSet<String>, MatrixError> {
    if since.is_none() {
        // The first sync's rooms are history up to now, replacements or not.
        return Ok(HashSet::new());
    }
    let joined_since = rooms.iter().filter(|(room_id, room)| {
        !joined.contains(*room_id) || room.timeline.events.iter().any(|e| joins_first(e, own))
    });
    let mut found = HashSet::new();
    for (room, _) in joined_since {
        let room = room.clone();
        let Some(create) = client.state(&room, "m.room.create").await? else {
            continue;
        };
        let old = create
            .pointer("/predecessor/room_id")
            .and_then(Value::as_str);
        let Some(old) = old.filter(|old| lock(directory).kind(old).is_some()) else {
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

/// At the account's open: follows a configured room's upgrades (its tombstone, the
/// replacement's, …) to the latest replacement, joining each, and points the directory at it.
pub(crate) async fn follow_at_open(
    client: &MatrixClient,
    directory: &mut Directory,
    mind: &str,
    room_id: &str,
) -> Result<(), MatrixError> {
    let mut room = room_id.to_owned();
    for _ in 0..MAX_CHAIN {
        let Some(tombstone) = client.state(&room, "m.room.tombstone").await? else {
            return Ok(());
        };
        let new = tombstone.get("replacement_room").and_then(Value::as_str);
        let Some(new) = new.map(str::to_owned) else {
            return Ok(());
        };
        if !join(client, mind, &room, &new).await? {
            return Ok(());
        }
        directory.follow_upgrade(&room, &new);
        tracing::info!(%mind, room = %room, replacement = %new,
            "matrix: a configured room was upgraded; following it to its replacement");
        room = new;
    }
    Ok(())
}

/// Joins `new`, the replacement of `old`; `false`: the homeserver refuses for good (logged at
/// error).
async fn join(
    client: &MatrixClient,
    mind: &str,
    old: &str,
    new: &str,
) -> Result<bool, MatrixError> {
    // The replacement is on the server of whoever upgraded the room, which the old room's
    // creator's server need not be; the old room id's server is the likeliest to know it.
    let via = old.split_once(':').map(|(_, server)| server);
    match client.join_via(new, via).await {
        Ok(_) => Ok(true),
        Err(error) if error.retry_after().is_none() && !error.is_unauthorized() => {
            tracing::error!(%mind, room = %old, replacement = %new, %error,
                "matrix: a room was upgraded and its replacement cannot be joined");
            Ok(false)
        }
        Err(error) => Err(error),
    }
}
