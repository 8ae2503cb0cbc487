//! The runtime: each Mind's Persona and Self as persistent, append-only sessions.
//!
//! # A Persona turn, end to end
//!
//! mailbox (durable, with seq) → [`next_batch`] (the oldest prefix sharing a conversation: all
//! public-room deliveries together, or one DM room alone) → brakes and spend cap → the decider
//! (`muninn_core::decide::decide`, unchanged from replay: append, or refresh into a new segment)
//! → the renderer (notices for changed layers, history shown once) → the transcript, *before* the
//! call → the backend → the reply validated against the reply schema (retried once, then a
//! recorded failure) → one transaction: transcript, outbox rows with request ids
//! `<batch>-<index>`, the ledger row, `remember[]` memory notes, `start_self_run` briefs, and the
//! mailbox ack through the batch's max seq. A crash anywhere before that transaction re-delivers
//! the batch; a crash after it leaves nothing to redo. Request ids make a re-sent reply the same
//! message.
//!
//! # The Self
//!
//! Briefs (from a Persona's `start_self_run` or the operator) queue for the Mind's one Self
//! session. Each brief is a turn; its end is a task boundary where the decider may refresh. Its
//! result is posted back to the Persona as a delivery from room `self`.
//!
//! # Refresh, flush and rehydrate
//!
//! A Persona writes memory as it happens (`remember[]`), so its refresh needs no flush request: the
//! new segment starts from the doctrine, the persona state and the memory selected for the batch
//! (about its senders, the newest, within `memory_tokens`). A Self refresh asks the session to
//! flush its memory (goal, open tasks, constraints, done markers, facts); if a pinned item is
//! missing, the new segment carries the previous segment's tail verbatim instead.
//!
//! A Self brief runs under the flush protocol ([`muninn_backend::Backend::run`]): a run that
//! neared the context ceiling and was asked to flush (or was interrupted or terminated) records
//! its memory (`memory_flush`, ledger decision `flush:<stage>`), and the next brief opens a new
//! segment from it. With `refresh = "compact"` a Persona refresh compacts the provider session
//! in place ([`muninn_backend::Backend::compact`]; ledger decision `compact`, a new segment with
//! reason `compact` whose memory is the summary), falling back to a rebuild when the backend
//! cannot compact.
//!
//! # Resuming after a restart or takeover
//!
//! A segment row keeps its memory layer and a digest of its session spec; after each turn the
//! backend's session handle is stored with it, bound to the segment's transcript. A new lease
//! rebuilds the renderer from the start layers and the transcript replayed, and resumes the
//! provider session through the handle (forked unless the previous holder released the lease
//! cleanly), seeded from the rendered transcript if the handle no longer verifies. A spec that
//! changed, a missing handle or an unanswered last turn opens a fresh segment instead.
//!
//! # Keeping warm
//!
//! Shortly before the tail's TTL runs out the decider is asked again (`Event::Expiring`): it may
//! ping (a one-token request that leaves the session unchanged), or let the cache expire.
//!
//! # One writer per Mind
//!
//! Every write carries the Mind's lease fencing token; a host that cannot take the lease does not
//! run the Mind, and a host whose token went stale stops at its next write.

use crate::Host;
use crate::config::{MindConfig, RefreshMode};
use muninn_backend::{
    Backend, BackendError, FlushProtocol, FlushStage, SessionSpec, TurnInput, TurnOutcome,
};
use muninn_core::decide::{
    Action, Bounds, Decision, Event, GapStats, Policy, Rates, SessionView, decide,
};
use muninn_core::ledger::LedgerRow;
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::price::{ModelPrice, PriceTable};
use muninn_core::render::{self, Layers, Renderer};
use muninn_core::tokenize::count;
use muninn_store::{
    BriefOrigin, BriefStatus, Delivery, FencingToken, Lease, NewBrief, NewDelivery, NewMemoryNote,
    NewOutboxMessage, NewSegment, NewTranscriptItem, Role, StoreError, TranscriptItem,
    TranscriptKind, TurnRecord,
};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// How long a lease lasts by default (`lease_ttl_ms` in the configuration); it is renewed when
/// less than a third is left.
pub const LEASE_TTL_MS: i64 = 30_000;
/// The decider is asked this long before the tail's TTL runs out.
pub const DECIDE_BEFORE_EXPIRY_MS: i64 = 30_000;
/// A `remember[]` note's byte limit, and how many a reply may carry.
pub const MEMORY_NOTE_BYTES: usize = 1_000;
/// See [`MEMORY_NOTE_BYTES`].
pub const MEMORY_NOTES_PER_REPLY: usize = 8;
/// A `start_self_run` brief's character limit.
pub const BRIEF_CHARS: usize = 1_000;
/// Pending deliveries read per step: a batch is a prefix of them, so a small page keeps a deep
/// mailbox from being re-read whole on every turn (a longer batch continues next turn).
pub const PENDING_PAGE: i64 = 32;
/// The room a Self run's result reaches the Persona from.
pub const SELF_ROOM: &str = "self";
/// The reply-schema room meaning "the DM room of this batch".
pub const DM_ROOM: &str = "@dm";

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store failed; [`StoreError::is_retryable`] says whether to try again.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The backend failed; the batch stays in the mailbox and is re-delivered.
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// The configuration cannot be run (an unknown model, an unreadable doctrine file, …).
    #[error("configuration: {0}")]
    Config(String),
}

/// What one call of [`MindRunner::step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Another host holds this Mind's lease.
    NotLeader,
    /// The operator brake is on: no call, no send.
    Braked,
    /// The spend cap for the window is reached: no call.
    OverBudget,
    /// A Persona turn was recorded (ack position after it).
    PersonaTurn {
        /// The mailbox position acknowledged.
        acked_through: i64,
        /// Whether the reply was valid (otherwise a failure was recorded).
        valid: bool,
    },
    /// A Self brief was run.
    SelfTurn {
        /// The brief's seq.
        brief: i64,
    },
    /// A keep-warm ping was sent.
    Ping,
    /// Nothing to do until the given time (or a wake-up).
    Idle {
        /// When to look again, Unix ms (`None`: only on a wake-up).
        until_ms: Option<i64>,
    },
}

/// A Persona's reply, as the reply schema types it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct PersonaReply {
    /// What to say, where.
    #[serde(default)]
    pub say: Vec<Say>,
    /// A Self run to start.
    #[serde(default)]
    pub start_self_run: Option<SelfRun>,
    /// What to remember from this turn.
    #[serde(default)]
    pub remember: Vec<Remember>,
}

/// One message to send.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Say {
    /// The room (one the Persona may speak in, or [`DM_ROOM`]).
    pub room: String,
    /// The text.
    pub text: String,
}

/// A Self run the Persona asks for.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SelfRun {
    /// The brief (≤ 1000 characters).
    pub brief: String,
    /// The repository, if any.
    #[serde(default)]
    pub repo: Option<String>,
    /// The campaign, if any.
    #[serde(default)]
    pub campaign: Option<String>,
}

/// A memory note the Persona writes.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Remember {
    /// The note (≤ 1000 bytes).
    pub text: String,
    /// Whom it is about (sender ids).
    #[serde(default)]
    pub about: Vec<String>,
    /// How much it matters.
    #[serde(default)]
    pub salience: i64,
}

/// The reply schema of a Mind's Persona: stable for a segment (the room enum covers every room
/// allowed in it; the batch's narrower rules are checked in code).
pub fn reply_schema(mind: &MindConfig) -> Value {
    let mut rooms: Vec<Value> = mind.rooms.iter().map(|r| json!(r)).collect();
    rooms.push(json!(DM_ROOM));
    let campaigns: Vec<Value> = mind.campaigns.iter().map(|c| json!(c.slug)).collect();
    let mut self_run = json!({
        "type": "object",
        "required": ["brief"],
        "additionalProperties": false,
        "properties": {
            "brief": {"type": "string", "maxLength": BRIEF_CHARS},
            "repo": {"type": "string"},
        }
    });
    if !campaigns.is_empty() {
        self_run["properties"]["campaign"] = json!({"type": "string", "enum": campaigns});
    }
    json!({
        "type": "object",
        "required": ["say", "remember"],
        "additionalProperties": false,
        "properties": {
            "say": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["room", "text"],
                    "additionalProperties": false,
                    "properties": {
                        "room": {"type": "string", "enum": rooms},
                        "text": {"type": "string", "minLength": 1},
                    }
                }
            },
            // `null` first: no Self run unless the model asks for one.
            "start_self_run": {"anyOf": [{"type": "null"}, self_run]},
            "remember": {
                "type": "array",
                "maxItems": MEMORY_NOTES_PER_REPLY,
                "items": {
                    "type": "object",
                    "required": ["text", "about", "salience"],
                    "additionalProperties": false,
                    "properties": {
                        "text": {"type": "string", "maxLength": MEMORY_NOTE_BYTES},
                        "about": {"type": "array", "items": {"type": "string"}},
                        "salience": {"type": "integer", "minimum": 0, "maximum": 10},
                    }
                }
            }
        }
    })
}

