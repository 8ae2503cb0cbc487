//! The input formats, their names (what `muninn import --input-format` takes), and detection of a
//! file's format from its first non-empty lines.

use crate::json;
use crate::lines::LineReader;
use std::fs::File;
use std::io::{self, BufReader};

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

/// How many non-empty lines are looked at to detect a file's format. Claude Code files may open
/// with a few lines of no particular shape (snapshots, queue operations), but every one of those
/// already carries a recognisable `type`, so a handful is plenty.
const SNIFF_LINES: u32 = 16;

/// The TraceLab CSV header's columns; a first line naming all of them (in any order) is one.
pub(crate) const TRACELAB_COLUMNS: [&str; 6] = [
    "session_id",
    "round_idx",
    "prefix_len",
    "input_len",
    "output_len",
    "tool_wait_after_ms",
];

/// Detects the format from the first non-empty lines: `None` if none is recognised, and whether
/// the file holds no non-blank line at all (skipped without a warning: Claude Code leaves empty
/// files behind). Lines that fail to parse are passed over here; the real pass reports them.
/// A line over the length limit is passed over too, but is not blank: a file of nothing else
/// was taken for an empty one and skipped without a word.
pub(crate) fn sniff(reader: &mut BufReader<File>) -> io::Result<(Option<InputFormat>, bool)> {
    let mut lines = LineReader::new(&mut *reader);
    let mut seen = 0;
    let mut oversized = false;
    while seen < SNIFF_LINES {
        let Some(line) = lines.next_line()? else {
            break;
        };
        oversized |= line.oversized;
        if line.oversized || line.is_blank() {
            continue;
        }
        seen += 1;
        if seen == 1 && is_tracelab_header(line.bytes) {
            return Ok((Some(InputFormat::TraceLab), false));
        }
        if let Some(format) = sniff_json_line(line.bytes) {
            return Ok((Some(format), false));
        }
    }
    Ok((None, seen == 0 && !oversized))
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

/// The format one JSON line looks like, if any.
fn sniff_json_line(line: &[u8]) -> Option<InputFormat> {
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
    match kind {
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
    }
}
