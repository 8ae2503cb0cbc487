//! The HTTP API's wire types: every request body, query and response of `/v1`.
//!
//! Inputs are strict (`deny_unknown_fields`): a misspelt field is a 400, not a silently ignored
//! option. Outputs reuse the records the store keeps ([`OutboxMessage`], [`Segment`], [`Lease`],
//! [`Brief`], defined in [`muninn_core::records`] and re-exported here) and the ledger's
//! [`LedgerRow`]; everything else is defined here. A Mind's configuration is the host's
//! (`muninn.schema.json`), passed through as JSON ([`MindStatus`]). Money is integer
//! micro-dollars, times are Unix ms.
//!
//! Every error is `{"error": {"type": …, "message": …}}` ([`ErrorResponse`]).

pub use muninn_core::ledger::LedgerRow;
pub use muninn_core::records::{
    Brief, BriefOrigin, BriefStatus, FencingToken, Lease, OutboxMessage, Role, Segment,
};
use serde::{Deserialize, Serialize};

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorResponse {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, machine- and human-readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// A stable snake_case class: `unauthorized` (401), `not_found` (404: no such route or
    /// row), `mind_not_found` (404), `invalid_request` (400: malformed body or query),
    /// `unprocessable` (422: well-formed but refused), `conflict` (409), `unavailable` (503:
    /// retry later), `internal` (500).
    #[serde(rename = "type")]
    pub kind: String,
    /// A sentence for people. Never contains a credential.
    pub message: String,
}

/// `POST /v1/minds/{mind}/deliveries`: a message arriving for a Mind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostDeliveryRequest {
    /// The room it arrived in: `#alias`, `!room-id`, or `@user` for a DM.
    pub room: String,
    /// Who sent it.
    pub sender: String,
    /// Whether it arrived in a DM room.
    #[serde(default)]
    pub is_direct: bool,
    /// Whether it mentions the Mind (default `false`). Stored with the delivery.
    #[serde(default)]
    pub to_you: bool,
    /// The message text.
    pub text: String,
    /// The source's id for it (a Matrix event id, a client-chosen request id). Intake is
    /// idempotent by it: posting the same id again returns the first seq with `created: false`.
    pub source_id: String,
    /// Room history before the message, oldest first (default empty). Stored with the
    /// delivery; the Mind is shown each line once per segment, recognised by its `id`, however
    /// many deliveries carry it — so send the room event id whenever there is one.
    #[serde(default)]
    pub context: Vec<ContextLine>,
}

/// One line of room history sent with a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextLine {
    /// The room event id, if known. A line without one cannot be recognised when a later
    /// delivery carries it again.
    #[serde(default)]
    pub id: Option<String>,
    /// Who said it.
    pub sender: String,
    /// What was said.
    pub text: String,
}

/// The answer to a delivery: `201 Created` when new, `200 OK` when the source id was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostDeliveryResponse {
    /// The delivery's mailbox seq (the first one's, for a repeated source id).
    pub seq: i64,
    /// Whether this call added it.
    pub created: bool,
}

/// Query of `GET /v1/minds/{mind}/outbox` and `…/outbox/stream`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxQuery {
    /// Only messages with `seq > after` (default 0: all unacknowledged). For the stream, the
    /// `Last-Event-ID` header takes precedence.
    #[serde(default)]
    pub after: Option<i64>,
    /// When nothing matches, wait up to this many seconds for a message (long poll; at most
    /// 60; default 0: answer at once). Ignored by the stream, which waits forever.
    #[serde(default)]
    pub wait_s: Option<u64>,
    /// At most this many messages (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<i64>,
}

/// The answer to `GET /v1/minds/{mind}/outbox`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxResponse {
    /// Unacknowledged messages with `seq > after`, in recording order.
    pub messages: Vec<OutboxMessage>,
    /// The `after` to pass next time: the last message's seq, or the `after` given.
    pub next_after: i64,
}

