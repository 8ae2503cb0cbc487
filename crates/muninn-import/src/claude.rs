//! Claude Code transcripts (`~/.claude/projects/<project>/<session>.jsonl` and sub-agent files).
//!
//! # The format, as far as the importer cares
//!
//! One JSON object per line. `type` is `user`, `assistant`, `system`, `progress`,
//! `file-history-snapshot`, `queue-operation`, `summary`, …; only `user`, `assistant` and `system`
//! lines matter here, everything else is skipped after a cheap parse.
//!
//! - An API response is spread over several `assistant` lines, one per content block, each
//!   repeating `message.id`, `message.model` and `message.usage`. They are merged into one
//!   request: `at_ms` is the earliest line's `timestamp` (lines are written as the response
//!   streams, so the first is nearest the request), the usage is the last line's (the input side
//!   never changes; `output_tokens` only grows).
//! - `message.model == "<synthetic>"` marks a client-side placeholder, not an API request: dropped
//!   and counted.
//! - A resumed session copies earlier lines into its new file, so a `message.id` already imported
//!   from an earlier file (in path order) is dropped and counted as a duplicate.
//! - Threads: lines with `isSidechain: true` belong to a sub-agent, named by the line's `agentId`,
//!   else by the file name (`<session>__agent-<id>.jsonl` or `subagents/agent-<id>.jsonl`). An id
//!   starting `acompact` is a compaction request's thread. Everything else is `main`.
//! - `boundary`: the last `user` line of the thread before the request was something a human
//!   (or the client on their behalf) sent — a string or text/image blocks — rather than
//!   `tool_result` blocks; the first request of a thread is a boundary. Meta lines (`isMeta`:
//!   skill bodies, command caveats) and compaction summaries leave this unchanged: they ride along
//!   with whatever came before.
//! - `compacted`: a `system` line with `subtype: "compact_boundary"`, or a `user` line with
//!   `isCompactSummary: true`, came after the thread's previous request.
//! - `tools_changed`: a `system` line with `subtype: "bridge_status"` whose text begins
//!   "/remote-control is active" came after the thread's previous request (switching remote
//!   control on changes the tools Claude Code sends).
//! - `tools_loaded`: a `tool_result` block since the thread's previous request holds
//!   `tool_reference` blocks (Claude Code's `ToolSearch` loading deferred tools), and none did
//!   before in the thread (copies from an earlier file included): the thread's first tool load.
//! - `version_changed`: the response's line names another client `version` than the line of the
//!   thread's previous response did (a session resumed after an upgrade, which may bring another
//!   system prompt). Responses copied from an earlier file count as the previous response.
//! - `interrupted_thinking`: a `user` line whose text begins "[Request interrupted by user"
//!   came right after a response whose lines so far held only thinking blocks (the person
//!   stopped the answer while it was thinking; Claude Code then drops the interrupted turn's
//!   thinking from the next prompt).
//! - `blocks_added`: content blocks of `user` and `assistant` lines (array elements; a plain string
//!   is one) since the previous request of the thread. The request's own assistant blocks count
//!   towards the next request, since that is the prompt they join.
//! - `tool_results`: the `tool_result` blocks of `user` lines since the previous request of the
//!   thread — how many, and the tokens a later tool-result clear (the `mask` action) would
//!   remove from them: each block as the cache model counts it, less the same block holding
//!   the placeholder ([`muninn_core::mask::tool_result_tokens`], as the host counts what it
//!   sends).
//! - `tool_results_at_ms`: the `timestamp` of the latest of those `user` lines — when the
//!   results existed, which may be hours before the request that carries them (the request
//!   sending them refused by a usage limit, its `<synthetic>` answer dropped).
//! - `reasoning`: one of the response's lines carries a `thinking` or `redacted_thinking` block.
//!   It is part of the answer, read by the cache model only for the requests that follow (a
//!   client that drops an earlier turn's thinking rewrites the prompt from there).
//! - `provider_miss`: from 2.1.140 on (the oldest version seen carrying it), an assistant line
//!   may carry the API's cache diagnosis, `message.diagnostics.cache_miss_reason`
//!   (`{"type": "messages_changed", "cache_missed_input_tokens": N}`; `null` while the
//!   comparison was pending). It becomes the request's label. A line without `diagnostics` (or
//!   with `"diagnostics": null`) labels nothing: the API omits the object when it found no
//!   divergence, and older versions never asked, so absence cannot be told apart from either.
//!
//! - `conversation`: which conversation of its thread the request continues, from the
//!   `parentUuid` links back to the thread's previous response (`crate::conversations`): a
//!   session resumed in two terminals interleaves two in one file.
//!
//! Per-file state (open responses, thread state) lives in [`ClaudeReader`] and is dropped with it;
//! only the hash set of imported ids outlives a file.

