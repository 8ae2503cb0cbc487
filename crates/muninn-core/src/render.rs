//! The renderer: a Mind's session as an append-only sequence of requests.
//!
//! # Layers and breakpoints
//!
//! Content is laid out by volatility (DESIGN §3): tools → system → stable context → conversation.
//!
//! | block | holds | breakpoint |
//! |---|---|---|
//! | tools | tool definitions (none for a Persona) | — |
//! | `system[0]` | the doctrine | head TTL (1h by default): identical in every segment, so a new segment reads it from cache |
//! | `system[1]` | persona state, campaigns and memory as of the segment's start | head TTL |
//! | messages | one user message per turn, one assistant message per reply | the last block carries the tail TTL (5m by default) |
//!
//! Three breakpoints at most, and the head TTL is never shorter than the tail's, so a request never
//! breaks the "≤ 4, 1h before 5m" rule ([`Renderer::new`] refuses a head TTL shorter than the tail's).
//!
//! # Append-only within a segment
//!
//! Request N+1 of a segment is request N plus the assistant's reply and the new user message; the
//! only byte that moves is the last block's `cache_control` marker ([`extends`] checks this). A
//! change to a lower layer inside a segment — a doctrine edit, a persona state update, a campaign
//! opening — is *appended* to the next user message as a notice; the system blocks are rewritten
//! only when a new segment starts ([`Renderer::new`] again, with the current layers).
//!
//! # History without repetition
//!
//! Each delivery carries the room history that preceded it (today up to 20 lines per delivery, so
//! consecutive turns in a busy room re-send the same lines). The renderer shows each history line
//! once per segment: a line already shown — as history or as a delivery — is not shown again.
//!
//! # Rebuilding a segment's renderer
//!
//! A host that restarts in the middle of a segment rebuilds the renderer from the segment's start
//! layers and replays what was sent, verbatim: [`Renderer::push_user`] for each user message as
//! recorded, [`Renderer::mark_shown`] with the keys the turn showed ([`Renderer::shown_keys`]),
//! [`Renderer::restore_shown`] when a notice had changed the layers shown, and
//! [`Renderer::reply`] for each reply. The rebuilt renderer then renders the next turn exactly
//! as the original would have: the same prefix bytes, history still shown once.
//!
//! Every block's tokens are counted with [`crate::tokenize::count`]: text blocks by their text,
//! tool definitions by their JSON. The simulator counts the same way, so the ledger's predicted
//! usage and the simulator's reported usage agree exactly.

use crate::cache::{Checkpoint, Ttl, checkpoints_from_blocks, hash_bytes};
use crate::money::Tokens;
use crate::tokenize::count;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The lower layers of a Mind's context, as they are now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layers {
    /// Tool definitions (Anthropic tool JSON), in order.
    pub tools: Vec<serde_json::Value>,
    /// The doctrine text (the system prompt's stable part).
    pub doctrine: String,
    /// The persona state, as text (pretty JSON in the Persona's case).
    pub persona: String,
    /// Campaigns in force, as text.
    pub campaigns: String,
    /// Memory selected for this segment (rehydration), as text.
    pub memory: String,
}

/// A line of room history that came with a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryLine {
    /// The room event id: a line is shown once per segment.
    pub id: String,
    /// Who said it.
    pub sender: String,
    /// What was said.
    pub text: String,
}

/// One delivery in a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The room event id.
    pub id: String,
    /// The room alias (or the DM room).
    pub room: String,
    /// The sender.
    pub sender: String,
    /// Whether it came in a direct-message room.
    pub is_direct: bool,
    /// Whether it mentions the Mind.
    pub to_you: bool,
    /// The message.
    pub text: String,
    /// The room history before it, oldest first.
    pub context: Vec<HistoryLine>,
}

/// What a turn brings besides its deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnInput {
    /// Deliveries of the batch (empty for a scheduled wake).
    pub deliveries: Vec<Delivery>,
    /// Per-turn status lines (spend, latest runs): new every turn, so they go in the tail.
    pub status: String,
    /// Free text for a Self turn (a brief, a result to report) or an operator note.
    pub text: String,
}

