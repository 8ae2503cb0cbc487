//! The rows the store holds, as the host sees them.
//!
//! `New*` types are what a caller hands in; the plain types are what the store hands back, with
//! the fields the store assigns (seq, id, status). Times are Unix milliseconds passed by the
//! caller (the store never reads a clock); tokens and money are integers (money in
//! micro-dollars, [`MicroUsd`]). JSON bodies are kept as the exact text `serde_json` wrote, never
//! as a database JSON type that would reorder keys or renormalise numbers.
//!
//! The records the HTTP API also shows as they are — [`Role`], [`Segment`], [`Lease`] and its
//! [`FencingToken`], [`OutboxMessage`], [`Brief`] — are defined in [`muninn_core::records`], below
//! both the store and `muninn-api`, and re-exported here.

use muninn_core::money::MicroUsd;
use serde::{Deserialize, Serialize};

pub use muninn_core::records::{
    Brief, BriefOrigin, BriefStatus, FencingToken, Lease, OutboxMessage, Role, Segment, UnknownName,
};

/// The longest memory note, in bytes of UTF-8 (seed A6: `text <= 1000 B`).
pub const MEMORY_NOTE_MAX_BYTES: usize = 1000;

/// A Mind: the unit the host runs, leases and accounts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mind {
    /// Stable identifier (also the key of every per-Mind row).
    pub id: String,
    /// Name shown to operators.
    pub display_name: String,
    /// The Mind's configuration, opaque to the store.
    pub config: serde_json::Value,
    /// When the Mind was created, Unix ms.
    pub created_at_ms: i64,
}

/// How a segment starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSegment {
    /// Persona or Self.
    pub role: Role,
    /// When it starts, Unix ms. The previous open segment of the role ends at this time.
    pub started_at_ms: i64,
    /// Tokens it is rehydrated with.
    pub rehydration_tokens: i64,
    /// Why it starts.
    pub reason: String,
    /// The provider session id, if already known.
    pub session_id: Option<String>,
    /// The memory layer it is rehydrated with (see [`Segment::memory`]).
    pub memory: Option<String>,
    /// A digest of its session spec (see [`Segment::spec_digest`]).
    pub spec_digest: Option<String>,
}

/// What a transcript item is. Stored as its snake_case name; names this build does not know
/// (written by a newer muninn) read back as [`TranscriptKind::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TranscriptKind {
    /// Deliveries shown to the Persona.
    Delivery,
    /// What the Mind answered.
    Reply,
    /// A brief handed to the Self.
    Brief,
    /// A Self run's result.
    Result,
    /// A lower layer changed and was appended as a notice (design §3.2).
    Notice,
    /// The Mind's memory written before a refresh.
    MemoryFlush,
    /// Something that happened outside the conversation (operator action, restart).
    OutsideEvent,
    /// A reply that called tools (the host runs them): its text and its calls.
    ToolUse,
    /// The result of one tool call the host ran, as sent back to the model.
    ToolResult,
    /// A kind this build does not know.
    Other(String),
}

impl TranscriptKind {
    /// The stored name.
    pub fn as_str(&self) -> &str {
        match self {
            TranscriptKind::Delivery => "delivery",
            TranscriptKind::Reply => "reply",
            TranscriptKind::Brief => "brief",
            TranscriptKind::Result => "result",
            TranscriptKind::Notice => "notice",
            TranscriptKind::MemoryFlush => "memory_flush",
            TranscriptKind::OutsideEvent => "outside_event",
            TranscriptKind::ToolUse => "tool_use",
            TranscriptKind::ToolResult => "tool_result",
            TranscriptKind::Other(name) => name,
        }
    }

    /// Reads a stored name.
    pub fn parse(text: &str) -> TranscriptKind {
        match text {
            "delivery" => TranscriptKind::Delivery,
            "reply" => TranscriptKind::Reply,
            "brief" => TranscriptKind::Brief,
            "result" => TranscriptKind::Result,
            "notice" => TranscriptKind::Notice,
            "memory_flush" => TranscriptKind::MemoryFlush,
            "outside_event" => TranscriptKind::OutsideEvent,
            "tool_use" => TranscriptKind::ToolUse,
            "tool_result" => TranscriptKind::ToolResult,
            other => TranscriptKind::Other(other.to_owned()),
        }
    }
}

/// A transcript item to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTranscriptItem {
    /// Persona or Self.
    pub role: Role,
    /// The segment it belongs to.
    pub segment: i64,
    /// What it is.
    pub kind: TranscriptKind,
    /// Its content.
    pub body: serde_json::Value,
    /// When it was appended, Unix ms.
    pub created_at_ms: i64,
}

/// What [`Store::append_transcript_once`](crate::Store::append_transcript_once) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The item's seq (the one it got the first time, if its key was seen before).
    pub seq: i64,
    /// `false` when the key was already recorded and nothing was added.
    pub created: bool,
}

