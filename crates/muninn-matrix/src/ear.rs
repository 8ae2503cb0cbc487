//! An account's ear: one `/sync` long poll at a time, each answer turned into one
//! [`IntakeBatch`] — the mail of every room the Mind listens in, with context — committed with
//! the answer's `next_batch` by [`Store::post_batch`](muninn_store::Store::post_batch).
//!
//! The position advances only by that commit. An answer that fails anywhere before it (the
//! homeserver, a `/messages` page, the store, a crash) leaves the stored position where it
//! was, and the same `since` is asked again. (Synapse may answer a repeated `since` from its
//! two-minute response cache; the answer is then the very batch that was lost, which is what
//! is wanted.)
//!
//! Where each room's mail starts in an answer is in `gather`; a gap's paging is in `paging`.

mod gather;
mod paging;

use paging::lock_cuts;

use crate::AccountHealth;
use crate::account::{Backoff, Context, Opened, lock, pause};
use crate::client::{Direction, MatrixClient};
use crate::config::{FaultPoint, SYNC_CURSOR, crash_if_armed};
use crate::error::MatrixError;
use crate::first_start;
use crate::history::{
    Chunk, Limits, Line, Window, changes_membership, leaves_or_returns, merge_rooms, read_chunk,
};
use crate::invites;
use crate::joins::NotJoined;
use crate::rooms::{Directory, RoomKind};
use crate::session::Session;
use crate::upgrades;
use crate::wire::{JoinedRoom, SyncResponse, Timeline};
use crate::{OnDelivered, Stats};
use muninn_store::{IntakeBatch, NewCursor, NewDelivery, Role};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Events per `/messages` page.
const PAGE: u32 = 100;

/// How often a held sync looks whether the Mind caught up.
const HOLD_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// The event types read: messages, memberships (to find where a new room's mail starts) and
/// tombstones (an upgraded room, followed to its replacement: `upgrades`).
const EVENT_TYPES: &str = r#"["m.room.message","m.room.member","m.room.tombstone"]"#;

/// An account's `/sync` loop.
pub(crate) struct Ear {
    context: Context,
    session: Arc<Session>,
    client: MatrixClient,
    directory: Arc<Mutex<Directory>>,
    /// Replacements the homeserver refused the account are reported and tried again there.
    not_joined: NotJoined,
    joined: HashSet<String>,
    /// The answer in hand's replacements of upgraded rooms: read from their start (`upgrades`).
    replacements: HashSet<String>,
    windows: HashMap<String, Window>,
    /// On a first answer: the first start's position, and the timeline since it of each room
    /// something was said in (`first_start`). Empty otherwise.
    first_start: (Option<String>, HashMap<String, Timeline>),
    /// On a first answer: the rooms the account left since the first start's position that
    /// the answer does not hold (`first_start`). Empty otherwise.
    left_since_first_start: Vec<String>,
    on_delivered: OnDelivered,
    filter: String,
    page_filter: String,
    /// The timelines since a first start's position (`first_start::since`).
    spoken_filter: String,
    /// The gaps cut while reading the answer in hand: (room, events read). Counted only once
    /// that answer is committed — an answer read again after a failed commit cuts the same gap
    /// again, and only the commit makes the skip final.
    cuts: Mutex<Vec<(String, u64)>>,
}

