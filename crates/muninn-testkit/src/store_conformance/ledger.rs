//! The ledger: rows read back whole, queried by time and id, and summed into spend.

use super::{assert_invalid, ledger_row, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_core::ledger::{LedgerRow, MissCause};
use muninn_core::miss::{ProviderMiss, ProviderMissReason};
use muninn_core::money::MicroUsd;
use muninn_store::{Store, types::*};
use serde_json::json;

pub(super) async fn ledger(factory: &dyn StoreFactory) {
    let opened = open(factory, "ledger").await;
    let store = opened.as_ref();
    let ta = mind_with_lease(store, "a", "h").await;
    let tb = mind_with_lease(store, "b", "h").await;
    let a_rows = vec![decided_row(), flagged_row(), no_raw_row()];
    step!(appends_get_ids_in_append_order(store, (ta, tb), &a_rows));
    let export = step!(the_export_reads_back_every_row_whole(store, &a_rows));
    step!(queries_filter_by_mind_and_time_and_page(store, &export));
    step!(spend_sums_by_mind_and_window(store));
    step!(bad_rows_are_refused_and_change_nothing(store, ta));
    store.close().await;
}

/// The accounting's record of a decision, with the provider's diagnosis beside muninn's cause:
/// a change with its magnitude.
fn decided_row() -> LedgerRow {
    let mut decided = ledger_row("a", 1_000, 100);
    decided.decided = Some(muninn_core::ledger::Decided {
        kind: muninn_core::ledger::RowKind::Request,
        event: Some(muninn_core::decide::Event::Arrival {
            boundary: true,
            delta: 420,
        }),
        action: Some(muninn_core::decide::Action::Refresh),
        reason: Some(muninn_core::decide::Reason::GrowthBreakEven),
        segment: Some(muninn_core::ledger::SegmentStart {
            head: 4_000,
            rehydration: 6_500,
            forced: Some(muninn_core::ledger::ForcedStart::Rebuilt),
            head_digest: Some(0x9e37_79b9_7f4a_7c15),
            system_digest: Some(u64::MAX),
        }),
        lost_at_ms: Some(900),
        policy: "ski-rental".to_string(),
        ttl: muninn_core::cache::Ttl::FiveMinutes,
        head_ttl: muninn_core::cache::Ttl::OneHour,
        bounds: muninn_core::decide::Bounds {
            head_tokens: 4_000,
            rehydrate_tokens: 2_500,
            flush_prompt_tokens: 0,
            flush_output_tokens: 0,
            ping_tokens: 12,
            ping_output_tokens: 1,
            min_segment_requests: 4,
            ceiling_tokens: 200_000,
            context_window: 200_000,
            mask_keep_tool_uses: 3,
        },
        decide_before_expiry_ms: 30_000,
        can: muninn_core::decide::Capabilities::default(),
        tool_results: muninn_core::trace::ToolResults {
            tokens: 1_200,
            uses: 2,
        },
        attempted: None,
    });
    decided.miss_cause = Some(MissCause::SystemChange);
    decided.provider_miss = Some(ProviderMiss {
        reason: ProviderMissReason::SystemChanged,
        missed_tokens: Some(u64::from(u32::MAX) + 7),
    });
    decided
}

/// A request with flagged events: two retries, a TTL the provider did not honour, a read
/// shortfall (they come back as written, in order); the provider's label without a magnitude.
fn flagged_row() -> LedgerRow {
    let mut flagged = ledger_row("a", 2_000, 250);
    flagged.events = vec![
        json!({"attempt": 1, "delay_ms": 500, "status": 529, "kind": "overloaded_error", "retry_after_ms": null}),
        json!({"attempt": 2, "delay_ms": 1_000, "status": null, "kind": "transport", "retry_after_ms": 1_000}),
        json!({"type": "ttl_mismatch", "check": {"expected_5m": 0, "expected_1h": 300, "honoured_5m": 300, "honoured_1h": 0}}),
        json!({"type": "read_shortfall", "predicted": 12_000, "reported": 0, "note": "ünïcode \"q\""}),
    ];
    flagged.provider_miss = Some(ProviderMiss {
        reason: ProviderMissReason::NoDivergence,
        missed_tokens: None,
    });
    flagged
}

/// A row without raw usage, cause or boundary; the provider's reason one this build does not
/// know (kept as `other`).
fn no_raw_row() -> LedgerRow {
    let mut no_raw = ledger_row("a", 3_000, 7);
    no_raw.raw_usage = None;
    no_raw.miss_cause = None;
    no_raw.boundary = false;
    no_raw.provider_miss = Some(ProviderMiss {
        reason: ProviderMissReason::Other,
        missed_tokens: None,
    });
    no_raw
}

/// Rows of two Minds get ids increasing in append order.
async fn appends_get_ids_in_append_order(
    store: &dyn Store,
    (ta, tb): (FencingToken, FencingToken),
    a_rows: &[LedgerRow],
) {
    let a_ids = ok(store.append_ledger("a", ta, a_rows).await, "append a");
    let b_ids = ok(
        store
            .append_ledger("b", tb, &[ledger_row("b", 1_500, 1_000)])
            .await,
        "b",
    );
    let a4 = ok(
        store
            .append_ledger("a", ta, &[ledger_row("a", 4_000, 1)])
            .await,
        "a4",
    );
    assert!(a_ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        a_ids[2] < b_ids[0] && b_ids[0] < a4[0],
        "ids follow append order"
    );
}

/// Export: every row, in append order, exactly as written (raw usage verbatim). Returns it.
async fn the_export_reads_back_every_row_whole(
    store: &dyn Store,
    a_rows: &[LedgerRow],
) -> Vec<LedgerEntry> {
    let export = ok(store.ledger(&LedgerQuery::default()).await, "export");
    let rows: Vec<LedgerRow> = export.iter().map(|e| e.row.clone()).collect();
    let mut expected = a_rows.to_vec();
    expected.push(ledger_row("b", 1_500, 1_000));
    expected.push(ledger_row("a", 4_000, 1));
    assert_eq!(rows, expected);
    export
}

/// A query by Mind and time window, and a page after an id.
async fn queries_filter_by_mind_and_time_and_page(store: &dyn Store, export: &[LedgerEntry]) {
    let a_only = ok(
        store
            .ledger(&LedgerQuery {
                mind: Some("a".into()),
                from_ms: Some(2_000),
                to_ms: Some(4_000),
                ..LedgerQuery::default()
            })
            .await,
        "query a",
    );
    assert_eq!(
        a_only.iter().map(|e| e.row.at_ms).collect::<Vec<_>>(),
        vec![2_000, 3_000]
    );
    let paged = ok(
        store
            .ledger(&LedgerQuery {
                after_id: Some(export[1].id),
                limit: Some(2),
                ..LedgerQuery::default()
            })
            .await,
        "page",
    );
    assert_eq!(paged, export[2..4].to_vec());
}

/// Spend sums a Mind's costs within a window.
async fn spend_sums_by_mind_and_window(store: &dyn Store) {
    assert_eq!(
        ok(store.spend("a", 0, 10_000).await, "spend a"),
        MicroUsd(358)
    );
    assert_eq!(
        ok(store.spend("a", 1_000, 3_000).await, "window"),
        MicroUsd(350)
    );
    assert_eq!(
        ok(store.spend("b", 0, 10_000).await, "spend b"),
        MicroUsd(1_000)
    );
    assert_eq!(
        ok(store.spend("a", 5_000, 6_000).await, "empty window"),
        MicroUsd::ZERO
    );
}

/// A row of another Mind, or one whose count does not fit the store, is refused and nothing
/// is appended.
async fn bad_rows_are_refused_and_change_nothing(store: &dyn Store, ta: FencingToken) {
    assert_invalid(
        store.append_ledger("a", ta, &[ledger_row("b", 1, 1)]).await,
        "wrong mind",
    );
    let mut huge = ledger_row("a", 1, 1);
    huge.prefix_tokens = u64::MAX;
    assert_invalid(store.append_ledger("a", ta, &[huge]).await, "u64 overflow");
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "unchanged").len(),
        5
    );
}
