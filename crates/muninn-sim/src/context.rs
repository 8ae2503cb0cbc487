//! The provider's own context tools, as the simulator answers them
//! (`shared/reference/anthropic-api-context-features.md`).
//!
//! # On-demand compaction (beta `compact-2026-09-04`)
//!
//! A request with a top-level `compaction: {"type": "summarize", "instructions": …}` is
//! answered with one block `{"type": "compaction", "content", "signature"}` and
//! `stop_reason: "compaction"`. The summary is the reply function's compaction text
//! ([`crate::reply::compaction_summary`]). Billing: the request reads and writes the cache as
//! any request would, and its output is the summary's tokens — all of it reported only in
//! `usage.iterations[]` as one `compaction` entry; the top-level counts are 0.
//!
//! Refused with a 400: without the beta; together with `context_management`; instructions
//! longer than 16,384 characters; a tool call still open (the last message is an assistant's
//! with a `tool_use`); `compaction_nothing_to_summarize` when no message follows the last
//! compaction block. A 529 `compaction_unavailable` is an injected fault
//! ([`crate::sim::FaultKind::CompactionUnavailable`]).
//!
//! A compaction block sent back must be the first block of an assistant message
//! (`compaction_block_misplaced`) and carry the simulator's signature of its content
//! (`compaction_signature_invalid` for a signature the simulator never made,
//! `compaction_content_mismatch` for a signature of other content). The provider ignores every
//! message before it: the simulator drops them before it shapes, bills and answers the request.
//!
//! # Tool-result clearing (beta `context-management-2025-06-27`)
//!
//! The edits are applied by [`muninn_anthropic::context::apply_edits`] — the same function the
//! backend predicts with — and laid over the request as sent ([`edited_body`]), which is then
//! shaped, billed and answered as cleared: the cache reads up to the first cleared block and
//! writes from it. The response carries `context_management.applied_edits[]`.
//!
//! # Thinking clearing (`clear_thinking_20251015`, same beta)
//!
//! Applied by the same function, and billed the same way: the thinking of all but the last
//! `keep` assistant turns is dropped, the cache reads up to the first dropped block and writes
//! from it, and the applied edit reports `cleared_thinking_turns` and `cleared_input_tokens`.
//! Refused unless listed first among the edits, or with a `keep` other than `"all"` or
//! `{"type": "thinking_turns", "value": N}`.
//!
//! # Threshold compaction (`compact_20260112`, beta `compact-2026-01-12`)
//!
//! When the prompt (after the other edits) is longer than the edit's `trigger` (default
//! 150,000 input tokens), the provider first summarises it — the simulator's compaction
//! summary, signed as an on-demand one — and the reply starts with that `compaction` block, for
//! the client to send back. With `pause_after_compaction` the reply is that block alone, with
//! `stop_reason: "compaction"`, billed exactly as an on-demand compaction (top level 0). Else
//! the model answers from the summary in the same request: the `message` pass's prompt is the
//! system, the tools and one assistant message holding the block — where the conversation's
//! last breakpoint moves, so the next request (which sends the block back) reads it — and its
//! reply is the model's answer to the request. Billing: `usage.iterations[]` holds a
//! `compaction` entry (the full prompt's read and write, the summary's output) and a `message`
//! entry (the compacted prompt's, the answer's output); the top-level counts are the `message`
//! entry's alone. Refused: without the beta, with a trigger below 50,000 input tokens or not
//! counted in `input_tokens`.

use crate::sim::ApiError;
use muninn_anthropic::wire::{
    CLEAR_THINKING, COMPACT, COMPACTION_BETA, CONTEXT_MANAGEMENT_BETA, CompactEdit, Content,
    ContentBlock, MAX_COMPACTION_INSTRUCTIONS_CHARS, MessagesRequest, Role,
    THRESHOLD_COMPACTION_BETA,
};
use muninn_core::cache::hash_bytes;
use serde_json::Value;

