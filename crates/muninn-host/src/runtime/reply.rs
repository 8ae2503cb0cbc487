//! The Persona's reply contract, defined once: the reply types below *are* the contract. The
//! reply schema is derived from them (schemars), each limit is one constant used by both the
//! schema attributes and any check that must stay in code, and [`validate_reply`] checks only
//! what the schema cannot say.
//!
//! The derived schema is the one the model is given (it is part of the cached prefix), so it is
//! deterministic for a Mind: subschemas are inlined (no `$defs`), annotations are dropped (the
//! doc comments below are for Rust readers, not the model), and it stays within the subset
//! `muninn_backend::schema` validates and generates examples from. A checked-in snapshot
//! (`tests/snapshots/demo_reply_schema.json`) pins its bytes.
//!
//! What stays in code: the room enum and the campaign enum come from the Mind's configuration
//! and are inserted into the derived schema; a `@dm` reply is resolved to the batch's DM room
//! (and refused in a batch with none); a note's byte limit (the schema counts characters);
//! `about` is limited to the batch's senders when the turn records the notes.

use crate::config::MindConfig;
use muninn_store::Delivery;
use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use serde_json::{Value, json};

/// A `remember[]` note's byte limit: the store's own limit on a memory note. The schema bounds
/// the note's characters by it (a necessary condition); [`validate_reply`] checks the bytes.
pub const MEMORY_NOTE_BYTES: usize = muninn_store::MEMORY_NOTE_MAX_BYTES;

/// How many `remember[]` notes a reply may carry.
pub const MEMORY_NOTES_PER_REPLY: usize = 8;

/// A `start_self_run` brief's character limit.
pub const BRIEF_CHARS: usize = 1_000;

/// The reply-schema room meaning "the DM room of this batch".
pub const DM_ROOM: &str = "@dm";

/// The lowest salience a `remember[]` note may have.
pub const SALIENCE_MIN: i64 = 0;

/// The highest salience a `remember[]` note may have.
pub const SALIENCE_MAX: i64 = 10;

/// A Persona's reply, as the reply schema types it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonaReply {
    /// What to say, where.
    pub say: Vec<Say>,
    /// A Self run to start.
    #[schemars(transform = null_first)]
    pub start_self_run: Option<SelfRun>,
    /// What to remember from this turn (at most [`MEMORY_NOTES_PER_REPLY`] notes).
    #[schemars(length(max = MEMORY_NOTES_PER_REPLY))]
    pub remember: Vec<Remember>,
}

/// One message to send.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Say {
    /// The room (one the Persona may speak in, or [`DM_ROOM`]; the schema's enum of them is
    /// the Mind's, see [`reply_schema`]).
    pub room: String,
    /// The text (not empty).
    #[schemars(length(min = 1))]
    pub text: String,
}

/// A Self run the Persona asks for.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelfRun {
    /// The brief (at most [`BRIEF_CHARS`] characters).
    #[schemars(length(max = BRIEF_CHARS))]
    pub brief: String,
    /// The repository, if any (absent, never `null`).
    #[serde(default)]
    #[schemars(with = "String")]
    pub repo: Option<String>,
    /// The campaign, if any (absent, never `null`; one of the Mind's campaign slugs, and not
    /// offered at all when the Mind has none, see [`reply_schema`]).
    #[serde(default)]
    #[schemars(with = "String")]
    pub campaign: Option<String>,
}

/// A memory note the Persona writes.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Remember {
    /// The note (at most [`MEMORY_NOTE_BYTES`] bytes).
    #[schemars(length(max = MEMORY_NOTE_BYTES))]
    pub text: String,
    /// Whom it is about (sender ids; only the batch's senders are kept).
    pub about: Vec<String>,
    /// How much it matters, [`SALIENCE_MIN`] to [`SALIENCE_MAX`].
    #[schemars(range(min = SALIENCE_MIN, max = SALIENCE_MAX))]
    pub salience: i64,
}

