//! The rows of attempts the provider billed but cut, when the store refuses their commit
//! (`runtime/failed.rs`): each is committed on its own as it is taken; refused, it waits under
//! its own key and is committed once, before the role's next record; and a clean shutdown that
//! cannot commit it gives it up at error in the log with its cost. (That a `kill -9` right
//! after the take keeps the row is `muninn`'s `crash_points::a_cut_attempt_killed_before_its_
//! retry_is_in_the_ledger_once`, on a real `muninn serve`.)

use crate::runtime::{World, faulty_world, ledger, mind, post, runner, set_cap, spent};
use crate::telemetry::{Buffer, capture_logs};
use muninn_core::closed_loop::verify;
use muninn_core::price::PriceTable;
use muninn_host::runtime::{MindRunner, Step};
use muninn_sim::inprocess::SimBackend;
use muninn_sim::sim::{Fault, FaultKind};
use muninn_store::{BriefOrigin, NewBrief};
use std::sync::Arc;

/// Every commit refused from here on (more than any of these tests makes).
const REFUSE_ALL: u32 = 1_000;

/// A stream the simulator cuts after content: billed, not answered.
fn cut_next(w: &World) {
    w.sim.push_faults([Fault {
        kind: FaultKind::Truncate { after_deltas: 1 },
        times: 1,
    }]);
}

/// What the provider billed, request by request, as the simulator logged it.
fn billed_each(w: &World) -> Vec<i64> {
    let prices = PriceTable::embedded();
    let price = prices.model(&mind("").model).unwrap();
    w.sim
        .requests()
        .iter()
        .filter_map(|r| r.usage)
        .map(|u| price.cost(&u).0)
        .collect()
}

/// A cut attempt whose commit on its own is refused, and refused again as its step ends: the
/// row waits under its key, counted by the spend cap, and the retry's commit writes it first —
/// once, before the answer's row — so the ledger is the simulator's bill and replays exactly.
#[tokio::test]
async fn a_cut_row_the_store_refused_is_committed_once_before_the_retrys_answer() {
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind("turns_per_wake = 5"), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "and what of the ledger?").await;
    cut_next(&w);
    faults.fail_commits(2);
    r.woken();
    assert!(r.step().await.is_err());
    assert_eq!(faults.refused(), 2, "tried at once, then as the step ended");
    assert_eq!(ledger(&w).await.len(), 1);
    w.sim.advance_clock(1_000);
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let rows = ledger(&w).await;
    let decisions: Vec<&str> = rows.iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert_eq!(decisions[1], "attempt_failed");
    assert_eq!(rows[1].cost.0, billed_each(&w)[1]);
    assert_eq!(spent(&w).await, billed_each(&w).iter().sum::<i64>());
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    crate::closed_loop::assert_holds(&report, &rows);
}

/// A clean shutdown while both roles' cut rows wait and the store refuses every commit: each
/// role's rows are tried and, refused, given up at error in the log with their cost — the
/// Self's too, which the shutdown used to drop without a word when the Persona's commit failed
/// first.
#[tokio::test]
async fn a_clean_shutdown_gives_up_every_waiting_cut_row_loudly_with_its_cost() {
    let (logs, _anchor, _guard) = capture_logs();
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let brief = NewBrief {
        text: "Summarise the ledger of the last week.".into(),
        origin: BriefOrigin::Operator,
        created_at_ms: w.sim.now_ms(),
    };
    w.host.store.enqueue_brief("vala", &brief).await.unwrap();
    faults.fail_commits(REFUSE_ALL);
    cut_next(&w);
    assert!(r.step().await.is_err(), "the Self's run was cut");
    w.sim.advance_clock(1_000);
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    cut_next(&w);
    r.woken();
    assert!(r.step().await.is_err(), "the Persona's turn was cut");
    let billed = billed_each(&w);
    assert_eq!(billed.len(), 2, "one cut attempt per role");
    r.release().await.unwrap();
    assert!(ledger(&w).await.is_empty());
    let given_up: Vec<(String, i64)> =
        errors_starting(&logs, "a failed attempt's row was abandoned")
            .into_iter()
            .map(|e| {
                let role = e["fields"]["role"].as_str().unwrap_or_default().to_string();
                (role, e["fields"]["cost_micro_usd"].as_i64().unwrap_or(0))
            })
            .collect();
    assert_eq!(
        given_up,
        [
            ("persona".to_string(), billed[1]),
            ("self".to_string(), billed[0])
        ],
        "{:?}",
        logs.events()
    );
}

