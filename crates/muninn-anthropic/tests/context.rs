//! The provider's context tools on the wire: a compaction's usage read from
//! `usage.iterations[]` (streamed and not), the compaction block assembled from a stream, the
//! betas a request's own fields need, and tool-result clearing applied as the provider applies
//! it (trigger, keep, excluded tools, the least worth clearing, inputs).

use muninn_anthropic::client::assemble;
use muninn_anthropic::context::{CLEARED_PLACEHOLDER, apply_edits, betas_for, kept_tokens};
use muninn_anthropic::prompt::shape;
use muninn_anthropic::wire::{
    ClearToolUses, CompactionRequest, ContentBlock, ContextEdit, ContextManagementRequest,
    EditAmount, MessagesRequest, MessagesResponse, Usage,
};
use muninn_core::trace::Usage as CoreUsage;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// An on-demand compaction reports 0 at the top level and its tokens in one `compaction`
/// iteration; a `message` iteration repeats the top level and is not counted twice.
#[test]
fn a_compaction_is_counted_from_its_iterations() {
    let usage: Usage = serde_json::from_value(json!({
        "input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "iterations": [
            {"type": "compaction", "input_tokens": 12, "output_tokens": 340,
             "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 50}
        ]
    }))
    .unwrap();
    assert_eq!(usage.top_level(), CoreUsage::default());
    assert_eq!(
        usage.to_core(),
        CoreUsage {
            input: 12,
            cache_write_5m: 50,
            cache_write_1h: 0,
            cache_read: 9000,
            output: 340,
        }
    );
    // Threshold mode: the message's own pass is the top level, repeated as a `message` entry.
    let both: Usage = serde_json::from_value(json!({
        "input_tokens": 5, "output_tokens": 7, "cache_read_input_tokens": 100,
        "iterations": [
            {"type": "compaction", "input_tokens": 1, "output_tokens": 20,
             "cache_read_input_tokens": 300},
            {"type": "message", "input_tokens": 5, "output_tokens": 7,
             "cache_read_input_tokens": 100}
        ]
    }))
    .unwrap();
    assert_eq!(
        both.to_core(),
        CoreUsage {
            input: 6,
            cache_write_5m: 0,
            cache_write_1h: 0,
            cache_read: 400,
            output: 27,
        }
    );
}

/// A streamed compaction: the block arrives whole in `content_block_start`, the iterations in
/// `message_delta`'s usage, which overrides `message_start`'s.
#[test]
fn a_streamed_compaction_assembles() {
    let events = [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":"<summary>s</summary>","signature":"sig"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"compaction"},"usage":{"output_tokens":0,"iterations":[{"type":"compaction","input_tokens":3,"output_tokens":40,"cache_read_input_tokens":500,"cache_creation_input_tokens":0}]}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .map(str::to_string);
    let (message, raw, usage) = assemble(&events).unwrap();
    assert_eq!(
        message.content,
        vec![ContentBlock::Compaction {
            content: "<summary>s</summary>".to_string(),
            signature: "sig".to_string(),
            extra: Default::default(),
        }]
    );
    assert_eq!(message.stop_reason.as_deref(), Some("compaction"));
    assert_eq!(raw["iterations"][0]["output_tokens"], json!(40));
    assert_eq!(usage.to_core().output, 40);
    assert_eq!(usage.to_core().cache_read, 500);
}

/// A compaction streamed as the API streams it: `content_block_start` with the block's
/// `content` still `null`, the summary in a `compaction_delta`, the signature given at the
/// start or by a `signature_delta` — the assembled block is the one the non-streaming API
/// answers.
#[test]
fn a_compaction_streamed_in_deltas_assembles() {
    let start = r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#;
    let end = [
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"compaction"},"usage":{"output_tokens":0}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let signed_at_start = [
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null,"signature":"sig"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"<summary>s</summary>"}}"#,
    ];
    let signed_by_delta = [
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"<summary>"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"s</summary>"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
    ];
    for blocks in [&signed_at_start[..], &signed_by_delta[..]] {
        let events: Vec<String> = std::iter::once(start)
            .chain(blocks.iter().copied())
            .chain(end)
            .map(str::to_string)
            .collect();
        let (message, _, _) = assemble(&events).unwrap();
        assert_eq!(
            message.content,
            vec![ContentBlock::Compaction {
                content: "<summary>s</summary>".to_string(),
                signature: "sig".to_string(),
                extra: Default::default(),
            }],
            "{blocks:?}"
        );
    }
}