impl Ear {
    pub(crate) fn new(context: Context, opened: &Opened, on_delivered: OnDelivered) -> Ear {
        let limit = context.config.timeline_limit;
        Ear {
            filter: format!(
                r#"{{"presence":{{"not_types":["*"]}},"account_data":{{"types":["m.direct"]}},"room":{{"timeline":{{"limit":{limit},"types":{EVENT_TYPES}}},"state":{{"lazy_load_members":true,"types":["m.room.member","m.room.tombstone"]}},"ephemeral":{{"not_types":["*"]}},"account_data":{{"not_types":["*"]}}}}}}"#
            ),
            page_filter: format!(r#"{{"types":{EVENT_TYPES}}}"#),
            spoken_filter: format!(
                r#"{{"presence":{{"not_types":["*"]}},"account_data":{{"not_types":["*"]}},"room":{{"timeline":{{"limit":{limit},"types":{EVENT_TYPES}}},"state":{{"types":[]}},"ephemeral":{{"not_types":["*"]}},"account_data":{{"not_types":["*"]}}}}}}"#
            ),
            session: opened.session.clone(),
            client: opened.client.clone(),
            directory: opened.directory.clone(),
            not_joined: opened.not_joined.clone(),
            joined: opened.joined.clone(),
            replacements: HashSet::new(),
            windows: HashMap::new(),
            first_start: (None, HashMap::new()),
            left_since_first_start: Vec::new(),
            cuts: Mutex::new(Vec::new()),
            on_delivered,
            context,
        }
    }

    fn mind(&self) -> &str {
        &self.context.account.mind
    }

    fn limits(&self) -> Limits {
        Limits {
            lines: self.context.config.context_lines,
            bytes: self.context.config.context_bytes,
        }
    }

    /// Syncs until `stop`: hold while the Mind is behind, sync, commit, repeat; every failure
    /// logged and retried with backoff.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut backoff = Backoff::default();
        let mut since = loop {
            match self.context.store.cursor(self.mind(), SYNC_CURSOR).await {
                Ok(cursor) => break cursor.map(|c| c.value),
                Err(error) => {
                    let error = MatrixError::from(error);
                    tracing::error!(mind = %self.mind(), %error, "matrix: cannot read the sync position");
                    self.context.health(AccountHealth::Failing {
                        stage: "store",
                        error: error.to_string(),
                    });
                    if pause(&mut stop, backoff.after(&error)).await {
                        return;
                    }
                }
            }
        };
        // A failure of the sync position's read above is over once it was read.
        let mut failing = false;
        self.context.health(AccountHealth::Open);
        loop {
            if self.hold(&mut stop).await {
                return;
            }
            let timeout = match since {
                Some(_) => self.context.config.sync_timeout,
                None => std::time::Duration::ZERO,
            };
            // Read before the sync: a refusal of this token is renewed once (see `session`).
            let generation = self.client.token_generation();
            let synced = tokio::select! {
                synced = self.client.sync(since.as_deref(), &self.filter, timeout) => synced,
                _ = stop.changed() => return,
            };
            let committed = self.commit(since.as_deref(), synced).await;
            let cuts = std::mem::take(&mut *lock_cuts(&self.cuts));
            match committed {
                Ok(next) => {
                    let at_ms = self.context.clock.now_ms();
                    for (room_id, events_read) in cuts {
                        self.context.gap_cut(crate::GapCut {
                            room_id,
                            at_ms,
                            events_read,
                        });
                    }
                    since = Some(next);
                    backoff.reset();
                    if std::mem::take(&mut failing) {
                        self.context.health(AccountHealth::Open);
                    }
                }
                Err(error) => {
                    failing = true;
                    let wait = self.sync_failed(&error, generation, &mut backoff).await;
                    if pause(&mut stop, wait).await {
                        return;
                    }
                }
            }
        }
    }

    /// A sync (or its read or commit) that failed with `error`, the token of `generation` in
    /// use: reported and logged; a refused token renewed (see `session`). Returns the wait
    /// before the same position is asked again.
    async fn sync_failed(
        &self,
        error: &MatrixError,
        generation: u64,
        backoff: &mut Backoff,
    ) -> std::time::Duration {
        self.context.health(AccountHealth::Failing {
            stage: "sync",
            error: error.to_string(),
        });
        let wait = match error.is_unauthorized() {
            // Logged in again: the same position is asked with the new token after the
            // backoff's step (a second refusal in a row waits longer).
            true => match self.session.renew(generation, error).await {
                Ok(()) => backoff.step(),
                Err(renewal) => {
                    self.context.health(AccountHealth::Failing {
                        stage: "login",
                        error: renewal.to_string(),
                    });
                    backoff.after(&renewal)
                }
            },
            false => backoff.after(error),
        };
        tracing::warn!(mind = %self.mind(), %error, "matrix: sync failed; retrying in {wait:?}");
        wait
    }

    /// Waits while the Mind has `max_pending` or more unanswered deliveries (the sync position
    /// stays), or while the store cannot say how many it has (a failure, reported as one with
    /// its cause and retried with backoff — not taken for a hold); returns whether the
    /// connector is stopping.
    async fn hold(&self, stop: &mut watch::Receiver<bool>) -> bool {
        let max = self.context.config.max_pending;
        // What was last reported instead of `Open`, if anything.
        let mut held = false;
        let mut failing = false;
        let mut backoff = Backoff::default();
        loop {
            let wait = match self.pending().await {
                Ok(pending) if pending < max => {
                    if held || failing {
                        self.context.health(AccountHealth::Open);
                    }
                    return *stop.borrow();
                }
                Ok(pending) => {
                    failing = false;
                    if !held {
                        held = true;
                        self.context.health(AccountHealth::Held { pending });
                        Stats::add(&self.context.stats.holds, 1);
                        tracing::info!(mind = %self.mind(), max_pending = max,
                            "matrix: the Mind is {max}+ deliveries behind; holding the sync position");
                    }
                    HOLD_POLL
                }
                Err(error) => {
                    (held, failing) = (false, true);
                    self.context.health(AccountHealth::Failing {
                        stage: "store",
                        error: error.to_string(),
                    });
                    let wait = backoff.after(&error);
                    tracing::warn!(mind = %self.mind(), %error,
                        "matrix: cannot read how far behind the Mind is; retrying in {wait:?}");
                    wait
                }
            };
            if pause(stop, wait).await {
                return true;
            }
        }
    }

