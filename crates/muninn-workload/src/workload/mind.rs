//! The Mind's side of the stream: doctrine, persona state and campaigns with their periodic
//! edits, the status block and replies, assembled with the arrivals into a [`Stream`].

use super::arrivals::{Arrival, MIND_STREAM, ScheduledTurn, generate, room_names, schedule};
use super::text::words;
use super::{PersonaParams, Span, Variant};
use crate::synth::SplitMix64;
use muninn_core::money::Tokens;
use muninn_core::render::{Layers, TurnInput};
use muninn_core::tokenize::count;
use std::ops::Range;

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
        // One stream for the Mind's content, drawn in a fixed order (framing, doctrine, the
        // phases, the edits, the persona puts, the campaigns, the turns): reordering the draws
        // would change every stream.
        let mut rng = SplitMix64::new(seed ^ MIND_STREAM);
        let framing = framing(params, &mut rng);
        // Doctrine: paragraphs of `doctrine_edit_tokens`; an edit rewrites one in place.
        let edit = params.doctrine_edit_tokens.max(1);
        let doctrine_paras = paragraphs(&mut rng, params.doctrine_tokens, edit);
        let phases = Phases {
            doctrine: phase(&mut rng, params.doctrine_edit_every_turns),
            persona: phase(&mut rng, params.persona_put_every_turns),
            campaigns: phase(&mut rng, params.campaign_change_every_turns),
        };
        let last_turn = scheduled.len().saturating_sub(1);
        let edits = changes_by(last_turn, params.doctrine_edit_every_turns, phases.doctrine);
        let doctrine = doctrine_versions(&mut rng, doctrine_paras, edits);
        let puts = changes_by(last_turn, params.persona_put_every_turns, phases.persona);
        let persona = persona_versions(params, &mut rng, puts);
        let changes = changes_by(
            last_turn,
            params.campaign_change_every_turns,
            phases.campaigns,
        );
        let campaigns = campaign_versions(params, &mut rng, changes);
        let turns = scheduled
            .into_iter()
            .enumerate()
            .map(|(i, t)| persona_turn(params, &mut rng, &phases, i, t))
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

/// Where each layer's change cycle starts (a seeded offset into its period).
struct Phases {
    doctrine: usize,
    persona: usize,
    campaigns: usize,
}

/// A seeded offset in `0..period` (0 when the layer never changes).
fn phase(rng: &mut SplitMix64, period: usize) -> usize {
    if period == 0 {
        0
    } else {
        rng.range(&(0..=period as u64 - 1)) as usize
    }
}

/// Framing: the rooms line and fixed paragraphs, exactly `framing_tokens`.
fn framing(params: &PersonaParams, rng: &mut SplitMix64) -> String {
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
    format!("{rooms_line}\n{}", words(rng, framing_body))
}

/// The doctrine as first written and after each of `edits` edits (each rewrites one paragraph
/// in place, with the same token count).
fn doctrine_versions(rng: &mut SplitMix64, mut paras: Vec<String>, edits: usize) -> Vec<String> {
    let mut doctrine = vec![paras.join("\n\n")];
    for k in 0..edits {
        let i = (k * 7 + 3) % paras.len().max(1);
        if let Some(p) = paras.get_mut(i) {
            let n = count(p);
            *p = words(rng, n);
        }
        doctrine.push(paras.join("\n\n"));
    }
    doctrine
}

/// Persona state: a stable part and a `recent` part that each of `puts` puts rewrites.
fn persona_versions(params: &PersonaParams, rng: &mut SplitMix64, puts: usize) -> Vec<String> {
    let skeleton = count(&persona_json("Vala", "", ""));
    let recent_tokens = params.persona_put_tokens;
    let stable_tokens = params
        .persona_tokens
        .saturating_sub(skeleton + recent_tokens);
    let stable = words(rng, stable_tokens);
    (0..=puts)
        .map(|_| persona_json("Vala", &stable, &words(rng, recent_tokens)))
        .collect()
}

/// Campaigns: `campaigns_open` entries; of `changes` changes, alternately one closes and a new
/// one opens.
fn campaign_versions(params: &PersonaParams, rng: &mut SplitMix64, changes: usize) -> Vec<String> {
    let each = params.campaigns_tokens / params.campaigns_open.max(1) as Tokens;
    let mut serial = 0usize;
    let mut campaign_line = |rng: &mut SplitMix64| {
        serial += 1;
        let head = format!("- c{serial}: ");
        let body = each.saturating_sub(count(&head));
        format!("{head}{}", words(rng, body))
    };
    let mut open: Vec<String> = (0..params.campaigns_open)
        .map(|_| campaign_line(rng))
        .collect();
    let mut campaigns = vec![open.join("\n")];
    for k in 0..changes {
        if k % 2 == 0 && !open.is_empty() {
            let i = rng.range(&(0..=open.len() as u64 - 1)) as usize;
            open.remove(i);
        } else {
            open.push(campaign_line(rng));
        }
        campaigns.push(open.join("\n"));
    }
    campaigns
}

/// Turn `i` of the schedule with the layer versions in force, a fresh status block and a reply.
fn persona_turn(
    params: &PersonaParams,
    rng: &mut SplitMix64,
    phases: &Phases,
    i: usize,
    t: ScheduledTurn,
) -> PersonaTurn {
    let status_head = format!(
        "Spend: {} micro-USD of the run cap. Your latest runs:",
        1_000 * i
    );
    let status_body = params.status_tokens.saturating_sub(count(&status_head));
    let status = format!("{status_head}\n{}", words(rng, status_body));
    let reply_tokens = params.reply_tokens.draw(rng);
    PersonaTurn {
        at_ms: t.at_ms,
        deliveries: t.deliveries,
        doctrine: changes_by(i, params.doctrine_edit_every_turns, phases.doctrine),
        persona: changes_by(i, params.persona_put_every_turns, phases.persona),
        campaigns: changes_by(i, params.campaign_change_every_turns, phases.campaigns),
        status,
        reply: words(rng, reply_tokens),
    }
}
