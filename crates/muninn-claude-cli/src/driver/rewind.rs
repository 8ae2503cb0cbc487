//! Putting the CLI's session back as it was before a turn the API refused.
//!
//! The CLI keeps a refused turn in its session file — the user line, its `system/api_error`
//! lines and a synthetic assistant message that is never sent — and the process stays usable;
//! but the next turn's user message is the refused line *merged* with the new one
//! (`reference/claude-cli-2.1.332.md`, §3.1: `[{"text":"please answer\n"},{"text":"second
//! after error"}]`). A caller that tries the same input again would show the model the message
//! twice, and every retry of an outage one copy more, none of it in the caller's transcript. So
//! the session was given up after such a failure, and an outage grew a new session per retry.
//!
//! The session file is append-only, so the driver puts it back instead: it stops the child
//! (whose writes end when it exits), truncates the file to its length before the turn's line —
//! or removes it when the turn was the session's first, so the next launch starts it under the
//! same id — and the next turn relaunches with `--resume` on exactly what the session held
//! before: the retry's request is the refused one again, byte for byte. A seed the refused
//! turn carried is pending again. The length is measured just before the line is written: the
//! CLI writes nothing to the file while idle (seen: none after a `result`, none on a
//! `--resume` launch; its `last-prompt` and `cost-state` lines come when it exits), and a file
//! that no longer ends a line at that length is not cut at all (`cut_back`).
//!
//! Only a turn whose failure left nothing answered is put back: one the API refused
//! (`terminal_reason` `api_error`, no assistant message from a model — a paid answer, a tool
//! loop's first steps, stay — and no compaction), and one given up at its timeout with nothing
//! answered either (the child killed before its `result`: the CLI stored the line as it took
//! it, and a resumed session would hold it unanswered). It must still be the session the turn was written to (a fork or
//! a reseed during the turn moved it), and not a `/compact`. Anything else — a child that died
//! by itself mid-turn included — leaves the file as the CLI wrote it, and the caller is told the
//! session holds the turn ([`crate::TurnReport::rewound`] is `false`).

use super::{Collected, Driver};
use crate::event::ResultEvent;
use crate::transcript_path;
use std::path::Path;

/// The session as it stood when a turn's line was written, for putting it back.
pub(super) struct Before {
    /// The size of the CLI's session file before the line (0: no file yet).
    pub(super) stored: u64,
    /// The session the line was written to.
    pub(super) session_id: String,
    /// The seed sent ahead of the line, if any: pending again once the turn is taken back.
    pub(super) seed: Option<String>,
}

/// Whether a turn's `result` is an API refusal that left nothing answered in the session: the
/// CLI's own retries ran out on an error status, and [`nothing_answered`] before it.
pub(super) fn refused_untouched(result: &ResultEvent, collected: &Collected) -> bool {
    result.is_error
        && result.terminal_reason.as_deref() == Some("api_error")
        && nothing_answered(collected)
}

/// Whether nothing of a turn was answered so far: no model message (a paid answer, a tool
/// loop's first steps), no tool call (the CLI ran it: taking it back out would have the retry
/// run it again) and no compaction came. Only such a turn may be taken back out, whether it
/// ended refused or was given up at its timeout.
pub(super) fn nothing_answered(collected: &Collected) -> bool {
    collected.request_id.is_none()
        && collected.tool_calls.is_empty()
        && collected.boundaries.is_empty()
}

impl Driver {
    /// Takes a refused turn back out of the session (see the module docs). Returns whether the
    /// session now holds nothing of it; on `false` (another session by now, or the file could
    /// not be cut) it holds the turn as the CLI wrote it, and the child is stopped either way.
    pub(super) async fn rewind(&mut self, before: Before) -> bool {
        self.shutdown().await;
        if self.session_id != before.session_id {
            return false;
        }
        let cut = match transcript_path(&self.config, &self.session_id) {
            None => Ok(()),
            Some(path) => cut_back(&path, before.stored),
        };
        if let Err(e) = cut {
            tracing::warn!(session = %self.session_id, error = %e,
                "claude-cli: a refused turn could not be taken out of the session file");
            return false;
        }
        tracing::info!(session = %self.session_id, bytes = before.stored,
            "claude-cli: a refused turn was taken out of the session; the next turn resumes it");
        self.established = before.stored > 0;
        self.pending_seed = before.seed;
        // The relaunch is planned, not news: no `Relaunched` event.
        self.renewing = true;
        true
    }
}

/// Cuts the session file at `path` back to its first `stored` bytes, or removes it when
/// `stored` is 0 (the turn's line was its first). Refuses (an `InvalidData` error, the file
/// untouched) unless byte `stored - 1` is still there and ends a line: the CLI only appends,
/// so a file that no longer reaches the length measured before the turn was replaced or
/// rewritten meanwhile — `set_len` would pad it with NUL bytes — and a length inside a line
/// would leave half a JSON line for the next `--resume` to read.
fn cut_back(path: &Path, stored: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    if stored == 0 {
        return std::fs::remove_file(path);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let mut last = [0u8; 1];
    if len < stored || file.read_exact_at(&mut last, stored - 1).is_err() || last[0] != b'\n' {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the file ({len} bytes) no longer ends a line at the {stored} bytes measured before the turn"
            ),
        ));
    }
    file.set_len(stored)
}

#[cfg(test)]
mod tests {
    use super::cut_back;

    /// A file cut back only where it still holds what was measured: a file shorter than the
    /// recorded length (replaced or rewritten meanwhile) was padded with NUL bytes to that
    /// length, a corrupt session the next `--resume` would read; and a length inside a line
    /// left half a JSON line. Each is an error now, the file untouched; a length at a line's
    /// end cuts.
    #[test]
    fn a_session_file_is_cut_back_only_at_a_line_end_it_still_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let two = b"{\"a\":1}\n{\"b\":2}\n";

        std::fs::write(&path, &two[..8]).unwrap();
        let shorter = cut_back(&path, 16);
        assert!(shorter.is_err(), "{shorter:?}");
        assert_eq!(std::fs::read(&path).unwrap(), &two[..8]);

        std::fs::write(&path, two).unwrap();
        let inside = cut_back(&path, 4);
        assert!(inside.is_err(), "{inside:?}");
        assert_eq!(std::fs::read(&path).unwrap(), two);

        cut_back(&path, 8).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), &two[..8]);
        cut_back(&path, 0).unwrap();
        assert!(!path.exists());
    }
}