/// `POST /v1/minds/{mind}/briefs`: an operator brief for the Mind's Self.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostBriefRequest {
    /// What to do.
    pub text: String,
}

/// The answer to `GET /v1/minds`. `C` is as in [`MindStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MindsResponse<C = serde_json::Value> {
    /// Every Mind that is configured or stored, by id.
    pub minds: Vec<MindStatus<C>>,
    /// Sweeps of the processes this host's Claude Code CLI children left behind that could not
    /// look for them (no `/proc`, no pidfds) since the host started: any such process may
    /// still be running (the host's log names each failure's cause). 0 on other backends.
    #[serde(default)]
    pub claude_cli_sweeps_failed: u64,
}

/// A Mind as an operator sees it: `GET /v1/minds/{mind}`, and each entry of `GET /v1/minds`.
///
/// `C` is the type the Mind's configuration is read as. The host serves its own typed
/// `[[mind]]` entry (`muninn_host::config::MindConfig`); a client reads it as JSON (the default),
/// which keeps it working against a host whose configuration grew a field, and keeps this crate
/// free of the server's configuration code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MindStatus<C = serde_json::Value> {
    /// The Mind's id.
    pub id: String,
    /// Its display name.
    pub display_name: String,
    /// Whether the store has the Mind (the runtime registers configured Minds at start).
    pub registered: bool,
    /// Its configuration (the `[[mind]]` entry of the host's `muninn.toml`, as its
    /// `muninn.schema.json` describes it), if this host's configuration has it.
    pub config: Option<C>,
    /// The operator settings (defaults if unregistered).
    pub settings: Settings,
    /// The lease, if one is held (possibly expired: see `lease_live`).
    pub lease: Option<Lease>,
    /// Whether the lease is held and unexpired now.
    pub lease_live: bool,
    /// Each role's newest segment.
    pub segments: CurrentSegments,
    /// Spend in the current window.
    pub spend: SpendSummary,
    /// The mailbox ack position: deliveries up to this seq have been answered.
    pub ack_position: i64,
    /// Deliveries past the ack position, waiting for a turn.
    #[serde(default)]
    pub pending_deliveries: i64,
    /// When the oldest pending delivery arrived, Unix ms.
    #[serde(default)]
    pub oldest_pending_at_ms: Option<i64>,
    /// What this host's runner for the Mind is doing (`None`: this host does not run it, or
    /// it has not stepped yet).
    #[serde(default)]
    pub activity: Option<Activity>,
    /// Outbox messages a transport gave up on for good (the Matrix connector: a room the
    /// account may not post in, a message too large), the newest first, at most
    /// [`FAILED_SENDS_SHOWN`]; each with when and why.
    #[serde(default)]
    pub failed_sends: Vec<OutboxMessage>,
    /// Deliveries this host's runner set aside as undeliverable since the host started: each
    /// too large for any request to the model, acknowledged unanswered, its room told once
    /// and the sizes recorded in the transcript.
    #[serde(default)]
    pub undeliverable: u64,
    /// The transport that brings its mail, as this host last heard (`None`: none runs here).
    #[serde(default)]
    pub transport: Option<TransportStatus>,
}

/// What a host's runner for a Mind is doing, as of its last step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Activity {
    /// A turn is in flight.
    Running {
        /// `persona` or `self`.
        role: Role,
        /// When it started, Unix ms.
        since_ms: i64,
    },
    /// Nothing to do.
    Idle {
        /// The next decision time (a keep-warm ping, a flush), Unix ms, if any.
        until_ms: Option<i64>,
    },
    /// The operator brake is on: no turn runs.
    Braked,
    /// The spend cap would be crossed by the next request: it waits for room in the window.
    Capped,
    /// Another host holds the lease.
    NotLeader,
    /// The last step failed; it is retried with a back-off.
    Retrying {
        /// The error, as logged.
        error: String,
        /// When the failures began, Unix ms.
        since_ms: i64,
        /// Failed steps in a row.
        attempts: u32,
        /// When the next attempt is due, Unix ms (the runner's backoff, never before the
        /// provider's `retry-after`).
        next_attempt_ms: i64,
    },
}

