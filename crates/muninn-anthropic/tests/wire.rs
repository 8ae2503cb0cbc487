//! Wire types: stream events strict on known types and lenient on unknown ones, usage merging,
//! the redacting key, assembly of a whole stream, and the backoff schedule.

use muninn_anthropic::client::{AnthropicClient, ClientConfig, RetryPolicy, assemble};
use muninn_anthropic::secret::ApiKey;
use muninn_anthropic::wire::{ContentBlock, EventError, StreamEvent, Usage};
use muninn_backend::BackendError;
use muninn_backend::clock::RecordingSleeper;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A stream's `message_start`: 5 prompt tokens, the placeholder output count.
const MESSAGE_START: &str = r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#;

#[test]
fn unknown_events_are_kept_and_malformed_known_ones_fail() {
    let e = StreamEvent::parse(r#"{"type":"brand_new_event","x":1}"#).unwrap();
    assert_eq!(
        e,
        StreamEvent::Unknown(json!({"type":"brand_new_event","x":1}))
    );
    assert!(matches!(
        StreamEvent::parse(r#"{"type":"content_block_delta","index":"zero"}"#),
        Err(EventError::Malformed { event, .. }) if event == "content_block_delta"
    ));
    assert!(matches!(
        StreamEvent::parse("{not json"),
        Err(EventError::NotJson(_))
    ));
    let block: ContentBlock =
        serde_json::from_value(json!({"type":"server_tool_use","id":"s"})).unwrap();
    assert!(matches!(block, ContentBlock::Unknown(_)));
}

#[test]
fn message_delta_usage_overrides_message_start() {
    let events = [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"cache_creation":{"ephemeral_5m_input_tokens":4,"ephemeral_1h_input_tokens":6},"output_tokens":1,"inference_geo":"eu"}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"[1,2]}"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42,"cache_read_input_tokens":500100}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .map(String::from);
    let (message, raw, usage) = assemble(&events).unwrap();
    assert_eq!(
        serde_json::to_value(&message.content).unwrap(),
        json!([{"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1, 2]}}])
    );
    assert_eq!(message.stop_reason.as_deref(), Some("tool_use"));
    let core = usage.to_core();
    assert_eq!(
        (
            core.input,
            core.cache_write_5m,
            core.cache_write_1h,
            core.cache_read,
            core.output
        ),
        (5, 4, 6, 500100, 42)
    );
    assert_eq!(raw["cache_read_input_tokens"], json!(500100));
    assert_eq!(raw["inference_geo"], json!("eu"));
    assert_eq!(raw["output_tokens"], json!(42));
}

/// A streamed reply says which context edits the provider applied in `message_delta` (the
/// official SDKs' `BetaRawMessageDeltaEvent.context_management`), not in `message_start`: the
/// assembled message carries them, so a streamed turn's clear is recorded as
/// `TurnEvent::ContextEdited` (before, the field was dropped with the event's unnamed fields,
/// and a streamed clear against the real API left no trace).
#[test]
fn message_delta_context_management_reaches_the_message() {
    let events = [
        MESSAGE_START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2},"context_management":{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":3,"cleared_input_tokens":1200}]}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .map(String::from);
    let (message, _, _) = assemble(&events).unwrap();
    let applied = serde_json::to_value(message.context_management).unwrap();
    assert_eq!(
        applied,
        json!({"applied_edits": [{"type": "clear_tool_uses_20250919",
                                  "cleared_tool_uses": 3, "cleared_input_tokens": 1200}]})
    );
}

/// A streamed reply's blocks are assembled with every field their events carry, since each
/// goes back in the next request: a thinking block's fields besides its text and signature, a
/// text block's citations (`citations_delta`, gathered into `citations` as the official SDKs'
/// accumulators gather them; before, ignored as an unknown delta), a server tool call's input
/// (`input_json_delta` on a `server_tool_use`; before, the stream failed with "delta … does not
/// fit block 2"), and a block of a type this crate does not know, whole.
#[test]
fn a_streamed_reply_keeps_every_field_its_events_carry() {
    let citation = json!({"type": "web_search_result_location", "url": "https://mill.example",
                          "title": "The mill", "encrypted_index": "RW5j", "cited_text": "a mill"});
    let events = [
        MESSAGE_START.to_string(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","origin":{"pass":1}}}"#.to_string(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Search first."}}"#.to_string(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig_t"}}"#.to_string(),
        r#"{"type":"content_block_stop","index":0}"#.to_string(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"ZW5j"}}"#.to_string(),
        r#"{"type":"content_block_stop","index":1}"#.to_string(),
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}"#.to_string(),
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"query\":"}}"#.to_string(),
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"mill\"}"}}"#.to_string(),
        r#"{"type":"content_block_stop","index":2}"#.to_string(),
        r#"{"type":"content_block_start","index":3,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}}"#.to_string(),
        r#"{"type":"content_block_stop","index":3}"#.to_string(),
        r#"{"type":"content_block_start","index":4,"content_block":{"type":"text","text":""}}"#.to_string(),
        r#"{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"It is a mill."}}"#.to_string(),
        json!({"type": "content_block_delta", "index": 4,
               "delta": {"type": "citations_delta", "citation": citation}})
        .to_string(),
        r#"{"type":"content_block_stop","index":4}"#.to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":20}}"#.to_string(),
        r#"{"type":"message_stop"}"#.to_string(),
    ];
    let (message, _, _) = assemble(&events).unwrap();
    assert_eq!(
        serde_json::to_value(&message.content).unwrap(),
        json!([
            {"type": "thinking", "thinking": "Search first.", "signature": "sig_t",
             "origin": {"pass": 1}},
            {"type": "redacted_thinking", "data": "ZW5j"},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "mill"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "It is a mill.", "citations": [citation]}
        ])
    );
}

