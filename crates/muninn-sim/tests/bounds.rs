//! Inputs the simulator bounds: what a client (or a test's admin call) sends must not make it
//! work, allocate or count without end.

use crate::support::{T0, sim};
use muninn_sim::sim::{SimConfig, Simulator};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A schema asking for a value far larger than any reply: a string of 10¹² characters, and 64
/// items at each of 12 nested levels (64¹² values). Each is a few hundred bytes of request.
fn huge_schemas() -> Vec<(&'static str, Value)> {
    let long_string = json!({
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1_000_000_000_000_u64}},
        "required": ["text"]
    });
    let mut nested = json!({"type": "string"});
    for _ in 0..12 {
        nested = json!({"type": "array", "items": nested, "minItems": 64});
    }
    let nested = json!({"type": "object", "properties": {"rows": nested}, "required": ["rows"]});
    // 64 items per level down to the depth cap, and each level's `items` carrying 64 KiB of
    // annotation.
    let annotated = json!({
        "$defs": {"rows": {"type": "array", "minItems": 64,
            "items": {"description": "x".repeat(1 << 16), "$ref": "#/$defs/rows"}}},
        "type": "object", "properties": {"rows": {"$ref": "#/$defs/rows"}}, "required": ["rows"]
    });
    vec![
        ("a long string", long_string),
        ("nested arrays", nested),
        ("annotated nested arrays", annotated),
        ("a wide recursive object", wide_recursive_object(100)),
    ]
}

/// An object of `width` properties, each the object again, down to the generator's depth cap.
fn wide_recursive_object(width: usize) -> Value {
    let properties: serde_json::Map<String, Value> = (0..width)
        .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/node"})))
        .collect();
    json!({"$defs": {"node": {"type": "object", "properties": properties}},
           "$ref": "#/$defs/node"})
}

/// The units the generator's budget counts in a value: one per value, one per string character.
fn units(value: &Value) -> usize {
    1 + match value {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.iter().map(units).sum(),
        Value::Object(fields) => fields.values().map(units).sum(),
        _ => 0,
    }
}

/// The generator's budget holds for every value it makes: the values at its depth cap, and a
/// `const` copied from the schema, used to cost nothing, so an object of a few properties nesting
/// down to the cap, or arrays of a long constant, made several times the budget (an object of
/// 1,000 properties, a billion values). The slack is what may follow the budget's end: a null for
/// each property left in each object on the way down, and one string's name.
#[test]
fn a_generated_value_stays_within_the_generators_budget() {
    use muninn_backend::schema::{MAX_GENERATED, generate};
    let constant = json!({"type": "array", "minItems": 64, "items": {"type": "array",
        "minItems": 64, "items": {"const": "c".repeat(1_000)}}});
    let over: Vec<(&str, usize)> = [
        ("a recursive object", wide_recursive_object(3)),
        ("arrays of a constant", constant),
    ]
    .into_iter()
    .map(|(what, schema)| (what, units(&generate(&schema))))
    .filter(|(_, made)| *made > MAX_GENERATED + 1_000)
    .collect();
    assert_eq!(over, [], "units made past the budget of {MAX_GENERATED}");
}

/// The model writes a tool's input from the tool's schema, which is the client's: a schema that
/// asks for more than any reply can hold is answered at once, cut at `max_tokens`, as a model
/// stops there. The simulator used to generate the whole value first (padding the string a
/// character at a time, filling every level of arrays), never answering.
#[test]
fn a_tool_schema_asking_for_a_huge_value_is_answered_at_once() {
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..Default::default()
    }));
    for (what, schema) in huge_schemas() {
        for (tool, text) in [
            ("StructuredOutput", "answer"),
            ("fill", "please use the fill tool"),
        ] {
            let body = json!({
                "model": "claude-opus-5-5", "max_tokens": 1000,
                "tools": [{"name": tool, "description": "reply", "input_schema": schema}],
                "messages": [{"role": "user", "content": text}]
            });
            let answer = answered_in_time(&sim, body, &format!("{what}, {tool}"));
            assert_eq!(
                (answer.reply.stop_reason, answer.usage.output <= 1000),
                ("max_tokens", true),
                "{what}, {tool}: {:?}",
                answer.usage
            );
        }
    }
}

