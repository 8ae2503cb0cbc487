//! Leases: acquire, renew, release and expiry, and the fence refusing every fenced mutator once a
//! newer token exists.

use super::{
    assert_fenced, assert_invalid, assert_not_found, brief, delivery, item, ledger_row, mind,
    mind_with_lease, note, ok, open, out,
};
use crate::StoreFactory;
use muninn_store::{Store, types::*};

pub(super) async fn lease_lifecycle(factory: &dyn StoreFactory) {
    let opened = open(factory, "lease_lifecycle").await;
    let store = opened.as_ref();
    let a = step!(a_free_lease_is_acquired(store));
    step!(a_live_lease_is_renewed_only_by_its_holder(store, &a));
    step!(an_expired_or_released_lease_gets_a_newer_token(store, &a));
    store.close().await;
}

/// A Mind's lease starts free and is acquired for its TTL; an unknown Mind's or a zero TTL is
/// refused. Returns it.
async fn a_free_lease_is_acquired(store: &dyn Store) -> Lease {
    ok(store.create_mind(&mind("m")).await, "create");
    assert_eq!(ok(store.lease("m").await, "no lease"), None);
    assert_not_found(
        store.acquire_lease("zz", "a", 1_000, 0).await,
        "unknown mind",
    );
    assert_invalid(store.acquire_lease("m", "a", 0, 0).await, "zero ttl");

    let a = ok(
        store.acquire_lease("m", "host-a", 1_000, 10_000).await,
        "a acquires",
    );
    let a = a.unwrap_or_else(|| panic!("free lease refused"));
    assert_eq!(a.holder, "host-a");
    assert_eq!(a.expires_at_ms, 11_000);
    assert_eq!(ok(store.lease("m").await, "lease"), Some(a.clone()));
    a
}

/// While the lease is live (up to and excluding expiry) another holder is refused; the holder
/// re-acquiring or renewing keeps its token and moves the expiry.
async fn a_live_lease_is_renewed_only_by_its_holder(store: &dyn Store, a: &Lease) {
    // Another holder is refused while the lease is live (up to and excluding expiry).
    assert_eq!(
        ok(
            store.acquire_lease("m", "host-b", 1_000, 10_999).await,
            "b early"
        ),
        None
    );
    // The holder itself re-acquiring is a renewal with the same token.
    let again = ok(
        store.acquire_lease("m", "host-a", 1_000, 10_500).await,
        "a again",
    );
    assert_eq!(again.as_ref().map(|l| l.token), Some(a.token));
    assert_eq!(again.map(|l| l.expires_at_ms), Some(11_500));
    let renewed = ok(
        store.renew_lease("m", a.token, 2_000, 11_000).await,
        "renew",
    );
    assert_eq!(renewed.token, a.token);
    assert_eq!(renewed.expires_at_ms, 13_000);
    assert_eq!(
        ok(
            store.acquire_lease("m", "host-b", 1_000, 12_999).await,
            "b still early"
        ),
        None
    );
}

/// After expiry or release the next acquirer (even the same holder) gets a strictly greater
/// token and fences the old one; an expired lease renewed by its still-current holder keeps
/// its token.
async fn an_expired_or_released_lease_gets_a_newer_token(store: &dyn Store, a: &Lease) {
    // After expiry another holder takes it with a strictly greater token.
    let b = ok(
        store.acquire_lease("m", "host-b", 1_000, 13_000).await,
        "b after expiry",
    );
    let b = b.unwrap_or_else(|| panic!("expired lease refused"));
    assert!(
        b.token > a.token,
        "token must increase: {} -> {}",
        a.token,
        b.token
    );
    assert_fenced(
        store.renew_lease("m", a.token, 1_000, 13_001).await,
        "stale renew",
    );
    assert_fenced(store.release_lease("m", a.token).await, "stale release");

    // Release frees it; the next acquire (even by the same holder) gets a newer token.
    ok(store.release_lease("m", b.token).await, "release");
    assert_eq!(ok(store.lease("m").await, "released"), None);
    assert_fenced(
        store.renew_lease("m", b.token, 1_000, 13_002).await,
        "renew released",
    );
    let b2 = ok(
        store.acquire_lease("m", "host-b", 1_000, 13_003).await,
        "b re-acquires",
    );
    let b2 = b2.unwrap_or_else(|| panic!("released lease refused"));
    assert!(b2.token > b.token);

    // An expired lease renewed by its still-current holder keeps its token.
    let late = ok(
        store.renew_lease("m", b2.token, 1_000, 20_000).await,
        "late renew",
    );
    assert_eq!(late.token, b2.token);
    // Expired and re-acquired by the same holder: a new token (someone may have looked).
    let b3 = ok(
        store.acquire_lease("m", "host-b", 1_000, 30_000).await,
        "same holder after expiry",
    );
    assert!(b3.map(|l| l.token > b2.token).unwrap_or(false));
}

pub(super) async fn fencing_refuses_every_mutator(factory: &dyn StoreFactory) {
    let opened = open(factory, "fencing").await;
    let store = opened.as_ref();
    let stale = mind_with_lease(store, "m", "host-a").await;
    let seg = step!(rows_for_the_stale_holder_to_touch(store, stale));
    // The lease expires and host-b takes it.
    let fresh = ok(
        store.acquire_lease("m", "host-b", 60_000, 100_000).await,
        "b takes over",
    );
    let fresh = fresh.unwrap_or_else(|| panic!("takeover refused")).token;
    assert!(fresh > stale);
    step!(every_fenced_mutator_refuses_a_stale_token(
        store, stale, &seg
    ));
    step!(nothing_the_stale_holder_tried_was_written(store));
    step!(the_transport_and_the_fresh_holder_still_write(store, fresh));
    store.close().await;
}

