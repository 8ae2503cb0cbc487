//! The Matrix Client-Server API as this connector speaks it (spec v1.x, `/_matrix/client/v3`):
//! only the requests it makes and the fields it reads.
//!
//! Decoding is lenient where the homeserver is someone else's stream: every field the connector
//! does not need is ignored, every collection defaults to empty, and an event's `content` stays
//! JSON until a reader asks for what it needs ([`MessageContent::of`]), so a new event type or
//! field is never an error. Encoding is exact: the request bodies below are what goes on the
//! wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `POST /login` with a password, for a fixed device. Its `Debug` leaves the password out.
#[derive(Clone, Serialize)]
pub struct LoginRequest<'a> {
    /// Always `m.login.password`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The user.
    pub identifier: UserIdentifier<'a>,
    /// The password (never printed: this type has no `Display`, and its `Debug` redacts it).
    pub password: &'a str,
    /// The device to log in as: fixed per account, because transaction ids are scoped per
    /// device (the same txn id from another device is a new event).
    pub device_id: &'a str,
    /// The device's display name, on first login.
    pub initial_device_display_name: &'a str,
}

impl std::fmt::Debug for LoginRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginRequest")
            .field("kind", &self.kind)
            .field("identifier", &self.identifier)
            .field("password", &"<redacted>")
            .field("device_id", &self.device_id)
            .field(
                "initial_device_display_name",
                &self.initial_device_display_name,
            )
            .finish()
    }
}

/// `identifier` of a password login.
#[derive(Debug, Clone, Serialize)]
pub struct UserIdentifier<'a> {
    /// Always `m.id.user`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The user id (or localpart).
    pub user: &'a str,
}

/// The answer to a login.
#[derive(Clone, Deserialize)]
pub struct LoginResponse {
    /// The logged-in user.
    pub user_id: String,
    /// The access token (a secret: no `Debug`).
    pub access_token: String,
    /// The device.
    pub device_id: String,
}

impl std::fmt::Debug for LoginResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginResponse")
            .field("user_id", &self.user_id)
            .field("device_id", &self.device_id)
            .finish_non_exhaustive()
    }
}

/// `GET /account/whoami`.
#[derive(Debug, Clone, Deserialize)]
pub struct WhoamiResponse {
    /// The token's user.
    pub user_id: String,
    /// The token's device, if it has one.
    #[serde(default)]
    pub device_id: Option<String>,
}

/// `GET /sync`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SyncResponse {
    /// The token for the next `/sync` (`since`).
    pub next_batch: String,
    /// Rooms by membership.
    #[serde(default)]
    pub rooms: Rooms,
    /// The user's global account data (`m.direct`).
    #[serde(default)]
    pub account_data: EventList<AccountDataEvent>,
}

/// `rooms` of a sync.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Rooms {
    /// Rooms the user is in, by room id.
    #[serde(default)]
    pub join: BTreeMap<String, JoinedRoom>,
    /// Rooms the user is invited to, by room id.
    #[serde(default)]
    pub invite: BTreeMap<String, InvitedRoom>,
    /// Rooms the user left (or was kicked or banned from) since `since`, by room id: their
    /// timelines end at the leave and hold what was said before it.
    #[serde(default)]
    pub leave: BTreeMap<String, JoinedRoom>,
}

/// A joined room in a sync.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JoinedRoom {
    /// The new events.
    #[serde(default)]
    pub timeline: Timeline,
    /// Member counts (sent when they change, with lazy-loaded members).
    #[serde(default)]
    pub summary: RoomSummary,
    /// State changed before the timeline's first event (what the filter asks for): a
    /// `limited` timeline's gap, whose tombstone the timeline no longer holds.
    #[serde(default)]
    pub state: EventList<RoomEvent>,
}

/// A room's timeline in a sync.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Timeline {
    /// Events, oldest first.
    #[serde(default)]
    pub events: Vec<RoomEvent>,
    /// More events happened since `since` than were returned: page back from `prev_batch`.
    #[serde(default)]
    pub limited: bool,
    /// The token before the first event, for `/messages` backwards.
    #[serde(default)]
    pub prev_batch: Option<String>,
}

/// `summary` of a joined room.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RoomSummary {
    /// Joined members.
    #[serde(default, rename = "m.joined_member_count")]
    pub joined_member_count: Option<u64>,
    /// Invited members.
    #[serde(default, rename = "m.invited_member_count")]
    pub invited_member_count: Option<u64>,
}

/// An invited room in a sync.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InvitedRoom {
    /// The stripped state the inviter shared (the invite's member event among it).
    #[serde(default)]
    pub invite_state: EventList<StrippedEvent>,
}

/// `{"events": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub struct EventList<T> {
    /// The events.
    #[serde(default = "Vec::new")]
    pub events: Vec<T>,
}

impl<T> Default for EventList<T> {
    fn default() -> Self {
        EventList { events: Vec::new() }
    }
}