/// The transport that brings a Mind its mail and carries its replies (the Matrix connector's
/// account), as it last reported to this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportStatus {
    /// Which transport: `matrix`.
    pub transport: String,
    /// Its state.
    #[serde(flatten)]
    pub state: TransportState,
    /// Since when it is in this state (for a failure: since the first of the run), Unix ms.
    pub since_ms: i64,
    /// The gaps it cut at its limit since this host started (absent: none). Not a state: the
    /// intake goes on, but what was in them was never delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_cut: Option<TransportGapsCut>,
    /// The rooms it was configured for and is not in yet (absent: none), tried again with a
    /// backoff while it runs. Not a state: the other rooms are read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rooms_not_joined: Vec<TransportRoomNotJoined>,
}

/// A room a transport was configured for and could not join yet (the Matrix connector tries
/// again on a backoff of up to five minutes while the account runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportRoomNotJoined {
    /// The room as configured (`#alias`, `!id:server`).
    pub room: String,
    /// Why the last try failed.
    pub error: String,
    /// When the first try failed, Unix ms.
    pub since_ms: i64,
}

/// The gaps a transport cut since this host started (the Matrix connector pages a `limited`
/// timeline's gap to at most `[matrix] max_gap_events` events and skips the rest). Kept in the
/// host's memory: a restart starts it again (the host's log keeps every cut, at error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportGapsCut {
    /// Gaps cut since this host started.
    pub count: u64,
    /// The room of the last one.
    pub last_room: String,
    /// When the last one was cut (its sync committed), Unix ms.
    pub last_at_ms: i64,
    /// Events read from the last gap before the cut (the limit). How many more it held is not
    /// known: Matrix's `/messages` pages carry no count.
    pub last_events_read: u64,
}

/// What a transport is doing for a Mind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TransportState {
    /// Logging in, joining its rooms.
    Opening,
    /// Reading and sending.
    Open,
    /// The Mind has too many unanswered deliveries: intake waits (its position stays) until it
    /// catches up. Not a failure.
    Held {
        /// Deliveries waiting when it began to hold.
        pending: u64,
    },
    /// It cannot do its work and retries with a backoff.
    Failing {
        /// Where: `login` (opening the account), `sync` (reading), `store` (its position).
        stage: String,
        /// The last error, as logged (never a credential).
        error: String,
        /// Failures in a row in this stage.
        failures: u64,
    },
}

/// The most failed sends [`MindStatus::failed_sends`] lists.
pub const FAILED_SENDS_SHOWN: i64 = 10;

/// Each role's newest segment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurrentSegments {
    /// The Persona's.
    pub persona: Option<Segment>,
    /// The Self's.
    #[serde(rename = "self")]
    pub self_role: Option<Segment>,
}

/// Spend over the window ending now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendSummary {
    /// The window's length, ms (the setting, else the configuration's `spend_window_s`).
    pub window_ms: i64,
    /// The window's start, Unix ms (inclusive).
    pub from_ms: i64,
    /// Now, Unix ms.
    pub to_ms: i64,
    /// Cost of the ledger rows from `from_ms` on, micro-dollars: the spend the cap counts,
    /// rows stamped after `to_ms` (by a wall clock since stepped back) included.
    pub spent_micro_usd: i64,
    /// The cap in force (the setting, else the configuration's), micro-dollars.
    pub cap_micro_usd: Option<i64>,
}

/// Query of `GET /v1/minds/{mind}/segments`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentsQuery {
    /// At most this many segments of each role, the newest (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<i64>,
    /// Only segments numbered below this (the oldest number of the page before): the page
    /// further back. All of them when absent. Each role numbers its own segments, so a number
    /// of one role says nothing of the other's: page back with [`SegmentsQuery::role`] set.
    #[serde(default)]
    pub before: Option<i64>,
    /// Only this role's segments (`persona` or `self`; the other list is empty): one role's
    /// pages, each `before` the oldest of its page before. Both roles when absent.
    #[serde(default)]
    pub role: Option<Role>,
}

