//! `claude -p --output-format stream-json --verbose` output, as agent hosts log a run's stdout.
//!
//! # The format, as far as the importer cares
//!
//! One event per line (see `reference/claude-cli-2.1.332.md`, §3.2–3.3); several runs may be
//! concatenated in one file. Every event carries `session_id` (snake case, unlike a transcript's
//! `sessionId`), which is the session of the requests that follow.
//!
//! - `system` / `init` opens a turn: the user's message (not echoed on stdout) is one block and
//!   makes the next request a `boundary`.
//! - `assistant`: one event per content block of an API response, every one repeating
//!   `message.id`, `message.model` and `message.usage`; they are merged into one request. The
//!   usage is the `message_start` usage, so its `output_tokens` is a placeholder (1).
//!   A `thinking` or `redacted_thinking` event marks the request `reasoning`, as a transcript's
//!   line does (the transcript reader's rules for a response's lines are shared, see
//!   `claude::ThreadState`).
//!   `parent_tool_use_id` names the sub-agent whose request it was (its own thread); `null` is the
//!   main thread.
//! - `user`: tool results (`tool_result` blocks make the next request a tool-loop continuation)
//!   or, with `isReplay`, the echo of the prompt (already counted at `init`).
//! - `system` / `compact_boundary`: the conversation was compacted; the next request is
//!   `compacted`.
//! - `result` closes the turn. Its `usage` is the sum over the turn's main-thread requests and
//!   is final (the `message_delta` numbers, real output): with one main-thread request it
//!   replaces that request's usage; with several, the output the `assistant` events could not
//!   know goes to the last request (the input side of each is exact already).
//!
//! # What cannot be known: time
//!
//! stream-json events carry no timestamps. Request times are synthesized: turns follow one
//! another back to back from the Unix epoch, each lasting its `result.duration_ms`, and a turn's
//! requests are spread evenly over it. Idle gaps between turns are therefore unknown (zero),
//! so TTL expiries cannot be seen in such a log; what is exact is each request's usage, its
//! order, its thread, and where turns and compactions begin.
//!
//! A run cut off before its last `result` (a killed process, a torn last line) keeps every
//! request it recorded, with `message_start` usage, and gets one warning.

use crate::claude::{ClaudeUsage, id_hash};
use crate::json::Str;
use crate::lines::{Line, parse_line};
use crate::sink::RequestSlot;
use crate::{FormatReader, ImportOptions, LineContext};
use muninn_core::trace::{ThreadKind, Usage};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The fields of an event the importer reads.
#[derive(Deserialize)]
struct StreamEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    subtype: Option<Str<'a>>,
    #[serde(borrow)]
    session_id: Option<Str<'a>>,
    #[serde(borrow)]
    parent_tool_use_id: Option<Str<'a>>,
    #[serde(rename = "isReplay")]
    is_replay: Option<bool>,
    #[serde(borrow)]
    message: Option<StreamMessage<'a>>,
    /// `result` only: the turn's usage.
    usage: Option<ClaudeUsage>,
    /// `result` only: the turn's wall time.
    duration_ms: Option<u64>,
}

// A stream-json `assistant` line's message is the transcript's message.
use crate::claude::ClaudeMessage as StreamMessage;

// Per-thread state: the transcript reader's.
use crate::claude::ThreadState;

/// A request of the open turn.
#[derive(Debug, Clone, Copy)]
struct TurnRequest {
    slot: RequestSlot,
    main: bool,
}

/// Reads one stream-json log.
#[derive(Debug)]
pub(crate) struct StreamJsonReader<'s> {
    include_subagents: bool,
    /// The session of the events that carry none: the last one seen, first the file stem.
    session: String,
    /// Ids imported by this and earlier files (shared with the transcript reader: the same
    /// response in a transcript and in a stdout log is one request).
    seen: &'s mut HashSet<u64>,
    /// This file's responses by id hash: `Some` if imported, `None` if dropped.
    responses: HashMap<u64, Option<RequestSlot>>,
    threads: HashMap<(String, String), ThreadState>,
    /// The synthesized start of the open (or next) turn, Unix ms.
    clock_ms: i64,
    /// The open turn's requests, in order.
    turn: Vec<TurnRequest>,
    /// Whether a main-thread request of the open turn was refused (past the limits): the
    /// result's usage sums it too, so it cannot be shared out among the others.
    turn_refused: bool,
    /// The responses refused at their first event: later events update no request, but their
    /// blocks are still what the client sends next, so the thread takes them in.
    refused: HashSet<u64>,
}

