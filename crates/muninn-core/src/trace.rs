//! Normalised traces: what every importer produces and the replay engine consumes.
//!
//! A [`Trace`] is one thread of one session on one model — the unit the provider's prompt cache
//! is scoped to (the cache is per model, and sub-agents have their own system prompt). Each
//! [`TraceRequest`] is one API request with its recorded [`Usage`] and time. Nothing else of the
//! conversation is kept: the replay engine reconstructs the session's growth from the usage alone.
//!
//! # JSON Lines format (`muninn import` output)
//!
//! A stored trace file is JSON Lines. The first line is the header, every later line one request:
//!
//! ```text
//! {"type":"trace","id":"<session>/<thread>/<model>","session":"…","thread":"main","kind":"main","model":"claude-opus-4-6","source":"…"}
//! {"type":"request","at_ms":1770757916846,"usage":{"input":3,"cache_write_5m":0,"cache_write_1h":13835,"cache_read":11515,"output":13},"boundary":true}
//! ```

use crate::money::Tokens;
use serde::{Deserialize, Serialize};

/// The token usage of one request, as the provider reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to the cache (after the last breakpoint).
    #[serde(default)]
    pub input: Tokens,
    /// Tokens written to the cache with the 5-minute TTL.
    #[serde(default)]
    pub cache_write_5m: Tokens,
    /// Tokens written to the cache with the 1-hour TTL.
    #[serde(default)]
    pub cache_write_1h: Tokens,
    /// Tokens read from the cache.
    #[serde(default)]
    pub cache_read: Tokens,
    /// Output tokens.
    #[serde(default)]
    pub output: Tokens,
}

impl Usage {
    // The sums saturate rather than overflow: usage comes from providers, transcripts and
    // ledgers muninn does not control, and fuzzing fed `u64::MAX` through every importer and
    // decoder. A saturated sum is absurd but visible; an overflow panicked (debug) or wrapped
    // to a small, plausible number (release).

    /// The whole prompt: uncached + written + read.
    pub fn prompt(&self) -> Tokens {
        self.input
            .saturating_add(self.written())
            .saturating_add(self.cache_read)
    }

    /// All tokens written to the cache.
    pub fn written(&self) -> Tokens {
        self.cache_write_5m.saturating_add(self.cache_write_1h)
    }

    /// Component-wise sum.
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.cache_write_5m = self.cache_write_5m.saturating_add(other.cache_write_5m);
        self.cache_write_1h = self.cache_write_1h.saturating_add(other.cache_write_1h);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.output = self.output.saturating_add(other.output);
    }
}

/// What kind of thread a trace is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadKind {
    /// The session's main conversation.
    Main,
    /// A sub-agent (Claude Code `Task`/`Agent` tool, `isSidechain: true`).
    Subagent,
    /// A compaction request's own thread (Claude Code `agent-acompact-*`), or another kind of
    /// the recorded policy's own side requests (muninn's keep-warm pings and memory flushes):
    /// counted for `recorded` only.
    Compaction,
    /// A thread from muninn's own ledger (Persona or Self of a Mind).
    Mind,
}

impl ThreadKind {
    /// The kind's stable name, the same as its serialized form: reports key rows by it (`replay
    /// --by kind`), so it must not follow a change of the `Debug` output.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadKind::Main => "main",
            ThreadKind::Subagent => "subagent",
            ThreadKind::Compaction => "compaction",
            ThreadKind::Mind => "mind",
        }
    }
}

