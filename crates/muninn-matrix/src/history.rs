//! A room's recent history as this process saw it, and the mail and context read from a sync.
//!
//! ## Context from what the Mind already saw
//!
//! The seed's mouth read up to 20 lines / 16 KiB of history back from the homeserver for every
//! delivery, so a busy room's history was fetched and re-sent over and over. Here:
//!
//! - **From the sync, not the homeserver.** Each room keeps a [`Window`] of the message events
//!   this process has read — the first sync's history, every later sync, the pages of a
//!   `limited` timeline — and a delivery's context is the lines before it in that window. The
//!   homeserver is asked only for what this process never saw: once per room, when a delivery
//!   needs more lines than the window holds (after a restart), one `/messages` page back from
//!   the earliest token the window knows.
//! - **Shown once per segment.** Every line carries its event id, which is the id the Mind's
//!   renderer shows a line once per segment by; a line that was itself a delivery (the same event
//!   id) is recognised too. So when consecutive deliveries carry overlapping history, what the
//!   segment already holds is not shown again: it comes from the transcript.
//! - **The Mind's own words.** A message the account sent while the Mind's current Persona
//!   segment was open is in that segment's transcript as the Mind's reply, so it is left out;
//!   one sent before the segment began (the conversation before a refresh) is a context line
//!   like any other.
//! - **Bounded** as the seed's: at most [`Limits::lines`] lines and [`Limits::bytes`] bytes of
//!   sender and text, the newest kept.

use crate::rooms::RoomKind;
use crate::wire::{MessageContent, RoomEvent, is_joining, membership_of};
use muninn_store::{ContextLine, NewDelivery};
use std::collections::{HashSet, VecDeque};

/// How much history a delivery carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Lines.
    pub lines: usize,
    /// Bytes of sender and text.
    pub bytes: usize,
}

/// One message of a room's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The event id.
    pub id: String,
    /// The sender.
    pub sender: String,
    /// The text.
    pub text: String,
    /// The homeserver's time of it, Unix ms.
    pub ts: i64,
}

impl Line {
    /// The line of a message event; `None` for other events.
    pub fn of(event: &RoomEvent) -> Option<Line> {
        let message = MessageContent::of(event)?;
        Some(Line {
            id: event.event_id.clone(),
            sender: event.sender.clone(),
            text: message.text,
            ts: event.origin_server_ts,
        })
    }
}

/// A room's recent message lines, oldest first, as this process read them.
#[derive(Debug, Clone, Default)]
pub struct Window {
    lines: VecDeque<Line>,
    ids: HashSet<String>,
    /// A `/messages` token before the earliest line, while older history was never read.
    back: Option<String>,
    /// The most lines kept.
    cap: usize,
}

impl Window {
    /// An empty window keeping at most `cap` lines, whose older history starts before `back`.
    pub fn new(cap: usize, back: Option<String>) -> Window {
        Window {
            lines: VecDeque::new(),
            ids: HashSet::new(),
            back,
            cap: cap.max(1),
        }
    }

    /// Adds the newest line (a line already held is not added again).
    pub fn push(&mut self, line: Line) {
        if !self.ids.insert(line.id.clone()) {
            return;
        }
        self.lines.push_back(line);
        while self.lines.len() > self.cap {
            if let Some(old) = self.lines.pop_front() {
                self.ids.remove(&old.id);
            }
        }
    }

    /// Adds older lines (oldest first) before the held ones, and where history before them
    /// starts (`None`: nothing older to read).
    pub fn prepend(&mut self, older: Vec<Line>, back: Option<String>) {
        for line in older.into_iter().rev() {
            if self.lines.len() >= self.cap {
                break;
            }
            if self.ids.insert(line.id.clone()) {
                self.lines.push_front(line);
            }
        }
        self.back = back;
    }

