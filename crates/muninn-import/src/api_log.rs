//! Messages API request/response logs, as logging proxies write them: JSON Lines of
//!
//! ```text
//! {"timestamp": "<RFC 3339, when the request was sent>", "session_id": "…" (optional),
//!  "request": {<the POST /v1/messages body>}, "response": {<the Message answered>}}
//! ```
//!
//! # How a line becomes a request
//!
//! - `response.usage` is the recorded usage; `response.id` de-duplicates (across files too, and
//!   against transcripts of the same session); `response.diagnostics.cache_miss_reason`, where the
//!   cache-diagnosis beta was on, is the provider's label; a `thinking` or `redacted_thinking`
//!   block in `response.content` marks the request `reasoning`, as in a transcript. An error
//!   response (`"type": "error"`) or a line without usage or a valid `timestamp` is skipped
//!   with a warning.
//! - The model is `request.model` (what was asked), else `response.model`.
//! - The session is the line's `session_id`, else `request.metadata.user_id` (Claude Code puts
//!   the session there), else the file name.
//! - The thread is found from the exact blocks: the *head* (`tools` and `system`, with
//!   `cache_control` markers removed) names it. The first head of a session is `main`; a request
//!   with another head (a sub-agent's system prompt) goes to a thread `head-<hash>`.
//! - Within a thread, each message is fingerprinted with its `cache_control` markers removed and a
//!   plain-string `content` read as one text block (Claude Code moves the last breakpoint and
//!   collapses the previous last message to a string; neither changes the cached bytes'
//!   identity here). A request whose messages begin with all of the previous request's messages
//!   continues the conversation, and `blocks_added` is the exact number of content blocks it
//!   added — the input of the cache model's 20-block lookback. A request that does not is a
//!   rewrite of the conversation and is marked `compacted`.
//! - `boundary`: the last message is the user's and holds no `tool_result` block.
//! - `tool_results`: the `tool_result` blocks of the messages the request added (all of its
//!   messages, for a rewrite) — how many, and the tokens a later tool-result clear (the `mask`
//!   action) would remove from them: each block as the cache model counts it, less the same
//!   block holding the placeholder ([`muninn_core::mask::tool_result_tokens`]), as the Claude
//!   Code reader counts a transcript's.
//!
//! # Breakpoints
//!
//! The request's `cache_control` markers are counted and checked (at most 4, as the API
//! enforces; a 1h one never after a 5m one); a request breaking either rule gets a warning,
//! since the provider would have refused it and its usage cannot be what the log says. The
//! normalised [`muninn_core::trace::Trace`] keeps no per-request breakpoint list: what
//! `check-cache` reconstructs a request from is its prompt size, its blocks added, the
//! compaction flag and the usage, all of which are exact here.
//!
//! Unlike the other readers this one decodes every block (to fingerprint it), one block at a
//! time as the line streams past (`api_request`), so memory per line is a small multiple of the
//! line; still one line at a time.

use crate::api_request::{RequestBody, Shape, add};
use crate::claude::{ClaudeDiagnostics, ClaudeUsage, id_hash};
use crate::json::{ContentShape, Str, parse_timestamp_ms};
use crate::lines::{Line, parse_line};
use crate::{FormatReader, LineContext};
use muninn_core::trace::{ThreadKind, ToolResults, TraceRequest};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The API's limit on `cache_control` markers per request.
const MAX_BREAKPOINTS: usize = 4;

#[derive(Deserialize)]
struct ApiLogLine<'a> {
    #[serde(borrow)]
    timestamp: Option<Str<'a>>,
    #[serde(borrow)]
    session_id: Option<Str<'a>>,
    request: Option<RequestBody>,
    #[serde(borrow)]
    response: Option<ApiResponse<'a>>,
}

#[derive(Deserialize)]
struct ApiResponse<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    usage: Option<ClaudeUsage>,
    #[serde(borrow)]
    diagnostics: Option<ClaudeDiagnostics<'a>>,
    /// Read for its `thinking` blocks only.
    content: Option<ContentShape>,
}

/// A thread's conversation so far.
#[derive(Debug)]
struct ThreadState {
    name: String,
    /// Fingerprints of the previous request's messages.
    messages: Vec<u64>,
    /// Content blocks of the previous request's messages.
    blocks: u32,
}

/// How a request follows the previous request of its thread.
struct Step {
    /// Its messages begin with all of the previous request's; else it rewrote them.
    continues: bool,
    /// The first request of the thread, or the user's turn (see [`Shape::boundary`]).
    boundary: bool,
    /// The content blocks it added (all of its own, for a rewrite).
    blocks_added: u32,
    /// The tool results of the messages it added (all of its own, for a rewrite).
    tool_results: ToolResults,
}

impl ThreadState {
    /// The thread goes on to a request of `shape`: how that request follows the previous one.
    fn advance(&mut self, shape: Shape) -> Step {
        let known = self.messages.len();
        let continues =
            shape.messages.len() >= known && shape.messages[..known] == self.messages[..];
        // What the request added: its new messages, or all of them for a rewrite.
        let (added, blocks_before) = if continues {
            (known, self.blocks)
        } else {
            (0, 0)
        };
        let step = Step {
            continues,
            boundary: known == 0 || shape.boundary,
            blocks_added: shape.blocks.saturating_sub(blocks_before),
            tool_results: total(shape.tool_results[added..].iter().copied()),
        };
        self.messages = shape.messages;
        self.blocks = shape.blocks;
        step
    }
}