/// Validates a structured reply for a batch: the schema, then what the schema cannot say (a DM
/// reply only in a DM batch, byte limits). Returns the rooms resolved.
pub fn validate_reply(
    mind: &MindConfig,
    batch: &[Delivery],
    value: &Value,
) -> Result<PersonaReply, String> {
    muninn_backend::schema::validate(&reply_schema(mind), value)?;
    let mut reply: PersonaReply =
        serde_json::from_value(value.clone()).map_err(|e| format!("reply: {e}"))?;
    let dm_room = batch.iter().find(|d| d.is_direct).map(|d| d.room.clone());
    for say in &mut reply.say {
        if say.room == DM_ROOM {
            match &dm_room {
                Some(room) => say.room = room.clone(),
                None => return Err("say: @dm in a batch with no direct message".to_string()),
            }
        } else if !mind.rooms.contains(&say.room) {
            return Err(format!(
                "say: room {:?} is not one this Persona may speak in",
                say.room
            ));
        }
    }
    if let Some(run) = &reply.start_self_run
        && run.brief.chars().count() > BRIEF_CHARS
    {
        return Err(format!(
            "start_self_run: brief longer than {BRIEF_CHARS} characters"
        ));
    }
    if reply.remember.len() > MEMORY_NOTES_PER_REPLY {
        return Err(format!(
            "remember: more than {MEMORY_NOTES_PER_REPLY} notes"
        ));
    }
    if let Some(note) = reply
        .remember
        .iter()
        .find(|n| n.text.len() > MEMORY_NOTE_BYTES)
    {
        return Err(format!(
            "remember: a note of {} bytes (limit {MEMORY_NOTE_BYTES})",
            note.text.len()
        ));
    }
    Ok(reply)
}

/// The seed's `next_batch`: the oldest prefix of the pending deliveries that shares a
/// conversation — all public-room deliveries together, or one DM room alone — cut at the first
/// delivery that switches between public and direct or, for DMs, changes room.
pub fn next_batch(pending: &[Delivery]) -> &[Delivery] {
    &pending[..render::next_batch_len(pending, |d| (d.is_direct, d.room.as_str()))]
}

/// One role's live session.
struct Session<B> {
    role: Role,
    backend: B,
    renderer: Option<Renderer>,
    segment: Option<i64>,
    /// Requests sent in the current segment.
    requests: u32,
    /// Tokens of the cached prefix after the last request.
    prefix_tokens: Tokens,
    /// Tokens the segment was rehydrated with (reported on its first ledger row).
    rehydration: Tokens,
    /// Tokens of the system prompt the provider session was started (or resumed) with. A
    /// compaction keeps it: the session continues under the system it was launched with, so a
    /// segment opened by compaction is rehydrated with it and the summary.
    launched_system: Tokens,
    last_request_ms: i64,
    warm_until_ms: Option<i64>,
    head_warm_until_ms: Option<i64>,
    read_excess: MicroUsd,
    gap_pings: u32,
    gap_ping_spend: MicroUsd,
    /// The decider was asked about this gap's expiry and let it go.
    let_expire: bool,
    /// The same for the head, once the tail was let go.
    head_let_expire: bool,
    /// What head-only pings cost in this gap.
    gap_head_ping_spend: MicroUsd,
    gaps: GapStats,
    /// The session must be rebuilt from the transcript (a failed call left it out of step).
    broken: bool,
    /// Where reading this role's transcript for the current segment starts: no later than the
    /// segment's first item, so binding a session never rescans earlier segments twice.
    bind_from: i64,
    /// The transcript the session handle was last bound over, so the binding after the next
    /// turn reads only the items that turn added (not the whole segment again).
    bound: Option<Bound>,
    /// Set when a new lease was taken: the role's open segment may be resumed through its stored
    /// handle, forking the provider session when the value is `true` (another writer may
    /// exist). Taken by the next turn.
    resume: Option<bool>,
    /// Session events (the backend's, and the host's own resume) not yet on a ledger row.
    pending_events: Vec<Value>,
    /// The Self only: memory a run flushed under the flush protocol; the next brief opens a new
    /// segment from it.
    flushed_memory: Option<String>,
}

impl<B> Session<B> {
    fn new(role: Role, backend: B) -> Session<B> {
        Session {
            role,
            backend,
            renderer: None,
            segment: None,
            requests: 0,
            prefix_tokens: 0,
            rehydration: 0,
            launched_system: 0,
            last_request_ms: 0,
            warm_until_ms: None,
            head_warm_until_ms: None,
            read_excess: MicroUsd::ZERO,
            gap_pings: 0,
            gap_ping_spend: MicroUsd::ZERO,
            let_expire: false,
            head_let_expire: false,
            gap_head_ping_spend: MicroUsd::ZERO,
            gaps: GapStats::default(),
            broken: false,
            bind_from: 1,
            bound: None,
            resume: None,
            pending_events: Vec::new(),
            flushed_memory: None,
        }
    }

    /// Starts counting a new segment on `renderer`: its number, no requests yet, and the tokens
    /// it was rehydrated with.
    fn begin_segment(&mut self, renderer: Renderer, number: i64, rehydration: Tokens) {
        self.renderer = Some(renderer);
        self.segment = Some(number);
        self.requests = 0;
        self.read_excess = MicroUsd::ZERO;
        self.rehydration = rehydration;
    }

    /// Moves the backend's session events into [`Session::pending_events`] (after a call that
    /// leaves no ledger row, e.g. a failed one).
    fn collect_events(&mut self)
    where
        B: Backend,
    {
        let events = self.backend.take_session_events();
        self.pending_events.extend(events);
    }

    /// Puts every pending session event on `row` (the row of the call that just returned).
    fn attach_events(&mut self, row: &mut LedgerRow)
    where
        B: Backend,
    {
        self.collect_events();
        row.events.append(&mut self.pending_events);
    }
}

/// A segment's transcript as read for a session binding.
struct Bound {
    segment: i64,
    /// Each item's [`binding_bytes`], oldest first.
    items: Vec<Vec<u8>>,
    /// Where the next read starts: after the last item read (of any segment).
    next: i64,
}

/// One Mind's runner: owns its two sessions and is the only task that writes for it.
pub struct MindRunner<B: Backend> {
    host: Host,
    mind: MindConfig,
    holder: String,
    price: ModelPrice,
    policy: Policy,
    lease: Option<Lease>,
    persona: Session<B>,
    selfs: Session<B>,
    turns_this_wake: u32,
    /// The newest delivery seq seen: a newer one is an arrival, so a new wake.
    newest_seen: i64,
}

