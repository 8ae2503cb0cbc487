//! The transcript: append-only, gap-free, ordered seqs per role.

use super::{item, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_store::{Store, types::*};
use serde_json::json;

pub(super) async fn transcript_append_only(factory: &dyn StoreFactory) {
    let opened = open(factory, "transcript").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    let items = step!(appends_get_gap_free_seqs_per_role(store, token));
    step!(items_read_back_whole_by_range(store, &items));
    step!(tails_hold_the_newest_in_order(store));
    step!(keyed_appends_land_once(store, token));
    step!(keys_are_scoped_by_role(store, token));
    store.close().await;
}

/// Appends get gap-free seqs from 1, the Self's its own; an empty append gets none. Returns the
/// first items appended.
async fn appends_get_gap_free_seqs_per_role(
    store: &dyn Store,
    token: FencingToken,
) -> Vec<NewTranscriptItem> {
    let kinds = [
        TranscriptKind::Delivery,
        TranscriptKind::Reply,
        TranscriptKind::Brief,
        TranscriptKind::Result,
        TranscriptKind::Notice,
        TranscriptKind::MemoryFlush,
        TranscriptKind::OutsideEvent,
        TranscriptKind::Other("future_kind".into()),
    ];
    let items: Vec<NewTranscriptItem> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| NewTranscriptItem {
            role: Role::Persona,
            segment: (i / 4) as i64,
            kind: kind.clone(),
            body: json!({"i": i, "unicode": "ünïcødé ✓", "deep": {"a": [1, {"b": null}]}, "big": 9_007_199_254_740_993u64}),
            created_at_ms: 1_000 + i as i64,
        })
        .collect();
    let seqs = ok(store.append_transcript("m", token, &items).await, "append");
    assert_eq!(seqs, (1..=8).collect::<Vec<i64>>());
    // The Self's transcript has its own seqs.
    let self_seqs = ok(
        store
            .append_transcript(
                "m",
                token,
                &[item(Role::SelfRole, 1), item(Role::SelfRole, 2)],
            )
            .await,
        "append self",
    );
    assert_eq!(self_seqs, vec![1, 2]);
    let more = ok(
        store
            .append_transcript("m", token, &[item(Role::Persona, 9)])
            .await,
        "more",
    );
    assert_eq!(more, vec![9]);
    assert_eq!(
        ok(store.append_transcript("m", token, &[]).await, "empty"),
        Vec::<i64>::new()
    );
    items
}

/// Every kind and body comes back whole, in seq order, windowed and limited.
async fn items_read_back_whole_by_range(store: &dyn Store, items: &[NewTranscriptItem]) {
    let all = ok(
        store
            .transcript_range("m", Role::Persona, 1, None, 100)
            .await,
        "range",
    );
    assert_eq!(all.len(), 9);
    for (i, stored) in all.iter().take(8).enumerate() {
        assert_eq!(stored.seq, i as i64 + 1);
        assert_eq!(stored.mind, "m");
        assert_eq!(stored.role, Role::Persona);
        assert_eq!(stored.kind, items[i].kind);
        assert_eq!(stored.body, items[i].body);
        assert_eq!(stored.segment, items[i].segment);
        assert_eq!(stored.created_at_ms, items[i].created_at_ms);
    }
    let window = ok(
        store
            .transcript_range("m", Role::Persona, 3, Some(6), 100)
            .await,
        "window",
    );
    assert_eq!(
        window.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    let limited = ok(
        store.transcript_range("m", Role::Persona, 3, None, 2).await,
        "limited",
    );
    assert_eq!(
        limited.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![3, 4]
    );
}

/// A tail holds a role's newest items, oldest first.
async fn tails_hold_the_newest_in_order(store: &dyn Store) {
    let tail = ok(store.transcript_tail("m", Role::Persona, 3).await, "tail");
    assert_eq!(
        tail.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    let self_tail = ok(
        store.transcript_tail("m", Role::SelfRole, 10).await,
        "self tail",
    );
    assert_eq!(
        self_tail.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 0).await, "tail 0"),
        vec![]
    );
}