/// Makes an `Option`'s schema an `anyOf` with the `null` branch first: the example generator
/// (and a reader) takes the first branch, so no Self run is started unless the model asks for
/// one. (schemars types an `Option` of an object as `"type": ["object", "null"]`, where the
/// generator would pick the object.)
fn null_first(schema: &mut schemars::Schema) {
    let null = json!("null");
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Array(types)) = object.get("type") else {
        return;
    };
    let others: Vec<Value> = types.iter().filter(|t| **t != null).cloned().collect();
    if others.len() == types.len() {
        return;
    }
    let mut branch = std::mem::take(object);
    let typed = match <[Value; 1]>::try_from(others) {
        Ok([one]) => one,
        Err(many) => Value::Array(many),
    };
    branch.insert("type".to_string(), typed);
    object.insert(
        "anyOf".to_string(),
        json!([{"type": "null"}, Value::Object(branch)]),
    );
}

/// The reply schema of a Mind's Persona: derived from [`PersonaReply`], with the Mind's rooms
/// (and [`DM_ROOM`]) as the room enum and its campaign slugs as the campaign enum (no
/// `campaign` at all without campaigns). Stable for a segment: the room enum covers every room
/// allowed in it; the batch's narrower rules are checked in code.
pub fn reply_schema(mind: &MindConfig) -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        // Annotations the subset ignores: none reaches the model.
        .with_transform(RecursiveTransform(|schema: &mut schemars::Schema| {
            for key in ["title", "description", "default", "format"] {
                schema.remove(key);
            }
        }))
        .into_generator();
    let mut schema = generator.into_root_schema_for::<PersonaReply>().to_value();
    let mut rooms: Vec<Value> = mind.rooms.iter().map(|r| json!(r)).collect();
    rooms.push(json!(DM_ROOM));
    if let Some(room) = schema
        .pointer_mut("/properties/say/items/properties/room")
        .and_then(Value::as_object_mut)
    {
        room.insert("enum".to_string(), Value::Array(rooms));
    }
    let self_run = schema
        .pointer_mut("/properties/start_self_run/anyOf")
        .and_then(Value::as_array_mut)
        .and_then(|branches| branches.iter_mut().find_map(|b| b.get_mut("properties")))
        .and_then(Value::as_object_mut);
    if let Some(properties) = self_run {
        if mind.campaigns.is_empty() {
            properties.remove("campaign");
        } else if let Some(campaign) = properties
            .get_mut("campaign")
            .and_then(Value::as_object_mut)
        {
            let slugs = mind.campaigns.iter().map(|c| json!(c.slug)).collect();
            campaign.insert("enum".to_string(), Value::Array(slugs));
        }
    }
    schema
}

/// Validates a structured reply for a batch: the schema (every limit above), then what the
/// schema cannot say (a DM reply only in a DM batch, a note's bytes). Returns the reply with
/// [`DM_ROOM`] resolved to the batch's DM room.
pub fn validate_reply(
    mind: &MindConfig,
    batch: &[Delivery],
    value: &Value,
) -> Result<PersonaReply, String> {
    validate_reply_against(&reply_schema(mind), batch, value)
}

/// [`validate_reply`] against a schema derived once, `reply_schema(mind)` (a runner holds its
/// Mind's, so no turn derives it again).
pub fn validate_reply_against(
    schema: &Value,
    batch: &[Delivery],
    value: &Value,
) -> Result<PersonaReply, String> {
    muninn_backend::schema::validate(schema, value)?;
    let mut reply: PersonaReply =
        serde_json::from_value(value.clone()).map_err(|e| format!("reply: {e}"))?;
    let dm_room = batch.iter().find(|d| d.is_direct).map(|d| d.room.clone());
    for say in &mut reply.say {
        if say.room == DM_ROOM {
            match &dm_room {
                Some(room) => say.room = room.clone(),
                None => return Err("say: @dm in a batch with no direct message".to_string()),
            }
        }
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