impl<B: Backend> std::fmt::Debug for MindRunner<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MindRunner")
            .field("mind", &self.mind.id)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> MindRunner<B> {
    /// A runner for `mind`, holding leases as `holder`, with one backend per role.
    pub fn new(
        host: Host,
        mind: MindConfig,
        holder: String,
        prices: &PriceTable,
        persona_backend: B,
        self_backend: B,
    ) -> Result<MindRunner<B>, RuntimeError> {
        let price = prices
            .model(&mind.model)
            .map_err(|e| RuntimeError::Config(e.to_string()))?
            .clone();
        let policy = mind
            .policy
            .parse::<Policy>()
            .map_err(|e| RuntimeError::Config(format!("mind {}: {e}", mind.id)))?;
        Ok(MindRunner {
            host,
            mind,
            holder,
            price,
            policy,
            lease: None,
            persona: Session::new(Role::Persona, persona_backend),
            selfs: Session::new(Role::SelfRole, self_backend),
            turns_this_wake: 0,
            newest_seen: 0,
        })
    }

    /// The Mind's id.
    pub fn id(&self) -> &str {
        &self.mind.id
    }

    /// Registers the Mind in the store (idempotent).
    pub async fn register(&self) -> Result<(), RuntimeError> {
        let now = self.host.clock.now_ms();
        let config = serde_json::to_value(&self.mind).unwrap_or(Value::Null);
        self.host
            .store
            .create_mind(&muninn_store::Mind {
                id: self.mind.id.clone(),
                display_name: self
                    .mind
                    .name
                    .clone()
                    .unwrap_or_else(|| self.mind.id.clone()),
                config,
                created_at_ms: now,
            })
            .await?;
        Ok(())
    }

    /// Takes or renews the lease; `None` if another host holds it.
    async fn token(&mut self, now: i64) -> Result<Option<FencingToken>, RuntimeError> {
        let store = &self.host.store;
        let ttl = self.host.config.lease_ttl_ms;
        if let Some(lease) = &self.lease {
            if lease.expires_at_ms - now > ttl / 3 {
                return Ok(Some(lease.token));
            }
            match store
                .renew_lease(&self.mind.id, lease.token, ttl, now)
                .await
            {
                Ok(renewed) => {
                    let token = renewed.token;
                    self.lease = Some(renewed);
                    return Ok(Some(token));
                }
                Err(StoreError::Fenced { .. }) => {
                    // Someone else took over: our sessions are no longer the Mind's.
                    self.lease = None;
                    self.persona.broken = true;
                    self.selfs.broken = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Whether the lease was released by a clean shutdown (no holder) or is still held, live
        // or lapsed: in the second case its holder — another host, or this host's previous
        // process — may still be writing to the provider's session.
        let previous = store.lease(&self.mind.id).await?;
        let taken = store
            .acquire_lease(&self.mind.id, &self.holder, ttl, now)
            .await?;
        let token = taken.as_ref().map(|l| l.token);
        if taken.is_some() && self.lease.is_none() {
            // A new lease: the sessions in memory (if any) are not known to match the
            // transcript. The next turn resumes the open segment through its stored handle when
            // that still lines up, forking the provider session unless the previous holder
            // let go cleanly (forking costs nothing in cache: the copy has the same prefix);
            // otherwise it starts a fresh segment.
            let fork = previous.is_some();
            for session in [&mut self.persona, &mut self.selfs] {
                session.broken = true;
                session.resume = Some(fork);
            }
        }
        self.lease = taken;
        Ok(token)
    }

    /// Lets the lease go (on shutdown).
    pub async fn release(&mut self) -> Result<(), RuntimeError> {
        if let Some(lease) = self.lease.take() {
            self.host
                .store
                .release_lease(&self.mind.id, lease.token)
                .await?;
        }
        Ok(())
    }

    /// A new wake (a delivery or brief arrived): the per-wake turn limit starts again.
    pub fn woken(&mut self) {
        self.turns_this_wake = 0;
    }

    /// Does the next piece of work, if any.
    pub async fn step(&mut self) -> Result<Step, RuntimeError> {
        let now = self.host.clock.now_ms();
        let Some(token) = self.token(now).await? else {
            return Ok(Step::NotLeader);
        };
        let settings = self.host.store.settings(&self.mind.id).await?;
        if settings.brake {
            return Ok(Step::Braked);
        }
        let ack = self.host.store.ack_position(&self.mind.id).await?;
        let pending = self
            .host
            .store
            .pending_deliveries(&self.mind.id, ack, PENDING_PAGE)
            .await?;
        // A delivery not seen before is a new wake however it arrived: through this host's API
        // (which also signals `inbox`) or through another host on the same database, which
        // cannot signal this one.
        if let Some(newest) = pending.last().map(|d| d.seq)
            && newest > self.newest_seen
        {
            self.newest_seen = newest;
            self.woken();
        }
        let limit = settings
            .turn_limit
            .map_or(self.mind.turns_per_wake, |l| l.max(0) as u32);
        let has_work = !pending.is_empty() && self.turns_this_wake < limit;
        if has_work && self.over_budget(now, &settings).await? {
            return Ok(Step::OverBudget);
        }
        // Briefs are looked at only when no Persona turn is due (one query less per turn).
        let queued = if has_work {
            Vec::new()
        } else {
            self.host
                .store
                .briefs(&self.mind.id, Some(BriefStatus::Queued), 1)
                .await?
        };
        if !queued.is_empty() && self.over_budget(now, &settings).await? {
            return Ok(Step::OverBudget);
        }
        if has_work {
            self.turns_this_wake += 1;
            return self
                .persona_turn(token, now, next_batch(&pending).to_vec())
                .await;
        }
        if !queued.is_empty()
            && let Some(brief) = self
                .host
                .store
                .claim_brief(&self.mind.id, token, now)
                .await?
        {
            return self.self_turn(token, now, brief).await;
        }
        self.idle(token, now).await
    }

    async fn over_budget(
        &self,
        now: i64,
        settings: &muninn_store::MindSettings,
    ) -> Result<bool, RuntimeError> {
        let cap = settings
            .spend_cap
            .or(self.mind.spend_cap_micro_usd.map(MicroUsd));
        let Some(cap) = cap else { return Ok(false) };
        let window = settings
            .spend_window_ms
            .unwrap_or(self.mind.spend_window_s as i64 * 1000);
        let spent = self
            .host
            .store
            .spend(&self.mind.id, now - window, now + 1)
            .await?;
        Ok(spent >= cap)
    }

    /// The layers as they are now: doctrine and persona state re-read (an edit shows up as a
    /// notice), campaigns from the configuration, memory as selected at segment start.
    fn layers(&self, memory: String) -> Result<Layers, RuntimeError> {
        let doctrine = self
            .mind
            .read_doctrine()
            .map_err(|e| RuntimeError::Config(format!("mind {}: doctrine: {e}", self.mind.id)))?;
        let persona = match self.mind.read_persona_state().map_err(|e| {
            RuntimeError::Config(format!("mind {}: persona state: {e}", self.mind.id))
        })? {
            Some(state) => serde_json::to_string_pretty(&state).unwrap_or_default(),
            None => format!("{{\"name\": {:?}}}", self.mind.display_name()),
        };
        let campaigns = self
            .mind
            .campaigns
            .iter()
            .map(|c| format!("{}: {}", c.slug, c.title))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Layers {
            tools: Vec::new(),
            doctrine,
            persona,
            campaigns,
            memory,
        })
    }

    /// Memory for a new segment (seed A6): notes relevant to the batch (matching its most
    /// distinctive words), about its senders, then the newest — within the configured token
    /// budget, most relevant first.
    async fn select_memory(
        &self,
        senders: &BTreeSet<String>,
        texts: &[&str],
    ) -> Result<String, RuntimeError> {
        let store = &self.host.store;
        let mut notes = Vec::new();
        let mut words: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
            .filter(|w| w.chars().count() >= 5)
            .collect();
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        words.dedup();
        for word in words.iter().take(3) {
            notes.extend(store.memory_search(&self.mind.id, word, 4).await?);
        }
        for sender in senders {
            notes.extend(store.memory_about(&self.mind.id, sender, 6).await?);
        }
        notes.extend(store.memory_newest(&self.mind.id, 16).await?);
        let mut seen = BTreeSet::new();
        let mut out = String::new();
        let mut tokens = 0;
        for note in notes {
            if !seen.insert(note.id) {
                continue;
            }
            let line = format!("- ({}) {}\n", note.about.join(", "), note.text);
            let t = count(&line);
            if tokens + t > self.mind.memory_tokens {
                continue;
            }
            tokens += t;
            out.push_str(&line);
        }
        Ok(out)
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            head_tokens: 0,
            rehydrate_tokens: self.mind.memory_tokens,
            flush_prompt_tokens: 0,
            flush_output_tokens: 0,
            ping_tokens: 12,
            min_segment_requests: self.mind.min_segment,
            ceiling_tokens: self
                .mind
                .ceiling_tokens
                .unwrap_or(self.price.context_window),
            context_window: self.price.context_window,
        }
    }

    /// What the decider sees of a session; its head is the renderer's system prompt.
    fn view(&self, session: &Session<B>) -> SessionView {
        let mut bounds = self.bounds();
        bounds.head_tokens = session.renderer.as_ref().map_or(0, |r| {
            r.rendered().system.iter().map(|b| count(&b.text)).sum()
        });
        if session.role == Role::SelfRole {
            // The Self flushes through a request at each refresh.
            bounds.flush_prompt_tokens = count(SELF_FLUSH_PROMPT);
            bounds.flush_output_tokens = self.mind.memory_tokens;
        }
        SessionView {
            prefix_tokens: session.prefix_tokens,
            warm_until_ms: session.warm_until_ms,
            head_ttl: self.mind.head_ttl,
            head_warm_until_ms: session.head_warm_until_ms,
            last_request_ms: session.last_request_ms,
            ttl: self.mind.tail_ttl,
            segment_requests: session.requests,
            read_excess: session.read_excess,
            gap_pings: session.gap_pings,
            gap_ping_spend: session.gap_ping_spend,
            gap_head_ping_spend: session.gap_head_ping_spend,
            flushed: false,
            rates: Rates::of(&self.price, self.mind.tail_ttl, self.mind.head_ttl),
            bounds,
            gaps: session.gaps,
        }
    }

    /// The role's transcript items of `segment` from seq `from` on, oldest first, and the seq
    /// after the last item read (`from` when there was none).
    async fn segment_transcript(
        &self,
        role: Role,
        segment: i64,
        mut from: i64,
    ) -> Result<(Vec<TranscriptItem>, i64), RuntimeError> {
        const PAGE: i64 = 500;
        let mut items = Vec::new();
        loop {
            let page = self
                .host
                .store
                .transcript_range(&self.mind.id, role, from, None, PAGE)
                .await?;
            let full = page.len() as i64 == PAGE;
            if let Some(last) = page.last() {
                from = last.seq + 1;
            }
            items.extend(page.into_iter().filter(|i| i.segment == segment));
            if !full {
                return Ok((items, from));
            }
        }
    }

    /// Stores the role's session handle with its segment, bound to the segment's transcript as
    /// it now stands, so a restarted runner can tell whether the provider's copy of the
    /// conversation is still muninn's. A no-op for backends that bind nothing. The transcript is
    /// append-only and this runner its only writer under the lease, so the items bound last time
    /// still stand: only the ones after them are read.
    async fn bind_session(&mut self, role: Role, token: FencingToken) -> Result<(), RuntimeError> {
        let session = self.session_mut(role);
        let Some(segment) = session.segment else {
            return Ok(());
        };
        if !session.backend.binds_sessions() || session.broken {
            return Ok(());
        }
        let mut bound = match session.bound.take() {
            Some(bound) if bound.segment == segment => bound,
            _ => Bound {
                segment,
                items: Vec::new(),
                next: session.bind_from,
            },
        };
        let (items, next) = self.segment_transcript(role, segment, bound.next).await?;
        let session = self.session_mut(role);
        if bound.items.is_empty()
            && let Some(first) = items.first()
        {
            session.bind_from = first.seq;
        }
        bound.items.extend(items.iter().map(binding_bytes));
        bound.next = next;
        let handle = session.backend.session_handle(&bound.items);
        session.bound = Some(bound);
        if let Some(handle) = handle {
            self.host
                .store
                .set_segment_session(&self.mind.id, token, role, segment, &handle)
                .await?;
        }
        Ok(())
    }

    fn session_mut(&mut self, role: Role) -> &mut Session<B> {
        match role {
            Role::Persona => &mut self.persona,
            Role::SelfRole => &mut self.selfs,
        }
    }

    /// The session spec of a role's segment rendered by `renderer`.
    fn spec_for(&self, role: Role, renderer: &Renderer) -> SessionSpec {
        SessionSpec {
            model: self.mind.model.clone(),
            system: renderer
                .rendered()
                .system
                .into_iter()
                .map(|b| b.text)
                .collect(),
            tools: Vec::new(),
            output_schema: (role == Role::Persona).then(|| reply_schema(&self.mind)),
            system_ttl: self.mind.head_ttl,
            conversation_ttl: self.mind.tail_ttl,
            max_tokens: self.mind.max_output_tokens,
        }
    }

    /// Opens a new segment for a role: a segment row, a renderer on the current layers, a fresh
    /// provider session.
    async fn open_segment(
        &mut self,
        role: Role,
        token: FencingToken,
        now: i64,
        memory: String,
        reason: &str,
    ) -> Result<(), RuntimeError> {
        let layers = self.layers(memory.clone())?;
        let renderer = Renderer::new(layers, self.mind.head_ttl, self.mind.tail_ttl)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let spec = self.spec_for(role, &renderer);
        let rehydration: Tokens = spec.system.iter().map(|t| count(t)).sum();
        let segment = self
            .host
            .store
            .start_segment(
                &self.mind.id,
                token,
                &NewSegment {
                    role,
                    started_at_ms: now,
                    rehydration_tokens: rehydration as i64,
                    reason: reason.to_string(),
                    session_id: None,
                    memory: Some(memory),
                    spec_digest: Some(spec_digest(&spec)),
                },
            )
            .await?;
        let session = self.session_mut(role);
        // A fresh segment is never seeded from an earlier conversation (a resume that did not
        // go through may have left a seed behind).
        session.backend.set_seed(None);
        let started = session.backend.start(spec).await;
        session.collect_events();
        started?;
        session.begin_segment(renderer, segment.number, rehydration);
        session.launched_system = rehydration;
        session.broken = false;
        session.resume = None;
        Ok(())
    }

    /// Continues the role's open segment after a new lease, through the provider session
    /// handle stored with it: the renderer is rebuilt from the segment's start layers (its
    /// stored memory, the doctrine and persona state as they are now) with the segment's
    /// transcript replayed, and the backend resumes (with `fork`, a copy of) the provider
    /// session — or, when the handle no longer verifies over that transcript, starts a fresh
    /// provider session seeded with the transcript rendered. Returns `false`, changing nothing,
    /// when the segment cannot be continued: a backend that binds no sessions, no handle, a
    /// segment stored before migration 4, a compacted or flushed segment, a transcript that
    /// ends in a turn never answered, or a session spec that differs from the segment's (an
    /// edited doctrine or persona state, another model or reply schema).
    async fn resume_segment(
        &mut self,
        role: Role,
        fork: bool,
        now: i64,
    ) -> Result<bool, RuntimeError> {
        if !self.session_mut(role).backend.binds_sessions() {
            return Ok(false);
        }
        let Some(segment) = self.host.store.current_segment(&self.mind.id, role).await? else {
            return Ok(false);
        };
        let (Some(handle), Some(memory), Some(digest)) = (
            segment.session_id.clone(),
            segment.memory.clone(),
            segment.spec_digest.clone(),
        ) else {
            return Ok(false);
        };
        // A compacted segment's provider session runs under the spec from before the
        // compaction, which the row does not hold.
        if segment.ended_at_ms.is_some() || segment.reason == COMPACT_REASON {
            return Ok(false);
        }
        let layers = self.layers(memory)?;
        let renderer = Renderer::new(layers, self.mind.head_ttl, self.mind.tail_ttl)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let spec = self.spec_for(role, &renderer);
        if spec_digest(&spec) != digest {
            return Ok(false);
        }
        let launched_system: Tokens = spec.system.iter().map(|t| count(t)).sum();
        let from = self.session_mut(role).bind_from;
        let (items, next) = self.segment_transcript(role, segment.number, from).await?;
        if let Some(first) = items.first() {
            self.session_mut(role).bind_from = first.seq;
        }
        let Some((renderer, replies)) = replay(role, renderer, &items) else {
            return Ok(false);
        };
        let bytes: Vec<Vec<u8>> = items.iter().map(binding_bytes).collect();
        let last_ms = items
            .last()
            .map_or(segment.started_at_ms, |i| i.created_at_ms);
        let (tail, head) = (self.mind.tail_ttl, self.mind.head_ttl);
        let session = self.session_mut(role);
        if !session.backend.resume_session(&handle, &bytes, fork) {
            return Ok(false);
        }
        session.backend.set_seed(Some(renderer.conversation_text()));
        let started = session.backend.start(spec).await;
        session.collect_events();
        started?;
        session.prefix_tokens = renderer.rendered().checkpoints().1;
        // No rehydration on the ledger: the provider's session continues (a fresh one seeded
        // from the transcript reports its seeding among the backend's session events).
        session.begin_segment(renderer, segment.number, 0);
        session.requests = replies;
        session.launched_system = launched_system;
        // The provider's cache outlives a host restart: the segment's last request may still be
        // warm, which the decider is told (its own clock decides).
        session.last_request_ms = last_ms;
        session.warm_until_ms = Some(last_ms + tail.millis());
        session.head_warm_until_ms = Some(last_ms + head.millis());
        session.broken = false;
        session.bound = Some(Bound {
            segment: segment.number,
            items: bytes,
            next,
        });
        session.pending_events.push(json!({
            "type": "resumed_segment",
            "segment": segment.number,
            "fork": fork,
            "items": items.len(),
            "at_ms": now,
        }));
        Ok(true)
    }

    fn ledger_row(
        &self,
        session: &Session<B>,
        outcome: &TurnOutcome,
        now: i64,
        decision: &str,
        state: &str,
        boundary: bool,
    ) -> LedgerRow {
        let predicted = outcome.predicted.unwrap_or_default();
        LedgerRow {
            mind: self.mind.id.clone(),
            role: session.role.as_str().to_string(),
            segment: session.segment.unwrap_or(0).max(0) as u64,
            turn: session.requests as u64,
            at_ms: now,
            idle_gap_ms: if session.last_request_ms > 0 {
                now - session.last_request_ms
            } else {
                0
            },
            model: self.mind.model.clone(),
            prefix_tokens: outcome.usage.cache_read + outcome.usage.written(),
            rehydration_tokens: if session.requests == 0 {
                session.rehydration
            } else {
                0
            },
            usage: outcome.usage,
            raw_usage: Some(outcome.raw_usage.clone()),
            cost: self.price.cost(&outcome.usage),
            predicted_read: predicted.cache_read,
            predicted_write: predicted.written(),
            cache_state: state.to_string(),
            miss_cause: outcome.miss,
            decision: decision.to_string(),
            boundary,
            events: (outcome.retries.iter().map(serde_json::to_value))
                .chain(outcome.events.iter().map(serde_json::to_value))
                .filter_map(Result::ok)
                .collect(),
        }
    }

    /// The ledger row of a turn the role's session answered (with its pending session events),
    /// after which the session counts the request: its prefix, warmth and gap statistics.
    fn answered(
        &mut self,
        role: Role,
        outcome: &TurnOutcome,
        now: i64,
        decision: &str,
        state: &str,
        boundary: bool,
    ) -> LedgerRow {
        let session = match role {
            Role::Persona => &self.persona,
            Role::SelfRole => &self.selfs,
        };
        let mut row = self.ledger_row(session, outcome, now, decision, state, boundary);
        let rates = Rates::of(&self.price, self.mind.tail_ttl, self.mind.head_ttl);
        let (tail, head) = (self.mind.tail_ttl, self.mind.head_ttl);
        let session = self.session_mut(role);
        session.attach_events(&mut row);
        if session.requests > 0 && outcome.usage.cache_read > 0 {
            let excess = outcome.usage.prompt().saturating_sub(session.rehydration);
            session.read_excess += MicroUsd::of(excess, rates.read);
        }
        if session.last_request_ms > 0 {
            session.gaps.observe(now - session.last_request_ms);
        }
        session.requests += 1;
        session.prefix_tokens = outcome.usage.cache_read + outcome.usage.written();
        session.last_request_ms = now;
        session.warm_until_ms = Some(now + tail.millis());
        session.head_warm_until_ms = Some(now + head.millis());
        session.gap_pings = 0;
        session.gap_ping_spend = MicroUsd::ZERO;
        session.let_expire = false;
        session.head_let_expire = false;
        session.gap_head_ping_spend = MicroUsd::ZERO;
        row
    }

    async fn persona_turn(
        &mut self,
        token: FencingToken,
        now: i64,
        batch: Vec<Delivery>,
    ) -> Result<Step, RuntimeError> {
        let senders: BTreeSet<String> = batch.iter().map(|d| d.sender.clone()).collect();
        let max_seq = batch.iter().map(|d| d.seq).max().unwrap_or(0);
        let first_seq = batch.iter().map(|d| d.seq).min().unwrap_or(0);
        let batch_id = format!("{}-{}-{}", self.mind.id, first_seq, max_seq);
        let input = render::TurnInput {
            deliveries: batch
                .iter()
                .map(|d| render::Delivery {
                    id: d.source_id.clone(),
                    room: d.room.clone(),
                    sender: d.sender.clone(),
                    is_direct: d.is_direct,
                    to_you: d.to_you,
                    text: d.text.clone(),
                    // A line without an id cannot be recognised when a later delivery repeats it;
                    // its text stands in for the id, so an identical line is shown once.
                    context: d
                        .context
                        .iter()
                        .map(|line| render::HistoryLine {
                            id: line
                                .id
                                .clone()
                                .unwrap_or_else(|| format!("text:{}:{}", line.sender, line.text)),
                            sender: line.sender.clone(),
                            text: line.text.clone(),
                        })
                        .collect(),
                })
                .collect(),
            status: String::new(),
            text: String::new(),
        };

        // A new lease: continue the open segment through its stored handle, if it lines up.
        if self.persona.broken
            && let Some(fork) = self.persona.resume.take()
        {
            self.resume_segment(Role::Persona, fork, now).await?;
        }
        // The decider: append, or refresh into a new segment.
        // New tokens this turn: the messages, and their context lines (an upper bound: lines the
        // segment has shown already are not repeated).
        let delta: Tokens = batch
            .iter()
            .map(|d| {
                count(&d.text) + 12 + d.context.iter().map(|l| count(&l.text) + 8).sum::<Tokens>()
            })
            .sum();
        let mut decision: Option<Decision> = None;
        let (state, reason) = if self.persona.renderer.is_none() || self.persona.broken {
            (
                "cold",
                if self.persona.segment.is_none() {
                    "start"
                } else {
                    "rebuilt from the transcript"
                },
            )
        } else {
            let view = self.view(&self.persona);
            let d = decide(
                self.policy,
                &view,
                Event::Arrival {
                    boundary: true,
                    delta,
                },
                now,
            );
            decision = Some(d);
            (if view.warm(now) { "warm" } else { "cold" }, "refresh")
        };
        if decision.is_none_or(|d| d.action == Action::Refresh) {
            // A refresh the decider chose may compact the live session in place; a cold start
            // or a rebuild after a failure always starts from the layers.
            let compacted = decision.is_some()
                && self.mind.refresh == RefreshMode::Compact
                && self.compact_persona(token, now).await?;
            if !compacted {
                let texts: Vec<&str> = batch.iter().map(|d| d.text.as_str()).collect();
                let memory = self.select_memory(&senders, &texts).await?;
                self.open_segment(Role::Persona, token, now, memory, reason)
                    .await?;
            }
        }
        let decision_text = decision.map_or_else(
            || format!("start:{reason}"),
            |d| format!("{}:{:?}", d.action.as_str(), d.reason),
        );
        let layers = self.layers(String::new())?;
        let Some(renderer) = self.persona.renderer.as_mut() else {
            return Err(RuntimeError::Config("no persona renderer".to_string()));
        };
        // Only this turn's user message is sent (the provider's session holds the rest), so the
        // whole request is not rendered.
        let memory = renderer.base().memory.clone();
        let user_text = renderer
            .append_turn(&Layers { memory, ..layers }, &input)
            .blocks
            .last()
            .map(|b| b.text.clone())
            .unwrap_or_default();
        let segment = self.persona.segment.unwrap_or(0);
        // What a rebuilt renderer needs to replay this turn (see `replay`): the history keys it
        // showed and, after a notice, the layers it showed.
        let mut delivery_body = json!({
            "batch": batch_id,
            "seqs": batch.iter().map(|d| d.seq).collect::<Vec<_>>(),
            "text": user_text,
            "seen": Renderer::shown_keys(&input),
        });
        if shown_changed(renderer) {
            delivery_body["shown"] = serde_json::to_value(renderer.shown()).unwrap_or_default();
        }

        // The transcript first: what the Mind is shown is durable before it is acted on.
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role: Role::Persona,
                    segment,
                    kind: TranscriptKind::Delivery,
                    body: delivery_body,
                    created_at_ms: now,
                }],
            )
            .await?;

        let mut ledger = Vec::new();
        let mut outcome = match self.persona.backend.turn(TurnInput::text(user_text)).await {
            Ok(o) => o,
            Err(e) => {
                // A backend that keeps its own durable session (the CLI) relaunches it by itself
                // on the next turn (`--resume`) when its child died or hung: the session then
                // holds this turn's user line unanswered, as the transcript holds the delivery,
                // and the retry appends the batch again on both sides, so the segment (and its
                // cached prefix) continues. Any other failure may have left the provider's
                // session out of step with the renderer: rebuild next time.
                let relaunches = self.persona.backend.binds_sessions()
                    && matches!(e, BackendError::Transport(_));
                if !relaunches {
                    self.persona.broken = true;
                }
                self.persona.collect_events();
                return Err(e.into());
            }
        };
        ledger.push(self.answered(Role::Persona, &outcome, now, &decision_text, state, true));
        let mut verdict = outcome
            .structured
            .as_ref()
            .ok_or_else(|| "no structured reply".to_string())
            .and_then(|v| validate_reply(&self.mind, &batch, v));
        // The invalid first reply and the retry prompt, when a retry was answered: the
        // provider's session holds both, so the transcript does too.
        let mut retried: Option<Value> = None;
        if let Err(problem) = &verdict {
            // Answered by policy: one retry with the reason, then a recorded failure.
            let retry = format!(
                "Your reply was not valid ({problem}). Reply again, following the schema exactly."
            );
            let now2 = self.host.clock.now_ms();
            match self
                .persona
                .backend
                .turn(TurnInput::text(retry.clone()))
                .await
            {
                Ok(second) => {
                    if let Some(r) = self.persona.renderer.as_mut() {
                        r.reply(&outcome_text(&outcome));
                        // The retry prompt goes as sent, with no notices: the renderer holds
                        // exactly what the provider's session holds.
                        r.push_user(&retry);
                    }
                    retried = Some(json!({
                        "failure": "invalid reply",
                        "problem": problem,
                        "reply": outcome.structured,
                        "text": outcome.text,
                        "retry": retry,
                    }));
                    let row = self.answered(
                        Role::Persona,
                        &second,
                        now2,
                        "retry_invalid_reply",
                        "warm",
                        false,
                    );
                    ledger.push(row);
                    verdict = second
                        .structured
                        .as_ref()
                        .ok_or_else(|| "no structured reply".to_string())
                        .and_then(|v| validate_reply(&self.mind, &batch, v));
                    outcome = second;
                }
                Err(e) => {
                    self.persona.broken = true;
                    self.persona.collect_events();
                    verdict = Err(format!("retry failed: {e}"));
                }
            }
        }
        if let Some(r) = self.persona.renderer.as_mut() {
            r.reply(&outcome_text(&outcome));
        }

        let mut record = TurnRecord {
            turn_key: Some(format!("persona-{batch_id}-{}", segment)),
            ack_through: Some(max_seq),
            ledger,
            ..TurnRecord::default()
        };
        let valid = verdict.is_ok();
        if let Some(body) = retried {
            record.transcript.push(NewTranscriptItem {
                role: Role::Persona,
                segment,
                kind: TranscriptKind::Notice,
                body,
                created_at_ms: now,
            });
        }
        match verdict {
            Ok(reply) => {
                record.transcript.push(NewTranscriptItem {
                    role: Role::Persona,
                    segment,
                    kind: TranscriptKind::Reply,
                    body: outcome.structured.clone().unwrap_or(Value::Null),
                    created_at_ms: now,
                });
                for (index, say) in reply.say.iter().enumerate() {
                    record.outbox.push(NewOutboxMessage {
                        request_id: format!("{batch_id}-{index}"),
                        room: say.room.clone(),
                        text: say.text.clone(),
                        created_at_ms: now,
                    });
                }
                for note in reply.remember.iter().take(MEMORY_NOTES_PER_REPLY) {
                    // `about` is limited to the batch's senders and the operators' ids the model
                    // named; anything else is dropped rather than trusted.
                    let about: Vec<String> = note
                        .about
                        .iter()
                        .filter(|a| senders.contains(*a))
                        .cloned()
                        .collect();
                    record.memory.push(NewMemoryNote {
                        about,
                        salience: note.salience.clamp(0, 10),
                        text: note.text.clone(),
                        created_at_ms: now,
                        source: batch_id.clone(),
                    });
                }
                if let Some(run) = reply.start_self_run {
                    record.briefs.push(NewBrief {
                        text: run.brief,
                        origin: BriefOrigin::Persona,
                        created_at_ms: now,
                    });
                }
            }
            Err(problem) => {
                record.transcript.push(NewTranscriptItem {
                    role: Role::Persona,
                    segment,
                    kind: TranscriptKind::Notice,
                    body: json!({"failure": "invalid reply", "problem": problem, "reply": outcome.structured, "text": outcome.text}),
                    created_at_ms: now,
                });
            }
        }
        match self
            .host
            .store
            .record_turn(&self.mind.id, token, &record)
            .await
        {
            Ok(receipt) => {
                self.bind_session(Role::Persona, token).await?;
                self.host.signals.outbox.notify_waiters();
                if !record.briefs.is_empty() {
                    self.host.signals.inbox.notify_one();
                }
                Ok(Step::PersonaTurn {
                    acked_through: receipt.ack_position,
                    valid,
                })
            }
            Err(StoreError::TurnAlreadyRecorded { .. }) => Ok(Step::PersonaTurn {
                acked_through: max_seq,
                valid,
            }),
            Err(e) => {
                self.persona.broken = true;
                Err(e.into())
            }
        }
    }

    /// A Persona refresh by compaction (`refresh = "compact"`): the provider summarises the
    /// session in place. The compaction's request is ledgered on the segment it summarised
    /// (decision `compact`, its own usage and cost); a new segment (reason `compact`) then
    /// continues the same provider session, its renderer restarted on the summary as memory.
    /// Returns `false` — the caller rebuilds, the next row carries a `compact_failed` event —
    /// when the backend cannot compact ([`BackendError::Invalid`]) or the compaction failed (the
    /// session is then rebuilt, which never depends on the provider's copy).
    async fn compact_persona(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<bool, RuntimeError> {
        let outcome = match self
            .persona
            .backend
            .compact(PERSONA_COMPACT_INSTRUCTIONS)
            .await
        {
            Ok(o) => o,
            Err(e) => {
                // `Invalid` is also what the CLI's `/compact` ends in when its summary request
                // failed (it answers in text, no boundary): either way the configured refresh did
                // not happen, which the rebuilt turn's row says.
                if !matches!(e, BackendError::Invalid(_)) {
                    tracing::warn!(mind = %self.mind.id, error = %e, "compaction failed; rebuilding");
                }
                self.persona.collect_events();
                self.persona
                    .pending_events
                    .push(json!({"type": "compact_failed", "error": e.to_string()}));
                return Ok(false);
            }
        };
        let mut row = self.ledger_row(&self.persona, &outcome, now, "compact", "warm", true);
        self.persona.attach_events(&mut row);
        self.host
            .store
            .append_ledger(&self.mind.id, token, &[row])
            .await?;
        let summary = outcome.text.clone();
        let layers = self.layers(summary.clone())?;
        let renderer = Renderer::new(layers, self.mind.head_ttl, self.mind.tail_ttl)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let spec = self.spec_for(Role::Persona, &renderer);
        // The session continues from the system it was launched with (the CLI keeps its launch
        // flags across a compaction) and the summary: that is what the new segment was
        // rehydrated with, and what its reads are measured against (not the summary alone, which
        // would count the whole head as growth and bring the next refresh early).
        let rehydration = self.persona.launched_system + count(&summary);
        let segment = self
            .host
            .store
            .start_segment(
                &self.mind.id,
                token,
                &NewSegment {
                    role: Role::Persona,
                    started_at_ms: now,
                    rehydration_tokens: rehydration as i64,
                    reason: COMPACT_REASON.to_string(),
                    session_id: None,
                    memory: Some(summary.clone()),
                    spec_digest: Some(spec_digest(&spec)),
                },
            )
            .await?;
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role: Role::Persona,
                    segment: segment.number,
                    kind: TranscriptKind::MemoryFlush,
                    body: json!({"memory": summary, "from": "compact"}),
                    created_at_ms: now,
                }],
            )
            .await?;
        let s = &mut self.persona;
        s.begin_segment(renderer, segment.number, rehydration);
        // The session now starts from its system and the summary.
        s.prefix_tokens = rehydration;
        s.last_request_ms = now;
        s.warm_until_ms = Some(now + self.mind.tail_ttl.millis());
        s.head_warm_until_ms = Some(now + self.mind.head_ttl.millis());
        Ok(true)
    }

    /// The flush protocol of this Mind's Self runs: the Mind's ceiling (else the model's
    /// window) and the configured headroom and timings.
    pub fn flush_protocol(&self) -> FlushProtocol {
        let session = self
            .mind
            .self_session
            .resolve(&self.host.config.backend.self_session);
        FlushProtocol {
            ceiling_tokens: self
                .mind
                .ceiling_tokens
                .unwrap_or(self.price.context_window),
            headroom_tokens: session.flush_headroom_tokens,
            message: SELF_RUN_FLUSH_MESSAGE.to_string(),
            grace: session.flush_grace,
            escalate_after: session.flush_escalate_after,
            exit_drain: session.flush_exit_drain,
        }
    }

    async fn self_turn(
        &mut self,
        token: FencingToken,
        now: i64,
        brief: muninn_store::Brief,
    ) -> Result<Step, RuntimeError> {
        // A new lease: continue the open segment through its stored handle, if it lines up.
        if self.selfs.broken
            && let Some(fork) = self.selfs.resume.take()
        {
            self.resume_segment(Role::SelfRole, fork, now).await?;
        }
        // A brief's start is a task boundary: the decider may refresh here.
        let delta = count(&brief.text);
        let mut decision_text = "start".to_string();
        let flushed = self.selfs.flushed_memory.take();
        let refresh = if flushed.is_some() || self.selfs.renderer.is_none() || self.selfs.broken {
            true
        } else {
            let view = self.view(&self.selfs);
            let d = decide(
                self.policy,
                &view,
                Event::Arrival {
                    boundary: self.mind.refresh_at_task_boundaries,
                    delta,
                },
                now,
            );
            decision_text = format!("{}:{:?}", d.action.as_str(), d.reason);
            d.action == Action::Refresh
        };
        if refresh {
            let (memory, reason) = if let Some(memory) = flushed {
                // The last run flushed under the flush protocol: its memory is the new start.
                decision_text = "start:flushed".to_string();
                (memory, "flushed")
            } else if self.selfs.renderer.is_some() && !self.selfs.broken {
                (self.flush_self(token, now).await?, "task boundary")
            } else {
                // A host that stopped after a run flushed left the flush as the segment's last
                // item: it is the memory to start from.
                let tail = self
                    .host
                    .store
                    .transcript_tail(&self.mind.id, Role::SelfRole, 1)
                    .await?;
                match tail
                    .last()
                    .filter(|i| i.kind == TranscriptKind::MemoryFlush)
                {
                    Some(item) => (
                        item.body["memory"].as_str().unwrap_or_default().to_string(),
                        "flushed",
                    ),
                    None => (self.self_memory_from_briefs().await?, "task boundary"),
                }
            };
            self.open_segment(Role::SelfRole, token, now, memory, reason)
                .await?;
        }
        let segment = self.selfs.segment.unwrap_or(0);
        let text = format!(
            "Brief {} (from the {}):\n{}",
            brief.seq,
            brief.origin.as_str(),
            brief.text
        );
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role: Role::SelfRole,
                    segment,
                    kind: TranscriptKind::Brief,
                    body: json!({"brief": brief.seq, "text": text}),
                    created_at_ms: now,
                }],
            )
            .await?;
        if let Some(r) = self.selfs.renderer.as_mut() {
            // As sent: the renderer holds what the provider's session holds.
            r.push_user(&text);
        }
        let protocol = self.flush_protocol();
        let run = match self
            .selfs
            .backend
            .run(TurnInput::text(text), &protocol)
            .await
        {
            Ok(run) => run,
            Err(e) => {
                self.selfs.broken = true;
                self.selfs.collect_events();
                let message = format!("the Self session failed: {e}");
                self.host
                    .store
                    .finish_brief(
                        &self.mind.id,
                        token,
                        brief.seq,
                        BriefStatus::Failed,
                        &message,
                        now,
                    )
                    .await?;
                return Err(e.into());
            }
        };
        let outcome = run.outcome;
        let stage = flush_stage_name(run.flush);
        if run.flush != FlushStage::NotNeeded {
            decision_text = format!("flush:{stage}");
        }
        let row = self.answered(Role::SelfRole, &outcome, now, &decision_text, "warm", true);
        let result = outcome_text(&outcome);
        if let Some(r) = self.selfs.renderer.as_mut() {
            r.reply(&result);
        }
        let mut transcript = vec![NewTranscriptItem {
            role: Role::SelfRole,
            segment,
            kind: TranscriptKind::Result,
            body: json!({"brief": brief.seq, "text": result}),
            created_at_ms: now,
        }];
        // A run the flush protocol ended has flushed (or failed to): its memory, or the
        // segment's tail when the answer lacks a pinned item, starts the next segment.
        let (status, verb) = match run.flush {
            FlushStage::NotNeeded => (BriefStatus::Done, "finished"),
            FlushStage::Flushed => (BriefStatus::Done, "stopped at the context ceiling"),
            FlushStage::Interrupted | FlushStage::Terminated => {
                (BriefStatus::Failed, "was cut off at the context ceiling")
            }
        };
        if run.flush != FlushStage::NotNeeded {
            let (memory, from) = match pinned_memory(&outcome.text) {
                Some(memory) => (memory, format!("flush:{stage}")),
                None => {
                    let mut tail = self.self_tail(segment).await?;
                    if !tail.is_empty() {
                        tail.push('\n');
                    }
                    tail.push_str(&result);
                    (
                        tail,
                        format!("tail (flush:{stage}: the answer missed a pinned item)"),
                    )
                }
            };
            transcript.push(NewTranscriptItem {
                role: Role::SelfRole,
                segment,
                kind: TranscriptKind::MemoryFlush,
                body: json!({"memory": memory, "from": from, "stage": stage}),
                created_at_ms: now,
            });
            self.selfs.flushed_memory = Some(memory);
        }
        let record = TurnRecord {
            turn_key: Some(format!("self-{}-brief-{}", self.mind.id, brief.seq)),
            transcript,
            ledger: vec![row],
            ..TurnRecord::default()
        };
        self.host
            .store
            .record_turn(&self.mind.id, token, &record)
            .await?;
        if run.flush == FlushStage::NotNeeded {
            self.bind_session(Role::SelfRole, token).await?;
        }
        self.host
            .store
            .finish_brief(&self.mind.id, token, brief.seq, status, &result, now)
            .await?;
        // The result reaches the Persona as a delivery; the brief's seq makes it idempotent.
        let excerpt: String = result.chars().take(2_000).collect();
        self.host
            .store
            .post_delivery(
                &self.mind.id,
                &NewDelivery {
                    room: SELF_ROOM.to_string(),
                    sender: "self".to_string(),
                    is_direct: true,
                    to_you: true,
                    text: format!("Self run {} {verb}: {excerpt}", brief.seq),
                    source_id: format!("self-brief-{}", brief.seq),
                    received_at_ms: now,
                    context: Vec::new(),
                },
            )
            .await?;
        self.host.signals.inbox.notify_one();
        self.host.signals.outbox.notify_waiters();
        Ok(Step::SelfTurn { brief: brief.seq })
    }

    /// Asks the Self to flush its memory; falls back to the previous segment's tail verbatim when
    /// a pinned item is missing.
    async fn flush_self(&mut self, token: FencingToken, now: i64) -> Result<String, RuntimeError> {
        let segment = self.selfs.segment.unwrap_or(0);
        let outcome = self
            .selfs
            .backend
            .turn(TurnInput::text(SELF_FLUSH_PROMPT))
            .await;
        let (memory, how, ledger) = match outcome {
            Ok(o) => {
                let mut row = self.ledger_row(&self.selfs, &o, now, "flush", "warm", true);
                self.selfs.attach_events(&mut row);
                match pinned_memory(&o.text) {
                    Some(memory) => (memory, "flush", vec![row]),
                    None => (
                        self.self_tail(segment).await?,
                        "tail (the flush missed a pinned item)",
                        vec![row],
                    ),
                }
            }
            Err(_) => {
                self.selfs.collect_events();
                (
                    self.self_tail(segment).await?,
                    "tail (the flush failed)",
                    Vec::new(),
                )
            }
        };
        self.host
            .store
            .record_turn(
                &self.mind.id,
                token,
                &TurnRecord {
                    transcript: vec![NewTranscriptItem {
                        role: Role::SelfRole,
                        segment,
                        kind: TranscriptKind::MemoryFlush,
                        body: json!({"memory": memory, "from": how}),
                        created_at_ms: now,
                    }],
                    ledger,
                    ..TurnRecord::default()
                },
            )
            .await?;
        Ok(memory)
    }

    async fn self_tail(&self, segment: i64) -> Result<String, RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 6)
            .await?;
        Ok(tail
            .iter()
            .filter(|i| i.segment == segment)
            .map(|i| {
                i.body
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    async fn self_memory_from_briefs(&self) -> Result<String, RuntimeError> {
        let done = self
            .host
            .store
            .briefs(&self.mind.id, Some(BriefStatus::Done), 5)
            .await?;
        Ok(done
            .iter()
            .map(|b| {
                format!(
                    "- brief {}: {} → {}",
                    b.seq,
                    b.text,
                    b.result.clone().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// Nothing queued: shortly before the Persona's tail expires, ask the decider whether to
    /// keep it warm.
    async fn idle(&mut self, token: FencingToken, now: i64) -> Result<Step, RuntimeError> {
        let session = &self.persona;
        if session.broken || session.renderer.is_none() {
            return Ok(Step::Idle { until_ms: None });
        }
        let tail_live = session.warm_until_ms.is_some_and(|t| t > now) && !session.let_expire;
        let (event, expiry) = if tail_live {
            (Event::Expiring, session.warm_until_ms)
        } else if !session.head_let_expire {
            // The tail is gone (or let go): the head, under its own longer TTL, may still be kept.
            (
                Event::HeadExpiring,
                session.head_warm_until_ms.filter(|t| *t > now),
            )
        } else {
            (Event::HeadExpiring, None)
        };
        let Some(expiry) = expiry else {
            return Ok(Step::Idle { until_ms: None });
        };
        let decide_at = expiry - DECIDE_BEFORE_EXPIRY_MS;
        if now < decide_at {
            return Ok(Step::Idle {
                until_ms: Some(decide_at),
            });
        }
        let view = self.view(session);
        let d = decide(self.policy, &view, event, now);
        if d.action != Action::Ping {
            return Ok(match event {
                Event::Expiring => {
                    // The tail goes; the head's own decision comes next.
                    self.persona.let_expire = true;
                    Step::Idle {
                        until_ms: Some(now),
                    }
                }
                _ => {
                    self.persona.head_let_expire = true;
                    Step::Idle { until_ms: None }
                }
            });
        }
        let sent = match event {
            Event::Expiring => self.persona.backend.ping().await,
            _ => self.persona.backend.ping_head().await,
        };
        let outcome = match sent {
            Ok(o) => o,
            Err(BackendError::Invalid(_)) => {
                self.persona.let_expire = true;
                self.persona.head_let_expire = true;
                return Ok(Step::Idle { until_ms: None });
            }
            Err(e) => return Err(e.into()),
        };
        let label = if event == Event::Expiring {
            "ping"
        } else {
            "ping_head"
        };
        let mut row = self.ledger_row(
            &self.persona,
            &outcome,
            now,
            &format!("{label}:{:?}", d.reason),
            "warm",
            false,
        );
        self.persona.attach_events(&mut row);
        self.host
            .store
            .append_ledger(&self.mind.id, token, &[row])
            .await?;
        let cost = self.price.cost(&outcome.usage);
        let s = &mut self.persona;
        if event == Event::Expiring {
            s.gap_pings += 1;
            s.gap_ping_spend += cost;
            s.warm_until_ms = Some(now + self.mind.tail_ttl.millis());
        } else {
            s.gap_head_ping_spend += cost;
        }
        s.head_warm_until_ms = Some(now + self.mind.head_ttl.millis());
        Ok(Step::Ping)
    }
}

/// The reason of a segment opened by a compaction.
pub const COMPACT_REASON: &str = "compact";

/// What the Persona's session is told to keep when it is compacted.
pub const PERSONA_COMPACT_INSTRUCTIONS: &str = "Summarise this conversation for your own later use: who said what that still matters, what you promised or asked for, open questions, and each person's preferences. Keep names and room names exactly.";

/// What a long Self run is told when its context nears the ceiling (the flush protocol).
pub const SELF_RUN_FLUSH_MESSAGE: &str = "Your context is nearly full. Stop the work now and flush your memory: answer with one JSON object with the keys goal, open_tasks, constraints, done and facts, covering everything the next session must know to continue. Answer with the JSON only.";

/// What the Self is asked at a refresh.
pub const SELF_FLUSH_PROMPT: &str = "Flush your memory now: answer with one JSON object with the keys goal, open_tasks, constraints, done and facts, covering everything the next session must know. Answer with the JSON only.";

/// A transcript item's canonical bytes for a session binding: its seq, kind and body (JSON with
/// sorted keys, as `serde_json` writes a `Value`), so an item edited, dropped, reordered or
/// re-kinded no longer verifies.
fn binding_bytes(item: &muninn_store::TranscriptItem) -> Vec<u8> {
    let mut bytes = format!("{}\n{}\n", item.seq, item.kind.as_str()).into_bytes();
    // Serialising a `Value` cannot fail; an empty body would only make the binding not verify.
    bytes.extend(serde_json::to_vec(&item.body).unwrap_or_default());
    bytes
}

/// The memory in a flush's answer: one JSON object with every pinned key (goal, open tasks,
/// constraints, done markers, facts), or `None`.
fn pinned_memory(answer: &str) -> Option<String> {
    let parsed = serde_json::from_str::<Value>(answer.trim()).ok()?;
    let pinned = ["goal", "open_tasks", "constraints", "done", "facts"];
    pinned
        .iter()
        .all(|k| parsed.get(k).is_some())
        .then(|| parsed.to_string())
}

/// The ledger's name of a flush stage.
fn flush_stage_name(stage: FlushStage) -> &'static str {
    match stage {
        FlushStage::NotNeeded => "not_needed",
        FlushStage::Flushed => "flushed",
        FlushStage::Interrupted => "interrupted",
        FlushStage::Terminated => "terminated",
    }
}

/// A digest of a session spec (every field: model, system layers, tools, reply schema, TTLs,
/// output limit), kept with the segment so a restarted host resumes it only while the spec it
/// would send now is the same. Not a security boundary (the handle's HMAC is): a change
/// detector.
fn spec_digest(spec: &SessionSpec) -> String {
    // Serialising a spec of strings and JSON values cannot fail.
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    format!("{:016x}", muninn_core::cache::hash_bytes(&bytes))
}

/// Whether a renderer's shown layers differ from its start layers (a notice changed them).
fn shown_changed(r: &Renderer) -> bool {
    let (shown, base) = (r.shown(), r.base());
    shown.doctrine != base.doctrine
        || shown.persona != base.persona
        || shown.campaigns != base.campaigns
        || shown.tools != base.tools
}

/// Rebuilds a segment's renderer from its transcript: each user message and reply as sent,
/// each turn's shown history keys and noticed layers. Returns the renderer and the number of
/// replies, or `None` when the transcript holds something a renderer cannot replay — a
/// flushed Self segment (it ends there), an item of a kind this build does not write into a
/// conversation, or a last turn never answered (the provider may or may not have it).
fn replay(role: Role, mut renderer: Renderer, items: &[TranscriptItem]) -> Option<(Renderer, u32)> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let mut replies = 0u32;
    let mut awaiting_reply = false;
    for item in items {
        let body = &item.body;
        match (role, &item.kind) {
            (Role::Persona, TranscriptKind::Delivery) => {
                renderer.push_user(&text(&body["text"])?);
                let keys = body["seen"].as_array().map_or(Vec::new(), |keys| {
                    keys.iter().filter_map(text).collect::<Vec<_>>()
                });
                renderer.mark_shown(keys);
                if let Some(shown) = body.get("shown") {
                    renderer.restore_shown(serde_json::from_value(shown.clone()).ok()?);
                }
                awaiting_reply = true;
            }
            (Role::Persona, TranscriptKind::Reply) => {
                renderer.reply(&body.to_string());
                replies += 1;
                awaiting_reply = false;
            }
            (Role::Persona, TranscriptKind::Notice) if body.get("failure").is_some() => {
                let reply = match &body["reply"] {
                    Value::Null => text(&body["text"]).unwrap_or_default(),
                    v => v.to_string(),
                };
                renderer.reply(&reply);
                replies += 1;
                awaiting_reply = false;
                if let Some(retry) = body.get("retry") {
                    renderer.push_user(&text(retry)?);
                    awaiting_reply = true;
                }
            }
            (Role::SelfRole, TranscriptKind::Brief) => {
                renderer.push_user(&text(&body["text"])?);
                awaiting_reply = true;
            }
            (Role::SelfRole, TranscriptKind::Result) => {
                renderer.reply(&text(&body["text"])?);
                replies += 1;
                awaiting_reply = false;
            }
            _ => return None,
        }
    }
    (!awaiting_reply).then_some((renderer, replies))
}

fn outcome_text(outcome: &TurnOutcome) -> String {
    match &outcome.structured {
        Some(v) => v.to_string(),
        None => outcome.text.clone(),
    }
}

/// Runs a Mind until `shutdown` turns true: steps while there is work, sleeps until the next
/// decision time or a wake-up otherwise. Errors are logged and retried with a backoff; a fenced
/// write stops the work until the lease is taken again.
pub async fn run_mind<B: Backend>(
    mut runner: MindRunner<B>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RuntimeError> {
    runner.register().await?;
    let signals = runner.host.signals.clone();
    let clock = runner.host.clock.clone();
    let mut backoff_ms = 250u64;
    // An idle holder steps at least every third of the lease: it renews the lease before it runs
    // out (or another host would take the Mind over and rebuild its session) and sees deliveries
    // posted through other hosts on the same database, which cannot signal it.
    let lease_third = (runner.host.config.lease_ttl_ms / 3).max(10) as u64;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let step = runner.step().await;
        let wait_ms: u64 = match &step {
            Ok(Step::PersonaTurn { .. } | Step::SelfTurn { .. } | Step::Ping) => {
                backoff_ms = 250;
                continue;
            }
            Ok(Step::Idle { until_ms: Some(t) }) => {
                ((*t - clock.now_ms()).clamp(10, 60_000) as u64).min(lease_third)
            }
            Ok(Step::Idle { until_ms: None } | Step::NotLeader) => lease_third,
            Ok(Step::Braked | Step::OverBudget) => 5_000,
            Err(e) => {
                tracing::warn!(mind = runner.id(), error = %e, "step failed; retrying");
                backoff_ms = (backoff_ms * 2).min(30_000);
                backoff_ms
            }
        };
        tokio::select! {
            _ = signals.inbox.notified() => runner.woken(),
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            _ = shutdown.changed() => {}
        }
    }
    runner.release().await
}

/// Runs every configured Mind, one task each, until `shutdown` turns true; each task releases
/// its lease on the way out.
pub async fn run_minds(
    host: Host,
    factory: crate::backends::BackendFactory,
    prices: PriceTable,
    holder: String,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RuntimeError> {
    let mut tasks = tokio::task::JoinSet::new();
    for mind in host.config.minds.iter().cloned() {
        let persona = factory.make(host.clock.clone(), &prices, &format!("{}/persona", mind.id));
        let selfs = factory.make(host.clock.clone(), &prices, &format!("{}/self", mind.id));
        let runner = MindRunner::new(host.clone(), mind, holder.clone(), &prices, persona, selfs)?;
        tasks.spawn(run_mind(runner, shutdown.clone()));
    }
    // The claude-cli sessions share one process pool: a sweeper parks the children idle longer
    // than they are worth. It runs beside the Minds and stops with them.
    let sweeper = factory.process_pool().cloned().map(|pool| {
        let mut shutdown = shutdown.clone();
        let every = pool.config().policy.min_idle.clamp(
            Duration::from_millis(500),
            Duration::from_secs(POOL_SWEEP_EVERY_S),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = shutdown.changed() => {}
                }
                if *shutdown.borrow() {
                    break;
                }
                for event in pool.sweep(pool.now()).await {
                    tracing::info!(?event, "claude-cli pool");
                }
            }
        })
    });
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "a Mind stopped");
                first_error.get_or_insert(e);
            }
            Err(e) => {
                tracing::error!(error = %e, "a Mind's task panicked");
            }
        }
    }
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    first_error.map_or(Ok(()), Err)
}

/// How often, at most, the claude-cli process pool is swept for idle children (more often when
/// the pool's `park_min_idle_s` is shorter).
const POOL_SWEEP_EVERY_S: u64 = 15;
