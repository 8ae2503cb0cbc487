//! The Persona workload (`shared/workloads/persona.md`): one seeded, deterministic stream of room
//! messages and Persona turns on which every design is compared.
//!
//! Everything the workload definition states is a field of [`PersonaParams`] (its `Display` prints
//! them all, and every benchmark prints it with its results). The generator is pure: the same
//! params, [`Variant`], seed and [`Span`] always give the same stream, on every platform, drawn from
//! [`SplitMix64`] streams (one for the rooms, one for the Mind's own content, so that asking for more
//! turns never changes the turns already drawn).
//!
//! # The stream
//!
//! - **Rooms.** [`PersonaParams::public_rooms`] public rooms and [`PersonaParams::dm_rooms`] DMs,
//!   each DM with one fixed peer. Every room starts with [`PersonaParams::context_lines`] lines of
//!   backlog (the first sync's history is context, not mail).
//! - **Conversations.** A conversation is 2–15 messages in one room, 5–60 s apart, from 2–4 of the
//!   senders (a DM: its peer). What separates conversations depends on the [`Variant`]: a quiet
//!   period drawn from the idle-gap mix of seed B6 after a conversation ends (`b6`, `dm-heavy`), 20–90
//!   minutes (`long-gaps`), or conversation starts every hour (`quiet`) or every two minutes (`busy`),
//!   which overlap. `mix` rotates through those five in phases.
//! - **Deliveries.** Every message is an [`Arrival`] carrying the room's previous
//!   [`PersonaParams::context_lines`] lines (at most [`PersonaParams::context_max_bytes`]), as the
//!   Matrix mouth reads them back today. History lines are what other members said: the Mind's own
//!   replies live in her turns, not in the backlog this generator keeps.
//! - **Turns.** [`schedule`] cuts the arrivals into batches with [`next_batch`] exactly as the seed
//!   (A1): the Persona wakes when a delivery is pending and she is free, takes the turn
//!   [`PersonaParams::batch_delay_ms`] later with whatever has arrived by then, and is busy for
//!   [`PersonaParams::reply_latency_ms`].
//! - **The Mind** ([`Stream`]): doctrine, persona state and campaigns with their edits on a fixed
//!   period (a seeded phase), the framing, a status block (spend line and latest runs) new every
//!   turn, and a reply per turn.
//!
//! Text is made of words whose tokens under [`muninn_core::tokenize::count`] add up exactly, so every
//! generated part has the token count the params ask for (checked by tests).

use crate::synth::{IdleBand, SplitMix64, idle_gap};
use muninn_core::money::Tokens;
use muninn_core::render::{Delivery, HistoryLine, Layers, TurnInput};
use muninn_core::tokenize::count;
use std::collections::VecDeque;
use std::fmt;
use std::ops::{Range, RangeInclusive};
use std::str::FromStr;

/// A size drawn between `min` and `max` with the given `mean`: `min + (max − min)·uᵏ` for a
/// uniform `u`, with `k` chosen so that the mean comes out right (right-skewed when the mean is
/// below the midpoint, as message and reply lengths are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeDist {
    /// The smallest size.
    pub min: Tokens,
    /// The largest size.
    pub max: Tokens,
    /// The mean size.
    pub mean: Tokens,
}

impl SizeDist {
    /// One draw.
    pub fn draw(&self, rng: &mut SplitMix64) -> Tokens {
        let span = self.max.saturating_sub(self.min);
        if span == 0 {
            return self.min;
        }
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let k = if self.mean > self.min && self.mean < self.max {
            span as f64 / (self.mean - self.min) as f64 - 1.0
        } else {
            1.0
        };
        self.min + ((span as f64) * u.powf(k)).round() as Tokens
    }
}

impl fmt::Display for SizeDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}–{} (mean {})", self.min, self.max, self.mean)
    }
}

