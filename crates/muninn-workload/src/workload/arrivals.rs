//! The rooms' side of the stream: conversations drawn per [`Variant`], their messages as
//! [`Arrival`]s with the room's backlog as context, and the schedule that cuts them into Persona
//! turns ([`next_batch`], [`schedule`]).

use super::text::{chance, words};
use super::{PersonaParams, Span, Variant};
use crate::synth::{SplitMix64, idle_gap};
use muninn_core::money::Tokens;
use muninn_core::render::{Delivery, HistoryLine};
use muninn_core::tokenize::count;
use std::collections::VecDeque;
use std::ops::Range;

/// One delivery: a message in one of her rooms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// Mailbox sequence number (0, 1, …, in arrival order).
    pub seq: u64,
    /// When it arrived, Unix ms.
    pub at_ms: i64,
    /// The room event id.
    pub id: String,
    /// The room.
    pub room: String,
    /// Whether the room is a DM.
    pub is_direct: bool,
    /// The sender.
    pub sender: String,
    /// Whether the sender is an operator.
    pub operator: bool,
    /// Whether it tags her (every DM does).
    pub to_you: bool,
    /// The message.
    pub text: String,
    /// Its tokens (`count(text)`).
    pub tokens: Tokens,
    /// The conversation it belongs to (0, 1, … in start order).
    pub conversation: u64,
    /// The room's previous lines, oldest first (at most `context_lines`, `context_max_bytes`).
    pub context: Vec<HistoryLine>,
}

impl Arrival {
    /// As the renderer's delivery.
    pub fn delivery(&self) -> Delivery {
        Delivery {
            id: self.id.clone(),
            room: self.room.clone(),
            sender: self.sender.clone(),
            is_direct: self.is_direct,
            to_you: self.to_you,
            text: self.text.clone(),
            context: self.context.clone(),
        }
    }
}

const ARRIVALS_STREAM: u64 = 0x0072_6f6f_6d73; // "rooms"

pub(super) const MIND_STREAM: u64 = 0x6d69_6e64; // "mind"

pub(super) fn room_names(params: &PersonaParams) -> (Vec<String>, Vec<String>) {
    let public = (0..params.public_rooms)
        .map(|i| format!("#room-{i}"))
        .collect();
    let dms = (0..params.dm_rooms).map(|i| format!("dm-{i}")).collect();
    (public, dms)
}

fn sender_name(i: usize) -> String {
    format!("member-{i}")
}

/// The DM peer of DM room `i`: alternately an operator and a member.
fn dm_peer(params: &PersonaParams, i: usize) -> usize {
    if i.is_multiple_of(2) && params.operators > 0 {
        (i / 2) % params.operators
    } else {
        (params.operators + i) % params.senders.max(1)
    }
}

/// The variant in force at `at_ms` (only `mix` changes over time).
fn phase(params: &PersonaParams, variant: Variant, at_ms: i64) -> Variant {
    if variant != Variant::Mix {
        return variant;
    }
    const ORDER: [Variant; 5] = [
        Variant::B6,
        Variant::Busy,
        Variant::Quiet,
        Variant::DmHeavy,
        Variant::LongGaps,
    ];
    let k = (at_ms - params.start_ms).max(0) as u64 / params.mix_phase_ms.max(1);
    ORDER[(k % ORDER.len() as u64) as usize]
}

struct RawMessage {
    at_ms: i64,
    conversation: u64,
    room: usize,
    is_direct: bool,
    sender: usize,
    to_you: bool,
    text: String,
}

/// Generates the conversations that start before `until_ms`, in start order; prefix-stable: a
/// longer horizon only adds conversations.
fn conversations(
    params: &PersonaParams,
    variant: Variant,
    seed: u64,
    until_ms: i64,
) -> Vec<RawMessage> {
    let mut rng = SplitMix64::new(seed ^ ARRIVALS_STREAM);
    let mut out = Vec::new();
    let mut start = params.start_ms;
    let mut conversation = 0u64;
    let rooms = params.public_rooms + params.dm_rooms;
    if rooms == 0 || params.senders == 0 {
        return out;
    }
    let quiet_weight: u64 = params.quiet_gaps.iter().map(|b| u64::from(b.weight)).sum();
    while start < until_ms {
        let shape = phase(params, variant, start);
        let (room, is_direct) = pick_room(params, shape, &mut rng);
        let scene = Scene {
            conversation,
            room,
            is_direct,
            cast: pick_cast(params, (room, is_direct), &mut rng),
        };
        let last_at = messages(params, &scene, start, &mut rng, &mut out);
        start = next_start(params, shape, (start, last_at), quiet_weight, &mut rng);
        conversation += 1;
    }
    out
}

