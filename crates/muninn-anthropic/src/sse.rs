//! An incremental decoder (and a small encoder) for server-sent events, as the Messages API
//! streams them.
//!
//! Bytes arrive in chunks cut anywhere — inside a line, inside a UTF-8 character, between the
//! `\r` and `\n` of a line end. [`SseDecoder::push`] buffers the unfinished tail and yields every
//! event completed so far; the events are the same whatever the chunk boundaries (a property test
//! in `tests/sse.rs` checks this). Only complete lines are decoded as UTF-8, so a character split
//! across chunks is never mangled.
//!
//! The framing follows the WHATWG rules the API relies on: lines end in `\n`, `\r\n` or `\r`; a
//! blank line dispatches the event; `event:` names it, `data:` lines are joined with `\n`; lines
//! starting with `:` are comments; one leading space after the colon is dropped; other fields
//! (`id:`, `retry:`) are ignored. [`SseDecoder::finish`] reports a stream that ended inside an
//! event, so a truncated stream is an error rather than a lost event. An event is bounded
//! ([`MAX_EVENT_BYTES`]): a stream that never ends its line is refused, not buffered.

/// The most bytes one event may hold (its unfinished line and its data so far). The API's
/// events are kilobytes (a whole message of `max_tokens` output is well under this); anything
/// larger is a broken or hostile stream.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event: its name and its (joined) data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// What can go wrong while framing a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line is not UTF-8. The stream is corrupt; not retryable as such.
    #[error("SSE line {line} is not UTF-8")]
    NotUtf8 {
        /// 1-based line number in the stream.
        line: u64,
    },
    /// One event (its lines and data so far) passed [`MAX_EVENT_BYTES`]: a stream gone wrong,
    /// refused rather than buffered without end.
    #[error("an SSE event passed {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The stream ended inside an event (no blank line after its fields).
    #[error("SSE stream ended inside an event ({pending} bytes pending)")]
    Truncated {
        /// Bytes buffered but never completed.
        pending: usize,
    },
}

/// The incremental decoder. Feed it chunks with [`SseDecoder::push`].
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to that line end.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    lines: u64,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds a chunk; returns every event it completes, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseFrame>, SseError> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(&mut out)?,
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut out)?;
                }
                _ => {
                    self.line.push(b);
                    if self.line.len() + self.data.as_ref().map_or(0, String::len) > MAX_EVENT_BYTES
                    {
                        return Err(SseError::TooLarge {
                            limit: MAX_EVENT_BYTES,
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    /// Ends the stream: an error if an event was started and never dispatched. A final line
    /// without a line end is completed first (the spec discards an undispatched event; the API
    /// always ends events with a blank line, so anything left over means the stream was cut).
    pub fn finish(&mut self) -> Result<(), SseError> {
        let pending = self.line.len()
            + self.data.as_ref().map_or(0, String::len)
            + self.event.as_ref().map_or(0, String::len);
        if pending > 0 {
            return Err(SseError::Truncated { pending });
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        self.lines += 1;
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseFrame {
                    event: self.event.take(),
                    data,
                });
            } else {
                self.event = None;
            }
            return Ok(());
        }
        let line = String::from_utf8(line).map_err(|_| SseError::NotUtf8 { line: self.lines })?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_str(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
        Ok(())
    }
}

/// Encodes one event as the API does: `event: <name>\ndata: <json>\n\n`.
pub fn encode(event: &crate::wire::StreamEvent) -> String {
    let data = serde_json::to_string(event).unwrap_or_else(|e| {
        // Serialising our own wire types cannot fail (no non-string map keys); keep a
        // well-formed frame even so.
        format!("{{\"type\":\"error\",\"error\":{{\"type\":\"api_error\",\"message\":\"{e}\"}}}}")
    });
    format!("event: {}\ndata: {}\n\n", event.name(), data)
}
