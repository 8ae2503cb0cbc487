//! Minds and their settings, and every method's answer for a Mind that does not exist.

use super::{assert_invalid, assert_not_found, mind, ok, open};
use crate::StoreFactory;
use muninn_core::money::MicroUsd;
use muninn_store::Store;
use muninn_store::types::*;
use serde_json::json;

pub(super) async fn minds(factory: &dyn StoreFactory) {
    let store = open(factory, "minds").await;
    assert_eq!(ok(store.minds().await, "minds"), vec![]);
    let created = ok(store.create_mind(&mind("b")).await, "create b");
    assert_eq!(created, mind("b"));
    ok(store.create_mind(&mind("a")).await, "create a");
    let mut changed = mind("b");
    changed.display_name = "other".into();
    changed.config = json!({});
    assert_eq!(
        ok(store.create_mind(&changed).await, "create b again"),
        mind("b"),
        "creating an existing mind returns it unchanged"
    );
    assert_eq!(ok(store.mind("b").await, "get b"), Some(mind("b")));
    assert_eq!(ok(store.mind("zz").await, "get zz"), None);
    let ids: Vec<String> = ok(store.minds().await, "minds")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, vec!["a", "b"]);
    // By id, byte by byte, on every backend alike: not by the database's collation (a
    // PostgreSQL database in a language's locale sorts `_z` first and `B` after `a`).
    for id in ["_z", "B", "Z"] {
        ok(store.create_mind(&mind(id)).await, "create");
    }
    let ids: Vec<String> = ok(store.minds().await, "minds")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, vec!["B", "Z", "_z", "a", "b"], "in byte order");
    let updated = ok(
        store.update_mind("a", "Alpha", &json!({"x": 1})).await,
        "update",
    );
    assert_eq!(updated.display_name, "Alpha");
    assert_eq!(updated.config, json!({"x": 1}));
    assert_eq!(updated.created_at_ms, 1_000);
    assert_eq!(ok(store.mind("a").await, "get a"), Some(updated));
    assert_not_found(
        store.update_mind("zz", "x", &json!({})).await,
        "update unknown",
    );
    let mut empty = mind("x");
    empty.id = String::new();
    assert_invalid(store.create_mind(&empty).await, "empty id");
    assert!(ok(store.schema_version().await, "schema version") >= 1);
    assert!(!store.backend().is_empty());
    store.close().await;
}

pub(super) async fn settings(factory: &dyn StoreFactory) {
    let store = open(factory, "settings").await;
    ok(store.create_mind(&mind("m")).await, "create");
    assert_eq!(
        ok(store.settings("m").await, "default"),
        MindSettings::default()
    );
    let set = MindSettings {
        spend_cap: Some(MicroUsd(5_000_000)),
        spend_window_ms: Some(86_400_000),
        brake: true,
        turn_limit: Some(4),
    };
    let caps = Caps {
        spend_cap: set.spend_cap,
        spend_window_ms: set.spend_window_ms,
        turn_limit: set.turn_limit,
    };
    ok(store.put_caps("m", &caps, None, 2_000).await, "put caps");
    ok(store.put_brake("m", true, 2_000).await, "put brake");
    assert_eq!(ok(store.settings("m").await, "get"), set);
    ok(
        store.put_caps("m", &Caps::default(), None, 3_000).await,
        "unset caps",
    );
    ok(store.put_brake("m", false, 3_000).await, "release");
    assert_eq!(
        ok(store.settings("m").await, "get again"),
        MindSettings::default()
    );
    assert_not_found(store.settings("zz").await, "settings of unknown");
    caps_and_brake_apart(&*store).await;
    caps_compare_and_set(&*store).await;
    concurrent_caps_writes_expecting_the_same(&*store).await;
    store.close().await;
}

/// The caps and the brake are each written alone: neither write carries (and so can undo) the
/// other, on a Mind with a settings row and on one without.
async fn caps_and_brake_apart(store: &dyn Store) {
    let caps = Caps {
        spend_cap: Some(MicroUsd(7_000_000)),
        spend_window_ms: Some(3_600_000),
        turn_limit: Some(9),
    };
    ok(store.put_brake("m", true, 4_000).await, "brake on");
    ok(store.put_caps("m", &caps, None, 5_000).await, "caps");
    let both = MindSettings {
        spend_cap: caps.spend_cap,
        spend_window_ms: caps.spend_window_ms,
        brake: true,
        turn_limit: caps.turn_limit,
    };
    assert_eq!(ok(store.settings("m").await, "caps kept the brake"), both);
    ok(store.put_brake("m", false, 6_000).await, "brake off");
    assert_eq!(
        ok(store.settings("m").await, "the brake kept the caps"),
        MindSettings {
            brake: false,
            ..both.clone()
        }
    );
    for (id, label) in [("c", "caps first"), ("b", "brake first")] {
        ok(store.create_mind(&mind(id)).await, label);
    }
    ok(
        store.put_caps("c", &caps, None, 7_000).await,
        "caps of a fresh Mind",
    );
    assert!(!ok(store.settings("c").await, "caps first").brake);
    ok(
        store.put_brake("b", true, 7_000).await,
        "brake of a fresh Mind",
    );
    assert_eq!(
        ok(store.settings("b").await, "brake first"),
        MindSettings {
            brake: true,
            ..MindSettings::default()
        }
    );
    assert_not_found(
        store.put_caps("zz", &caps, None, 1).await,
        "caps of unknown",
    );
    assert_not_found(store.put_brake("zz", true, 1).await, "brake of unknown");
}

