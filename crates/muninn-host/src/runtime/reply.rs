//! The Persona's reply contract: the reply schema and its checks.

use crate::config::MindConfig;
use muninn_store::Delivery;
use serde_json::{Value, json};

/// A `remember[]` note's byte limit, and how many a reply may carry.
pub const MEMORY_NOTE_BYTES: usize = 1_000;

/// See [`MEMORY_NOTE_BYTES`].
pub const MEMORY_NOTES_PER_REPLY: usize = 8;

/// A `start_self_run` brief's character limit.
pub const BRIEF_CHARS: usize = 1_000;

/// The reply-schema room meaning "the DM room of this batch".
pub const DM_ROOM: &str = "@dm";

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
