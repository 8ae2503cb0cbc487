//! Commits the store refuses inside a Self tool loop: the request whose record was refused is
//! held and committed at the next step, and the run ends there (its state was the failed
//! step's). The provider is asked once per ledger row — nothing asked again, nothing left out —
//! and the ledger replays exactly.

use super::{Act, Harness, assert_holds};
use crate::runtime::ledger;
use muninn_core::closed_loop::verify;
use muninn_core::price::PriceTable;
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
    let store = &h.w.host.store;
    let told = store.pending_deliveries("vala", 0, 50).await.unwrap();
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
