//! A gap's pages: a `limited` timeline's gap paged back to the last position, a room whose
//! membership changed paged forwards from it, both bounded by `max_gap_events`, and the cuts
//! that bound makes (noted for the answer in hand, counted once it is committed).

use super::{Ear, PAGE};
use crate::Stats;
use crate::client::Direction;
use crate::error::MatrixError;
use crate::history::{joined_before, out_before, settles_mail_start};
use crate::wire::{JoinedRoom, MessagesResponse, RoomEvent, is_joining, membership_of};
use std::collections::HashSet;
use std::sync::Mutex;

/// The events to ask for in the next page of a gap that holds `paged` of at most `max`: a
/// page, or what is left (so that the bound is the bound, not the next page's end).
pub(super) fn page_size(paged: usize, max: usize) -> u32 {
    let left = u32::try_from(max.saturating_sub(paged)).unwrap_or(PAGE);
    PAGE.min(left).max(1)
}

/// A room's events paged forwards from `since` (see `Ear::since_membership_change`).
pub(super) struct Forward {
    pub(super) events: Vec<RoomEvent>,
    /// The position the pages start at.
    pub(super) since: String,
    /// The token before the first event (`None`: the room's start).
    pub(super) back: Option<String>,
    /// Whether the account was out of the room at the first event.
    pub(super) out_at_start: bool,
    /// Events read when the pages stopped at `max_gap_events` short of the timeline: what lay
    /// between is skipped if these pages are the ones read.
    pub(super) cut: Option<usize>,
}

impl Forward {
    /// Where the mail of these pages starts, if they are read: `None` sets them aside. A room
    /// the process did not know it was in (`newly`) is paged forwards only to learn whether it
    /// was in at `since`. If it was not (invited back after a kick, say), it is a new room:
    /// what was said while it was invited before `since` is mail, and only the answer's
    /// timeline, reaching back, holds it. But on a `first_answer`, a room the account was not
    /// in at the first start's position was joined at that start, and the pages say when the
    /// account was out since (a kick or a leave, then a re-join before the first commit): a
    /// room's mail starts after that first join (what was said before it, while invited too,
    /// is history); a `direct` chat's at its invite, which these pages hold if it came after
    /// the position (`out_at_start` keeps what precedes it history) and
    /// `Ear::back_to_the_invite` finds before it otherwise. Before, such a room was read from
    /// its latest join (a direct chat from its latest invite), and what was said between the
    /// first join and the kick was lost.
    fn mail_from(
        &self,
        own: &str,
        newly: bool,
        (first_answer, direct): (bool, bool),
    ) -> Option<usize> {
        if !newly || joined_before(&self.events, own) {
            return Some(0);
        }
        if !first_answer {
            return None;
        }
        if direct {
            return Some(0);
        }
        let first_join = self.events.iter().position(|e| is_joining(e, own));
        first_join.map(|join| join + 1)
    }

    /// The pages read forwards from `since` (`events`), joined to the answer's `timeline`: cut
    /// at its last event if they reached it, followed by what it holds after them otherwise.
    fn of(mut events: Vec<RoomEvent>, timeline: &[RoomEvent], own: &str, since: &str) -> Forward {
        let last = timeline.last().map(|e| e.event_id.as_str());
        let reached = events
            .iter()
            .position(|e| Some(e.event_id.as_str()) == last);
        let held: HashSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        // The pages stopped inside the timeline (which reaches back): nothing lies between
        // them, so nothing was skipped; the timeline goes on from the last event they share.
        let overlap = reached
            .is_none()
            .then(|| {
                timeline
                    .iter()
                    .rposition(|e| held.contains(e.event_id.as_str()))
            })
            .flatten();
        let mut cut = None;
        let out = match (reached, overlap) {
            (Some(end), _) => {
                events.truncate(end + 1);
                out_before(&events, own) == Some(true)
            }
            (None, Some(last)) => {
                events.extend(timeline[last + 1..].iter().cloned());
                out_before(&events, own) == Some(true)
            }
            (None, None) => {
                // Paged forwards to the limit (or to an end) without reaching the timeline: its
                // events are the newest and are read whatever lies between was skipped.
                cut = Some(events.len());
                // Whether the account was in at `since` is for the pages to say. The timeline
                // is read from its start where that is sure to follow the pages (pages that
                // hold the first event after `since` and share none with it) and the account's
                // first membership event in it says the account was in before it: what precedes
                // that event was said while it was in, whatever the gap held. Otherwise it is
                // read on from that event, which sets the membership from there: what precedes
                // it was said while the account was out, or may be older than `since` (without
                // pages, Synapse's timeline of such a room reaches back; its old invite said
                // the account was out at `since`).
                let out = out_before(&events, own) == Some(true);
                let first = match events.is_empty() || out_before(timeline, own) == Some(true) {
                    true => timeline
                        .iter()
                        .position(|e| membership_of(e, own).is_some())
                        .unwrap_or(0),
                    false => 0,
                };
                events.extend(timeline[first..].iter().cloned());
                out
            }
        };
        Forward {
            events,
            since: since.to_owned(),
            back: Some(since.to_owned()),
            out_at_start: out,
            cut,
        }
    }
}