/// Every number of the Persona workload, in one place.
#[derive(Debug, Clone, PartialEq)]
pub struct PersonaParams {
    /// Doctrine (system prompt, seed A1 row 1) tokens. 25,000.
    pub doctrine_tokens: Tokens,
    /// The doctrine's size limit in bytes (96 KiB).
    pub doctrine_max_bytes: usize,
    /// The doctrine is edited once per this many turns. 500.
    pub doctrine_edit_every_turns: usize,
    /// Tokens of one doctrine edit (a paragraph rewritten in place). 400.
    pub doctrine_edit_tokens: Tokens,
    /// Persona state JSON (row 2) tokens. 1,500.
    pub persona_tokens: Tokens,
    /// `persona_put` once per this many turns. 50.
    pub persona_put_every_turns: usize,
    /// Tokens that differ after a `persona_put`. 200.
    pub persona_put_tokens: Tokens,
    /// Campaigns in force (row 3), tokens when all are open. 300.
    pub campaigns_tokens: Tokens,
    /// Campaigns in force when all are open (each `campaigns_tokens / campaigns_open` tokens). 6.
    pub campaigns_open: usize,
    /// A campaign opens or closes (alternately) once per this many turns. 200.
    pub campaign_change_every_turns: usize,
    /// Fixed framing paragraphs and the rooms line (rows 4–5), tokens. 400.
    pub framing_tokens: Tokens,
    /// Spend line and the latest 5 runs (rows 6–7), new every turn, tokens. 150.
    pub status_tokens: Tokens,
    /// Reply tokens (`say[]`, maybe `start_self_run`, `remember[]`). 80–400, mean 200.
    pub reply_tokens: SizeDist,
    /// Public rooms. 3.
    pub public_rooms: usize,
    /// DM rooms, each with one fixed peer. 2.
    pub dm_rooms: usize,
    /// Message tokens. 10–120, mean 40.
    pub message_tokens: SizeDist,
    /// Senders. 8.
    pub senders: usize,
    /// Of the senders, operators (the first ones). 2.
    pub operators: usize,
    /// Chance (percent) that an operator's public message tags her. 50.
    pub operator_tag_pct: u64,
    /// Chance (percent) that another member's public message tags her. 20.
    pub member_tag_pct: u64,
    /// Senders taking part in one public conversation. 2–4.
    pub conversation_senders: RangeInclusive<u64>,
    /// Messages per conversation. 2–15.
    pub conversation_messages: RangeInclusive<u64>,
    /// Gap between the messages of a conversation, ms. 5–60 s.
    pub message_gap_ms: RangeInclusive<u64>,
    /// Quiet periods after a conversation (`b6`, `dm-heavy`): the idle-gap mix of seed B6 (calls
    /// following a gap: 25,232 under 60 s, 2,336 of 60–300 s, 1,241 of 300–3,600 s, 10 over an
    /// hour; drawn uniformly within 1–60 s, 60–300 s, 300–3,600 s and 1–6 h).
    pub quiet_gaps: Vec<IdleBand>,
    /// `quiet`: conversations start this far apart on average (uniform in ½–1½ of it). 1 h.
    pub quiet_every_ms: u64,
    /// `busy`: conversations start this far apart on average (uniform in ½–1½ of it). 2 min.
    pub busy_every_ms: u64,
    /// `long-gaps`: the quiet period after each conversation, ms. 20–90 min.
    pub long_gap_ms: RangeInclusive<u64>,
    /// Chance (percent) that a conversation is in a DM (every variant but `dm-heavy`). 30.
    pub dm_pct: u64,
    /// `dm-heavy`: chance (percent) that a conversation is in a DM. 70.
    pub dm_heavy_pct: u64,
    /// `mix`: each variant's phase lasts this long, in the order b6, busy, quiet, dm-heavy,
    /// long-gaps. 3 h.
    pub mix_phase_ms: u64,
    /// Context lines per delivery (seed A1 row 9, A4). 20.
    pub context_lines: usize,
    /// Context bytes per delivery at most (16 KiB).
    pub context_max_bytes: usize,
    /// From the wake to the turn (a delivery that arrives meanwhile joins the batch), ms. 2 s.
    pub batch_delay_ms: i64,
    /// How long a turn keeps the Persona busy (deliveries wait meanwhile), ms. 8 s.
    pub reply_latency_ms: i64,
    /// Time of the first conversation, Unix ms (January 2027).
    pub start_ms: i64,
}

