//! An answer that found the cache gone: the provider lost an entry the host's cache model (and
//! the decider) still held warm — it expired before the request reached the provider (a late
//! runner, a slow network) or was evicted early. The simulator shares the host's clock, so it
//! never does this by itself; [`Act::Evict`] empties its cache. The host counts what the
//! provider answered and its row says `cache_state: "expired"`; the replay takes that row's
//! usage for its own. It used to price the row as the read its model predicted and feed that
//! to its accounting: the row was priced apart, and the gap's ping spend (which ski rental's
//! budget reads) differed from the host's.

use super::{Act, assert_holds, closed_loop};
use muninn_core::closed_loop::{ClosedLoop, EXPIRED};
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;

/// The Persona's first row at or after `from` (Unix ms) whose decision starts with `decision`.
fn first_after<'a>(rows: &'a [LedgerRow], from: i64, decision: &str) -> &'a LedgerRow {
    rows.iter()
        .find(|r| r.role == "persona" && r.at_ms >= from && r.decision.starts_with(decision))
        .unwrap_or_else(|| panic!("no {decision} after {from}: {rows:#?}"))
}

/// A message, an idle gap in which the provider loses the cache before the tail's decision
/// point, and the gap run on past both TTLs: the Persona's tail ping writes what it was sent to
/// read.
#[tokio::test]
async fn a_ping_whose_answer_found_the_cache_expired_replays_exactly() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 120_000 },
        Act::Deliver { room: 1, words: 40 },
        Act::Wait { ms: 200_000 },
        Act::Evict,
        Act::Wait { ms: 1_500_000 },
        Act::Deliver { room: 0, words: 30 },
    ];
    let (report, rows) = closed_loop("", &acts).await;
    let evicted_at = rows[0].at_ms + 120_000 + 200_000;
    let ping = first_after(&rows, evicted_at, "ping:");
    // Sent to read the prefix the decider held warm; the answer wrote it all.
    assert!(ping.predicted_read > 0, "{ping:#?}");
    assert_eq!(ping.usage.cache_read, 0, "{ping:#?}");
    assert_eq!(
        ping.usage.written(),
        ping.predicted_read + ping.predicted_write,
        "{ping:#?}"
    );
    assert_eq!(ping.cache_state, EXPIRED, "{ping:#?}");
    replays_taking_one_expired_row(&report, &rows);
}

/// A message, a ping that keeps its tail, then the provider loses the cache and the next
/// message arrives within the TTL the ping renewed: the turn writes what the decider expected
/// it to read.
#[tokio::test]
async fn a_turn_after_a_ping_that_found_the_cache_expired_replays_exactly() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 280_000 },
        Act::Evict,
        Act::Wait { ms: 60_000 },
        Act::Deliver { room: 1, words: 40 },
        Act::Wait { ms: 280_000 },
        Act::Deliver { room: 0, words: 30 },
    ];
    let (report, rows) = closed_loop("", &acts).await;
    let ping = first_after(&rows, rows[0].at_ms, "ping:");
    assert!(ping.usage.cache_read > 0, "{ping:#?}");
    assert_eq!(ping.cache_state, "warm", "{ping:#?}");
    let turn = first_after(&rows, ping.at_ms + 1, "append");
    assert!(
        turn.usage.cache_read < turn.predicted_read,
        "the turn must find the cache gone: {turn:#?}"
    );
    assert_eq!(turn.cache_state, EXPIRED, "{turn:#?}");
    replays_taking_one_expired_row(&report, &rows);
}

/// The exception is narrow: a row is taken as recorded only when it says `expired` and its
/// usage is the model's with part of the read written instead. The same shortfall on a row
/// that does not say so is priced apart as before; one that says so but read what the model
/// predicted is nothing to take.
#[tokio::test]
async fn a_shortfall_the_row_does_not_explain_is_priced_apart() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 280_000 },
        Act::Deliver { room: 1, words: 40 },
    ];
    let (report, rows) = closed_loop("", &acts).await;
    assert_holds(&report, &rows);
    assert_eq!(report.rows_found_expired, 0, "{report:#?}");
    let check = |rows: &[LedgerRow]| {
        muninn_core::closed_loop::verify(rows, &PriceTable::embedded(), &Default::default())
    };
    let ping = rows
        .iter()
        .position(|r| r.decision.starts_with("ping:") && r.usage.cache_read > 0)
        .expect("a ping that read");
    // The ping's read written instead, priced as billed.
    let written = || {
        let mut rows = rows.clone();
        let row = &mut rows[ping];
        row.usage.cache_write_5m += row.usage.cache_read;
        row.usage.cache_read = 0;
        row.cost = PriceTable::embedded()
            .model(&row.model)
            .unwrap()
            .cost(&row.usage);
        rows
    };

    // A shortfall the row does not explain: priced apart.
    let unexplained = written();
    let report = check(&unexplained);
    assert_eq!(report.rows_found_expired, 0, "{report:#?}");
    assert_eq!(report.rows_priced_apart, 1, "{report:#?}");
    assert!(!report.holds(0.001), "{report:#?}");

    // Explained, and taken: the replay agrees on every decision and the cost.
    let mut explained = written();
    explained[ping].cache_state = EXPIRED.into();
    let report = check(&explained);
    assert_eq!(report.rows_found_expired, 1, "{report:#?}");
    assert_holds(&report, &explained);

    // Says `expired` but read what the model predicted: nothing to take.
    let mut claimed = rows.clone();
    claimed[ping].cache_state = EXPIRED.into();
    let report = check(&claimed);
    assert_eq!(report.rows_found_expired, 0, "{report:#?}");
    assert_holds(&report, &claimed);
}

/// The ledger replays exactly, every decision agreed, with one row taken as recorded because
/// it found the cache expired and none priced apart.
fn replays_taking_one_expired_row(report: &ClosedLoop, rows: &[LedgerRow]) {
    assert_holds(report, rows);
    assert_eq!(report.agreed, report.decisions);
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    assert_eq!(report.rows_found_expired, 1, "{report:#?}");
}
