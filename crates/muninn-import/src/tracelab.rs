//! TraceLab's per-round CSV:
//!
//! ```text
//! session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms
//! s1,0,0,12000,300,1500
//! s1,1,12300,12900,120,0
//! ```
//!
//! # How rounds map to requests
//!
//! Each row is one round of an agent session: one LLM request. Lengths are tokens.
//!
//! - `input_len` is the round's whole prompt; `prefix_len` the leading part of it that is the
//!   same as what the session sent before — the *cache-eligible prefix*. The recorded usage is
//!   therefore synthesized as a provider that caches every eligible prefix would bill it: the
//!   prefix read (`cache_read = prefix_len`), the rest written at a breakpoint on the last block
//!   (`cache_write_5m = input_len − prefix_len`), nothing uncached, and `output_len` output.
//! - A round whose prefix is shorter than the previous round's prompt did not append: the
//!   conversation was rewritten before it (a compaction, a truncation), so it is `compacted`.
//! - The session's first round is its only `boundary`: the CSV does not say where a human spoke.
//! - Times come from the tool waits: a session's first round is at the Unix epoch, and round
//!   r + 1 is sent `tool_wait_after_ms` of round r after round r.
//!
//! # What cannot be known
//!
//! - **No TTL and no billing**: TraceLab records what *could* be cached, not what the provider
//!   read or wrote, nor at which TTL tier. Replaying such a trace measures policies against an
//!   ideal recorded cache; `check-cache` on it checks the model against that ideal (agreement
//!   there means the model's prefix tracking is right, not that a provider would agree).
//! - **No timestamps**: times are synthesized from the waits alone. Generation time is not
//!   recorded (taken as zero), and sessions all start at the epoch, so the idle gap between
//!   sessions and the absolute time of day are unknown.
//! - **No model**: the trace's model is [`crate::ImportOptions::model`], else `unknown` (which a
//!   replay reports as unpriced).
//! - **No blocks**: `blocks_added` is 0 (unknown), so the 20-block lookback is not modelled.
//!
//! # Parsing
//!
//! The header names the columns (in any order; extra columns are ignored). Fields are split on
//! commas, and a field in double quotes may hold commas and doubled quotes (RFC 4180) but not a
//! line break: the columns are an id and integers, and reading line by line keeps each warning
//! at its line. A row that is short, has a non-integer length, goes back in `round_idx`, or has
//! a length past the limit on tokens (`crate::limits`) is skipped with a warning naming its
//! line; rounds around it are kept. A wait that would take its session past the year 9999 is
//! taken as none, with a warning.

use crate::format::TRACELAB_COLUMNS;
use crate::lines::Line;
use crate::{FormatReader, LineContext};
use muninn_core::trace::{ThreadKind, TraceRequest, Usage};
use std::collections::HashMap;

/// What the importer keeps of a session between its rows.
#[derive(Debug)]
struct SessionState {
    round: u64,
    /// When the next round is sent, Unix ms.
    next_at_ms: i64,
    /// The previous round's prompt.
    prompt: u64,
}

/// Reads one TraceLab CSV.
#[derive(Debug)]
pub(crate) struct TraceLabReader {
    model: String,
    /// Index of each of [`TRACELAB_COLUMNS`] in a row, once the header is read.
    columns: Option<[usize; 6]>,
    sessions: HashMap<String, SessionState>,
}

impl TraceLabReader {
    pub fn new(model: Option<&str>) -> Self {
        TraceLabReader {
            model: model.unwrap_or("unknown").to_owned(),
            columns: None,
            sessions: HashMap::new(),
        }
    }
}

/// Splits one CSV line into fields (see the module docs); `None` if a quote is left open.
fn split_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (false, '"') if field.trim().is_empty() => {
                field.clear();
                quoted = true;
            }
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (_, c) => field.push(c),
        }
    }
    if quoted {
        return None;
    }
    fields.push(field);
    Some(fields)
}

/// The fields of a row, as the columns name them.
struct Row<'a> {
    session: &'a str,
    round: u64,
    prefix: u64,
    input: u64,
    output: u64,
    wait_ms: u64,
}

fn parse_row<'a>(fields: &'a [String], columns: &[usize; 6]) -> Result<Row<'a>, String> {
    let field = |i: usize| -> Result<&'a str, String> {
        fields
            .get(columns[i])
            .map(|f| f.trim())
            .ok_or_else(|| format!("no {} column", TRACELAB_COLUMNS[i]))
    };
    let number = |i: usize| -> Result<u64, String> {
        let text = field(i)?;
        text.parse::<u64>()
            .map_err(|_| format!("{} is {text:?}, not a whole number", TRACELAB_COLUMNS[i]))
    };
    let row = Row {
        session: field(0)?,
        round: number(1)?,
        prefix: number(2)?,
        input: number(3)?,
        output: number(4)?,
        wait_ms: number(5)?,
    };
    if row.prefix > row.input {
        return Err(format!(
            "prefix_len {} exceeds input_len {}",
            row.prefix, row.input
        ));
    }
    Ok(row)
}

