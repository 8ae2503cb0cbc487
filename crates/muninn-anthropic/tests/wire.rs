//! Wire types: stream events strict on known types and lenient on unknown ones, usage merging,
//! the redacting key, assembly of a whole stream, and the backoff schedule.

use muninn_anthropic::client::{AnthropicClient, ClientConfig, RetryPolicy, assemble};
use muninn_anthropic::secret::ApiKey;
use muninn_anthropic::wire::{ContentBlock, EventError, StreamEvent, Usage};
use muninn_backend::clock::RecordingSleeper;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

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
        message.content,
        vec![ContentBlock::ToolUse {
            id: "t".into(),
            name: "f".into(),
            input: json!({"a":[1,2]}),
            cache_control: None
        }]
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
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#,
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