impl Ear {
    /// A room's events paged forwards from `forward_from` (see `since_membership_change`), if
    /// they are read (see `Forward::mail_from`): the events, where the mail starts, the token
    /// before the first and whether the account was out at it. `None`: the room is read from
    /// its timeline (`gather`). `newly`: the room is new to the account; `direct`: a direct
    /// chat.
    pub(super) async fn read_forwards(
        &self,
        since: Option<&str>,
        room_id: &str,
        room: &JoinedRoom,
        (newly, direct): (bool, bool),
        forward_from: Option<String>,
    ) -> Result<Option<(Vec<RoomEvent>, usize, Option<String>, bool)>, MatrixError> {
        let own = &self.context.account.user_id;
        let Some(from) = forward_from.filter(|_| !self.replacements.contains(room_id)) else {
            return Ok(None);
        };
        let mut forward = self.since_membership_change(&from, room_id, room).await?;
        let first_answer = since.is_none();
        let Some(mut mail_from) = forward.mail_from(own, newly, (first_answer, direct)) else {
            return Ok(None);
        };
        if first_answer && direct && newly {
            mail_from = self.back_to_the_invite(room_id, &mut forward).await?;
        }
        // Recorded only for pages that are read: pages set aside above skip nothing (the room
        // is read as a new one, from its timeline and the gap behind it).
        if let Some(read) = forward.cut {
            self.cut(room_id, read);
            tracing::error!(mind = %self.mind(), room = %room_id, paged = read,
                "matrix: paging from the last sync did not reach the timeline; events between are skipped");
        }
        Ok(Some((
            forward.events,
            mail_from,
            forward.back,
            forward.out_at_start,
        )))
    }

    /// A direct chat's `forward` pages of a first answer (see `Forward::mail_from`) whose
    /// first membership of the account is its join over an invite: the invite is older than
    /// the position, and what was said after it was said to the Mind, as in any direct chat.
    /// Pages back from the position to the invite (at most `max_gap_events`) and puts those
    /// events before the pages. Returns where the mail starts: after the invite, or at the
    /// position when paging back did not reach it. Other pages are left as they are (mail from
    /// their first event, `out_at_start` saying whether the account was out until its invite).
    async fn back_to_the_invite(
        &self,
        room_id: &str,
        forward: &mut Forward,
    ) -> Result<usize, MatrixError> {
        let own = &self.context.account.user_id;
        let first = forward
            .events
            .iter()
            .find(|e| membership_of(e, own).is_some());
        if !first.is_some_and(|e| is_joining(e, own) && !forward.out_at_start) {
            return Ok(0);
        }
        let settles = |e: &RoomEvent| settles_mail_start(e, own);
        let (older, token, passed) = self
            .page_back(room_id, &forward.since, None, &settles)
            .await?;
        let invited = (older.first()).is_some_and(|e| membership_of(e, own) == Some("invite"));
        let mail_from = passed.len() + if invited { 1 } else { older.len() };
        forward.events.splice(0..0, passed.into_iter().chain(older));
        forward.back = token;
        Ok(mail_from)
    }

    /// A room the account was in at `since` whose membership changed since: the events after
    /// `since` (paged forwards from it to the timeline's last event), each message mail if the
    /// account was in the room when it was said. Returns the events (mail from the first), the
    /// token before them, whether the account was out at the first and whether the pages were
    /// cut (for the caller to record if it reads them).
    async fn since_membership_change(
        &self,
        since: &str,
        room_id: &str,
        room: &JoinedRoom,
    ) -> Result<Forward, MatrixError> {
        let own = &self.context.account.user_id;
        let last = room.timeline.events.last().map(|e| e.event_id.clone());
        let max = self.context.config.max_gap_events;
        let mut events = Vec::new();
        let mut token = since.to_owned();
        loop {
            let page = self
                .gap_page(room_id, (&token, None), Direction::Forward, events.len())
                .await?;
            let empty = page.chunk.is_empty();
            let before = events.len();
            events.extend(page.chunk);
            let done = events[before..]
                .iter()
                .any(|e| Some(&e.event_id) == last.as_ref());
            match page.end.filter(|_| !empty && !done) {
                Some(end) if events.len() < max => token = end,
                Some(end) => {
                    // At the limit: the pages are cut only if what follows them is not the
                    // timeline's first event (a gap exactly as long as the limit skips nothing).
                    let next = self.one_more(room_id, (&end, None), Direction::Forward);
                    let first = room.timeline.events.first().map(|e| &e.event_id);
                    let next = next.await?.chunk.into_iter().next();
                    if let Some(next) = next.filter(|n| Some(&n.event_id) == first) {
                        events.push(next);
                    }
                    break;
                }
                None => break,
            }
        }
        Ok(Forward::of(events, &room.timeline.events, own, since))
    }

