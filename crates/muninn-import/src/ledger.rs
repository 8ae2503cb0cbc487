//! muninn's ledger export (`muninn ledger --export`): JSON Lines of
//! [`muninn_core::ledger::LedgerRow`], read back as one trace per (Mind, role, model) so muninn's
//! own history replays like any transcript.
//!
//! Mapping: session = Mind, thread = role, kind = [`ThreadKind::Mind`]. A row whose segment
//! differs from the previous row of the same (Mind, role) is marked `compacted`: a new segment is
//! a rewrite of the conversation (rehydration from memory), which is what the flag records.
//!
//! The recorded policy's own side requests are not turns of the Mind: a compaction or memory
//! flush goes to a thread of its own, `<role>/compaction`, and a keep-warm ping (tail or head) to
//! `<role>/keep-warm`, both of kind [`ThreadKind::Compaction`] — a replay counts them for what
//! was recorded only, and every other plan makes its own. An attempt the provider billed but did
//! not answer whole (a stream cut after `message_start`) goes where what it attempted goes
//! ([`muninn_core::ledger::Decided::attempted`]): a cut ping, flush or compaction to its side
//! thread; a cut request (or one whose record does not say) stays on the conversation's thread
//! at its own time, with the boundary of the request it attempted (the host writes a cut first
//! try of a turn as that turn's boundary): a replay decides the arrival there and prices it
//! under its own policy's cache state, as the outage would have cost that policy too. A row's
//! kind is its decision record's ([`muninn_core::ledger::Decided::kind`]), else its decision
//! text.

use crate::lines::{Line, parse_line};
use crate::{FormatReader, LineContext};
use muninn_core::ledger::{LedgerRow, RowKind};
use muninn_core::trace::{ThreadKind, Trace, TraceRequest};
use std::collections::HashMap;

/// Where ledger rows go: the mapping in the module docs, shared by the export's reader and
/// [`ledger_traces`].
#[derive(Debug, Default)]
struct Mapper {
    /// The last segment seen per (Mind, role).
    segments: HashMap<(String, String), u64>,
}

impl Mapper {
    /// The thread, its kind and the request one row becomes (rows in ledger order).
    fn place(&mut self, row: &LedgerRow) -> (String, ThreadKind, TraceRequest) {
        let kind = row
            .decided
            .as_ref()
            .map_or_else(|| RowKind::of_decision(&row.decision), |d| d.kind);
        // A failed attempt the provider billed goes where what it attempted goes: a request's
        // is a request of the conversation like its retry (every policy replayed would have
        // sent it at the same point, and pays it on its own cache state: an outage costs every
        // policy); a ping's, a flush's or a compaction's is the recorded policy's side request.
        let kind = match (kind, row.decided.as_ref().and_then(|d| d.attempted)) {
            (RowKind::FailedAttempt, Some(attempted)) => attempted,
            (kind, _) => kind,
        };
        let side = match kind {
            RowKind::Request | RowKind::FailedAttempt => None,
            RowKind::Flush => Some("compaction"),
            RowKind::Ping | RowKind::HeadPing => Some("keep-warm"),
        };
        if let Some(side) = side {
            // A compaction or flush muninn asked the provider for (Claude Code `/compact`) is
            // its own request beside the conversation, like Claude Code's `agent-acompact-*`
            // threads, and so is a keep-warm ping: a replay counts them for what was recorded
            // only, never as a turn every policy pays.
            let request = TraceRequest {
                at_ms: row.at_ms,
                usage: row.usage,
                boundary: false,
                compacted: false,
                tools_changed: false,
                tools_loaded: false,
                version_changed: false,
                interrupted_thinking: false,
                reasoning: false,
                blocks_added: 0,
                provider_miss: row.provider_miss,
                tool_results: Default::default(),
                conversation: 0,
                forked_from: None,
                tool_results_at_ms: None,
            };
            let thread = format!("{}/{side}", row.role);
            return (thread, ThreadKind::Compaction, request);
        }
        let previous = self
            .segments
            .insert((row.mind.clone(), row.role.clone()), row.segment);
        let request = TraceRequest {
            at_ms: row.at_ms,
            usage: row.usage,
            boundary: row.boundary,
            compacted: previous.is_some_and(|s| s != row.segment),
            tools_changed: false,
            tools_loaded: false,
            version_changed: false,
            interrupted_thinking: false,
            reasoning: false,
            blocks_added: 0,
            provider_miss: row.provider_miss,
            tool_results: Default::default(),
            conversation: 0,
            forked_from: None,
            tool_results_at_ms: None,
        };
        (row.role.clone(), ThreadKind::Mind, request)
    }
}

/// Reads ledger rows.
#[derive(Debug, Default)]
pub(crate) struct LedgerReader {
    mapper: Mapper,
}

impl FormatReader for LedgerReader {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(row) = parse_line::<LedgerRow>(line, cx.diag) else {
            return;
        };
        let (thread, kind, request) = self.mapper.place(&row);
        // Past the limits, the row is skipped with a warning.
        let _ = cx.push((&row.mind, &thread, kind), &row.model, request, line.number);
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}

/// A trace made of ledger rows, with the rows it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerTrace {
    /// The trace, as importing the rows' export would make it.
    pub trace: Trace,
    /// For each of its requests, the index of its row in the rows given.
    pub rows: Vec<usize>,
}

/// The traces of ledger rows already in memory (a host's own ledger, in ledger order), mapped
/// exactly as importing their export maps them (see the module docs), each with the rows its
/// requests came from. Traces come in the order their first row appears.
pub fn ledger_traces(rows: &[LedgerRow]) -> Vec<LedgerTrace> {
    let mut mapper = Mapper::default();
    let mut index: HashMap<(String, String, String), usize> = HashMap::new();
    let mut traces: Vec<LedgerTrace> = Vec::new();
    for (at, row) in rows.iter().enumerate() {
        let (thread, kind, request) = mapper.place(row);
        let key = (row.mind.clone(), thread, row.model.clone());
        let slot = *index
            .entry(key)
            .or_insert_with_key(|(mind, thread, model)| {
                traces.push(LedgerTrace {
                    trace: Trace {
                        id: format!("{mind}/{thread}/{model}"),
                        session: mind.clone(),
                        thread: thread.clone(),
                        kind,
                        model: model.clone(),
                        source: "ledger".to_string(),
                        requests: Vec::new(),
                    },
                    rows: Vec::new(),
                });
                traces.len() - 1
            });
        traces[slot].trace.requests.push(request);
        traces[slot].rows.push(at);
    }
    // By time, as an import sorts them (stable: rows at the same time keep ledger order).
    for t in &mut traces {
        let mut order: Vec<usize> = (0..t.rows.len()).collect();
        order.sort_by_key(|&i| t.trace.requests[i].at_ms);
        t.trace.requests = order.iter().map(|&i| t.trace.requests[i]).collect();
        t.rows = order.iter().map(|&i| t.rows[i]).collect();
    }
    traces
}
