//! A failed turn's backoff across an idle decision point. While the runner waits to try a
//! refused turn again it takes no idle decision (for either role): the provider is refusing or
//! failing, a ping would meet the same refusal, and the pending turn is itself the next use of
//! the cache. The ledger must say so, or a replay would ask those points and ping where the host
//! did not.

use super::{Act, Harness, assert_holds};
use crate::runtime::{T0, ledger};
use muninn_core::closed_loop::verify;
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;

/// The tail's TTL and how long before its end the decider is asked.
const TTL_MS: i64 = 300_000;
const DECIDE_BEFORE_MS: i64 = 30_000;

/// Runs `acts` on a fresh harness up to `end` (ms after `T0`); the ledger, and how many
/// requests the provider refused.
async fn run(acts: &[Act], end: i64) -> (Vec<LedgerRow>, usize) {
    let mut h = Harness::new("").await;
    for act in acts {
        h.apply(act).await;
    }
    h.run_until(T0 + end).await;
    let refused =
        h.w.sim
            .requests()
            .iter()
            .filter(|r| r.status == 429)
            .count();
    (ledger(&h.w).await, refused)
}

/// The last row of `role` before `before` (ms after `T0`).
fn last_before<'a>(rows: &'a [LedgerRow], role: &str, before: i64) -> &'a LedgerRow {
    rows.iter()
        .rfind(|r| r.role == role && r.at_ms < T0 + before)
        .expect("a row")
}

/// Whether `role` pinged its tail in `(from, to)` (Unix ms).
fn pinged(rows: &[LedgerRow], role: &str, from: i64, to: i64) -> bool {
    rows.iter().any(|r| {
        r.role == role && r.decision.starts_with("ping:") && r.at_ms > from && r.at_ms < to
    })
}

/// Runs `warm_up` to `end` twice. First followed by a quiet wait, the control: `role` must
/// ping its tail at the decision point after its last row before `at` (ms into the workload),
/// or the backoff would cross nothing. Then followed by a delivery refused with a
/// `retry-after` of `retry_after_ms`: refused once. Returns that last row's time and the
/// refused run's rows.
async fn refused_after(
    warm_up: Vec<Act>,
    retry_after_ms: i64,
    role: &str,
    at: i64,
    end: i64,
) -> (i64, Vec<LedgerRow>) {
    let mut control = warm_up.clone();
    control.push(Act::Wait { ms: 400_000 });
    let (rows, none) = run(&control, end).await;
    assert_eq!(none, 0);
    let last = last_before(&rows, role, at).at_ms;
    let point = last + TTL_MS - DECIDE_BEFORE_MS;
    assert!(
        pinged(&rows, role, point - 1, last + TTL_MS),
        "the workload must make the host ping the {role} where the backoff will be"
    );
    let mut refused = warm_up;
    refused.push(Act::Refused {
        room: 0,
        words: 40,
        retry_after_ms,
    });
    let (rows, refusals) = run(&refused, end).await;
    assert_eq!(refusals, 1);
    (last, rows)
}

/// The Persona's delivery is refused with a `retry-after` longer than what is left of its
/// tail: the backoff crosses the tail's decision point and its expiry. Without the refusal (the
/// same workload, the delivery not sent) the host pings there, so the replay would too; with it
/// the host did nothing until the retry, and the ledger replays exactly, decisions and cost.
#[tokio::test]
async fn a_persona_backoff_across_its_tail_decision_point_replays_exactly() {
    let mut warm_up = Vec::new();
    for round in 0..8u16 {
        warm_up.push(Act::Deliver {
            room: (round % 2) as u8,
            words: 30 + round * 3,
        });
        warm_up.push(Act::Wait { ms: 255_000 });
    }
    let end = 8 * 255_000 + 3 * 3_600_000;
    let (last, rows) = refused_after(warm_up, 120_000, "persona", 8 * 255_000, end).await;
    assert!(!pinged(&rows, "persona", last, last + 255_000 + 120_000));
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

/// The Persona's delivery is refused while the Self's tail is warm: the backoff crosses the
/// Self's decision point and expiry, which the runner, retrying the Persona, does not ask. The
/// Self's later rows replay exactly.
#[tokio::test]
async fn a_persona_backoff_across_the_selfs_tail_decision_point_replays_exactly() {
    let mut warm_up = Vec::new();
    for round in 0..8u16 {
        warm_up.push(Act::Brief {
            words: 200 + round * 20,
        });
        warm_up.push(Act::Wait { ms: 255_000 });
    }
    warm_up.pop();
    warm_up.push(Act::Wait { ms: 200_000 });
    let at = 7 * 255_000 + 200_000;
    let end = at + 3 * 3_600_000;
    let (last, rows) = refused_after(warm_up, 300_000, "self", at, end).await;
    assert!(!pinged(&rows, "self", last, T0 + at + 300_000));
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}
