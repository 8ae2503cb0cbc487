//! Line-at-a-time reading with one reused buffer, and the per-file diagnostics sink.
//!
//! Invariants:
//! - Memory is bounded by the longest line read (capped at [`MAX_LINE_BYTES`]); the buffer is reused
//!   between lines and shrunk again after an unusually long one.
//! - Line numbers are 1-based and count every physical line, empty ones included, so a warning's
//!   `file:line` points at what an editor shows.
//! - A line's bytes are without its terminator (`\n` or `\r\n`), and the first line's without a
//!   UTF-8 byte-order mark.
//! - Nothing here decodes UTF-8: the JSON parser validates strings it actually reads, so invalid
//!   UTF-8 inside an ignored field costs nothing and invalid UTF-8 in a field we need becomes a
//!   warning at the parser.

use crate::Warning;
use std::io::{self, BufRead, Read};
use std::path::Path;

/// Lines longer than this are skipped with a warning rather than buffered. Claude Code lines carry
/// whole tool outputs (and base64 images), so this is generous; it only guards against a file that
/// is not JSON Lines at all (one enormous "line").
pub(crate) const MAX_LINE_BYTES: u64 = 64 << 20;

/// The UTF-8 byte-order mark, dropped from the start of a file.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// After a line longer than this, the buffer is given back to the allocator.
const SHRINK_ABOVE: usize = 8 << 20;

/// At most this many warnings are kept per file; the rest are summarised in one last warning, so a
/// file of garbage cannot grow the warning list without bound.
const MAX_WARNINGS_PER_FILE: u64 = 100;

/// One physical line, without its terminator.
#[derive(Debug)]
pub(crate) struct Line<'a> {
    /// 1-based line number.
    pub number: u64,
    /// The bytes, without `\n` or `\r\n`.
    pub bytes: &'a [u8],
    /// Whether the line ended in `\n`. An unterminated last line may have been torn by a writer
    /// that was still appending.
    pub terminated: bool,
    /// Whether the line was longer than [`MAX_LINE_BYTES`] and its bytes were dropped.
    pub oversized: bool,
    /// Bytes read from the start of input to this line's end (terminator included).
    pub end: u64,
}

impl Line<'_> {
    /// Whether the line holds nothing but whitespace.
    pub fn is_blank(&self) -> bool {
        self.bytes.iter().all(u8::is_ascii_whitespace)
    }
}

/// Reads lines from a [`BufRead`] into one reused buffer.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    number: u64,
    bytes_read: u64,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            buf: Vec::with_capacity(64 << 10),
            number: 0,
            bytes_read: 0,
        }
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.number
    }

    /// Bytes consumed so far, terminators included.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The next line, or `None` at end of input.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        if self.buf.capacity() > SHRINK_ABOVE {
            self.buf = Vec::with_capacity(64 << 10);
        }
        self.buf.clear();
        let n = <&mut R as Read>::take(&mut self.inner, MAX_LINE_BYTES)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.bytes_read += n as u64;
        self.number += 1;
        let mut oversized = false;
        let mut terminated = self.buf.last() == Some(&b'\n');
        if !terminated && n as u64 == MAX_LINE_BYTES {
            // Skip the rest of the line without keeping it.
            oversized = true;
            self.buf.clear();
            loop {
                let available = self.inner.fill_buf()?;
                if available.is_empty() {
                    break;
                }
                match available.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        self.inner.consume(i + 1);
                        self.bytes_read += i as u64 + 1;
                        terminated = true;
                        break;
                    }
                    None => {
                        let len = available.len();
                        self.inner.consume(len);
                        self.bytes_read += len as u64;
                    }
                }
            }
        }
        let mut bytes = &self.buf[..];
        if let Some(rest) = bytes.strip_suffix(b"\n") {
            bytes = rest;
        }
        if let Some(rest) = bytes.strip_suffix(b"\r") {
            bytes = rest;
        }
        if self.number == 1 {
            // A byte-order mark (editors on Windows write one) is no part of the first line:
            // left on, it made the line malformed JSON, and a file of one line unrecognised.
            if let Some(rest) = bytes.strip_prefix(UTF8_BOM) {
                bytes = rest;
            }
        }
        Ok(Some(Line {
            number: self.number,
            bytes,
            terminated,
            oversized,
            end: self.bytes_read,
        }))
    }
}

/// Parses one line as `T`, or records why it could not be parsed. Blank lines give `None`
/// silently; they are legal padding in JSON Lines.
pub(crate) fn parse_line<'a, T: serde::Deserialize<'a>>(
    line: &'a Line<'a>,
    diag: &mut Diagnostics<'_>,
) -> Option<T> {
    if line.oversized {
        diag.warn(
            line.number,
            format!("line longer than {MAX_LINE_BYTES} bytes, skipped"),
        );
        return None;
    }
    if line.is_blank() {
        return None;
    }
    match serde_json::from_slice(line.bytes) {
        Ok(value) => Some(value),
        Err(error) => {
            diag.bad_line(line, &error);
            None
        }
    }
}

/// Collects the warnings of one file, capped at [`MAX_WARNINGS_PER_FILE`].
#[derive(Debug)]
pub(crate) struct Diagnostics<'w> {
    path: &'w Path,
    out: &'w mut Vec<Warning>,
    count: u64,
}

impl<'w> Diagnostics<'w> {
    pub fn new(path: &'w Path, out: &'w mut Vec<Warning>) -> Self {
        Diagnostics {
            path,
            out,
            count: 0,
        }
    }

    /// Records a warning at `line` (0 = about the whole file).
    pub fn warn(&mut self, line: u64, message: impl Into<String>) {
        self.count += 1;
        if self.count <= MAX_WARNINGS_PER_FILE {
            self.out.push(Warning {
                path: self.path.to_path_buf(),
                line,
                message: message.into(),
            });
        }
    }

    /// Records why a line could not be parsed: a JSON error, or a torn last line.
    pub fn bad_line(&mut self, line: &Line<'_>, error: &serde_json::Error) {
        let message = if !line.terminated {
            format!("torn last line (no newline at end of file), skipped: {error}")
        } else {
            format!("malformed line, skipped: {error}")
        };
        self.warn(line.number, message);
    }

    /// Adds the summary warning if some were left out.
    pub fn finish(self) {
        if self.count > MAX_WARNINGS_PER_FILE {
            let hidden = self.count - MAX_WARNINGS_PER_FILE;
            self.out.push(Warning {
                path: self.path.to_path_buf(),
                line: 0,
                message: format!("{hidden} more warnings in this file not shown"),
            });
        }
    }
}