/// A delivery, a send, a brief, a segment and a transcript item, written while `stale` holds
/// the lease. Returns the segment started.
async fn rows_for_the_stale_holder_to_touch(store: &dyn Store, stale: FencingToken) -> NewSegment {
    // Prepare rows the stale holder will try to touch.
    ok(store.post_delivery("m", &delivery(1)).await, "deliver");
    ok(
        store.enqueue_outbox("m", stale, &[out("b1-0", "hi")]).await,
        "outbox",
    );
    ok(
        store
            .enqueue_brief("m", &brief("do it", BriefOrigin::Operator, 1))
            .await,
        "brief",
    );
    let seg = NewSegment {
        role: Role::Persona,
        started_at_ms: 1,
        rehydration_tokens: 100,
        reason: "cold start".into(),
        session_id: None,
        memory: None,
        spec_digest: None,
    };
    ok(store.start_segment("m", stale, &seg).await, "segment");
    ok(
        store
            .append_transcript("m", stale, &[item(Role::Persona, 1)])
            .await,
        "transcript",
    );
    seg
}

/// Every fenced method refuses a token older than the lease's.
async fn every_fenced_mutator_refuses_a_stale_token(
    store: &dyn Store,
    stale: FencingToken,
    seg: &NewSegment,
) {
    let m = "m";
    assert_fenced(
        store
            .append_transcript(m, stale, &[item(Role::Persona, 2)])
            .await,
        "append",
    );
    assert_fenced(
        store
            .append_transcript_once(m, stale, "k", &item(Role::Persona, 2))
            .await,
        "keyed append",
    );
    assert_fenced(store.ack_through(m, stale, 1).await, "ack");
    assert_fenced(
        store.enqueue_outbox(m, stale, &[out("b1-1", "x")]).await,
        "outbox",
    );
    assert_fenced(
        store.mark_outbox_sent(m, stale, "b1-0", None, 5).await,
        "mark sent",
    );
    assert_fenced(
        store.append_ledger(m, stale, &[ledger_row(m, 1, 1)]).await,
        "ledger",
    );
    assert_fenced(
        store.add_memory(m, stale, &[note(&[], 1, "x", 1)]).await,
        "memory",
    );
    assert_fenced(store.claim_brief(m, stale, 5).await, "claim");
    assert_fenced(
        store
            .finish_brief(m, stale, 1, BriefStatus::Done, "r", 5)
            .await,
        "finish",
    );
    assert_fenced(store.start_segment(m, stale, seg).await, "start segment");
    assert_fenced(
        store
            .set_segment_session(m, stale, Role::Persona, 0, "s")
            .await,
        "set session",
    );
    assert_fenced(
        store.end_segment(m, stale, Role::Persona, 0, 5).await,
        "end segment",
    );
    let turn = TurnRecord {
        transcript: vec![item(Role::Persona, 3)],
        ack_through: Some(1),
        ..TurnRecord::default()
    };
    assert_fenced(store.record_turn(m, stale, &turn).await, "record turn");
    assert_fenced(store.renew_lease(m, stale, 1_000, 100_001).await, "renew");
    assert_fenced(store.release_lease(m, stale).await, "release");
    // An unknown mind has no lease: fenced too.
    assert_fenced(
        store.append_transcript("zz", stale, &[]).await,
        "unknown mind",
    );
}

/// Nothing the stale holder tried was written.
async fn nothing_the_stale_holder_tried_was_written(store: &dyn Store) {
    let m = "m";
    assert_eq!(
        ok(store.transcript_tail(m, Role::Persona, 10).await, "tail").len(),
        1
    );
    assert_eq!(ok(store.ack_position(m).await, "ack"), 0);
    let outbox = ok(store.unacked_outbox(m, 10).await, "outbox");
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox[0].sent_at_ms, None);
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger"),
        vec![]
    );
    assert_eq!(ok(store.memory_newest(m, 10).await, "memory"), vec![]);
    assert_eq!(
        ok(
            store.briefs(m, Some(BriefStatus::Queued), 10).await,
            "briefs"
        )
        .len(),
        1
    );
    assert_eq!(
        ok(store.segments(m, Role::Persona).await, "segments").len(),
        1
    );
    assert_eq!(ok(store.current_segment(m, Role::Persona).await, "seg"), {
        let mut s = ok(store.segments(m, Role::Persona).await, "segments");
        s.pop()
    });
}

/// An outbox ack is not fenced (it comes from the transport, not from a lease holder), and the
/// fresh holder writes on, its seqs continuing without a gap.
async fn the_transport_and_the_fresh_holder_still_write(store: &dyn Store, fresh: FencingToken) {
    let m = "m";
    // An outbox ack is not fenced: it comes from the transport, not from a lease holder.
    let acked = ok(store.ack_outbox(m, "b1-0", None, 5).await, "ack outbox");
    assert_eq!(acked.acked_at_ms, Some(5));

    // The fresh holder writes fine, and the seq continues without a gap.
    let seqs = ok(
        store
            .append_transcript(m, fresh, &[item(Role::Persona, 4)])
            .await,
        "fresh",
    );
    assert_eq!(seqs, vec![2]);
}