/// A summary streamed in many small `compaction_delta`s is gathered in time linear in its
/// size, as a text block's deltas are: the deltas of a block still `"content": null` at its
/// start were joined by copying the summary so far on every delta, so a summary in 300,000
/// pieces copied terabytes (a provider or proxy may split it as it likes; only the stream's
/// byte bound limits the pieces).
#[test]
fn a_compaction_in_many_deltas_assembles_in_time() {
    const PIECES: usize = 300_000;
    let piece = "x".repeat(64);
    let mut events = vec![
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#.to_string(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null,"signature":"sig"}}"#.to_string(),
    ];
    let delta = json!({"type": "content_block_delta", "index": 0,
        "delta": {"type": "compaction_delta", "content": piece}})
    .to_string();
    events.extend(std::iter::repeat_n(delta, PIECES));
    events.extend(
        [
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"compaction"},"usage":{"output_tokens":0}}"#,
            r#"{"type":"message_stop"}"#,
        ]
        .map(str::to_string),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(assemble(&events).map(|(message, _, _)| message.content));
    });
    let content = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a summary in many deltas: not assembled within 60 s")
        .unwrap();
    match content.as_slice() {
        [
            ContentBlock::Compaction {
                content, signature, ..
            },
        ] => {
            assert_eq!((content.len(), signature.as_str()), (PIECES * 64, "sig"));
        }
        other => panic!("not one compaction block: {other:?}"),
    }
}

/// The response's `context_management.applied_edits[]` decodes.
#[test]
fn applied_edits_decode() {
    let response: MessagesResponse = serde_json::from_value(json!({
        "id": "m", "type": "message", "role": "assistant", "model": "x", "content": [],
        "stop_reason": "end_turn", "usage": {},
        "context_management": {"applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 900}
        ]}
    }))
    .unwrap();
    let edits = response.context_management.unwrap().applied_edits;
    assert_eq!(edits[0].cleared_tool_uses, 2);
    assert_eq!(edits[0].cleared_input_tokens, 900);
}

fn conversation(uses: usize, clear: ClearToolUses) -> MessagesRequest {
    let mut messages = vec![json!({"role": "user", "content": "start"})];
    for i in 0..uses {
        let name = if i == 0 { "keepme" } else { "read" };
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": {"path": format!("file{i}")}}
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"),
             "content": format!("{i}: {}", "a long line of output. ".repeat(40))}
        ]}));
    }
    let mut request: MessagesRequest = serde_json::from_value(json!({
        "model": "claude-opus-5-5", "max_tokens": 100, "messages": messages,
        "system": [{"type": "text", "text": "You read files.", "cache_control": {"type": "ephemeral"}}]
    }))
    .unwrap();
    request.context_management = Some(ContextManagementRequest {
        edits: vec![ContextEdit::ClearToolUses(clear)],
    });
    request
}

fn results(request: &MessagesRequest) -> Vec<String> {
    let body = serde_json::to_value(request).unwrap();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            b["content"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(2)
                .collect()
        })
        .collect()
}

/// The request's tokens as the cache model counts them.
pub(crate) fn tokens(request: &MessagesRequest) -> u64 {
    shape(&serde_json::to_value(request).unwrap())
        .unwrap()
        .total_tokens
}

/// All but the last `keep` results are cleared — never an excluded tool's — and the freed
/// tokens are what the cache model counts; the prompt is rewritten from the first cleared block.
#[test]
fn clearing_keeps_the_newest_and_the_excluded() {
    let clear = ClearToolUses {
        trigger: Some(EditAmount::tokens(100)),
        keep: Some(EditAmount::tool_uses(2)),
        exclude_tools: vec!["keepme".to_string()],
        ..ClearToolUses::default()
    };
    let request = conversation(5, clear);
    let (cleared, applied) = apply_edits(&request).unwrap();
    let p = &CLEARED_PLACEHOLDER[..2];
    assert_eq!(results(&cleared), vec!["0:", p, p, "3:", "4:"]);
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0].cleared_tool_uses, 2);
    assert_eq!(
        applied[0].cleared_input_tokens,
        tokens(&request) - tokens(&cleared)
    );
    // Rewritten from the second result on: the blocks through the second call are kept.
    let before = shape(&serde_json::to_value(&request).unwrap()).unwrap();
    let after = shape(&serde_json::to_value(&cleared).unwrap()).unwrap();
    // Checkpoints: the system, "start", call 0, result 0, call 1, then result 1 (cleared).
    let through_second_call = before.checkpoints[4].tokens;
    assert_eq!(kept_tokens(&before, &after), through_second_call);
    assert_eq!(betas_for(&request), vec!["context-management-2025-06-27"]);
}

