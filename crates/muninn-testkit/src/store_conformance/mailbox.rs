//! The mailbox: idempotent intake by source id, pending deliveries, an ack position that never
//! moves back.

use super::{assert_invalid, assert_not_found, delivery, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_store::{Store, types::*};

pub(super) async fn mailbox(factory: &dyn StoreFactory) {
    let opened = open(factory, "mailbox").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    step!(intake_is_idempotent_by_source_id(store));
    step!(pending_deliveries_read_back_whole(store));
    step!(the_ack_position_never_moves_back(store, token));
    store.close().await;
}

/// Deliveries get gap-free seqs; the same source id again (even with other content) adds
/// nothing and leaves no gap; a delivery to an unknown Mind is refused.
async fn intake_is_idempotent_by_source_id(store: &dyn Store) {
    assert_not_found(
        store.post_delivery("zz", &delivery(1)).await,
        "unknown mind",
    );
    for n in 1..=5 {
        let posted = ok(store.post_delivery("m", &delivery(n)).await, "post");
        assert_eq!(
            posted,
            Posted {
                seq: n,
                created: true
            }
        );
    }
    // Idempotent intake: the same source id (even with other content) adds nothing.
    let mut repeat = delivery(3);
    repeat.text = "changed".into();
    assert_eq!(
        ok(store.post_delivery("m", &repeat).await, "repeat"),
        Posted {
            seq: 3,
            created: false
        }
    );
    // ... and does not leave a gap.
    assert_eq!(
        ok(store.post_delivery("m", &delivery(6)).await, "post 6").seq,
        6
    );
}

/// The pending deliveries come back in seq order, paged, as whole rows.
async fn pending_deliveries_read_back_whole(store: &dyn Store) {
    let pending = ok(store.pending_deliveries("m", 0, 100).await, "pending");
    assert_eq!(
        pending.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    // Whole rows round-trip, mention flag and room history included (the first row has
    // neither, the third both).
    let stored = |n: i64, posted: NewDelivery| Delivery {
        mind: "m".into(),
        seq: n,
        room: posted.room,
        sender: posted.sender,
        is_direct: posted.is_direct,
        to_you: posted.to_you,
        text: posted.text,
        source_id: posted.source_id,
        received_at_ms: posted.received_at_ms,
        context: posted.context,
    };
    assert_eq!(pending[0], stored(1, delivery(1)));
    assert_eq!(pending[2], stored(3, delivery(3)));
    assert!(!pending[0].to_you && pending[0].context.is_empty());
    assert!(pending[2].to_you && pending[2].context.len() == 2);
    assert!(pending[1].is_direct && !pending[2].is_direct);
    let page = ok(store.pending_deliveries("m", 2, 2).await, "page");
    assert_eq!(page.iter().map(|d| d.seq).collect::<Vec<_>>(), vec![3, 4]);
}

/// Acks move the position forward only, within the deliveries there are, and the mailbox's
/// summary follows them.
async fn the_ack_position_never_moves_back(store: &dyn Store, token: FencingToken) {
    assert_eq!(ok(store.ack_position("m").await, "initial ack"), 0);
    assert_eq!(
        ok(store.mailbox("m").await, "mailbox before acks"),
        Mailbox {
            pending: 6,
            oldest_received_at_ms: Some(delivery(1).received_at_ms),
        }
    );
    assert_eq!(ok(store.ack_through("m", token, 4).await, "ack 4"), 4);
    assert_eq!(
        ok(store.mailbox("m").await, "mailbox after ack 4"),
        Mailbox {
            pending: 2,
            oldest_received_at_ms: Some(delivery(5).received_at_ms),
        }
    );
    assert_eq!(
        ok(store.mailbox("nobody").await, "an unknown Mind's mailbox"),
        Mailbox::default()
    );
    assert_eq!(
        ok(store.ack_through("m", token, 2).await, "ack 2"),
        4,
        "never backwards"
    );
    assert_eq!(ok(store.ack_position("m").await, "ack pos"), 4);
    assert_invalid(
        store.ack_through("m", token, 7).await,
        "ack beyond last delivery",
    );
    assert_invalid(store.ack_through("m", token, -1).await, "negative ack");
    assert_eq!(
        ok(store.ack_position("m").await, "ack pos after invalid"),
        4
    );
    assert_eq!(ok(store.ack_through("m", token, 6).await, "ack 6"), 6);
    assert_eq!(
        ok(store.pending_deliveries("m", 6, 10).await, "none left"),
        vec![]
    );
}
