//! The simulator refuses what the Messages API refuses, with the API's error shape, so a client
//! tested against it is not tested against something more lenient than the real thing.
//!
//! Checked here (beyond the mapping's own field errors): top-level fields the API does not know
//! ("Extra inputs are not permitted"); `max_tokens` above the most any model writes; `temperature`
//! and `top_p` outside [0, 1], `top_k` below 0; a `system` role inside `messages` without the
//! beta that allows it; an empty text block (with or without `cache_control`); a prompt longer
//! than the model's context window. The body's size is bounded by the server
//! ([`MAX_BODY_BYTES`], answered 413 `request_too_large` like the API).

use crate::sim::ApiError;
use muninn_anthropic::wire::{Content, ContentBlock, MessagesRequest, Role, System};
use serde_json::Value;

/// The largest request body the API accepts: 32 MB.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The most output tokens any current model writes in one reply; the API refuses more.
pub const MAX_OUTPUT_TOKENS: u64 = 128_000;

/// The beta that allows `system` messages inside `messages` (Claude Code's per-turn control).
const SYSTEM_MESSAGES_BETA: &str = "per-turn-control-2026-07-01";

/// The request body's top-level fields the API knows.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "cache_control",
    "stream",
    "metadata",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "thinking",
    "service_tier",
    "context_management",
    "output_config",
    "container",
    "mcp_servers",
    "diagnostics",
    "compaction",
];

fn refuse(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "invalid_request_error", message)
}

/// Refuses what the API would refuse in a messages request whose prompt is `prompt_tokens` long,
/// sent with the `anthropic-beta` header `betas`, to a model with `context_window` tokens.
pub fn check(
    body: &Value,
    request: &MessagesRequest,
    betas: Option<&str>,
    prompt_tokens: u64,
    context_window: u64,
) -> Result<(), ApiError> {
    if let Some(fields) = body.as_object()
        && let Some(field) = fields.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str()))
    {
        return Err(refuse(format!("{field}: Extra inputs are not permitted")));
    }
    if request.max_tokens > MAX_OUTPUT_TOKENS {
        return Err(refuse(format!(
            "max_tokens: {} > {MAX_OUTPUT_TOKENS}, which is the maximum allowed number of output tokens for {}",
            request.max_tokens, request.model
        )));
    }
    check_sampling(body)?;
    let allows_system =
        betas.is_some_and(|b| b.split(',').any(|b| b.trim() == SYSTEM_MESSAGES_BETA));
    for (i, message) in request.messages.iter().enumerate() {
        if message.role == Role::System && !allows_system {
            return Err(refuse(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            )));
        }
        if let Content::Blocks(blocks) = &message.content
            && blocks.iter().any(empty_text)
        {
            return Err(refuse(format!(
                "messages.{i}: text content blocks must be non-empty"
            )));
        }
    }
    if let Some(System::Blocks(blocks)) = &request.system
        && blocks.iter().any(empty_text)
    {
        return Err(refuse("system: text content blocks must be non-empty"));
    }
    if prompt_tokens > context_window {
        return Err(refuse(format!(
            "prompt is too long: {prompt_tokens} tokens > {context_window} maximum"
        )));
    }
    Ok(())
}

fn empty_text(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Text { text, .. } if text.is_empty())
}

fn check_sampling(body: &Value) -> Result<(), ApiError> {
    for field in ["temperature", "top_p"] {
        if let Some(v) = body.get(field) {
            match v.as_f64() {
                Some(x) if (0.0..=1.0).contains(&x) => {}
                _ => {
                    return Err(refuse(format!(
                        "{field}: Input should be less than or equal to 1 and greater than or equal to 0"
                    )));
                }
            }
        }
    }
    if let Some(v) = body.get("top_k")
        && v.as_u64().is_none()
    {
        return Err(refuse("top_k: Input should be greater than or equal to 0"));
    }
    Ok(())
}

/// The API's pairing rule: every `tool_use` of an assistant message is answered by a
/// `tool_result` in the next message, and every `tool_result` answers a `tool_use` of the
/// assistant message before it. Messages with `role: "system"` (the CLI's) are skipped. The
/// wording is the API's 400.
pub(crate) fn check_tool_pairing(request: &MessagesRequest) -> Result<(), ApiError> {
    use muninn_anthropic::wire::{Content, ContentBlock, Role};
    let blocks = |c: &Content| -> Vec<ContentBlock> {
        match c {
            Content::Text(_) => Vec::new(),
            Content::Blocks(b) => b.clone(),
        }
    };
    let turns: Vec<(usize, &muninn_anthropic::wire::Message)> = request
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role != Role::System)
        .collect();
    let mut open: Vec<String> = Vec::new();
    for (index, message) in turns {
        let content = blocks(&message.content);
        match message.role {
            Role::Assistant => {
                if !open.is_empty() {
                    return Err(ApiError::new(
                        400,
                        "invalid_request_error",
                        format!(
                            "messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                            open.join(", ")
                        ),
                    ));
                }
                open = content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolUse { id, .. } => Some(id.clone()),
                        _ => None,
                    })
                    .collect();
            }
            Role::User | Role::System => {
                let mut answered = Vec::new();
                for (j, b) in content.iter().enumerate() {
                    if let ContentBlock::ToolResult { tool_use_id, .. } = b {
                        if !open.contains(tool_use_id) {
                            return Err(ApiError::new(
                                400,
                                "invalid_request_error",
                                format!(
                                    "messages.{index}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {tool_use_id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                                ),
                            ));
                        }
                        answered.push(tool_use_id.clone());
                    }
                }
                let missing: Vec<String> = open
                    .iter()
                    .filter(|id| !answered.contains(id))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    return Err(ApiError::new(
                        400,
                        "invalid_request_error",
                        format!(
                            "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                            index.saturating_sub(1),
                            missing.join(", ")
                        ),
                    ));
                }
                open.clear();
            }
        }
    }
    Ok(())
}
