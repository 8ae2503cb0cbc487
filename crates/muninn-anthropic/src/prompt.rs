//! A Messages API request as the cache model sees it: the one mapping from a request body to
//! [`muninn_core::cache`] checkpoints, shared by the simulator (which reports usage from it) and by
//! muninn's client and ledger (which predict usage from it), so that both predict identically.
//!
//! # The mapping
//!
//! - **Blocks, in cache-hierarchy order**: each tool definition, then each system block (a string
//!   system prompt is one text block), then each content block of each message in order (a string
//!   content is one text block). A message with no blocks adds nothing.
//! - **Tokens** ([`muninn_core::tokenize::count`]): a text block counts its `text`; any other block
//!   (tool definition, `tool_use`, `tool_result`, image, thinking, unknown) counts its canonical
//!   JSON (below) without `cache_control`. The prompt's total is the sum over its blocks.
//! - **Identity**: a block's content hash is over its canonical JSON without `cache_control`,
//!   with the section (and for messages the role, `tool_choice`, `thinking` and
//!   `output_config.effort` of the request) folded in. So moving a marker never changes the
//!   prefix, and a string content equals the same text as a one-block array — exactly the two
//!   changes the Claude Code CLI makes between consecutive requests. A change of `tool_choice`,
//!   `thinking` or the effort invalidates the messages but not tools or system, as the API
//!   documents.
//! - **Canonical JSON**: object keys sorted, no whitespace, strings escaped as `serde_json` does.
//!   It does not depend on the order the client wrote the keys in.
//! - **Breakpoints**: a block's `cache_control` (`{"type":"ephemeral"}` is 5m; `"ttl":"5m"` or
//!   `"1h"`). A top-level `cache_control` (automatic caching) puts a breakpoint on the last block
//!   of the prompt; if that block already carries one, the explicit marker stands and no second
//!   slot is used.
//!
//! Limits (≤ 4 breakpoints, 1h before 5m) are checked by the cache model itself
//! ([`muninn_core::cache::CacheError`]), whose messages are the API's 400 wording.

use muninn_core::cache::{Checkpoint, Prompt, Ttl, checkpoints_from_blocks, hash_bytes};
/// Appends the canonical JSON of `v` (sorted keys, no whitespace) to `out`: the cache model's
/// own, which also counts what a tool-result clear removes, so that a block is fingerprinted
/// and counted from one text.
pub use muninn_core::mask::canonical;
use muninn_core::miss::Level;
use muninn_core::money::Tokens;
use muninn_core::tokenize;
use serde_json::{Map, Value};

/// A request the mapping cannot read; each message names the field as the API's
/// `invalid_request_error` does. Not retryable: the request must be fixed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The body is not a JSON object.
    #[error("request body must be a JSON object")]
    NotAnObject,
    /// A required field is missing.
    #[error("{0}: Field required")]
    Missing(&'static str),
    /// A field has the wrong shape.
    #[error("{path}: {message}")]
    Invalid {
        /// Where, e.g. `messages.2.content.0.cache_control.ttl`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A request mapped for the cache model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptShape {
    /// The model (the cache is per model).
    pub model: String,
    /// One checkpoint per block, in order.
    pub checkpoints: Vec<Checkpoint>,
    /// All prompt tokens.
    pub total_tokens: Tokens,
    /// How many of the blocks are tool definitions (they come first).
    pub tool_blocks: usize,
    /// How many blocks of the system prompt follow them.
    pub system_blocks: usize,
}

impl PromptShape {
    /// The view the cache model takes.
    pub fn prompt(&self) -> Prompt<'_> {
        Prompt {
            model: &self.model,
            checkpoints: &self.checkpoints,
            total_tokens: self.total_tokens,
        }
    }

    /// The TTLs of the breakpoints, in order.
    pub fn breakpoints(&self) -> Vec<Ttl> {
        self.checkpoints
            .iter()
            .filter_map(|c| c.breakpoint)
            .collect()
    }

    /// Tokens up to and including the last breakpoint (0 without one).
    pub fn prefix_tokens(&self) -> Tokens {
        self.checkpoints
            .iter()
            .rev()
            .find(|c| c.breakpoint.is_some())
            .map_or(0, |c| c.tokens)
    }
}

/// A block as [`checkpoints_from_blocks`] takes it: its tokens, its content hash and its
/// breakpoint.
type Block = (Tokens, u64, Option<Ttl>);

/// Maps a request body (a `/v1/messages` or `count_tokens` body) to checkpoints.
pub fn shape(request: &Value) -> Result<PromptShape, ShapeError> {
    shape_parts(request, &mut Parts::fresh())
}

