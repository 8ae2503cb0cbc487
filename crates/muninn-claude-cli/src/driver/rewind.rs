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
//! loop's first steps, stay — and no compaction); one given up at its timeout with nothing
//! answered either (the child killed before its `result`: the CLI stored the line as it took
//! it, and a resumed session would hold it unanswered); and one whose child died by itself
//! mid-turn (a crash, an OOM kill, a SIGKILL from outside) with nothing answered, for the same
//! reason. It must still be the session the turn was written to (a fork or a reseed during the
//! turn moved it), and not a `/compact`. What the driver read of the turn is checked against
//! the file too: a child killed mid-turn may have stored a model's message or a tool's result
//! whose stdout line never reached the driver, so a file that holds one after the turn's line
//! is not cut. Anything else — a model that acted — leaves the file as the CLI wrote it, and
//! the caller is told the session holds the turn ([`crate::TurnReport::rewound`] is `false`).
//! The other way round is checked as well: a turn the model acted in is held only when the
//! file holds what the driver read of it (`stored_what_was_read`); the CLI writes the file
//! behind a buffer, and a killed child may take the records with it.
//!
//! The turn's part of the file is read whole for these checks, so it is read under a bound
//! ([`MAX_TURN_PART_BYTES`], through `muninn-fs`): a part past it is refused loudly — nothing
//! is cut, the session is reported out of step and rebuilt by the caller — rather than read
//! into memory however large a file grew. A forked session's file begins with the whole
//! history the CLI copied into it, so where its turn's part begins is unknown: its last
//! [`MAX_TURN_PART_BYTES`] are what is checked, never the whole of a long session's file.

use super::{Collected, Driver};
use crate::event::ResultEvent;
use crate::transcript_path;
use std::path::Path;

/// The most of a session file read as one turn's part of it. A refused turn adds a few
/// lines; a long tool loop whose child died adds its messages and tool results, each capped by
/// the CLI — tens of MiB would be thousands of them.
const MAX_TURN_PART_BYTES: u64 = 64 * 1024 * 1024;

/// What a turn's part of a session file is called in the refusal of one past the bound.
const TURN_PART: &str = "a turn's part of the CLI's session file";

/// How a turn that is taken back out ended: for the log.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ending {
    /// The API refused it (`api_error`).
    Refused,
    /// Given up at its timeout, the child killed.
    TimedOut,
    /// The child died by itself before its `result`.
    Died,
}

impl Ending {
    fn turn(self) -> &'static str {
        match self {
            Ending::Refused => "a refused turn",
            Ending::TimedOut => "a timed-out turn",
            Ending::Died => "the turn of a child that died",
        }
    }
}

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
    /// Takes a turn back out of the session (see the module docs). Returns whether the session
    /// now holds nothing of it; on `false` (another session by now, or the file could not be
    /// cut) it holds the turn as the CLI wrote it, the cause logged, and the child is stopped
    /// either way.
    pub(super) async fn rewind(&mut self, before: Before, ending: Ending) -> bool {
        self.shutdown().await;
        let turn = ending.turn();
        if self.session_id != before.session_id {
            tracing::warn!(session = %self.session_id, was = %before.session_id,
                "claude-cli: {turn} is left in the session: the session changed during it");
            return false;
        }
        let cut = match transcript_path(&self.config, &self.session_id) {
            None => Ok(()),
            Some(path) => cut_back(&path, before.stored),
        };
        if let Err(e) = cut {
            tracing::warn!(session = %self.session_id, error = %e,
                "claude-cli: {turn} could not be taken out of the session file; the session holds it");
            return false;
        }
        tracing::info!(session = %self.session_id, bytes = before.stored,
            "claude-cli: {turn} was taken out of the session; the next turn resumes it");
        self.established = before.stored > 0;
        self.pending_seed = before.seed;
        // The relaunch is planned, not news: no `Relaunched` event — unless the child died by
        // itself, which the next turn's relaunch reports as after any crash.
        self.renewing = !matches!(ending, Ending::Died);
        true
    }
}

impl Driver {
    /// Whether the session file holds what the driver read of a failed turn the model acted
    /// in ([`unstored`]), so that the session, resumed, carries on from it. The CLI writes the
    /// file behind a buffer, a fraction of a second late: a child killed just after its model
    /// answered or a tool ran may take the records with it, and the resumed session would
    /// then hold the turn's line unanswered — the retry's copy merged into it, the model none
    /// the wiser about what it did. On `false` the cause is logged at warn: the session is out
    /// of step, and the caller rebuilds it. Called once the child is gone (its writes ended).
    pub(super) fn stored_what_was_read(&self, before: &Before, collected: &Collected) -> bool {
        // A session that changed during the turn (a fork) holds the turn after the history
        // the CLI copied into it, where the turn's part begins is unknown: the file's end is
        // looked at, the turn's last records among its last lines.
        let from = (self.session_id == before.session_id).then_some(before.stored);
        let after = transcript_path(&self.config, &self.session_id)
            .ok_or_else(|| "no session file".to_string())
            .and_then(|path| read_from(&path, from).map_err(|e| e.to_string()));
        let missing = match after {
            Ok(after) => unstored(&after, collected),
            Err(e) => Some(format!("the session file could not be read ({e})")),
        };
        let Some(missing) = missing else {
            return true;
        };
        tracing::warn!(session = %self.session_id, missing = %missing,
            "claude-cli: a failed turn's model acted, and the session file lacks what it did; the session is out of step");
        false
    }
}