/// Reads one request/response log.
#[derive(Debug)]
pub(crate) struct ApiLogReader<'s> {
    file_stem: String,
    seen: &'s mut HashSet<u64>,
    /// By (session, head fingerprint).
    threads: HashMap<(String, u64), ThreadState>,
    /// Threads per session so far, to name the next one.
    heads_per_session: HashMap<String, u32>,
}

impl<'s> ApiLogReader<'s> {
    pub fn new(path: &Path, seen: &'s mut HashSet<u64>) -> Self {
        ApiLogReader {
            file_stem: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            seen,
            threads: HashMap::new(),
            heads_per_session: HashMap::new(),
        }
    }
}

/// Why a request's breakpoints are ones the API refuses, if they are.
fn breakpoint_problem(markers: &[Option<String>]) -> Option<String> {
    if markers.len() > MAX_BREAKPOINTS {
        return Some(format!(
            "{} cache_control markers (the API accepts at most {MAX_BREAKPOINTS})",
            markers.len()
        ));
    }
    let first_5m = markers.iter().position(|m| m.as_deref() != Some("1h"));
    let last_1h = markers.iter().rposition(|m| m.as_deref() == Some("1h"));
    match (first_5m, last_1h) {
        (Some(short), Some(long)) if long > short => {
            Some("a 1h cache_control marker follows a 5m one (the API refuses it)".to_owned())
        }
        _ => None,
    }
}

fn total(results: impl IntoIterator<Item = ToolResults>) -> ToolResults {
    results.into_iter().fold(ToolResults::default(), add)
}

impl ApiLogReader<'_> {
    /// The thread of `session` whose head is `head`, named on first sight: the session's first
    /// head is `main`, later ones `head-<hash>`.
    fn thread(&mut self, session: &str, head: u64) -> &mut ThreadState {
        let heads = &mut self.heads_per_session;
        self.threads
            .entry((session.to_owned(), head))
            .or_insert_with(|| {
                let n = heads.entry(session.to_owned()).or_insert(0);
                *n += 1;
                let name = if *n == 1 {
                    "main".to_owned()
                } else {
                    format!("head-{:08x}", head >> 32)
                };
                ThreadState {
                    name,
                    messages: Vec::new(),
                    blocks: 0,
                }
            })
    }
}

impl FormatReader for ApiLogReader<'_> {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(parsed) = parse_line::<ApiLogLine<'_>>(line, cx.diag) else {
            return;
        };
        let (Some(request), Some(response)) = (parsed.request, &parsed.response) else {
            cx.diag
                .warn(line.number, "line without request or response, skipped");
            return;
        };
        if response
            .kind
            .as_ref()
            .is_some_and(|k| k.as_str() == "error")
        {
            cx.diag
                .warn(line.number, "error response (no usage), skipped");
            return;
        }
        let at_ms = parsed
            .timestamp
            .as_ref()
            .and_then(|t| parse_timestamp_ms(t.as_str()));
        let model = request
            .model
            .as_deref()
            .or(response.model.as_ref().map(Str::as_str));
        let (Some(usage), Some(at_ms), Some(model)) = (&response.usage, at_ms, model) else {
            cx.diag.warn(
                line.number,
                "line without response.usage, a model or a valid timestamp, skipped",
            );
            return;
        };
        if let Some(id) = &response.id {
            let hash = id_hash(id.as_str());
            if !self.seen.insert(hash) {
                cx.stats.duplicates_dropped += 1;
                return;
            }
        }
        let shape = request.shape;
        if let Some(problem) = breakpoint_problem(&shape.markers) {
            cx.diag
                .warn(line.number, format!("{problem}; imported as logged"));
        }
        let session = parsed
            .session_id
            .as_ref()
            .map(|s| s.as_str().to_owned())
            .or(request.user_id)
            .unwrap_or_else(|| self.file_stem.clone());
        let state = self.thread(&session, shape.head);
        let step = state.advance(shape);
        let request = TraceRequest {
            at_ms,
            usage: usage.to_usage(),
            boundary: step.boundary,
            compacted: !step.continues,
            tools_changed: false,
            tools_loaded: false,
            version_changed: false,
            interrupted_thinking: false,
            reasoning: response.content.is_some_and(|c| c.thinking > 0),
            blocks_added: step.blocks_added,
            provider_miss: response.diagnostics.as_ref().map(|d| d.label()),
            tool_results: step.tool_results,
            conversation: 0,
            forked_from: None,
            tool_results_at_ms: None,
        };
        let kind = if state.name == "main" {
            ThreadKind::Main
        } else {
            ThreadKind::Subagent
        };
        let thread = state.name.clone();
        // Past the limits, the request is skipped with a warning; the thread has moved on.
        let _ = cx.push((&session, &thread, kind), model, request, line.number);
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}