    /// Whether the event is held.
    pub fn holds(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// The token to read older history from, when a delivery needs more lines than are held
    /// before it (the homeserver is asked once per room: [`prepend`](Self::prepend) clears
    /// it).
    pub fn needs_backfill(&self, limits: Limits) -> Option<&str> {
        (self.lines.len() < limits.lines)
            .then_some(self.back.as_deref())
            .flatten()
    }

    /// The context of the message `id`: the lines before it (all held lines if it is not
    /// held), newest first until a bound, then oldest first; lines `held` says the segment
    /// already has are left out without counting.
    pub fn context(
        &self,
        id: &str,
        limits: Limits,
        held: impl Fn(&Line) -> bool,
    ) -> Vec<ContextLine> {
        let end = self
            .lines
            .iter()
            .position(|l| l.id == id)
            .unwrap_or(self.lines.len());
        let mut picked = Vec::new();
        let mut bytes = 0;
        for line in self.lines.range(..end).rev() {
            if held(line) {
                continue;
            }
            let size = line.sender.len() + line.text.len();
            if picked.len() >= limits.lines || bytes + size > limits.bytes {
                break;
            }
            bytes += size;
            picked.push(ContextLine {
                id: Some(line.id.clone()),
                sender: line.sender.clone(),
                text: line.text.clone(),
            });
        }
        picked.reverse();
        picked
    }
}

/// Where mail starts in the events of a room the account joined since its last sync: after
/// its invite (a message sent while it was invited is for it), or after its join when it joined
/// uninvited. History before that is context. `None`: the account's membership is not among
/// the events, or its join followed an invite that is not (page back further). A profile
/// change (a join after a join) is not the join: the mail after the join and before it would
/// be taken for history.
pub fn mail_start(events: &[RoomEvent], own: &str) -> Option<usize> {
    let join = events.iter().rposition(|e| is_joining(e, own))?;
    match events[..join]
        .iter()
        .rposition(|e| membership_of(e, own).is_some())
    {
        Some(i) if membership_of(&events[i], own) == Some("invite") => Some(i + 1),
        Some(_) => Some(join + 1),
        // The invite is older than these events: the messages before the join, sent while
        // the account was invited, are mail too, and only more history says which they are.
        None if prev_membership(&events[join]) == Some("invite") => None,
        None => Some(join + 1),
    }
}

/// Just after the account's latest join among the events: where mail starts when its invite
/// could not be found (a gap longer than the connector pages back).
pub fn after_join(events: &[RoomEvent], own: &str) -> Option<usize> {
    events
        .iter()
        .rposition(|e| is_joining(e, own))
        .map(|j| j + 1)
}

/// Whether paging a new room back can stop at `event`: it is where [`mail_start`] can tell
/// where the mail starts — the account's invite (or another membership that is not a join),
/// or a join that followed no invite. A profile change (a join over a join) is not, nor a join
/// over an invite (the invite is further back).
pub fn settles_mail_start(event: &RoomEvent, own: &str) -> bool {
    match membership_of(event, own) {
        None => false,
        Some("join") => is_joining(event, own) && prev_membership(event) != Some("invite"),
        Some(_) => true,
    }
}

/// Whether the account was out of the room (neither joined nor invited) before the first of
/// its membership events among `events`, as that event's previous membership says; `None` when
/// there is none.
pub fn out_before(events: &[RoomEvent], own: &str) -> Option<bool> {
    let first = events.iter().find(|e| membership_of(e, own).is_some())?;
    Some(!matches!(prev_membership(first), Some("join" | "invite")))
}

/// Whether the account was joined before the first of its membership events among `events`,
/// as that event's previous membership says (`false` when there is none).
pub fn joined_before(events: &[RoomEvent], own: &str) -> bool {
    events
        .iter()
        .find(|e| membership_of(e, own).is_some())
        .is_some_and(|e| prev_membership(e) == Some("join"))
}

/// Whether the event is the account's first join of the room: nothing before it but, perhaps,
/// an invite (not a profile change, nor a return after a leave).
pub fn joins_first(event: &RoomEvent, own: &str) -> bool {
    membership_of(event, own) == Some("join")
        && matches!(prev_membership(event), None | Some("invite"))
}

/// Whether the event changes the account's membership (not a profile change, a join over a
/// join).
pub fn changes_membership(event: &RoomEvent, own: &str) -> bool {
    membership_of(event, own).is_some_and(|m| m != "join" || prev_membership(event) != Some("join"))
}

/// Whether the event says the account was in the room (or invited to it) before: it leaves,
/// is kicked or banned, or its invite is withdrawn or refused — or it joins back after one of
/// those.
pub fn leaves_or_returns(event: &RoomEvent, own: &str) -> bool {
    match membership_of(event, own) {
        None | Some("invite") => false,
        Some("join") => matches!(prev_membership(event), Some("leave" | "ban")),
        Some(_) => true,
    }
}

fn prev_membership(event: &RoomEvent) -> Option<&str> {
    event
        .unsigned
        .pointer("/prev_content/membership")
        .and_then(serde_json::Value::as_str)
}

/// One room's events from a sync, as the connector reads them.
#[derive(Debug)]
pub struct Chunk<'a> {
    /// The room id.
    pub room_id: &'a str,
    /// What the room is to the Mind.
    pub kind: &'a RoomKind,
    /// Its events, oldest first.
    pub events: &'a [RoomEvent],
    /// Events before this index are history (context, not mail).
    pub mail_from: usize,
    /// Whether the account was out of the room at the first event: until one of its
    /// membership events says otherwise, what is said is history.
    pub out_at_start: bool,
}