/// A text block of a rendered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// The text.
    pub text: String,
    /// The breakpoint on this block, if any.
    pub cache: Option<Ttl>,
}

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The host (deliveries, notices, briefs).
    User,
    /// The model.
    Assistant,
}

/// A message of a rendered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Whose.
    pub role: Role,
    /// Its blocks.
    pub blocks: Vec<Block>,
}

/// A request as rendered, before it becomes wire JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendered {
    /// Tool definitions.
    pub tools: Vec<serde_json::Value>,
    /// System blocks.
    pub system: Vec<Block>,
    /// The conversation.
    pub messages: Vec<Message>,
}

/// The renderer refused a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A 1h breakpoint may not follow a 5m one: the head's TTL must be at least the tail's.
    #[error("the head TTL ({head}) must not be shorter than the tail TTL ({tail})")]
    TtlOrder {
        /// The head TTL asked for.
        head: &'static str,
        /// The tail TTL asked for.
        tail: &'static str,
    },
}

/// One segment's renderer: holds the conversation so far and what it has shown.
#[derive(Debug, Clone)]
pub struct Renderer {
    base: Layers,
    /// The layers as last shown (at segment start or by a notice).
    shown: Layers,
    messages: Vec<Message>,
    seen: HashSet<String>,
    head_ttl: Ttl,
    tail_ttl: Ttl,
}

impl Renderer {
    /// Starts a segment from the current layers.
    pub fn new(layers: Layers, head_ttl: Ttl, tail_ttl: Ttl) -> Result<Renderer, RenderError> {
        if head_ttl < tail_ttl {
            return Err(RenderError::TtlOrder {
                head: head_ttl.label(),
                tail: tail_ttl.label(),
            });
        }
        Ok(Renderer {
            shown: layers.clone(),
            base: layers,
            messages: Vec::new(),
            seen: HashSet::new(),
            head_ttl,
            tail_ttl,
        })
    }

    /// Turns rendered so far in this segment (user messages).
    pub fn turns(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count()
    }

    /// The layers the segment started from.
    pub fn base(&self) -> &Layers {
        &self.base
    }

    /// The layers as last shown to the model (the start layers, or what a notice announced since);
    /// memory is always the start's.
    pub fn shown(&self) -> &Layers {
        &self.shown
    }

    /// The keys a turn with `input` marks as shown (each delivery and each of its history
    /// lines), for [`Renderer::mark_shown`] when the turn is replayed. Marking a key twice is
    /// harmless, so these are all of the turn's keys, not only the ones it showed first.
    pub fn shown_keys(input: &TurnInput) -> Vec<String> {
        let mut keys = Vec::new();
        for d in &input.deliveries {
            keys.extend(d.context.iter().map(|line| shown_key(&d.room, &line.id)));
            keys.push(shown_key(&d.room, &d.id));
        }
        keys
    }

    /// Marks history keys (from [`Renderer::shown_keys`]) as shown in this segment.
    pub fn mark_shown(&mut self, keys: impl IntoIterator<Item = String>) {
        self.seen.extend(keys);
    }

    /// Sets the layers last shown (a replayed turn that carried a notice); memory stays the
    /// start's, as it is never noticed.
    pub fn restore_shown(&mut self, layers: Layers) {
        self.shown = Layers {
            memory: self.shown.memory.clone(),
            ..layers
        };
    }

    /// Appends a user message exactly as it was sent: a recorded turn replayed into a rebuilt
    /// renderer, or a message composed outside the renderer (a retry prompt, a brief).
    pub fn push_user(&mut self, text: &str) {
        self.messages.push(Message {
            role: Role::User,
            blocks: vec![Block {
                text: text.to_string(),
                cache: None,
            }],
        });
    }