impl<'s> StreamJsonReader<'s> {
    pub fn new(path: &Path, opts: &ImportOptions, seen: &'s mut HashSet<u64>) -> Self {
        StreamJsonReader {
            include_subagents: opts.include_subagents,
            session: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            seen,
            responses: HashMap::new(),
            threads: HashMap::new(),
            clock_ms: 0,
            turn: Vec::new(),
            turn_refused: false,
            refused: HashSet::new(),
        }
    }

    fn thread(&mut self, thread: &str) -> &mut ThreadState {
        self.threads
            .entry((self.session.clone(), thread.to_owned()))
            .or_default()
    }

    /// Ends the open turn at `line`: reconciles the main-thread usage with the result's (if
    /// any) and spreads the turn's requests over its duration.
    fn close_turn(
        &mut self,
        result: Option<&StreamEvent<'_>>,
        line: u64,
        cx: &mut LineContext<'_, '_>,
    ) {
        if let Some(total) = result.and_then(|r| r.usage.as_ref()).map(|u| u.to_usage()) {
            match crate::limits::usage_problem(&total) {
                Some(problem) => cx
                    .diag
                    .warn(line, format!("the result's usage is not used: {problem}")),
                // Given to the requests kept, it handed them the refused one's tokens (a lone
                // one took the whole sum as its own).
                None if self.turn_refused => cx.diag.warn(
                    line,
                    "the result's usage is not used: it counts a request skipped above (past the limits)",
                ),
                None => self.reconcile(total, cx),
            }
        }
        let duration = self.duration(result, line, cx);
        let n = i64::try_from(self.turn.len()).unwrap_or(i64::MAX).max(1);
        for (i, r) in (0i64..).zip(&self.turn) {
            if let Some(request) = cx.sink.get_mut(r.slot) {
                // Evenly spread, and at least 1 ms apart so the order survives the sort by time
                // (in i128: a long turn of many requests overflowed `i * duration`).
                let spread = i128::from(i) * i128::from(duration) / i128::from(n);
                let offset = i64::try_from(spread).unwrap_or(i64::MAX).max(i);
                request.at_ms = self.clock_ms.saturating_add(offset);
            }
        }
        self.clock_ms = self.clock_ms.saturating_add(duration.max(n));
        self.turn.clear();
        self.turn_refused = false;
    }

    /// The turn's duration, from its result's `duration_ms`: 0 without one, and 0 with a
    /// warning for one that would take the synthesized clock past the last time there is
    /// (`crate::limits`; such durations overflowed the clock).
    fn duration(
        &self,
        result: Option<&StreamEvent<'_>>,
        line: u64,
        cx: &mut LineContext<'_, '_>,
    ) -> i64 {
        let Some(duration_ms) = result.and_then(|r| r.duration_ms) else {
            return 0;
        };
        let fits = i64::try_from(duration_ms).ok().filter(|&d| {
            self.clock_ms
                .checked_add(d)
                .is_some_and(|end| end <= crate::limits::MAX_AT_MS)
        });
        fits.unwrap_or_else(|| {
            cx.diag.warn(
                line,
                format!(
                    "duration_ms {duration_ms} takes the log past the time limit (the year \
                     9999), taken as 0"
                ),
            );
            0
        })
    }

    /// The result's usage, the sum over the turn's main-thread requests, made theirs: the whole
    /// of it for a lone request; else the output the `assistant` events could not know, to the
    /// last.
    fn reconcile(&mut self, total: Usage, cx: &mut LineContext<'_, '_>) {
        let main: Vec<RequestSlot> = self
            .turn
            .iter()
            .filter(|r| r.main)
            .map(|r| r.slot)
            .collect();
        if let [only] = main[..] {
            if let Some(request) = cx.sink.get_mut(only) {
                request.usage = total;
            }
        } else if let Some((&last, earlier)) = main.split_last() {
            // Saturating: the outputs the events gave (placeholders, but any number a log
            // holds; their plain sum overflowed).
            let known = earlier
                .iter()
                .filter_map(|&s| cx.sink.get_mut(s).map(|r| r.usage.output))
                .fold(0u64, u64::saturating_add);
            if let Some(request) = cx.sink.get_mut(last) {
                request.usage.output = total.output.saturating_sub(known);
            }
        }
    }

