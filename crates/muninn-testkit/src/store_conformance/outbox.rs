//! The outbox: idempotent by request id, marked sent by the holder, acked by the transport.

use super::{assert_not_found, mind_with_lease, ok, open, out};
use crate::StoreFactory;
use muninn_store::{Store, types::*};

pub(super) async fn outbox(factory: &dyn StoreFactory) {
    let opened = open(factory, "outbox").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    step!(enqueue_is_idempotent_by_request_id(store, token));
    step!(marking_sent_keeps_the_first(store, token));
    step!(pages_after_a_seq_hold_the_unacked(store));
    step!(acks_need_no_lease_and_keep_the_first(store, token));
    store.close().await;
}

fn seqs(page: Vec<OutboxMessage>) -> Vec<i64> {
    page.iter().map(|m| m.seq).collect()
}

/// Rows get gap-free seqs; the same request id again returns the first row unchanged.
async fn enqueue_is_idempotent_by_request_id(store: &dyn Store, token: FencingToken) {
    let rows = ok(
        store
            .enqueue_outbox("m", token, &[out("b1-0", "hello"), out("b1-1", "world")])
            .await,
        "enqueue",
    );
    assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(rows[0].text, "hello");
    assert_eq!(rows[0].sent_at_ms, None);
    // The same request id again returns the first row unchanged.
    let again = ok(
        store
            .enqueue_outbox("m", token, &[out("b1-0", "DIFFERENT"), out("b2-0", "next")])
            .await,
        "enqueue again",
    );
    assert_eq!(again[0], rows[0]);
    assert_eq!(again[1].seq, 3, "no gap after a repeat");
    assert_eq!(ok(store.unsent_outbox("m", 10).await, "unsent").len(), 3);
}

/// A message marked sent leaves the unsent list but not the unacked one; marked again, it keeps
/// its first time and remote id.
async fn marking_sent_keeps_the_first(store: &dyn Store, token: FencingToken) {
    let sent = ok(
        store
            .mark_outbox_sent("m", token, "b1-0", Some("$remote"), 50)
            .await,
        "sent",
    );
    assert_eq!(sent.sent_at_ms, Some(50));
    assert_eq!(sent.remote_id.as_deref(), Some("$remote"));
    let resent = ok(
        store
            .mark_outbox_sent("m", token, "b1-0", Some("$other"), 60)
            .await,
        "resent",
    );
    assert_eq!(resent, sent, "marking sent twice keeps the first");
    let unsent: Vec<String> = ok(store.unsent_outbox("m", 10).await, "unsent")
        .into_iter()
        .map(|m| m.request_id)
        .collect();
    assert_eq!(unsent, vec!["b1-1", "b2-0"]);
    assert_eq!(ok(store.unacked_outbox("m", 10).await, "unacked").len(), 3);
}

/// A page after a seq: unacknowledged, seq > after, in seq order, at most `limit`.
async fn pages_after_a_seq_hold_the_unacked(store: &dyn Store) {
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 10).await, "after 0")),
        vec![1, 2, 3]
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 1, 10).await, "after 1")),
        vec![2, 3]
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 2).await, "limit 2")),
        vec![1, 2]
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 3, 10).await, "after last")),
        Vec::<i64>::new()
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 0).await, "limit 0")),
        Vec::<i64>::new()
    );
    assert_eq!(
        ok(store.outbox_after("m", 0, 10).await, "whole rows"),
        ok(store.unacked_outbox("m", 10).await, "unacked")
    );
}

/// An ack keeps its first time, leaves the pages, needs no lease (the transport acks while no
/// host holds the Mind) and marks an unsent message sent; unknown ids are not found.
async fn acks_need_no_lease_and_keep_the_first(store: &dyn Store, token: FencingToken) {
    let acked = ok(store.ack_outbox("m", "b1-0", None, 70).await, "ack");
    assert_eq!(acked.acked_at_ms, Some(70));
    assert_eq!(acked.sent_at_ms, Some(50));
    assert_eq!(
        ok(
            store.ack_outbox("m", "b1-0", Some("$late"), 75).await,
            "ack again"
        ),
        acked,
        "acking twice keeps the first"
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 10).await, "acked skipped")),
        vec![2, 3]
    );
    // An ack needs no lease: the transport acks while no host holds the Mind. Acknowledging
    // an unsent message implies it was sent.
    ok(store.release_lease("m", token).await, "release");
    let acked2 = ok(
        store.ack_outbox("m", "b1-1", Some("$event-b1-1"), 80).await,
        "ack unsent, no lease",
    );
    assert_eq!(acked2.sent_at_ms, Some(80));
    assert_eq!(acked2.acked_at_ms, Some(80));
    assert_eq!(acked2.remote_id.as_deref(), Some("$event-b1-1"));
    let token = ok(
        store.acquire_lease("m", "h", 60_000, 90).await,
        "re-acquire",
    )
    .unwrap_or_else(|| panic!("lease refused after release"))
    .token;
    let unacked: Vec<String> = ok(store.unacked_outbox("m", 10).await, "unacked")
        .into_iter()
        .map(|m| m.request_id)
        .collect();
    assert_eq!(unacked, vec!["b2-0"]);
    assert_eq!(ok(store.unacked_outbox("m", 0).await, "limit 0"), vec![]);
    assert_not_found(
        store.mark_outbox_sent("m", token, "nope", None, 1).await,
        "unknown id",
    );
    assert_not_found(
        store.ack_outbox("m", "nope", None, 1).await,
        "unknown id ack",
    );
}