/// A transcript item as stored. The transcript is append-only: there is no API to change or
/// remove an item, and both schemas refuse UPDATE and DELETE on the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptItem {
    /// The Mind.
    pub mind: String,
    /// Persona or Self.
    pub role: Role,
    /// Store-assigned, 1-based, gap-free and increasing per (mind, role).
    pub seq: i64,
    /// The segment it belongs to.
    pub segment: i64,
    /// What it is.
    pub kind: TranscriptKind,
    /// Its content.
    pub body: serde_json::Value,
    /// When it was appended, Unix ms.
    pub created_at_ms: i64,
}

/// A message arriving for a Mind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewDelivery {
    /// The room (alias) it arrived in.
    pub room: String,
    /// Who sent it.
    pub sender: String,
    /// Whether it arrived in a DM.
    pub is_direct: bool,
    /// Whether it mentions the Mind (absent in older rows: `false`).
    #[serde(default)]
    pub to_you: bool,
    /// The message text.
    pub text: String,
    /// The source's id for it (Matrix event id, API request id): intake is idempotent by it.
    pub source_id: String,
    /// When it was received, Unix ms.
    pub received_at_ms: i64,
    /// The room history that came with it, oldest first (absent in older rows: empty).
    #[serde(default)]
    pub context: Vec<ContextLine>,
}

/// A line of room history that came with a delivery. The renderer shows each line once per
/// segment (by `id`), however many deliveries carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextLine {
    /// The room event id, if the source gave one (a line without one cannot be recognised
    /// when a later delivery carries it again).
    #[serde(default)]
    pub id: Option<String>,
    /// Who said it.
    pub sender: String,
    /// What was said.
    pub text: String,
}

/// A delivery in a Mind's mailbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The Mind.
    pub mind: String,
    /// Store-assigned, 1-based, gap-free and increasing per Mind.
    pub seq: i64,
    /// The room it arrived in.
    pub room: String,
    /// Who sent it.
    pub sender: String,
    /// Whether it arrived in a DM.
    pub is_direct: bool,
    /// Whether it mentions the Mind (`false` for rows stored before migration 3).
    #[serde(default)]
    pub to_you: bool,
    /// The text.
    pub text: String,
    /// The source's id.
    pub source_id: String,
    /// When it was received, Unix ms.
    pub received_at_ms: i64,
    /// The room history that came with it, oldest first (empty for rows stored before
    /// migration 3).
    #[serde(default)]
    pub context: Vec<ContextLine>,
}

/// The answer to a delivery intake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// The delivery's seq (the existing one if the source id was seen before).
    pub seq: i64,
    /// `false` when the source id was already in the mailbox and nothing was added.
    pub created: bool,
}

/// The mail waiting for a Mind, past its ack position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mailbox {
    /// Deliveries not yet acknowledged.
    pub pending: i64,
    /// When the oldest of them was received, Unix ms (`None` when none waits).
    pub oldest_received_at_ms: Option<i64>,
}

/// The longest cursor value a store keeps, in bytes (a Matrix sync token is about 50).
pub const CURSOR_MAX_BYTES: usize = 4096;

/// What one read of a transport (a Matrix `/sync` response) brings: its deliveries, and the
/// transport's position after them. [`Store::post_batch`](crate::Store::post_batch) commits
/// both in one transaction, so the position never moves past a delivery that is not durable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntakeBatch {
    /// The deliveries, in the order they get seqs; a source id already in the mailbox (or
    /// earlier in the batch) adds nothing.
    pub deliveries: Vec<NewDelivery>,
    /// The position to store with them, if it moves.
    pub cursor: Option<NewCursor>,
}

/// A named position of a transport, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCursor {
    /// Its name, unique per Mind (`matrix:sync`); not empty.
    pub name: String,
    /// The position, opaque to the store; at most [`CURSOR_MAX_BYTES`] bytes.
    pub value: String,
    /// When it was written, Unix ms.
    pub updated_at_ms: i64,
}

/// A named position of a transport, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The Mind.
    pub mind: String,
    /// Its name.
    pub name: String,
    /// The position.
    pub value: String,
    /// When it was last written, Unix ms.
    pub updated_at_ms: i64,
}

/// An outbound message to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOutboxMessage {
    /// Idempotent request id, `<batch>-<index>` (seed A1).
    pub request_id: String,
    /// Where it goes.
    pub room: String,
    /// What it says.
    pub text: String,
    /// When it was recorded, Unix ms.
    pub created_at_ms: i64,
}

/// A memory note to write (seed A6 `remember[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMemoryNote {
    /// The sender ids the note is about.
    pub about: Vec<String>,
    /// How much it matters; larger is more salient.
    pub salience: i64,
    /// The note, at most [`MEMORY_NOTE_MAX_BYTES`] bytes.
    pub text: String,
    /// When it was written, Unix ms.
    pub created_at_ms: i64,
    /// Where it was learned (batch, room, request id).
    pub source: String,
}

