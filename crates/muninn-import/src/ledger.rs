//! muninn's ledger export (`muninn ledger --export`): JSON Lines of
//! [`muninn_core::ledger::LedgerRow`], read back as one trace per (Mind, role, model) so muninn's
//! own history replays like any transcript.
//!
//! Mapping: session = Mind, thread = role, kind = [`ThreadKind::Mind`]. A row whose segment
//! differs from the previous row of the same (Mind, role) is marked `compacted`: a new segment is
//! a rewrite of the conversation (rehydration from memory), which is what the flag records. A row
//! whose decision is `compact` (the compaction request itself) goes to a thread of its own,
//! `<role>/compaction`, of kind [`ThreadKind::Compaction`].

use crate::lines::{Line, parse_line};
use crate::{FormatReader, LineContext};
use muninn_core::ledger::LedgerRow;
use muninn_core::trace::{ThreadKind, TraceRequest};
use std::collections::HashMap;

/// The ledger decision of a compaction's own row (the host's `compact`).
const COMPACTION_DECISION: &str = "compact";

/// Reads ledger rows.
#[derive(Debug, Default)]
pub(crate) struct LedgerReader {
    /// The last segment seen per (Mind, role).
    segments: HashMap<(String, String), u64>,
}

impl FormatReader for LedgerReader {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(row) = parse_line::<LedgerRow>(line, cx.diag) else {
            return;
        };
        if row.decision == COMPACTION_DECISION {
            // A compaction muninn asked the provider for (Claude Code `/compact`) is its own
            // request beside the conversation, like Claude Code's `agent-acompact-*` threads: a
            // replay counts it for what was recorded only, never as a turn every policy pays.
            let request = TraceRequest {
                at_ms: row.at_ms,
                usage: row.usage,
                boundary: false,
                compacted: false,
                blocks_added: 0,
            };
            let thread = format!("{}/compaction", row.role);
            cx.push(
                &row.mind,
                &thread,
                ThreadKind::Compaction,
                &row.model,
                request,
            );
            return;
        }
        let previous = self
            .segments
            .insert((row.mind.clone(), row.role.clone()), row.segment);
        let request = TraceRequest {
            at_ms: row.at_ms,
            usage: row.usage,
            boundary: row.boundary,
            compacted: previous.is_some_and(|s| s != row.segment),
            blocks_added: 0,
        };
        cx.push(&row.mind, &row.role, ThreadKind::Mind, &row.model, request);
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}