/// A runner `host-a` that answered one turn, then had its next turn's stream cut: the cut
/// row's own commit landed but its answer was lost, and its retry as the step ended was
/// refused (the store gone a moment) — the row is in the ledger and still waits on the session.
async fn a_cut_row_landed_unanswered() -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
) {
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "and what of the ledger?").await;
    cut_next(&w);
    faults.lose_commit_answers(1);
    faults.fail_commits_after(1, 1);
    r.woken();
    assert!(r.step().await.is_err(), "the Persona's turn was cut");
    (w, faults, r)
}

/// A cut attempt whose commit on its own landed but whose answer was lost, and whose retry as
/// the step ended was refused (the store gone a moment): the row is in the ledger, and the
/// next step's spend cap counts it there once — not a second time as a row still waiting,
/// which kept a Mind near its cap refused (`CAPPED`) until the row left the window, the
/// waiting copy never tried again while no record was committed.
#[tokio::test]
async fn a_cut_row_whose_commit_answer_was_lost_is_counted_once_by_the_next_spend_cap() {
    let (logs, _anchor, _guard) = capture_logs();
    let (w, faults, mut r) = a_cut_row_landed_unanswered().await;
    assert_eq!(
        faults.refused(),
        1,
        "landed unanswered, then refused as the step ended"
    );
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].decision, "attempt_failed");
    // A cap every request crosses: the step says what it counted.
    set_cap(&w, Some(1)).await;
    r.woken();
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    let counted = cap_counts(&logs);
    assert_eq!(
        counted,
        [(spent(&w).await, 0, 0)],
        "(spent, unledgered, abandoned)"
    );
    assert_eq!(ledger(&w).await.len(), 2, "the row is in the ledger once");
}

/// What each spend-cap refusal in `logs` counted: (spent, unledgered, abandoned).
pub(crate) fn cap_counts(logs: &Buffer) -> Vec<(i64, i64, i64)> {
    logs.events()
        .into_iter()
        .filter(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("spend cap: the next request could cross it"))
        })
        .map(|e| {
            let field = |name: &str| e["fields"][name].as_i64().unwrap_or(-1);
            (field("spent"), field("unledgered"), field("abandoned"))
        })
        .collect()
}

/// The same row — landed unanswered, its retry refused — when the runner's lease runs out
/// before it is tried again and another host holds the Mind a while: under its next lease the
/// runner cannot commit it, and gives it up; but it is in the ledger, so it is neither said to
/// be lost ("abandoned uncommitted", at error) nor counted a second time by the spend cap as
/// abandoned money.
#[tokio::test]
async fn a_landed_cut_row_waiting_at_a_new_lease_is_not_given_up_as_lost() {
    let (logs, _anchor, _guard) = capture_logs();
    let (w, _, mut r) = a_cut_row_landed_unanswered().await;
    assert_eq!(ledger(&w).await.len(), 2, "the cut row landed");
    // host-a's lease runs out; host-b takes the Mind, answers the batch and lets it go.
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1);
    let mut b = runner(&w, mind(""), "host-b");
    assert!(matches!(b.step().await.unwrap(), Step::PersonaTurn { .. }));
    b.release().await.unwrap();
    let rows = ledger(&w).await.len();
    set_cap(&w, Some(1)).await;
    post(&w, "e3", "#swarm", "ari", "still there?").await;
    r.woken();
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    let lost: Vec<_> = errors_starting(&logs, "a failed attempt's row was abandoned");
    assert!(lost.is_empty(), "said lost, though in the ledger: {lost:?}");
    assert_eq!(
        cap_counts(&logs),
        [(spent(&w).await, 0, 0)],
        "(spent, unledgered, abandoned)"
    );
    assert_eq!(ledger(&w).await.len(), rows, "nothing written again");
}

