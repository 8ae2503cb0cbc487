//! muninn's ledger export (`muninn ledger --export`): JSON Lines of
//! [`muninn_core::ledger::LedgerRow`], read back as one trace per (Mind, role, model) so muninn's
//! own history replays like any transcript.
//!
//! Mapping: session = Mind, thread = role, kind = [`ThreadKind::Mind`]. A row whose segment
//! differs from the previous row of the same (Mind, role) is marked `compacted`: a new segment is
//! a rewrite of the conversation (rehydration from memory), which is what the flag records.

use crate::lines::{Line, parse_line};
use crate::{FormatReader, LineContext};
use muninn_core::ledger::LedgerRow;
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