/// The answer to `GET /v1/minds/{mind}/segments`: each role's newest segments (a page:
/// [`SegmentsQuery::limit`]), oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentsResponse {
    /// The Persona's segments.
    pub persona: Vec<Segment>,
    /// The Self's segments.
    #[serde(rename = "self")]
    pub self_role: Vec<Segment>,
}

/// Query of `GET /v1/minds/{mind}/transcript`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptQuery {
    /// `persona` (default) or `self`.
    #[serde(default)]
    pub role: Option<Role>,
    /// Only items with `seq > after` (default 0).
    #[serde(default)]
    pub after: Option<i64>,
    /// At most this many items (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<i64>,
    /// Instead of `after`: the last `last` items.
    #[serde(default)]
    pub last: Option<i64>,
    /// When nothing matches `after`, wait up to this many seconds (long poll; at most 60).
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// One transcript item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptItemBody {
    /// `persona` or `self`.
    pub role: Role,
    /// 1-based, gap-free per role.
    pub seq: i64,
    /// The segment it belongs to.
    pub segment: i64,
    /// What it is: `delivery`, `reply`, `brief`, `result`, `notice`, `memory_flush`,
    /// `outside_event`, or a kind a newer muninn wrote.
    pub kind: String,
    /// Its content, as the runtime recorded it.
    pub body: serde_json::Value,
    /// When it was appended, Unix ms.
    pub created_at_ms: i64,
}

/// The answer to `GET /v1/minds/{mind}/transcript`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptResponse {
    /// Items, ascending by seq.
    pub items: Vec<TranscriptItemBody>,
    /// The `after` to pass next time: the last item's seq, or the `after` given.
    pub next_after: i64,
}

/// How `GET /v1/minds/{mind}/ledger` answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerFormat {
    /// One JSON document, [`LedgerResponse`].
    #[default]
    Json,
    /// JSON Lines (`application/x-ndjson`): one [`LedgerRow`] per line, in append order —
    /// the format `muninn import` and `muninn replay` read.
    Jsonl,
}

/// Query of `GET /v1/minds/{mind}/ledger`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerParams {
    /// Rows with `at_ms >= from_ms`.
    #[serde(default)]
    pub from_ms: Option<i64>,
    /// Rows with `at_ms < to_ms`.
    #[serde(default)]
    pub to_ms: Option<i64>,
    /// Rows with `id > after_id` (paging).
    #[serde(default)]
    pub after_id: Option<i64>,
    /// At most this many rows (default, and at most, [`LEDGER_PAGE_LIMIT`]: a longer ledger is
    /// read in pages, each `after_id` the last id of the one before).
    #[serde(default)]
    pub limit: Option<i64>,
    /// `json` (default) or `jsonl`.
    #[serde(default)]
    pub format: Option<LedgerFormat>,
}

/// The most rows one `GET /v1/minds/{mind}/ledger` answers: a whole ledger is read in pages
/// (the client's [`crate::client::ApiClient::ledger`] pages until a page comes short).
pub const LEDGER_PAGE_LIMIT: i64 = 5_000;

/// The longest a long poll (`wait_s` of the outbox and the transcript) waits, seconds: a larger
/// `wait_s` is clamped to it.
pub const MAX_WAIT_S: u64 = 60;

/// The answer to `GET /v1/minds/{mind}/ledger?format=json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerResponse {
    /// Rows in append order.
    pub rows: Vec<LedgerEntryBody>,
}

/// A ledger row with its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerEntryBody {
    /// Store-assigned, increasing in append order (pass as `after_id` to page).
    pub id: i64,
    /// The row.
    pub row: LedgerRow,
}