    /// The conversation so far as plain text, each message headed by its speaker: what a fresh
    /// provider session is seeded with when the provider's own copy cannot be continued.
    pub fn conversation_text(&self) -> String {
        let mut out = String::new();
        for m in &self.messages {
            out.push_str(match m.role {
                Role::User => "[user]\n",
                Role::Assistant => "[assistant]\n",
            });
            for b in &m.blocks {
                out.push_str(&b.text);
                if !b.text.ends_with('\n') {
                    out.push('\n');
                }
            }
            out.push('\n');
        }
        out
    }

    /// Renders the next request: the conversation so far plus a user message for this turn, with
    /// notices for any layer that changed since it was last shown. `layers` are the current ones.
    pub fn turn(&mut self, layers: &Layers, input: &TurnInput) -> Rendered {
        self.append_turn(layers, input);
        self.rendered()
    }

    /// [`Renderer::turn`] without rendering the whole request: appends this turn's user message
    /// (notices, status, deliveries with history shown once) and returns it. A long replay that
    /// only needs each turn's new tokens uses this, as cloning the conversation every turn would
    /// be quadratic.
    pub fn append_turn(&mut self, layers: &Layers, input: &TurnInput) -> &Message {
        let mut text = String::new();
        let mut notice = |what: &str, body: &str| {
            text.push_str(&format!(
                "[notice: {what} changed; from now on it reads]\n{body}\n\n"
            ));
        };
        if layers.doctrine != self.shown.doctrine {
            notice("the doctrine", &layers.doctrine);
        }
        if layers.persona != self.shown.persona {
            notice("your persona state", &layers.persona);
        }
        if layers.campaigns != self.shown.campaigns {
            notice("the campaigns in force", &layers.campaigns);
        }
        if layers.tools != self.shown.tools {
            // Tools stay as the segment began (a tool change would rewrite the whole prefix);
            // the change is announced and takes effect at the next segment.
            notice("the tool list", "(takes effect at the next refresh)");
        }
        // Memory is not noticed: it is rehydration for the next segment, written as it happens.
        self.shown = Layers {
            memory: self.shown.memory.clone(),
            ..layers.clone()
        };
        if !input.status.is_empty() {
            text.push_str(&input.status);
            text.push_str("\n\n");
        }
        if input.deliveries.is_empty() && input.text.is_empty() {
            text.push_str("No new messages. This is a scheduled wake.\n");
        }
        for d in &input.deliveries {
            for line in &d.context {
                if self.seen.insert(shown_key(&d.room, &line.id)) {
                    text.push_str(&format!("  ({}) {}: {}\n", d.room, line.sender, line.text));
                }
            }
            self.seen.insert(shown_key(&d.room, &d.id));
            text.push_str(&format!(
                "[{}{}{}] {}: {}\n",
                d.room,
                if d.is_direct { ", direct" } else { "" },
                if d.to_you { ", to you" } else { "" },
                d.sender,
                d.text
            ));
        }
        if !input.text.is_empty() {
            text.push_str(&input.text);
            text.push('\n');
        }
        self.messages.push(Message {
            role: Role::User,
            blocks: vec![Block { text, cache: None }],
        });
        &self.messages[self.messages.len() - 1]
    }

    /// Records the model's reply to the last turn.
    pub fn reply(&mut self, text: &str) {
        self.messages.push(Message {
            role: Role::Assistant,
            blocks: vec![Block {
                text: text.to_string(),
                cache: None,
            }],
        });
    }

    /// The current request: system, tools, messages, with the breakpoints placed.
    pub fn rendered(&self) -> Rendered {
        let mut messages = self.messages.clone();
        if let Some(block) = messages.last_mut().and_then(|m| m.blocks.last_mut()) {
            block.cache = Some(self.tail_ttl);
        }
        let base = &self.base;
        let mut context = format!(
            "You are the persona whose state follows.\n{}\n",
            base.persona
        );
        if !base.campaigns.is_empty() {
            context.push_str(&format!("\nCampaigns in force:\n{}\n", base.campaigns));
        }
        if !base.memory.is_empty() {
            context.push_str(&format!("\nWhat you remember:\n{}\n", base.memory));
        }
        Rendered {
            tools: base.tools.clone(),
            system: vec![
                Block {
                    text: base.doctrine.clone(),
                    cache: Some(self.head_ttl),
                },
                Block {
                    text: context,
                    cache: Some(self.head_ttl),
                },
            ],
            messages,
        }
    }
}

