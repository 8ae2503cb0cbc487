//! Commits the store refuses inside a Self tool loop: the request whose record was refused is
//! held and committed at the next step, and the run ends there (its state was the failed
//! step's). The provider is asked once per ledger row — nothing asked again, nothing left out —
//! and the ledger replays exactly. And a store read that fails between an answer and its
//! commit (the Self flush's tail, its memory when the answer misses a pinned item): the answer
//! is held across it as across a refused commit.

use super::idle_flush::{idle_flush_at, run_to, workload};
use super::{Act, Harness, assert_holds};
use crate::runtime::ledger;
use muninn_core::closed_loop::verify;
use muninn_core::price::PriceTable;
use muninn_host::runtime::RuntimeError;
use muninn_store::{BriefStatus, Role, TranscriptKind};

#[tokio::test]
async fn a_tool_loop_request_whose_commit_fails_is_recorded_once_and_ends_the_run() {
    let mut h = Harness::with_workspace("").await;
    let acts = [
        Act::Deliver { room: 0, words: 30 },
        Act::StoreFaults { commits: 2 },
        Act::ToolBrief { files: 4 },
        Act::Deliver { room: 1, words: 20 },
    ];
    for act in &acts {
        h.apply(act).await;
    }
    let end = h.now() + 2 * 3_600_000;
    h.run_until(end).await;
    assert_eq!(h.faults.refused(), 2);
    let rows = ledger(&h.w).await;
    let answered =
        h.w.sim
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/messages") && r.status == 200)
            .count();
    assert_eq!(answered, rows.len(), "{rows:#?}");
    // The brief's first request called tools; its record was refused, then committed, and the
    // run ended there.
    let requests = rows
        .iter()
        .filter(|r| {
            r.role == "self"
                && r.decided
                    .as_ref()
                    .is_some_and(|d| d.kind == muninn_core::ledger::RowKind::Request)
        })
        .count();
    assert_eq!(requests, 1, "{rows:#?}");
    let failed =
        h.w.host
            .store
            .briefs("vala", Some(BriefStatus::Failed), 10)
            .await
            .unwrap();
    assert_eq!(failed.len(), 1);
    let result = failed[0].result.clone().unwrap_or_default();
    assert!(
        result.contains("the store failed to record its request 1"),
        "{result}"
    );
    // The Persona is told the store stopped it, not a cap.
    assert_told_the_store_stopped_it(&h).await;
    let store = &h.w.host.store;
    // The request's tool results were never sent (the run ended there): none is recorded.
    let transcript = store
        .transcript_tail("vala", Role::SelfRole, 50)
        .await
        .unwrap();
    let kinds: Vec<_> = transcript.iter().map(|i| i.kind.clone()).collect();
    assert!(kinds.contains(&TranscriptKind::ToolUse), "{kinds:?}");
    assert!(!kinds.contains(&TranscriptKind::ToolResult), "{kinds:?}");
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

/// The Messages requests the simulator answered.
fn answered(h: &Harness) -> usize {
    h.w.sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200)
        .count()
}

#[tokio::test]
async fn a_flush_whose_tail_read_fails_is_held_and_committed_once() {
    let acts = workload();
    let flush = idle_flush_at(&acts).await;
    // The same run up to that flush, whose answer (text, not the pinned JSON: the memory is the
    // segment's tail) is followed by a tail read the store refuses.
    let mut h = Harness::new("").await;
    let i = run_to(&mut h, &acts, flush).await;
    h.w.sim.advance_clock(flush - h.now());
    h.faults.fail_reads(1);
    let before = answered(&h);
    let step = h.runner.as_mut().unwrap().step().await;
    assert!(matches!(step, Err(RuntimeError::Held(_))), "{step:?}");
    assert_eq!(answered(&h), before + 1, "the flush was not asked");
    for act in &acts[i..] {
        h.apply(act).await;
    }
    let end = h.now() + 2 * 3_600_000;
    h.run_until(end).await;
    let rows = ledger(&h.w).await;
    // The flush's answer was committed (at its own time), once; nothing asked went unrecorded.
    let flushes: Vec<_> = rows
        .iter()
        .filter(|r| r.role == "self" && r.at_ms == flush)
        .collect();
    assert_eq!(flushes.len(), 1, "{rows:#?}");
    assert!(flushes[0].decision.starts_with("flush"), "{rows:#?}");
    assert_eq!(answered(&h), rows.len(), "{rows:#?}");
    let memory =
        h.w.host
            .store
            .transcript_tail("vala", Role::SelfRole, 50)
            .await
            .unwrap();
    let memory = memory
        .iter()
        .find(|i| i.kind == TranscriptKind::MemoryFlush)
        .expect("the flush's memory was not recorded");
    assert_eq!(memory.body["from"], "tail (the flush missed a pinned item)");
    assert!(
        !memory.body["memory"].as_str().unwrap().is_empty(),
        "{memory:?}"
    );
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

/// A tool loop whose spend-cap check fails on the store between a request's answer and its
/// commit (the settings read after the first request): the answer was billed and counted, so
/// its row reaches the ledger — the run stops there, as a cap it cannot read would stop it —
/// and the ledger replays exactly. The row used to be dropped with the step's error: one
/// request answered more than the ledger holds, counted by the host and by no replay.
#[tokio::test]
async fn a_tool_loop_request_whose_cap_check_fails_is_recorded() {
    let mut h = Harness::with_workspace("").await;
    h.apply(&Act::Deliver { room: 0, words: 30 }).await;
    // The step's own settings read passes; the loop's first cap check is refused.
    h.faults.fail_settings_reads_after(1, 1);
    for act in [
        Act::ToolBrief { files: 4 },
        Act::Deliver { room: 1, words: 20 },
    ] {
        h.apply(&act).await;
    }
    let end = h.now() + 2 * 3_600_000;
    h.run_until(end).await;
    let rows = ledger(&h.w).await;
    assert_eq!(answered(&h), rows.len(), "{rows:#?}");
    let failed =
        h.w.host
            .store
            .briefs("vala", Some(BriefStatus::Failed), 10)
            .await
            .unwrap();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    let result = failed[0].result.clone().unwrap_or_default();
    assert!(result.contains("spend cap could not be read"), "{result}");
    // The Persona is told the store stopped it, not a cap.
    assert_told_the_store_stopped_it(&h).await;
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

/// The Self's report to the Persona says its first run was stopped by the store's failure.
async fn assert_told_the_store_stopped_it(h: &Harness) {
    let told =
        h.w.host
            .store
            .pending_deliveries("vala", 0, 50)
            .await
            .unwrap();
    let told = told
        .iter()
        .find(|d| d.room == "self")
        .expect("never reported");
    assert!(
        told.text
            .starts_with("Self run 1 was stopped when the store failed"),
        "{}",
        told.text
    );
}
