//! The rooms an account is to be in and could not join: configured rooms out of reach when it
//! opened (no such alias yet, not invited yet, the room not created yet), and the replacements
//! of upgraded rooms the homeserver would not let it into (an invite-only room's replacement is
//! invite-only, and a client's upgrade invites nobody). Each is tried again on its own backoff
//! while the account runs.
//!
//! A configured room joined late is added to the account's directory; a replacement joined late
//! is followed (the directory points the old room's name and replies at it). The ear's next
//! sync holds the account's join: a configured room is read as a new one (mail from the join
//! on), as an accepted invite is; a replacement from its start (`upgrades`). Until then the
//! rooms not joined are reported ([`crate::OnRoomsNotJoined`]) with the last refusal, so `muninn
//! status` names them: a Mind deaf in a room it was configured for, or in the new room of a
//! conversation it had, is never silent. One failing room keeps no other from being read. A
//! replacement whose old room the account then leaves (a kick, a ban) is dropped: it was
//! removed from the conversation, whose new room is no longer the Mind's to join. One joined
//! through an invite (`invites`) is dropped when the invite is accepted.
//!
//! Nothing here outlives the process, and nothing needs to: a configured room is tried again at
//! the next open, and a replacement is found again there from the old room's tombstone
//! (`upgrades::follow_at_open`).

use crate::account::{Context, join_configured, lock};
use crate::client::MatrixClient;
use crate::error::MatrixError;
use crate::rooms::{Directory, RoomKind};
use crate::upgrades;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// A room the account is not in yet, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomNotJoined {
    /// The room as configured (`#alias`, `!id:server`), or a replacement's room id.
    pub room: String,
    /// Why the last try failed (never a credential); a replacement's names the room it
    /// replaces.
    pub error: String,
    /// When the first try failed, Unix ms.
    pub since_ms: i64,
}

/// The longest wait between two tries: a room that never becomes joinable costs one join
/// request per room every five minutes, and one that becomes joinable is joined within that.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// What joining a room not joined means.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A configured room, by its configured name.
    Configured,
    /// The replacement of `old`, an upgraded room the Mind listens in.
    Replacement { old: String },
}

/// A room not joined, and when it is tried next.
#[derive(Debug, Clone)]
struct Pending {
    report: RoomNotJoined,
    target: Target,
    /// Failed tries so far, which set the wait before the next.
    tries: u32,
    next_at: Instant,
}

impl Pending {
    fn new(report: RoomNotJoined, target: Target) -> Pending {
        Pending {
            report,
            target,
            tries: 0,
            next_at: Instant::now() + wait_after(0),
        }
    }
}

/// The wait after `tries` failed tries: 1 s, 2 s, 4 s, … up to [`MAX_WAIT`] — soon for a room
/// created or an invite sent just after the start, rarely for one that stays out of reach.
fn wait_after(tries: u32) -> Duration {
    Duration::from_secs(1 << tries.min(9)).min(MAX_WAIT)
}

/// The account's rooms not joined, shared by its open, its ear (which meets refused
/// replacements) and the task that tries them again.
#[derive(Debug, Clone, Default)]
pub(crate) struct NotJoined {
    pending: Arc<Mutex<Vec<Pending>>>,
    /// Wakes the retry task when a room is added.
    added: Arc<Notify>,
}

impl NotJoined {
    /// A configured room the open could not join: logged at error (once; tries again log at
    /// warn). Reported with the others once the account is open.
    pub(crate) fn configured(&self, context: &Context, room: &str, error: &MatrixError) {
        tracing::error!(mind = %context.account.mind, %room, %error,
            "matrix: cannot join a configured room; trying again while the account runs");
        self.add(context, room, Target::Configured, error.to_string());
    }

    /// The replacement `new` of `old` that the homeserver refused the account (logged at error
    /// by `upgrades`); returns whether it is new to the list (a refusal met again, in an answer
    /// read again, changes nothing). Reported by the caller ([`NotJoined::report`]).
    pub(crate) fn replacement(&self, context: &Context, refused: upgrades::Refused) -> bool {
        let upgrades::Refused {
            old,
            kind,
            new,
            error,
        } = refused;
        let error = replacement_error(&old, kind, &error);
        self.add(context, &new, Target::Replacement { old }, error)
    }

