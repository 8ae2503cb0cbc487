//! The validation of the cache model against recorded usage, on synthetic traces: the builders
//! every part shares, and one module per job.
//!
//! - `reads`: what the model reads on hand-written Anthropic threads (classes, the naive rule,
//!   TTLs, compactions, a head kept warm by another thread) and the report's aggregates;
//! - `heads`: tools and system heads (lookback, sharing across sessions, heads kept warm outside
//!   the traces, borrowed head sizes, a tool change);
//! - `thinking`: clients that drop a finished turn's thinking, or re-send the previous turn;
//! - `causes`: miss causes against the provider's labels;
//! - `causality`: no prediction looks ahead (Anthropic, generated traces);
//! - `codex`: OpenAI's automatic cache, its reasoning drops and its causality.

use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use muninn_core::validate::ValidationReport;

mod causality;
mod causes;
mod codex;
mod heads;
mod reads;
mod thinking;

const MIN: i64 = 60_000;
const H1: u64 = 17_842;
const H2: u64 = 21_460;

/// A request at `at_ms` that read `read` and wrote `write` at 1h (or 5m) with 1 uncached token.
fn req(at_ms: i64, read: u64, write: u64, one_hour: bool) -> TraceRequest {
    TraceRequest {
        at_ms,
        usage: Usage {
            input: 1,
            cache_write_5m: if one_hour { 0 } else { write },
            cache_write_1h: if one_hour { write } else { 0 },
            cache_read: read,
            output: 10,
        },
        boundary: false,
        compacted: false,
        tools_changed: false,
        tools_loaded: false,
        version_changed: false,
        interrupted_thinking: false,
        reasoning: false,
        blocks_added: 3,
        provider_miss: None,
        tool_results: Default::default(),
        conversation: 0,
        forked_from: None,
        tool_results_at_ms: None,
    }
}

fn trace(
    session: &str,
    thread: &str,
    kind: ThreadKind,
    model: &str,
    requests: Vec<TraceRequest>,
) -> Trace {
    Trace {
        id: format!("{session}/{thread}/{model}"),
        session: session.to_string(),
        thread: thread.to_string(),
        kind,
        model: model.to_string(),
        source: "test".to_string(),
        requests,
    }
}

/// A main thread growing by `step` tokens every `gap` ms, starting with a tools-head read of H1.
fn growing(start: i64, n: usize, gap: i64, one_hour: bool) -> Vec<TraceRequest> {
    let mut out = Vec::new();
    let mut cached = H1;
    for i in 0..n {
        let read = if i == 0 { H1 } else { cached };
        let write = if i == 0 { 8_000 } else { 500 };
        out.push(req(start + i as i64 * gap, read, write, one_hour));
        cached = read + write;
    }
    out
}

fn row<'a>(
    report: &'a ValidationReport,
    trace_id: &str,
    index: usize,
) -> &'a muninn_core::validate::RequestRow {
    let found = report
        .rows
        .iter()
        .find(|r| r.trace == trace_id && r.index == index);
    assert!(found.is_some(), "no row {trace_id} #{index}");
    match found {
        Some(r) => r,
        None => unreachable!(),
    }
}

/// What the cache model predicted row `index` of `trace_id` reads, and whether that agrees.
fn read_agree(report: &ValidationReport, trace_id: &str, index: usize) -> (u64, bool) {
    let r = row(report, trace_id, index);
    (r.cache_model.read, r.cache_model.agree)
}