/// What the simulator's signatures are keyed with (a signature is not a secret here; it only
/// has to tell the simulator's own blocks from others).
const SIGNING_KEY: &str = "muninn-sim compaction v1";

/// The prefix of every signature the simulator makes.
const SIGNATURE_PREFIX: &str = "sig_sim_";

/// The signature of a compaction block's `content`.
pub fn sign(content: &str) -> String {
    let digest = hash_bytes(format!("{SIGNING_KEY}|{content}").as_bytes());
    format!("{SIGNATURE_PREFIX}{digest:016x}")
}

fn refuse(kind: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(400, kind, message)
}

/// Refuses a beta field sent without its beta header.
pub fn require_beta(betas: Option<&str>, beta: &str, field: &str) -> Result<(), ApiError> {
    if betas.is_some_and(|b| b.split(',').any(|b| b.trim() == beta)) {
        Ok(())
    } else {
        Err(refuse(
            "invalid_request_error",
            format!("{field}: requires the anthropic-beta header {beta}"),
        ))
    }
}

/// Checks every compaction block sent back, then drops the messages before the last one (in the
/// body and the typed request alike), as the provider ignores them. The body is `None` when no
/// message is dropped: it is read as it was sent (and need not be copied or mapped again).
pub fn receive_compactions(
    body: &Value,
    request: MessagesRequest,
) -> Result<(Option<Value>, MessagesRequest), ApiError> {
    let mut last = None;
    for (i, message) in request.messages.iter().enumerate() {
        let Content::Blocks(blocks) = &message.content else {
            continue;
        };
        for (j, block) in blocks.iter().enumerate() {
            if let ContentBlock::Compaction {
                content, signature, ..
            } = block
            {
                if message.role != Role::Assistant || j != 0 {
                    return Err(refuse(
                        "compaction_block_misplaced",
                        format!(
                            "messages.{i}.content.{j}: a compaction block must be the first block of an assistant message"
                        ),
                    ));
                }
                check_signature(content, signature, i)?;
                last = Some(i);
            }
        }
    }
    let Some(from) = last.filter(|&i| i > 0) else {
        return Ok((None, request));
    };
    let mut body = body.clone();
    if let Some(Value::Array(messages)) = body.get_mut("messages") {
        messages.drain(..from);
    }
    let mut request = request;
    request.messages.drain(..from);
    Ok((Some(body), request))
}

fn check_signature(content: &str, signature: &str, index: usize) -> Result<(), ApiError> {
    let ours = signature
        .strip_prefix(SIGNATURE_PREFIX)
        .is_some_and(|hex| hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()));
    if !ours {
        return Err(refuse(
            "compaction_signature_invalid",
            format!("messages.{index}.content.0.signature: not a valid compaction signature"),
        ));
    }
    if sign(content) != signature {
        return Err(refuse(
            "compaction_content_mismatch",
            format!("messages.{index}.content.0: the content does not match its signature"),
        ));
    }
    Ok(())
}

/// Refuses a compaction request the API refuses (see the module docs). `request` is the
/// request after [`receive_compactions`].
pub fn check_compaction(request: &MessagesRequest, betas: Option<&str>) -> Result<(), ApiError> {
    let Some(compaction) = &request.compaction else {
        return Ok(());
    };
    require_beta(betas, COMPACTION_BETA, "compaction")?;
    if compaction.kind != "summarize" {
        return Err(refuse(
            "invalid_request_error",
            "compaction.type: Input should be 'summarize'",
        ));
    }
    if request.context_management.is_some() {
        return Err(refuse(
            "invalid_request_error",
            "compaction: cannot be combined with context_management",
        ));
    }
    if compaction
        .instructions
        .as_ref()
        .is_some_and(|i| i.chars().count() > MAX_COMPACTION_INSTRUCTIONS_CHARS)
    {
        return Err(refuse(
            "invalid_request_error",
            format!(
                "compaction.instructions: at most {MAX_COMPACTION_INSTRUCTIONS_CHARS} characters"
            ),
        ));
    }
    let turns: Vec<_> = request
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .collect();
    let new_content = turns.iter().any(|m| match &m.content {
        Content::Text(t) => !t.is_empty(),
        Content::Blocks(b) => b
            .iter()
            .any(|b| !matches!(b, ContentBlock::Compaction { .. })),
    });
    if !new_content {
        return Err(refuse(
            "compaction_nothing_to_summarize",
            "compaction: there is nothing new to summarize since the last compaction",
        ));
    }
    if let Some(last) = turns.last()
        && last.role == Role::Assistant
        && let Content::Blocks(blocks) = &last.content
        && let Some(id) = blocks.iter().find_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id),
            _ => None,
        })
    {
        return Err(refuse(
            "invalid_request_error",
            format!(
                "compaction: tool call {id} is still open; send its tool_result before compacting"
            ),
        ));
    }
    Ok(())
}

