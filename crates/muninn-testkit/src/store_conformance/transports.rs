//! Cases for what a transport (the Matrix connector) relies on: a batch of deliveries and the
//! transport's cursor committed together (`post_batch`, `cursor`), and sends it gave up on kept
//! and listed (`fail_outbox`, `failed_outbox`) — never offered again, never dropped.

use super::{
    assert_fenced, assert_invalid, assert_not_found, delivery, mind_with_lease, ok, open, out,
};
use crate::StoreFactory;
use muninn_store::{Store, types::*};

fn cursor(value: &str, at: i64) -> NewCursor {
    NewCursor {
        name: "matrix:sync".into(),
        value: value.into(),
        updated_at_ms: at,
    }
}

fn seqs(posted: &[Posted]) -> Vec<(i64, bool)> {
    posted.iter().map(|p| (p.seq, p.created)).collect()
}

pub(super) async fn intake_batch_moves_mail_and_cursor_together(factory: &dyn StoreFactory) {
    let opened = open(factory, "intake_batch").await;
    let store = opened.as_ref();
    mind_with_lease(store, "m", "h").await;
    step!(a_batch_without_mail_moves_the_cursor(store));
    let batch = step!(a_batch_posts_its_mail_and_moves_the_cursor(store));
    step!(the_same_batch_again_adds_nothing(store, &batch));
    step!(cursors_are_per_mind_and_name(store));
    step!(a_first_cursor_is_never_overwritten(store));
    store.close().await;
}

/// A Mind starts with no cursor; a first read with no mail (a Matrix first sync: history is
/// context) moves it; an unknown Mind's batch is not found.
async fn a_batch_without_mail_moves_the_cursor(store: &dyn Store) {
    assert_eq!(
        ok(store.cursor("m", "matrix:sync").await, "none yet"),
        None,
        "fresh"
    );
    assert_not_found(
        store
            .post_batch("zz", &IntakeBatch::default())
            .await
            .map(|p| p.len()),
        "unknown mind",
    );

    // A first read with no mail (a Matrix first sync: history is context) moves the cursor.
    let first = IntakeBatch {
        deliveries: Vec::new(),
        cursor: Some(cursor("s1", 100)),
    };
    assert_eq!(
        ok(store.post_batch("m", &first).await, "first"),
        vec![],
        "no mail"
    );
    let stored = ok(store.cursor("m", "matrix:sync").await, "cursor");
    assert_eq!(
        stored,
        Some(Cursor {
            mind: "m".into(),
            name: "matrix:sync".into(),
            value: "s1".into(),
            updated_at_ms: 100,
        }),
        "the cursor round-trips"
    );
}

/// Mail and cursor: seqs in order; a source id repeated inside the batch adds nothing. Returns
/// the batch.
async fn a_batch_posts_its_mail_and_moves_the_cursor(store: &dyn Store) -> IntakeBatch {
    let batch = IntakeBatch {
        deliveries: vec![delivery(1), delivery(2), delivery(1), delivery(3)],
        cursor: Some(cursor("s2", 200)),
    };
    let posted = ok(store.post_batch("m", &batch).await, "batch");
    assert_eq!(
        seqs(&posted),
        vec![(1, true), (2, true), (1, false), (3, true)],
        "seqs"
    );
    let pending = ok(store.pending_deliveries("m", 0, 10).await, "pending");
    assert_eq!(pending.len(), 3, "three new deliveries");
    assert_eq!(pending[2].context, delivery(3).context, "context kept");
    batch
}

/// The same batch again adds nothing; single intake and batches share one seq counter.
async fn the_same_batch_again_adds_nothing(store: &dyn Store, batch: &IntakeBatch) {
    // The same read again (a transport restarted before it knew the commit landed): nothing
    // new, the cursor where it is.
    let again = ok(store.post_batch("m", batch).await, "again");
    assert_eq!(
        seqs(&again),
        vec![(1, false), (2, false), (1, false), (3, false)],
        "idempotent"
    );
    // Single intake and batches share one mailbox and one seq counter, without gaps.
    assert_eq!(
        ok(store.post_delivery("m", &delivery(4)).await, "single").seq,
        4,
        "single after batch"
    );
    let mixed = IntakeBatch {
        deliveries: vec![delivery(4), delivery(5)],
        cursor: None,
    };
    assert_eq!(
        seqs(&ok(store.post_batch("m", &mixed).await, "mixed")),
        vec![(4, false), (5, true)],
        "batch after single"
    );
    let moved = ok(store.cursor("m", "matrix:sync").await, "cursor").map(|c| c.value);
    assert_eq!(moved.as_deref(), Some("s2"), "no cursor, no move");
}