/// With `expected`, the caps are written only if they are still those; the answer carries the
/// settings the write replaced and left (the brake kept), or the settings as they are.
async fn caps_compare_and_set(store: &dyn Store) {
    ok(store.create_mind(&mind("cas")).await, "create cas");
    let first = Caps {
        turn_limit: Some(3),
        ..Caps::default()
    };
    // A Mind with no settings row has the default caps: expecting them writes.
    let written = ok(
        store
            .put_caps("cas", &first, Some(&Caps::default()), 1_000)
            .await,
        "cas from the defaults",
    );
    let after_first = MindSettings {
        turn_limit: Some(3),
        ..MindSettings::default()
    };
    assert_eq!(
        written,
        CapsWrite::Written {
            before: MindSettings::default(),
            after: after_first.clone(),
        }
    );
    ok(store.put_brake("cas", true, 1_500).await, "brake on");
    let braked = MindSettings {
        brake: true,
        ..after_first
    };
    // Expecting the defaults again: they changed, nothing is written.
    let second = Caps {
        spend_cap: Some(MicroUsd(9)),
        ..Caps::default()
    };
    assert_eq!(
        ok(
            store
                .put_caps("cas", &second, Some(&Caps::default()), 2_000)
                .await,
            "cas from a stale read",
        ),
        CapsWrite::Changed {
            current: braked.clone()
        }
    );
    assert_eq!(ok(store.settings("cas").await, "unchanged"), braked);
    // Expecting what is there writes, and keeps the brake.
    assert_eq!(
        ok(
            store.put_caps("cas", &second, Some(&first), 3_000).await,
            "cas from a fresh read",
        ),
        CapsWrite::Written {
            before: braked,
            after: MindSettings {
                spend_cap: Some(MicroUsd(9)),
                brake: true,
                ..MindSettings::default()
            },
        }
    );
    assert_not_found(
        store.put_caps("zz", &second, Some(&first), 1).await,
        "cas of unknown",
    );
}

/// Eight writes at once, each expecting the same caps, on a Mind without a settings row and then
/// on one with: exactly one is written, and the caps are its.
async fn concurrent_caps_writes_expecting_the_same(store: &dyn Store) {
    ok(store.create_mind(&mind("race")).await, "create race");
    let mut expected = Caps::default();
    for round in 0..2_i64 {
        let attempts = (1..=8_i64).map(|n| {
            let caps = Caps {
                turn_limit: Some(round * 100 + n),
                ..expected.clone()
            };
            let expected = expected.clone();
            async move {
                let outcome = store.put_caps("race", &caps, Some(&expected), n).await;
                (caps, ok(outcome, "concurrent cas"))
            }
        });
        let outcomes = futures_util::future::join_all(attempts).await;
        let written: Vec<&Caps> = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, CapsWrite::Written { .. }))
            .map(|(caps, _)| caps)
            .collect();
        assert_eq!(written.len(), 1, "round {round}: {outcomes:?}");
        let now = Caps::of(&ok(store.settings("race").await, "after the race"));
        assert_eq!(&now, written[0], "round {round}");
        expected = now;
    }
}

pub(super) async fn unknown_mind(factory: &dyn StoreFactory) {
    let store = open(factory, "unknown_mind").await;
    assert_eq!(
        ok(store.transcript_tail("zz", Role::Persona, 5).await, "tail"),
        vec![]
    );
    assert_eq!(
        ok(store.pending_deliveries("zz", 0, 5).await, "pending"),
        vec![]
    );
    assert_eq!(ok(store.ack_position("zz").await, "ack"), 0);
    assert_eq!(ok(store.unsent_outbox("zz", 5).await, "outbox"), vec![]);
    assert_eq!(
        ok(store.outbox_after("zz", 0, 5).await, "outbox after"),
        vec![]
    );
    assert_not_found(store.ack_outbox("zz", "b1-0", None, 1).await, "ack");
    assert_eq!(
        ok(store.spend("zz", 0, i64::MAX).await, "spend"),
        MicroUsd::ZERO
    );
    assert_eq!(ok(store.memory_newest("zz", 5).await, "memory"), vec![]);
    assert_eq!(ok(store.briefs("zz", None, 5).await, "briefs"), vec![]);
    assert_eq!(ok(store.lease("zz").await, "lease"), None);
    assert_eq!(
        ok(store.segments("zz", Role::SelfRole).await, "segments"),
        vec![]
    );
    store.close().await;
}