/// Refuses `context_management` edits the API refuses (see the module docs), and
/// `max_tokens: 0` where the API refuses it (with streaming or extended thinking).
pub fn check_fields(
    body: &Value,
    request: &MessagesRequest,
    betas: Option<&str>,
) -> Result<(), ApiError> {
    if request.context_management.is_some() {
        check_edits(body, betas)?;
    }
    if request.max_tokens == 0 {
        let thinking = body
            .get("thinking")
            .and_then(|t| t.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t != "disabled");
        if request.stream || thinking {
            return Err(refuse(
                "invalid_request_error",
                "max_tokens: 0 is only allowed without streaming and without extended thinking",
            ));
        }
    }
    Ok(())
}

/// Checks the raw `context_management.edits` (the raw body, so that an error names the field
/// even where the typed request kept a malformed edit verbatim): each edit's beta — the
/// threshold-compaction beta for `compact_20260112`, the context-management beta for any
/// other, and for an empty list — then `clear_thinking_20251015` first and its `keep`, and a
/// compaction's `trigger`.
fn check_edits(body: &Value, betas: Option<&str>) -> Result<(), ApiError> {
    let empty = Vec::new();
    let edits = body
        .pointer("/context_management/edits")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    if edits.is_empty() {
        require_beta(betas, CONTEXT_MANAGEMENT_BETA, "context_management")?;
    }
    for (i, edit) in edits.iter().enumerate() {
        let at = format!("context_management.edits.{i}");
        let kind = edit.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind == COMPACT {
            require_beta(betas, THRESHOLD_COMPACTION_BETA, &at)?;
            check_trigger(edit, &at)?;
            continue;
        }
        require_beta(betas, CONTEXT_MANAGEMENT_BETA, &at)?;
        if kind == CLEAR_THINKING {
            if i != 0 {
                return Err(refuse(
                    "invalid_request_error",
                    format!("{at}: {CLEAR_THINKING} must be the first edit"),
                ));
            }
            check_keep(edit, &at)?;
        }
    }
    Ok(())
}

