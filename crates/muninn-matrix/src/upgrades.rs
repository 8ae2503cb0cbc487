//! Room upgrades followed: a room the Mind listens in that is upgraded (`m.room.tombstone`
//! naming a `replacement_room`) is replaced by the new room, which the account joins (the
//! homeserver lets the old room's members join it), and the Mind's conversation goes on there.
//!
//! The directory follows: a configured room's name names the replacement, a direct chat's
//! replacement is direct with the same person (and added to `m.direct`), a reply to the old
//! room id goes to the new one. The replacement is read **from its start** when its join is
//! read (paged back at most `max_gap_events`): what people said there between the upgrade and
//! the account's join is mail, not the history a room newly joined has before its join.
//!
//! Which rooms are replacements is known to the process that read the tombstone. A process
//! that stops between that read and the read of its join finds the replacement among the rooms
//! it is in at its next start, and reads it from its join.

use crate::account::lock;
use crate::client::MatrixClient;
use crate::error::MatrixError;
use crate::rooms::Directory;
use crate::wire::JoinedRoom;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The rooms among `rooms` that were upgraded in their timeline: (room, replacement).
pub(crate) fn tombstones(rooms: &BTreeMap<String, JoinedRoom>) -> Vec<(String, String)> {
    rooms
        .iter()
        .filter_map(|(room_id, room)| {
            let tombstone =
                room.timeline.events.iter().rfind(|e| {
                    e.kind == "m.room.tombstone" && e.state_key.as_deref() == Some("")
                })?;
            let replacement = tombstone.content.get("replacement_room")?.as_str()?;
            Some((room_id.clone(), replacement.to_owned()))
        })
        .collect()
}

/// Joins the replacement of each upgraded room the Mind listens in and points the directory at
/// it; returns the replacements joined. A replacement the homeserver will not let the account
/// join is logged at error and left (the old room stays the Mind's); a transient failure fails
/// the answer, to be read again.
pub(crate) async fn follow(
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    (mind, own): (&str, &str),
    upgraded: Vec<(String, String)>,
) -> Result<Vec<String>, MatrixError> {
    let mut joined = Vec::new();
    for (old, new) in upgraded {
        if lock(directory).kind(&old).is_none() {
            continue;
        }
        // The replacement is on the server of whoever upgraded the room, which the old room's
        // creator's server need not be; the old room id's server is the likeliest to know it.
        let via = old.split_once(':').map(|(_, server)| server);
        match client.join_via(&new, via).await {
            Ok(_) => {}
            Err(error) if error.retry_after().is_none() && !error.is_unauthorized() => {
                tracing::error!(%mind, room = %old, replacement = %new, %error,
                    "matrix: a room was upgraded and its replacement cannot be joined");
                continue;
            }
            Err(error) => return Err(error),
        }
        let direct = lock(directory).follow_upgrade(&old, &new);
        if let Some(content) = direct {
            client.set_account_data(own, "m.direct", &content).await?;
        }
        tracing::info!(%mind, room = %old, replacement = %new,
            "matrix: a room was upgraded; following it to its replacement");
        joined.push(new);
    }
    Ok(joined)
}
