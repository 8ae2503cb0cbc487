//! Reading the child's stdout a line at a time, with a bound on a line's size.
//!
//! A stream-json line holds one event: a message, a tool result, the echo of a user line (a
//! reseed's line carries the whole conversation so far), a result. They are large at times but
//! never without end; a line that passes [`MAX_LINE_BYTES`] is a child gone wrong, and is skipped
//! (its bytes read and dropped, the line reported once) instead of held in memory without bound.
//!
//! [`BoundedLines::next_line`] is cancel safe, as the driver needs for `tokio::select!`: the line
//! read so far is kept in the reader, and a byte is consumed from the pipe only once it is stored
//! or deliberately dropped.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest stdout line the driver holds: 64 MiB.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// What a read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line, without its line end (invalid UTF-8 replaced).
    Text(String),
    /// A line longer than the limit was skipped; it held this many bytes.
    Skipped(usize),
}

/// Lines of an async reader, each at most `max` bytes.
#[derive(Debug)]
pub struct BoundedLines<R> {
    reader: R,
    max: usize,
    line: Vec<u8>,
    /// Bytes of an oversized line dropped so far (0: the line is being kept).
    dropped: usize,
}

impl<R: AsyncBufRead + Unpin> BoundedLines<R> {
    /// Lines of `reader`, each at most `max` bytes.
    pub fn new(reader: R, max: usize) -> BoundedLines<R> {
        BoundedLines {
            reader,
            max,
            line: Vec::new(),
            dropped: 0,
        }
    }

    /// The next line; `None` at the end of the stream (a last line without a line end is
    /// returned first). Blank lines are passed over.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(self.finish());
            }
            let (part, ended) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], Some(i + 1)),
                None => (available, None),
            };
            let taken = part.len();
            if self.dropped == 0 && self.line.len() + taken <= self.max {
                self.line.extend_from_slice(part);
            } else {
                self.dropped += std::mem::take(&mut self.line).len() + taken;
            }
            self.reader.consume(ended.unwrap_or(taken));
            // A blank line is passed over: `finish` gives `None` for it, which is the end of
            // the stream to the caller (found by fuzzing: the driver took a live child for dead
            // at the first empty stdout line, and every line after it was lost).
            if ended.is_some()
                && let Some(line) = self.finish()
            {
                return Ok(Some(line));
            }
        }
    }

    fn finish(&mut self) -> Option<Line> {
        if self.dropped > 0 {
            return Some(Line::Skipped(std::mem::take(&mut self.dropped)));
        }
        if self.line.is_empty() {
            return None;
        }
        let mut bytes = std::mem::take(&mut self.line);
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        Some(Line::Text(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<Line> {
        let mut lines = BoundedLines::new(tokio::io::BufReader::with_capacity(7, input), max);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn lines_within_the_limit_come_whole_and_a_longer_one_is_skipped() {
        let got = all(b"short\r\nexactly-12b\nthis one is far too long\nlast", 12).await;
        assert_eq!(
            got,
            vec![
                Line::Text("short".into()),
                Line::Text("exactly-12b".into()),
                Line::Skipped(24),
                Line::Text("last".into()),
            ]
        );
    }

    #[tokio::test]
    async fn an_endless_line_is_dropped_as_it_comes() {
        let endless = vec![b'x'; 1 << 20];
        let got = all(&endless, 1024).await;
        assert_eq!(got, vec![Line::Skipped(1 << 20)]);
    }

    /// What the reader must give for `input`: every line (split at `\n`, one trailing `\r`
    /// dropped, invalid UTF-8 replaced), a line over `max` bytes as its size, blank lines
    /// passed over, a last line without a line end included.
    fn model(input: &[u8], max: usize) -> Vec<Line> {
        input
            .split(|b| *b == b'\n')
            .filter(|piece| !piece.is_empty())
            .map(|piece| {
                if piece.len() > max {
                    Line::Skipped(piece.len())
                } else {
                    let text = piece.strip_suffix(b"\r").unwrap_or(piece);
                    Line::Text(String::from_utf8_lossy(text).into_owned())
                }
            })
            .collect()
    }

    /// Fuzzed (`muninn_testkit::fuzz`, seeds in `fuzz/corpus/cli-stdout-lines/`): whatever the
    /// bytes, the limit and the reader's buffer size, the lines are the model's. It found a blank
    /// line read as the end of the stream (the driver then took a live child for dead).
    #[test]
    fn any_stdout_reads_as_the_model_says() {
        use muninn_testkit::fuzz::{
            FuzzConfig, FuzzRng, Verdict, corpus_dir, fnv1a, fuzz, load_corpus,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seeds = load_corpus(&corpus_dir("cli-stdout-lines"));
        let report = fuzz(
            "cli-stdout-lines",
            &seeds,
            &[b"\n\n", b"\r\n", b"\r", b"\xff\xfe"],
            &FuzzConfig::from_env(64 * 1024),
            |input| {
                let mut rng = FuzzRng::new(fnv1a(input));
                let max = 1 + rng.below(512);
                let capacity = 1 + rng.below(64);
                let got = runtime.block_on(async {
                    let reader = tokio::io::BufReader::with_capacity(capacity, input);
                    let mut lines = BoundedLines::new(reader, max);
                    let mut out = Vec::new();
                    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
                        out.push(line);
                    }
                    Ok::<_, String>(out)
                })?;
                let expected = model(input, max);
                if got != expected {
                    return Err(format!(
                        "max {max}, buffer {capacity}: read {got:?}, expected {expected:?}"
                    ));
                }
                Ok(if got.is_empty() {
                    Verdict::Refused
                } else {
                    Verdict::Accepted
                })
            },
        );
        assert!(report.accepted > 0, "{report}");
    }
}