    /// How many deliveries are past the ack position: the store's count (one `COUNT`, not up
    /// to `max_pending` whole deliveries read before every sync and every poll of a hold).
    async fn pending(&self) -> Result<usize, MatrixError> {
        let mailbox = self.context.store.mailbox(self.mind()).await?;
        Ok(usize::try_from(mailbox.pending).unwrap_or(usize::MAX))
    }

    /// Reads one `/sync` answer and commits its mail with its `next_batch`; returns the new
    /// position.
    async fn commit(
        &mut self,
        since: Option<&str>,
        synced: Result<SyncResponse, MatrixError>,
    ) -> Result<String, MatrixError> {
        let response = synced?;
        let next = response.next_batch.clone();
        // Known as joined only once this answer is committed: an answer read again after a
        // failed commit must find its new rooms new again.
        let rooms: Vec<String> = response.rooms.join.keys().cloned().collect();
        let left: Vec<String> = response.rooms.leave.keys().cloned().collect();
        let read: Vec<String> = rooms.iter().chain(&left).cloned().collect();
        let deliveries = match self.read(since, response).await {
            Ok(deliveries) => deliveries,
            Err(error) => {
                self.forget_windows(&read);
                return Err(error);
            }
        };
        if deliveries.is_empty() && since == Some(next.as_str()) {
            // A long poll that timed out: nothing to commit, and no write to make.
            self.joined.extend(rooms);
            return Ok(next);
        }
        if !deliveries.is_empty() {
            crash_if_armed(self.context.config.fault, FaultPoint::SyncedBeforeCommit);
        }
        let batch = IntakeBatch {
            deliveries,
            cursor: Some(NewCursor {
                name: SYNC_CURSOR.to_owned(),
                value: next.clone(),
                updated_at_ms: self.context.clock.now_ms(),
            }),
        };
        let posted = match self.context.store.post_batch(self.mind(), &batch).await {
            Ok(posted) => posted,
            Err(error) => {
                self.forget_windows(&read);
                return Err(error.into());
            }
        };
        self.joined.extend(rooms);
        for room in &left {
            self.joined.remove(room);
        }
        let created = posted.iter().filter(|p| p.created).count();
        Stats::add(&self.context.stats.syncs, 1);
        Stats::add(&self.context.stats.delivered, created as u64);
        if created > 0 {
            tracing::debug!(mind = %self.mind(), created, "matrix: mail committed");
            (self.on_delivered)(self.mind());
        }
        Ok(next)
    }

    /// Drops the windows of an answer's rooms after it failed to commit. They already hold what
    /// the answer brought, and the retry of the same `since` pages a gap back only until an
    /// event its window holds: it would stop at the newest of the gap and lose the rest. Without
    /// a window the retry pages back to `since`, as a process after a restart does, and fetches
    /// older context once per room.
    fn forget_windows(&mut self, rooms: &[String]) {
        for room in rooms {
            self.windows.remove(room);
        }
    }

