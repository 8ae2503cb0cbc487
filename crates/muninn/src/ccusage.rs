//! `muninn replay --vs-ccusage`: why muninn's recorded totals differ from ccusage's on the same
//! Claude Code files, measured on them.
//!
//! Claude Code writes one JSONL line per content block of a response, each repeating
//! `message.id` and `usage`; the input-side numbers are final on every line, but
//! `output_tokens` is the count at the time the line was written — only the last line carries
//! the final output. muninn takes the last line's usage; ccusage keeps the first line of each
//! message (it de-duplicates by message and request id) and so the first, partial output
//! count. ccusage also prices every cache write at the 5-minute rate (1.25×), where muninn
//! prices 1-hour writes at their own rate (2×). This module reads the files both ways, prices
//! both with muninn's price table (so only those two differences remain) and reports each.

use crate::output::{json, outln};
use muninn_core::money::MicroUsd;
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The two readings of the same files.
#[derive(Debug, Default, Serialize)]
pub struct Comparison {
    /// API responses read (distinct message and request ids, placeholders left out).
    pub requests: u64,
    /// Responses whose model the price table does not know (left out of both).
    pub unpriced: u64,
    /// Lines whose usage is past the import's limits (a count above 2^32 tokens: no real
    /// request's), left out as `muninn replay` leaves them out; summed, they overflowed.
    pub past_limits: u64,
    /// Output tokens as ccusage counts them: each response's first line.
    pub output_first_line: u64,
    /// Output tokens as muninn counts them: each response's last line.
    pub output_last_line: u64,
    /// 1-hour cache-write tokens (ccusage prices them at the 5-minute rate).
    pub write_1h_tokens: u64,
    /// Cost read ccusage's way.
    pub ccusage_micro_usd: i64,
    /// Cost read muninn's way (what `muninn replay` reports as `recorded`).
    pub muninn_micro_usd: i64,
    /// The part of the difference due to output counted from the first line.
    pub from_output_micro_usd: i64,
    /// The part due to 1-hour writes priced as 5-minute writes.
    pub from_1h_writes_micro_usd: i64,
}

fn usage_of(u: &serde_json::Value) -> Usage {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let created = n("cache_creation_input_tokens");
    let (w5, w1) = match u.get("cache_creation") {
        Some(c) => (
            c["ephemeral_5m_input_tokens"].as_u64().unwrap_or(0),
            c["ephemeral_1h_input_tokens"].as_u64().unwrap_or(0),
        ),
        None => (created, 0),
    };
    Usage {
        input: n("input_tokens"),
        cache_write_5m: w5,
        cache_write_1h: w1,
        cache_read: n("cache_read_input_tokens"),
        output: n("output_tokens"),
    }
}

