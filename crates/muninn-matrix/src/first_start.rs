//! A Mind's first start, remembered until its first sync is committed: which rooms the account
//! joined since it began, and what was said since in the rooms it was in before.
//!
//! The first sync (no stored position) reads a room the account was in before the Mind's first
//! start as history up to that start's position, its backlog never answered, and what was said
//! after the position as mail; a room the account joined at that start it reads from the join
//! on (`ear`). The process that joined knows which rooms it joined; a process
//! started after one that stopped (a crash, a refused commit) before its first commit finds
//! them joined already, and would take them for rooms it was always in: what was said after the
//! join, and in a direct chat accepted while the first answer was read, would be lost.
//!
//! So before a first start joins anything, the homeserver's position then is stored
//! ([`FIRST_START_CURSOR`], once: a later open before the first commit keeps it, and so does
//! another host's open at the same moment: the store writes it only if absent), and at each
//! read of a first answer the rooms the account joined since that position are asked of the
//! homeserver (one `/sync` from it that shows no event but each room's `m.room.create`: a
//! homeserver sends a room's whole state only for a room joined since, and leaves a room with
//! nothing to show out of the answer, so the answer's joined rooms are those joined since,
//! however much was said in them after the join), and so are the rooms the account was in
//! whose tombstone came since (a second `/sync` from it, of tombstones only; and, only when a
//! room joined since holds a tombstone, one more of those rooms' tombstones and memberships,
//! which say whether it came after the account's join): a replacement
//! joined since, of a room upgraded since, is read from its start, as the process that read the
//! tombstone would have read it in its next answer (`upgrades`). A third `/sync` from it, of
//! the ear's event types, gives each room's timeline since the position: in a room the account
//! was in before, that is what a Mind already listening was told, mail whether the first answer
//! is read a moment after the position or by a process started long after one that stopped
//! before its first commit (before, it was history and never answered); and each room left
//! since (a kick), which a first answer does not hold, with what was said before the leave.
//! Every process reads
//! the same first answer the same way until one commits it; after that the position is the
//! sync's, and this is not looked at again.
//!
//! Synapse answers a repeat of a `/sync` within two minutes from its response cache (per
//! account and device, keyed on `since`, filter and timeout), and a first answer may be such a
//! repeat: then it is older than it looks, and answers about the first start asked after it
//! hold all it holds, which is what is needed. The reverse is not: answers about the first
//! start kept longer than the first answer (asked after it, and a while after when something
//! slowed the read between them) would be read with a newer first answer, from a retry or the
//! next process on the same device — their timelines would not reach its last events, and the
//! room's whole first answer would be read as history. So these questions carry the time they
//! are asked (`ASKED_AT`, a field a homeserver ignores) and are never answered from the cache.

use crate::account::Context;
use crate::client::MatrixClient;
use crate::config::{FIRST_START_CURSOR, SYNC_CURSOR};
use crate::error::MatrixError;
use crate::wire::{RoomEvent, Timeline, is_joining};
use muninn_store::NewCursor;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The field of the filters of the questions about the first start that holds when they are
/// asked (Unix ms): unknown to a homeserver, which ignores it (Synapse's filter schema allows new
/// fields), and part of Synapse's cache key, so that an answer is never one kept from an
/// earlier read (see the module docs). Before, one kept from a read that stopped before its
/// commit answered the next process, which read a newer first answer: what was said after the
/// first start in a room the account was in before was read as history and lost.
const ASKED_AT: &str = "org.muninn.asked_at_ms";

/// `filter` (a `/sync` filter's JSON object) with `ASKED_AT` set to `asked_at_ms`.
fn asked_at(filter: &str, asked_at_ms: i64) -> String {
    let Ok(serde_json::Value::Object(mut filter)) = serde_json::from_str(filter) else {
        // Every filter here is a constant object; anything else is asked as it is.
        return filter.to_owned();
    };
    filter.insert(ASKED_AT.to_owned(), asked_at_ms.into());
    serde_json::Value::Object(filter).to_string()
}

