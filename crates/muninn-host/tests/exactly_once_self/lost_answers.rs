//! A store's answer lost, or the host gone, around a brief's append, its ask and its run's
//! commit: the brief run once, or failed saying what happened.

use super::*;

/// A brief's append lands but its answer is lost (the store's deadline passed after `COMMIT`):
/// the step fails, and the next one finishes the append under its key — the store adds
/// nothing — and runs the brief on the session it was rendered on.
#[tokio::test]
async fn a_brief_whose_append_answer_is_lost_is_recorded_shown_and_run_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers(1);
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    settle(&mut r).await;
    brief(&w, "And the month.").await;
    settle(&mut r).await;
    brief_exactly_once(&w, seq, 3, 1).await;
}

/// A run's commit lands but its answer is lost: the record is held and committed again under
/// its turn key (the store finds it recorded), then the brief is finished and reported once.
#[tokio::test]
async fn a_brief_whose_run_commit_answer_is_lost_is_run_and_reported_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_commit_answers(1);
    let e = r.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    settle(&mut r).await;
    brief(&w, "And the month.").await;
    settle(&mut r).await;
    brief_exactly_once(&w, seq, 3, 1).await;
}

/// A restart after the brief's append whose answer was lost: the new process (a new nonce, a
/// new lease) finds the brief's item ending the Self transcript, never answered, and runs the
/// brief again rather than failing it — recorded in a new segment (a segment that ends
/// unanswered is never continued), so the old one keeps a copy the model never saw, and the
/// model is shown the brief once. The kill between a confirmed append and the ask is the same
/// state (`crash_points`, `host-brief-recorded`).
#[tokio::test]
async fn a_restart_after_a_lost_brief_append_answer_runs_the_brief_once_in_a_new_segment() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers(1);
    r.step().await.unwrap_err();
    drop(r);
    let mut restarted = runner(&w, mind(""), "host-a");
    settle(&mut restarted).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A run whose brief was sent — answered, even, and a Claude Code run may have edited files by
/// then — and whose host died before its end was committed leaves nothing after the brief's
/// item but the mark that it was asked: the next holder reports it interrupted, saying that
/// nothing of the run was recorded, and does not ask the model again (which would repeat
/// whatever the run did). Only a brief that was never asked is run again (above).
#[tokio::test]
async fn a_brief_asked_before_its_host_died_is_reported_interrupted_not_run_again() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    // The run's end is refused, held for the next step; the host dies before that step.
    faults.fail_commits(1);
    let e = r.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    drop(r);
    let mut restarted = runner(&w, mind(""), "host-a");
    settle(&mut restarted).await;
    let shown = self_requests(&w)
        .iter()
        .filter(|r| user_texts(r).last().is_some_and(|t| t.contains(PROBE)))
        .count();
    assert_eq!(shown, 1, "requests whose new brief is the probe");
    failed_and_reported_once(&w, seq, "", "before anything of the run was recorded").await;
}

/// A brief held because its append was refused (nothing landed) when its host loses the lease:
/// the next holder finds it `running` with no item of it in the Self transcript — never sent —
/// and fails it saying exactly that, once. Before, its result told the Persona that "what it
/// did until then is in the transcript and the ledger" of a run that never began. It is not
/// run: a failure report of it may have been posted already (`stranded.rs`).
#[tokio::test]
async fn a_held_brief_that_never_landed_is_reported_never_sent_by_the_next_holder() {
    let (w, faults, mut a, seq) = a_brief_after_one_run().await;
    faults.refuse_appends(1);
    a.step().await.unwrap_err();
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1_000);
    let mut b = runner(&w, mind(""), "host-b");
    settle(&mut b).await;
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
    settle(&mut b).await;

    assert_eq!(showing_the_probe(&w), 0, "requests showing the probe");
    failed_and_reported_once(
        &w,
        seq,
        "its host stopped",
        "before the brief was recorded or sent to the model",
    )
    .await;
}
