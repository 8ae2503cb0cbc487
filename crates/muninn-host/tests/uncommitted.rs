//! An answer whose commit fails (a full disk, a busy SQLite file, a PostgreSQL server gone):
//! the runner holds it and commits it first at the next step. The provider is asked once, the
//! reply delivered once, the ledger gets every row, and replaying that ledger takes every
//! decision the host took, at its cost: the batch is not asked again (billed twice), a Self
//! run's brief is not failed as interrupted, and no row the accounting counted is dropped.

use crate::closed_loop::assert_holds;
use crate::runtime::{
    World, at_the_first_ping, faulty_world, ledger, mind, post, runner, spent, stored_brief,
    world_on,
};
use muninn_core::closed_loop::verify;
use muninn_core::money::MicroUsd;
use muninn_core::price::PriceTable;
use muninn_host::runtime::{MindRunner, RuntimeError, Step, run_mind};
use muninn_sim::inprocess::SimBackend;
use muninn_store::{BriefOrigin, BriefStatus, Caps, NewBrief, Role, StoreError, TranscriptKind};
use std::time::{Duration, Instant};

/// The Messages requests the simulator answered.
fn asked(w: &World) -> usize {
    w.sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200)
        .count()
}

/// `n` steps, each refused by the store.
async fn refused_steps(r: &mut MindRunner<SimBackend>, n: usize) {
    for _ in 0..n {
        let e = r.step().await.unwrap_err();
        assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    }
}

/// Steps through every idle decision to the end of both TTLs, then replays the ledger.
async fn replays_exactly(w: &World, r: &mut MindRunner<SimBackend>) {
    for _ in 0..50 {
        match r.step().await.unwrap() {
            Step::Idle { until_ms: Some(t) } => {
                w.sim.advance_clock((t - w.sim.now_ms()).max(1));
            }
            Step::Idle { until_ms: None } => break,
            _ => {}
        }
    }
    let rows = ledger(w).await;
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

#[tokio::test]
async fn a_persona_answer_whose_commit_fails_is_committed_first_and_never_asked_again() {
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    faults.fail_commits(2);
    refused_steps(&mut r, 2).await;
    assert_eq!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 1,
            valid: true
        }
    );
    assert_eq!(faults.refused(), 2);
    assert_eq!(asked(&w), 1, "the provider was asked again");
    let store = &w.host.store;
    assert_eq!(store.ack_position("vala").await.unwrap(), 1);
    let outbox = store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 1, "{outbox:#?}");
    assert_eq!(outbox[0].request_id, "vala-1-1-0");
    assert_eq!(ledger(&w).await.len(), 1);

    // The session went on: the next turn appends to the same segment, its prefix read from
    // the cache the held answer left warm.
    w.sim.advance_clock(20_000);
    post(&w, "e2", "#swarm", "ari", "still there?").await;
    r.woken();
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 2,
            ..
        }
    ));
    assert_eq!(asked(&w), 2);
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].segment, rows[0].segment);
    assert!(rows[1].decision.starts_with("append"), "{rows:#?}");
    assert!(rows[1].usage.cache_read > rows[0].usage.cache_read);
    replays_exactly(&w, &mut r).await;
}

#[tokio::test]
async fn a_self_run_whose_commit_fails_is_finished_and_reported_once() {
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let store = &w.host.store;
    store
        .enqueue_brief(
            "vala",
            &NewBrief {
                text: "Summarise the ledger of the last week.".into(),
                origin: BriefOrigin::Operator,
                created_at_ms: w.sim.now_ms(),
            },
        )
        .await
        .unwrap();
    faults.fail_commits(2);
    refused_steps(&mut r, 2).await;
    assert_eq!(r.step().await.unwrap(), Step::SelfTurn { brief: 1 });
    assert_eq!(asked(&w), 1, "the provider was asked again");
    let done = store
        .briefs("vala", Some(BriefStatus::Done), 10)
        .await
        .unwrap();
    assert_eq!(done.len(), 1, "the brief was not finished");
    let reports = store.pending_deliveries("vala", 0, 10).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(
        reports[0].text.starts_with("Self run 1 finished"),
        "{reports:#?}"
    );
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].role, "self");

    // The Persona hears of it once.
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    assert_eq!(asked(&w), 2);
    replays_exactly(&w, &mut r).await;
}

#[tokio::test]
async fn a_keep_warm_ping_whose_row_fails_to_commit_is_ledgered_and_replays() {
    let (w, faults) = faulty_world("").await;
    let mut r = at_the_first_ping(&w).await;
    faults.fail_commits(1);
    refused_steps(&mut r, 1).await;
    assert_eq!(r.step().await.unwrap(), Step::Ping);
    assert_eq!(asked(&w), 2, "the ping was sent again");
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 2);
    assert!(rows[1].decision.starts_with("ping"), "{rows:#?}");
    replays_exactly(&w, &mut r).await;
}