/// A Mind's operator settings, as `GET /v1/minds/{mind}/settings` answers them (`PUT` takes a
/// [`PutSettingsRequest`]: the caps, never the brake).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The most the Mind may spend per window, micro-dollars (positive); `null`: the
    /// configuration's cap applies.
    #[serde(default)]
    pub spend_cap_micro_usd: Option<i64>,
    /// The spend window, ms (positive); `null`: the configuration's window applies.
    #[serde(default)]
    pub spend_window_ms: Option<i64>,
    /// The brake: when on, the host runs no turn for the Mind.
    #[serde(default)]
    pub brake: bool,
    /// The most turns per start (positive); `null`: no limit.
    #[serde(default)]
    pub turn_limit: Option<i64>,
}

impl Settings {
    /// The caps of these settings, as a `PUT` body that leaves the brake as it is.
    pub fn caps(&self) -> PutSettingsRequest {
        PutSettingsRequest {
            spend_cap_micro_usd: self.spend_cap_micro_usd,
            spend_window_ms: self.spend_window_ms,
            turn_limit: self.turn_limit,
            brake: None,
            expected: None,
        }
    }

    /// The caps of these settings, as a `PUT` body that changes them only if they are still
    /// these: edit its fields and send it, and a change another client made since this read is
    /// refused (409 `conflict`) rather than overwritten.
    pub fn caps_if_unchanged(&self) -> PutSettingsRequest {
        PutSettingsRequest {
            expected: Some(ExpectedCaps {
                spend_cap_micro_usd: self.spend_cap_micro_usd,
                spend_window_ms: self.spend_window_ms,
                turn_limit: self.turn_limit,
            }),
            ..self.caps()
        }
    }
}

/// The caps a [`PutSettingsRequest`] was edited from: [`PutSettingsRequest::expected`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCaps {
    /// The spend cap read, micro-dollars; `null`: none was set.
    #[serde(default)]
    pub spend_cap_micro_usd: Option<i64>,
    /// The spend window read, ms; `null`: none was set.
    #[serde(default)]
    pub spend_window_ms: Option<i64>,
    /// The turn limit read; `null`: none was set.
    #[serde(default)]
    pub turn_limit: Option<i64>,
}

/// The body of `PUT /v1/minds/{mind}/settings`: the caps, replaced whole. The brake is not
/// among them: it changes only through `POST`/`DELETE /v1/brake` (every Mind) and
/// `/v1/minds/{mind}/brake` (one), so that saving caps read before `brake on` cannot release it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutSettingsRequest {
    /// The most the Mind may spend per window, micro-dollars (positive); `null` or absent: the
    /// configuration's cap applies.
    #[serde(default)]
    pub spend_cap_micro_usd: Option<i64>,
    /// The spend window, ms (positive); `null` or absent: the configuration's window applies.
    #[serde(default)]
    pub spend_window_ms: Option<i64>,
    /// The most turns per start (positive); `null` or absent: no limit.
    #[serde(default)]
    pub turn_limit: Option<i64>,
    /// Leave it out. Taken only so that a client which sends back the [`Settings`] it read
    /// keeps working: it must equal the brake now, which this request never changes; another
    /// value (read before the brake changed, or an attempt to change it here) is refused with
    /// 409 `conflict` and nothing is changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brake: Option<bool>,
    /// The caps as the client read them before editing this body. Given, the write happens
    /// only if the caps are still these; otherwise 409 `conflict` and nothing is changed, so
    /// that two operators editing different caps (the dashboard's form, `muninn caps`) cannot
    /// silently undo each other's change: read again and retry. Absent: the caps are replaced
    /// whatever they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<ExpectedCaps>,
}

/// The answer to `POST /v1/brake` and `DELETE /v1/brake` (and to the one Mind's
/// `POST`/`DELETE /v1/minds/{mind}/brake`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrakeResponse {
    /// The brake now set on every listed Mind.
    pub brake: bool,
    /// The Minds it was set on (every registered Mind, or the one named), by id.
    pub minds: Vec<String>,
}
