//! `record_turn`: a whole turn committed together, or (failures injected after earlier writes of
//! the same transaction) not at all.

use super::{
    assert_fenced, assert_invalid, delivery, full_turn, ledger_row, mind_with_lease, note, ok,
    open, out,
};
use crate::StoreFactory;
use muninn_store::types::*;
use muninn_store::{Store, StoreError};

pub(super) async fn record_turn_commits_everything(factory: &dyn StoreFactory) {
    let opened = open(factory, "record_turn").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    step!(a_turn_commits_every_part(store, token));
    step!(an_ack_only_or_empty_turn_moves_nothing_back(store, token));
    step!(a_repeated_turn_key_is_refused_whole(store, token));
    step!(a_retried_turns_sends_keep_their_first_rows(store, token));
    store.close().await;
}

/// A full turn writes its transcript items, sends, ledger row, memory note and brief, and moves
/// the ack position, all read back as written.
async fn a_turn_commits_every_part(store: &dyn Store, token: FencingToken) {
    ok(store.post_delivery("m", &delivery(1)).await, "d1");
    ok(store.post_delivery("m", &delivery(2)).await, "d2");
    ok(store.post_delivery("m", &delivery(3)).await, "d3");
    let receipt = ok(
        store
            .record_turn("m", token, &full_turn("m", Some(2)))
            .await,
        "turn",
    );
    assert_eq!(receipt.transcript_seqs, vec![1, 2]);
    assert_eq!(
        receipt
            .outbox
            .iter()
            .map(|o| (o.request_id.as_str(), o.seq))
            .collect::<Vec<_>>(),
        vec![("batch7-0", 1), ("batch7-1", 2)]
    );
    assert_eq!(receipt.ledger_ids.len(), 1);
    assert_eq!(receipt.memory_ids.len(), 1);
    assert_eq!(receipt.brief_seqs, vec![1]);
    assert_eq!(receipt.ack_position, 2);

    let tail = ok(store.transcript_tail("m", Role::Persona, 10).await, "tail");
    assert_eq!(tail.len(), 2);
    assert_eq!(tail[1].kind, TranscriptKind::Reply);
    assert_eq!(
        ok(store.unsent_outbox("m", 10).await, "outbox"),
        receipt.outbox
    );
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].row, ledger_row("m", 5_000, 1_234));
    assert_eq!(ledger[0].id, receipt.ledger_ids[0]);
    assert_eq!(
        ok(store.memory_newest("m", 10).await, "memory")[0].text,
        "Ann said hi"
    );
    assert_eq!(
        ok(store.briefs("m", None, 10).await, "briefs")[0].text,
        "look into the flaky test"
    );
    assert_eq!(ok(store.ack_position("m").await, "ack"), 2);
    assert_eq!(
        ok(store.pending_deliveries("m", 2, 10).await, "pending").len(),
        1
    );
}

/// A turn with nothing but an ack below the position keeps the position; an empty turn records
/// nothing.
async fn an_ack_only_or_empty_turn_moves_nothing_back(store: &dyn Store, token: FencingToken) {
    // A turn with nothing but an ack, and an ack below the position (kept, not moved back).
    let ack_only = TurnRecord {
        ack_through: Some(1),
        ..TurnRecord::default()
    };
    assert_eq!(
        ok(store.record_turn("m", token, &ack_only).await, "ack only").ack_position,
        2
    );
    let empty = ok(
        store.record_turn("m", token, &TurnRecord::default()).await,
        "empty turn",
    );
    assert_eq!(
        empty,
        TurnReceipt {
            ack_position: 2,
            ..TurnReceipt::default()
        }
    );
}

