//! A Self flush the decider chose while idle, refused by the provider. The host falls back to
//! the segment's tail as the memory (as before), but the failure is the step's: `run_mind`
//! logs it with its cause, counts it and shows it as the Mind's last error (`RETRYING` in
//! `muninn status`, `activity.error` in `GET /v1/minds/{mind}`) — it used to be dropped with
//! no trace but a transcript note, which now carries the error too (bounded). The next decision
//! proceeds, and the ledger replays exactly.

use super::{Act, Harness, assert_holds};
use crate::runtime::ledger;
use muninn_core::closed_loop::verify;
use muninn_core::price::PriceTable;
use muninn_host::runtime::RuntimeError;
use muninn_sim::sim::{Fault, FaultKind};
use muninn_store::Role;

/// Briefs and deliveries with gaps around the tail's TTL: the Self flushes while idle.
pub(super) fn workload() -> Vec<Act> {
    super::rounds_of_mail_and_briefs(false)
}

/// Applies `acts` until the wait that reaches `at` (Unix ms), runs that wait up to just before
/// `at`, and returns its index.
pub(super) async fn run_to(h: &mut Harness, acts: &[Act], at: i64) -> usize {
    for (i, act) in acts.iter().enumerate() {
        if let Act::Wait { ms } = act
            && h.now() + ms >= at
        {
            h.run_until(at - 1).await;
            return i;
        }
        h.apply(act).await;
        assert!(h.now() < at, "the flush came inside act {i}: {act:?}");
    }
    panic!("no act reaches {at}");
}

/// When `acts` make the Self flush while idle (the clock is frozen and the simulator
/// deterministic: the same run reaches the same point).
pub(super) async fn idle_flush_at(acts: &[Act]) -> i64 {
    let mut h = Harness::new("").await;
    for act in acts {
        h.apply(act).await;
    }
    let end = h.now() + 2 * 3_600_000;
    h.run_until(end).await;
    let rows = ledger(&h.w).await;
    rows.iter()
        .find(|r| r.role == "self" && r.decision.starts_with("flush"))
        .expect("the workload flushes the Self while idle")
        .at_ms
}

#[tokio::test]
async fn a_failed_idle_flush_fails_its_step_loudly_and_the_next_decision_proceeds() {
    let acts = workload();
    let flush = idle_flush_at(&acts).await;

    // The same run up to that flush, which the provider now refuses (a 400, which no client
    // retries, with a message longer than the transcript keeps).
    let mut h = Harness::new("").await;
    let i = run_to(&mut h, &acts, flush).await;
    let Act::Wait { ms } = acts[i] else {
        unreachable!()
    };
    let wait_end = flush - 1 + ms;
    h.w.sim.advance_clock(flush - h.now());
    h.w.sim.push_faults([Fault {
        kind: FaultKind::BadRequest {
            message: format!("the flush was refused: {}", "too long ".repeat(60)),
        },
        times: 1,
    }]);
    let step = h.runner.as_mut().unwrap().step().await;
    // The step fails with the backend's error, which `run_mind` logs, counts and shows.
    let error = match &step {
        Err(RuntimeError::Backend(e)) => e.to_string(),
        other => panic!("the failed flush was not the step's failure: {other:?}"),
    };
    assert!(
        error.contains("400") && error.contains("refused"),
        "{error}"
    );
    assert_eq!(
        h.runner.as_ref().unwrap().working_role(),
        Some(Role::SelfRole)
    );
    // The memory is still recorded, from the tail.
    let tail =
        h.w.host
            .store
            .transcript_tail("vala", Role::SelfRole, 1)
            .await
            .unwrap();
    assert_eq!(tail[0].kind.as_str(), "memory_flush");
    assert_eq!(tail[0].body["from"], "tail (the flush failed)");
    // With its cause: the backend's error, as the step failed with it, cut to 300 characters.
    let kept: String = error.chars().take(300).collect();
    assert!(error.chars().count() > 300, "{error}");
    assert_eq!(tail[0].body["error"], format!("{kept}…"));
    // The runner backs off as `run_mind` does and carries on: the rest of the workload runs,
    // later Self decisions are taken, and the ledger replays exactly.
    let policy = muninn_host::runtime::RetryPolicy::default();
    let next = muninn_host::runtime::Failing::after(None, &policy, None, h.now());
    h.w.sim.advance_clock(next.next_attempt_ms - h.now());
    h.failing = Some(next);
    h.run_until(wait_end.max(h.now())).await;
    for act in &acts[i + 1..] {
        h.apply(act).await;
    }
    let end = h.now() + 2 * 3_600_000;
    h.run_until(end).await;
    let after = ledger(&h.w).await;
    assert!(
        after.iter().any(|r| r.role == "self" && r.at_ms > flush),
        "no Self row after the failed flush"
    );
    assert!(!after.iter().any(|r| r.at_ms == flush && r.role == "self"));
    let report = verify(&after, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &after);
}

/// A Self flush the decider chose while idle, cut by the provider after `message_start`: the
/// cut attempt is a ledger row (the provider billed it) of what it attempted — a flush, the
/// recorded policy's own side request — so a counterfactual replay (`muninn replay`, `ledger`
/// input) puts it on the Self's compaction thread beside the flushes, counted for the recorded
/// policy alone, and not on the conversation as a request every policy would pay. The ledger
/// replays exactly in closed loop too.
#[tokio::test]
async fn a_cut_idle_flush_is_a_side_request_in_a_counterfactual_replay() {
    let acts = workload();
    let flush = idle_flush_at(&acts).await;
    let mut h = Harness::new("").await;
    let i = run_to(&mut h, &acts, flush).await;
    let Act::Wait { ms } = acts[i] else {
        unreachable!()
    };
    let wait_end = flush - 1 + ms;
    h.w.sim.advance_clock(flush - h.now());
    h.w.sim.push_faults([Fault {
        kind: FaultKind::Truncate { after_deltas: 1 },
        times: 1,
    }]);
    assert!(h.runner.as_mut().unwrap().step().await.is_err());
    let policy = muninn_host::runtime::RetryPolicy::default();
    let next = muninn_host::runtime::Failing::after(None, &policy, None, h.now());
    h.w.sim.advance_clock(next.next_attempt_ms - h.now());
    h.failing = Some(next);
    h.run_until(wait_end.max(h.now())).await;
    for act in &acts[i + 1..] {
        h.apply(act).await;
    }
    let end = h.now() + 2 * 3_600_000;
    h.run_until(end).await;
    let rows = ledger(&h.w).await;
    let cut = rows
        .iter()
        .position(|r| r.decision == "attempt_failed")
        .expect("the cut flush is a row");
    assert_eq!((rows[cut].role.as_str(), rows[cut].at_ms), ("self", flush));
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
    let traces = muninn_import::ledger_traces(&rows);
    let thread = traces
        .iter()
        .find(|t| t.rows.contains(&cut))
        .map(|t| t.trace.thread.as_str());
    assert_eq!(thread, Some("self/compaction"));
}