impl Default for PersonaParams {
    fn default() -> Self {
        const S: u64 = 1_000;
        const M: u64 = 60 * S;
        const H: u64 = 60 * M;
        PersonaParams {
            doctrine_tokens: 25_000,
            doctrine_max_bytes: 96 * 1024,
            doctrine_edit_every_turns: 500,
            doctrine_edit_tokens: 400,
            persona_tokens: 1_500,
            persona_put_every_turns: 50,
            persona_put_tokens: 200,
            campaigns_tokens: 300,
            campaigns_open: 6,
            campaign_change_every_turns: 200,
            framing_tokens: 400,
            status_tokens: 150,
            reply_tokens: SizeDist {
                min: 80,
                max: 400,
                mean: 200,
            },
            public_rooms: 3,
            dm_rooms: 2,
            message_tokens: SizeDist {
                min: 10,
                max: 120,
                mean: 40,
            },
            senders: 8,
            operators: 2,
            operator_tag_pct: 50,
            member_tag_pct: 20,
            conversation_senders: 2..=4,
            conversation_messages: 2..=15,
            message_gap_ms: 5 * S..=60 * S,
            quiet_gaps: vec![
                IdleBand {
                    weight: 25_232,
                    gap_ms: S..=60 * S - 1,
                },
                IdleBand {
                    weight: 2_336,
                    gap_ms: 60 * S..=300 * S - 1,
                },
                IdleBand {
                    weight: 1_241,
                    gap_ms: 300 * S..=H - 1,
                },
                IdleBand {
                    weight: 10,
                    gap_ms: H..=6 * H,
                },
            ],
            quiet_every_ms: H,
            busy_every_ms: 2 * M,
            long_gap_ms: 20 * M..=90 * M,
            dm_pct: 30,
            dm_heavy_pct: 70,
            mix_phase_ms: 3 * H,
            context_lines: 20,
            context_max_bytes: 16 * 1024,
            batch_delay_ms: 2_000,
            reply_latency_ms: 8_000,
            start_ms: 1_800_000_000_000,
        }
    }
}

fn ms(v: u64) -> String {
    if v >= 3_600_000 {
        format!("{:.1} h", v as f64 / 3_600_000.0)
    } else if v >= 60_000 {
        format!("{:.1} min", v as f64 / 60_000.0)
    } else {
        format!("{:.1} s", v as f64 / 1_000.0)
    }
}

fn ms_range(r: &RangeInclusive<u64>) -> String {
    format!("{}–{}", ms(*r.start()), ms(*r.end()))
}