/// Where one conversation happens and who speaks in it.
struct Scene {
    /// Its number (0, 1, … in start order).
    conversation: u64,
    room: usize,
    is_direct: bool,
    /// Its senders, one per pick (a sender may appear more than once).
    cast: Vec<usize>,
}

/// The room of a conversation starting while `shape` is in force, and whether it is a DM: DMs
/// are drawn at the shape's DM share, and only where there are rooms of both kinds.
fn pick_room(params: &PersonaParams, shape: Variant, rng: &mut SplitMix64) -> (usize, bool) {
    let dm_pct = if shape == Variant::DmHeavy {
        params.dm_heavy_pct
    } else {
        params.dm_pct
    };
    let dm = params.dm_rooms > 0 && (params.public_rooms == 0 || chance(rng, dm_pct));
    if dm {
        let i = rng.range(&(0..=params.dm_rooms as u64 - 1)) as usize;
        (params.public_rooms + i, true)
    } else {
        (
            rng.range(&(0..=params.public_rooms as u64 - 1)) as usize,
            false,
        )
    }
}

/// The senders of a conversation: a DM's peer, or a few senders drawn from everyone.
fn pick_cast(
    params: &PersonaParams,
    (room, is_direct): (usize, bool),
    rng: &mut SplitMix64,
) -> Vec<usize> {
    if is_direct {
        vec![dm_peer(params, room - params.public_rooms)]
    } else {
        let n = rng.range(&params.conversation_senders).max(1);
        (0..n)
            .map(|_| rng.range(&(0..=params.senders as u64 - 1)) as usize)
            .collect()
    }
}

/// Draws a conversation's messages, the first at `start`, into `out`; returns when the last
/// arrived (`start` if it has none).
fn messages(
    params: &PersonaParams,
    scene: &Scene,
    start: i64,
    rng: &mut SplitMix64,
    out: &mut Vec<RawMessage>,
) -> i64 {
    let n = rng.range(&params.conversation_messages);
    let mut at = start;
    for m in 0..n {
        if m > 0 {
            at += rng.range(&params.message_gap_ms) as i64;
        }
        let sender = scene.cast[rng.range(&(0..=scene.cast.len() as u64 - 1)) as usize];
        let tag_pct = if sender < params.operators {
            params.operator_tag_pct
        } else {
            params.member_tag_pct
        };
        let to_you = scene.is_direct || chance(rng, tag_pct);
        let tokens = params.message_tokens.draw(rng);
        out.push(RawMessage {
            at_ms: at,
            conversation: scene.conversation,
            room: scene.room,
            is_direct: scene.is_direct,
            sender,
            to_you,
            text: words(rng, tokens),
        });
    }
    at
}

/// When the conversation after one that started at `start` and ended at `last_at` starts: the
/// busy and quiet shapes start conversations at a steady pace, the others after a gap from the
/// last message; always later than `start`.
fn next_start(
    params: &PersonaParams,
    shape: Variant,
    (start, last_at): (i64, i64),
    quiet_weight: u64,
    rng: &mut SplitMix64,
) -> i64 {
    let every = |mean: u64, rng: &mut SplitMix64| rng.range(&(mean / 2..=mean + mean / 2));
    match shape {
        Variant::Quiet => start + every(params.quiet_every_ms, rng) as i64,
        Variant::Busy => start + every(params.busy_every_ms, rng) as i64,
        Variant::LongGaps => last_at + rng.range(&params.long_gap_ms) as i64,
        Variant::B6 | Variant::DmHeavy | Variant::Mix => {
            last_at + idle_gap(rng, &params.quiet_gaps, quiet_weight) as i64
        }
    }
    .max(start + 1)
}

