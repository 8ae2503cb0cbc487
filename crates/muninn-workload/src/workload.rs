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
//!
//! # Layout
//!
//! This file holds the parameters ([`PersonaParams`], [`SizeDist`], [`Variant`], [`Span`]);
//! `text` the word-like text of exact token counts; `arrivals` the rooms' messages and the
//! schedule of turns; `mind` the Mind's layers and the whole [`Stream`].

mod arrivals;
mod mind;
mod text;

pub use arrivals::{Arrival, ScheduledTurn, generate, next_batch, schedule};
pub use mind::{PersonaTurn, Stream};
pub use text::words;

use crate::synth::{IdleBand, SplitMix64};
use muninn_core::money::Tokens;
use std::fmt;
use std::ops::RangeInclusive;
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