/// Where each of [`TRACELAB_COLUMNS`] sits in the header's `fields`; all `usize::MAX` (every row
/// skipped) with a warning if one is missing.
fn header_columns(fields: &[String], line: u64, cx: &mut LineContext<'_, '_>) -> [usize; 6] {
    let mut columns = [0; 6];
    for (i, name) in TRACELAB_COLUMNS.iter().enumerate() {
        let Some(at) = fields.iter().position(|f| f.trim() == *name) else {
            cx.diag
                .warn(line, format!("header has no {name} column, file skipped"));
            return [usize::MAX; 6];
        };
        columns[i] = at;
    }
    columns
}

/// The CSV fields of `line`, and what to add to a warning about its row (a torn last line is
/// named); `None` (warned, unless blank) when the line cannot be a row.
fn csv_fields(
    line: &Line<'_>,
    cx: &mut LineContext<'_, '_>,
) -> Option<(Vec<String>, &'static str)> {
    if line.oversized {
        cx.diag
            .warn(line.number, "line too long for a CSV row, skipped");
        return None;
    }
    if line.is_blank() {
        return None;
    }
    let torn = if line.terminated {
        ""
    } else {
        " (torn last line)"
    };
    let Ok(text) = std::str::from_utf8(line.bytes) else {
        cx.diag
            .warn(line.number, format!("row is not UTF-8{torn}, skipped"));
        return None;
    };
    let Some(fields) = split_fields(text.trim_start_matches('\u{feff}')) else {
        cx.diag
            .warn(line.number, format!("unclosed quote{torn}, row skipped"));
        return None;
    };
    Some((fields, torn))
}

/// The request of a round: the prefix read, the rest written; a session's first round opens a
/// turn, and a prefix shorter than the previous prompt means the history was rewritten.
fn round_request(row: &Row<'_>, state: Option<&SessionState>) -> TraceRequest {
    TraceRequest {
        at_ms: state.map_or(0, |s| s.next_at_ms),
        usage: Usage {
            input: 0,
            cache_write_5m: row.input - row.prefix,
            cache_write_1h: 0,
            cache_read: row.prefix,
            output: row.output,
        },
        boundary: state.is_none(),
        compacted: state.is_some_and(|s| row.prefix < s.prompt),
        // The rest (tool results, conversations, diagnoses) this format does not record.
        ..TraceRequest::default()
    }
}

impl TraceLabReader {
    /// Pushes a row's request, timed by its session's earlier rounds (each round starts when the
    /// previous one's wait ends); a round that does not follow its session's last is skipped.
    fn push_round(&mut self, row: &Row<'_>, line: u64, cx: &mut LineContext<'_, '_>) {
        let state = self.sessions.get(row.session);
        if let Some(state) = state
            && row.round <= state.round
        {
            cx.diag.warn(
                line,
                format!(
                    "round_idx {} does not follow round {} of session {:?}, row skipped",
                    row.round, state.round, row.session
                ),
            );
            return;
        }
        let request = round_request(row, state);
        let at_ms = request.at_ms;
        let thread = (row.session, "main", ThreadKind::Main);
        if cx.push(thread, &self.model, request, line).is_none() {
            // Past the limits (warned): the session goes on from its last round.
            return;
        }
        // A wait that would take the session past the last time there is (`limits`) is not
        // one: taken as none, so the rounds after it keep their order and their usage.
        let next_at_ms = i64::try_from(row.wait_ms)
            .ok()
            .and_then(|wait| at_ms.checked_add(wait))
            .filter(|&next| next <= crate::limits::MAX_AT_MS);
        let next_at_ms = next_at_ms.unwrap_or_else(|| {
            cx.diag.warn(
                line,
                format!(
                    "tool_wait_after_ms {} takes session {:?} past the time limit (the year \
                     9999), taken as 0",
                    row.wait_ms, row.session
                ),
            );
            at_ms
        });
        self.sessions.insert(
            row.session.to_owned(),
            SessionState {
                round: row.round,
                next_at_ms,
                prompt: row.input,
            },
        );
    }
}

impl FormatReader for TraceLabReader {
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>) {
        let Some((fields, torn)) = csv_fields(line, cx) else {
            return;
        };
        let Some(columns) = &self.columns else {
            self.columns = Some(header_columns(&fields, line.number, cx));
            return;
        };
        if columns[0] == usize::MAX {
            return;
        }
        match parse_row(&fields, columns) {
            Ok(row) => self.push_round(&row, line.number, cx),
            Err(why) => cx
                .diag
                .warn(line.number, format!("malformed row{torn}, skipped: {why}")),
        }
    }

    fn finish(self, _: &mut LineContext<'_, '_>) {}
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use super::split_fields;

    #[test]
    fn fields_split_on_commas_outside_quotes() {
        assert_eq!(split_fields("a,1,,2").unwrap(), vec!["a", "1", "", "2"]);
        assert_eq!(
            split_fields(r#""s,1","say ""hi""",3"#).unwrap(),
            vec!["s,1", r#"say "hi""#, "3"]
        );
        assert_eq!(split_fields(r#""open,1"#), None);
    }
}