/// [`shape`], reusing what `memo` kept of the last body shaped with it: the tool definitions,
/// the system prompt and each message written alike (the same JSON, floats bit for bit, in the
/// same section) to the one at the same place then keep their blocks, so a session's next
/// request — the same history and a new message — maps only what is new instead of
/// re-serialising, counting and hashing the whole prompt every turn. The result is [`shape`]'s for any body; a body it refuses empties the memo.
pub fn shape_memoized(request: &Value, memo: &mut ShapeMemo) -> Result<PromptShape, ShapeError> {
    let mut parts = Parts {
        previous: std::mem::take(&mut memo.parts),
        kept: Some(Vec::new()),
        next: 0,
        reused: 0,
    };
    let shaped = shape_parts(request, &mut parts)?;
    memo.parts = parts.kept.unwrap_or_default();
    memo.reused = parts.reused;
    Ok(shaped)
}

/// What [`shape_memoized`] keeps of the last body it shaped: each part's JSON, its section and
/// its blocks. It holds a copy of that body's tools, system prompt and messages.
#[derive(Debug, Clone, Default)]
pub struct ShapeMemo {
    parts: Vec<Part>,
    reused: usize,
}

impl ShapeMemo {
    /// How many blocks the last [`shape_memoized`] took from the memo instead of mapping them.
    pub fn reused_blocks(&self) -> usize {
        self.reused
    }
}

/// One part of a body — the tool definitions, the system prompt, or one message — and its blocks.
#[derive(Debug, Clone)]
struct Part {
    section: String,
    value: Value,
    blocks: Vec<Block>,
}

/// The parts of the body being shaped, in order (tools, system, then each message), against
/// those remembered; `kept` is `None` when nothing is remembered ([`shape`]).
struct Parts {
    previous: Vec<Part>,
    kept: Option<Vec<Part>>,
    next: usize,
    reused: usize,
}

impl Parts {
    fn fresh() -> Parts {
        Parts {
            previous: Vec::new(),
            kept: None,
            next: 0,
            reused: 0,
        }
    }

    /// Pushes the blocks of the next part, `value` in `section`: the remembered part's when it is
    /// the same, else what `map` pushes.
    fn push(
        &mut self,
        value: &Value,
        section: &str,
        blocks: &mut Vec<Block>,
        map: impl FnOnce(&mut Vec<Block>) -> Result<(), ShapeError>,
    ) -> Result<(), ShapeError> {
        let index = self.next;
        self.next += 1;
        let start = blocks.len();
        let remembered = self
            .previous
            .get_mut(index)
            .filter(|p| p.section == section && written_alike(&p.value, value));
        let part = match remembered {
            Some(part) => {
                blocks.extend_from_slice(&part.blocks);
                self.reused += part.blocks.len();
                // Moved, not cloned: each remembered part is looked at once.
                self.kept.is_some().then(|| Part {
                    section: std::mem::take(&mut part.section),
                    value: part.value.take(),
                    blocks: std::mem::take(&mut part.blocks),
                })
            }
            None => {
                map(blocks)?;
                self.kept.is_some().then(|| Part {
                    section: section.to_string(),
                    value: value.clone(),
                    blocks: blocks[start..].to_vec(),
                })
            }
        };
        if let (Some(kept), Some(part)) = (self.kept.as_mut(), part) {
            kept.push(part);
        }
        Ok(())
    }
}

/// Whether `a` and `b` are written alike, as [`canonical`] writes them — `Value`'s `==` but with
/// floats compared bit for bit: `==` holds `0.0` and `-0.0` equal, which are written (so counted
/// and hashed) differently, and a memoized part must map exactly as the part it stands for.
fn written_alike(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| written_alike(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| written_alike(v, w)))
        }
        _ => a == b,
    }
}

fn shape_parts(request: &Value, parts: &mut Parts) -> Result<PromptShape, ShapeError> {
    let body = request.as_object().ok_or(ShapeError::NotAnObject)?;
    let model = body
        .get("model")
        .ok_or(ShapeError::Missing("model"))?
        .as_str()
        .ok_or_else(|| invalid("model", "Input should be a valid string"))?
        .to_string();
    let mut blocks: Vec<Block> = Vec::new();
    // An absent list is remembered as `null`, so an explicit `null` (refused) is refused here.
    let tools = match body.get("tools") {
        Some(Value::Null) => return Err(invalid("tools", "Input should be a valid list")),
        tools => tools.unwrap_or(&Value::Null),
    };
    parts.push(tools, "t", &mut blocks, |b| push_tools(tools, b))?;
    let tool_blocks = blocks.len();
    let system = body.get("system").unwrap_or(&Value::Null);
    parts.push(system, "s", &mut blocks, |b| push_system(system, b))?;
    let system_blocks = blocks.len() - tool_blocks;
    push_messages(body, &mut blocks, parts)?;
    if let Some(cc) = body.get("cache_control").filter(|v| !v.is_null()) {
        // A top-level `cache_control` marks the last block, unless that block has its own.
        let ttl = parse_cache_control(cc, "cache_control")?;
        match blocks.last_mut() {
            Some(last) if last.2.is_none() => last.2 = Some(ttl),
            Some(_) => {}
            None => return Err(invalid("cache_control", "there is no block to cache")),
        }
    }
    let (checkpoints, total_tokens) = checkpoints_from_blocks(&blocks);
    Ok(PromptShape {
        model,
        checkpoints,
        total_tokens,
        tool_blocks,
        system_blocks,
    })
}