/// The bytes of the file at `path` from `from` on, at most [`MAX_TURN_PART_BYTES`]; with no
/// `from`, its last whole lines within [`MAX_TURN_PART_BYTES`] of its end. A forked session's
/// file starts with the whole history the CLI copied into it, however long the session grew
/// (the CLI never removes a line): read from its start, a long session's file would pass the
/// bound meant for one turn's part, and a kept turn in it be taken for out of step. A record
/// of the turn that lies further back is not found, and the session is out of step, as for any
/// record the file lacks.
fn read_from(path: &Path, from: Option<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let opened = muninn_fs::open_regular(path)?;
    let mut file = opened.file;
    let start = from.unwrap_or(opened.len.saturating_sub(MAX_TURN_PART_BYTES));
    file.seek(SeekFrom::Start(start))?;
    let mut part = muninn_fs::read_rest_limited(file, MAX_TURN_PART_BYTES, TURN_PART)?;
    if from.is_none() && start > 0 {
        // Begun inside a line: its end is no record.
        let first_end = part
            .iter()
            .position(|b| *b == b'\n')
            .map_or(part.len(), |i| i + 1);
        part.drain(..first_end);
    }
    Ok(part)
}

/// What the driver read of a turn from stdout (`collected`) that `after`, the session file's
/// part after the turn's line, does not hold, if anything: each of the model's messages read,
/// by its id (any model's message would not do: a fork's file begins with the copied
/// history's), and each tool call read with its result (a call whose result is not stored may
/// have run all the same: only a stored result says the session knows how it ended). The
/// messages and calls are the main thread's: a subagent's, which the CLI stores in the
/// subagent's own file, are not collected.
fn unstored(after: &[u8], collected: &Collected) -> Option<String> {
    use serde_json::Value;
    use std::collections::HashSet;
    let mut model = false;
    let (mut messages, mut calls, mut results) = (HashSet::new(), HashSet::new(), HashSet::new());
    let lines = after
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok());
    for v in lines {
        let message = &v["message"];
        let blocks = message["content"].as_array().into_iter().flatten();
        match v["type"].as_str() {
            Some("assistant") if message["model"] != "<synthetic>" => {
                model = true;
                messages.insert(message["id"].clone());
                calls.extend(
                    blocks
                        .filter(|b| b["type"] == "tool_use")
                        .map(|b| b["id"].clone()),
                );
            }
            Some("user") => results.extend(
                blocks
                    .filter(|b| b["type"] == "tool_result")
                    .map(|b| b["tool_use_id"].clone()),
            ),
            _ => {}
        }
    }
    // A message with no id (none of the CLI's) can only be looked for as a model's message.
    let lost = collected.model_messages.iter().find(|id| match id {
        Some(id) => !messages.contains(&Value::from(id.as_str())),
        None => !model,
    });
    if let Some(id) = lost {
        return Some(format!(
            "the model's message {}",
            id.as_deref().unwrap_or("(no id)")
        ));
    }
    collected
        .tool_calls
        .iter()
        .find(|c| {
            let id = Value::from(c.id.as_str());
            !calls.contains(&id) || !results.contains(&id)
        })
        .map(|c| format!("the {} call {} or its result", c.name, c.id))
}

/// Cuts the session file at `path` back to its first `stored` bytes, or removes it when
/// `stored` is 0 (the turn's line was its first). Refuses (an `InvalidData` error, the file
/// untouched) unless byte `stored - 1` is still there and ends a line: the CLI only appends,
/// so a file that no longer reaches the length measured before the turn was replaced or
/// rewritten meanwhile — `set_len` would pad it with NUL bytes — and a length inside a line
/// would leave half a JSON line for the next `--resume` to read. Refuses too when what follows
/// holds something of the model's ([`acted_line`]): the turn is not the driver's to take back;
/// and when it is past [`MAX_TURN_PART_BYTES`], too large to read and so to vouch for.
fn cut_back(path: &Path, stored: u64) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let mut last = [0u8; 1];
    if len < stored
        || (stored > 0 && (file.read_exact_at(&mut last, stored - 1).is_err() || last[0] != b'\n'))
    {
        return Err(invalid(format!(
            "the file ({len} bytes) no longer ends a line at the {stored} bytes measured before the turn"
        )));
    }
    file.seek(SeekFrom::Start(stored))?;
    let turn = muninn_fs::read_rest_limited(&mut file, MAX_TURN_PART_BYTES, TURN_PART)?;
    if let Some(line) = turn.split(|b| *b == b'\n').find_map(acted_line) {
        return Err(invalid(format!(
            "the turn's part of the file holds the model's doing: {line}"
        )));
    }
    if stored == 0 {
        return std::fs::remove_file(path);
    }
    file.set_len(stored)
}

