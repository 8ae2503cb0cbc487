//! muninn's stored trace format: a header line ([`TraceLine::Trace`]) followed by that trace's
//! request lines ([`TraceLine::Request`]); several traces may follow one another in one file.
//! See `muninn_core::trace` for the format itself.
//!
//! Traces are read back exactly as written (id, source and request order kept), not re-keyed or
//! merged: the file is already the normalised form.

use crate::lines::{Line, parse_line};
use crate::{FormatReader, LineContext};
use muninn_core::trace::{Trace, TraceLine};
use std::io::{self, Write};

/// Writes `t` in the stored format: its header line, then one line per request.
pub fn write_trace(w: &mut impl Write, t: &Trace) -> io::Result<()> {
    let header = TraceLine::Trace {
        id: t.id.clone(),
        session: t.session.clone(),
        thread: t.thread.clone(),
        kind: t.kind,
        model: t.model.clone(),
        source: t.source.clone(),
    };
    serde_json::to_writer(&mut *w, &header)?;
    w.write_all(b"\n")?;
    for r in &t.requests {
        serde_json::to_writer(&mut *w, &TraceLine::Request(*r))?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Reads stored traces.
#[derive(Debug, Default)]
pub(crate) struct StoredReader {
    current: Option<Trace>,
}

impl FormatReader for StoredReader {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some(parsed) = parse_line::<TraceLine>(line, cx.diag) else {
            return;
        };
        match parsed {
            TraceLine::Trace {
                id,
                session,
                thread,
                kind,
                model,
                source,
            } => {
                if let Some(done) = self.current.take() {
                    cx.sink.push_whole(done);
                }
                self.current = Some(Trace {
                    id,
                    session,
                    thread,
                    kind,
                    model,
                    source,
                    requests: Vec::new(),
                });
            }
            TraceLine::Request(request) => {
                match (&mut self.current, crate::limits::request_problem(&request)) {
                    // Its numbers are taken as written, so they are held to the limits too.
                    (Some(_), Some(problem)) => cx
                        .diag
                        .warn(line.number, format!("request skipped: {problem}")),
                    (Some(trace), None) => trace.requests.push(request),
                    (None, _) => cx
                        .diag
                        .warn(line.number, "request line before any trace header, skipped"),
                }
            }
        }
    }

    fn finish(mut self, cx: &mut LineContext<'_, '_>) {
        if let Some(done) = self.current.take() {
            cx.sink.push_whole(done);
        }
    }
}
