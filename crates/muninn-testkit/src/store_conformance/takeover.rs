//! Cases for taking a lease over from a holder proven gone (`take_over_lease`) and for what a
//! backend without cross-host signalling must answer (`announce_wake`, `listen_wakes`,
//! presence): the host relies on both to free a dead host's Minds at once.

use super::{assert_fenced, assert_invalid, assert_not_found, item, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_store::types::*;

/// The host's renewal (`renew_leases`): one call extends exactly the leases the holder holds —
/// live or lapsed — to `now + ttl`, leaves another holder's, a taken-over one and a released
/// one alone (so a fenced token is never revived), and refuses a bad TTL.
pub(super) async fn renew_leases_extends_only_the_holders_leases(factory: &dyn StoreFactory) {
    let store = open(factory, "renew_leases").await;
    // host-a holds a1 and a2 (taken at 10 000 for 60 000 ms), host-b holds b.
    let a1 = mind_with_lease(store.as_ref(), "a1", "host-a").await;
    let a2 = mind_with_lease(store.as_ref(), "a2", "host-a").await;
    let b = mind_with_lease(store.as_ref(), "b", "host-b").await;
    // a3: host-a's, released; a4: host-a's, taken over by host-b.
    let a3 = mind_with_lease(store.as_ref(), "a3", "host-a").await;
    ok(store.release_lease("a3", a3).await, "release a3");
    let a4 = mind_with_lease(store.as_ref(), "a4", "host-a").await;
    let taken = ok(
        store
            .take_over_lease("a4", "host-b", a4, 60_000, 20_000)
            .await,
        "take over a4",
    );
    let taken = taken.unwrap_or_else(|| panic!("take over refused"));
    // Past the leases' expiry (70 000): still host-a's, so renewed.
    let now = 80_000;
    let renewed = ok(
        store.renew_leases("host-a", 30_000, now).await,
        "renew host-a",
    );
    let lease = |mind: &str, holder: &str, token: FencingToken, expires_at_ms: i64| Lease {
        mind: mind.into(),
        holder: holder.into(),
        token,
        expires_at_ms,
    };
    assert_eq!(
        renewed,
        vec![
            lease("a1", "host-a", a1, now + 30_000),
            lease("a2", "host-a", a2, now + 30_000),
        ]
    );
    assert_eq!(
        ok(store.lease("a1").await, "a1"),
        Some(lease("a1", "host-a", a1, now + 30_000))
    );
    assert_eq!(
        ok(store.lease("b").await, "b"),
        Some(lease("b", "host-b", b, 70_000)),
        "another holder's lease is left alone"
    );
    assert_eq!(
        ok(store.lease("a3").await, "a3"),
        None,
        "released stays released"
    );
    assert_eq!(ok(store.lease("a4").await, "a4"), Some(taken.clone()));
    // The taken-over token stays fenced.
    assert_fenced(
        store
            .append_transcript("a4", a4, &[item(Role::Persona, 1)])
            .await,
        "taken-over holder writes after a host renewal",
    );
    assert_eq!(
        ok(
            store.renew_leases("host-c", 30_000, now).await,
            "nothing held"
        ),
        Vec::new()
    );
    assert_invalid(store.renew_leases("host-a", 0, now).await, "zero ttl");
}

/// A live lease taken over by compare-and-set on its token: a new token, the old holder fenced
/// from every write at once (renew, release, transcript), a second taker with the same stale
/// token refused, and nothing for an unknown Mind or a bad TTL.
pub(super) async fn take_over_fences_the_old_holder(factory: &dyn StoreFactory) {
    let store = open(factory, "take_over").await;
    let stale = mind_with_lease(store.as_ref(), "m", "host-a").await;
    // Well inside host-a's lease (taken at 10 000 for 60 000 ms): no TTL to wait out.
    let now = 20_000;
    assert_eq!(
        ok(
            store.acquire_lease("m", "host-b", 60_000, now).await,
            "acquire live"
        ),
        None,
        "a plain acquire is still refused while the lease is live"
    );
    let taken = ok(
        store
            .take_over_lease("m", "host-b", stale, 60_000, now)
            .await,
        "take over",
    );
    let taken = taken.unwrap_or_else(|| panic!("take over with the current token refused"));
    assert_eq!(
        taken,
        Lease {
            mind: "m".into(),
            holder: "host-b".into(),
            token: FencingToken(stale.0 + 1),
            expires_at_ms: now + 60_000,
        }
    );
    assert_eq!(ok(store.lease("m").await, "lease"), Some(taken.clone()));

    // The old holder cannot write, renew or release any more.
    assert_fenced(
        store
            .append_transcript("m", stale, &[item(Role::Persona, 1)])
            .await,
        "stale transcript",
    );
    assert_fenced(
        store.renew_lease("m", stale, 60_000, now + 1).await,
        "stale renew",
    );
    assert_fenced(store.release_lease("m", stale).await, "stale release");

    // A second taker holding the same (now stale) token gets nothing.
    assert_eq!(
        ok(
            store
                .take_over_lease("m", "host-c", stale, 60_000, now + 2)
                .await,
            "second taker"
        ),
        None
    );
    assert_eq!(ok(store.lease("m").await, "unchanged"), Some(taken.clone()));
    // The new holder writes.
    ok(
        store
            .append_transcript("m", taken.token, &[item(Role::Persona, 1)])
            .await,
        "new holder writes",
    );
    assert_not_found(
        store
            .take_over_lease("zz", "host-b", stale, 60_000, now)
            .await,
        "unknown mind",
    );
    assert_invalid(
        store
            .take_over_lease("m", "host-b", taken.token, 0, now)
            .await,
        "zero ttl",
    );
}

/// Whatever the backend can tell about other hosts, it answers consistently: a backend with
/// presence (PostgreSQL) sees its own held presence as alive and an unknown holder as gone; one
/// without (SQLite) says it cannot tell, and its wake-ups are no-ops without a listener.
pub(super) async fn presence_and_wakes_answer_consistently(factory: &dyn StoreFactory) {
    let store = open(factory, "presence").await;
    // Presence locks are database-wide (not per schema): names unique to this run, so suites
    // running at once on one database do not see each other's hosts.
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let me = format!("host-a-{}-{unique}", std::process::id());
    let nobody = format!("host-nobody-{}-{unique}", std::process::id());
    ok(store.announce_wake("m", &me).await, "announce");
    let listener = ok(store.listen_wakes().await, "listen");
    let held = ok(store.hold_presence(&me).await, "hold presence");
    // Holding twice is a health check, not a second lock.
    assert_eq!(ok(store.hold_presence(&me).await, "again"), held);
    let (alive, stranger) = (
        ok(store.holder_gone(&me).await, "own presence"),
        ok(store.holder_gone(&nobody).await, "stranger"),
    );
    if held {
        assert!(listener.is_some(), "a backend with presence has wake-ups");
        assert_eq!((alive, stranger), (Some(false), Some(true)));
        assert!(ok(
            store.await_holder_gone(&nobody).await,
            "await a gone holder"
        ));
    } else {
        assert!(listener.is_none(), "no presence, no listener");
        assert_eq!((alive, stranger), (None, None));
        assert!(!ok(store.await_holder_gone(&me).await, "cannot tell"));
    }
    store.close().await;
}