use crate::conversations::Conversations;
use crate::json::{ContentShape, Str, parse_timestamp_ms};
use crate::lines::{Line, parse_line};
use crate::sink::RequestSlot;
use crate::{FormatReader, ImportOptions, LineContext};
use muninn_core::miss::{ProviderMiss, ProviderMissReason};
use muninn_core::trace::{ThreadKind, TraceRequest, Usage};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

/// The fields of a line the importer reads; every other field is skipped by the parser.
#[derive(Deserialize)]
struct ClaudeLine<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    subtype: Option<Str<'a>>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<Str<'a>>,
    #[serde(rename = "isSidechain")]
    is_sidechain: Option<bool>,
    #[serde(rename = "agentId", borrow)]
    agent_id: Option<Str<'a>>,
    #[serde(rename = "isCompactSummary")]
    is_compact_summary: Option<bool>,
    #[serde(rename = "isMeta")]
    is_meta: Option<bool>,
    #[serde(borrow)]
    uuid: Option<Str<'a>>,
    #[serde(rename = "parentUuid", borrow)]
    parent_uuid: Option<Str<'a>>,
    /// A compaction boundary's link to the conversation before it (its `parentUuid` is null).
    #[serde(rename = "logicalParentUuid", borrow)]
    logical_parent_uuid: Option<Str<'a>>,
    #[serde(borrow)]
    timestamp: Option<Str<'a>>,
    /// The Claude Code version that wrote the line.
    #[serde(borrow)]
    version: Option<Str<'a>>,
    #[serde(borrow)]
    message: Option<ClaudeMessage<'a>>,
    /// A `system` line's text (other line types may carry anything here).
    #[serde(borrow)]
    content: Option<LineText<'a>>,
}

impl ClaudeLine<'_> {
    /// When the line was written, where its timestamp parses.
    fn at_ms(&self) -> Option<i64> {
        self.timestamp
            .as_ref()
            .and_then(|t| parse_timestamp_ms(t.as_str()))
    }
}

/// A line's top-level `content`: text where it is text, anything else skipped.
#[derive(Deserialize)]
#[serde(untagged)]
enum LineText<'a> {
    Text(#[serde(borrow)] Str<'a>),
    Other(serde::de::IgnoredAny),
}

/// An `assistant` line's message (the stream-json reader reads the same).
#[derive(Deserialize)]
pub(crate) struct ClaudeMessage<'a> {
    #[serde(borrow)]
    pub(crate) id: Option<Str<'a>>,
    #[serde(borrow)]
    pub(crate) model: Option<Str<'a>>,
    pub(crate) usage: Option<ClaudeUsage>,
    pub(crate) content: Option<ContentShape>,
    #[serde(borrow)]
    pub(crate) diagnostics: Option<ClaudeDiagnostics<'a>>,
}

/// `message.diagnostics`: the API's cache diagnosis as Claude Code stored it.
#[derive(Deserialize)]
pub(crate) struct ClaudeDiagnostics<'a> {
    #[serde(borrow)]
    cache_miss_reason: Option<ClaudeMissReason<'a>>,
}