    /// Pages a room back from `from` (to `to`, if given) until an event `stop` accepts
    /// (included), the start of the room, or `max_gap_events`; returns the events oldest
    /// first, the token before the oldest, and the events of the last page older than the one
    /// it stopped at (oldest first). A page's token is the one before its oldest event:
    /// whoever keeps that token and not those events never reads them (they were lost as
    /// context before the first mail of a room paged back to its join).
    pub(super) async fn page_back(
        &self,
        room_id: &str,
        from: &str,
        to: Option<&str>,
        stop: &(dyn Fn(&RoomEvent) -> bool + Sync),
    ) -> Result<(Vec<RoomEvent>, Option<String>, Vec<RoomEvent>), MatrixError> {
        let max = self.context.config.max_gap_events;
        let mut newest_first = Vec::new();
        let mut token = from.to_owned();
        loop {
            let page = self
                .gap_page(
                    room_id,
                    (&token, to),
                    Direction::Backward,
                    newest_first.len(),
                )
                .await?;
            let empty = page.chunk.is_empty();
            let mut hit = false;
            let mut chunk = page.chunk.into_iter();
            for event in chunk.by_ref() {
                hit = stop(&event);
                newest_first.push(event);
                if hit {
                    break;
                }
            }
            let passed: Vec<RoomEvent> = chunk.rev().collect();
            let mut end = page.end.filter(|_| !empty);
            match end.take() {
                Some(next) if !hit && newest_first.len() < max => token = next,
                Some(next) if !hit => {
                    end = self
                        .past_the_limit(room_id, (next, to), stop, &mut newest_first)
                        .await?;
                    newest_first.reverse();
                    return Ok((newest_first, end, Vec::new()));
                }
                // The start of the room, the end of the gap, or the event looked for (at the
                // limit or not: nothing older was wanted): no cut.
                last => {
                    newest_first.reverse();
                    let token = last.or_else(|| to.map(str::to_owned));
                    return Ok((newest_first, token, passed));
                }
            }
        }
    }

    /// A gap paged back to `max_gap_events` (`newest_first`, `from` the token before its oldest)
    /// without the event looked for: one event further says whether it was cut. None (the gap
    /// ends at the limit) or the event looked for (added) is no cut; another is, recorded and
    /// logged. Before, a gap exactly as long as the limit was counted as cut. Returns the token
    /// before the oldest event kept.
    async fn past_the_limit(
        &self,
        room_id: &str,
        (from, to): (String, Option<&str>),
        stop: &(dyn Fn(&RoomEvent) -> bool + Sync),
        newest_first: &mut Vec<RoomEvent>,
    ) -> Result<Option<String>, MatrixError> {
        let mut page = self
            .one_more(room_id, (&from, to), Direction::Backward)
            .await?;
        let end = page.end.take();
        let Some(next) = page.chunk.into_iter().next() else {
            return Ok(Some(from));
        };
        if stop(&next) {
            newest_first.push(next);
            return Ok(end.or(Some(from)));
        }
        let max = self.context.config.max_gap_events;
        self.cut(room_id, newest_first.len());
        tracing::error!(mind = %self.mind(), room = %room_id,
            "matrix: a gap of more than {max} events; older ones are skipped");
        Ok(Some(from))
    }

    /// A page of one event past a gap's limit, to tell a gap exactly as long as the limit
    /// (which skipped nothing) from a longer one; counted in the stats.
    async fn one_more(
        &self,
        room_id: &str,
        (from, to): (&str, Option<&str>),
        dir: Direction,
    ) -> Result<MessagesResponse, MatrixError> {
        let page = self
            .client
            .messages(room_id, from, to, dir, 1, &self.page_filter)
            .await?;
        Stats::add(&self.context.stats.pages, 1);
        Ok(page)
    }

    /// One `/messages` page of a gap of `room_id` between `(from, to)`, sized so that a gap of
    /// which `read` events are in hand never passes `max_gap_events`; counted in the stats.
    async fn gap_page(
        &self,
        room_id: &str,
        (from, to): (&str, Option<&str>),
        dir: Direction,
        read: usize,
    ) -> Result<MessagesResponse, MatrixError> {
        let limit = page_size(read, self.context.config.max_gap_events);
        let page = self
            .client
            .messages(room_id, from, to, dir, limit, &self.page_filter)
            .await?;
        Stats::add(&self.context.stats.pages, 1);
        Ok(page)
    }

    /// Notes a gap of `room_id` cut after `read` events, to be counted if the answer commits.
    pub(super) fn cut(&self, room_id: &str, read: usize) {
        let read = u64::try_from(read).unwrap_or(u64::MAX);
        lock_cuts(&self.cuts).push((room_id.to_owned(), read));
    }
}

/// Locks the cuts of the answer in hand (a poisoned lock still holds a valid list).
pub(super) fn lock_cuts(
    cuts: &Mutex<Vec<(String, u64)>>,
) -> std::sync::MutexGuard<'_, Vec<(String, u64)>> {
    cuts.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