/// The key of a room event shown in a segment.
fn shown_key(room: &str, id: &str) -> String {
    format!("{room}\u{1f}{id}")
}

impl Rendered {
    /// The request as the cache model sees it: every block a checkpoint, tokens counted with the
    /// shared tokenizer, fingerprints over each block's role and bytes.
    pub fn checkpoints(&self) -> (Vec<Checkpoint>, Tokens) {
        let mut blocks: Vec<(Tokens, u64, Option<Ttl>)> = Vec::new();
        for tool in &self.tools {
            let json = tool.to_string();
            blocks.push((count(&json), hash_bytes(json.as_bytes()), None));
        }
        for b in &self.system {
            blocks.push((
                count(&b.text),
                hash_bytes(format!("system\u{1f}{}", b.text).as_bytes()),
                b.cache,
            ));
        }
        for m in &self.messages {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            for b in &m.blocks {
                blocks.push((
                    count(&b.text),
                    hash_bytes(format!("{role}\u{1f}{}", b.text).as_bytes()),
                    b.cache,
                ));
            }
        }
        checkpoints_from_blocks(&blocks)
    }

    /// The Anthropic Messages API body for this request.
    pub fn to_wire(&self, model: &str, max_tokens: u64) -> serde_json::Value {
        let block = |b: &Block| {
            let mut v = serde_json::json!({"type": "text", "text": b.text});
            if let Some(ttl) = b.cache {
                v["cache_control"] = match ttl {
                    Ttl::FiveMinutes => serde_json::json!({"type": "ephemeral"}),
                    Ttl::OneHour => serde_json::json!({"type": "ephemeral", "ttl": "1h"}),
                };
            }
            v
        };
        let messages: Vec<serde_json::Value> = self
            .messages
            .iter()
            .map(|m| {
                serde_json::json!({
                    "role": match m.role { Role::User => "user", Role::Assistant => "assistant" },
                    "content": m.blocks.iter().map(block).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut body = serde_json::json!({
            "model": model,
            "max_tokens": max_tokens,
            "system": self.system.iter().map(block).collect::<Vec<_>>(),
            "messages": messages,
        });
        if !self.tools.is_empty() {
            body["tools"] = serde_json::Value::Array(self.tools.clone());
        }
        body
    }
}

/// The seed's `next_batch` rule, for any kind of pending delivery: the length of the oldest prefix
/// that shares a conversation — all public-room deliveries together, or one DM room alone — cut at
/// the first delivery that switches between public and direct or, for DMs, changes room.
/// `conversation(d)` gives a delivery's `(is_direct, room)`.
pub fn next_batch_len<T>(pending: &[T], conversation: impl Fn(&T) -> (bool, &str)) -> usize {
    let Some(first) = pending.first() else {
        return 0;
    };
    let (direct, room) = conversation(first);
    pending
        .iter()
        .position(|d| {
            let (is_direct, r) = conversation(d);
            is_direct != direct || (direct && r != room)
        })
        .unwrap_or(pending.len())
}

/// Whether `next` extends `prev` append-only: the same tools and system, and `prev`'s messages
/// as a prefix of `next`'s, identical but for breakpoint markers.
pub fn extends(prev: &Rendered, next: &Rendered) -> bool {
    fn strip(blocks: &[Block]) -> Vec<&str> {
        blocks.iter().map(|b| b.text.as_str()).collect()
    }
    prev.tools == next.tools
        && strip(&prev.system) == strip(&next.system)
        && prev
            .system
            .iter()
            .map(|b| b.cache)
            .eq(next.system.iter().map(|b| b.cache))
        && prev.messages.len() <= next.messages.len()
        && prev
            .messages
            .iter()
            .zip(&next.messages)
            .all(|(a, b)| a.role == b.role && strip(&a.blocks) == strip(&b.blocks))
}
