//! Invites accepted by an account: to a direct chat (recorded in `m.direct`, as a client does,
//! so the classification survives restarts), to a configured room, and to the replacement of an
//! upgraded room the Mind listens in. Other invites are left alone.
//!
//! The replacement of an invite-only room is invite-only too, and a client's upgrade invites
//! nobody: the account's join is refused until someone invites it. Its invite names the old
//! room in the `m.room.create` of its stripped state (`predecessor`); the account joins, the
//! directory follows the upgrade, and the next answer reads the replacement from its start
//! (`upgrades`).

use crate::account::lock;
use crate::client::MatrixClient;
use crate::config::Account;
use crate::error::MatrixError;
use crate::rooms::{Directory, RoomKind};
use crate::wire::{InvitedRoom, StrippedEvent};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Accepts the invites of one answer that are the Mind's (see the module docs). A refusal of
/// the join is logged and the invite left; a transient failure (or a refused token) fails the
/// answer, to be read again. Returns the replacements joined (for `joins` to stop trying them).
pub(crate) async fn accept(
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    account: &Account,
    invites: &BTreeMap<String, InvitedRoom>,
) -> Result<Vec<String>, MatrixError> {
    let (mind, own) = (&account.mind, &account.user_id);
    let mut replacements = Vec::new();
    for (room_id, invited) in invites {
        let state = &invited.invite_state.events;
        let Some(invite) = state.iter().find(|e| {
            e.kind == "m.room.member"
                && e.state_key.as_deref() == Some(own.as_str())
                && e.content.get("membership").and_then(Value::as_str) == Some("invite")
        }) else {
            continue;
        };
        let direct = invite.content.get("is_direct").and_then(Value::as_bool) == Some(true);
        let configured = matches!(lock(directory).kind(room_id), Some(RoomKind::Public { .. }));
        let replaces = predecessor(state).filter(|old| lock(directory).kind(old).is_some());
        if !(configured || replaces.is_some() || direct && account.accept_dm_invites) {
            tracing::info!(%mind, room = %room_id, "matrix: invite left alone");
            continue;
        }
        match client.join(room_id).await {
            Ok(_) => {}
            Err(error) if error.retry_after().is_none() && !error.is_unauthorized() => {
                tracing::warn!(%mind, room = %room_id, %error, "matrix: cannot accept an invite");
                continue;
            }
            Err(error) => return Err(error),
        }
        let changed = match replaces {
            Some(old) => lock(directory).follow_upgrade(old, room_id),
            None if direct => lock(directory).add_direct(&invite.sender, room_id),
            None => None,
        };
        if let Some(content) = changed {
            client.set_account_data(own, "m.direct", &content).await?;
        }
        tracing::info!(%mind, room = %room_id, with = %invite.sender, replaces = ?replaces,
            "matrix: invite accepted");
        if replaces.is_some() {
            replacements.push(room_id.clone());
        }
    }
    Ok(replacements)
}

/// The room an invited room replaces, as its stripped `m.room.create` names it.
fn predecessor(state: &[StrippedEvent]) -> Option<&str> {
    let create = state.iter().find(|e| e.kind == "m.room.create")?;
    create
        .content
        .pointer("/predecessor/room_id")
        .and_then(Value::as_str)
}