/// Cursors are per Mind and name.
async fn cursors_are_per_mind_and_name(store: &dyn Store) {
    mind_with_lease(store, "n", "h").await;
    let other = IntakeBatch {
        deliveries: vec![delivery(1)],
        cursor: Some(NewCursor {
            name: "other".into(),
            value: "x".into(),
            updated_at_ms: 300,
        }),
    };
    assert_eq!(
        seqs(&ok(store.post_batch("n", &other).await, "other mind")),
        vec![(1, true)],
        "another Mind's mailbox"
    );
    assert_eq!(
        ok(store.cursor("n", "matrix:sync").await, "n's sync"),
        None,
        "n has no sync cursor"
    );
    let m_sync = ok(store.cursor("m", "matrix:sync").await, "m's sync").map(|c| c.value);
    assert_eq!(m_sync.as_deref(), Some("s2"), "m's cursor untouched");
}

/// A first cursor (the Matrix first start's position) is written once: a second write, as by
/// another host starting the same Mind at once, keeps the first and answers it, so both read
/// from the same position. Before, the only write was `post_batch`'s, which moves the cursor.
async fn a_first_cursor_is_never_overwritten(store: &dyn Store) {
    let first = |value: &str, at: i64| NewCursor {
        name: "matrix:first-start".into(),
        value: value.into(),
        updated_at_ms: at,
    };
    let kept = Cursor {
        mind: "m".into(),
        name: "matrix:first-start".into(),
        value: "p1".into(),
        updated_at_ms: 10,
    };
    let written = ok(store.first_cursor("m", &first("p1", 10)).await, "first");
    assert_eq!(written, kept, "the first write is stored and answered");
    let again = ok(store.first_cursor("m", &first("p2", 20)).await, "second");
    assert_eq!(again, kept, "a second write answers the first");
    let stored = ok(store.cursor("m", "matrix:first-start").await, "read");
    assert_eq!(stored, Some(kept), "the first is kept");
    let other = ok(store.first_cursor("n", &first("q", 30)).await, "n");
    assert_eq!(other.value, "q", "per Mind");
    assert_not_found(
        store
            .first_cursor("zz", &first("p", 1))
            .await
            .map(|c| c.value),
        "unknown mind",
    );
    let mut unnamed = first("p", 1);
    unnamed.name.clear();
    assert_invalid(
        store.first_cursor("m", &unnamed).await.map(|c| c.value),
        "unnamed",
    );
    let oversized = first(&"t".repeat(CURSOR_MAX_BYTES + 1), 1);
    assert_invalid(
        store.first_cursor("n", &oversized).await.map(|c| c.value),
        "oversized",
    );
}

pub(super) async fn intake_batch_is_all_or_nothing(factory: &dyn StoreFactory) {
    let store = open(factory, "intake_batch_atomic").await;
    mind_with_lease(store.as_ref(), "m", "h").await;
    ok(
        store
            .post_batch(
                "m",
                &IntakeBatch {
                    deliveries: vec![delivery(1)],
                    cursor: Some(cursor("s1", 1)),
                },
            )
            .await,
        "first",
    );
    // Each fails at the cursor, after the batch's deliveries were written in the transaction.
    let mut unnamed = cursor("s2", 2);
    unnamed.name = String::new();
    let oversized = cursor(&"t".repeat(CURSOR_MAX_BYTES + 1), 2);
    for (what, bad) in [("empty name", unnamed), ("oversized value", oversized)] {
        let batch = IntakeBatch {
            deliveries: vec![delivery(2), delivery(3)],
            cursor: Some(bad),
        };
        assert_invalid(store.post_batch("m", &batch).await, what);
    }
    // Nothing of either is visible, and no seq was consumed.
    let pending = ok(store.pending_deliveries("m", 0, 10).await, "pending");
    assert_eq!(
        pending.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1],
        "no delivery of a failed batch"
    );
    let value = ok(store.cursor("m", "matrix:sync").await, "cursor").map(|c| c.value);
    assert_eq!(value.as_deref(), Some("s1"), "the cursor did not move");
    let good = IntakeBatch {
        deliveries: vec![delivery(2), delivery(3)],
        cursor: Some(cursor(&"t".repeat(CURSOR_MAX_BYTES), 3)),
    };
    assert_eq!(
        seqs(&ok(store.post_batch("m", &good).await, "good")),
        vec![(2, true), (3, true)],
        "gap-free after failures"
    );
    store.close().await;
}