/// A memory note as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryNote {
    /// Store-assigned id, increasing in order of writing.
    pub id: i64,
    /// The Mind.
    pub mind: String,
    /// The sender ids it is about, in the order given.
    pub about: Vec<String>,
    /// Salience.
    pub salience: i64,
    /// The note.
    pub text: String,
    /// When it was written, Unix ms.
    pub created_at_ms: i64,
    /// Where it was learned.
    pub source: String,
}

/// A brief to queue for the Self.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewBrief {
    /// What to do.
    pub text: String,
    /// Who asked.
    pub origin: BriefOrigin,
    /// When it was queued, Unix ms.
    pub created_at_ms: i64,
}

/// Operator settings of a Mind. A Mind without a stored row has [`MindSettings::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MindSettings {
    /// The most the Mind may spend in one window, if capped.
    pub spend_cap: Option<MicroUsd>,
    /// The spend window, ms (e.g. a day).
    pub spend_window_ms: Option<i64>,
    /// The brake: when set, the host runs no turn for the Mind.
    pub brake: bool,
    /// The most turns per start, if limited.
    pub turn_limit: Option<i64>,
}

/// A Mind's caps: its [`MindSettings`] but the brake, which an operator sets apart (see
/// [`Store::put_caps`](crate::Store::put_caps)): an edit of one must never carry a stale copy of
/// the other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    /// The most the Mind may spend in one window, if capped.
    pub spend_cap: Option<MicroUsd>,
    /// The spend window, ms (e.g. a day).
    pub spend_window_ms: Option<i64>,
    /// The most turns per start, if limited.
    pub turn_limit: Option<i64>,
}

impl Caps {
    /// The caps of `settings` (all but the brake).
    pub fn of(settings: &MindSettings) -> Caps {
        Caps {
            spend_cap: settings.spend_cap,
            spend_window_ms: settings.spend_window_ms,
            turn_limit: settings.turn_limit,
        }
    }
}

/// What [`Store::put_caps`](crate::Store::put_caps) did, with the settings it saw and left,
/// read in its own transaction (so they are the ones the write replaced, whatever else was
/// written meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapsWrite {
    /// The caps were written.
    Written {
        /// The settings just before the write.
        before: MindSettings,
        /// The settings it left.
        after: MindSettings,
    },
    /// Nothing was written: the caps were no longer the ones expected.
    Changed {
        /// The settings as they are.
        current: MindSettings,
    },
}

/// Everything one turn writes, committed together by [`Store::record_turn`](crate::Store::record_turn).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnRecord {
    /// The turn's idempotency key (the batch label): a turn whose key was recorded before is
    /// refused with [`StoreError::TurnAlreadyRecorded`](crate::StoreError::TurnAlreadyRecorded). `None` records without a key.
    pub turn_key: Option<String>,
    /// Transcript items, appended in order.
    pub transcript: Vec<NewTranscriptItem>,
    /// Outbound messages; an existing request id keeps its row unchanged.
    pub outbox: Vec<NewOutboxMessage>,
    /// Ledger rows of the turn's requests; each row's `mind` must be the turn's Mind.
    pub ledger: Vec<muninn_core::ledger::LedgerRow>,
    /// Memory notes the turn wrote.
    pub memory: Vec<NewMemoryNote>,
    /// Briefs the turn queued for the Self (`start_self_run`).
    pub briefs: Vec<NewBrief>,
    /// Acknowledge the mailbox through this seq (the batch's max seq).
    pub ack_through: Option<i64>,
}

/// What [`Store::record_turn`](crate::Store::record_turn) assigned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnReceipt {
    /// The transcript items' seqs, in order.
    pub transcript_seqs: Vec<i64>,
    /// The outbox rows, in order (existing rows unchanged).
    pub outbox: Vec<OutboxMessage>,
    /// The ledger rows' ids, in order.
    pub ledger_ids: Vec<i64>,
    /// The memory notes' ids, in order.
    pub memory_ids: Vec<i64>,
    /// The briefs' seqs, in order.
    pub brief_seqs: Vec<i64>,
    /// The mailbox ack position after the turn.
    pub ack_position: i64,
}

/// A stored ledger row with its id (the export order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Store-assigned, increasing in order of appending (may have gaps on PostgreSQL).
    pub id: i64,
    /// The row.
    pub row: muninn_core::ledger::LedgerRow,
}

/// Which ledger rows to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerQuery {
    /// Only this Mind's rows; all Minds if `None`.
    pub mind: Option<String>,
    /// Rows with `at_ms >= from_ms`.
    pub from_ms: Option<i64>,
    /// Rows with `at_ms < to_ms`.
    pub to_ms: Option<i64>,
    /// Rows with `id > after_id` (paging through an export).
    pub after_id: Option<i64>,
    /// At most this many rows.
    pub limit: Option<i64>,
}
