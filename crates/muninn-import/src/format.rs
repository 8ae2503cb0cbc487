//! The input formats, their names (what `muninn import --input-format` takes), and detection of a
//! file's format from its first non-empty lines.

use crate::json;
use crate::lines::{LineReader, MAX_LINE_BYTES};
use std::fs::File;
use std::io::{self, BufReader, Read};

/// The formats a file may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputFormat {
    /// Claude Code transcripts (`~/.claude/projects/**/*.jsonl`).
    ClaudeCode,
    /// Codex CLI rollouts (`~/.codex/sessions/**/rollout-*.jsonl`).
    Codex,
    /// muninn's ledger export (`muninn ledger --format jsonl`).
    Ledger,
    /// muninn's stored trace format (what `muninn import` writes).
    Stored,
    /// `claude -p --output-format stream-json` output: one run, or several concatenated.
    StreamJson,
    /// Messages API request/response logs: JSON Lines of `{request, response}`.
    ApiLog,
    /// TraceLab's per-round CSV.
    TraceLab,
}

impl InputFormat {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [InputFormat; 7] = [
        InputFormat::ClaudeCode,
        InputFormat::Codex,
        InputFormat::Ledger,
        InputFormat::Stored,
        InputFormat::StreamJson,
        InputFormat::ApiLog,
        InputFormat::TraceLab,
    ];

    /// The name `--input-format` takes.
    pub fn name(self) -> &'static str {
        match self {
            InputFormat::ClaudeCode => "claude-code",
            InputFormat::Codex => "codex",
            InputFormat::Ledger => "ledger",
            InputFormat::Stored => "stored",
            InputFormat::StreamJson => "stream-json",
            InputFormat::ApiLog => "api-log",
            InputFormat::TraceLab => "tracelab-csv",
        }
    }
}

impl std::fmt::Display for InputFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for InputFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        InputFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = InputFormat::ALL.iter().map(|f| f.name()).collect();
                format!("unknown input format {s:?}: expected {}", names.join(", "))
            })
    }
}

/// How many lines that parse as JSON are tried to detect a file's format. Claude Code files may
/// open with a few lines of no particular shape (snapshots, queue operations), but every one of
/// those already carries a recognisable `type`, so a handful is plenty.
pub(crate) const SNIFF_LINES: u32 = 16;

/// How many lines in all (malformed, torn and oversized ones included) detection reads before it
/// gives up. Lines that do not parse are passed over, not counted against [`SNIFF_LINES`]: a file
/// that opens with torn writes (two appenders interleaved, a crash mid-line) was skipped as
/// unrecognised after 16 of them, though every line after was good. This bounds the passing over,
/// so a file that is not JSON Lines at all is not read twice to its end.
pub(crate) const SNIFF_MAX_LINES: u64 = 1_000;

/// How many bytes detection reads before it gives up, whatever the number of lines: without it,
/// 1,000 lines of up to 64 MiB each (or one line of no end, skipped to its newline) could be read
/// before a file was judged. A real file is recognised at its first line, and the longest a line
/// may be is [`MAX_LINE_BYTES`] (a transcript line carrying a large tool output or image), so
/// twice that judges a file opening with one line at the limit and then some; no real opening
/// comes near it.
pub(crate) const SNIFF_MAX_BYTES: u64 = 2 * MAX_LINE_BYTES;

/// Which of detection's bounds stopped it before the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SniffBound {
    /// [`SNIFF_MAX_LINES`] lines were read.
    Lines,
    /// [`SNIFF_MAX_BYTES`] bytes were read.
    Bytes,
}

/// The TraceLab CSV header's columns; a first line naming all of them (in any order) is one.
pub(crate) const TRACELAB_COLUMNS: [&str; 6] = [
    "session_id",
    "round_idx",
    "prefix_len",
    "input_len",
    "output_len",
    "tool_wait_after_ms",
];

/// What detection found in a file's first lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sniffed {
    /// The format, if one was recognised.
    pub format: Option<InputFormat>,
    /// Non-blank lines read (oversized ones included): 0 for a file of nothing but blank lines
    /// (skipped without a warning: Claude Code leaves empty files behind).
    pub non_blank: u64,
    /// Of those, lines that did not parse (malformed, torn or oversized).
    pub malformed: u64,
    /// The bound that stopped detection before the end of the file, if one did.
    pub cut_short: Option<SniffBound>,
}

impl Sniffed {
    /// What detection judged the file on, for the warning of a file it skips.
    pub fn judged_on(&self) -> String {
        let parsed = self.non_blank - self.malformed;
        let bound = if parsed >= u64::from(SNIFF_LINES) {
            format!("the first {SNIFF_LINES} lines that parse as JSON")
        } else if let Some(bound) = self.cut_short {
            match bound {
                SniffBound::Lines => {
                    format!("the first {SNIFF_MAX_LINES} lines, where detection stops")
                }
                SniffBound::Bytes => format!(
                    "the first {} MiB ({SNIFF_MAX_BYTES} bytes), where detection stops",
                    SNIFF_MAX_BYTES >> 20
                ),
            }
        } else if self.non_blank == 0 {
            return "its lines, all blank".to_owned();
        } else if self.non_blank == 1 {
            "its one non-blank line".to_owned()
        } else {
            format!("any of its {} non-blank lines", self.non_blank)
        };
        match (self.non_blank, self.malformed) {
            (0, _) => format!("{bound} (all blank)"),
            (_, 0) => bound,
            (_, n) => format!("{bound} ({n} malformed passed over)"),
        }
    }
}

