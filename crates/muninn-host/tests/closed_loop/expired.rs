//! An answer that found the cache gone: the provider lost an entry the host's cache model (and
//! the decider) still held warm — it expired before the request reached the provider (a late
//! runner, a slow network) or was evicted early. The simulator shares the host's clock, so it
//! never does this by itself; [`Act::Evict`] empties its cache. The host counts what the
//! provider answered and its row says `cache_state: "expired"`; the replay takes that row's
//! usage for its own. It used to price the row as the read its model predicted and feed that
//! to its accounting: the row was priced apart, and the gap's ping spend (which ski rental's
//! budget reads) differed from the host's.
//!
//! After a restart or a takeover the mark used to be missing: it came from the backend's own
//! cache mirror, which a new process starts empty, so the new host's first request, finding an
//! entry the provider lost meanwhile, said `cold` and was priced apart. The host now marks a row
//! by the cache its ledger implies (`muninn_core::closed_loop::LedgerCache`, the replay's own),
//! restored with the accounting; a start the ledger expects cold (both TTLs lapsed) stays `cold`.

use super::{Act, Harness, assert_holds, closed_loop, closed_loop_on, test_mind};
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
/// `row` read nothing of the cache the ledger implied and says so.
fn found_expired(row: &LedgerRow) {
    assert_eq!(row.usage.cache_read, 0, "{row:#?}");
    assert_eq!(row.cache_state, EXPIRED, "{row:#?}");
}

fn replays_taking_one_expired_row(report: &ClosedLoop, rows: &[LedgerRow]) {
    assert_holds(report, rows);
    assert_eq!(report.agreed, report.decisions);
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    assert_eq!(report.rows_found_expired, 1, "{report:#?}");
}

/// A message, then the provider loses the cache and the host restarts cleanly (a new process:
/// the backend's own cache mirror starts empty, the accounting is restored from the ledger),
/// and the next message comes within the tail's TTL: the turn writes what the restored
/// accounting — and a replay of the ledger — expected it to read. The row must say so; it used
/// to say what the empty mirror predicted (nothing to read) and was priced apart.
#[tokio::test]
async fn a_turn_after_an_eviction_and_a_clean_restart_replays_exactly() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 60_000 },
        Act::Evict,
        Act::Restart { clean: true },
        Act::Deliver { room: 1, words: 40 },
        Act::Wait { ms: 120_000 },
        Act::Deliver { room: 0, words: 30 },
    ];
    let (report, rows) = closed_loop("", &acts).await;
    let turn = first_after(&rows, rows[0].at_ms + 60_000, "");
    assert_eq!(turn.role, "persona", "{turn:#?}");
    found_expired(turn);
    replays_taking_one_expired_row(&report, &rows);
}

/// A message, then the provider loses the cache and the host is killed holding its lease; its
/// successor takes the Mind over once the lease lapses (the default 30 s, well within the tail's
/// TTL) and answers the next message: that turn, the new process's first request, writes what
/// the ledger says was cached, and says so.
#[tokio::test]
async fn a_turn_after_an_eviction_and_a_takeover_replays_exactly() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 60_000 },
        Act::Evict,
        Act::Restart { clean: false },
        Act::Deliver { room: 1, words: 40 },
        Act::Wait { ms: 120_000 },
        Act::Deliver { room: 0, words: 30 },
    ];
    let h = Harness::with_lease(
        test_mind(""),
        "",
        None,
        Default::default(),
        muninn_host::runtime::LEASE_TTL_MS,
    )
    .await;
    let (report, rows) = closed_loop_on(h, &acts).await;
    let turn = first_after(&rows, rows[0].at_ms + 60_000, "");
    assert_eq!(turn.role, "persona", "{turn:#?}");
    assert!(
        turn.at_ms - rows[0].at_ms < 300_000,
        "taken over within the tail's TTL: {turn:#?}"
    );
    found_expired(turn);
    replays_taking_one_expired_row(&report, &rows);
}

/// The host restarted cleanly after an eviction and takes no idle decision until its next
/// turn (nobody kept the session since the last row), which comes after the tail's TTL but
/// within the head's hour: the ledger still holds the head (system and reply schema) cached,
/// and the turn wrote it.
#[tokio::test]
async fn a_turn_that_found_the_head_gone_after_a_clean_restart_replays_exactly() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 60_000 },
        Act::Evict,
        Act::Restart { clean: true },
        Act::Wait { ms: 1_500_000 },
        Act::Deliver { room: 0, words: 30 },
    ];
    let (report, rows) = closed_loop("", &acts).await;
    let turn = first_after(&rows, rows[0].at_ms + 60_000, "");
    assert_eq!(turn.at_ms, rows[0].at_ms + 1_560_000, "{turn:#?}");
    found_expired(turn);
    replays_taking_one_expired_row(&report, &rows);
}

/// Not every cold start after an eviction is one: a host killed holding an hour's lease is taken
/// over after both TTLs lapsed by the clock, so the ledger expects nothing cached and the first
/// turn's row says `cold`, as a replay prices it.
#[tokio::test]
async fn a_turn_after_both_ttls_lapsed_is_cold_not_expired() {
    let acts = [
        Act::Deliver { room: 0, words: 60 },
        Act::Wait { ms: 60_000 },
        Act::Evict,
        Act::Restart { clean: false },
        Act::Deliver { room: 1, words: 40 },
        Act::Wait { ms: 2 * 3_600_000 },
        Act::Deliver { room: 0, words: 30 },
    ];
    let (report, rows) = closed_loop("", &acts).await;
    let turn = first_after(&rows, rows[0].at_ms + 60_000, "");
    assert!(
        turn.at_ms - rows[0].at_ms > 3_600_000,
        "taken over after the head's TTL: {turn:#?}"
    );
    assert_eq!(turn.usage.cache_read, 0, "{turn:#?}");
    assert_eq!(turn.cache_state, "cold", "{turn:#?}");
    assert_holds(&report, &rows);
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    assert_eq!(report.rows_found_expired, 0, "{report:#?}");
}
