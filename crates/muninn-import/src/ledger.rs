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
//! was recorded only, and every other plan makes its own. A row's kind is its decision record's
//! ([`muninn_core::ledger::Decided::kind`]), else its decision text.

use crate::lines::{Line, parse_line};
use crate::{FormatReader, LineContext};
use muninn_core::ledger::{LedgerRow, RowKind};
use muninn_core::trace::{ThreadKind, TraceRequest};
use std::collections::HashMap;

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
        let kind = row
            .decided
            .as_ref()
            .map_or_else(|| RowKind::of_decision(&row.decision), |d| d.kind);
        let side = match kind {
            RowKind::Request => None,
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
                blocks_added: 0,
                provider_miss: row.provider_miss,
            };
            let thread = format!("{}/{side}", row.role);
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
            provider_miss: row.provider_miss,
        };
        cx.push(&row.mind, &row.role, ThreadKind::Mind, &row.model, request);
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}