    /// What one `/sync` answer changes in the account's rooms before its mail is read: its
    /// direct chats, the invites it accepts, the upgrades it follows, and the replacements it
    /// could not join (reported until joined, dropped when the old room is left).
    async fn follow_account(
        &mut self,
        since: Option<&str>,
        response: &SyncResponse,
    ) -> Result<(), MatrixError> {
        if let Some(direct) = response
            .account_data
            .events
            .iter()
            .rfind(|e| e.kind == "m.direct")
        {
            lock(&self.directory).set_direct(&direct.content);
        }
        let invites = &response.rooms.invite;
        let accepted = invites::accept(
            &self.client,
            &self.directory,
            &self.context.account,
            invites,
        )
        .await?;
        let mut first = match since {
            // Asked after the answer and the invites it accepted: every join they hold is
            // older. A process started after one that stopped before its first commit finds
            // these joined already.
            None => {
                let filter = &self.spoken_filter;
                Some(first_start::since(&self.context, &self.client, filter).await?)
            }
            Some(_) => None,
        };
        self.first_start = (None, HashMap::new());
        self.left_since_first_start.clear();
        if let Some(first) = first.as_mut() {
            self.joined.retain(|room| !first.joined.contains(room));
            // Left after the answer was made: it holds the room, and the next answer the leave.
            self.left_since_first_start = (first.left.iter())
                .filter(|room| !response.rooms.join.contains_key(*room))
                .cloned()
                .collect();
            self.first_start = (first.position.take(), std::mem::take(&mut first.spoken));
        }
        let account = &self.context.account;
        let who = (account.mind.as_str(), account.user_id.as_str());
        // Before the tombstones: a replacement that is itself upgraded is followed on.
        let rooms = (since, &response.rooms.join, &self.joined);
        self.replacements =
            upgrades::replacements(&self.client, &self.directory, who, rooms, first.as_ref())
                .await?;
        let refused = upgrades::follow(&self.client, &self.directory, who, &response.rooms.join);
        let mut changed = self.not_joined.joined(&accepted);
        for refused in refused.await? {
            changed |= self.not_joined.replacement(&self.context, refused);
        }
        changed |= (self.not_joined).left(&self.context, response.rooms.leave.keys());
        if changed {
            self.not_joined.report(&self.context);
        }
        Ok(())
    }

    /// The mail of one `/sync` answer: each room's in its timeline's order, rooms interleaved
    /// by time.
    async fn read(
        &mut self,
        since: Option<&str>,
        response: SyncResponse,
    ) -> Result<Vec<NewDelivery>, MatrixError> {
        self.follow_account(since, &response).await?;
        let segment_start = self.segment_start().await?;
        let own = self.context.account.user_id.clone();
        let held =
            move |line: &Line| line.sender == own && segment_start.is_some_and(|s| line.ts >= s);
        let mut mail = Vec::new();
        // A room left since `since` (a kick, a ban) holds what was said before the leave,
        // which is mail like any other room's. Its members can no longer be looked up: it is
        // read only if the account already knows what the room is.
        // On a first answer, which holds no room left, a room left since the first start's
        // position is read from its timeline since then: what was said there before the leave
        // was said to a Mind already listening (before, it was never read).
        let left_since_first_start = (self.left_since_first_start.iter())
            .filter_map(|room_id| {
                let timeline = self.first_start.1.get(room_id)?.clone();
                Some((
                    room_id.clone(),
                    JoinedRoom {
                        timeline,
                        ..JoinedRoom::default()
                    },
                ))
            })
            .collect::<Vec<_>>();
        let left = (response.rooms.leave.into_iter())
            .chain(left_since_first_start)
            .filter(|(room_id, _)| !lock(&self.directory).needs_members(room_id))
            .map(|(room_id, room)| (room_id, room, false))
            .collect::<Vec<_>>();
        let joined = response
            .rooms
            .join
            .into_iter()
            .map(|(room_id, room)| (room_id, room, true));
        for (room_id, room, in_room) in joined.chain(left) {
            if let (true, Some(joined)) = (in_room, room.summary.joined_member_count) {
                lock(&self.directory).set_members(&room_id, joined);
            }
            let Some(kind) = self.kind_of(&room_id).await? else {
                continue;
            };
            let room_state = self.room_state(since, &room_id, &room);
            mail.push(
                self.read_room(since, &room_id, &kind, room, room_state, &held)
                    .await?,
            );
        }
        Ok(merge_rooms(mail))
    }