/// The tool definitions' blocks (they come first); `null` stands for none.
fn push_tools(tools: &Value, blocks: &mut Vec<Block>) -> Result<(), ShapeError> {
    if tools.is_null() {
        return Ok(());
    }
    let tools = tools
        .as_array()
        .ok_or_else(|| invalid("tools", "Input should be a valid list"))?;
    for (i, tool) in tools.iter().enumerate() {
        blocks.push(block(tool, &format!("tools.{i}"), "t")?);
    }
    Ok(())
}

/// The system prompt's blocks (a string is one block).
fn push_system(system: &Value, blocks: &mut Vec<Block>) -> Result<(), ShapeError> {
    match system {
        Value::Null => {}
        Value::String(s) => blocks.push(text_block(s, "s")),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                blocks.push(block(item, &format!("system.{i}"), "s")?);
            }
        }
        _ => return Err(invalid("system", "Input should be a string or a list")),
    }
    Ok(())
}

/// The messages' blocks. `tool_choice`, `thinking` and `output_config.effort` are salted into
/// every message block's section, so changing any of them rewrites the message history's cache
/// but not the tools' or system's.
fn push_messages(
    body: &Map<String, Value>,
    blocks: &mut Vec<Block>,
    parts: &mut Parts,
) -> Result<(), ShapeError> {
    let mut salt = String::new();
    for key in ["tool_choice", "thinking"] {
        if let Some(v) = body.get(key) {
            salt.push_str(key);
            canonical(v, &mut salt);
        }
    }
    // Only the effort: the reference names it among what invalidates the messages; the rest of
    // `output_config` is not said to, and a request without an effort keeps its old prefixes.
    if let Some(effort) = body.get("output_config").and_then(|c| c.get("effort")) {
        salt.push_str("effort");
        canonical(effort, &mut salt);
    }
    let messages = body
        .get("messages")
        .ok_or(ShapeError::Missing("messages"))?
        .as_array()
        .ok_or_else(|| invalid("messages", "Input should be a valid list"))?;
    for (i, message) in messages.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(&format!("messages.{i}.role"), "Field required"))?;
        let section = format!("m|{role}|{salt}");
        parts.push(message, &section, blocks, |blocks| {
            push_content(message, i, &section, blocks)
        })?;
    }
    Ok(())
}

/// The blocks of message `i`'s content (a string is one block).
fn push_content(
    message: &Value,
    i: usize,
    section: &str,
    blocks: &mut Vec<Block>,
) -> Result<(), ShapeError> {
    match message.get("content") {
        Some(Value::String(s)) => blocks.push(text_block(s, section)),
        Some(Value::Array(items)) => {
            for (j, item) in items.iter().enumerate() {
                blocks.push(block(item, &format!("messages.{i}.content.{j}"), section)?);
            }
        }
        Some(_) => {
            return Err(invalid(
                &format!("messages.{i}.content"),
                "Input should be a string or a list",
            ));
        }
        None => return Err(invalid(&format!("messages.{i}.content"), "Field required")),
    }
    Ok(())
}

/// The field path of block `index` of `body` as [`shape`] numbers its blocks, the way the API
/// names a block in an error: `tools.0`, `system` (a string) or `system.1`, `messages.2.content`
/// (a string) or `messages.2.content.0`. `None` past the last block or on a body [`shape`]
/// refuses.
pub fn block_path(body: &Value, index: usize) -> Option<String> {
    let mut left = index;
    let mut within = |list: Option<&Value>, path: &str| -> Option<Option<String>> {
        match list {
            None | Some(Value::Null) => Some(None),
            Some(Value::Array(items)) if left < items.len() => Some(Some(format!("{path}.{left}"))),
            Some(Value::Array(items)) => {
                left -= items.len();
                Some(None)
            }
            Some(Value::String(_)) if left == 0 => Some(Some(path.to_string())),
            Some(Value::String(_)) => {
                left -= 1;
                Some(None)
            }
            Some(_) => None,
        }
    };
    if let Some(path) = within(body.get("tools"), "tools")? {
        return Some(path);
    }
    if let Some(path) = within(body.get("system"), "system")? {
        return Some(path);
    }
    for (i, message) in body.get("messages")?.as_array()?.iter().enumerate() {
        if let Some(path) = within(message.get("content"), &format!("messages.{i}.content"))? {
            return Some(path);
        }
    }
    None
}

