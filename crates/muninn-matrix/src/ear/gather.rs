//! One room's events from one answer, and where its mail starts: by what the room is to the
//! account — a replacement read from its start, a room it was in before the Mind's first start
//! read on its first answer, one joined at that start, one joined since the last sync, or one
//! it was in at the last sync — with a `limited` timeline's gap paged back (`paging`).

use super::Ear;
use crate::error::MatrixError;
use crate::history::{after_join, mail_start, out_before, settles_mail_start};
use crate::wire::{JoinedRoom, RoomEvent, is_joining};
use std::collections::HashSet;

/// A room's events gathered from one answer, oldest first: the events, the index its mail
/// starts at (what precedes is context) and the token before the oldest.
pub(super) type Gathered = (Vec<RoomEvent>, usize, Option<String>);

impl Ear {
    /// A room's events from one sync, oldest first, where its mail starts, and the token
    /// before the oldest: a `limited` timeline with the gap since the last sync paged back; for
    /// a room the account joined since, mail from its invite or join on (paged back to find
    /// it); on the first sync, no mail in a room the account was in before this start, and mail
    /// from the join on in one it joined at this start (a direct chat's from its invite on).
    pub(super) async fn gather(
        &self,
        since: Option<&str>,
        room_id: &str,
        room: JoinedRoom,
        (newly, direct): (bool, bool),
    ) -> Result<Gathered, MatrixError> {
        let timeline = room.timeline;
        let events = timeline.events;
        // A whole (not `limited`) timeline of a first sync or a new room goes back to the
        // room's start: there is no older history to read.
        let whole = !timeline.limited && (since.is_none() || newly);
        let back = timeline.prev_batch.filter(|_| !whole);
        let limited = timeline.limited;
        match (since, newly) {
            _ if self.replacements.contains(room_id) => {
                self.replacement_from_its_start(room_id, events, back, limited)
                    .await
            }
            (None, false) => self.first_answer_of_old_room(room_id, events, back).await,
            (None, true) if !direct => {
                self.joined_at_first_start(room_id, events, back, limited)
                    .await
            }
            (_, true) => self.new_room(room_id, events, back, limited).await,
            (Some(since), false) => self.known_room(since, room_id, events, back, limited).await,
        }
    }

    /// An upgraded room's replacement (on the first sync, one whose old room was upgraded
    /// since the first start): all of it is mail, from its start, paged back when `limited`.
    async fn replacement_from_its_start(
        &self,
        room_id: &str,
        mut events: Vec<RoomEvent>,
        back: Option<String>,
        limited: bool,
    ) -> Result<Gathered, MatrixError> {
        let Some(from) = back.as_deref().filter(|_| limited) else {
            return Ok((events, 0, back));
        };
        let never = |_: &RoomEvent| false;
        let (older, token, _) = self.page_back(room_id, from, None, &never).await?;
        events.splice(0..0, older);
        Ok((events, 0, token))
    }

    /// A room (not a direct chat) joined at this start, before the first sync answered: what
    /// follows the join was said to a Mind already listening and is mail. What came before it,
    /// said while the account was invited too, is the backlog of a room it was not yet
    /// listening in (a direct chat's invite, in `new_room`, is addressed to it).
    async fn joined_at_first_start(
        &self,
        room_id: &str,
        mut events: Vec<RoomEvent>,
        back: Option<String>,
        limited: bool,
    ) -> Result<Gathered, MatrixError> {
        let own = &self.context.account.user_id;
        if let Some(start) = after_join(&events, own) {
            return Ok((events, start, back));
        }
        let Some(from) = back.as_deref().filter(|_| limited) else {
            return Ok((events, 0, back));
        };
        let joins = |e: &RoomEvent| is_joining(e, own);
        let (older, token, passed) = self.page_back(room_id, from, None, &joins).await?;
        // What was said just before the join is context (history before `start`).
        events.splice(0..0, passed.into_iter().chain(older));
        let start = after_join(&events, own).unwrap_or(0);
        Ok((events, start, token))
    }

