//! `muninn replay --closed-loop`: the host's own ledger export replayed under the host's policy
//! and parameters (read from each row's decision record). Every decision the host recorded must
//! come out the same and the cost within the tolerance, or the command fails.

use crate::output::outln;
use anyhow::Context;
use muninn_core::cache::CacheRules;
use muninn_core::closed_loop::{ClosedLoop, verify};
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

/// The longest ledger line read (a row with its raw usage and events is a few KiB).
const MAX_LINE_BYTES: usize = 1 << 20;

/// How many disagreements the table shows.
const SHOWN: usize = 20;

/// Replays the ledger exports at `paths` in closed loop and prints the result; fails when a
/// decision differs, the cost is off by more than `tolerance` (a fraction), or nothing could be
/// checked.
pub fn run(
    paths: &[PathBuf],
    prices: &PriceTable,
    json: bool,
    tolerance: f64,
) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut malformed = 0usize;
    for path in files(paths)? {
        read_rows(&path, &mut rows, &mut malformed)?;
    }
    let report = verify(&rows, prices, &CacheRules::default());
    crate::replay::refuse_saturated(report.recorded_cost, "the ledger as recorded")?;
    crate::replay::refuse_saturated(report.replayed_cost, "the ledger as replayed")?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_table(&report, malformed, tolerance)?;
    }
    if report.rows == 0 {
        anyhow::bail!("no ledger row with a decision record to replay");
    }
    if !report.holds(tolerance) {
        anyhow::bail!(
            "FAIL: {} of {} decisions differ; cost {:+.4}% (tolerance {:.4}%)",
            report.disagreements.len(),
            report.decisions,
            report.cost_difference() * 100.0,
            tolerance * 100.0
        );
    }
    Ok(())
}

fn print_table(report: &ClosedLoop, malformed: usize, tolerance: f64) -> std::io::Result<()> {
    outln!(
        "closed loop: {} sessions, {} rows replayed ({} without a decision record or price, {} malformed lines)",
        report.sessions,
        report.rows,
        report.rows_unchecked,
        malformed
    )?;
    outln!(
        "decisions: {} of {} reproduced",
        report.agreed,
        report.decisions
    )?;
    outln!(
        "cost: recorded {}, replayed {} ({:+.4}%, tolerance {:.4}%)",
        report.recorded_cost,
        report.replayed_cost,
        report.cost_difference() * 100.0,
        tolerance * 100.0
    )?;
    if report.rows_found_expired > 0 {
        // The provider had lost what the cache model held: taken as the provider answered.
        outln!(
            "{} rows found the cache expired (the answer wrote what the cache model read): taken as recorded",
            report.rows_found_expired
        )?;
    }
    if report.rows_priced_apart > 0 {
        outln!(
            "{} rows priced apart from the ledger; the largest:",
            report.rows_priced_apart
        )?;
        for r in &report.largest {
            outln!(
                "  {}/{} row {} at {}: recorded {:?}, replayed {:?} ({})",
                r.mind,
                r.role,
                r.row,
                r.at_ms,
                r.recorded,
                r.replayed,
                r.difference
            )?;
        }
    }
    for d in report.disagreements.iter().take(SHOWN) {
        let row = d.row.map_or("-".to_string(), |r| r.to_string());
        outln!(
            "  {}/{} at {} (row {row}): recorded {}, replayed {}",
            d.mind,
            d.role,
            d.at_ms,
            d.recorded,
            d.replayed
        )?;
    }
    if report.disagreements.len() > SHOWN {
        outln!("  … and {} more", report.disagreements.len() - SHOWN)?;
    }
    outln!(
        "{}",
        if report.holds(tolerance) {
            "PASS"
        } else {
            "FAIL"
        }
    )
}

/// The files to read: each path itself, or every `.jsonl` file under a directory.
fn files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

/// Reads a ledger export (`muninn ledger --format jsonl`): one row per line. A malformed or
/// oversized line is reported with its place and skipped. The file is opened as the import opens
/// its files (never blocking, a regular file only, up to its length when opened): a named pipe
/// in a folder blocked the check for ever, and a ledger being appended to kept it reading.
fn read_rows(path: &Path, rows: &mut Vec<LedgerRow>, malformed: &mut usize) -> anyhow::Result<()> {
    let opened =
        muninn_fs::open_regular(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = std::io::BufReader::new(opened.file).take(opened.len);
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if line.len() > MAX_LINE_BYTES {
            eprintln!(
                "warning: {}:{number}: a line over {MAX_LINE_BYTES} bytes; the rest of the file is skipped",
                path.display()
            );
            *malformed += 1;
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<LedgerRow>(text.trim()) {
            // A cost below zero is no bill: a corrupt or edited export, refused rather than
            // summed (a far-negative one overflowed the difference of the totals).
            Ok(row) if row.cost.0 < 0 => anyhow::bail!(
                "{}:{number}: a negative cost ({} micro-dollars): not a ledger row muninn wrote",
                path.display(),
                row.cost.0
            ),
            Ok(row) => rows.push(row),
            Err(e) => {
                eprintln!(
                    "warning: {}:{number}: not a ledger row: {e}",
                    path.display()
                );
                *malformed += 1;
            }
        }
    }
}