impl fmt::Display for PersonaParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "mind: doctrine {} tokens (≤ {} bytes), edited once per {} turns ({} tokens rewritten); \
             persona state {} tokens, persona_put once per {} turns ({} tokens differ); campaigns {} \
             tokens in {} when all open, one opens or closes per {} turns; framing {} tokens; spend \
             line + 5 runs {} tokens every turn; reply {} tokens",
            self.doctrine_tokens,
            self.doctrine_max_bytes,
            self.doctrine_edit_every_turns,
            self.doctrine_edit_tokens,
            self.persona_tokens,
            self.persona_put_every_turns,
            self.persona_put_tokens,
            self.campaigns_tokens,
            self.campaigns_open,
            self.campaign_change_every_turns,
            self.framing_tokens,
            self.status_tokens,
            self.reply_tokens,
        )?;
        let gaps: Vec<String> = self
            .quiet_gaps
            .iter()
            .map(|b| format!("{} × {}", b.weight, ms_range(&b.gap_ms)))
            .collect();
        writeln!(
            f,
            "rooms: {} public + {} DMs; messages {} tokens from {} senders ({} operators; tags her: \
             operator {}%, member {}%); conversations of {} messages {} apart among {} senders; \
             DM share {}% (dm-heavy {}%)",
            self.public_rooms,
            self.dm_rooms,
            self.message_tokens,
            self.senders,
            self.operators,
            self.operator_tag_pct,
            self.member_tag_pct,
            format_args!(
                "{}–{}",
                self.conversation_messages.start(),
                self.conversation_messages.end()
            ),
            ms_range(&self.message_gap_ms),
            format_args!(
                "{}–{}",
                self.conversation_senders.start(),
                self.conversation_senders.end()
            ),
            self.dm_pct,
            self.dm_heavy_pct,
        )?;
        writeln!(
            f,
            "spacing: b6/dm-heavy quiet periods [{}]; quiet: a conversation every {}; busy: every \
             {}; long-gaps: quiet periods {}; mix: phases of {} (b6, busy, quiet, dm-heavy, long-gaps)",
            gaps.join(", "),
            ms(self.quiet_every_ms),
            ms(self.busy_every_ms),
            ms_range(&self.long_gap_ms),
            ms(self.mix_phase_ms),
        )?;
        write!(
            f,
            "deliveries: {} context lines, ≤ {} bytes each; turn {} after the wake, busy {} per turn",
            self.context_lines,
            self.context_max_bytes,
            ms(self.batch_delay_ms.max(0) as u64),
            ms(self.reply_latency_ms.max(0) as u64),
        )
    }
}

/// The shape of a stream (`shared/workloads/persona.md`, Variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Quiet periods from the seed's B6 idle-gap mix; 30 % of conversations in DMs.
    B6,
    /// One conversation an hour.
    Quiet,
    /// A conversation every two minutes (they overlap).
    Busy,
    /// Quiet periods of 20–90 minutes.
    LongGaps,
    /// 70 % of messages in DMs.
    DmHeavy,
    /// The five above in rotating phases.
    Mix,
}

impl Variant {
    /// Every variant, in report order (the mix last).
    pub const ALL: [Variant; 6] = [
        Variant::B6,
        Variant::Quiet,
        Variant::Busy,
        Variant::LongGaps,
        Variant::DmHeavy,
        Variant::Mix,
    ];

    /// The variant's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::B6 => "b6",
            Variant::Quiet => "quiet",
            Variant::Busy => "busy",
            Variant::LongGaps => "long-gaps",
            Variant::DmHeavy => "dm-heavy",
            Variant::Mix => "mix",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Variant, String> {
        Variant::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                format!("unknown variant {s:?}: expected b6, quiet, busy, long-gaps, dm-heavy, mix")
            })
    }
}

/// How much of a stream to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// Exactly this many Persona turns (the arrivals of the first `n` batches).
    Turns(usize),
    /// Every conversation starting within this many milliseconds of the start.
    Duration(i64),
}

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

// Words of the generated text, chosen so that English-like text averages under four bytes per
// token (the doctrine must fit its 96 KiB in 25,000 tokens): short words, identifiers with
// underscores, markdown and punctuation.
const WORDS: &[&str] = &[
    "the",
    "a",
    "to",
    "of",
    "and",
    "is",
    "in",
    "it",
    "you",
    "we",
    "on",
    "for",
    "not",
    "be",
    "at",
    "as",
    "or",
    "if",
    "when",
    "that",
    "this",
    "with",
    "room",
    "run",
    "self",
    "mind",
    "note",
    "ask",
    "keep",
    "cost",
    "cache",
    "turn",
    "reply",
    "brief",
    "repo",
    "task",
    "plan",
    "done",
    "open",
    "close",
    "fix",
    "test",
    "build",
    "doctrine",
    "persona",
    "campaign",
    "operator",
    "message",
    "budget",
    "session",
    "context",
    "answer",
    "because",
    "never",
    "always",
    "before",
    "after",
    "start_self_run",
    "persona_put",
    "say[]",
    "remember[]",
    "e.g.",
    "i.e.",
    "(see",
    "below)",
    "-",
    "**",
    "`x`",
    "1.",
    "2.",
    "3.",
    "—",
    ":",
    "12",
    "300",
    "4.5",
];