#[derive(Deserialize)]
struct ClaudeMissReason<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    cache_missed_input_tokens: Option<u64>,
}

impl<'a> ClaudeMessage<'a> {
    /// The message of a response's line (`what`: "assistant line", "assistant event") and its
    /// id, or `None` with a warning when the line lacks either.
    pub(crate) fn identified<'m>(
        message: Option<&'m ClaudeMessage<'a>>,
        what: &str,
        line: &Line<'_>,
        cx: &mut LineContext<'_, '_>,
    ) -> Option<(&'m ClaudeMessage<'a>, &'m str)> {
        let Some(message) = message else {
            cx.diag
                .warn(line.number, format!("{what} without a message, skipped"));
            return None;
        };
        let Some(id) = &message.id else {
            cx.diag
                .warn(line.number, format!("{what} without message.id, skipped"));
            return None;
        };
        Some((message, id.as_str()))
    }

    /// The content blocks this line (event) of a response carries: one if it names none.
    pub(crate) fn blocks(&self) -> u32 {
        self.content.map_or(1, |c| c.blocks)
    }

    /// Whether every block this line (event) of a response carries is thinking.
    fn thinking_only(&self) -> bool {
        self.content
            .is_some_and(|c| c.blocks > 0 && c.thinking == c.blocks)
    }

    /// What one line (event) of a response tells of its request: the cache diagnosis, if the
    /// line carries one, and reasoning, if its block is thinking — a response is spread over
    /// one line per block, so any of them may be the thinking.
    pub(crate) fn annotate(&self, request: &mut TraceRequest) {
        if let Some(d) = &self.diagnostics {
            request.provider_miss = Some(d.label());
        }
        request.reasoning |= self.content.is_some_and(|c| c.thinking > 0);
    }
}

impl ClaudeDiagnostics<'_> {
    pub(crate) fn label(&self) -> ProviderMiss {
        match &self.cache_miss_reason {
            None => ProviderMiss {
                reason: ProviderMissReason::Pending,
                missed_tokens: None,
            },
            Some(r) => ProviderMiss {
                reason: r.kind.as_ref().map_or(ProviderMissReason::Other, |k| {
                    ProviderMissReason::from_wire(k.as_str())
                }),
                missed_tokens: r.cache_missed_input_tokens,
            },
        }
    }
}

/// Anthropic's `usage` object. Fields are optional (and tolerate `null`) because older transcripts
/// lack the per-TTL breakdown.
#[derive(Deserialize)]
pub(crate) struct ClaudeUsage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation: Option<CacheCreation>,
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CacheCreation {
    ephemeral_5m_input_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
}

impl ClaudeUsage {
    pub(crate) fn to_usage(&self) -> Usage {
        let written = self.cache_creation_input_tokens.unwrap_or(0);
        let (w5m, w1h) = match &self.cache_creation {
            Some(c) => {
                let w5m = c.ephemeral_5m_input_tokens.unwrap_or(0);
                let w1h = c.ephemeral_1h_input_tokens.unwrap_or(0);
                // Writes the breakdown does not account for went in at the default (5m) TTL.
                // Saturating: the numbers are the transcript's, any u64.
                let unaccounted = written.saturating_sub(w5m.saturating_add(w1h));
                (w5m.saturating_add(unaccounted), w1h)
            }
            // No breakdown: before 1h caching existed, every write was 5m.
            None => (written, 0),
        };
        Usage {
            input: self.input_tokens.unwrap_or(0),
            cache_write_5m: w5m,
            cache_write_1h: w1h,
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
        }
    }
}

