//! muninn's own ledger with a compaction: the compaction row is a compaction thread of its own,
//! and rows read from memory map as their export does.

use super::*;
use pretty_assertions::assert_eq;

fn row(segment: u64, seconds: i64, decision: &str, u: Usage) -> String {
    let row = muninn_core::ledger::LedgerRow {
        mind: "vala".into(),
        role: "persona".into(),
        segment,
        turn: 0,
        at_ms: 1_770_717_600_000 + seconds * 1000,
        idle_gap_ms: 0,
        model: OPUS.into(),
        prefix_tokens: 0,
        rehydration_tokens: 0,
        usage: u,
        raw_usage: None,
        cost: muninn_core::money::MicroUsd(0),
        predicted_read: 0,
        predicted_write: 0,
        cache_state: "warm".into(),
        miss_cause: None,
        decision: decision.into(),
        boundary: true,
        events: Vec::new(),
        decided: None,
        provider_miss: None,
    };
    serde_json::to_string(&row).unwrap()
}

/// An append, a ping, a compaction and a refresh of one Mind, as ledger lines.
fn four_rows() -> [String; 4] {
    [
        row(0, 0, "append:Continue", usage(3, 0, 5000, 0, 100)),
        row(0, 20, "ping:RentWithinBudget", usage(8, 0, 0, 5000, 1)),
        row(0, 30, "compact", usage(2080, 127, 0, 3797, 400)),
        row(1, 40, "refresh:Compact", usage(3, 200, 0, 3055, 90)),
    ]
}

/// A `compact` row is the compaction request itself, and a ping the recorded policy's own
/// keep-warm request: each in a thread of its own, of the compaction kind, so a replay counts
/// them for what was recorded and never as turns of the Mind.
#[test]
fn a_compaction_row_is_a_compaction_thread_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.jsonl");
    let lines = four_rows();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let got = import(std::slice::from_ref(&path));
    assert_eq!(
        got.traces,
        vec![
            trace(
                "vala",
                "persona/compaction",
                ThreadKind::Compaction,
                OPUS,
                path.clone(),
                vec![request(30, usage(2080, 127, 0, 3797, 400), false, false, 0)]
            ),
            trace(
                "vala",
                "persona/keep-warm",
                ThreadKind::Compaction,
                OPUS,
                path.clone(),
                vec![request(20, usage(8, 0, 0, 5000, 1), false, false, 0)]
            ),
            trace(
                "vala",
                "persona",
                ThreadKind::Mind,
                OPUS,
                path,
                vec![
                    request(0, usage(3, 0, 5000, 0, 100), true, false, 0),
                    request(40, usage(3, 200, 0, 3055, 90), true, true, 0),
                ]
            ),
        ]
    );
}

/// Rows already in memory (a host's own ledger) become the traces their export does, each
/// request pointing back at its row.
#[test]
fn rows_in_memory_map_as_their_export_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.jsonl");
    let lines = four_rows();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let rows: Vec<muninn_core::ledger::LedgerRow> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut got = muninn_import::ledger_traces(&rows);
    let placed: Vec<(String, Vec<usize>)> = got
        .iter()
        .map(|t| (t.trace.thread.clone(), t.rows.clone()))
        .collect();
    assert_eq!(
        placed,
        vec![
            ("persona".to_string(), vec![0, 3]),
            ("persona/keep-warm".to_string(), vec![1]),
            ("persona/compaction".to_string(), vec![2]),
        ]
    );
    let mut imported = import(std::slice::from_ref(&path)).traces;
    for t in &mut imported {
        t.source = "ledger".into();
    }
    got.sort_by(|a, b| a.trace.thread.cmp(&b.trace.thread));
    imported.sort_by(|a, b| a.thread.cmp(&b.thread));
    let got: Vec<_> = got.into_iter().map(|t| t.trace).collect();
    assert_eq!(got, imported);
}

/// An attempt the provider billed but cut (`attempt_failed`, written before its retry) stays on
/// the conversation's thread, with the boundary it was written with: a replay under any policy
/// prices it on that policy's own cache state (the outage costs every policy), where a side
/// thread would count it for the recorded policy alone.
#[test]
fn a_cut_attempt_is_a_request_of_the_conversation() {
    let lines = [
        row(0, 0, "append:Continue", usage(3, 0, 5000, 0, 100)),
        row(0, 30, "attempt_failed", usage(3, 0, 120, 5000, 4)),
        row(0, 31, "append:Continue", usage(3, 0, 0, 5120, 90)),
    ];
    let mut rows: Vec<muninn_core::ledger::LedgerRow> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows[1].boundary = false;
    let got = muninn_import::ledger_traces(&rows);
    let placed: Vec<(String, Vec<usize>)> = got
        .iter()
        .map(|t| (t.trace.thread.clone(), t.rows.clone()))
        .collect();
    assert_eq!(placed, vec![("persona".to_string(), vec![0, 1, 2])]);
    let boundaries: Vec<bool> = got[0].trace.requests.iter().map(|r| r.boundary).collect();
    assert_eq!(boundaries, [true, false, true]);
}