/// Exactly `tokens` tokens of word-like text (no leading or trailing whitespace).
pub fn words(rng: &mut SplitMix64, tokens: Tokens) -> String {
    let mut out = String::new();
    let mut left = tokens;
    let fill = ["a", "to", "it", "we", "on", "-", ":"];
    while left > 0 {
        let w = WORDS[rng.range(&(0..=WORDS.len() as u64 - 1)) as usize];
        let c = count(w);
        let (w, c) = if c <= left && c > 0 {
            (w, c)
        } else {
            (fill[rng.range(&(0..=fill.len() as u64 - 1)) as usize], 1)
        };
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
        left -= c;
    }
    out
}

fn chance(rng: &mut SplitMix64, pct: u64) -> bool {
    rng.range(&(0..=99)) < pct
}

const ARRIVALS_STREAM: u64 = 0x0072_6f6f_6d73; // "rooms"
const MIND_STREAM: u64 = 0x6d69_6e64; // "mind"

fn room_names(params: &PersonaParams) -> (Vec<String>, Vec<String>) {
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
        let dm_pct = if shape == Variant::DmHeavy {
            params.dm_heavy_pct
        } else {
            params.dm_pct
        };
        let dm = params.dm_rooms > 0 && (params.public_rooms == 0 || chance(&mut rng, dm_pct));
        let (room, is_direct) = if dm {
            let i = rng.range(&(0..=params.dm_rooms as u64 - 1)) as usize;
            (params.public_rooms + i, true)
        } else {
            (
                rng.range(&(0..=params.public_rooms as u64 - 1)) as usize,
                false,
            )
        };
        let cast: Vec<usize> = if is_direct {
            vec![dm_peer(params, room - params.public_rooms)]
        } else {
            let n = rng.range(&params.conversation_senders).max(1);
            (0..n)
                .map(|_| rng.range(&(0..=params.senders as u64 - 1)) as usize)
                .collect()
        };
        let n = rng.range(&params.conversation_messages);
        let mut at = start;
        for m in 0..n {
            if m > 0 {
                at += rng.range(&params.message_gap_ms) as i64;
            }
            let sender = cast[rng.range(&(0..=cast.len() as u64 - 1)) as usize];
            let to_you = is_direct
                || chance(
                    &mut rng,
                    if sender < params.operators {
                        params.operator_tag_pct
                    } else {
                        params.member_tag_pct
                    },
                );
            let tokens = params.message_tokens.draw(&mut rng);
            out.push(RawMessage {
                at_ms: at,
                conversation,
                room,
                is_direct,
                sender,
                to_you,
                text: words(&mut rng, tokens),
            });
        }
        let every = |mean: u64, rng: &mut SplitMix64| rng.range(&(mean / 2..=mean + mean / 2));
        start = match shape {
            Variant::Quiet => start + every(params.quiet_every_ms, &mut rng) as i64,
            Variant::Busy => start + every(params.busy_every_ms, &mut rng) as i64,
            Variant::LongGaps => at + rng.range(&params.long_gap_ms) as i64,
            Variant::B6 | Variant::DmHeavy | Variant::Mix => {
                at + idle_gap(&mut rng, &params.quiet_gaps, quiet_weight) as i64
            }
        }
        .max(start + 1);
        conversation += 1;
    }
    out
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

/// One Persona turn with everything the Mind brings to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonaTurn {
    /// When its request is sent, Unix ms.
    pub at_ms: i64,
    /// Its batch (a range of [`Stream::arrivals`]).
    pub deliveries: Range<usize>,
    /// Index of the doctrine version in force ([`Stream::doctrine`]).
    pub doctrine: usize,
    /// Index of the persona state in force ([`Stream::persona`]).
    pub persona: usize,
    /// Index of the campaigns in force ([`Stream::campaigns`]).
    pub campaigns: usize,
    /// Spend line and latest runs (rows 6–7).
    pub status: String,
    /// The reply the model gives.
    pub reply: String,
}

