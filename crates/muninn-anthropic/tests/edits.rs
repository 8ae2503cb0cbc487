//! The edits added beside tool-result clearing: thinking clearing (`clear_thinking_20251015`)
//! and threshold compaction (`compact_20260112`) typed on the wire, unknown edits still kept
//! verbatim, the betas each needs, and thinking clearing applied as the provider applies it.

use muninn_anthropic::context::{apply_edits, betas_for, compaction_due, kept_tokens};
use muninn_anthropic::prompt::shape;
use muninn_anthropic::wire::{
    ClearThinking, CompactEdit, Content, ContentBlock, ContextEdit, ContextManagementRequest,
    EditAmount, MessagesRequest, ThinkingKeep,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn edits(v: Value) -> Vec<ContextEdit> {
    serde_json::from_value::<ContextManagementRequest>(json!({"edits": v}))
        .unwrap()
        .edits
}

/// Both edits decode typed, with their defaults, and serialise back as sent; an edit this
/// crate does not know stays verbatim.
#[test]
fn the_new_edits_are_typed_and_unknown_ones_kept() {
    let sent = json!([
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
        {"type": "clear_thinking_20251015", "keep": "all"},
        {"type": "clear_thinking_20251015"},
        {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 80000},
         "pause_after_compaction": true, "instructions": "Keep the names."},
        {"type": "compact_20260112"},
        {"type": "clear_everything_20990101", "how": "fast"}
    ]);
    let decoded = edits(sent.clone());
    assert_eq!(
        decoded,
        vec![
            ContextEdit::ClearThinking(ClearThinking {
                keep: Some(ThinkingKeep::turns(2))
            }),
            ContextEdit::ClearThinking(ClearThinking {
                keep: Some(serde_json::from_value(json!("all")).unwrap())
            }),
            ContextEdit::ClearThinking(ClearThinking::default()),
            ContextEdit::Compact(CompactEdit {
                trigger: Some(EditAmount::tokens(80_000)),
                pause_after_compaction: true,
                instructions: Some("Keep the names.".to_string()),
            }),
            ContextEdit::Compact(CompactEdit::default()),
            ContextEdit::Unknown(json!({"type": "clear_everything_20990101", "how": "fast"})),
        ]
    );
    assert_eq!(serde_json::to_value(&decoded).unwrap(), sent);
    let kept: Vec<Option<u64>> = decoded
        .iter()
        .filter_map(|e| match e {
            ContextEdit::ClearThinking(c) => Some(c.kept_turns()),
            _ => None,
        })
        .collect();
    assert_eq!(kept, vec![Some(2), None, Some(1)]);
    assert_eq!(CompactEdit::default().trigger_tokens(), 150_000);
}

fn request(edits_json: Value) -> MessagesRequest {
    let turn = |n: usize| {
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": format!("step {n}: ").repeat(200), "signature": "s"},
            {"type": "text", "text": format!("answer {n}")}
        ]})
    };
    serde_json::from_value(json!({
        "model": "claude-opus-5-5", "max_tokens": 100,
        "system": [{"type": "text", "text": "You think.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "one"}, turn(1),
            {"role": "user", "content": "two"}, turn(2),
            {"role": "user", "content": "three"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "alone", "signature": "s"}]},
            {"role": "user", "content": "four"}, turn(3),
            {"role": "user", "content": "five"}
        ],
        "context_management": {"edits": edits_json}
    }))
    .unwrap()
}

fn thinking_left(request: &MessagesRequest) -> Vec<usize> {
    request
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| match &m.content {
            Content::Blocks(b) => b.iter().any(|b| matches!(b, ContentBlock::Thinking { .. })),
            Content::Text(_) => false,
        })
        .map(|(i, _)| i)
        .collect()
}

use crate::context::tokens;

/// Thinking clearing keeps the last `keep` turns' thinking, never empties a message, reports
/// the turns and the tokens the cache model counts, and rewrites the prompt from the first
/// dropped block; `"all"` clears nothing.
#[test]
fn thinking_clearing_keeps_the_latest_turns() {
    let sent = request(json!([{"type": "clear_thinking_20251015",
        "keep": {"type": "thinking_turns", "value": 2}}]));
    let (read, applied) = apply_edits(&sent).unwrap();
    // Turns with thinking: messages 1, 3, 5 (thinking alone: kept) and 7; the last two kept.
    assert_eq!(thinking_left(&sent), vec![1, 3, 5, 7]);
    assert_eq!(thinking_left(&read), vec![5, 7]);
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0].kind, "clear_thinking_20251015");
    assert_eq!(applied[0].cleared_thinking_turns, 2);
    assert_eq!(applied[0].cleared_tool_uses, 0);
    assert_eq!(
        applied[0].cleared_input_tokens,
        tokens(&sent) - tokens(&read)
    );
    assert!(applied[0].cleared_input_tokens > 500);
    let before = shape(&serde_json::to_value(&sent).unwrap()).unwrap();
    let after = shape(&serde_json::to_value(&read).unwrap()).unwrap();
    // Kept: the system and the first user message, up to the first dropped block.
    assert_eq!(kept_tokens(&before, &after), before.checkpoints[1].tokens);
    assert_eq!(
        serde_json::to_value(&applied[0]).unwrap(),
        json!({"type": "clear_thinking_20251015", "cleared_thinking_turns": 2,
            "cleared_input_tokens": applied[0].cleared_input_tokens})
    );

    let all = request(json!([{"type": "clear_thinking_20251015", "keep": "all"}]));
    let (read, applied) = apply_edits(&all).unwrap();
    assert!(applied.is_empty());
    assert_eq!(thinking_left(&read), vec![1, 3, 5, 7]);
}

/// Each edit names its own beta: threshold compaction alone needs only its own.
#[test]
fn each_edit_names_its_beta() {
    let compact = json!({"type": "compact_20260112"});
    let thinking = json!({"type": "clear_thinking_20251015"});
    assert_eq!(
        betas_for(&request(json!([compact.clone()]))),
        vec!["compact-2026-01-12"]
    );
    assert_eq!(
        betas_for(&request(json!([thinking.clone(), compact]))),
        vec!["compact-2026-01-12", "context-management-2025-06-27"]
    );
    assert_eq!(
        betas_for(&request(json!([thinking]))),
        vec!["context-management-2025-06-27"]
    );
    assert_eq!(
        betas_for(&request(json!([]))),
        vec!["context-management-2025-06-27"]
    );
}

/// A threshold compaction is due past its trigger, not at it.
#[test]
fn a_compaction_is_due_past_its_trigger() {
    let sent = request(json!([{"type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 50000}}]));
    assert_eq!(compaction_due(&sent, 50_000), None);
    assert_eq!(
        compaction_due(&sent, 50_001).map(CompactEdit::trigger_tokens),
        Some(50_000)
    );
    assert_eq!(compaction_due(&request(json!([])), 1_000_000), None);
}
