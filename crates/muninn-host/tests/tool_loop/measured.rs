//! The measured Self tool loops (docs/replay.md, "The host" under the `mask` action): the same
//! brief over this repository's own sources with masks allowed and with `never`, once and five
//! times by one Mind.

use super::{Run, brief_text, cleared_tokens, is_mask, run_brief, self_rows};
use crate::runtime::{ledger, mind, runner, world_with};
use muninn_core::ledger::LedgerRow;
use serde_json::{Value, json};
use std::path::Path;

/// A registered Mind deciding by `policy`, its Self session working in `src`.
async fn measured_run(src: &Path, policy: &str) -> Run {
    let w = world_with(&format!(
        "[backend.self_session]\nworkspace = {:?}\nmax_requests = 200",
        src.canonicalize().unwrap().display().to_string()
    ))
    .await;
    let r = runner(&w, mind(&format!("policy = '{policy}'")), "host-a");
    r.register().await.unwrap();
    Run {
        w,
        _dir: tempfile::tempdir().unwrap(),
        r,
    }
}

/// The measured run (docs/replay.md, "The host" under the `mask` action): the same brief over
/// this repository's own source files, once deciding as configured (masks allowed) and once with
/// `never` (which never masks, and inside a tool loop decides nothing else differently), side by
/// side.
#[tokio::test]
async fn measured_masks_against_no_masks_on_this_repositorys_sources() {
    let src = measured_sources();
    let (files, text) = measured_brief(&src);
    let mut figures = Vec::new();
    for policy in ["ski-rental", "never"] {
        let mut run = measured_run(&src, policy).await;
        run_brief(&mut run, &text).await;
        let rows = ledger(&run.w).await;
        let rows = self_rows(&rows);
        let masks = rows.iter().filter(|r| is_mask(r)).count();
        let at: Vec<usize> = (0..rows.len()).filter(|&i| is_mask(rows[i])).collect();
        let cleared = cleared_tokens(rows.iter().copied());
        let cost: i64 = rows.iter().map(|r| r.cost.0).sum();
        let read: u64 = rows.iter().map(|r| r.usage.cache_read).sum();
        let written: u64 = rows.iter().map(|r| r.usage.written()).sum();
        figures.push((policy, rows.len(), masks, cleared, read, written, cost, at));
    }
    eprintln!(
        "FIGURE self tool loop over {} files of crates/muninn-core/src:",
        files.len()
    );
    for (policy, requests, masks, cleared, read, written, cost, at) in &figures {
        eprintln!(
            "FIGURE   {policy:>10}: {requests} requests, {masks} masks (at requests {at:?}), {cleared} tokens cleared, {read} read, {written} written, {cost} micro-USD"
        );
    }
    let (with, without) = (&figures[0], &figures[1]);
    assert!(with.2 > 0, "no mask: {figures:?}");
    assert_eq!(without.2, 0, "{figures:?}");
    assert_eq!(with.1, without.1, "the same requests: {figures:?}");
    // What a clear does, whatever it comes to: later requests read less, the clear rewrote.
    assert!(with.3 > 0 && with.4 < without.4, "{figures:?}");
    assert!(with.5 > without.5, "{figures:?}");
    eprintln!(
        "FIGURE   with masks ÷ without: {:.4}",
        with.6 as f64 / without.6 as f64
    );
}

/// The measured briefs' workspace: this repository's `crates/muninn-core/src`, or the copy
/// `MUNINN_MEASURED_SRC` names (to measure two versions of the code on the same files).
fn measured_sources() -> std::path::PathBuf {
    std::env::var_os("MUNINN_MEASURED_SRC").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../muninn-core/src"),
        std::path::PathBuf::from,
    )
}

/// The measured brief over `src`: list it, then read each of its `.rs` files in name order.
/// Returns the files and the brief's text.
fn measured_brief(src: &Path) -> (Vec<String>, String) {
    let mut files: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut calls = vec![json!({"name": "list_dir", "input": {}})];
    calls.extend(
        files
            .iter()
            .map(|f| json!({"name": "read_file", "input": {"path": f}})),
    );
    let text = brief_text(&Value::Array(calls));
    (files, text)
}

/// The same measured brief run five times by one Mind, with masks allowed and with `never`:
/// from the third brief on the Mind has finished runs to learn how long its loops go
/// (`muninn_core::learn::Runs`), and its clears are placed by that, not by the prior alone.
/// Prints each brief's masks and cost side by side.
#[tokio::test]
async fn measured_masks_with_history() {
    let src = measured_sources();
    let (_, text) = measured_brief(&src);
    let briefs = 5;
    let mut per_policy = Vec::new();
    for policy in ["ski-rental", "never"] {
        let mut run = measured_run(&src, policy).await;
        for _ in 0..briefs {
            run_brief(&mut run, &text).await;
            run.w.sim.advance_clock(60_000);
        }
        let rows = ledger(&run.w).await;
        // Each brief's rows: from its boundary request to the next (a refresh's flush row, at
        // the next brief's boundary, is the next brief's).
        let mut runs: Vec<Vec<LedgerRow>> = Vec::new();
        let mut flushed = false;
        for row in rows.into_iter().filter(|r| r.role == "self") {
            let starts = row.boundary && !flushed;
            flushed = row.decision == "flush";
            if starts || runs.is_empty() {
                runs.push(Vec::new());
            }
            runs.last_mut().unwrap().push(row);
        }
        per_policy.push(runs);
    }
    let (with, without) = (&per_policy[0], &per_policy[1]);
    assert_eq!(with.len(), briefs, "{} runs", with.len());
    assert_eq!(without.len(), briefs);
    eprintln!("FIGURE the measured brief, five times by one Mind:");
    let cost = |rows: &[LedgerRow]| rows.iter().map(|r| r.cost.0).sum::<i64>();
    for (b, (w, n)) in with.iter().zip(without).enumerate() {
        let at: Vec<usize> = (0..w.len()).filter(|&i| is_mask(&w[i])).collect();
        eprintln!(
            "FIGURE   brief {}: {} requests, masks at {at:?}, ski-rental {} µ$, never {} µ$, {:.4}",
            b + 1,
            w.len(),
            cost(w),
            cost(n),
            cost(w) as f64 / cost(n) as f64
        );
    }
    let total = |runs: &[Vec<LedgerRow>]| runs.iter().map(|r| cost(r)).sum::<i64>();
    eprintln!(
        "FIGURE   all five: ski-rental {} µ$, never {} µ$, {:.4}",
        total(with),
        total(without),
        total(with) as f64 / total(without) as f64
    );
}