/// A whole generated stream: arrivals, turns and the Mind's layers.
#[derive(Debug, Clone)]
pub struct Stream {
    /// The variant.
    pub variant: Variant,
    /// The seed.
    pub seed: u64,
    /// Every delivery.
    pub arrivals: Vec<Arrival>,
    /// Every turn.
    pub turns: Vec<PersonaTurn>,
    /// Doctrine versions (one more per edit).
    pub doctrine: Vec<String>,
    /// Persona state versions (one more per `persona_put`).
    pub persona: Vec<String>,
    /// Campaign lists (one more per open or close).
    pub campaigns: Vec<String>,
    /// Framing and rooms line (rows 4–5).
    pub framing: String,
}

/// A text of exactly `tokens` tokens made of paragraphs of `paragraph` tokens (the last shorter).
fn paragraphs(rng: &mut SplitMix64, tokens: Tokens, paragraph: Tokens) -> Vec<String> {
    let mut out = Vec::new();
    let mut left = tokens;
    while left > 0 {
        let n = left.min(paragraph.max(1));
        out.push(words(rng, n));
        left -= n;
    }
    out
}

fn persona_json(name: &str, stable: &str, recent: &str) -> String {
    format!(
        "{{\n  \"name\": \"{name}\",\n  \"voice\": \"{stable}\",\n  \"recent\": \"{recent}\"\n}}"
    )
}

/// The first turn at or after which a change with `period` and `phase` has happened `k` times.
fn changes_by(turn: usize, period: usize, phase: usize) -> usize {
    if period == 0 {
        return 0;
    }
    (turn + phase) / period
}