/// Per-thread state while reading a file (the stream-json reader keeps the same).
#[derive(Debug)]
pub(crate) struct ThreadState {
    /// The last relevant `user` line was human input (true before any request).
    pub(crate) human_turn: bool,
    /// A compaction was seen since the last request.
    pub(crate) compacted: bool,
    /// The client changed its tool list since the last request (remote control switched on).
    pub(crate) tools_changed: bool,
    /// The thread's first tool load came since the last request (`tool_reference` results).
    pub(crate) tools_loaded: bool,
    /// A tool result of the thread loaded tools before (kept across responses).
    pub(crate) loaded_before: bool,
    /// The client version that sent the thread's last response, where its lines name one.
    pub(crate) version: Option<String>,
    /// The next request is sent by another client version than the last one.
    pub(crate) version_changed: bool,
    /// The lines of the last response so far hold only thinking blocks.
    pub(crate) thinking_only: bool,
    /// The person interrupted the last response while it held only thinking.
    pub(crate) interrupted_thinking: bool,
    /// Content blocks since the last request.
    pub(crate) blocks: u32,
    /// Tool results since the last request.
    pub(crate) tools: muninn_core::trace::ToolResults,
    /// When the latest of them was written.
    pub(crate) tools_at_ms: Option<i64>,
}

impl Default for ThreadState {
    fn default() -> Self {
        ThreadState {
            human_turn: true,
            compacted: false,
            tools_changed: false,
            tools_loaded: false,
            loaded_before: false,
            version: None,
            version_changed: false,
            thinking_only: false,
            interrupted_thinking: false,
            blocks: 0,
            tools: Default::default(),
            tools_at_ms: None,
        }
    }
}

impl ThreadState {
    /// The request a new response makes, from what the thread gathered since the last one and
    /// what the response's first line tells ([`ClaudeMessage::annotate`]); the thread then goes
    /// on from that line's blocks.
    pub(crate) fn take_request(
        &mut self,
        at_ms: i64,
        usage: Usage,
        message: &ClaudeMessage<'_>,
    ) -> TraceRequest {
        let mut request = TraceRequest {
            at_ms,
            usage,
            boundary: self.human_turn,
            compacted: self.compacted,
            tools_changed: self.tools_changed,
            tools_loaded: self.tools_loaded,
            version_changed: self.version_changed,
            interrupted_thinking: self.interrupted_thinking,
            reasoning: false,
            blocks_added: self.blocks,
            provider_miss: None,
            tool_results: self.tools,
            conversation: 0,
            forked_from: None,
            tool_results_at_ms: self.tools_at_ms,
        };
        message.annotate(&mut request);
        self.after_response(message.blocks());
        self.thinking_only = message.thinking_only();
        request
    }

    /// A later line (event) of a response already imported: its blocks join the next request.
    pub(crate) fn more_of_response(&mut self, message: &ClaudeMessage<'_>) {
        self.blocks = self.blocks.saturating_add(message.blocks());
        self.thinking_only &= message.thinking_only();
    }

    /// The client version a response's line names: another than the thread's last response's
    /// flags the request it answers (a line naming none says nothing).
    fn sent_by(&mut self, version: Option<&str>) {
        let Some(version) = version else { return };
        match &self.version {
            Some(last) if last == version => {}
            Some(_) => {
                self.version_changed = true;
                self.version = Some(version.to_owned());
            }
            None => self.version = Some(version.to_owned()),
        }
    }

    /// A compaction boundary: the thread's count starts afresh.
    pub(crate) fn compact_boundary(&mut self) {
        self.compacted = true;
        self.blocks = 0;
        self.tools = Default::default();
    }

    /// The thread after a response of `blocks` blocks: not a person's turn, not compacted,
    /// nothing gathered but the response itself.
    pub(crate) fn after_response(&mut self, blocks: u32) {
        *self = ThreadState {
            human_turn: false,
            compacted: false,
            tools_changed: false,
            tools_loaded: false,
            loaded_before: self.loaded_before,
            version: self.version.take(),
            version_changed: false,
            thinking_only: false,
            interrupted_thinking: false,
            blocks,
            tools: Default::default(),
            tools_at_ms: None,
        };
    }