/// Detects the format from the first lines that parse: the first recognised one of at most
/// [`SNIFF_LINES`] JSON lines (or a TraceLab header as the first non-blank line), passing over
/// lines that do not parse, within the first [`SNIFF_MAX_LINES`] lines and [`SNIFF_MAX_BYTES`]
/// bytes. The real pass reports the lines passed over here. A line over the length limit is passed over too, but is not blank: a
/// file of nothing else was taken for an empty one and skipped without a word.
pub(crate) fn sniff(reader: &mut BufReader<File>) -> io::Result<Sniffed> {
    let mut lines = LineReader::new(Read::take(&mut *reader, SNIFF_MAX_BYTES));
    let mut found = Sniffed {
        format: None,
        non_blank: 0,
        malformed: 0,
        cut_short: None,
    };
    let mut parsed = 0;
    while parsed < SNIFF_LINES {
        let Some(line) = lines.next_line()? else {
            return Ok(found);
        };
        if line.number > SNIFF_MAX_LINES {
            found.cut_short = Some(SniffBound::Lines);
            break;
        }
        // A line the byte bound cut is not judged (its end was never seen), but it is not blank.
        if !line.terminated && line.end == SNIFF_MAX_BYTES {
            if line.oversized || !line.is_blank() {
                found.non_blank += 1;
            }
            found.cut_short = Some(SniffBound::Bytes);
            break;
        }
        if line.is_blank() && !line.oversized {
            continue;
        }
        found.non_blank += 1;
        if found.non_blank == 1 && is_tracelab_header(line.bytes) {
            found.format = Some(InputFormat::TraceLab);
            break;
        }
        match sniff_json_line(line.bytes) {
            Some(Probed::Format(format)) => {
                found.format = Some(format);
                break;
            }
            Some(Probed::Unknown) => parsed += 1,
            None => found.malformed += 1,
        }
    }
    Ok(found)
}

/// Whether `line` is a CSV header naming every TraceLab column.
fn is_tracelab_header(line: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    let text = text.trim_start_matches('\u{feff}');
    let columns: Vec<&str> = text
        .split(',')
        .map(|c| c.trim().trim_matches('"'))
        .collect();
    TRACELAB_COLUMNS.iter().all(|c| columns.contains(c))
}

/// What one line that parses looks like.
enum Probed {
    /// A line of this format.
    Format(InputFormat),
    /// No format's line.
    Unknown,
}

/// What one line looks like: `None` if it does not parse (malformed, or oversized and so
/// empty).
fn sniff_json_line(line: &[u8]) -> Option<Probed> {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<json::Str<'a>>,
        payload: Option<serde::de::IgnoredAny>,
        mind: Option<serde::de::IgnoredAny>,
        role: Option<serde::de::IgnoredAny>,
        usage: Option<serde::de::IgnoredAny>,
        id: Option<serde::de::IgnoredAny>,
        session: Option<serde::de::IgnoredAny>,
        #[serde(rename = "sessionId")]
        session_id: Option<serde::de::IgnoredAny>,
        /// stream-json events spell it in snake case; Claude Code transcripts in camel case.
        #[serde(rename = "session_id")]
        stream_session_id: Option<serde::de::IgnoredAny>,
        request: Option<serde::de::IgnoredAny>,
        response: Option<serde::de::IgnoredAny>,
    }

    let probe = serde_json::from_slice::<Probe<'_>>(line).ok()?;
    let kind = probe.kind.as_ref().map(json::Str::as_str);
    let format = match kind {
        _ if probe.request.is_some() && probe.response.is_some() => Some(InputFormat::ApiLog),
        Some("trace") if probe.id.is_some() && probe.session.is_some() => Some(InputFormat::Stored),
        // A stored file whose header line was damaged.
        Some("request") if probe.usage.is_some() => Some(InputFormat::Stored),
        Some("session_meta" | "turn_context" | "event_msg" | "response_item" | "compacted")
            if probe.payload.is_some() =>
        {
            Some(InputFormat::Codex)
        }
        _ if probe.mind.is_some() && probe.role.is_some() && probe.usage.is_some() => {
            Some(InputFormat::Ledger)
        }
        Some("system" | "assistant" | "user" | "result" | "stream_event")
            if probe.stream_session_id.is_some() && probe.session_id.is_none() =>
        {
            Some(InputFormat::StreamJson)
        }
        Some(
            "user"
            | "assistant"
            | "system"
            | "summary"
            | "progress"
            | "file-history-snapshot"
            | "queue-operation",
        ) => Some(InputFormat::ClaudeCode),
        _ if probe.session_id.is_some() => Some(InputFormat::ClaudeCode),
        _ => None,
    };
    Some(format.map_or(Probed::Unknown, Probed::Format))
}