    /// A room the account joined since the last sync (or a direct chat on the first): mail
    /// from its invite or its join on, paged back to find it.
    async fn new_room(
        &self,
        room_id: &str,
        mut events: Vec<RoomEvent>,
        back: Option<String>,
        limited: bool,
    ) -> Result<Gathered, MatrixError> {
        let own = &self.context.account.user_id;
        if let Some(start) = mail_start(&events, own) {
            return Ok((events, start, back));
        }
        let Some(from) = back.as_deref().filter(|_| limited) else {
            let start = after_join(&events, own).unwrap_or(0);
            return Ok((events, start, back));
        };
        // Back past a profile change (a join over the join) and a join over an invite to the
        // membership that says where the mail starts: stopping at the newest of the account's
        // memberships lost what came between it and the join.
        let settles = |e: &RoomEvent| settles_mail_start(e, own);
        let (older, token, passed) = self.page_back(room_id, from, None, &settles).await?;
        // What precedes the membership found is context: the mail starts at or after it,
        // which every older event leaves as it is.
        events.splice(0..0, passed.into_iter().chain(older));
        let start = mail_start(&events, own)
            .or_else(|| after_join(&events, own))
            .unwrap_or(0);
        Ok((events, start, token))
    }

    /// A room the account was in at `since`: all of it is mail, a `limited` timeline's gap
    /// paged back to `since` (or to an event its window already holds).
    async fn known_room(
        &self,
        since: &str,
        room_id: &str,
        mut events: Vec<RoomEvent>,
        back: Option<String>,
        limited: bool,
    ) -> Result<Gathered, MatrixError> {
        let own = &self.context.account.user_id;
        let Some(from) = back.as_deref().filter(|_| limited) else {
            return Ok((events, 0, back));
        };
        let window = self.windows.get(room_id);
        let seen = |e: &RoomEvent| window.is_some_and(|w| w.holds(&e.event_id));
        // Past an event the window holds: the window has what is older.
        let (older, token, _) = self.page_back(room_id, from, Some(since), &seen).await?;
        events.splice(0..0, older);
        // The account's own join in the gap: an answer read again by a process that started
        // after the join (so the room is among its rooms) whose timeline was too short to hold
        // it. The room is new after all; what came before is context. A gap that opens with
        // the account leaving (a kick, then a re-join) is an old room's: what was said while it
        // was in is mail, which `read_chunk` tells.
        let start = match out_before(&events, own) {
            Some(true) => mail_start(&events, own).unwrap_or(0),
            _ => 0,
        };
        Ok((events, start, token))
    }

    /// A first answer's `events` of a room the account was in before the Mind's first start
    /// (`back`: the token before them), oldest first, where its mail starts and the token
    /// before the oldest. What was said up to the first start's position is the backlog,
    /// context never answered; what was said after it was said to a Mind already listening
    /// and is mail — also when that start stopped before its first commit and the answer is
    /// read by a process started long after (before, all of it was history and never
    /// answered). What was said after the position is the room's timeline since it, paged
    /// back to it when `limited` as a gap since a sync position is, cut at this answer's last
    /// event: it was asked after this answer, and what follows that event is the next one's.
    async fn first_answer_of_old_room(
        &self,
        room_id: &str,
        mut events: Vec<RoomEvent>,
        back: Option<String>,
    ) -> Result<Gathered, MatrixError> {
        let history = events.len();
        let (position, spoken) = &self.first_start;
        let (Some(position), Some(spoken)) = (position, spoken.get(room_id)) else {
            return Ok((events, history, back));
        };
        let mut after = spoken.events.clone();
        let mut token = spoken.prev_batch.clone();
        if let (true, Some(from)) = (spoken.limited, spoken.prev_batch.as_deref()) {
            let never = |_: &RoomEvent| false;
            let (older, older_token, _) = self
                .page_back(room_id, from, Some(position), &never)
                .await?;
            after.splice(0..0, older);
            token = older_token;
        }
        // This answer's last event not among them: nothing was said between the position and
        // this answer's end.
        let last = events.last().map(|e| e.event_id.clone());
        let Some(end) = after
            .iter()
            .position(|e| Some(&e.event_id) == last.as_ref())
        else {
            return Ok((events, history, back));
        };
        after.truncate(end + 1);
        let said_after: HashSet<&str> = after.iter().map(|e| e.event_id.as_str()).collect();
        let before = (events.iter())
            .take_while(|e| !said_after.contains(e.event_id.as_str()))
            .count();
        events.truncate(before);
        events.extend(after);
        // Nothing of the answer's own timeline before the position: the token is the one
        // before the oldest event since it.
        let token = if before == 0 { token } else { back };
        Ok((events, before, token))
    }
}