    /// A system line: a compaction boundary starts the thread's count afresh; remote control
    /// switched on changes the tools.
    fn system(&mut self, parsed: &ClaudeLine<'_>) {
        let subtype = parsed.subtype.as_ref().map(Str::as_str);
        if subtype == Some("compact_boundary") {
            self.compact_boundary();
        } else if subtype == Some("bridge_status")
            && matches!(&parsed.content, Some(LineText::Text(t))
                if t.as_str().starts_with("/remote-control is active"))
        {
            // Switching remote control on changes the tools Claude Code sends (seen on the
            // tuning part of one public user's sessions: every first request after it read
            // nothing, and the API labelled those it diagnosed `tools_changed`).
            self.tools_changed = true;
        }
    }

    /// A user line.
    fn user(&mut self, parsed: &ClaudeLine<'_>) {
        let content = parsed.message.as_ref().and_then(|m| m.content);
        if content.is_some_and(|c| c.tool_results > 0) {
            // Whether the answer before an idle gap still awaited these results when the gap's
            // decisions came (`TraceRequest::tool_results_at_ms`).
            self.tools_at_ms = parsed.at_ms();
        }
        if parsed.is_compact_summary == Some(true) {
            self.compacted = true;
            self.user_content(content, false);
        } else {
            self.user_content(content, parsed.is_meta != Some(true));
        }
    }

    /// A user message's content: its blocks and tool results join the next request; where it
    /// `may_turn` (not a meta line, not a compaction summary) a person's message (not a tool
    /// result) makes that request a turn boundary and tool results make it a loop step.
    pub(crate) fn user_content(&mut self, content: Option<ContentShape>, may_turn: bool) {
        let shape = content.unwrap_or_default();
        // Claude Code drops an answer stopped while it was only thinking, and with it the
        // thinking of the turn it belonged to (seen once on the tuning part of one public
        // user's sessions: the next turn read exactly up to that turn's first thinking, and the
        // API labelled it `messages_changed`; stopped answers that had begun to write or call
        // a tool were sent on unchanged).
        if shape.interrupt && self.thinking_only {
            self.interrupted_thinking = true;
        }
        self.thinking_only = false;
        if shape.tool_references > 0 && !self.loaded_before {
            self.tools_loaded = true;
            self.loaded_before = true;
        }
        self.blocks = self.blocks.saturating_add(shape.blocks);
        self.tools.tokens = self.tools.tokens.saturating_add(shape.tool_result_tokens);
        self.tools.uses = self.tools.uses.saturating_add(shape.tool_results);
        if may_turn && shape.blocks > 0 {
            self.human_turn = shape.tool_results == 0;
        }
    }

    /// A person's message the log does not echo (a stream-json run's prompt): one block, and
    /// the next request is a turn boundary.
    pub(crate) fn unechoed_prompt(&mut self) {
        self.human_turn = true;
        self.blocks = self.blocks.saturating_add(1);
    }
}

/// What became of a `message.id` seen in this file.
#[derive(Debug, Clone, Copy)]
enum Response {
    /// Imported; later lines update it.
    Kept(RequestSlot),
    /// Dropped (duplicate or synthetic); later lines are ignored.
    Dropped,
    /// Refused at its first line (past the limits): later lines update no request, but their
    /// blocks are still what the client sends next, so the thread takes them in.
    Refused,
}

/// Reads one Claude Code file.
#[derive(Debug)]
pub(crate) struct ClaudeReader<'s> {
    include_subagents: bool,
    /// The sub-agent id the file name gives, if any.
    file_agent: Option<Arc<str>>,
    /// The file's name without `.jsonl`, the session of last resort.
    file_stem: Arc<str>,
    /// Ids imported by this and earlier files.
    seen: &'s mut HashSet<u64>,
    /// The responses of this file, by id hash.
    responses: HashMap<u64, Response>,
    /// Thread state by hash of (session, thread): looking up by hash avoids allocating a key on
    /// every line.
    threads: HashMap<u64, ThreadState>,
    /// The file's `parentUuid` links: which conversation of its thread each request continues.
    conversations: Conversations,
}

