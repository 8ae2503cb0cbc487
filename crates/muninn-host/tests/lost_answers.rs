//! A Persona answer lost with its host — the process killed after the provider answered and
//! before the turn's commit — is ledgered once by the next holder, at the cache model's estimate
//! recorded with the turn's delivery before it was sent (`runtime/lost.rs`). The spend cap and
//! `status` count it (they read the ledger), and a replay of the ledger takes every decision the
//! hosts took, the row priced as a request that read and wrote the cache and grew no segment
//! (at the cache model's own price for it: an estimate is not a bill to check).
//! The crash harness kills a real `muninn serve` in that window (`muninn`'s
//! `crash_points::an_answer_lost_before_its_commit_is_ledgered_once_through_two_restarts`).

use crate::runtime::{T0, World, faulty_world, ledger, mind, post, runner, spent};
use muninn_core::closed_loop::verify;
use muninn_core::ledger::{ATTEMPT_LOST, RowKind};
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::runtime::{MindRunner, RuntimeError, Step};
use muninn_sim::SimClock;
use muninn_sim::inprocess::SimBackend;
use muninn_sim::sim::{SimConfig, Simulator};
use muninn_store::StoreError;
use muninn_testkit::FaultyStore;
use muninn_testkit::peers::FreshDatabase;
use std::sync::Arc;

/// The Messages requests the simulator answered.
fn asked(w: &World) -> usize {
    w.sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200)
        .count()
}

/// The usage the simulator billed for the Messages request it answered `n`th (from 0).
fn billed(w: &World, n: usize) -> muninn_core::trace::Usage {
    w.sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200)
        .nth(n)
        .and_then(|r| r.usage)
        .expect("the request answered")
}

/// `runner`'s host dies: nothing released, nothing retried; its lease runs out.
fn killed(w: &World, runner: MindRunner<SimBackend>) {
    drop(runner);
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1);
}

/// The request lost is its segment's first (a new Mind's first turn): the row carries the
/// segment it opened, as a cut attempt at a segment's first request does.
#[tokio::test]
async fn an_answer_lost_with_its_host_is_ledgered_once_at_its_estimate_by_the_next_holder() {
    lost_then_replayed(0).await;
}

/// The request lost appended to a warm segment (the Mind's second turn): the row reads the
/// prefix and writes the batch, and grows no segment.
#[tokio::test]
async fn an_appended_answer_lost_with_its_host_is_ledgered_once_at_its_estimate() {
    lost_then_replayed(1).await;
}