/// A `/sync` filter that asks for no room and no account data: its answer is a position.
const NOTHING: &str =
    r#"{"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]},"room":{"rooms":[]}}"#;

/// A `/sync` filter whose answer holds only the rooms joined since its `since`: no timeline,
/// and of the state only `m.room.create`, which is in the whole state Synapse sends for a room
/// joined since `since` and never in the state changes of a room joined before (a room with
/// nothing to show is left out). Before, the rooms joined since were found by the account's
/// own join in the timeline: Synapse looks through a new room's last 551 events for a filtered
/// timeline, and a join further back than that (a first start restarted after a long
/// conversation in the room it joined) was not seen, the room taken for one the account was
/// always in and its conversation read as history.
const JOINED_SINCE: &str = r#"{"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]},"room":{"timeline":{"not_types":["*"]},"state":{"types":["m.room.create"]},"ephemeral":{"not_types":["*"]},"account_data":{"not_types":["*"]}}}"#;

/// A `/sync` filter whose answer holds the rooms with a tombstone since its `since` (and rooms
/// joined since whose timeline, not bounded by `since`, holds one). A tombstone is an old room's
/// last event but for leaves, and is looked for as far back as Synapse looks. Tombstones only:
/// with memberships too, the 50 events of a room with many after its upgrade (profile changes,
/// leaves) would not hold its tombstone, and the upgrade would go unseen.
const UPGRADED_SINCE: &str = r#"{"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]},"room":{"timeline":{"limit":50,"types":["m.room.tombstone"]},"state":{"types":[]},"ephemeral":{"not_types":["*"]},"account_data":{"not_types":["*"]}}}"#;

/// A `/sync` filter whose answer holds `rooms` (joined since its `since`, each with a
/// tombstone) with their tombstones and memberships: whether the tombstone came after the
/// account's join.
fn tombstones_and_joins(rooms: &[String]) -> String {
    serde_json::json!({
        "presence": {"not_types": ["*"]},
        "account_data": {"not_types": ["*"]},
        "room": {
            "rooms": rooms,
            "timeline": {"limit": 50, "types": ["m.room.tombstone", "m.room.member"]},
            "state": {"types": []},
            "ephemeral": {"not_types": ["*"]},
            "account_data": {"not_types": ["*"]},
        },
    })
    .to_string()
}

/// What changed in the account's rooms since its first start began.
#[derive(Debug, Default)]
pub(crate) struct SinceFirstStart {
    /// The first start's position (`None`: no first start was marked).
    pub(crate) position: Option<String>,
    /// The rooms it joined.
    pub(crate) joined: HashSet<String>,
    /// The timeline since the position of each room something was said in (messages,
    /// memberships, tombstones; `limited` when more was said than it holds). In a room the
    /// account was in before the first start, what was said after the position was said to a
    /// Mind already listening, and is mail.
    pub(crate) spoken: HashMap<String, Timeline>,
    /// Among them, the rooms the account left since the position (a kick, a ban): a first
    /// answer does not hold them, and what was said in them before the leave was said to a
    /// Mind already listening.
    pub(crate) left: HashSet<String>,
    /// The rooms it was in before the first start that were upgraded since: their
    /// replacements, joined since, are read from their start, as the replacement of a room the
    /// Mind listened in is.
    pub(crate) upgraded: HashSet<String>,
}

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
    let cursor = NewCursor {
        name: FIRST_START_CURSOR.to_owned(),
        value: position,
        updated_at_ms: context.clock.now_ms(),
    };
    // Written only if absent: another host starting the same Mind at once may have stored its
    // position since the check above, and what it joined and read is measured from that one
    // (before, this write moved it to a later position, and what was said between the two was
    // read as history by whichever read the first answer after).
    let kept = store.first_cursor(mind, &cursor).await?;
    if kept.value != cursor.value {
        tracing::info!(%mind, "matrix: the Mind's first start was marked by another start; reading from its position");
        return Ok(());
    }
    tracing::info!(%mind, "matrix: the Mind's first start; its rooms' backlog is history");
    Ok(())
}