/// Under `run_mind`: the failure is loud (counted as a store failure, the Mind failing with the
/// cause), retried on the backoff, and the host recovers by itself once the store does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_commit_is_counted_retried_and_recovered_without_a_restart() {
    let (w, faults) = faulty_world("").await;
    let r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    faults.fail_commits(3);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_mind(r, stopped));
    let started = Instant::now();
    let mut seen_failing = None;
    while w.host.store.ack_position("vala").await.unwrap() < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never recovered"
        );
        if let Some(failing) = w.host.telemetry.mind("vala").failing {
            seen_failing = Some(failing);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failing = seen_failing.expect("the Mind was never shown failing");
    assert_eq!(failing.cause, "store");
    assert!(failing.last_error.contains("disk is full"), "{failing:?}");
    // Status says an answer is held, not only that the store failed.
    assert!(
        failing.last_error.contains("an answer is held uncommitted"),
        "{failing:?}"
    );
    // Three refusals, backed off 250 + 500 + 1,000 ms, not spun.
    assert!(started.elapsed() >= Duration::from_millis(1_750));
    let live = w.host.telemetry.mind("vala");
    assert_eq!(live.step_failures.get("store"), Some(&3), "{live:?}");
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    assert!(w.host.telemetry.mind("vala").failing.is_none());
    assert_eq!(faults.refused(), 3);
    assert_eq!(asked(&w), 1, "the provider was asked again");
    assert_eq!(
        w.host.store.unacked_outbox("vala", 10).await.unwrap().len(),
        1
    );
}

/// A clean shutdown while an answer is held (the store refused its commit, the retry not yet
/// due): the answer is committed under the lease before the lease is released, so the next
/// holder finds the batch answered and does not ask the provider again (billed twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_answer_is_committed_before_a_clean_shutdown_releases_the_lease() {
    let (w, faults) = faulty_world("").await;
    let r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    faults.fail_commits(1);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_mind(r, stopped));
    let started = Instant::now();
    while faults.refused() < 1 {
        assert!(started.elapsed() < Duration::from_secs(20), "never refused");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    let store = &w.host.store;
    assert_eq!(
        store.ack_position("vala").await.unwrap(),
        1,
        "the answer was lost"
    );
    assert_eq!(store.unacked_outbox("vala", 10).await.unwrap().len(), 1);
    assert_eq!(ledger(&w).await.len(), 1);
    assert_eq!(
        store.lease("vala").await.unwrap(),
        None,
        "the lease was kept"
    );

    let mut next = runner(&w, mind(""), "host-b");
    next.register().await.unwrap();
    assert!(matches!(next.step().await.unwrap(), Step::Idle { .. }));
    assert_eq!(asked(&w), 1, "the next holder asked the provider again");
}

/// Queues a brief for the Self from the operator.
async fn enqueue(w: &World, text: &str) {
    let brief = NewBrief {
        text: text.into(),
        origin: BriefOrigin::Operator,
        created_at_ms: w.sim.now_ms(),
    };
    w.host.store.enqueue_brief("vala", &brief).await.unwrap();
}

/// A Self flush at a task boundary (a brief starts and the decider refreshes) whose commit the
/// store refuses: the flush is committed first at the next step, and the brief it was taken
/// for — claimed, never run — is failed as stopped by the store, with the store's error (it
/// said its host had stopped: a crash, a kill or a lost lease, which never happened). The next
/// brief starts its segment from that flush's memory.
#[tokio::test]
async fn a_boundary_flush_whose_commit_fails_strands_its_brief_as_the_stores_failure() {
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind("policy = 'rebuild'\nmin_segment = 1"), "host-a");
    r.register().await.unwrap();
    enqueue(&w, "Summarise the ledger of the last week.").await;
    assert_eq!(r.step().await.unwrap(), Step::SelfTurn { brief: 1 });
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    enqueue(&w, "Now the week before.").await;
    faults.fail_commits(1);
    refused_steps(&mut r, 1).await;
    let self_flushes = |rows: &[muninn_core::ledger::LedgerRow]| {
        rows.iter()
            .filter(|r| r.role == "self" && r.decision.starts_with("flush"))
            .count()
    };
    assert_eq!(self_flushes(&ledger(&w).await), 0);

    r.step().await.unwrap();
    assert_eq!(
        self_flushes(&ledger(&w).await),
        1,
        "the flush was not committed"
    );
    let store = &w.host.store;
    let failed = store
        .briefs("vala", Some(BriefStatus::Failed), 10)
        .await
        .unwrap();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    let result = failed[0].result.clone().unwrap_or_default();
    assert!(
        result.starts_with("the store failed (store: database unavailable: injected"),
        "{result}"
    );
    assert!(!result.contains("crash"), "{result}");

    // The next brief opens its segment from the flush committed late.
    enqueue(&w, "And the one before that.").await;
    for _ in 0..10 {
        if r.step().await.unwrap() == (Step::SelfTurn { brief: 3 }) {
            break;
        }
    }
    let segments = store.segments("vala", Role::SelfRole).await.unwrap();
    let last = segments.last().unwrap();
    assert_eq!(last.reason, "flushed", "{segments:#?}");
    let flush = store
        .transcript_tail("vala", Role::SelfRole, 100)
        .await
        .unwrap()
        .into_iter()
        .rfind(|i| i.kind == TranscriptKind::MemoryFlush)
        .unwrap();
    assert_eq!(last.memory.as_deref(), flush.body["memory"].as_str());
    replays_exactly(&w, &mut r).await;
}