/// Arrivals of the conversations starting before `until_ms`, sorted, numbered and with context.
fn arrivals_until(
    params: &PersonaParams,
    variant: Variant,
    seed: u64,
    until_ms: i64,
) -> Vec<Arrival> {
    let mut raw = conversations(params, variant, seed, until_ms);
    raw.sort_by_key(|m| (m.at_ms, m.conversation));
    let (public, dms) = room_names(params);
    let names: Vec<String> = public.into_iter().chain(dms).collect();
    // The backlog: every room starts with `context_lines` lines of history.
    let mut backlog_rng = SplitMix64::new(seed ^ ARRIVALS_STREAM ^ 0x6261_636b); // "back"
    let mut history: Vec<VecDeque<HistoryLine>> = names
        .iter()
        .enumerate()
        .map(|(r, name)| {
            (0..params.context_lines)
                .map(|k| {
                    let sender = if r >= params.public_rooms {
                        dm_peer(params, r - params.public_rooms)
                    } else {
                        backlog_rng.range(&(0..=params.senders as u64 - 1)) as usize
                    };
                    let tokens = params.message_tokens.draw(&mut backlog_rng);
                    HistoryLine {
                        id: format!("$backlog-{name}-{k}"),
                        sender: sender_name(sender),
                        text: words(&mut backlog_rng, tokens),
                    }
                })
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(raw.len());
    for (seq, m) in raw.into_iter().enumerate() {
        let lines = &mut history[m.room];
        let mut context: Vec<HistoryLine> = lines.iter().cloned().collect();
        let line_bytes = |l: &HistoryLine| l.sender.len() + l.text.len() + 3;
        let mut bytes: usize = context.iter().map(line_bytes).sum();
        let mut drop = 0;
        while bytes > params.context_max_bytes && drop < context.len() {
            bytes -= line_bytes(&context[drop]);
            drop += 1;
        }
        context.drain(..drop);
        let id = format!("$event-{seq}");
        let sender = sender_name(m.sender);
        lines.push_back(HistoryLine {
            id: id.clone(),
            sender: sender.clone(),
            text: m.text.clone(),
        });
        while lines.len() > params.context_lines {
            lines.pop_front();
        }
        out.push(Arrival {
            seq: seq as u64,
            at_ms: m.at_ms,
            id,
            room: names[m.room].clone(),
            is_direct: m.is_direct,
            operator: m.sender < params.operators,
            sender,
            to_you: m.to_you,
            tokens: count(&m.text),
            text: m.text,
            conversation: m.conversation,
            context,
        });
    }
    out
}

/// The arrivals of a stream: every message of `span`, in arrival order, each with its context.
pub fn generate(params: &PersonaParams, variant: Variant, seed: u64, span: Span) -> Vec<Arrival> {
    match span {
        Span::Duration(d) => arrivals_until(params, variant, seed, params.start_ms + d.max(0)),
        Span::Turns(n) => {
            // Generation is prefix-stable in time: arrivals up to the horizon are final, and so
            // are the turns taken by then. Double the horizon until n turns are final.
            let mut horizon: i64 = 6 * 3_600_000;
            loop {
                let until = params.start_ms + horizon;
                let arrivals = arrivals_until(params, variant, seed, until);
                let turns = schedule(params, &arrivals);
                let done = turns.len() > n && turns[n].at_ms <= until;
                if done || horizon > 1 << 50 {
                    let end = turns.get(n).map_or(arrivals.len(), |t| t.deliveries.start);
                    let mut arrivals = arrivals;
                    arrivals.truncate(end);
                    return arrivals;
                }
                horizon *= 2;
            }
        }
    }
}

/// The seed's `next_batch` (A1, persona.rs:726-736) over deliveries sorted by seq: the oldest
/// prefix that shares a conversation — all public-room deliveries together, or one DM room alone —
/// truncated at the first delivery that switches `is_direct` or, for DMs, room. Empty only when
/// `pending` is.
pub fn next_batch(pending: &[Arrival]) -> &[Arrival] {
    &pending[..muninn_core::render::next_batch_len(pending, |d| (d.is_direct, d.room.as_str()))]
}

/// One Persona turn of the schedule: when it is taken and which arrivals it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledTurn {
    /// When the turn's request is sent, Unix ms.
    pub at_ms: i64,
    /// Its batch, as a range of the arrivals (a batch is a prefix of what is pending, so it is
    /// contiguous).
    pub deliveries: Range<usize>,
}

/// Cuts arrivals into Persona turns: she wakes when a delivery is pending and she is free, takes
/// the turn `batch_delay_ms` later with [`next_batch`] of what has arrived by then, and is busy for
/// `reply_latency_ms`.
pub fn schedule(params: &PersonaParams, arrivals: &[Arrival]) -> Vec<ScheduledTurn> {
    let mut turns = Vec::new();
    let mut next = 0;
    let mut free_at = i64::MIN;
    while next < arrivals.len() {
        let wake = free_at.max(arrivals[next].at_ms);
        let at = wake + params.batch_delay_ms;
        let pending_end = next
            + arrivals[next..]
                .iter()
                .position(|a| a.at_ms > at)
                .unwrap_or(arrivals.len() - next);
        let n = next_batch(&arrivals[next..pending_end]).len().max(1);
        turns.push(ScheduledTurn {
            at_ms: at,
            deliveries: next..next + n,
        });
        next += n;
        free_at = at + params.reply_latency_ms;
    }
    turns
}