/// The same turn again (a retry after a lost commit acknowledgment) is refused whole.
async fn a_repeated_turn_key_is_refused_whole(store: &dyn Store, token: FencingToken) {
    match store
        .record_turn("m", token, &full_turn("m", Some(3)))
        .await
    {
        Err(StoreError::TurnAlreadyRecorded { turn_key, .. }) => assert_eq!(turn_key, "batch7"),
        other => panic!("repeated turn key: expected TurnAlreadyRecorded, got {other:?}"),
    }
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 10).await, "tail").len(),
        2
    );
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger").len(),
        1
    );
    assert_eq!(ok(store.ack_position("m").await, "ack"), 2);
}

/// A retried turn's sends keep their first rows (idempotent request ids).
async fn a_retried_turns_sends_keep_their_first_rows(store: &dyn Store, token: FencingToken) {
    let retry = TurnRecord {
        outbox: vec![out("batch7-0", "changed"), out("batch8-0", "new")],
        ack_through: Some(3),
        ..TurnRecord::default()
    };
    let receipt = ok(store.record_turn("m", token, &retry).await, "retry");
    assert_eq!(receipt.outbox[0].text, "hi");
    assert_eq!(receipt.outbox[1].seq, 3);
    assert_eq!(receipt.ack_position, 3);
}

pub(super) async fn record_turn_all_or_nothing(factory: &dyn StoreFactory) {
    let store = open(factory, "record_turn_atomic").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    ok(store.post_delivery("m", &delivery(1)).await, "d1");
    ok(store.post_delivery("m", &delivery(2)).await, "d2");

    // Each of these fails after earlier parts of the turn were written in the transaction.
    let mut ack_beyond = full_turn("m", Some(3));
    ack_beyond
        .outbox
        .push(out("batch7-0", "duplicate inside the turn is fine"));
    let mut foreign_ledger = full_turn("m", Some(2));
    foreign_ledger.ledger.push(ledger_row("other", 1, 1));
    let mut long_note = full_turn("m", Some(2));
    long_note.memory.push(note(&[], 1, &"x".repeat(1001), 1));
    let mut overflow = full_turn("m", Some(2));
    overflow.ledger[0].usage.output = u64::MAX;
    for (what, turn) in [
        ("ack beyond the last delivery", ack_beyond),
        ("ledger row of another mind", foreign_ledger),
        ("memory note over 1000 bytes", long_note),
        ("token count beyond i64", overflow),
    ] {
        assert_invalid(store.record_turn("m", token, &turn).await, what);
    }
    // A stale token fails before anything.
    let newer = ok(
        store.acquire_lease("m", "thief", 60_000, 1_000_000).await,
        "steal",
    );
    let newer = newer
        .unwrap_or_else(|| panic!("expired lease not taken"))
        .token;
    assert_fenced(
        store
            .record_turn("m", token, &full_turn("m", Some(2)))
            .await,
        "stale token",
    );

    // Nothing of any failed turn is visible.
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 10).await, "tail"),
        vec![]
    );
    assert_eq!(ok(store.unacked_outbox("m", 10).await, "outbox"), vec![]);
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger"),
        vec![]
    );
    assert_eq!(ok(store.memory_newest("m", 10).await, "memory"), vec![]);
    assert_eq!(ok(store.briefs("m", None, 10).await, "briefs"), vec![]);
    assert_eq!(ok(store.ack_position("m").await, "ack"), 0);

    // And no seq was consumed: the next good turn starts at 1.
    let receipt = ok(
        store
            .record_turn("m", newer, &full_turn("m", Some(2)))
            .await,
        "good turn",
    );
    assert_eq!(receipt.transcript_seqs, vec![1, 2]);
    assert_eq!(receipt.outbox[0].seq, 1);
    assert_eq!(receipt.brief_seqs, vec![1]);
    assert_eq!(receipt.ack_position, 2);
    // The failed attempts did not burn the turn key; the committed one did.
    assert!(matches!(
        store
            .record_turn("m", newer, &full_turn("m", Some(2)))
            .await,
        Err(StoreError::TurnAlreadyRecorded { .. })
    ));
    store.close().await;
}