fn check_keep(edit: &Value, at: &str) -> Result<(), ApiError> {
    let ok = match edit.get("keep") {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s == "all",
        Some(keep) => {
            keep.get("type").and_then(Value::as_str) == Some("thinking_turns")
                && keep.get("value").is_some_and(Value::is_u64)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(refuse(
            "invalid_request_error",
            format!(
                "{at}.keep: Input should be 'all' or {{\"type\": \"thinking_turns\", \"value\": N}}"
            ),
        ))
    }
}

fn check_trigger(edit: &Value, at: &str) -> Result<(), ApiError> {
    let Some(trigger) = edit.get("trigger").filter(|t| !t.is_null()) else {
        return Ok(());
    };
    if trigger.get("type").and_then(Value::as_str) != Some("input_tokens") {
        return Err(refuse(
            "invalid_request_error",
            format!("{at}.trigger.type: Input should be 'input_tokens'"),
        ));
    }
    match trigger.get("value").and_then(Value::as_u64) {
        Some(v) if v >= CompactEdit::MIN_TRIGGER => Ok(()),
        _ => Err(refuse(
            "invalid_request_error",
            format!(
                "{at}.trigger.value: must be an integer of at least {} input tokens",
                CompactEdit::MIN_TRIGGER
            ),
        )),
    }
}

/// `body` as the provider reads it once the context edits turned `before` (its typed reading)
/// into `after`: the edits laid over the JSON as sent, not `after` re-serialised, since the typed
/// request drops the fields it does not name (a text block's `citations`) and those are part of
/// the prompt the provider reads and caches. A message the edits left alone keeps its JSON; in
/// one they changed, a block rewritten in place (a cleared result's `content`, a call's `input`)
/// keeps its other fields, and a dropped block (thinking) is dropped.
pub fn edited_body(
    body: &Value,
    before: &MessagesRequest,
    after: &MessagesRequest,
) -> Result<Value, ApiError> {
    let internal = |e: serde_json::Error| ApiError::new(500, "api_error", e.to_string());
    let mut body = body.clone();
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return Ok(body);
    };
    for ((raw, old), new) in messages
        .iter_mut()
        .zip(&before.messages)
        .zip(&after.messages)
    {
        if old == new {
            continue;
        }
        let (
            Content::Blocks(old_blocks),
            Content::Blocks(new_blocks),
            Some(Value::Array(raw_blocks)),
        ) = (&old.content, &new.content, raw.get_mut("content"))
        else {
            continue;
        };
        let mut kept = Vec::with_capacity(new_blocks.len());
        let mut next = new_blocks.iter().peekable();
        for (raw_block, old_block) in raw_blocks.iter().zip(old_blocks) {
            let Some(&new_block) = next.peek() else { break };
            if new_block == old_block {
                kept.push(raw_block.clone());
            } else if same_block(old_block, new_block) {
                let mut merged = raw_block.clone();
                if let (Value::Object(fields), Value::Object(rewritten)) = (
                    &mut merged,
                    serde_json::to_value(new_block).map_err(internal)?,
                ) {
                    fields.extend(rewritten);
                }
                kept.push(merged);
            } else {
                // Dropped by the edit: the next block of `after` is a later one's.
                continue;
            }
            next.next();
        }
        *raw_blocks = kept;
    }
    Ok(body)
}

/// Whether `after` is `before` rewritten in place (the same call, or the same call's result).
fn same_block(before: &ContentBlock, after: &ContentBlock) -> bool {
    match (before, after) {
        (ContentBlock::ToolUse { id: a, .. }, ContentBlock::ToolUse { id: b, .. }) => a == b,
        (
            ContentBlock::ToolResult { tool_use_id: a, .. },
            ContentBlock::ToolResult { tool_use_id: b, .. },
        ) => a == b,
        _ => false,
    }
}

/// The signed block a compaction answers with: the simulator's summary of `request`.
pub fn compaction_block(request: &MessagesRequest) -> ContentBlock {
    let summary = crate::reply::compaction_summary(request);
    ContentBlock::Compaction {
        signature: sign(&summary),
        content: summary,
        extra: serde_json::Map::new(),
    }
}

/// The body of a threshold compaction's `message` pass (see the module docs): `body` with its
/// messages replaced by one assistant message holding `block`, which carries the `cache_control`
/// of the conversation's last breakpoint, if any.
pub fn compacted_body(body: &Value, block: &ContentBlock) -> Result<Value, ApiError> {
    let internal = |e: serde_json::Error| ApiError::new(500, "api_error", e.to_string());
    let mut block = serde_json::to_value(block).map_err(internal)?;
    let last_breakpoint = body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .filter_map(|b| b.get("cache_control"))
        .rfind(|c| !c.is_null());
    if let (Some(cc), Value::Object(fields)) = (last_breakpoint, &mut block) {
        fields.insert("cache_control".to_string(), cc.clone());
    }
    let mut body = body.clone();
    if let Value::Object(fields) = &mut body {
        fields.insert(
            "messages".to_string(),
            serde_json::json!([{"role": "assistant", "content": [block]}]),
        );
    }
    Ok(body)
}