    fn assistant(
        &mut self,
        event: &StreamEvent<'_>,
        line: &Line<'_>,
        cx: &mut LineContext<'_, '_>,
    ) {
        let Some((message, id)) =
            StreamMessage::identified(event.message.as_ref(), "assistant event", line, cx)
        else {
            return;
        };
        let thread = event
            .parent_tool_use_id
            .as_ref()
            .map_or("main", Str::as_str)
            .to_owned();
        let hash = id_hash(id);
        match self.responses.get(&hash) {
            Some(None) => {
                if self.refused.contains(&hash) {
                    self.thread(&thread).more_of_response(message);
                }
            }
            Some(Some(slot)) => {
                let slot = *slot;
                self.thread(&thread).more_of_response(message);
                if let Some(request) = cx.sink.get_mut(slot) {
                    message.annotate(request);
                }
            }
            None => self.new_response(&thread, hash, message, line, cx),
        }
    }

    /// The first event of a response: a new request, unless it is a duplicate or a placeholder.
    fn new_response(
        &mut self,
        thread: &str,
        hash: u64,
        message: &StreamMessage<'_>,
        line: &Line<'_>,
        cx: &mut LineContext<'_, '_>,
    ) {
        if self.seen.contains(&hash) {
            cx.stats.duplicates_dropped += 1;
            self.responses.insert(hash, None);
            self.thread(thread).after_response(message.blocks());
            return;
        }
        let (Some(model), Some(usage)) = (&message.model, &message.usage) else {
            cx.diag.warn(
                line.number,
                "assistant event without message.model or message.usage, skipped",
            );
            return;
        };
        if model.as_str() == "<synthetic>" {
            cx.stats.synthetic_dropped += 1;
            self.responses.insert(hash, None);
            return;
        }
        let turn = i64::try_from(self.turn.len()).unwrap_or(0);
        let at_ms = self.clock_ms.saturating_add(turn);
        let state = self.thread(thread);
        let request = state.take_request(at_ms, usage.to_usage(), message);
        let main = thread == "main";
        let kind = if main {
            ThreadKind::Main
        } else {
            ThreadKind::Subagent
        };
        let session = self.session.clone();
        let pushed = cx.push(
            (&session, thread, kind),
            model.as_str(),
            request,
            line.number,
        );
        let Some(slot) = pushed else {
            // Past the limits (warned): its later events are not read.
            self.responses.insert(hash, None);
            self.turn_refused |= main;
            self.refused.insert(hash);
            return;
        };
        self.seen.insert(hash);
        self.responses.insert(hash, Some(slot));
        self.turn.push(TurnRequest { slot, main });
    }
}

impl FormatReader for StreamJsonReader<'_> {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(event) = parse_line::<StreamEvent<'_>>(line, cx.diag) else {
            return;
        };
        if let Some(session) = &event.session_id
            && session.as_str() != self.session
        {
            self.session = session.as_str().to_owned();
        }
        if event.parent_tool_use_id.is_some() && !self.include_subagents {
            return;
        }
        match (
            event.kind.as_ref().map(Str::as_str),
            event.subtype.as_ref().map(Str::as_str),
        ) {
            (Some("system"), Some("init")) => {
                if !self.turn.is_empty() {
                    // The previous turn ended without a result (an API error, an interrupt).
                    self.close_turn(None, line.number, cx);
                }
                // A turn of refused requests only left nothing to close.
                self.turn_refused = false;
                self.thread("main").unechoed_prompt();
            }
            (Some("system"), Some("compact_boundary")) => self.thread("main").compact_boundary(),
            (Some("user"), _) if event.is_replay != Some(true) => {
                let thread = event
                    .parent_tool_use_id
                    .as_ref()
                    .map_or("main", Str::as_str)
                    .to_owned();
                let content = event.message.as_ref().and_then(|m| m.content);
                self.thread(&thread).user_content(content, true);
            }
            (Some("assistant"), _) => self.assistant(&event, line, cx),
            (Some("result"), _) => self.close_turn(Some(&event), line.number, cx),
            _ => {}
        }
    }

    fn finish(mut self, cx: &mut LineContext<'_, '_>) {
        if !self.turn.is_empty() {
            let n = self.turn.len();
            self.close_turn(None, 0, cx);
            cx.diag.warn(
                0,
                format!(
                    "the log ends inside a turn (no result): its {n} request(s) are kept with \
                     their message_start usage (output unknown)"
                ),
            );
        }
    }
}