/// An item appended under a key lands once: the same key again adds nothing and answers the
/// first seq (a retry after a lost commit answer); another key appends; the Self's keyed item
/// takes the Self's next seq.
async fn keyed_appends_land_once(store: &dyn Store, token: FencingToken) {
    let first = item(Role::Persona, 10);
    let appended = ok(
        store
            .append_transcript_once("m", token, "delivery m-1-1 #1", &first)
            .await,
        "keyed",
    );
    assert_eq!(
        appended,
        Appended {
            seq: 10,
            created: true
        }
    );
    let again = ok(
        store
            .append_transcript_once("m", token, "delivery m-1-1 #1", &first)
            .await,
        "keyed again",
    );
    assert_eq!(
        again,
        Appended {
            seq: 10,
            created: false
        }
    );
    let other = ok(
        store
            .append_transcript_once("m", token, "delivery m-1-1 #2", &item(Role::Persona, 11))
            .await,
        "another key",
    );
    assert_eq!(
        other,
        Appended {
            seq: 11,
            created: true
        }
    );
    let brief = ok(
        store
            .append_transcript_once("m", token, "brief 1", &item(Role::SelfRole, 3))
            .await,
        "keyed self",
    );
    assert_eq!(
        brief,
        Appended {
            seq: 3,
            created: true
        }
    );
    let tail = ok(store.transcript_tail("m", Role::Persona, 3).await, "tail");
    assert_eq!(
        tail.iter()
            .map(|t| (t.seq, t.body.clone()))
            .collect::<Vec<_>>(),
        vec![
            (9, item(Role::Persona, 9).body),
            (10, first.body),
            (11, item(Role::Persona, 11).body)
        ]
    );
}

/// A key names an item of one role: the same key used by the other role appends that role's
/// item (its own next seq) instead of answering the first role's seq, and each role's retry
/// then answers its own record. Answering another role's seq would make a retry skip an
/// append that never happened — the item lost, exactly-once broken.
async fn keys_are_scoped_by_role(store: &dyn Store, token: FencingToken) {
    let persona = item(Role::Persona, 12);
    let self_item = item(Role::SelfRole, 4);
    let persona_first = ok(
        store
            .append_transcript_once("m", token, "shared key", &persona)
            .await,
        "persona under the key",
    );
    let self_first = ok(
        store
            .append_transcript_once("m", token, "shared key", &self_item)
            .await,
        "self under the same key",
    );
    let persona_again = ok(
        store
            .append_transcript_once("m", token, "shared key", &persona)
            .await,
        "persona retry",
    );
    let self_again = ok(
        store
            .append_transcript_once("m", token, "shared key", &self_item)
            .await,
        "self retry",
    );
    assert_eq!(
        [persona_first, self_first, persona_again, self_again],
        [
            Appended {
                seq: 12,
                created: true
            },
            Appended {
                seq: 4,
                created: true
            },
            Appended {
                seq: 12,
                created: false
            },
            Appended {
                seq: 4,
                created: false
            },
        ]
    );
    let self_tail = ok(store.transcript_tail("m", Role::SelfRole, 1).await, "tail");
    assert_eq!(
        self_tail
            .iter()
            .map(|t| (t.seq, t.body.clone()))
            .collect::<Vec<_>>(),
        vec![(4, self_item.body)]
    );
}

/// A Mind with one keyed Persona item, as migration 9 left it (keys by Mind alone).
const KEYS_AT_SCHEMA_9: &str = "\
INSERT INTO minds (id, display_name, config, created_at_ms) VALUES ('m', 'M', '{}', 1);
INSERT INTO counters (mind_id, name, value) VALUES ('m', 'transcript:persona', 1);
INSERT INTO transcript (mind_id, role, seq, segment, kind, body, created_at_ms) \
VALUES ('m', 'persona', 1, 0, 'delivery', '{\"n\":1}', 5);
INSERT INTO transcript_keys (mind_id, append_key, role, seq) VALUES ('m', 'k', 'persona', 1);
";

/// A key recorded before keys were per role still answers its role's retry after the
/// migration, and no longer the other role's append.
pub(super) async fn transcript_keys_from_schema_9_migrate_per_role(factory: &dyn StoreFactory) {
    ok(
        factory
            .create_at_version("schema_9", 9, KEYS_AT_SCHEMA_9)
            .await,
        "create at schema 9",
    );
    let opened = open(factory, "schema_9").await;
    let store = opened.as_ref();
    let token = match ok(store.acquire_lease("m", "h", 60_000, 10_000).await, "lease") {
        Some(lease) => lease.token,
        None => panic!("the migrated Mind's lease was refused"),
    };
    let retry = ok(
        store
            .append_transcript_once("m", token, "k", &item(Role::Persona, 1))
            .await,
        "persona retry",
    );
    let other_role = ok(
        store
            .append_transcript_once("m", token, "k", &item(Role::SelfRole, 1))
            .await,
        "self under the old key",
    );
    assert_eq!(
        [retry, other_role],
        [
            Appended {
                seq: 1,
                created: false
            },
            Appended {
                seq: 1,
                created: true
            },
        ]
    );
    store.close().await;
}
