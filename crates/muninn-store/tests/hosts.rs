//! Two PostgreSQL stores on one schema, as two hosts see it: one host's presence lock tells the
//! other it is alive, and its end (the store closed, as a killed process's sessions end) frees
//! the lock at once — a waiter blocked on it returns within milliseconds, not a lease TTL.
//! A wake-up announced through one store reaches the other's listener.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muninn_store::{PostgresStore, Store, Wake, WakeListener};
use muninn_testkit::peers::{postgres_admin, postgres_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_presence_ends_with_the_session_and_wakes_cross_stores() {
    let Some(admin) = postgres_admin("postgres_presence").await else {
        return;
    };
    let schema = format!("muninn_presence_{}", std::process::id());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let url = postgres_url();
    let a: Arc<dyn Store> = Arc::new(
        PostgresStore::connect_in_schema(&url, &schema)
            .await
            .unwrap(),
    );
    let b: Arc<dyn Store> = Arc::new(
        PostgresStore::connect_in_schema(&url, &schema)
            .await
            .unwrap(),
    );
    let holder_a = format!("presence-a-{}", std::process::id());

    // b listens on through the rest, as a host does.
    let _listener = wakes_cross_stores_within_a_second(a.as_ref(), b.as_ref(), &holder_a).await;

    // Presence: a holds it, b sees it alive; a second session cannot take it for a.
    assert!(a.hold_presence(&holder_a).await.unwrap());
    assert_eq!(b.holder_gone(&holder_a).await.unwrap(), Some(false));
    assert!(
        b.hold_presence(&holder_a).await.is_err(),
        "another session cannot hold a live host's presence"
    );
    // Checking did not take the lock: still alive to a, still held by a.
    assert!(a.hold_presence(&holder_a).await.unwrap());

    let waiter = {
        let b = b.clone();
        let holder = holder_a.clone();
        tokio::spawn(async move {
            let gone = b.await_holder_gone(&holder).await.unwrap();
            (gone, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter returned while a lived");
    let closed_at = Instant::now();
    a.close().await;
    let (gone, seen_at) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter saw a's end within 5 s")
        .unwrap();
    assert!(gone);
    let after = seen_at.duration_since(closed_at);
    eprintln!("presence end seen after {after:?}");
    assert!(after < Duration::from_secs(1), "seen after {after:?}");
    assert_eq!(b.holder_gone(&holder_a).await.unwrap(), Some(true));
    b.close().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .execute(&admin)
    .await
    .unwrap();
}

/// Wake-ups: b listens, a announces; then the notification's own latency, announce to receipt,
/// over 50 wake-ups, stays under a second. Returns b's listener.
async fn wakes_cross_stores_within_a_second(
    a: &dyn Store,
    b: &dyn Store,
    holder_a: &str,
) -> WakeListener {
    let mut listener = b.listen_wakes().await.unwrap().expect("postgres listens");
    a.announce_wake("vala", holder_a).await.unwrap();
    let wake = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("a wake-up within 5 s")
        .unwrap();
    assert_eq!(
        wake,
        Some(Wake {
            mind: "vala".into(),
            from: holder_a.to_string()
        })
    );

    // The notification's own latency, announce to receipt, over 50 wake-ups.
    let mut took = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        a.announce_wake("vala", holder_a).await.unwrap();
        let wake = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await;
        assert!(matches!(wake, Ok(Ok(Some(_)))), "{wake:?}");
        took.push(started.elapsed());
    }
    took.sort();
    eprintln!(
        "NOTIFY announce-to-receipt over 50: p50 {:?}, max {:?}",
        took[25], took[49]
    );
    assert!(took[49] < Duration::from_secs(1), "{took:?}");
    listener
}