impl<'s> ClaudeReader<'s> {
    pub fn new(path: &Path, opts: &ImportOptions, seen: &'s mut HashSet<u64>) -> Self {
        let file_stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file_agent = file_stem
            .rsplit_once("__agent-")
            .map(|(_, id)| id)
            .or_else(|| file_stem.strip_prefix("agent-"))
            .filter(|id| !id.is_empty())
            .map(Arc::from);
        ClaudeReader {
            include_subagents: opts.include_subagents,
            file_agent,
            file_stem: Arc::from(file_stem),
            seen,
            responses: HashMap::new(),
            conversations: Conversations::default(),
            threads: HashMap::new(),
        }
    }

    /// An assistant line: the first line of a response makes its request (unless the response
    /// is synthetic or was imported from another file); later lines of it update its usage —
    /// the input side is final on every line, the output count only on the last.
    fn assistant(
        &mut self,
        parsed: &ClaudeLine<'_>,
        key: u64,
        names: (&str, &str),
        line: &Line<'_>,
        cx: &mut LineContext<'_, '_>,
    ) {
        let Some((message, id)) =
            ClaudeMessage::identified(parsed.message.as_ref(), "assistant line", line, cx)
        else {
            return;
        };
        let hash = id_hash(id);
        match self.responses.get(&hash) {
            Some(Response::Dropped) => {}
            Some(Response::Refused) => {
                self.threads
                    .entry(key)
                    .or_default()
                    .more_of_response(message);
            }
            Some(&Response::Kept(slot)) => {
                self.threads
                    .entry(key)
                    .or_default()
                    .more_of_response(message);
                later_line(slot, message, parsed.at_ms(), line, cx);
            }
            None => self.first_line(parsed, message, (hash, key), names, line, cx),
        }
    }

    /// The first line of a response: its request, unless the response is synthetic (dropped) or
    /// an earlier file imported it (dropped, but the thread moves on as if it were imported).
    fn first_line(
        &mut self,
        parsed: &ClaudeLine<'_>,
        message: &ClaudeMessage<'_>,
        (hash, key): (u64, u64),
        (session, thread): (&str, &str),
        line: &Line<'_>,
        cx: &mut LineContext<'_, '_>,
    ) {
        let state = self.threads.entry(key).or_default();
        let model = message.model.as_ref().map(Str::as_str);
        if model == Some("<synthetic>") {
            cx.stats.synthetic_dropped += 1;
            self.responses.insert(hash, Response::Dropped);
            return;
        }
        let version = parsed.version.as_ref().map(Str::as_str);
        if self.seen.contains(&hash) {
            // The request happened, just not in this file: the thread moves on as if it had been
            // imported, so the next new request's flags and block count start from here.
            cx.stats.duplicates_dropped += 1;
            self.responses.insert(hash, Response::Dropped);
            state.sent_by(version);
            state.after_response(message.blocks());
            return;
        }
        let (Some(model), Some(usage), Some(at_ms)) = (model, &message.usage, parsed.at_ms())
        else {
            cx.diag.warn(
                line.number,
                "assistant line without model, usage or a valid timestamp, skipped",
            );
            return;
        };
        state.sent_by(version);
        let mut request = state.take_request(at_ms, usage.to_usage(), message);
        let uuid = parsed.uuid.as_ref().map(|u| id_hash(u.as_str()));
        (request.conversation, request.forked_from) = self.conversations.request(key, uuid, hash);
        if self.conversations.new_cycle() {
            cx.diag.warn(
                line.number,
                "parentUuid links go round a cycle (a corrupt file): a request whose \
                 links meet it continues the thread's latest conversation",
            );
        }
        let (conversation, forked_from) = (request.conversation, request.forked_from);
        let kind = thread_kind(thread);
        let Some(slot) = cx.push((session, thread, kind), model, request, line.number) else {
            // Past the limits (warned): the thread has moved on as for a kept request, and
            // the response's later lines move it on too (its thinking and blocks), with no
            // request to update; a fork it opened passes to the conversation's next request.
            self.conversations.refused(key, conversation, forked_from);
            self.responses.insert(hash, Response::Refused);
            return;
        };
        self.seen.insert(hash);
        self.responses.insert(hash, Response::Kept(slot));
    }
}