impl Stream {
    /// Generates a stream: [`generate`], [`schedule`], and the Mind's content turn by turn.
    pub fn build(params: &PersonaParams, variant: Variant, seed: u64, span: Span) -> Stream {
        let arrivals = generate(params, variant, seed, span);
        let scheduled = schedule(params, &arrivals);
        let mut rng = SplitMix64::new(seed ^ MIND_STREAM);
        // Framing: the rooms line and fixed paragraphs, exactly `framing_tokens`.
        let (public, dms) = room_names(params);
        let rooms_line = format!(
            "Rooms you may speak in: {}.",
            public
                .iter()
                .chain(&dms)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        let framing_body = params.framing_tokens.saturating_sub(count(&rooms_line));
        let framing = format!("{rooms_line}\n{}", words(&mut rng, framing_body));
        // Doctrine: paragraphs of `doctrine_edit_tokens`; an edit rewrites one in place.
        let edit = params.doctrine_edit_tokens.max(1);
        let mut doctrine_paras = paragraphs(&mut rng, params.doctrine_tokens, edit);
        let phase = |rng: &mut SplitMix64, period: usize| {
            if period == 0 {
                0
            } else {
                rng.range(&(0..=period as u64 - 1)) as usize
            }
        };
        let doctrine_phase = phase(&mut rng, params.doctrine_edit_every_turns);
        let persona_phase = phase(&mut rng, params.persona_put_every_turns);
        let campaign_phase = phase(&mut rng, params.campaign_change_every_turns);
        let last_turn = scheduled.len().saturating_sub(1);
        let mut doctrine = vec![doctrine_paras.join("\n\n")];
        let edits = changes_by(last_turn, params.doctrine_edit_every_turns, doctrine_phase);
        for k in 0..edits {
            let i = (k * 7 + 3) % doctrine_paras.len().max(1);
            if let Some(p) = doctrine_paras.get_mut(i) {
                let n = count(p);
                *p = words(&mut rng, n);
            }
            doctrine.push(doctrine_paras.join("\n\n"));
        }
        // Persona state: a stable part and a `recent` part that each put rewrites.
        let skeleton = count(&persona_json("Vala", "", ""));
        let recent_tokens = params.persona_put_tokens;
        let stable_tokens = params
            .persona_tokens
            .saturating_sub(skeleton + recent_tokens);
        let stable = words(&mut rng, stable_tokens);
        let puts = changes_by(last_turn, params.persona_put_every_turns, persona_phase);
        let persona: Vec<String> = (0..=puts)
            .map(|_| persona_json("Vala", &stable, &words(&mut rng, recent_tokens)))
            .collect();
        // Campaigns: `campaigns_open` entries; alternately one closes and a new one opens.
        let each = params.campaigns_tokens / params.campaigns_open.max(1) as Tokens;
        let mut serial = 0usize;
        let mut campaign_line = |rng: &mut SplitMix64| {
            serial += 1;
            let head = format!("- c{serial}: ");
            let body = each.saturating_sub(count(&head));
            format!("{head}{}", words(rng, body))
        };
        let mut open: Vec<String> = (0..params.campaigns_open)
            .map(|_| campaign_line(&mut rng))
            .collect();
        let mut campaigns = vec![open.join("\n")];
        let changes = changes_by(
            last_turn,
            params.campaign_change_every_turns,
            campaign_phase,
        );
        for k in 0..changes {
            if k % 2 == 0 && !open.is_empty() {
                let i = rng.range(&(0..=open.len() as u64 - 1)) as usize;
                open.remove(i);
            } else {
                open.push(campaign_line(&mut rng));
            }
            campaigns.push(open.join("\n"));
        }
        let turns = scheduled
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let status_head = format!(
                    "Spend: {} micro-USD of the run cap. Your latest runs:",
                    1_000 * i
                );
                let status_body = params.status_tokens.saturating_sub(count(&status_head));
                let status = format!("{status_head}\n{}", words(&mut rng, status_body));
                let reply_tokens = params.reply_tokens.draw(&mut rng);
                PersonaTurn {
                    at_ms: t.at_ms,
                    deliveries: t.deliveries,
                    doctrine: changes_by(i, params.doctrine_edit_every_turns, doctrine_phase),
                    persona: changes_by(i, params.persona_put_every_turns, persona_phase),
                    campaigns: changes_by(i, params.campaign_change_every_turns, campaign_phase),
                    status,
                    reply: words(&mut rng, reply_tokens),
                }
            })
            .collect();
        Stream {
            variant,
            seed,
            arrivals,
            turns,
            doctrine,
            persona,
            campaigns,
            framing,
        }
    }

    /// The batch of turn `i`.
    pub fn batch(&self, i: usize) -> &[Arrival] {
        self.turns
            .get(i)
            .and_then(|t| self.arrivals.get(t.deliveries.clone()))
            .unwrap_or(&[])
    }

    /// The layers in force at turn `i`, as the renderer takes them: the doctrine block carries the
    /// framing after it (it never changes, so it belongs under the long-lived head).
    pub fn layers(&self, i: usize) -> Layers {
        let t = self.turns.get(i);
        let get =
            |v: &[String], k: Option<usize>| k.and_then(|k| v.get(k)).cloned().unwrap_or_default();
        Layers {
            tools: Vec::new(),
            doctrine: format!(
                "{}\n\n{}",
                get(&self.doctrine, t.map(|t| t.doctrine)),
                self.framing
            ),
            persona: get(&self.persona, t.map(|t| t.persona)),
            campaigns: get(&self.campaigns, t.map(|t| t.campaigns)),
            memory: String::new(),
        }
    }

    /// The renderer's input for turn `i`.
    pub fn input(&self, i: usize) -> TurnInput {
        TurnInput {
            deliveries: self.batch(i).iter().map(Arrival::delivery).collect(),
            status: self
                .turns
                .get(i)
                .map(|t| t.status.clone())
                .unwrap_or_default(),
            text: String::new(),
        }
    }
}
