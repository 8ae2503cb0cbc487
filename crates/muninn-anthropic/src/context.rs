//! The provider's context edits, applied as the provider applies them. One function for both
//! sides, as [`crate::prompt::shape`] is: the simulator applies the edits to the prompt it
//! bills, and the backend predicts its cache from the very prompt the provider will read.
//!
//! # Tool-result clearing (`clear_tool_uses_20250919`)
//!
//! Once the prompt (as [`crate::prompt::shape`] counts it) reaches the edit's trigger, the
//! results of every tool use but the last `keep` (and but those of `exclude_tools`) are
//! replaced by [`CLEARED_PLACEHOLDER`] — and with `clear_tool_inputs` the calls' inputs by
//! `{}`. If that frees fewer than `clear_at_least` tokens, nothing is cleared. The clear
//! rewrites the prompt from the first cleared block on, so the cache reads up to that block and
//! writes from it: every clear is a new cache write.
//!
//! # Thinking clearing (`clear_thinking_20251015`)
//!
//! Every assistant message that holds thinking blocks is one thinking turn (the simulator does
//! not join the messages of a tool loop into one turn). The thinking blocks (`thinking` and
//! `redacted_thinking`) of all turns but the last `keep` are dropped; `keep: "all"` drops none.
//! There is no trigger: the edit applies whenever there is older thinking to drop. A message
//! left with no block keeps its thinking (the API refuses an empty message). Like a tool-result
//! clear, dropping a block rewrites the prompt from it on.
//!
//! # Threshold compaction (`compact_20260112`)
//!
//! Not a change to the prompt but a pass of its own, so [`apply_edits`] leaves it alone;
//! [`compaction_due`] says whether the prompt after the other edits passes its trigger.

use crate::prompt::{PromptShape, ShapeError, shape};
use crate::wire::{
    AppliedEdit, CLEAR_THINKING, CLEAR_TOOL_USES, COMPACTION_BETA, CONTEXT_MANAGEMENT_BETA,
    ClearThinking, ClearToolUses, CompactEdit, Content, ContentBlock, ContextEdit, MessagesRequest,
    Role, THRESHOLD_COMPACTION_BETA,
};
use muninn_core::money::Tokens;
use serde_json::Value;

/// What a cleared tool result says instead.
pub const CLEARED_PLACEHOLDER: &str = "[tool result cleared]";

/// The betas a request needs beyond the client's configured ones: the compaction beta for a
/// top-level `compaction`, the threshold-compaction beta for a `compact_20260112` edit, and
/// the context-management beta for `context_management` with any other edit (or none).
pub fn betas_for(request: &MessagesRequest) -> Vec<&'static str> {
    let mut betas = Vec::new();
    if request.compaction.is_some() {
        betas.push(COMPACTION_BETA);
    }
    if let Some(cm) = &request.context_management {
        let compact = |e: &ContextEdit| matches!(e, ContextEdit::Compact(_));
        if cm.edits.iter().any(compact) {
            betas.push(THRESHOLD_COMPACTION_BETA);
        }
        if cm.edits.is_empty() || !cm.edits.iter().all(compact) {
            betas.push(CONTEXT_MANAGEMENT_BETA);
        }
    }
    betas
}

/// The request's `compact_20260112` edit, when a prompt of `prompt_tokens` (after the other
/// edits) passes its trigger.
pub fn compaction_due(request: &MessagesRequest, prompt_tokens: u64) -> Option<&CompactEdit> {
    request
        .context_management
        .as_ref()?
        .edits
        .iter()
        .find_map(|e| match e {
            ContextEdit::Compact(c) => Some(c),
            _ => None,
        })
        .filter(|c| prompt_tokens > c.trigger_tokens())
}

/// The request the model reads after the request's `context_management` edits, and the edits
/// applied (an edit whose trigger was not reached, or that would clear too little, is not).
/// Edits this crate does not know are left unapplied.
pub fn apply_edits(
    request: &MessagesRequest,
) -> Result<(MessagesRequest, Vec<AppliedEdit>), ShapeError> {
    let mut current = request.clone();
    let mut applied = Vec::new();
    let edits = request
        .context_management
        .as_ref()
        .map(|c| c.edits.clone())
        .unwrap_or_default();
    for edit in &edits {
        let done = match edit {
            ContextEdit::ClearToolUses(clear) => clear_tool_uses(&current, clear)?,
            ContextEdit::ClearThinking(clear) => clear_thinking(&current, clear)?,
            _ => None,
        };
        if let Some((cleared, done)) = done {
            current = cleared;
            applied.push(done);
        }
    }
    Ok((current, applied))
}