/// Reads a room's chunk into its window and returns its mail: one delivery per message from
/// someone else at or after `mail_from`, with the context before it. `own` is the account's
/// user id; `held` says which lines the Mind's segment already holds.
pub fn read_chunk(
    window: &mut Window,
    chunk: &Chunk<'_>,
    own: &str,
    limits: Limits,
    held: &dyn Fn(&Line) -> bool,
    received_at_ms: i64,
) -> Vec<(i64, NewDelivery)> {
    let mut mail = Vec::new();
    // The account's membership as of the event: a message said while it was out of the room
    // (kicked, banned, left, between two of its joins) is history, not mail.
    let mut out = chunk.out_at_start;
    for (i, event) in chunk.events.iter().enumerate() {
        if let Some(membership) = membership_of(event, own) {
            out = !matches!(membership, "join" | "invite");
        }
        let Some(message) = MessageContent::of(event) else {
            continue;
        };
        if i >= chunk.mail_from && !out && event.sender != own {
            let (room, is_direct) = match chunk.kind {
                RoomKind::Public { name } => (name.clone(), false),
                RoomKind::Direct => (chunk.room_id.to_owned(), true),
            };
            let to_you = message.mentions.iter().any(|m| m == own) || message.text.contains(own);
            mail.push((
                event.origin_server_ts,
                NewDelivery {
                    room,
                    sender: event.sender.clone(),
                    is_direct,
                    to_you,
                    context: window.context(&event.event_id, limits, held),
                    text: message.text,
                    source_id: event.event_id.clone(),
                    received_at_ms,
                },
            ));
        }
        if let Some(line) = Line::of(event) {
            window.push(line);
        }
    }
    mail
}

/// Rooms' mail in one order: each room's as its timeline has it (the homeserver's order, which
/// the senders' clocks need not follow), the rooms interleaved by time, the earliest next
/// message first.
pub fn merge_rooms(rooms: Vec<Vec<(i64, NewDelivery)>>) -> Vec<NewDelivery> {
    let mut queues: Vec<VecDeque<(i64, NewDelivery)>> =
        rooms.into_iter().map(VecDeque::from).collect();
    let mut merged = Vec::new();
    loop {
        let next = queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.front().map(|(ts, _)| (*ts, i)))
            .min();
        let Some((_, i)) = next else {
            return merged;
        };
        if let Some((_, delivery)) = queues[i].pop_front() {
            merged.push(delivery);
        }
    }
}

#[cfg(test)]
mod tests;
