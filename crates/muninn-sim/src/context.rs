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
//! backend predicts with — and the request is then shaped, billed and answered as cleared: the
//! cache reads up to the first cleared block and writes from it. The response carries
//! `context_management.applied_edits[]`.

use crate::sim::ApiError;
use muninn_anthropic::wire::{
    COMPACTION_BETA, CONTEXT_MANAGEMENT_BETA, Content, ContentBlock,
    MAX_COMPACTION_INSTRUCTIONS_CHARS, MessagesRequest, Role,
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
/// body and the typed request alike), as the provider ignores them.
pub fn receive_compactions(
    body: &Value,
    request: MessagesRequest,
) -> Result<(Value, MessagesRequest), ApiError> {
    let mut last = None;
    for (i, message) in request.messages.iter().enumerate() {
        let Content::Blocks(blocks) = &message.content else {
            continue;
        };
        for (j, block) in blocks.iter().enumerate() {
            if let ContentBlock::Compaction { content, signature } = block {
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
        return Ok((body.clone(), request));
    };
    let mut body = body.clone();
    if let Some(Value::Array(messages)) = body.get_mut("messages") {
        messages.drain(..from);
    }
    let mut request = request;
    request.messages.drain(..from);
    Ok((body, request))
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

/// Refuses `context_management` without its beta, and `max_tokens: 0` where the API refuses
/// it (with streaming or extended thinking).
pub fn check_fields(
    body: &Value,
    request: &MessagesRequest,
    betas: Option<&str>,
) -> Result<(), ApiError> {
    if request.context_management.is_some() {
        require_beta(betas, CONTEXT_MANAGEMENT_BETA, "context_management")?;
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
