//! An idle decision point the runner comes to late: after its time, before the entry's expiry
//! (it was busy with the other role, the machine slow, its timer late — `run_mind` always wakes
//! a little after the time it names). The host decides it as of the point's own time, as a
//! replay of its ledger does, and sends what it decided when it gets there: the row is at the
//! time it was sent, and priced by the cache as it was then. Deciding with the clock's now
//! instead would split host and replay under `predictive`, whose answer depends on how long the
//! gap has lasted: a runner 29 s late would let the tail go where the replay, deciding at the
//! point, pings.

use super::{Act, assert_holds, closed_loop};
use crate::runtime::T0;
use muninn_core::decide::Event;
use muninn_core::ledger::LedgerRow;

/// The tail's TTL and how long before its end the decider is asked.
const TTL_MS: i64 = 300_000;
const DECIDE_BEFORE_MS: i64 = 30_000;

/// Gaps that make `predictive` ping the Persona's tail only just: five short gaps that end soon
/// after a tail decision point and one three hours long, then a delivery whose tail decision
/// point the runner reaches `late_ms` late.
fn workload(late_ms: i64) -> Vec<Act> {
    let mut acts = Vec::new();
    let gaps = [280_000; 5].into_iter().chain([3 * 3_600_000]);
    for (round, gap) in gaps.enumerate() {
        acts.push(Act::Deliver {
            room: (round % 2) as u8,
            words: 30 + round as u16 * 3,
        });
        acts.push(Act::Wait { ms: gap });
    }
    acts.push(Act::Deliver { room: 0, words: 40 });
    acts.push(Act::Late { ms: late_ms });
    acts.push(Act::Wait { ms: 400_000 });
    acts
}

/// The last gap's tail decision point (Unix ms), from the request before it.
fn last_tail_point(rows: &[LedgerRow]) -> i64 {
    let last = rows
        .iter()
        .rfind(|r| {
            let event = r.decided.as_ref().unwrap().event;
            r.role == "persona" && matches!(event, Some(Event::Arrival { .. }))
        })
        .expect("the last delivery's request");
    last.at_ms + TTL_MS - DECIDE_BEFORE_MS
}

#[tokio::test]
async fn a_decision_point_reached_late_is_decided_at_its_time_and_replays_exactly() {
    // On time, the host pings the last tail at its decision point.
    let (report, rows) = closed_loop("policy = 'predictive'", &workload(0)).await;
    assert_holds(&report, &rows);
    let point = last_tail_point(&rows);
    let ping = |rows: &[LedgerRow]| {
        rows.iter()
            .find(|r| r.role == "persona" && r.decision.starts_with("ping:") && r.at_ms >= point)
            .map(|r| (r.at_ms - T0, r.decision.clone(), r.usage.cache_read > 0))
    };
    assert_eq!(
        ping(&rows),
        Some((point - T0, "ping:ExpectedSavingExceedsPing".into(), true)),
        "the workload must make the host ping at the point"
    );

    // 29 s late, a second before the expiry: the same decision, sent when the runner got
    // there, reading the cache as it was then; the replay agrees on every decision and cost.
    let late = 29_000;
    let (report, rows) = closed_loop("policy = 'predictive'", &workload(late)).await;
    assert_eq!(last_tail_point(&rows), point);
    assert_eq!(
        ping(&rows),
        Some((
            point + late - T0,
            "ping:ExpectedSavingExceedsPing".into(),
            true
        )),
        "{rows:#?}"
    );
    assert_holds(&report, &rows);
    assert_eq!(report.agreed, report.decisions);
}

/// Past the expiry there is nothing left to keep: the host lets the tail go unasked, its next
/// row says the point went undecided, and the replay lets it go there too.
#[tokio::test]
async fn a_decision_point_reached_after_its_expiry_is_let_go_and_replays_exactly() {
    let (report, rows) = closed_loop("policy = 'predictive'", &workload(DECIDE_BEFORE_MS)).await;
    let point = last_tail_point(&rows);
    assert!(
        !rows.iter().any(|r| r.role == "persona"
            && r.decision.starts_with("ping:")
            && r.at_ms >= point
            && r.at_ms < point + TTL_MS),
        "{rows:#?}"
    );
    let next = rows
        .iter()
        .find(|r| r.role == "persona" && r.at_ms > point)
        .expect("a later row");
    assert_eq!(
        next.decided.as_ref().unwrap().lost_at_ms,
        Some(point),
        "{next:#?}"
    );
    assert_holds(&report, &rows);
}