/// Whether a first Persona turn starts under a spend cap of `cap`, and what its row cost.
async fn starts_under(cap: i64) -> Option<i64> {
    let w = world_on("", |store| store).await;
    let mut r = runner(&w, mind(&format!("spend_cap_micro_usd = {cap}")), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    match r.step().await.unwrap() {
        Step::OverBudget => None,
        _ => Some(ledger(&w).await[0].cost.0),
    }
}

/// Sets the operator's spend cap.
async fn set_cap(w: &World, cap: i64) {
    let caps = Caps {
        spend_cap: Some(MicroUsd(cap)),
        ..Caps::default()
    };
    let store = &w.host.store;
    store
        .put_caps("vala", &caps, None, w.sim.now_ms())
        .await
        .unwrap();
}

/// An answer abandoned uncommitted (the store refused its commit with an error no retry
/// changes): the provider billed it, so the spend cap counts it though the ledger has no row
/// for it (the ledger stays what replay reads). The batch, unacknowledged, is asked again only
/// once the cap has room for both, not at once as if nothing had been spent.
#[tokio::test]
async fn an_answer_abandoned_uncommitted_counts_against_the_spend_cap() {
    // The least cap a first turn starts under (its worst case), and what the turn costs.
    let (mut refused, mut worst) = (0i64, 100_000_000i64);
    let mut cost = starts_under(worst).await.expect("a turn under $100");
    while worst - refused > 1 {
        let mid = (refused + worst) / 2;
        match starts_under(mid).await {
            Some(c) => (worst, cost) = (mid, c),
            None => refused = mid,
        }
    }
    assert!(cost > 0);

    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    set_cap(&w, worst + cost / 2).await;
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    faults.fail_commits_for_good(1);
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Invalid(_))),
        "{e}"
    );
    assert_eq!(asked(&w), 1);
    assert!(ledger(&w).await.is_empty());

    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    assert_eq!(asked(&w), 1, "the cap did not count the abandoned answer");

    // Room for both: the batch is answered again, and that answer is the ledger's row.
    set_cap(&w, 2 * worst + cost).await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert_eq!(asked(&w), 2);
    assert_eq!(ledger(&w).await.len(), 1);
}

/// A brief left running by a host that crashed, found by a runner whose first step fails on
/// the store before it gets to the brief: the report names what stopped the run — its host —
/// not the store failure that only delayed the recovery.
#[tokio::test]
async fn a_brief_its_host_abandoned_is_reported_as_such_after_a_store_failure_delays_it() {
    let (w, faults) = faulty_world("").await;
    let mut crashed = runner(&w, mind(""), "host-a");
    crashed.register().await.unwrap();
    crashed.step().await.unwrap();
    enqueue(&w, "Summarise the ledger of the last week.").await;
    let store = w.host.store.clone();
    let lease = store.lease("vala").await.unwrap().expect("host-a leads");
    let claimed = store
        .claim_brief("vala", lease.token, w.sim.now_ms())
        .await
        .unwrap()
        .expect("the brief is queued");
    // The crash: no release, no finish.
    drop(crashed);

    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    faults.fail_ledger_reads(1);
    let e = r.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Store(_)), "{e}");
    r.step().await.unwrap();
    let brief = stored_brief(&w, claimed.seq).await;
    assert_eq!(brief.status, BriefStatus::Failed, "{brief:?}");
    let result = brief.result.unwrap_or_default();
    assert!(result.starts_with("its host stopped"), "{result}");
}