/// What changed in the account's rooms since its first start began (nothing if no first start
/// was marked: an account whose sync position was stored before this module). `spoken` is the
/// `/sync` filter whose timelines say what was said (the ear's event types and timeline limit,
/// no state).
pub(crate) async fn since(
    context: &Context,
    client: &MatrixClient,
    spoken: &str,
) -> Result<SinceFirstStart, MatrixError> {
    let (store, mind) = (&context.store, context.account.mind.as_str());
    let Some(mark) = store.cursor(mind, FIRST_START_CURSOR).await? else {
        return Ok(SinceFirstStart::default());
    };
    let now = context.clock.now_ms();
    let joined = client
        .sync(
            Some(&mark.value),
            &asked_at(JOINED_SINCE, now),
            Duration::ZERO,
        )
        .await?;
    let joined: HashSet<String> = joined.rooms.join.into_keys().collect();
    let upgraded = client
        .sync(
            Some(&mark.value),
            &asked_at(UPGRADED_SINCE, now),
            Duration::ZERO,
        )
        .await?;
    // A room the account was in before the position with a tombstone since it was upgraded
    // since; one joined since may hold a tombstone from before it, which its memberships tell.
    let (mut upgraded, joined_then_upgraded): (HashSet<String>, HashSet<String>) =
        (upgraded.rooms.join.into_iter())
            .filter(|(_, room)| {
                let events = &room.timeline.events;
                events.iter().any(|e| e.kind == "m.room.tombstone")
            })
            .map(|(room_id, _)| room_id)
            .partition(|room_id| !joined.contains(room_id));
    upgraded.extend(upgraded_after_join(context, client, &mark.value, joined_then_upgraded).await?);
    // Asked last, like the others after the first answer: its timelines reach past that
    // answer's end, which the ear cuts them at (what follows is the next answer's).
    let spoken = client
        .sync(Some(&mark.value), &asked_at(spoken, now), Duration::ZERO)
        .await?;
    let left: HashSet<String> = spoken.rooms.leave.keys().cloned().collect();
    let spoken: HashMap<String, Timeline> = (spoken.rooms.join.into_iter())
        .chain(spoken.rooms.leave)
        .filter(|(room_id, room)| !joined.contains(room_id) && !room.timeline.events.is_empty())
        .map(|(room_id, room)| (room_id, room.timeline))
        .collect();
    let left = left
        .into_iter()
        .filter(|r| spoken.contains_key(r))
        .collect();
    Ok(SinceFirstStart {
        position: Some(mark.value),
        joined,
        upgraded,
        spoken,
        left,
    })
}

/// Among `rooms`, joined since the first start's `position` and each with a tombstone, those
/// whose tombstone came after the account's latest join (one more `/sync`, asked only when
/// there are such rooms). A new room's timeline may hold a tombstone older than the first
/// start (an old room joined at it): not an upgrade the Mind heard. One after its latest join
/// came after the position, the join being since it (a room joined at the first start, then
/// upgraded: before, its replacement was read from the account's join, not its start).
async fn upgraded_after_join(
    context: &Context,
    client: &MatrixClient,
    position: &str,
    rooms: HashSet<String>,
) -> Result<Vec<String>, MatrixError> {
    if rooms.is_empty() {
        return Ok(Vec::new());
    }
    let mut rooms: Vec<String> = rooms.into_iter().collect();
    rooms.sort();
    let filter = asked_at(&tombstones_and_joins(&rooms), context.clock.now_ms());
    let answer = client.sync(Some(position), &filter, Duration::ZERO).await?;
    let own = context.account.user_id.as_str();
    let after_join = |events: &[RoomEvent]| {
        let tombstone = events.iter().rposition(|e| e.kind == "m.room.tombstone");
        let join = events.iter().rposition(|e| is_joining(e, own));
        matches!((join, tombstone), (Some(join), Some(at)) if join < at)
    };
    Ok((answer.rooms.join.into_iter())
        .filter(|(_, room)| after_join(&room.timeline.events))
        .map(|(room_id, _)| room_id)
        .collect())
}
