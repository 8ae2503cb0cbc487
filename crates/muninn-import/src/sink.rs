//! The growing set of traces an import produces, keyed by (session, thread, model).
//!
//! Invariants: each key maps to exactly one trace; a trace's kind and source are fixed by its first
//! request; requests are appended in file order and sorted by time only in [`TraceSet::finish`], so
//! readers may still update a request in place (Claude Code spreads one response over many lines)
//! through the [`RequestSlot`] they were given.

use muninn_core::trace::{ThreadKind, Trace, TraceRequest};
use std::collections::HashMap;

/// Where a request lives, so later lines of the same response can update it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestSlot {
    trace: usize,
    request: usize,
}

/// Traces under construction.
#[derive(Debug, Default)]
pub(crate) struct TraceSet {
    index: HashMap<(String, String, String), usize>,
    traces: Vec<Trace>,
}

impl TraceSet {
    /// Appends a request to the trace of (session, thread, model), creating it if needed.
    pub fn push(
        &mut self,
        session: &str,
        thread: &str,
        kind: ThreadKind,
        model: &str,
        source: &str,
        request: TraceRequest,
    ) -> RequestSlot {
        let key = (session.to_owned(), thread.to_owned(), model.to_owned());
        let trace = *self.index.entry(key).or_insert_with(|| {
            self.traces.push(Trace {
                id: format!("{session}/{thread}/{model}"),
                session: session.to_owned(),
                thread: thread.to_owned(),
                kind,
                model: model.to_owned(),
                source: source.to_owned(),
                requests: Vec::new(),
            });
            self.traces.len() - 1
        });
        let requests = &mut self.traces[trace].requests;
        requests.push(request);
        RequestSlot {
            trace,
            request: requests.len() - 1,
        }
    }

    /// The request at `slot`.
    pub fn get_mut(&mut self, slot: RequestSlot) -> Option<&mut TraceRequest> {
        self.traces
            .get_mut(slot.trace)?
            .requests
            .get_mut(slot.request)
    }

    /// Adds a trace read back whole (the stored format); it is kept as it was, not merged.
    pub fn push_whole(&mut self, trace: Trace) {
        self.traces.push(trace);
    }

    /// The traces, each sorted by time (stable, so equal times keep file order), in a stable
    /// order: by session, kind, thread, model. Empty traces are dropped.
    pub fn finish(self) -> Vec<Trace> {
        let mut traces: Vec<Trace> = self
            .traces
            .into_iter()
            .filter(|t| !t.requests.is_empty())
            .collect();
        for t in &mut traces {
            t.requests.sort_by_key(|r| r.at_ms);
        }
        traces.sort_by(|a, b| {
            (&a.session, a.kind, &a.thread, &a.model)
                .cmp(&(&b.session, b.kind, &b.thread, &b.model))
        });
        traces
    }
}
