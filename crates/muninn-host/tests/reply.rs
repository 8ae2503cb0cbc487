//! The Persona's reply contract: the schema derived from the reply types is byte-stable (it is
//! part of the cached prefix) and equals the checked-in snapshot, stays within the subset
//! `muninn_backend::schema` understands, and every limit's violation is rejected.

use muninn_backend::schema;
use muninn_host::config::{Config, MindConfig};
use muninn_host::runtime::{
    BRIEF_CHARS, MEMORY_NOTE_BYTES, MEMORY_NOTES_PER_REPLY, SALIENCE_MAX, SALIENCE_MIN,
    reply_schema, validate_reply,
};
use muninn_store::Delivery;
use serde_json::{Value, json};
use std::path::Path;

fn demo_mind() -> MindConfig {
    Config::demo().minds.remove(0)
}

/// The demo Mind's reply schema is the same on every call and equals the checked-in snapshot.
/// `MUNINN_BLESS=1` rewrites it.
#[test]
fn the_reply_schema_is_stable_and_matches_its_snapshot() {
    let mind = demo_mind();
    let schema = reply_schema(&mind);
    assert_eq!(schema, reply_schema(&mind));
    let mut text = serde_json::to_string_pretty(&schema).unwrap();
    text.push('\n');
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/demo_reply_schema.json");
    if std::env::var_os("MUNINN_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    pretty_assertions::assert_eq!(checked_in, text, "{} is stale", path.display());
    // Byte-stable as sent, too (the cached prefix holds the compact form).
    assert_eq!(schema.to_string(), reply_schema(&mind).to_string());
}

/// A delivery from `sender` in `room`.
fn delivery(room: &str, sender: &str, is_direct: bool) -> Delivery {
    Delivery {
        mind: "vala".into(),
        seq: 1,
        room: room.into(),
        sender: sender.into(),
        is_direct,
        to_you: true,
        text: "hello".into(),
        source_id: "e1".into(),
        received_at_ms: 0,
        context: Vec::new(),
    }
}

/// A valid reply, each limit exactly reached.
fn at_the_limits() -> Value {
    json!({
        "say": [{"room": "#swarm", "text": "x"}, {"room": "@dm", "text": "to you"}],
        "start_self_run": {"brief": "b".repeat(BRIEF_CHARS), "repo": "muninn", "campaign": "demo"},
        "remember": (0..MEMORY_NOTES_PER_REPLY).map(|i| json!({
            "text": "n".repeat(MEMORY_NOTE_BYTES),
            "about": ["ari"],
            "salience": if i == 0 { SALIENCE_MIN } else { SALIENCE_MAX },
        })).collect::<Vec<_>>(),
    })
}

/// The schema stays within the subset the validator and the example generator understand, and
/// the generator's example (what the simulator replies) is a valid reply with no Self run.
#[test]
fn the_reply_schema_stays_within_the_validators_subset() {
    let mind = demo_mind();
    let schema = reply_schema(&mind);
    assert_eq!(schema::check_subset(&schema), Ok(()));
    assert!(!schema.to_string().contains("$ref"), "inlined: {schema}");
    let example = schema::generate(&schema);
    let dm = [delivery("!dm-ari", "ari", true)];
    let reply = validate_reply(&mind, &dm, &example).unwrap();
    assert_eq!(reply.start_self_run, None);
    assert_eq!(reply.say.len(), 1);
    assert_eq!(reply.remember.len(), 1);
    assert_eq!(reply.remember[0].salience, SALIENCE_MAX);
}

#[test]
fn a_reply_at_every_limit_is_valid_and_dm_resolves_to_the_batchs_dm_room() {
    let mind = demo_mind();
    let batch = [delivery("!dm-ari", "ari", true)];
    let reply = validate_reply(&mind, &batch, &at_the_limits()).unwrap();
    assert_eq!(reply.say[1].room, "!dm-ari");
    let run = reply.start_self_run.unwrap();
    assert_eq!(run.brief.chars().count(), BRIEF_CHARS);
    assert_eq!(run.campaign.as_deref(), Some("demo"));
    assert_eq!(reply.remember.len(), MEMORY_NOTES_PER_REPLY);
    assert_eq!(reply.remember[0].salience, SALIENCE_MIN);
}

/// How a case breaks a reply at the limits.
type Break = fn(&mut Value);

/// Each limit's violation: its name, how it breaks [`at_the_limits`], and the error expected.
const VIOLATIONS: [(&str, Break, &str); 12] = [
    (
        "brief too long",
        |v| v["start_self_run"]["brief"] = json!("b".repeat(BRIEF_CHARS + 1)),
        "/start_self_run: must match a schema in anyOf",
    ),
    (
        "too many notes",
        |v| {
            let note = v["remember"][0].clone();
            v["remember"].as_array_mut().unwrap().push(note);
        },
        "/remember: must NOT have more than 8 items",
    ),
    (
        "note too many characters",
        |v| v["remember"][1]["text"] = json!("n".repeat(MEMORY_NOTE_BYTES + 1)),
        "/remember/1/text: must NOT be longer than the maximum length",
    ),
    (
        "note too many bytes",
        // Within the character limit, over the byte limit.
        |v| v["remember"][2]["text"] = json!("é".repeat(MEMORY_NOTE_BYTES / 2 + 1)),
        "remember: a note of 1002 bytes (limit 1000)",
    ),
    (
        "salience above",
        |v| v["remember"][0]["salience"] = json!(SALIENCE_MAX + 1),
        "/remember/0/salience: must be within the bounds",
    ),
    (
        "salience below",
        |v| v["remember"][0]["salience"] = json!(SALIENCE_MIN - 1),
        "/remember/0/salience: must be within the bounds",
    ),
    (
        "salience missing",
        |v| {
            v["remember"][0].as_object_mut().unwrap().remove("salience");
        },
        "/remember/0: must have required property 'salience'",
    ),
    (
        "empty text",
        |v| v["say"][0]["text"] = json!(""),
        "/say/0/text: must NOT be shorter than the minimum length",
    ),
    (
        "a room the Persona may not speak in",
        |v| v["say"][0]["room"] = json!("#elsewhere"),
        "/say/0/room: must be equal to one of the allowed values",
    ),
    (
        "an unknown campaign",
        |v| v["start_self_run"]["campaign"] = json!("other"),
        "/start_self_run: must match a schema in anyOf",
    ),
    (
        "a null repo",
        |v| v["start_self_run"]["repo"] = Value::Null,
        "/start_self_run: must match a schema in anyOf",
    ),
    (
        "an unknown field",
        |v| v["mood"] = json!("calm"),
        "root: must NOT have additional property 'mood'",
    ),
];

/// Each limit's violation is rejected (by the schema where it can say it, by code where not).
#[test]
fn each_limit_violated_is_rejected() {
    let mind = demo_mind();
    let batch = [delivery("!dm-ari", "ari", true)];
    for (name, break_it, expected) in VIOLATIONS {
        let mut value = at_the_limits();
        break_it(&mut value);
        assert_eq!(
            validate_reply(&mind, &batch, &value).map(|_| ()),
            Err(expected.to_string()),
            "{name}"
        );
    }
}

/// What the schema cannot say: a DM reply needs a DM in the batch; without campaigns no
/// campaign is offered at all.
#[test]
fn what_the_schema_cannot_say_is_checked_in_code() {
    let mind = demo_mind();
    let public = [delivery("#swarm", "ari", false)];
    assert_eq!(
        validate_reply(&mind, &public, &at_the_limits()).map(|_| ()),
        Err("say: @dm in a batch with no direct message".to_string())
    );
    let mut plain = demo_mind();
    plain.campaigns.clear();
    let schema = reply_schema(&plain);
    let self_run = &schema["properties"]["start_self_run"]["anyOf"][1];
    assert!(self_run["properties"].get("campaign").is_none(), "{schema}");
    let dm = [delivery("!dm-ari", "ari", true)];
    assert_eq!(
        validate_reply(&plain, &dm, &at_the_limits()).map(|_| ()),
        Err("/start_self_run: must match a schema in anyOf".to_string())
    );
}