pub(super) async fn failed_sends_are_kept_and_never_offered_again(factory: &dyn StoreFactory) {
    let opened = open(factory, "failed_sends").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    let failed = step!(a_failed_send_keeps_its_first_failure(store, token));
    step!(a_failed_send_is_offered_to_no_transport(store));
    step!(failures_list_newest_first_and_spare_acks(store, &failed));
    step!(recording_a_failure_needs_no_lease(store, token));
    store.close().await;
}

/// The request ids of `messages`, in order.
fn ids(messages: Vec<OutboxMessage>) -> Vec<String> {
    messages.into_iter().map(|m| m.request_id).collect()
}

/// A failed send keeps its time and reason, neither sent nor acked; a second failure changes
/// nothing. Returns it.
async fn a_failed_send_keeps_its_first_failure(
    store: &dyn Store,
    token: FencingToken,
) -> OutboxMessage {
    ok(
        store
            .enqueue_outbox(
                "m",
                token,
                &[out("b-0", "a"), out("b-1", "b"), out("b-2", "c")],
            )
            .await,
        "enqueue",
    );
    let failed = ok(
        store
            .fail_outbox("m", "b-0", "M_FORBIDDEN: not in the room", 10)
            .await,
        "fail",
    );
    assert_eq!(failed.failed_at_ms, Some(10), "failure time");
    assert_eq!(
        failed.failure.as_deref(),
        Some("M_FORBIDDEN: not in the room"),
        "failure"
    );
    assert_eq!(
        (failed.sent_at_ms, failed.acked_at_ms),
        (None, None),
        "failed is neither sent nor acked"
    );
    // The first failure stays.
    assert_eq!(
        ok(store.fail_outbox("m", "b-0", "later", 20).await, "again"),
        failed,
        "idempotent"
    );
    failed
}

/// Offered to no transport again: not unsent, not unacked, not in a page.
async fn a_failed_send_is_offered_to_no_transport(store: &dyn Store) {
    assert_eq!(
        ids(ok(store.unsent_outbox("m", 10).await, "unsent")),
        vec!["b-1", "b-2"],
        "unsent"
    );
    assert_eq!(
        ids(ok(store.unacked_outbox("m", 10).await, "unacked")),
        vec!["b-1", "b-2"],
        "unacked"
    );
    assert_eq!(
        ids(ok(store.outbox_after("m", 0, 10).await, "page")),
        vec!["b-1", "b-2"],
        "page"
    );
}

/// An acknowledged message keeps its ack and gets no failure; failures list newest first,
/// whole, per Mind; an unknown id is not found.
async fn failures_list_newest_first_and_spare_acks(store: &dyn Store, failed: &OutboxMessage) {
    // An acknowledged message keeps its ack and gets no failure.
    let acked = ok(
        store.ack_outbox("m", "b-1", Some("$event1"), 30).await,
        "ack",
    );
    let unchanged = ok(
        store.fail_outbox("m", "b-1", "too late", 40).await,
        "fail acked",
    );
    assert_eq!(unchanged, acked, "ack wins");
    ok(
        store.fail_outbox("m", "b-2", "M_TOO_LARGE", 50).await,
        "fail 2",
    );
    // Listed newest failure first, whole rows.
    let listed = ok(store.failed_outbox("m", 10).await, "failed");
    assert_eq!(ids(listed.clone()), vec!["b-2", "b-0"], "newest first");
    assert_eq!(&listed[1], failed, "whole row");
    assert_eq!(
        ids(ok(store.failed_outbox("m", 1).await, "limit")),
        vec!["b-2"],
        "limit"
    );
    assert_eq!(
        ok(store.failed_outbox("zz", 10).await, "unknown mind"),
        vec![],
        "unknown mind lists nothing"
    );
    assert_not_found(store.fail_outbox("m", "nope", "x", 1).await, "unknown id");
}

/// Recording a failure needs no lease (the transport's word).
async fn recording_a_failure_needs_no_lease(store: &dyn Store, token: FencingToken) {
    ok(
        store.enqueue_outbox("m", token, &[out("b-3", "d")]).await,
        "enqueue",
    );
    ok(store.release_lease("m", token).await, "release");
    assert_fenced(
        store.enqueue_outbox("m", token, &[out("b-4", "e")]).await,
        "released",
    );
    let late = ok(
        store.fail_outbox("m", "b-3", "no lease needed", 60).await,
        "fail, no lease",
    );
    assert_eq!(late.failed_at_ms, Some(60));
}

