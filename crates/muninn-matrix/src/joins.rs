//! The configured rooms an account could not join when it opened (no such alias yet, not
//! invited yet, the room not created yet), tried again on a backoff while the account runs.
//!
//! A room joined late is added to the account's directory; the ear's next sync holds the
//! account's join, and the room is read as a new one (mail from the join on), as an accepted
//! invite is. Until then the rooms not joined are reported ([`crate::OnRoomsNotJoined`]) with
//! the last refusal, so `muninn status` names them: a Mind deaf in a room it was configured for
//! is never silent. One failing room keeps no other from being read.

use crate::account::{Context, join_configured, lock, pause};
use crate::client::MatrixClient;
use crate::error::MatrixError;
use crate::rooms::Directory;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A configured room the account is not in yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomNotJoined {
    /// The room as configured (`#alias`, `!id:server`).
    pub room: String,
    /// Why the last try failed (never a credential).
    pub error: String,
    /// When the first try failed, Unix ms.
    pub since_ms: i64,
}

/// The longest wait between two tries: a room that never becomes joinable costs one join
/// request per room every five minutes, and one that becomes joinable is joined within that.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// Retries joining `pending` until each is joined or `stop`; reports what is left after every
/// change (an empty list once all are joined).
pub(crate) async fn retry(
    context: Context,
    client: MatrixClient,
    directory: Arc<Mutex<Directory>>,
    mut pending: Vec<RoomNotJoined>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tries: u32 = 0;
    while !pending.is_empty() {
        // 1 s, 2 s, 4 s, … up to MAX_WAIT: soon for a room created or an invite sent just
        // after the start, rarely for one that stays out of reach.
        let wait = Duration::from_secs(1 << tries.min(9)).min(MAX_WAIT);
        tries = tries.saturating_add(1);
        if pause(&mut stop, wait).await {
            return;
        }
        let before = pending.clone();
        let mut left = Vec::new();
        for mut room in pending {
            match join_configured(&client, &context.account, &room.room).await {
                Ok(room_id) => {
                    tracing::info!(mind = %context.account.mind, room = %room.room, %room_id,
                        "matrix: joined a configured room that could not be joined before");
                    lock(&directory).add_public(&room.room, &room_id);
                }
                Err(error) => {
                    tracing::warn!(mind = %context.account.mind, room = %room.room, %error,
                        "matrix: still cannot join a configured room; trying again later");
                    room.error = error.to_string();
                    left.push(room);
                }
            }
        }
        pending = left;
        if pending != before {
            context.rooms_not_joined(&pending);
        }
    }
}

/// A room not joined at open: logged at error (once; tries again log at warn).
pub(crate) fn not_joined(context: &Context, room: &str, error: &MatrixError) -> RoomNotJoined {
    tracing::error!(mind = %context.account.mind, %room, %error,
        "matrix: cannot join a configured room; trying again while the account runs");
    RoomNotJoined {
        room: room.to_owned(),
        error: error.to_string(),
        since_ms: context.clock.now_ms(),
    }
}