/// Where `current` first diverges from `previous`, the way the provider's cache diagnostics
/// compare a request with the one named by `diagnostics.previous_message_id`: the model, then
/// the tool definitions, then the system prompt, then the message history (`previous`'s blocks
/// must be a prefix of `current`'s). `None` when `current` is `previous` plus new content.
///
/// The magnitude is the provider's `cache_missed_input_tokens`: the tokens of `previous` past the
/// last block the two share.
pub fn diverge(previous: &PromptShape, current: &PromptShape) -> Option<(Level, Tokens)> {
    let shared = previous
        .checkpoints
        .iter()
        .zip(&current.checkpoints)
        .take_while(|(a, b)| a.fingerprint == b.fingerprint)
        .count();
    let missed = |blocks: usize| {
        let kept = blocks
            .checked_sub(1)
            .and_then(|i| previous.checkpoints.get(i))
            .map_or(0, |c| c.tokens);
        previous.total_tokens.saturating_sub(kept)
    };
    if previous.model != current.model {
        return Some((Level::Model, previous.total_tokens));
    }
    let tools = previous.tool_blocks;
    if tools != current.tool_blocks || shared < tools {
        return Some((Level::Tools, missed(shared.min(tools))));
    }
    let system = tools + previous.system_blocks;
    if previous.system_blocks != current.system_blocks || shared < system {
        return Some((Level::System, missed(shared.min(system))));
    }
    if shared < previous.checkpoints.len() {
        return Some((Level::Messages, missed(shared)));
    }
    None
}

fn invalid(path: &str, message: &str) -> ShapeError {
    ShapeError::Invalid {
        path: path.to_string(),
        message: message.to_string(),
    }
}

fn text_block(text: &str, section: &str) -> Block {
    let mut key = String::with_capacity(section.len() + text.len() + 32);
    key.push_str(section);
    key.push('|');
    canonical(&serde_json::json!({"type": "text", "text": text}), &mut key);
    (tokenize::count(text), hash_bytes(key.as_bytes()), None)
}

fn block(item: &Value, path: &str, section: &str) -> Result<Block, ShapeError> {
    let obj = item
        .as_object()
        .ok_or_else(|| invalid(path, "Input should be an object"))?;
    let breakpoint = match obj.get("cache_control") {
        None | Some(Value::Null) => None,
        Some(cc) => Some(parse_cache_control(cc, &format!("{path}.cache_control"))?),
    };
    let mut key = String::with_capacity(section.len() + 64);
    key.push_str(section);
    key.push('|');
    let start = key.len();
    canonical_without_cache_control(obj, &mut key);
    let tokens = match (obj.get("type"), obj.get("text")) {
        (Some(Value::String(t)), Some(Value::String(text))) if t == "text" => tokenize::count(text),
        _ => tokenize::count(&key[start..]),
    };
    Ok((tokens, hash_bytes(key.as_bytes()), breakpoint))
}

fn parse_cache_control(cc: &Value, path: &str) -> Result<Ttl, ShapeError> {
    let obj = cc
        .as_object()
        .ok_or_else(|| invalid(path, "Input should be an object"))?;
    match obj.get("type").and_then(Value::as_str) {
        Some("ephemeral") => {}
        _ => {
            return Err(invalid(
                &format!("{path}.type"),
                "Input should be 'ephemeral'",
            ));
        }
    }
    match obj.get("ttl") {
        None | Some(Value::Null) => Ok(Ttl::FiveMinutes),
        Some(Value::String(s)) if s == "5m" => Ok(Ttl::FiveMinutes),
        Some(Value::String(s)) if s == "1h" => Ok(Ttl::OneHour),
        Some(_) => Err(invalid(
            &format!("{path}.ttl"),
            "Input should be '5m' or '1h'",
        )),
    }
}

/// [`canonical`] of a block object without its `cache_control`: a breakpoint marks a block and
/// is no part of its content.
fn canonical_without_cache_control(map: &serde_json::Map<String, Value>, out: &mut String) {
    let mut keys: Vec<&String> = map.keys().filter(|k| *k != "cache_control").collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_string(k, out);
        out.push(':');
        if let Some(v) = map.get(*k) {
            canonical(v, out);
        }
    }
    out.push('}');
}

fn push_string(s: &str, out: &mut String) {
    // Escaping a &str through serde_json cannot fail.
    out.push_str(&Value::String(s.to_string()).to_string());
}

/// The canonical JSON of `v` as a new string.
pub fn canonical_string(v: &Value) -> String {
    let mut out = String::new();
    canonical(v, &mut out);
    out
}