/// An outbox row as a build at migration 5 left it (before failures were kept).
const OUTBOX_AT_SCHEMA_5: &str = "\
INSERT INTO minds (id, display_name, config, created_at_ms) VALUES ('m', 'M', '{}', 1);
INSERT INTO counters (mind_id, name, value) VALUES ('m', 'outbox', 1);
INSERT INTO outbox (mind_id, request_id, seq, room, text, created_at_ms, sent_at_ms, remote_id, \
acked_at_ms) VALUES ('m', 'old-0', 1, '#swarm', 'old reply', 5, NULL, NULL, NULL);
";

pub(super) async fn outbox_rows_from_schema_5_migrate_to_failures(factory: &dyn StoreFactory) {
    ok(
        factory
            .create_at_version("schema_5", 5, OUTBOX_AT_SCHEMA_5)
            .await,
        "create at schema 5",
    );
    let store = open(factory, "schema_5").await;
    let old = ok(store.unacked_outbox("m", 10).await, "unacked");
    assert_eq!(
        old,
        vec![OutboxMessage {
            mind: "m".into(),
            request_id: "old-0".into(),
            seq: 1,
            room: "#swarm".into(),
            text: "old reply".into(),
            created_at_ms: 5,
            sent_at_ms: None,
            remote_id: None,
            acked_at_ms: None,
            failed_at_ms: None,
            failure: None,
        }],
        "an old row has no failure and is still offered"
    );
    assert_eq!(
        ok(store.cursor("m", "matrix:sync").await, "cursor"),
        None,
        "no cursor"
    );
    ok(store.fail_outbox("m", "old-0", "gone", 9).await, "fail old");
    assert_eq!(
        ok(store.failed_outbox("m", 5).await, "failed").len(),
        1,
        "old row fails"
    );
    store.close().await;
}

/// A NUL character (U+0000), which a Matrix event or a model's reply may carry and which
/// PostgreSQL cannot keep in text, is dropped from every text the store writes and looks up, on
/// every backend alike: the batch that brings it commits (it does not wedge the transport, which
/// would read the same batch again for ever), its source id still makes a repeat idempotent, and
/// the turn that answers it commits.
pub(super) async fn nul_in_text_is_dropped_alike(factory: &dyn StoreFactory) {
    let opened = open(factory, "nul_in_text").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    let mut bad = delivery(1);
    bad.text = "be\u{0}fore".into();
    bad.sender = "@ann\u{0}:example.org".into();
    bad.source_id = "$event\u{0}1".into();
    let batch = IntakeBatch {
        deliveries: vec![bad.clone()],
        cursor: Some(cursor("s\u{0}1", 1)),
    };
    let posted = ok(store.post_batch("m", &batch).await, "a batch with NUL");
    assert_eq!(seqs(&posted), vec![(1, true)]);
    let again = ok(store.post_batch("m", &batch).await, "the same batch again");
    assert_eq!(seqs(&again), vec![(1, false)], "idempotent by source id");
    let stored = ok(store.pending_deliveries("m", 0, 10).await, "pending");
    let read: Vec<(&str, &str, &str)> = stored
        .iter()
        .map(|d| (d.text.as_str(), d.sender.as_str(), d.source_id.as_str()))
        .collect();
    assert_eq!(read, vec![("before", "@ann:example.org", "$event1")]);
    let value = ok(store.cursor("m", "matrix:sync").await, "cursor").map(|c| c.value);
    assert_eq!(value.as_deref(), Some("s1"));
    let turn = TurnRecord {
        turn_key: Some("batch\u{0}1".into()),
        transcript: Vec::new(),
        outbox: vec![out("batch1-0", "a reply\u{0}")],
        ledger: Vec::new(),
        memory: vec![super::note(&["@ann\u{0}:x"], 1, "Ann \u{0}said", 2_000)],
        briefs: vec![super::brief("a brief\u{0}", BriefOrigin::Persona, 2_000)],
        ack_through: Some(1),
    };
    ok(
        store.record_turn("m", token, &turn).await,
        "a turn with NUL",
    );
    let sends = ok(store.unsent_outbox("m", 10).await, "unsent");
    assert_eq!(
        sends.iter().map(|o| o.text.as_str()).collect::<Vec<_>>(),
        vec!["a reply"]
    );
    let notes = ok(store.memory_about("m", "@ann:x", 10).await, "notes");
    assert_eq!(
        notes.iter().map(|n| n.text.as_str()).collect::<Vec<_>>(),
        vec!["Ann said"]
    );
    let briefs = ok(store.briefs("m", None, 10).await, "briefs");
    assert_eq!(
        briefs.iter().map(|b| b.text.as_str()).collect::<Vec<_>>(),
        vec!["a brief"]
    );
    store.close().await;
}