/// What a session-file line says the model did, if anything: a message from a model (not the
/// CLI's `<synthetic>` error message), a tool's result, a compaction. A line that does not
/// parse (a last one cut short by a kill) says nothing.
fn acted_line(line: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let kind = v.get("type").and_then(|t| t.as_str()).unwrap_or("");
    let message = &v["message"];
    let acted = match kind {
        "assistant" => message["model"] != "<synthetic>",
        "user" => message["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result")),
        "system" => v["subtype"] == "compact_boundary",
        _ => false,
    };
    acted.then(|| match kind {
        "user" => "a tool result".to_string(),
        "system" => "a compaction".to_string(),
        _ => format!("a message from {}", message["model"]),
    })
}

#[cfg(test)]
mod tests {
    use super::{Collected, cut_back, unstored};

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

    /// A turn whose part of the file holds something of the model's is not cut, whatever the
    /// driver read of it: a child killed mid-turn may have stored a model's message or a tool's
    /// result whose stdout line never reached the driver. The CLI's own lines (the user line,
    /// its `api_error`s, the `<synthetic>` message of a refusal) and a last line cut short by
    /// the kill are cut.
    #[test]
    fn a_turn_the_model_acted_in_is_not_cut_out_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let before = "{\"type\":\"user\",\"message\":{\"content\":\"earlier\"}}\n";
        let line = "{\"type\":\"user\",\"message\":{\"content\":\"the turn\"}}\n";
        let cli = concat!(
            "{\"type\":\"system\",\"subtype\":\"api_error\"}\n",
            "{\"type\":\"assistant\",\"message\":{\"model\":\"<synthetic>\"}}\n",
            "{\"type\":\"assist"
        );
        let acted = [
            "{\"type\":\"assistant\",\"message\":{\"model\":\"claude-x\",\"content\":[]}}\n",
            "{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\"}]}}\n",
            "{\"type\":\"system\",\"subtype\":\"compact_boundary\"}\n",
        ];
        for (i, done) in acted.iter().enumerate() {
            let whole = format!("{before}{line}{done}");
            std::fs::write(&path, &whole).unwrap();
            let kept = cut_back(&path, before.len() as u64);
            assert!(kept.is_err(), "{i}: {kept:?}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
            // Nor removed, for a session's first turn.
            std::fs::write(&path, format!("{line}{done}")).unwrap();
            assert!(cut_back(&path, 0).is_err(), "{i}");
            assert!(path.exists());
        }
        std::fs::write(&path, format!("{before}{line}{cli}")).unwrap();
        cut_back(&path, before.len() as u64).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    }

    /// A kept turn is held only when the file holds what was read of the model: its message
    /// and each tool call with its result. The CLI's `<synthetic>` message is not the model's.
    #[test]
    fn what_was_read_of_the_model_must_be_in_the_file() {
        let mut read = Collected {
            request_id: Some("req_1".into()),
            model_messages: vec![Some("msg_1".into())],
            ..Collected::default()
        };
        read.tool_calls.push(muninn_backend::ToolCall {
            id: "toolu_1".into(),
            name: "Read".into(),
            input: serde_json::Value::Null,
        });
        let call = r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-x","content":[{"type":"tool_use","id":"toolu_1"}]}}"#;
        let result = r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_1"}]}}"#;
        let synthetic = r#"{"type":"assistant","message":{"model":"<synthetic>","content":[]}}"#;
        assert_eq!(
            unstored(format!("{call}\n{result}\n").as_bytes(), &read),
            None
        );
        let lost = |after: String| unstored(after.as_bytes(), &read);
        assert_eq!(
            lost(format!("{call}\n")).as_deref(),
            Some("the Read call toolu_1 or its result")
        );
        assert_eq!(
            lost(format!("{synthetic}\n{result}\n")).as_deref(),
            Some("the model's message msg_1")
        );
        // Another message of the model's is not the one read.
        let other = call.replace("msg_1", "msg_0");
        assert_eq!(
            lost(format!("{other}\n{result}\n")).as_deref(),
            Some("the model's message msg_1")
        );
        read.request_id = None;
        read.model_messages.clear();
        read.tool_calls.clear();
        assert_eq!(unstored(b"", &read), None);
        assert_eq!(unstored(format!("{call}\n").as_bytes(), &read), None);
    }
}