/// `sim`'s answer to `body`, on a thread of its own so that a simulator that never answers fails
/// the test instead of hanging it.
fn answered_in_time(sim: &Arc<Simulator>, body: Value, what: &str) -> muninn_sim::sim::Answer {
    let (tx, rx) = std::sync::mpsc::channel();
    let answering = sim.clone();
    std::thread::spawn(move || {
        let _ = tx.send(answering.messages(&body, None, 1, T0));
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what}: no answer within 30 s"))
        .unwrap()
}

/// A structured reply to a Mind's delivery lines is checked against the tool's schema before it
/// replaces the generated one, and the schema is the client's: checking a value against 12
/// `anyOf` branches that each hold the schema again took 12⁸ checks (the depth cap halved, as
/// each branch goes through an `allOf`), and the request of a few hundred bytes was never
/// answered. The check's work is bounded like the generator's; past it the value counts as
/// refused, and the generated one is answered.
#[test]
fn a_tool_schema_slow_to_check_is_answered_at_once() {
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..Default::default()
    }));
    let branches: Vec<Value> = (0..12)
        .map(|i| json!({"allOf": [{"$ref": "#/$defs/node"}, {"const": i}]}))
        .collect();
    let schema = json!({"$defs": {"node": {"anyOf": branches}}, "$ref": "#/$defs/node"});
    let body = json!({
        "model": "claude-opus-5-5", "max_tokens": 1000,
        "tools": [{"name": "StructuredOutput", "description": "reply", "input_schema": schema}],
        "messages": [{"role": "user", "content": "[#general, to you] @ada:example.org: hello"}]
    });
    let answer = answered_in_time(&sim, body, "a schema slow to check");
    assert_eq!(answer.reply.stop_reason, "tool_use");
}

/// `POST /admin/clock` moves virtual time by any amount it is given: one past what time can hold
/// used to overflow it, and every later request (each reads the clock) failed with it. An
/// advance past the clock's range is refused; the simulator goes on answering.
#[tokio::test]
async fn an_advance_past_the_clocks_range_is_refused_and_the_simulator_goes_on() {
    let h = sim().await;
    muninn_anthropic::client::install_ring_provider();
    let client = reqwest::Client::new();
    let advance = |ms: i64| {
        client
            .post(format!("{}/admin/clock", h.base_url()))
            .body(json!({ "advance_ms": ms }).to_string())
            .send()
    };
    let refused = advance(i64::MAX).await.unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let clock = advance(60_000).await.unwrap().text().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&clock).unwrap(),
        json!({"now_ms": T0 + 60_000})
    );
    let answered = client
        .post(format!("{}/v1/messages", h.base_url()))
        .header("x-api-key", "sk-test")
        .header("anthropic-version", "2023-06-01")
        .body(
            json!({"model": "claude-opus-5-5", "max_tokens": 50,
                   "messages": [{"role": "user", "content": "hello"}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status().as_u16(), 200);
    assert_eq!(h.sim.now_ms(), T0 + 60_000);
}

/// A request of `blocks` one-word text blocks that opts into cache diagnostics, naming
/// `previous`.
fn many_blocks(blocks: usize, previous: Option<&str>) -> Value {
    let content: Vec<Value> = (0..blocks)
        .map(|i| json!({"type": "text", "text": format!("w{i}")}))
        .collect();
    json!({"model": "claude-opus-5-5", "max_tokens": 50,
           "messages": [{"role": "user", "content": content}],
           "diagnostics": {"previous_message_id": previous}})
}

/// The diagnostics keep each opted-in request's shape (a checkpoint per block) for the request
/// that will name it. They were bounded by count alone (`max_recorded`, 1,000), so a client
/// sending large requests made the simulator hold up to 1,000 of them — tens of gigabytes for
/// bodies near the 32 MB limit — where the request log, bounded by its bodies' size too, held
/// a few. They are now bounded by the log's byte budget as well, the oldest forgotten first.
#[test]
fn the_diagnostics_forget_the_oldest_shapes_past_the_logs_byte_budget() {
    let sim = Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        max_recorded_bytes: 2 * 1024 * 1024,
        ..Default::default()
    });
    let first = sim
        .messages(&many_blocks(40_000, None), None, 1, T0)
        .unwrap();
    for seq in 2..=4 {
        sim.messages(&many_blocks(40_000, None), None, seq, T0)
            .unwrap();
    }
    let named = sim
        .messages(&many_blocks(40_000, Some(&first.id)), None, 5, T0)
        .unwrap();
    assert_eq!(
        named
            .diagnostics
            .and_then(|d| d.cache_miss_reason)
            .map(|r| r.kind),
        Some("previous_message_not_found".to_string()),
        "three requests of 40,000 blocks later, the first one's shape is forgotten"
    );
}

/// Within the budget the generated value is valid, however many items an array needs: arrays
/// were cut at 64 items whatever their `minItems` (a bound on the work from before there was a
/// budget), so a schema asking for 100 got a value it refuses.
#[test]
fn a_generated_array_has_the_items_its_schema_asks_for() {
    use muninn_backend::schema::{generate, validate};
    let schema = json!({"type": "object", "required": ["votes"], "properties": {
        "votes": {"type": "array", "minItems": 100, "items": {"type": "boolean"}}}});
    let value = generate(&schema);
    assert_eq!(validate(&schema, &value), Ok(()), "{value}");
}