    /// Drops the replacements of the rooms among `left` (an answer's left rooms: a kick, a
    /// ban): the account was removed from the conversation, and its new room is no longer the
    /// Mind's to join. Returns whether the list changed.
    pub(crate) fn left<'a>(
        &self,
        context: &Context,
        left: impl IntoIterator<Item = &'a String>,
    ) -> bool {
        let mut pending = self.lock();
        let before = pending.len();
        for old in left {
            let dropped =
                |p: &Pending| matches!(&p.target, Target::Replacement { old: o } if o == old);
            if let Some(at) = pending.iter().position(dropped) {
                let new = pending.remove(at).report.room;
                tracing::info!(mind = %context.account.mind, room = %old, replacement = %new,
                    "matrix: the account left an upgraded room; its replacement is no longer tried");
            }
        }
        pending.len() != before
    }

    /// Drops the replacements among `joined` (joined through an invite, and followed): they are
    /// not to be reported or tried again. Returns whether the list changed.
    pub(crate) fn joined(&self, joined: &[String]) -> bool {
        let mut pending = self.lock();
        let before = pending.len();
        pending.retain(|p| {
            !(matches!(p.target, Target::Replacement { .. }) && joined.contains(&p.report.room))
        });
        pending.len() != before
    }

    /// Reports the list as it is now.
    pub(crate) fn report(&self, context: &Context) {
        context.rooms_not_joined(&self.reports());
    }

    fn add(&self, context: &Context, room: &str, target: Target, error: String) -> bool {
        let mut pending = self.lock();
        if pending.iter().any(|p| p.report.room == room) {
            return false;
        }
        let report = RoomNotJoined {
            room: room.to_owned(),
            error,
            since_ms: context.clock.now_ms(),
        };
        pending.push(Pending::new(report, target));
        drop(pending);
        self.added.notify_one();
        true
    }

    /// What is reported now.
    pub(crate) fn reports(&self) -> Vec<RoomNotJoined> {
        reports(&self.lock())
    }

    /// How long until the next try is due (`None`: nothing to try).
    fn next_due(&self) -> Option<Duration> {
        let pending = self.lock();
        let next = pending.iter().map(|p| p.next_at).min()?;
        Some(next.saturating_duration_since(Instant::now()))
    }

    /// The rooms whose try is due.
    fn due(&self) -> Vec<Pending> {
        let now = Instant::now();
        let pending = self.lock();
        pending
            .iter()
            .filter(|p| p.next_at <= now)
            .cloned()
            .collect()
    }

    /// Records a try of `room`: gone once joined, else its error and next try updated.
    /// Returns whether what is reported changed.
    fn tried(&self, room: &str, result: Result<(), String>) -> bool {
        let mut pending = self.lock();
        let Some(at) = pending.iter().position(|p| p.report.room == room) else {
            return false;
        };
        match result {
            Ok(()) => {
                pending.remove(at);
                true
            }
            Err(error) => {
                let entry = &mut pending[at];
                entry.tries = entry.tries.saturating_add(1);
                entry.next_at = Instant::now() + wait_after(entry.tries);
                let changed = entry.report.error != error;
                entry.report.error = error;
                changed
            }
        }
    }

    /// The list (a poisoned lock still holds a valid list: nothing panics while holding it).
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A replacement's refusal as reported: which room it replaces (and its configured name).
fn replacement_error(old: &str, kind: Option<RoomKind>, error: &dyn std::fmt::Display) -> String {
    let old = match kind {
        Some(RoomKind::Public { name }) if name != old => format!("{old} ({name})"),
        _ => old.to_owned(),
    };
    format!("the replacement of {old}, which was upgraded: {error}")
}

fn reports(pending: &[Pending]) -> Vec<RoomNotJoined> {
    pending.iter().map(|p| p.report.clone()).collect()
}

/// Tries each room not joined again when its wait is over, until `stop`; reports what is left
/// after every change (an empty list once all are joined).
pub(crate) async fn retry(
    context: Context,
    client: MatrixClient,
    directory: Arc<Mutex<Directory>>,
    not_joined: NotJoined,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        // Asked for before the list is read: a room added meanwhile wakes it (the permit is
        // kept).
        let added = not_joined.added.notified();
        let wait = not_joined.next_due().unwrap_or(MAX_WAIT);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = added => continue,
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let mut changed = false;
        for room in not_joined.due() {
            let result = try_join(&context, &client, &directory, &room).await;
            changed |= not_joined.tried(&room.report.room, result);
        }
        if changed {
            not_joined.report(&context);
        }
    }
}

/// One try of a room not joined; the error as reported.
async fn try_join(
    context: &Context,
    client: &MatrixClient,
    directory: &Mutex<Directory>,
    room: &Pending,
) -> Result<(), String> {
    let (mind, name) = (&context.account.mind, &room.report.room);
    let joined = match &room.target {
        Target::Configured => join_configured(client, &context.account, name)
            .await
            .map(|room_id| lock(directory).add_public(name, &room_id)),
        Target::Replacement { old } => {
            let own = &context.account.user_id;
            upgrades::join_late(client, directory, (mind, own), (old, name)).await
        }
    };
    match joined {
        Ok(()) => {
            tracing::info!(%mind, room = %name, "matrix: joined a room that could not be joined before");
            Ok(())
        }
        Err(error) => {
            tracing::warn!(%mind, room = %name, %error,
                "matrix: still cannot join a room; trying again later");
            match &room.target {
                Target::Configured => Err(error.to_string()),
                Target::Replacement { old } => {
                    let kind = lock(directory).kind(old);
                    Err(replacement_error(old, kind, &error))
                }
            }
        }
    }
}