/// The `*.jsonl` files under `path`. Links below the top are not followed into folders, as the
/// import's walk does not follow them: a link to a parent folder made this walk endless (a
/// stack overflow).
fn jsonl_files(path: &Path, top: bool, out: &mut Vec<PathBuf>) {
    let looked = if top {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    match looked {
        Ok(meta) if meta.is_dir() => {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            entries.sort();
            for entry in entries {
                jsonl_files(&entry, false, out);
            }
        }
        Ok(_) if path.extension().is_some_and(|e| e == "jsonl") => out.push(path.to_owned()),
        _ => {}
    }
}

/// The longest line read, as the import's: a longer one is skipped, so a file that is not JSON
/// Lines at all is never held whole.
const MAX_LINE_BYTES: u64 = 64 << 20;

/// Per response (message and request id): model, first line's usage, last line's usage.
type Seen = HashMap<String, (String, Usage, Usage)>;

/// Reads the Claude Code files under `paths` both ways. A file that cannot be read is named in a
/// warning and skipped, as the import skips it.
pub fn compare(paths: &[PathBuf], prices: &PriceTable) -> anyhow::Result<Comparison> {
    let mut files = Vec::new();
    for path in paths {
        jsonl_files(path, true, &mut files);
    }
    let mut seen = Seen::new();
    let mut past_limits = 0;
    for file in &files {
        if let Err(e) = read_file(file, &mut seen, &mut past_limits) {
            let warning = format!("{}: could not be read, skipped: {e}", file.display());
            eprintln!("warning: {}", crate::terminal::sanitize(&warning));
        }
    }
    let mut c = Comparison {
        past_limits,
        ..Comparison::default()
    };
    // Summed as costs are, saturating: prices and usages within their limits let a few
    // responses pass what an i64 holds (a plain sum panicked in a debug build and wrapped in a
    // release one). Each output part is at most its reading's cost, so once neither reading
    // saturated, no sum or difference below can overflow.
    let (mut muninn, mut ccusage) = (MicroUsd::ZERO, MicroUsd::ZERO);
    let (mut output_last, mut output_first) = (MicroUsd::ZERO, MicroUsd::ZERO);
    for (model, first, last) in seen.values() {
        let Ok(price) = prices.model(model) else {
            c.unpriced += 1;
            continue;
        };
        c.requests += 1;
        c.output_first_line += first.output;
        c.output_last_line += last.output;
        c.write_1h_tokens += last.cache_write_1h;
        muninn += price.cost(last);
        let as_5m = Usage {
            cache_write_5m: first.cache_write_5m + first.cache_write_1h,
            cache_write_1h: 0,
            ..*first
        };
        ccusage += price.cost(&as_5m);
        output_last += MicroUsd::of(last.output, price.output);
        output_first += MicroUsd::of(first.output, price.output);
    }
    crate::replay::refuse_saturated(muninn, "the files read muninn's way")?;
    crate::replay::refuse_saturated(ccusage, "the files read ccusage's way")?;
    c.muninn_micro_usd = muninn.0;
    c.ccusage_micro_usd = ccusage.0;
    c.from_output_micro_usd = output_last.0 - output_first.0;
    c.from_1h_writes_micro_usd = c.muninn_micro_usd - c.ccusage_micro_usd - c.from_output_micro_usd;
    Ok(c)
}

/// Reads one file's responses into `seen`, counting the lines past the limits. It is opened as
/// the import opens its files (never blocking, a regular file only, up to its length when
/// opened) and read a line at a time: it was read whole into memory, a link to `/dev/zero`
/// until memory ran out, and a file with one line of invalid UTF-8 failed the whole comparison.
fn read_file(path: &Path, seen: &mut Seen, past_limits: &mut u64) -> std::io::Result<()> {
    use std::io::{BufRead, Read};
    let opened = muninn_fs::open_regular(path)?;
    let mut reader = std::io::BufReader::new(opened.file).take(opened.len);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if n as u64 == MAX_LINE_BYTES && line.last() != Some(&b'\n') {
            reader.skip_until(b'\n')?;
            continue;
        }
        read_line(&line, seen, past_limits);
    }
}

/// Takes one line's response into `seen`, if it is one.
fn read_line(line: &[u8], seen: &mut Seen, past_limits: &mut u64) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
        return;
    };
    let message = &v["message"];
    let (Some(id), Some(model)) = (message["id"].as_str(), message["model"].as_str()) else {
        return;
    };
    if v["type"] != "assistant" || model == "<synthetic>" || message["usage"].is_null() {
        return;
    }
    let key = format!("{id}:{}", v["requestId"].as_str().unwrap_or(""));
    let usage = usage_of(&message["usage"]);
    if muninn_import::usage_problem(&usage).is_some() {
        *past_limits += 1;
        return;
    }
    seen.entry(key)
        .and_modify(|e| e.2 = usage)
        .or_insert((model.to_owned(), usage, usage));
}

/// Prints the comparison.
pub fn print(c: &Comparison, format: &str) -> anyhow::Result<()> {
    if format == "json" {
        return json(c);
    }
    let usd = |m: i64| format!("${:.2}", m as f64 / 1e6);
    let share = |m: i64| 100.0 * m as f64 / c.ccusage_micro_usd.max(1) as f64;
    let diff = c.muninn_micro_usd - c.ccusage_micro_usd;
    outln!(
        "{} responses read ({} on models without a price, left out)",
        c.requests,
        c.unpriced
    )?;
    if c.past_limits > 0 {
        outln!(
            "{} lines with a usage past the limits (over 2^32 tokens) left out, as replay leaves them out",
            c.past_limits
        )?;
    }
    outln!(
        "read ccusage's way (first line's output, 1h writes at the 5m rate): {}",
        usd(c.ccusage_micro_usd)
    )?;
    outln!(
        "read muninn's way (last line's output, 1h writes at 2x):            {}",
        usd(c.muninn_micro_usd)
    )?;
    outln!(
        "difference: {} ({:+.1}% of ccusage's figure), of which",
        usd(diff),
        share(diff)
    )?;
    outln!(
        "  output counted from the last line: {} ({} output tokens against {} on first lines)",
        usd(c.from_output_micro_usd),
        c.output_last_line,
        c.output_first_line
    )?;
    outln!(
        "  1h cache writes at their own rate: {} ({} tokens written at 1h)",
        usd(c.from_1h_writes_micro_usd),
        c.write_1h_tokens
    )?;
    Ok(())
}