/// The prompt tokens of a request, as the cache model counts them.
fn prompt_tokens(request: &MessagesRequest) -> Result<u64, ShapeError> {
    let body = serde_json::to_value(request).map_err(|_| ShapeError::NotAnObject)?;
    Ok(shape(&body)?.total_tokens)
}

/// One `clear_tool_uses_20250919` edit (see the module docs): the cleared request and what was
/// cleared, or `None` when the edit does not apply.
pub fn clear_tool_uses(
    request: &MessagesRequest,
    edit: &ClearToolUses,
) -> Result<Option<(MessagesRequest, AppliedEdit)>, ShapeError> {
    let before = prompt_tokens(request)?;
    if before < edit.trigger_tokens() {
        return Ok(None);
    }
    let uses: Vec<(String, String)> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| blocks(&m.content))
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, .. } => Some((id.clone(), name.clone())),
            _ => None,
        })
        .collect();
    let keep = usize::try_from(edit.keep_uses()).unwrap_or(usize::MAX);
    let clearable: Vec<&str> = uses
        .iter()
        .take(uses.len().saturating_sub(keep))
        .filter(|(_, name)| !edit.exclude_tools.contains(name))
        .map(|(id, _)| id.as_str())
        .collect();
    let mut cleared = request.clone();
    let mut count = 0;
    for message in &mut cleared.messages {
        let Content::Blocks(blocks) = &mut message.content else {
            continue;
        };
        for block in blocks {
            match block {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } if clearable.contains(&tool_use_id.as_str())
                    && content.as_ref().and_then(Value::as_str) != Some(CLEARED_PLACEHOLDER) =>
                {
                    *content = Some(Value::String(CLEARED_PLACEHOLDER.to_string()));
                    count += 1;
                }
                ContentBlock::ToolUse { id, input, .. }
                    if edit.clear_tool_inputs && clearable.contains(&id.as_str()) =>
                {
                    *input = Value::Object(serde_json::Map::new());
                }
                _ => {}
            }
        }
    }
    if count == 0 {
        return Ok(None);
    }
    let freed = before.saturating_sub(prompt_tokens(&cleared)?);
    if freed < edit.at_least_tokens() {
        return Ok(None);
    }
    Ok(Some((
        cleared,
        AppliedEdit {
            kind: CLEAR_TOOL_USES.to_string(),
            cleared_tool_uses: count,
            cleared_thinking_turns: 0,
            cleared_input_tokens: freed,
        },
    )))
}

fn is_thinking(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Thinking { .. } => true,
        ContentBlock::Unknown(v) => {
            v.get("type").and_then(Value::as_str) == Some("redacted_thinking")
        }
        _ => false,
    }
}

/// One `clear_thinking_20251015` edit (see the module docs): the request with the thinking of
/// older turns dropped and what was cleared, or `None` when there is nothing to drop.
pub fn clear_thinking(
    request: &MessagesRequest,
    edit: &ClearThinking,
) -> Result<Option<(MessagesRequest, AppliedEdit)>, ShapeError> {
    let Some(keep) = edit.kept_turns() else {
        return Ok(None);
    };
    // The turns that can lose their thinking: assistant messages with thinking and something
    // else besides (an emptied message would be refused).
    let turns: Vec<usize> = request
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant && blocks(&m.content).iter().any(is_thinking))
        .map(|(i, _)| i)
        .collect();
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    let mut cleared = request.clone();
    let mut count = 0;
    for &i in turns.iter().take(turns.len().saturating_sub(keep)) {
        if let Content::Blocks(b) = &mut cleared.messages[i].content
            && !b.iter().all(is_thinking)
        {
            b.retain(|block| !is_thinking(block));
            count += 1;
        }
    }
    if count == 0 {
        return Ok(None);
    }
    let freed = prompt_tokens(request)?.saturating_sub(prompt_tokens(&cleared)?);
    Ok(Some((
        cleared,
        AppliedEdit {
            kind: CLEAR_THINKING.to_string(),
            cleared_tool_uses: 0,
            cleared_thinking_turns: count,
            cleared_input_tokens: freed,
        },
    )))
}

/// The tokens a clear left as they were: those of the blocks `uncleared` and `cleared` share
/// from the start (the prompt is rewritten from the next block on).
pub fn kept_tokens(uncleared: &PromptShape, cleared: &PromptShape) -> Tokens {
    let shared = uncleared
        .checkpoints
        .iter()
        .zip(&cleared.checkpoints)
        .take_while(|(a, b)| a.fingerprint == b.fingerprint)
        .count();
    shared
        .checked_sub(1)
        .and_then(|i| uncleared.checkpoints.get(i))
        .map_or(0, |c| c.tokens)
}

fn blocks(content: &Content) -> &[ContentBlock] {
    match content {
        Content::Text(_) => &[],
        Content::Blocks(b) => b,
    }
}