/// A room event (timeline or `/messages`).
#[derive(Debug, Clone, Deserialize)]
pub struct RoomEvent {
    /// `$…`.
    pub event_id: String,
    /// `m.room.message`, `m.room.member`, ….
    #[serde(rename = "type")]
    pub kind: String,
    /// `@user:server`.
    pub sender: String,
    /// The sender's homeserver's time, Unix ms.
    #[serde(default)]
    pub origin_server_ts: i64,
    /// The content, read on demand.
    #[serde(default)]
    pub content: Value,
    /// For state events (membership: the member's user id).
    #[serde(default)]
    pub state_key: Option<String>,
    /// What the homeserver adds: for a state event, `prev_content` (the state it replaced).
    #[serde(default)]
    pub unsigned: Value,
}

/// A stripped state event (invite state).
#[derive(Debug, Clone, Deserialize)]
pub struct StrippedEvent {
    /// The event type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The state key.
    #[serde(default)]
    pub state_key: Option<String>,
    /// Who sent it.
    pub sender: String,
    /// Its content.
    #[serde(default)]
    pub content: Value,
}

/// An account-data event.
#[derive(Debug, Clone, Deserialize)]
pub struct AccountDataEvent {
    /// `m.direct`, ….
    #[serde(rename = "type")]
    pub kind: String,
    /// Its content.
    #[serde(default)]
    pub content: Value,
}

/// `GET /rooms/{room}/messages`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MessagesResponse {
    /// Events in the direction asked (backwards: newest first).
    #[serde(default)]
    pub chunk: Vec<RoomEvent>,
    /// The token to continue from; absent when there is nothing further.
    #[serde(default)]
    pub end: Option<String>,
}

/// `PUT /rooms/{room}/send/m.room.message/{txn}`: a plain text message.
#[derive(Debug, Clone, Serialize)]
pub struct TextMessage<'a> {
    /// Always `m.text`.
    pub msgtype: &'static str,
    /// The text.
    pub body: &'a str,
}

/// The answer to a send.
#[derive(Debug, Clone, Deserialize)]
pub struct SendResponse {
    /// The event's id (the same for a repeated transaction id).
    pub event_id: String,
}

/// The answer to a join or an alias lookup.
#[derive(Debug, Clone, Deserialize)]
pub struct RoomIdResponse {
    /// The room id.
    pub room_id: String,
}

/// `GET /joined_rooms`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JoinedRoomsResponse {
    /// Room ids.
    #[serde(default)]
    pub joined_rooms: Vec<String>,
}

/// `GET /rooms/{room}/joined_members`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JoinedMembersResponse {
    /// Members by user id.
    #[serde(default)]
    pub joined: BTreeMap<String, Value>,
}

/// A Matrix error body: `{"errcode": "M_…", "error": "…", "retry_after_ms": …}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorBody {
    /// `M_FORBIDDEN`, `M_LIMIT_EXCEEDED`, ….
    #[serde(default)]
    pub errcode: String,
    /// A sentence.
    #[serde(default)]
    pub error: String,
    /// With `M_LIMIT_EXCEEDED`: how long to wait.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// What a message event says, read from its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageContent {
    /// The text as a person would read it: an emote as `* <text>`, an edit as
    /// `(edited) <new text>`, a file or image as `[m.image] <name>`.
    pub text: String,
    /// Users the message mentions (`m.mentions.user_ids`).
    pub mentions: Vec<String>,
}

impl MessageContent {
    /// The message of an `m.room.message` event; `None` for another type, a redacted event
    /// (no body) or a body that is not text.
    pub fn of(event: &RoomEvent) -> Option<MessageContent> {
        if event.kind != "m.room.message" {
            return None;
        }
        let content = &event.content;
        let replaced = content
            .pointer("/m.relates_to/rel_type")
            .and_then(Value::as_str)
            == Some("m.replace");
        let shown = match content.get("m.new_content") {
            Some(new) if replaced => new,
            _ => content,
        };
        let body = shown.get("body").and_then(Value::as_str)?;
        let msgtype = shown.get("msgtype").and_then(Value::as_str).unwrap_or("");
        let mut text = match msgtype {
            "m.text" | "m.notice" | "" => body.to_owned(),
            "m.emote" => format!("* {body}"),
            other => format!("[{other}] {body}"),
        };
        if replaced {
            text = format!("(edited) {text}");
        }
        let mentions = content
            .pointer("/m.mentions/user_ids")
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Some(MessageContent { text, mentions })
    }
}

/// Whether `event` is `user` joining the room: a join whose previous membership was not one
/// (a profile change is a join that follows a join).
pub fn is_joining(event: &RoomEvent, user: &str) -> bool {
    membership_of(event, user) == Some("join")
        && event
            .unsigned
            .pointer("/prev_content/membership")
            .and_then(Value::as_str)
            != Some("join")
}

/// A membership event's `membership`, when `event` is one for `user`.
pub fn membership_of<'a>(event: &'a RoomEvent, user: &str) -> Option<&'a str> {
    if event.kind != "m.room.member" || event.state_key.as_deref() != Some(user) {
        return None;
    }
    event.content.get("membership").and_then(Value::as_str)
}