/// A `content_block_delta` of a type this crate does not know — the API may add delta types
/// under its version, as it may add any variant of an enum-like output — does not fail the
/// stream, which would fail every reply from the day the API sends one: the reply assembles
/// from the deltas the crate knows, as the official SDKs' accumulators do, and the unknown
/// delta is kept verbatim with its block's index (`MessagesResponse::unapplied_deltas`), so
/// nothing the stream said is dropped. Before, the stream failed ("content_block_delta of
/// unknown type annotation_delta …").
#[test]
fn a_delta_of_an_unknown_type_is_kept_and_the_reply_assembles() {
    let annotation = json!({"type": "annotation_delta", "note": {"span": [0, 2]}});
    let events = [
        MESSAGE_START.to_string(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_string(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}"#.to_string(),
        json!({"type": "content_block_delta", "index": 0, "delta": annotation}).to_string(),
        r#"{"type":"content_block_stop","index":0}"#.to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#.to_string(),
        r#"{"type":"message_stop"}"#.to_string(),
    ];
    let (message, _, _) = assemble(&events).unwrap();
    assert_eq!(
        serde_json::to_value(&message.content).unwrap(),
        json!([{"type": "text", "text": "ok"}])
    );
    assert_eq!(message.unapplied_deltas, vec![(0, annotation)]);
}

/// A block of a type this crate does not know (the API may add block types under its
/// version) is kept whole as it started, and a known delta for it — whose meaning for that
/// block the crate cannot know — is kept verbatim beside the reply, as an unknown delta is,
/// instead of failing the stream. Before, the stream failed: "delta TextDelta { text: \"the
/// mill\" } does not fit block 0".
#[test]
fn a_known_delta_for_a_block_of_an_unknown_type_is_kept_and_the_reply_assembles() {
    let events = [
        MESSAGE_START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"quotation","text":"","source":"s1"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the mill"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .map(String::from);
    let (message, _, _) = assemble(&events).unwrap();
    assert_eq!(
        serde_json::to_value(&message.content).unwrap(),
        json!([{"type": "quotation", "text": "", "source": "s1"}])
    );
    assert_eq!(
        message.unapplied_deltas,
        vec![(0, json!({"type": "text_delta", "text": "the mill"}))]
    );
}

/// A block's deltas and its `content_block_stop` come once per block, before its stop: a
/// delta or a second stop for a block already stopped is a broken stream and fails it. Taken
/// silently, a tool call's input was gathered again after its stop and, at a second stop,
/// replaced the input the call had (`{"a":1}` became `{"b":2}`); a stop for a block never
/// started passed as well.
#[test]
fn a_delta_or_a_stop_for_a_block_already_stopped_fails_the_stream() {
    let call = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#;
    let first = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#;
    let again = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"b\":2}"}}"#;
    let stop = r#"{"type":"content_block_stop","index":0}"#;
    let end = [
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let cases = [
        (
            vec![call, first, stop, again, stop],
            "after its content_block_stop",
        ),
        (vec![call, first, stop, stop], "a second content_block_stop"),
        (
            vec![
                call,
                first,
                stop,
                r#"{"type":"content_block_stop","index":1}"#,
            ],
            "content_block_stop for unknown block 1",
        ),
    ];
    for (blocks, names) in cases {
        let events: Vec<String> = std::iter::once(MESSAGE_START)
            .chain(blocks)
            .chain(end)
            .map(String::from)
            .collect();
        match assemble(&events) {
            Err(BackendError::Protocol(message)) => {
                assert!(message.contains(names), "{message}");
            }
            other => panic!("expected a protocol error naming {names:?}, got {other:?}"),
        }
    }
}

/// A streamed compaction's `compaction_delta` carries, besides the summary, fields this crate
/// does not name — `encrypted_content`, opaque metadata the official SDKs' accumulators lay on
/// the block, to be sent back verbatim — and the block goes back with them, as a reply's
/// blocks go back with every field they came with. Before, the delta's other fields were
/// dropped and the block went back without its `encrypted_content`.
#[test]
fn a_compaction_delta_lays_its_other_fields_on_the_block() {
    let events = [
        MESSAGE_START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"<summary>the mill</summary>","encrypted_content":"ZW5j"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"compaction"},"usage":{"output_tokens":9}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .map(String::from);
    let (message, _, _) = assemble(&events).unwrap();
    assert_eq!(
        serde_json::to_value(&message.content).unwrap(),
        json!([{"type": "compaction", "content": "<summary>the mill</summary>",
                "signature": "sig", "encrypted_content": "ZW5j"}])
    );
}

#[test]
fn a_usage_without_split_is_all_5m() {
    let u: Usage = serde_json::from_value(
        json!({"input_tokens":1,"cache_creation_input_tokens":7,"output_tokens":2}),
    )
    .unwrap();
    assert_eq!(u.to_core().cache_write_5m, 7);
    assert_eq!(u.to_core().cache_write_1h, 0);
}

#[test]
fn the_key_never_prints() {
    let key = ApiKey::new("sk-ant-very-secret").unwrap();
    assert_eq!(format!("{key}"), "ApiKey(<redacted>)");
    assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
    let config = ClientConfig::new("http://127.0.0.1:1", key);
    assert!(!format!("{config:?}").contains("very-secret"));
    assert!(ApiKey::new("  ").is_err());
    assert!(ApiKey::from_env(|_| None).is_err());
    use muninn_anthropic::client::{AuthScheme, credentials_from_env};
    let env = |k: &str| (k == "ANTHROPIC_AUTH_TOKEN").then(|| "tok".to_string());
    assert_eq!(credentials_from_env(env).unwrap().1, AuthScheme::Bearer);
    let env = |k: &str| Some(format!("{k}-value"));
    assert_eq!(
        credentials_from_env(env).unwrap().1,
        AuthScheme::ApiKeyHeader
    );
}

#[test]
fn backoff_doubles_caps_and_jitters_within_a_quarter() {
    let mut config = ClientConfig::new("http://127.0.0.1:1", ApiKey::new("k").unwrap());
    config.retry = RetryPolicy::default();
    let client = AnthropicClient::new(config, Arc::new(RecordingSleeper::default())).unwrap();
    for (attempt, base_ms) in [
        (1u32, 500u64),
        (2, 1000),
        (3, 2000),
        (7, 32000),
        (12, 32000),
    ] {
        let d = client.backoff(attempt);
        let base = Duration::from_millis(base_ms);
        assert!(
            d >= base && d <= base.mul_f64(1.25),
            "attempt {attempt}: {d:?}"
        );
    }
}

/// A stream that reaches `message_stop` without what the API always says before it fails
/// instead of passing for whole: without `message_delta`, the reply's output would be
/// `message_start`'s placeholder (1) read as the provider's count; with a tool call's input
/// never completed by its `content_block_stop`, the call would go back with its start's empty
/// input. Before, both assembled.
#[test]
fn a_stream_that_stops_unfinished_fails() {
    let start = MESSAGE_START;
    let delta = r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#;
    let stop = r#"{"type":"message_stop"}"#;
    let call = [
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#,
    ];
    let block_stop = r#"{"type":"content_block_stop","index":0}"#;
    let cases = [
        (
            vec![start, call[0], call[1], block_stop, stop],
            "message_delta",
        ),
        (
            vec![start, call[0], call[1], delta, stop],
            "content block 0",
        ),
    ];
    for (events, names) in cases {
        let events: Vec<String> = events.into_iter().map(String::from).collect();
        match assemble(&events) {
            Err(BackendError::Protocol(message)) => {
                assert!(message.contains(names), "{message}");
            }
            other => panic!("expected a protocol error naming {names}, got {other:?}"),
        }
    }
}

/// A second `message_start` in one stream is a broken stream, not a new reply: taking it
/// would drop the content and the usage received so far without a word. Before, the second
/// replaced the first, and the stream assembled as the second message alone.
#[test]
fn a_second_message_start_fails_the_stream() {
    let events = [
        MESSAGE_START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        MESSAGE_START,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .map(String::from);
    match assemble(&events) {
        Err(BackendError::Protocol(message)) => {
            assert!(message.contains("message_start"), "{message}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}
