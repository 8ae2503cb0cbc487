//! A real PostgreSQL misbehaving under the store, each case in a database of its own (created
//! and dropped by the case): its connections terminated by the server
//! (`pg_terminate_backend`), a lock held by someone else on a table the store needs, a password
//! in the URL, a database whose tables another build left incomplete.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muninn_store::{PostgresStore, Role, Store, StoreError};
use muninn_testkit::peers::{FreshDatabase, postgres_admin};

use crate::{item, mind};

/// Every session on `db` but the caller's, ended by the server.
async fn terminate_all(admin: &sqlx::PgPool, db: &FreshDatabase) -> u64 {
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(db.name())
    .execute(admin)
    .await
    .unwrap()
    .rows_affected()
}

/// Connections the server ends under a running store (a failover, an operator's
/// `pg_terminate_backend`, an idle timeout) are replaced by the store itself: a call that meets
/// a dead connection fails retryable, and the next works on a new one, without reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_terminated_by_the_server_are_replaced() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_kill", "terminated connections") else {
        return;
    };
    let Some(admin) = postgres_admin("terminated connections").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url()).await.unwrap();
    let token = crate::leased_mind(&store, 60_000, 1).await;
    let mut written = 0;
    for round in 0..5 {
        assert!(terminate_all(&admin, &db).await > 0, "round {round}");
        // The first call may meet a dead connection: retryable, and nothing written.
        let mut attempts = 0;
        loop {
            attempts += 1;
            match store.append_transcript("m", token, &[item(round)]).await {
                Ok(_) => break,
                Err(e) => assert!(e.is_retryable(), "round {round}: {e}"),
            }
            assert!(
                attempts < 5,
                "round {round}: still failing after {attempts}"
            );
        }
        written += 1;
    }
    let seqs: Vec<i64> = store
        .transcript_tail("m", Role::Persona, 100)
        .await
        .unwrap()
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(seqs, (1..=written).collect::<Vec<_>>());
    store.close().await;
}

/// A lock someone else holds on a table the store needs (an operator's `LOCK TABLE`, a hung
/// migration, a frozen client mid-transaction) bounds every call: it fails retryable within the
/// statement timeout instead of waiting for ever, and a second host whose acquire came after the
/// lease expired gets the Mind once the lock goes, the first host's retried write refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lock_held_elsewhere_bounds_every_call_and_keeps_one_writer() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_lock", "a lock held elsewhere") else {
        return;
    };
    let url = db.url();
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    a.create_mind(&mind("m")).await.unwrap();
    let lease_a = a.acquire_lease("m", "a", 1_000, 0).await.unwrap().unwrap();

    // Someone locks the transcript in a transaction left open.
    let mut locker = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE transcript IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();

    let started = Instant::now();
    let write = tokio::time::timeout(
        Duration::from_secs(30),
        a.append_transcript("m", lease_a.token, &[item(1)]),
    )
    .await
    .expect("a store call waited 30 s on a lock: it must be bounded");
    let error = write.expect_err("the table is locked");
    assert!(error.is_retryable(), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    // The lease runs out meanwhile: b takes the Mind (the lease row is free: a's transaction
    // ended with its statement).
    let lease_b = tokio::time::timeout(
        Duration::from_secs(30),
        b.acquire_lease("m", "b", 60_000, 5_000),
    )
    .await
    .expect("acquire bounded")
    .unwrap()
    .expect("the expired lease is b's");
    assert!(lease_b.token > lease_a.token);
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();

    // a retries its write: fenced. b writes.
    let retried = a.append_transcript("m", lease_a.token, &[item(2)]).await;
    assert!(
        matches!(retried, Err(StoreError::Fenced { .. })),
        "{retried:?}"
    );
    b.append_transcript("m", lease_b.token, &[item(3)])
        .await
        .unwrap();
    let bodies: Vec<serde_json::Value> = b
        .transcript_tail("m", Role::Persona, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.body)
        .collect();
    assert_eq!(bodies, vec![serde_json::json!({ "n": 3 })]);
    a.close().await;
    b.close().await;
}

/// A password in the URL is never shown: not by the store's `Debug` (an `Arc<dyn Store>` in a
/// struct someone logs with `{:?}`) nor its wake-up listener's, not in its errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_password_in_the_url_is_never_shown() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_secret", "a password in the URL") else {
        return;
    };
    // The machine's cluster trusts loopback, so any password logs in.
    const SECRET: &str = "hunter2-pg-secret";
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:5432/{}", db.name());
    let store = muninn_store::open(&url).await.unwrap();
    let shown = format!("{store:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(
        shown.contains(db.name()),
        "the Debug still says where: {shown}"
    );
    // Nor by the wake-up listener's, which keeps the options to connect again with.
    let listener = store.listen_wakes().await.unwrap().unwrap();
    let shown = format!("{listener:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    drop(listener);
    let unknown = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:5432/{}_missing",
        db.name()
    );
    let error = muninn_store::open(&unknown).await.unwrap_err();
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(SECRET), "{text}");
    }
    store.close().await;
}

/// A database another build left without a table this build's recorded schema version has (a
/// table dropped by hand, a half-restored dump) is refused at open, naming the table, instead
/// of opening and failing on every later call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_missing_table_is_named_at_open() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_table", "a missing table") else {
        return;
    };
    let store = PostgresStore::connect(&db.url()).await.unwrap();
    store.close().await;
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("DROP TABLE leases")
        .execute(&mut conn)
        .await
        .unwrap();
    let error = PostgresStore::connect(&db.url()).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("table leases"), "{text}");
    assert!(!error.is_retryable(), "{error:?}");
}

/// The same for a column: a database whose recorded schema version has a column it lacks (one
/// dropped by hand, a restore of an older dump over a newer version record) is refused at
/// open, naming the table and the column, instead of failing every later call that reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_missing_column_is_named_at_open() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_column", "a missing column") else {
        return;
    };
    let store = PostgresStore::connect(&db.url()).await.unwrap();
    store.close().await;
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("ALTER TABLE ledger DROP COLUMN decided; ALTER TABLE outbox DROP COLUMN failure")
        .execute(&mut conn)
        .await
        .unwrap();
    let error = PostgresStore::connect(&db.url()).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Incomplete { missing }
            if missing == "column outbox.failure, column ledger.decided"),
        "{error:?}"
    );
    assert!(!error.is_retryable(), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("lacks column outbox.failure"), "{text}");
}

use sqlx::Connection;

/// A host opening the store while another host migrates it (the migration lock held, as by a
/// long migration) waits for that migration, as long as one may take, instead of failing at the
/// pool's statement timeout and refusing to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_host_opening_while_another_migrates_waits_for_it() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_migr", "opening while migrating") else {
        return;
    };
    // The store's migration lock key ("muninn" in ASCII), held as a migrating host holds it.
    let mut migrating = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(0x6d75_6e69_6e6e_i64)
        .execute(&mut migrating)
        .await
        .unwrap();
    let opening = tokio::spawn({
        let url = db.url();
        async move { PostgresStore::connect(&url).await }
    });
    // Past the pool's statement timeout (10 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(0x6d75_6e69_6e6e_i64)
        .execute(&mut migrating)
        .await
        .unwrap();
    let store = opening
        .await
        .unwrap()
        .expect("opened once the migration lock was free");
    assert_eq!(
        store.schema_version().await.unwrap(),
        muninn_store::postgres::MIGRATIONS.last().unwrap().0
    );
    store.close().await;
}