/// One API request of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRequest {
    /// When the request was made, Unix milliseconds. Claude Code records when the response was
    /// written; importers use the earliest line of the response, which is within a second or so
    /// of the request start for the short first block.
    pub at_ms: i64,
    /// The usage the provider reported.
    pub usage: Usage,
    /// Whether this request begins a new user turn (a human message or a new delivery), as
    /// opposed to continuing a tool loop. Refreshes happen only at boundaries, or where the
    /// recorded client compacted (`compacted`; the replay's `Turn::may_refresh`).
    #[serde(default)]
    pub boundary: bool,
    /// Whether the source recorded a compaction (a rewrite of the conversation) just before this
    /// request.
    #[serde(default, skip_serializing_if = "is_false")]
    pub compacted: bool,
    /// Whether the client changed the request's tool definitions just before this request, as
    /// the source records it before the request is sent (Claude Code: a `system` line
    /// `bridge_status` "/remote-control is active"; the remote-control bridge changes the tool
    /// list). The whole prefix, tools first, is then new. On a thread's first request it says
    /// nothing: the tools were so from the start.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tools_changed: bool,
    /// Whether the tool results this request sends are the first of its thread to load tools
    /// the client had deferred (Claude Code: `tool_reference` blocks in a `tool_result`, what
    /// its `ToolSearch` returns; the definitions of the tools named join the next request).
    /// Whether that changes the prompt's head depends on the model: the cache model learns it
    /// ([`crate::validate`]). Written before the request is sent.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tools_loaded: bool,
    /// Whether the thread's previous request was sent by another client version than this one,
    /// as the source records it (Claude Code names its `version` on every line: a session
    /// resumed after an upgrade, or two clients on one session). A new version may bring a new
    /// system prompt, or not: on the tuning parts one such change was diagnosed
    /// `system_changed` by the provider, another read the whole prefix. So it predicts no miss;
    /// it names the level of one ([`crate::validate`]). On a thread's first request it says
    /// nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub version_changed: bool,
    /// Whether the person interrupted the thread's previous answer while it had only begun to
    /// think (Claude Code: a `[Request interrupted by user]` line right after a response whose
    /// only blocks are thinking). Claude Code then sends the next turn without the thinking of
    /// the turn it interrupted, so that prompt diverges where the turn's first thinking began
    /// (the cache model's `ThinkingDrop`, [`crate::validate`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted_thinking: bool,
    /// Whether the response to this request carried reasoning that the client may send back
    /// only until the next user message: Codex's `reasoning` response items, Claude Code's
    /// `thinking` / `redacted_thinking` blocks. OpenAI's reasoning models drop an earlier turn's
    /// reasoning from the prompt at the next user message, and some Claude Code clients drop a
    /// finished turn's thinking the same way, so that prompt differs from the last one where the
    /// turn's first reasoning began. Part of the provider's answer: a prediction may use it only
    /// for later requests.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reasoning: bool,
    /// Content blocks added to the prompt since the previous request of the thread, when known
    /// (0 = unknown). Used by the cache model's 20-block lookback.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub blocks_added: u32,
    /// The provider's diagnosis of this request's cache use, where the source recorded one
    /// (Claude Code 2.1.140 on stores `message.diagnostics.cache_miss_reason`; muninn's ledger
    /// rows carry it when the backend asked): a ground-truth label for `muninn check-cache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_miss: Option<crate::miss::ProviderMiss>,
    /// The tool results this request added to the prompt, where the source shows them (Claude
    /// Code transcripts carry `tool_result` blocks): what a later clear (the `mask` action) could
    /// remove. Zero when none, or unknown.
    #[serde(default, skip_serializing_if = "ToolResults::is_none")]
    pub tool_results: ToolResults,
    /// Which of the thread's conversations this request continues, where the source tells them
    /// apart: 0 for the thread's first, another value (an id, not a count) for a conversation
    /// that forked from it. Requests with the same value extend one another. Claude Code does
    /// not lock a session, so one resumed in two terminals writes two conversations into one
    /// thread, their requests alternating; a person going back (a rewind) forks one too. The
    /// Claude Code importer follows each response's `parentUuid` chain to the response before
    /// it; other sources leave 0. The replay engine prices conversations alive at once apart
    /// ([`crate::replay::branches`]).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub conversation: u64,
    /// On a conversation's first request, the conversation it forked from, where the source
    /// knows it. With three conversations or more in a thread (two terminals and a rewind in
    /// one), the request just before in time may belong to another one than the fork's origin;
    /// whether the fork is a rewind is judged against its true origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<u64>,
    /// When the last of [`TraceRequest::tool_results`] was written (Unix ms), where the source
    /// tells it (Claude Code: the `user` line holding it). The answer before an idle gap awaits
    /// its tool results only until they exist: a tool that ran at once and whose follow-up the
    /// API refused (a usage limit) leaves the results written before the gap, carried by the
    /// next request, which may be a person's message hours later. `None`: unknown, awaited
    /// until the request is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results_at_ms: Option<i64>,
}

/// Tool results one request added to the prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResults {
    /// The tokens a clear would remove from them: each block as the cache model counts it less
    /// the same block holding the placeholder ([`crate::mask::tool_result_tokens`]; an
    /// estimate, not the provider's count).
    pub tokens: Tokens,
    /// How many `tool_result` blocks (tool uses answered).
    pub uses: u32,
}

impl ToolResults {
    /// Whether none are known.
    pub fn is_none(&self) -> bool {
        self.tokens == 0 && self.uses == 0
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl TraceRequest {
    /// The TTL tier the request wrote in, if it wrote anything (1h wins if both appear).
    pub fn write_ttl(&self) -> Option<crate::cache::Ttl> {
        if self.usage.cache_write_1h > 0 {
            Some(crate::cache::Ttl::OneHour)
        } else if self.usage.cache_write_5m > 0 {
            Some(crate::cache::Ttl::FiveMinutes)
        } else {
            None
        }
    }
}

/// One thread of one session on one model, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// Stable identifier, `<session>/<thread>/<model>`.
    pub id: String,
    /// The session (conversation) id in the source.
    pub session: String,
    /// The thread within the session: `main`, or the sub-agent's id.
    pub thread: String,
    /// What kind of thread this is.
    pub kind: ThreadKind,
    /// The model every request of this trace was sent to.
    pub model: String,
    /// Where the trace came from (a path, for messages).
    pub source: String,
    /// The requests, sorted by time.
    pub requests: Vec<TraceRequest>,
}

impl Trace {
    /// The TTL the trace's writes used, judged over the whole trace: 1h if any request wrote at
    /// 1h, else 5m.
    ///
    /// This looks at every request, later ones included, so it is hindsight: the replay engine
    /// may take it as its documented default assumption (the session's tier, `--ttl` overrides
    /// it), but no prediction of a request's usage may use it ([`crate::validate`] takes the tier
    /// of the latest *earlier* write instead).
    pub fn whole_trace_ttl(&self) -> crate::cache::Ttl {
        if self.requests.iter().any(|r| r.usage.cache_write_1h > 0) {
            crate::cache::Ttl::OneHour
        } else {
            crate::cache::Ttl::FiveMinutes
        }
    }

    /// The sum of the recorded usage.
    pub fn total_usage(&self) -> Usage {
        let mut total = Usage::default();
        for r in &self.requests {
            total.add(&r.usage);
        }
        total
    }
}

/// A line of the stored trace format (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceLine {
    /// The header: everything about the trace but its requests.
    Trace {
        /// See [`Trace::id`].
        id: String,
        /// See [`Trace::session`].
        session: String,
        /// See [`Trace::thread`].
        thread: String,
        /// See [`Trace::kind`].
        kind: ThreadKind,
        /// See [`Trace::model`].
        model: String,
        /// See [`Trace::source`].
        source: String,
    },
    /// One request.
    Request(TraceRequest),
}