/// host-a answers `before` turns, then one whose answer never commits (its commit refused,
/// then the host killed); host-b ledgers the request at its estimate, once (its first commit's
/// answer lost, the row found at the retry), and answers the batch again; host-c, after
/// host-b is killed too, writes nothing more. The row says it is an estimate, holds no prompt
/// text, and the whole ledger replays.
async fn lost_then_replayed(before: usize) {
    let (w, faults) = faulty_world("").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    for i in 0..before {
        post(&w, &format!("e{i}"), "#swarm", "ari", "good morning vala").await;
        assert!(matches!(a.step().await.unwrap(), Step::PersonaTurn { .. }));
        w.sim.advance_clock(10_000);
    }
    post(&w, "lost", "#swarm", "ari", "hello vala, a secret: plover").await;
    faults.fail_commits(1);
    let e = a.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    assert_eq!(asked(&w), before + 1);
    killed(&w, a);
    assert_eq!(ledger(&w).await.len(), before);

    // host-b's commit of the row lands, its answer lost: the step fails (the store may pass),
    // and the next one finds the row rather than write it again.
    let mut b = runner(&w, mind(""), "host-b");
    faults.lose_commit_answers(1);
    let e = b.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Store(_)), "{e}");
    assert_eq!(
        asked(&w),
        before + 1,
        "nothing asked before the row is known written"
    );
    assert!(matches!(b.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert_eq!(asked(&w), before + 2, "the batch is asked again");
    let rows = ledger(&w).await;
    let lost: Vec<_> = rows.iter().filter(|r| r.decision == ATTEMPT_LOST).collect();
    assert_eq!(lost.len(), 1, "rows of the lost answer: {rows:#?}");
    let row = lost[0];
    assert_eq!(
        rows.len(),
        before + 2,
        "the lost request's row, then the answer's: {rows:#?}"
    );
    assert_eq!(
        rows[before].decision, ATTEMPT_LOST,
        "written before the answer's"
    );
    assert_eq!(
        row.decided.as_ref().and_then(|d| d.segment).is_some(),
        before == 0,
        "a segment's first request carries its segment: {row:#?}"
    );
    // The lost request grew no conversation: the batch is asked again as the first request of
    // a fresh segment, not as the lost one's next turn.
    let redo = &rows[before + 1];
    assert_eq!(
        (redo.segment, redo.turn),
        (row.segment + 1, 0),
        "the batch asked again: {redo:#?}"
    );
    let decided = row.decided.as_ref().expect("a decision record");
    assert_eq!(
        (decided.kind, decided.attempted),
        (RowKind::FailedAttempt, Some(RowKind::Request))
    );
    let price = PriceTable::embedded();
    let model = price.model(&row.model).expect("priced");
    assert!(row.cost.0 > 0 && row.usage.output == 0, "{row:#?}");
    assert_eq!(row.cost, model.cost(&row.usage));
    // The estimate is of the request the provider billed: a segment's first, its prompt as
    // the simulator counted it, the tools the backend sent (the reply schema) included — not
    // exactly, the batch counted at its upper bound. An appended request reads the prefix the
    // provider holds; what it writes is the batch as the decider counts it, which leaves out
    // the previous reply the request also carries (the accounting tracks no output).
    let billed = billed(&w, before);
    let (estimated, measured) = (row.usage.prompt() as f64, billed.prompt() as f64);
    assert!(
        before > 0 || (estimated - measured).abs() <= 0.02 * measured,
        "estimated {estimated} prompt tokens ({:?}), the provider billed {measured}: {billed:?}",
        row.usage
    );
    assert_eq!(row.usage.cache_read, billed.cache_read, "{billed:?}");
    assert!(row.events[0]["lost_with_host"].is_i64(), "{:?}", row.events);
    let text = serde_json::to_string(row).unwrap();
    assert!(!text.contains("plover"), "prompt text in the row: {text}");
    assert_eq!(spent(&w).await, rows.iter().map(|r| r.cost.0).sum::<i64>());

    killed(&w, b);
    let mut c = runner(&w, mind(""), "host-c");
    for _ in 0..50 {
        match c.step().await.unwrap() {
            Step::Idle { until_ms: Some(t) } => {
                w.sim.advance_clock((t - w.sim.now_ms()).max(1));
            }
            Step::Idle { until_ms: None } => break,
            _ => {}
        }
    }
    let rows = ledger(&w).await;
    let lost = rows.iter().filter(|r| r.decision == ATTEMPT_LOST).count();
    assert_eq!(lost, 1, "after a second restart: {rows:#?}");
    assert_eq!(asked(&w), rows.len() - lost + 1);
    // Every decision replays. The cost only nearly: the lost row is an estimate made before
    // the request's shape was measured — a new segment's head and system as the layers and the
    // reply schema's tool count them, exact, but the batch at its upper bound and the system
    // after the first layer at the tail's TTL (the provider writes it at the head's); an
    // appended batch at the batch's upper bound — and the replay shapes it, and the cache the
    // next row reads, on that estimate (the batch asked again reads the lost request's whole
    // prompt from the provider's cache, the replay only its system). 0.54% apart for a
    // segment's first request; 1.38% before the tools were counted in its head.
    let report = verify(&rows, &price, &Default::default());
    assert!(report.disagreements.is_empty(), "{report:#?}");
    assert!(report.cost_difference().abs() < 0.01, "{report:#?}");
    let apart: Vec<usize> = report.largest.iter().map(|r| r.row).collect();
    assert!(apart.iter().all(|row| *row <= before + 1), "{report:#?}");
}

/// On PostgreSQL, hosts take the Mind over in turn and race for it while the lost request's row
/// is written: host-b's commit of the row lands, its answer lost, and host-b stalls past its
/// lease; host-b and host-c then race for the Mind, and whichever wins finds the row rather
/// than write it again and asks the batch once; the other, taking the Mind over after the
/// winner dies, writes nothing more. Once is the fence's doing (the row is written only under
/// the lease held, after the ledger was read under it), on PostgreSQL as on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_racing_for_the_mind_on_postgres_ledger_a_lost_answer_once() {
    let Some(db) = FreshDatabase::for_test("muninn_host_lostrace", "lost answers on postgres")
    else {
        return;
    };
    let store = muninn_store::open(&db.url()).await.unwrap();
    let faults = FaultyStore::new(store);
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..SimConfig::default()
    }));
    let config = toml::from_str("").unwrap();
    let w = World {
        host: Host::new(faults.clone(), config, Arc::new(SimClock(sim.clone()))),
        sim,
        _dir: tempfile::tempdir().unwrap(),
    };
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "lost", "#swarm", "ari", "hello vala").await;
    faults.fail_commits(1);
    let e = a.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    killed(&w, a);

    let mut b = runner(&w, mind(""), "host-b");
    faults.lose_commit_answers(1);
    let e = b.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Store(_)), "{e}");
    assert_eq!(
        asked(&w),
        1,
        "nothing asked before the row is known written"
    );
    // host-b stalls past its lease; it and host-c race for the Mind.
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1);
    let mut c = runner(&w, mind(""), "host-c");
    let (by_b, by_c) = tokio::join!(b.step(), c.step());
    // The loser finds the lease another's, or presents its stale token and meets the fence.
    let answered = |step: &Result<Step, RuntimeError>| match step {
        Ok(Step::PersonaTurn { .. }) => true,
        Ok(Step::NotLeader) | Err(RuntimeError::Store(StoreError::Fenced { .. })) => false,
        other => panic!("neither a turn nor a lost race: {other:?}"),
    };
    assert!(
        answered(&by_b) != answered(&by_c),
        "one winner answers: {by_b:?} {by_c:?}"
    );
    let (winner, mut loser) = if answered(&by_b) { (b, c) } else { (c, b) };
    killed(&w, winner);
    for _ in 0..50 {
        match loser.step().await.unwrap() {
            Step::Idle { until_ms: Some(t) } => {
                w.sim.advance_clock((t - w.sim.now_ms()).max(1));
            }
            Step::Idle { until_ms: None } => break,
            _ => {}
        }
    }
    let rows = ledger(&w).await;
    let lost = rows.iter().filter(|r| r.decision == ATTEMPT_LOST).count();
    assert_eq!(lost, 1, "rows of the lost answer: {rows:#?}");
    assert_eq!(asked(&w), rows.len() - lost + 1, "{rows:#?}");
    assert_eq!(asked(&w), 2, "the batch is asked again once");
}
