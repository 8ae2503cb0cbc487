//! A tool loop's run whose end landed in the store unanswered, given up under a new lease.

use super::{brief_text, script, workspace};
use crate::cut_rows::errors_starting;
use crate::runtime::{faulty_world, mind, runner};
use crate::scripted::brief;
use crate::telemetry::capture_logs;
use muninn_host::runtime::Step;

/// A run its request cap stopped wrote its last reply's row with that reply, so the record of
/// its end holds no ledger row. That record landed though the store's answer was lost, and the
/// lease changed hands before the runner tried it again: given up under the new lease, it is
/// not said abandoned uncommitted (it is in the store; the recovery reports its result, once).
/// Before, with no row to look up in the ledger, the runner took it for lost and logged at
/// error "an answer was abandoned uncommitted".
#[tokio::test]
async fn a_landed_run_end_without_rows_is_not_said_abandoned_under_a_new_lease() {
    let (logs, _anchor, _guard) = capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let root = workspace(dir.path());
    let (w, faults) = faulty_world(&format!(
        "[backend.self_session]\nworkspace = {:?}\nmax_requests = 1\n",
        root.display().to_string()
    ))
    .await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let seq = brief(&w, &brief_text(&script())).await;
    // The request's record is answered; the run's end lands unanswered.
    faults.lose_commit_answers_after(1, 1);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("held uncommitted"), "{e}");
    crate::exactly_once_self::lease_changes_hands(&w).await;
    for _ in 0..10 {
        r.woken();
        if matches!(r.step().await, Ok(Step::Idle { .. })) {
            break;
        }
    }
    let abandoned = errors_starting(&logs, "an answer was abandoned uncommitted");
    assert!(abandoned.is_empty(), "{abandoned:#?}");
    let told = w
        .host
        .store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap();
    let reports: Vec<&str> = (told.iter())
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .map(|d| d.text.as_str())
        .collect();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].starts_with(&format!("Self run {seq} was stopped by a cap")),
        "{reports:?}"
    );
}
