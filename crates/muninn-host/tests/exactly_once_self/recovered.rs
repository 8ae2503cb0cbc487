//! A brief recovered under a new lease as never sent, still held through a clean shutdown,
//! a second lease change or a refused append: run once after.

use super::*;

/// A capped runner (the cap is read before a held brief is sent) whose probe brief's ask mark
/// landed with its answer lost, its lease changed hands since and its next step fenced: the
/// step after takes a new lease and recovers the brief as one never sent, the mark that ends
/// the Self transcript its own — which only the runner knows.
async fn a_brief_whose_mark_answer_was_lost_under_a_stale_lease() -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
    i64,
) {
    let (w, faults, mut r, seq) = a_brief_after_one_run_of(capped()).await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    lease_changes_hands(&w).await;
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Fenced { .. })),
        "{e}"
    );
    r.woken();
    (w, faults, r, seq)
}

/// [`a_brief_whose_mark_answer_was_lost_under_a_stale_lease`], and the step that recovers the
/// brief failing on its spend read: the brief is still held, never sent.
async fn a_recovered_brief_held_through_a_failed_spend_read() -> (World, MindRunner<SimBackend>, i64)
{
    let (w, faults, mut r, seq) = a_brief_whose_mark_answer_was_lost_under_a_stale_lease().await;
    faults.fail_spend_reads(1);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("closed the connection"), "{e}");
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    (w, r, seq)
}

/// A brief recovered under a new lease as one never sent (its ask mark's answer lost), still
/// held when its runner shuts down cleanly: the runner takes the mark back, and the restarted
/// host runs the brief once. Before, the brief held from the recovery had forgotten that the
/// mark was its runner's own: nothing was written, and the restarted host failed the brief as
/// *interrupted … may have reached the model and acted* — a run that never began.
#[tokio::test]
async fn a_recovered_brief_still_held_at_a_clean_shutdown_is_run_once_after_the_restart() {
    let (w, r, seq) = a_recovered_brief_held_through_a_failed_spend_read().await;
    let mut restarted = restarted_cleanly(&w, r, capped()).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// The same recovered and held brief when the lease changes hands a second time before it is
/// sent: the runner still knows the mark last is its own, and runs the brief once under its
/// next lease. Before, the second lease change found no such knowledge in the held brief and
/// the recovery failed it as *interrupted … may have reached the model and acted*.
#[tokio::test]
async fn a_recovered_brief_still_held_at_a_second_lease_change_is_run_once() {
    let (w, mut r, seq) = a_recovered_brief_held_through_a_failed_spend_read().await;
    lease_changes_hands(&w).await;
    settle_through_errors(&mut r).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle_through_errors(&mut r).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// The recovered brief recorded afresh in its new segment, that append refused before it
/// landed, then a clean shutdown: the mark that ends the Self transcript is still the runner's
/// own (the item it recorded first is the last one confirmed), so it is taken back and the
/// restarted host runs the brief once.
#[tokio::test]
async fn a_recovered_brief_whose_fresh_append_is_refused_is_run_once_after_a_clean_restart() {
    let (w, faults, mut r, seq) = a_brief_whose_mark_answer_was_lost_under_a_stale_lease().await;
    faults.refuse_appends(1);
    r.step().await.unwrap_err();
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    let mut restarted = restarted_cleanly(&w, r, capped()).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A brief whose ask mark's answer was lost, and then a clean shutdown whose notice taking the
/// mark back lands with its answer lost too: the restarted host finds the notice last and runs
/// the brief, so the warning must say so. Before, it said *the next holder fails it as
/// interrupted*, sending an operator to look for a failure that never came.
#[tokio::test]
async fn a_lost_answer_to_the_notice_taking_a_mark_back_is_logged_as_what_happens() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    faults.lose_append_answers(1);
    r.release().await.unwrap();
    drop(r);
    let warned: Vec<String> = logs
        .events()
        .into_iter()
        .filter(|e| e["level"] == "WARN" && e["fields"]["brief"] == seq)
        .filter_map(|e| e["fields"]["message"].as_str().map(str::to_string))
        .filter(|m| m.starts_with("a brief never sent could not"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", logs.events());
    assert!(
        warned[0]
            .contains("if the notice landed (its answer lost), the next holder runs the brief"),
        "{warned:?}"
    );
    let mut restarted = runner(&w, mind(""), "host-a");
    settle(&mut restarted).await;
    done_and_reported_once(&w, seq).await;
}