/// A cut attempt's row the store refuses for good (an error no retry changes) is given up at
/// error with its cost, and the role's answers after it are committed: before, it stayed first
/// in line, and every later record of the role — each an answer the provider billed — was
/// abandoned behind it.
#[tokio::test]
async fn a_cut_row_the_store_refuses_for_good_does_not_block_the_roles_next_answers() {
    let (w, faults) = faulty_world("").await;
    let mut r = runner(&w, mind("turns_per_wake = 5"), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    cut_next(&w);
    faults.refuse_cut_rows_for_good(REFUSE_ALL);
    assert!(r.step().await.is_err(), "the Persona's turn was cut");
    w.sim.advance_clock(1_000);
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "and what of the ledger?").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let decisions: Vec<String> = ledger(&w).await.into_iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions.len(),
        2,
        "the two answers, the cut row given up: {decisions:?}"
    );
    assert!(
        !decisions.iter().any(|d| d == "attempt_failed"),
        "{decisions:?}"
    );
}

/// A cut row waiting (the store refused it) when another host takes the Mind over while this
/// runner's copy of its lease still looks fresh, and answers the batch: the runner's next step
/// has nothing to answer, and its first write, the row's retry, meets the fence. The runner
/// lets the lease go at once, as after any fenced write
/// (`cluster::a_runner_fenced_mid_step_lets_its_lease_go_at_once`), rather than go on as the
/// Mind's leader under the stale token until its copy of the lease runs out.
#[tokio::test]
async fn a_waiting_cut_row_that_meets_the_fence_lets_the_lease_go_at_once() {
    let (w, faults) = faulty_world("").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    assert!(matches!(a.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "and what of the ledger?").await;
    cut_next(&w);
    faults.fail_commits(2);
    a.woken();
    assert!(a.step().await.is_err(), "the Persona's turn was cut");
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().expect("host-a leads");
    let now = w.sim.now_ms();
    (store.take_over_lease("vala", "host-b", held.token, 30_000, now))
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    let mut b = runner(&w, mind(""), "host-b");
    assert!(matches!(b.step().await.unwrap(), Step::PersonaTurn { .. }));
    let sent = w.sim.requests().len();
    a.woken();
    let step = a.step().await;
    assert_eq!(
        w.sim.requests().len(),
        sent,
        "a request under a stale lease"
    );
    let fenced = step.expect_err("a step under a stale lease");
    assert!(fenced.to_string().contains("stale"), "{fenced}");
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
}

/// A cut attempt whose row is committed at once, in the middle of a step, under a lease
/// another host took over while this runner's copy of it still looked fresh: the commit meets
/// the fence, and the runner lets the lease go at once, as at a step's start (above), rather
/// than log it and go on as the Mind's leader under the stale token — failing the step as the
/// backend's error and retrying it on the backoff until its copy of the lease runs out.
#[tokio::test]
async fn a_cut_row_that_meets_the_fence_mid_step_lets_the_lease_go_at_once() {
    let (w, _faults) = faulty_world("").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    assert!(matches!(a.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "and what of the ledger?").await;
    // The first try is cut and its row committed: the batch's delivery is recorded, so its
    // retry writes nothing before it asks the provider.
    cut_next(&w);
    a.woken();
    assert!(a.step().await.is_err(), "the Persona's turn was cut");
    assert_eq!(ledger(&w).await.len(), 2, "the answer and the cut row");
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().expect("host-a leads");
    let now = w.sim.now_ms();
    (store.take_over_lease("vala", "host-b", held.token, 30_000, now))
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    w.sim.advance_clock(1_000);
    cut_next(&w);
    let step = a.step().await;
    let fenced = step.expect_err("the retry was cut");
    assert!(fenced.to_string().contains("stale"), "{fenced}");
    let sent = w.sim.requests().len();
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
    assert_eq!(
        w.sim.requests().len(),
        sent,
        "a request under a stale lease"
    );
}

/// The events `logs` holds at error whose message starts with `prefix`.
pub(crate) fn errors_starting(logs: &Buffer, prefix: &str) -> Vec<serde_json::Value> {
    logs.events()
        .into_iter()
        .filter(|e| {
            e["level"] == "ERROR"
                && e["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(prefix))
        })
        .collect()
}
