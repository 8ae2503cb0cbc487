//! What holds across writers and opens: distinct gap-free seqs under concurrent writers, everything
//! kept on reopen, migrations idempotent, and rows written before a migration reading back with its
//! documented defaults.

use super::{delivery, full_turn, item, ledger_row, mind, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_core::ledger::MissCause;
use muninn_core::money::MicroUsd;
use muninn_store::types::*;
use serde_json::json;
use std::sync::Arc;

pub(super) async fn concurrent_writers_get_gap_free_seqs(factory: &dyn StoreFactory) {
    const PER_TASK: i64 = 25;
    let store = open(factory, "concurrency").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    let mut tasks = Vec::new();
    for task in 0..2 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut transcript = Vec::new();
            let mut deliveries = Vec::new();
            for i in 0..PER_TASK {
                let n = task * 1_000 + i;
                let seqs = ok(
                    store
                        .append_transcript("m", token, &[item(Role::Persona, n)])
                        .await,
                    "concurrent append",
                );
                transcript.extend(seqs);
                let posted = ok(
                    store.post_delivery("m", &delivery(n)).await,
                    "concurrent post",
                );
                deliveries.push(posted.seq);
            }
            (transcript, deliveries)
        }));
    }
    let mut all_transcript = Vec::new();
    let mut all_deliveries = Vec::new();
    for task in tasks {
        let (transcript, deliveries) = match task.await {
            Ok(result) => result,
            Err(error) => panic!("writer task failed: {error}"),
        };
        assert!(
            transcript.windows(2).all(|w| w[0] < w[1]),
            "one task's seqs increase"
        );
        assert!(deliveries.windows(2).all(|w| w[0] < w[1]));
        all_transcript.extend(transcript);
        all_deliveries.extend(deliveries);
    }
    all_transcript.sort_unstable();
    all_deliveries.sort_unstable();
    let expected: Vec<i64> = (1..=2 * PER_TASK).collect();
    assert_eq!(all_transcript, expected, "distinct and gap-free");
    assert_eq!(all_deliveries, expected, "distinct and gap-free");
    let stored = ok(
        store
            .transcript_range("m", Role::Persona, 1, None, 1_000)
            .await,
        "read",
    );
    assert_eq!(stored.iter().map(|t| t.seq).collect::<Vec<_>>(), expected);

    // Two holders racing for a free lease: exactly one wins.
    ok(store.create_mind(&mind("race")).await, "create race");
    let (a, b) = tokio::join!(
        store.acquire_lease("race", "host-a", 60_000, 1),
        store.acquire_lease("race", "host-b", 60_000, 1)
    );
    let winners = [ok(a, "race a"), ok(b, "race b")]
        .iter()
        .filter(|l| l.is_some())
        .count();
    assert_eq!(winners, 1, "exactly one holder wins the lease");
    store.close().await;
}

pub(super) async fn reopen_keeps_everything(factory: &dyn StoreFactory) {
    let store = open(factory, "reopen").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    ok(store.post_delivery("m", &delivery(1)).await, "d1");
    ok(store.post_delivery("m", &delivery(2)).await, "d2");
    ok(
        store
            .record_turn("m", token, &full_turn("m", Some(1)))
            .await,
        "turn",
    );
    ok(store.put_brake("m", true, 1).await, "settings");
    let version = ok(store.schema_version().await, "version");
    let transcript = ok(store.transcript_tail("m", Role::Persona, 10).await, "tail");
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    let lease = ok(store.lease("m").await, "lease");
    store.close().await;
    drop(store);

    // Reopening runs the migrations again: they must find nothing to do.
    let store = open(factory, "reopen").await;
    assert_eq!(ok(store.schema_version().await, "version"), version);
    assert_eq!(ok(store.mind("m").await, "mind"), Some(mind("m")));
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 10).await, "tail"),
        transcript
    );
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger"),
        ledger
    );
    assert_eq!(ok(store.lease("m").await, "lease"), lease);
    assert_eq!(
        ok(store.ack_position("m").await, "ack"),
        1,
        "the ack position is durable"
    );
    assert_eq!(
        ok(store.pending_deliveries("m", 1, 10).await, "pending").len(),
        1
    );
    assert_eq!(ok(store.unsent_outbox("m", 10).await, "outbox").len(), 2);
    assert_eq!(ok(store.memory_newest("m", 10).await, "memory").len(), 1);
    assert_eq!(ok(store.briefs("m", None, 10).await, "briefs").len(), 1);
    assert!(ok(store.settings("m").await, "settings").brake);
    // The fencing token survives a restart; seqs continue.
    let seqs = ok(
        store
            .append_transcript("m", token, &[item(Role::Persona, 9)])
            .await,
        "append",
    );
    assert_eq!(seqs, vec![3]);
    assert_eq!(
        ok(store.post_delivery("m", &delivery(3)).await, "d3").seq,
        3
    );
    store.close().await;
    // A third open, for idempotence of the migration run on a current database.
    let store = open(factory, "reopen").await;
    assert_eq!(ok(store.schema_version().await, "version"), version);
    store.close().await;
}