/// A later line of a kept response updates its request: the usage it reports (unless past the
/// limits: then the earlier line's stays, with a warning), what it annotates, and the earliest
/// time any of its lines was written.
fn later_line(
    slot: RequestSlot,
    message: &ClaudeMessage<'_>,
    at_ms: Option<i64>,
    line: &Line<'_>,
    cx: &mut LineContext<'_, '_>,
) {
    let usage = message.usage.as_ref().map(ClaudeUsage::to_usage);
    let problem = usage.as_ref().and_then(crate::limits::usage_problem);
    if let Some(problem) = &problem {
        cx.diag.warn(
            line.number,
            format!("usage not updated from this line: {problem}"),
        );
    }
    let Some(request) = cx.sink.get_mut(slot) else {
        return;
    };
    if let (Some(usage), None) = (usage, problem) {
        request.usage = usage;
    }
    message.annotate(request);
    if let Some(at_ms) = at_ms {
        request.at_ms = request.at_ms.min(at_ms);
    }
}

/// The kind of a thread, from its name: `main`, a compaction agent's (`acompact-*`), or else a
/// sub-agent's.
fn thread_kind(thread: &str) -> ThreadKind {
    if thread == "main" {
        ThreadKind::Main
    } else if thread.starts_with("acompact") {
        ThreadKind::Compaction
    } else {
        ThreadKind::Subagent
    }
}

pub(crate) fn id_hash(id: &str) -> u64 {
    // SipHash with fixed keys: stable across runs, which keeps de-duplication deterministic.
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

fn thread_hash(session: &str, thread: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (session, thread).hash(&mut h);
    h.finish()
}

impl FormatReader for ClaudeReader<'_> {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(parsed) = parse_line::<ClaudeLine<'_>>(line, cx.diag) else {
            return;
        };
        let kind = parsed.kind.as_ref().map(Str::as_str);
        if let Some(uuid) = &parsed.uuid {
            // Every line with a uuid is a link of its conversation (attachments and progress
            // lines too), even one skipped below.
            let parent = parsed
                .parent_uuid
                .as_ref()
                .or(parsed.logical_parent_uuid.as_ref())
                .map(|p| id_hash(p.as_str()));
            let response = match (kind, &parsed.message) {
                (Some("assistant"), Some(m)) => m.id.as_ref().map(|id| id_hash(id.as_str())),
                _ => None,
            };
            self.conversations
                .link(id_hash(uuid.as_str()), parent, response);
        }
        if !matches!(kind, Some("user" | "assistant" | "system")) {
            return;
        }
        let sidechain = parsed.is_sidechain.unwrap_or(false);
        if sidechain && !self.include_subagents {
            return;
        }
        // A shared handle, not a copy: the thread name below must not borrow `self`.
        let file_agent = self.file_agent.clone();
        let thread: &str = if sidechain {
            match (&parsed.agent_id, &file_agent) {
                (Some(id), _) => id.as_str(),
                (None, Some(id)) => id,
                (None, None) => "sidechain",
            }
        } else {
            "main"
        };
        let file_stem = self.file_stem.clone();
        let session = parsed.session_id.as_ref().map_or(&*file_stem, Str::as_str);
        let key = thread_hash(session, thread);
        match kind {
            Some("system") => self.threads.entry(key).or_default().system(&parsed),
            Some("user") => self.threads.entry(key).or_default().user(&parsed),
            _ => self.assistant(&parsed, key, (session, thread), line, cx),
        }
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}