/// Below the trigger, or clearing less than `clear_at_least`, nothing is cleared; with
/// `clear_tool_inputs` the calls' inputs go too.
#[test]
fn clearing_waits_for_its_trigger_and_its_minimum() {
    let high = ClearToolUses {
        trigger: Some(EditAmount::tokens(1_000_000)),
        ..ClearToolUses::default()
    };
    let (same, applied) = apply_edits(&conversation(5, high)).unwrap();
    assert!(applied.is_empty());
    assert_eq!(results(&same), vec!["0:", "1:", "2:", "3:", "4:"]);
    let greedy = ClearToolUses {
        trigger: Some(EditAmount::tokens(100)),
        keep: Some(EditAmount::tool_uses(4)),
        clear_at_least: Some(EditAmount::tokens(100_000)),
        ..ClearToolUses::default()
    };
    assert!(apply_edits(&conversation(5, greedy)).unwrap().1.is_empty());
    let inputs = ClearToolUses {
        trigger: Some(EditAmount::tokens(100)),
        keep: Some(EditAmount::tool_uses(1)),
        clear_tool_inputs: true,
        ..ClearToolUses::default()
    };
    let (cleared, _) = apply_edits(&conversation(3, inputs)).unwrap();
    let body = serde_json::to_value(&cleared).unwrap();
    assert_eq!(body["messages"][1]["content"][0]["input"], json!({}));
    assert_eq!(
        body["messages"][5]["content"][0]["input"],
        json!({"path": "file2"})
    );
    let untouched: Value = body["messages"][0].clone();
    assert_eq!(untouched, json!({"role": "user", "content": "start"}));
}

/// A compaction request needs its beta, and serialises as the API documents it.
#[test]
fn a_compaction_request_names_its_beta() {
    let mut request = conversation(0, ClearToolUses::default());
    request.context_management = None;
    request.compaction = Some(CompactionRequest::summarize(Some("Keep names.".into())));
    assert_eq!(betas_for(&request), vec!["compact-2026-09-04"]);
    let body = serde_json::to_value(&request).unwrap();
    assert_eq!(
        body["compaction"],
        json!({"type": "summarize", "instructions": "Keep names."})
    );
}

/// An iteration's writes without their own split, priced by the request's breakpoints: the last
/// tokens before the last breakpoint, span by span at the TTL closing each, any excess a
/// 5-minute write; an entry's own split wins; without breakpoints, all 5-minute.
#[test]
fn an_unsplit_iteration_is_priced_by_the_breakpoints() {
    use muninn_core::cache::Ttl;
    let with = |written: u64, split: Value| -> Usage {
        let mut entry = json!({"type": "compaction", "cache_creation_input_tokens": written});
        if !split.is_null() {
            entry["cache_creation"] = split;
        }
        serde_json::from_value(json!({"iterations": [entry]})).unwrap()
    };
    let breakpoints = [
        (1_000, Ttl::OneHour),
        (1_500, Ttl::OneHour),
        (1_800, Ttl::FiveMinutes),
    ];
    let writes = |u: CoreUsage| (u.cache_write_5m, u.cache_write_1h);
    let unsplit = with(700, Value::Null);
    assert_eq!(writes(unsplit.to_core_under(&breakpoints)), (300, 400));
    assert_eq!(writes(unsplit.to_core()), (700, 0));
    let past_the_prefix = with(2_000, Value::Null);
    assert_eq!(
        writes(past_the_prefix.to_core_under(&breakpoints)),
        (500, 1_500)
    );
    let split = json!({"ephemeral_5m_input_tokens": 700, "ephemeral_1h_input_tokens": 0});
    assert_eq!(
        writes(with(700, split).to_core_under(&breakpoints)),
        (700, 0)
    );
}