/// Rows as a build at schema version 2 wrote them: a delivery (before `to_you` and `context`)
/// and a ledger row (before `events`). Plain SQL both backends accept.
const ROWS_AT_SCHEMA_2: &str = "\
    INSERT INTO minds (id, display_name, config, created_at_ms) VALUES ('m', 'M', '{}', 1);\
    INSERT INTO counters (mind_id, name, value) VALUES ('m', 'delivery', 1);\
    INSERT INTO deliveries (mind_id, seq, room, sender, is_direct, text, source_id, \
        received_at_ms) VALUES ('m', 1, '#swarm', '@ann:example.org', TRUE, 'old message', \
        '$old1', 30001);\
    INSERT INTO ledger (mind_id, role, segment, turn, at_ms, idle_gap_ms, model, \
        prefix_tokens, rehydration_tokens, usage_input, usage_cache_write_5m, \
        usage_cache_write_1h, usage_cache_read, usage_output, raw_usage, cost_micro_usd, \
        predicted_read, predicted_write, cache_state, miss_cause, decision, boundary) \
        VALUES ('m', 'persona', 0, 1, 5000, 0, 'sim', 10, 10, 10, 0, 0, 0, 5, NULL, 42, 0, 10, \
        'cold', 'cold_start', 'append', TRUE);\
    INSERT INTO segments (mind_id, role, number, started_at_ms, rehydration_tokens, reason, \
        session_id) VALUES ('m', 'persona', 0, 4000, 10, 'start', 'old-handle');";

pub(super) async fn rows_from_schema_2_migrate_forward(factory: &dyn StoreFactory) {
    ok(
        factory
            .create_at_version("schema_2", 2, ROWS_AT_SCHEMA_2)
            .await,
        "create at schema 2",
    );
    let store = open(factory, "schema_2").await;
    assert!(
        ok(store.schema_version().await, "version") > 2,
        "migrated forward"
    );
    // The old delivery: not addressed to the Mind, no room history.
    let old = Delivery {
        mind: "m".into(),
        seq: 1,
        room: "#swarm".into(),
        sender: "@ann:example.org".into(),
        is_direct: true,
        to_you: false,
        text: "old message".into(),
        source_id: "$old1".into(),
        received_at_ms: 30_001,
        context: Vec::new(),
    };
    assert_eq!(
        ok(store.pending_deliveries("m", 0, 10).await, "pending"),
        vec![old.clone()]
    );
    // The old ledger row: no events.
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].row.events, Vec::<serde_json::Value>::new());
    assert_eq!(ledger[0].row.cost, MicroUsd(42));
    assert_eq!(ledger[0].row.miss_cause, Some(MissCause::ColdStart));
    assert_eq!(
        ledger[0].row.provider_miss, None,
        "no diagnosis before migration 6"
    );
    // The old segment: its handle kept, no memory and no spec digest (so it is never resumed).
    let segment = ok(store.current_segment("m", Role::Persona).await, "segment");
    let segment = segment.unwrap_or_else(|| panic!("the old segment is gone"));
    assert_eq!(segment.session_id.as_deref(), Some("old-handle"));
    assert_eq!((segment.memory, segment.spec_digest), (None, None));
    // New rows beside the old ones carry the new fields.
    assert_eq!(
        ok(store.post_delivery("m", &delivery(3)).await, "post").seq,
        2
    );
    let pending = ok(store.pending_deliveries("m", 0, 10).await, "pending");
    assert_eq!(pending[0], old);
    assert_eq!(pending[1].context, delivery(3).context);
    assert!(pending[1].to_you);
    let token = match ok(store.acquire_lease("m", "h", 60_000, 10_000).await, "lease") {
        Some(lease) => lease.token,
        None => panic!("lease refused"),
    };
    let mut row = ledger_row("m", 6_000, 1);
    row.events = vec![json!({"type": "read_shortfall", "predicted": 10, "reported": 0})];
    ok(
        store.append_ledger("m", token, &[row.clone()]).await,
        "append",
    );
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[1].row, row);
    store.close().await;
}
