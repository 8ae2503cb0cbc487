//! A Mind's first start, remembered until its first sync is committed: which rooms the account
//! joined since it began.
//!
//! The first sync (no stored position) reads a room the account was in before the Mind's first
//! start as history, its backlog never answered, and a room the account joined at that start
//! from the join on (`ear`). The process that joined knows which rooms it joined; a process
//! started after one that stopped (a crash, a refused commit) before its first commit finds
//! them joined already, and would take them for rooms it was always in: what was said after the
//! join, and in a direct chat accepted while the first answer was read, would be lost.
//!
//! So before a first start joins anything, the homeserver's position then is stored
//! ([`FIRST_START_CURSOR`], once: a later open before the first commit keeps it), and at each
//! read of a first answer the rooms the account joined since that position are asked of the
//! homeserver (one `/sync` from it, of the account's own memberships only). Every process reads
//! the same first answer the same way until one commits it; after that the position is the
//! sync's, and this is not looked at again. (Synapse answers a repeat of either request within
//! two minutes from its response cache. The rooms' answer is asked just after the first answer
//! and cached as long, so a cached one is as old as the first answer read with it, give or take
//! the moment between the two: the joins that answer holds are in it.)

use crate::account::Context;
use crate::client::MatrixClient;
use crate::config::{FIRST_START_CURSOR, SYNC_CURSOR};
use crate::error::MatrixError;
use crate::wire::is_joining;
use muninn_store::{IntakeBatch, NewCursor};
use std::collections::HashSet;
use std::time::Duration;

/// A `/sync` filter that asks for no room and no account data: its answer is a position.
const NOTHING: &str =
    r#"{"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]},"room":{"rooms":[]}}"#;

/// How many of the account's own membership events a room's answer holds: a join followed by
/// more profile changes than this is not seen (the room is then read as one it was in before,
/// as before this module).
const OWN_MEMBERSHIPS: u32 = 50;

/// At the account's open, before it joins anything: stores the homeserver's position as the
/// first start's, unless a sync position (not a first start) or a first start's position is
/// stored already.
pub(crate) async fn mark(context: &Context, client: &MatrixClient) -> Result<(), MatrixError> {
    let (store, mind) = (&context.store, context.account.mind.as_str());
    if store.cursor(mind, SYNC_CURSOR).await?.is_some()
        || store.cursor(mind, FIRST_START_CURSOR).await?.is_some()
    {
        return Ok(());
    }
    let position = client.sync(None, NOTHING, Duration::ZERO).await?.next_batch;
    let batch = IntakeBatch {
        deliveries: Vec::new(),
        cursor: Some(NewCursor {
            name: FIRST_START_CURSOR.to_owned(),
            value: position,
            updated_at_ms: context.clock.now_ms(),
        }),
    };
    store.post_batch(mind, &batch).await?;
    tracing::info!(%mind, "matrix: the Mind's first start; its rooms' backlog is history");
    Ok(())
}

/// The rooms the account joined since its first start began (empty if no first start was
/// marked: an account whose sync position was stored before this module).
pub(crate) async fn joined_since(
    context: &Context,
    client: &MatrixClient,
) -> Result<HashSet<String>, MatrixError> {
    let (store, mind) = (&context.store, context.account.mind.as_str());
    let Some(mark) = store.cursor(mind, FIRST_START_CURSOR).await? else {
        return Ok(HashSet::new());
    };
    let own = context.account.user_id.as_str();
    let filter = serde_json::json!({
        "presence": {"not_types": ["*"]},
        "account_data": {"not_types": ["*"]},
        "room": {
            "timeline": {"limit": OWN_MEMBERSHIPS, "types": ["m.room.member"], "senders": [own]},
            "state": {"types": []},
            "ephemeral": {"not_types": ["*"]},
            "account_data": {"not_types": ["*"]},
        },
    });
    let answer = client
        .sync(Some(&mark.value), &filter.to_string(), Duration::ZERO)
        .await?;
    let joined = answer.rooms.join.into_iter().filter(|(_, room)| {
        // A room the account was in all along shows only what changed since the position
        // (a profile change is no join); one that holds a join was joined since.
        room.timeline.events.iter().any(|e| is_joining(e, own))
    });
    Ok(joined.map(|(room_id, _)| room_id).collect())
}