    /// What a room of the answer is to the account: whether it is new (not among the rooms it
    /// was in at its last commit), and the position to page it forwards from when its
    /// memberships since say whether it was in the room then (`None`: not paged forwards).
    fn room_state(
        &self,
        since: Option<&str>,
        room_id: &str,
        room: &JoinedRoom,
    ) -> (bool, Option<String>) {
        // New to the account: not among the rooms it was in at its last commit (on the
        // first sync, before its open joined its rooms or its first start began: a room
        // joined at the first start).
        let own = &self.context.account.user_id;
        let known = self.joined.contains(room_id)
            || (since.is_none() && self.left_since_first_start.iter().any(|r| r == room_id));
        let newly = !known;
        // Among them, but its membership changed since (a kick and a re-join, or a join
        // read again by a process that started after it): Synapse answers such a room as
        // newly joined, its timeline reaching back before `since`. Or not among them but
        // left or joined back in the answer (a kick while the process was stopped, the
        // room joined again at its start): only the account's memberships after `since`
        // say whether it was in the room then, and so whether what preceded the leave is
        // mail.
        // On a first answer, a room joined since the first start's position (Synapse's
        // word for one whose membership changed since) may be one the account was in at
        // the position, kicked after it and joined again by a later start's open before any
        // commit: its memberships after the position say so, read the same way (before,
        // it was read from the new join and what was said before the kick was lost).
        let position = match since {
            Some(since) => Some(since),
            None if newly => self.first_start.0.as_deref(),
            None => None,
        };
        let changed = room.timeline.events.iter().any(|e| match known {
            true => changes_membership(e, own),
            false => leaves_or_returns(e, own),
        });
        // A first answer's `limited` timeline of a room joined since the position may hold
        // none of the account's memberships: a kick and a re-join before a long conversation,
        // all before the first commit. Only pages from the position say whether the account
        // was in the room then, or when it joined (a direct chat: when it was invited, paged
        // back from the position when that was before it) and when it was out since (before,
        // the gap was paged back to the latest join, or a direct chat's latest invite, and
        // what was said between the first join and the kick was lost).
        let hidden = since.is_none() && newly && room.timeline.limited;
        let forward_from = position.filter(|_| changed || hidden).map(str::to_owned);
        (newly, forward_from)
    }

    /// When the Mind's open Persona segment began (`None`: no open segment), which says which
    /// of the account's own messages its transcript holds.
    async fn segment_start(&self) -> Result<Option<i64>, MatrixError> {
        let segment = self
            .context
            .store
            .current_segment(self.mind(), Role::Persona)
            .await?;
        Ok(segment
            .filter(|s| s.ended_at_ms.is_none())
            .map(|s| s.started_at_ms))
    }

    /// What the room is to the Mind, looking its members up once if nothing else says.
    async fn kind_of(&self, room_id: &str) -> Result<Option<RoomKind>, MatrixError> {
        let needs = lock(&self.directory).needs_members(room_id);
        if needs {
            let count = self.client.joined_member_count(room_id).await?;
            lock(&self.directory).set_members(room_id, u64::try_from(count).unwrap_or(u64::MAX));
        }
        Ok(lock(&self.directory).kind(room_id))
    }

    /// One room's mail: its events gathered, read into its window (with history fetched once
    /// if the window holds too little for context), each message from someone else after the
    /// history a delivery with its context. `newly`: the room is new to the account;
    /// `forward_from`: the position it is paged forwards from, its membership having changed
    /// since (see `since_membership_change`).
    async fn read_room(
        &mut self,
        since: Option<&str>,
        room_id: &str,
        kind: &RoomKind,
        room: JoinedRoom,
        (newly, forward_from): (bool, Option<String>),
        held: &(dyn Fn(&Line) -> bool + Sync),
    ) -> Result<Vec<(i64, NewDelivery)>, MatrixError> {
        let own = self.context.account.user_id.clone();
        let direct = *kind == RoomKind::Direct;
        let forward = self
            .read_forwards(since, room_id, &room, (newly, direct), forward_from)
            .await?;
        let (events, mail_from, back, out_at_start) = match forward {
            Some(forward) => forward,
            None => {
                let (events, mail_from, back) =
                    self.gather(since, room_id, room, (newly, direct)).await?;
                (events, mail_from, back, false)
            }
        };
        let has_mail = events[mail_from.min(events.len())..]
            .iter()
            .any(|e| e.sender != own && Line::of(e).is_some());
        let limits = self.limits();
        let window = self
            .windows
            .entry(room_id.to_owned())
            .or_insert_with(|| Window::new(limits.lines.max(1) * 4, back));
        let backfill = window.needs_backfill(limits).map(str::to_owned);
        if let (true, Some(from)) = (has_mail, backfill) {
            let limit = u32::try_from(limits.lines).unwrap_or(PAGE);
            let page = self
                .client
                .messages(
                    room_id,
                    &from,
                    None,
                    Direction::Backward,
                    limit,
                    &self.page_filter,
                )
                .await?;
            Stats::add(&self.context.stats.context_fetches, 1);
            let older: Vec<Line> = page.chunk.iter().rev().filter_map(Line::of).collect();
            self.windows
                .entry(room_id.to_owned())
                .or_default()
                .prepend(older, None);
        }
        let chunk = Chunk {
            room_id,
            kind,
            events: &events,
            mail_from,
            out_at_start,
        };
        let now = self.context.clock.now_ms();
        let window = self.windows.entry(room_id.to_owned()).or_default();
        Ok(read_chunk(window, &chunk, &own, limits, held, now))
    }
}