/// An answer held uncommitted when another host took the Mind over: no token this runner can
/// get commits it any more, and a clean shutdown before it holds the Mind again gives it up
/// as every abandoned answer is given up, at error in the log with its turn key and cost.
#[tokio::test]
async fn an_answer_held_when_the_lease_was_lost_is_abandoned_loudly_at_shutdown() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();

    let (w, faults) = faulty_world("").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    faults.fail_commits(1);
    refused_steps(&mut a, 1).await;
    // host-a's lease runs out; host-b takes the Mind and answers the batch.
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1);
    let mut b = runner(&w, mind(""), "host-b");
    assert!(matches!(b.step().await.unwrap(), Step::PersonaTurn { .. }));
    // host-a's renewal is fenced: it forgets the lease, the answer still held.
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
    a.release().await.unwrap();
    drop(a);
    let abandoned = crate::cut_rows::errors_starting(&logs, "an answer was abandoned uncommitted");
    assert_eq!(
        abandoned.len(),
        1,
        "the held answer was dropped without a word: {:?}",
        logs.events()
    );
    assert_eq!(abandoned[0]["fields"]["turn_key"], "persona-vala-1-1-0");
}

/// An answer whose commit landed but whose acknowledgement was lost (the store gone a moment),
/// when the runner's lease runs out before it tries the commit again and another host holds
/// the Mind a while: under its next lease the runner cannot commit it and gives it up — but it
/// is in the ledger, so it is neither said to be lost ("abandoned uncommitted", at error) nor
/// counted a second time by the spend cap as abandoned money. (The same as a landed cut row:
/// `cut_rows::a_landed_cut_row_waiting_at_a_new_lease_is_not_given_up_as_lost`.)
#[tokio::test]
async fn a_landed_answer_waiting_at_a_new_lease_is_not_abandoned_as_lost() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();
    let (w, faults) = faulty_world("").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    faults.lose_commit_answers(1);
    assert!(a.step().await.is_err(), "the commit's answer was lost");
    assert_eq!(ledger(&w).await.len(), 1, "the answer landed");
    // host-a's lease runs out; host-b takes the Mind a while and lets it go.
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1);
    let mut b = runner(&w, mind(""), "host-b");
    assert_ne!(b.step().await.unwrap(), Step::NotLeader);
    b.release().await.unwrap();
    set_cap(&w, 1).await;
    post(&w, "e2", "#swarm", "ari", "still there?").await;
    a.woken();
    assert_eq!(a.step().await.unwrap(), Step::OverBudget);
    let lost = crate::cut_rows::errors_starting(&logs, "an answer was abandoned uncommitted");
    assert!(lost.is_empty(), "said lost, though in the ledger: {lost:?}");
    assert_eq!(
        crate::cut_rows::cap_counts(&logs),
        [(spent(&w).await, 0, 0)],
        "(spent, unledgered, abandoned)"
    );
    assert_eq!(ledger(&w).await.len(), 1, "nothing written again");
}

/// The same landed answer when another host takes the Mind over before the runner tries the
/// commit again, while the runner's own copy of its lease still looks fresh: the retry meets
/// the fence. The ledger holds the answer, so it is neither said to be lost ("abandoned
/// uncommitted", at error) nor counted a second time by the spend cap as abandoned money
/// when the runner holds the Mind again.
#[tokio::test]
async fn a_landed_answer_whose_retry_meets_the_fence_is_not_abandoned_as_lost() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();
    let (w, faults) = faulty_world("").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    faults.lose_commit_answers(1);
    assert!(a.step().await.is_err(), "the commit's answer was lost");
    assert_eq!(ledger(&w).await.len(), 1, "the answer landed");
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().expect("host-a leads");
    let now = w.sim.now_ms();
    let taken = (store.take_over_lease("vala", "host-b", held.token, 30_000, now))
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    let fenced = a.step().await.unwrap_err();
    assert!(fenced.to_string().contains("stale"), "{fenced}");
    store.release_lease("vala", taken.token).await.unwrap();
    set_cap(&w, 1).await;
    post(&w, "e2", "#swarm", "ari", "still there?").await;
    a.woken();
    assert_eq!(a.step().await.unwrap(), Step::OverBudget);
    let lost = crate::cut_rows::errors_starting(&logs, "an answer was abandoned uncommitted");
    assert!(lost.is_empty(), "said lost, though in the ledger: {lost:?}");
    assert_eq!(
        crate::cut_rows::cap_counts(&logs),
        [(spent(&w).await, 0, 0)],
        "(spent, unledgered, abandoned)"
    );
    assert_eq!(ledger(&w).await.len(), 1, "nothing written again");
}
