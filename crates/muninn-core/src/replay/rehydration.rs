//! Rehydration measured, not assumed: the sizes of the segments real sessions restarted from.
//!
//! A counterfactual refresh starts its new segment from head + R tokens of memory, and how large R
//! is decides whether refreshing pays. Where a trace recorded a compaction — Claude Code's
//! `compact_boundary`, a Codex `compacted` line, a new segment in muninn's own ledger — the first
//! request after it shows what the session really restarted from: everything it did not read
//! from cache (`prompt − cache read`: the summary, or memory, plus the first new message) sat on
//! top of the head it read. Those sizes, one per compaction, are the sample; their median is
//! `muninn replay`'s default rehydration when there is one.
//!
//! This module is pure.

use crate::money::Tokens;
use crate::trace::{ThreadKind, Trace};

/// The rehydration sizes the traces recorded, one per compaction of a main (or Mind) thread,
/// in trace order.
pub fn measured_rehydrations(traces: &[Trace]) -> Vec<Tokens> {
    traces
        .iter()
        .filter(|t| matches!(t.kind, ThreadKind::Main | ThreadKind::Mind))
        .flat_map(|t| {
            t.requests
                .iter()
                .skip(1)
                .filter(|r| r.compacted)
                .map(|r| r.usage.prompt().saturating_sub(r.usage.cache_read))
        })
        .filter(|&r| r > 0)
        .collect()
}

/// The median of a sample (the lower of the two middle values), `None` when it is empty.
pub fn median(samples: &[Tokens]) -> Option<Tokens> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TraceRequest, Usage};

    fn request(read: Tokens, write: Tokens, compacted: bool) -> TraceRequest {
        TraceRequest {
            usage: Usage {
                input: 3,
                cache_write_5m: write,
                cache_read: read,
                ..Usage::default()
            },
            compacted,
            tools_changed: false,
            tools_loaded: false,
            version_changed: false,
            interrupted_thinking: false,
            reasoning: false,
            ..TraceRequest::default()
        }
    }

    #[test]
    fn each_compaction_measures_what_the_session_restarted_from() {
        let trace = |kind, requests| Trace {
            id: "s/t/m".into(),
            session: "s".into(),
            thread: "t".into(),
            kind,
            model: "m".into(),
            source: "test".into(),
            requests,
        };
        let main = trace(
            ThreadKind::Main,
            vec![
                request(0, 30_000, true),
                request(30_000, 500, false),
                request(21_460, 12_497, true),
                request(34_000, 400, false),
                request(21_460, 23_812, true),
            ],
        );
        // A sub-agent's compactions are not the main session's restarts.
        let sub = trace(
            ThreadKind::Subagent,
            vec![request(0, 1, false), request(0, 9, true)],
        );
        let samples = measured_rehydrations(&[main, sub]);
        assert_eq!(samples, vec![12_500, 23_815]);
        assert_eq!(median(&samples), Some(12_500));
        assert_eq!(median(&[5, 1, 3]), Some(3));
        assert_eq!(median(&[]), None);
    }
}
