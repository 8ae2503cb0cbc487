//! A brief whose ask mark's answer was lost, or whose append or mark was refused, when the
//! lease changes hands or the next step fails: run once, never taken for another holder's.

use super::*;

/// A brief whose ask mark landed but whose answer was lost, when the lease changes hands
/// before the runner tries again (nothing run in between): the runner never sent the brief —
/// a brief is sent only once its mark is confirmed — and knows it, so under its next lease it
/// runs it, once, in a new segment, as a brief recorded and never asked. Before, the recovery
/// read the mark and failed the brief as *interrupted … after the brief was sent …; it may
/// have acted*: a run that never began, reported as one that may have edited files.
#[tokio::test]
async fn a_brief_whose_ask_mark_answer_was_lost_is_run_once_under_the_next_lease() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    lease_changes_hands(&w).await;
    settle_through_errors(&mut r).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle_through_errors(&mut r).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// The same lost mark answer, and then a clean shutdown before the runner tries again: the
/// brief was never sent, which only the runner knows; it says so in the Self transcript before
/// it lets the lease go, and the restarted host runs the brief once, in a new segment. Before,
/// the restarted host read the mark and failed the brief as *interrupted … may have acted*.
#[tokio::test]
async fn a_brief_whose_ask_mark_answer_was_lost_is_run_once_after_a_clean_restart() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    let mut restarted = restarted_cleanly(&w, r, mind("")).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A brief whose ask mark was refused before it landed, and the Mind taken over while the
/// runner held it: the new holder finds the brief's item last, never asked, and runs it; it
/// dies after sending it (its run's commit refused, then the process gone), its own mark last.
/// The first runner, back under a new lease, must not take that mark for its own unconfirmed
/// one: the brief was sent — by the other holder — and may have acted, so it is failed as
/// interrupted and the model is shown it once. Before, the runner remembered "my mark, never
/// confirmed", found a mark last and ran the brief a second time.
#[tokio::test]
async fn a_mark_another_holder_wrote_is_not_taken_for_the_runners_own_unconfirmed_one() {
    let (w, faults, mut a, seq) = a_brief_after_one_run().await;
    faults.refuse_appends_after(1, 1);
    a.step().await.unwrap_err();
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    let ttl = w.host.config.lease_ttl_ms;
    w.sim.advance_clock(ttl + 1_000);
    let mut b = runner(&w, mind(""), "host-b");
    faults.fail_commits(1);
    let e = b.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    assert_eq!(self_requests(&w).len(), 2, "host-b sent the probe");
    drop(b);
    w.sim.advance_clock(ttl + 1_000);
    settle_through_errors(&mut a).await;

    assert_eq!(showing_the_probe(&w), 1, "requests showing the probe");
    failed_and_reported_once(
        &w,
        seq,
        "its host stopped",
        "may have reached the model and acted",
    )
    .await;
}

/// A brief whose ask mark's answer was lost, and the next step's spend read (the cap checked
/// before the held brief is sent) failing too — a store in trouble fails both: the runner
/// still holds the brief, never sent, and runs it once at the step after, on the session it
/// was rendered on. Before, the failed read dropped the held brief, and the recovery that
/// followed the failed step read the mark and failed the brief as *interrupted … may have
/// reached the model and acted*: a run that never began.
#[tokio::test]
async fn a_held_brief_whose_cap_read_fails_is_still_held_and_run_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run_of(capped()).await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    faults.fail_spend_reads(1);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("closed the connection"), "{e}");
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    settle(&mut r).await;
    brief(&w, "And the month.").await;
    settle(&mut r).await;
    brief_exactly_once(&w, seq, 3, 1).await;
}

/// A brief whose ask mark's answer was lost, recovered by its runner under its next lease as
/// one never sent, and the new segment it is to run in refused by the store (the segment
/// start): the runner still holds the brief and runs it once at the step after. Before, the
/// failed step let the brief go, and the recovery after it read the mark and failed the brief
/// as *interrupted: the store failed (…) after the brief was marked as sent …; it may have
/// reached the model and acted*: a run that never began.
#[tokio::test]
async fn a_held_brief_whose_new_segment_is_refused_is_still_held_and_run_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    lease_changes_hands(&w).await;
    faults.fail_segment_starts(1);
    // The stale lease's step is fenced; the next takes a new lease, and recovers the brief.
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Fenced { .. })),
        "{e}"
    );
    r.woken();
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("refused the segment"), "{e}");
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    settle_through_errors(&mut r).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle_through_errors(&mut r).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}
