//! muninn-store's one integration-test binary.
//!
//! Runs the conformance suite (`muninn_testkit::run_conformance`) against SQLite (a file in a
//! tempdir) and PostgreSQL (each case in its own schema, dropped afterwards), plus checks that
//! only make sense for one backend: durability pragmas, the database-level append-only triggers,
//! refusing a newer schema, and two OS processes contending for one Mind's lease on one SQLite
//! file.
//!
//! PostgreSQL: `MUNINN_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/test`; see
//! `muninn_testkit::peers`). If it cannot be reached the PostgreSQL tests fail (print SKIP and
//! pass only under `MUNINN_SKIP_PEERS=1`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use muninn_store::{
    FencingToken, Mind, NewTranscriptItem, PostgresStore, Role, SqliteStore, Store, StoreError,
    TranscriptKind,
};
use muninn_testkit::peers::{postgres_admin, postgres_url};
use muninn_testkit::{StoreFactory, run_conformance};
use pretty_assertions::assert_eq;

mod hosts;
use sqlx::Row;

mod startup;

// ----- SQLite -----

struct SqliteFactory {
    dir: tempfile::TempDir,
}

#[async_trait]
impl StoreFactory for SqliteFactory {
    async fn open(&self, name: &str) -> muninn_store::Result<Arc<dyn Store>> {
        let path = self.dir.path().join(format!("{name}.db"));
        Ok(Arc::new(SqliteStore::open(path).await?))
    }

    async fn create_at_version(
        &self,
        name: &str,
        version: i64,
        sql: &str,
    ) -> muninn_store::Result<()> {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(self.dir.path().join(format!("{name}.db")))
            .create_if_missing(true)
            .foreign_keys(true);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY NOT NULL, \
             name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        )
        .execute(&pool)
        .await?;
        apply_migrations_through(&pool, muninn_store::sqlite::MIGRATIONS, version).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&pool)
            .await?;
        pool.close().await;
        Ok(())
    }
}

/// Applies `migrations` up to and including `version` on a raw pool, recording each, as the
/// build that stopped at `version` did.
async fn apply_migrations_through<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    migrations: &[(i64, &'static str, &'static str)],
    version: i64,
) -> muninn_store::Result<()>
where
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    assert!(
        migrations.iter().any(|m| m.0 == version),
        "no migration {version}"
    );
    for (number, name, sql) in migrations.iter().filter(|m| m.0 <= version) {
        sqlx::raw_sql(*sql).execute(pool).await?;
        sqlx::query("INSERT INTO schema_version (version, name) VALUES ($1, $2)")
            .bind(*number)
            .bind(*name)
            .execute(pool)
            .await?;
    }
    Ok(())
}

fn print_timings(backend: &str, timings: &[(&str, Duration)], total: Duration) {
    for (name, elapsed) in timings {
        eprintln!("{backend:>8} {name:<40} {:>6} ms", elapsed.as_millis());
    }
    eprintln!("{backend:>8} {:<40} {:>6} ms", "TOTAL", total.as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_conformance() {
    let factory = SqliteFactory {
        dir: tempfile::tempdir().unwrap(),
    };
    let started = Instant::now();
    let timings = run_conformance(&factory).await;
    print_timings("sqlite", &timings, started.elapsed());
}

fn mind(id: &str) -> Mind {
    Mind {
        id: id.into(),
        display_name: id.into(),
        config: serde_json::json!({}),
        created_at_ms: 0,
    }
}

fn ledger_row(mind: &str) -> muninn_core::ledger::LedgerRow {
    muninn_core::ledger::LedgerRow {
        mind: mind.into(),
        role: "persona".into(),
        segment: 0,
        turn: 0,
        at_ms: 1,
        idle_gap_ms: 0,
        model: "sim".into(),
        prefix_tokens: 10,
        rehydration_tokens: 10,
        usage: muninn_core::trace::Usage::default(),
        raw_usage: Some(serde_json::json!({"input_tokens": 10})),
        cost: muninn_core::money::MicroUsd(3),
        predicted_read: 0,
        predicted_write: 10,
        cache_state: "cold".into(),
        miss_cause: Some(muninn_core::ledger::MissCause::ColdStart),
        decision: "append".into(),
        boundary: true,
        events: Vec::new(),
        decided: None,
        provider_miss: None,
    }
}

fn item(n: i64) -> NewTranscriptItem {
    NewTranscriptItem {
        role: Role::Persona,
        segment: 0,
        kind: TranscriptKind::Notice,
        body: serde_json::json!({ "n": n }),
        created_at_ms: n,
    }
}

#[tokio::test]
async fn sqlite_file_is_created_durable_and_append_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = muninn_store::open(dir.path().to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(store.backend(), "sqlite");
    let file = dir.path().join(muninn_store::sqlite::DEFAULT_FILE_NAME);
    assert!(file.exists(), "open on a directory creates muninn.db in it");
    store.create_mind(&mind("m")).await.unwrap();
    let token = store
        .acquire_lease("m", "h", 1_000, 0)
        .await
        .unwrap()
        .unwrap()
        .token;
    store
        .append_transcript("m", token, &[item(1)])
        .await
        .unwrap();
    store
        .append_ledger("m", token, &[ledger_row("m")])
        .await
        .unwrap();

    // A second, raw connection: the store's pragmas are in force and the schema itself refuses
    // to rewrite the transcript and the ledger.
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&file);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(mode, "wal");
    for sql in [
        "UPDATE transcript SET body = '{}'",
        "DELETE FROM transcript",
        "DELETE FROM ledger",
        "UPDATE ledger SET cost_micro_usd = 0",
    ] {
        let error = sqlx::query(sql).execute(&pool).await.unwrap_err();
        assert!(error.to_string().contains("append-only"), "{sql}: {error}");
    }
    let versions: Vec<(i64, String)> = sqlx::query("SELECT version, name FROM schema_version")
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: Vec<(i64, String)> = muninn_store::sqlite::MIGRATIONS
        .iter()
        .map(|(version, name, _)| (*version, name.to_string()))
        .collect();
    assert_eq!(versions, expected, "every migration recorded once");

    // A database from a newer muninn is refused, not silently used.
    sqlx::query("INSERT INTO schema_version (version, name) VALUES (999, 'future')")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    store.close().await;
    match SqliteStore::open(&file).await {
        Err(StoreError::SchemaTooNew {
            found: 999,
            supported,
        }) if Some(supported) == muninn_store::sqlite::MIGRATIONS.last().map(|m| m.0) => {}
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[tokio::test]
async fn sqlite_open_forms_and_durability() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path()).await.unwrap();
    assert_eq!(store.path(), dir.path().join("muninn.db"));
    // WAL, and synchronous = 1 (NORMAL): a commit is on disk when it returns through the group
    // commit's fsync (see `sqlite_group_commit_*`), not SQLite's own.
    assert_eq!(store.durability().await.unwrap(), ("wal".to_string(), 1));
    let url = format!("sqlite://{}", dir.path().join("other.db").display());
    let by_url = muninn_store::open(&url).await.unwrap();
    assert_eq!(
        by_url.schema_version().await.unwrap(),
        store.schema_version().await.unwrap()
    );
    assert!(dir.path().join("other.db").exists());
    let by_path = muninn_store::open(dir.path().join("third.db").to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(by_path.backend(), "sqlite");
    store.close().await;
    by_url.close().await;
    by_path.close().await;
}

/// Group commit on a real file: each of 32 concurrent writes returns only after an fsync of the
/// WAL that completed after the write began, and no write runs more than one. How many they
/// share depends on how long this disk takes to sync against how fast the commits come (a CI
/// run once had every commit find no sync running), so the sharing itself is asserted in
/// `wal_sync`'s unit test, whose sync is held until every commit has happened; the bench prints
/// the fsyncs per turn the real disk gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_group_commit_shares_fsyncs_among_concurrent_writers() {
    const WRITERS: usize = 32;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open_in(dir.path()).await.unwrap());
    store.create_mind(&mind("m")).await.unwrap();
    let token = store
        .acquire_lease("m", "h", 60_000, 0)
        .await
        .unwrap()
        .unwrap()
        .token;
    let before = store.fsyncs();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..WRITERS {
        let store = store.clone();
        tasks.spawn(async move {
            let began = store.fsyncs();
            store
                .append_transcript("m", token, &[item(i as i64)])
                .await
                .unwrap();
            (began, store.fsyncs())
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (began, returned) = done.unwrap();
        assert!(
            returned > began,
            "a write returned without a sync completing after it began ({began} → {returned})"
        );
    }
    let fsyncs = store.fsyncs() - before;
    assert!(
        (1..=WRITERS as u64).contains(&fsyncs),
        "{fsyncs} fsyncs for {WRITERS} concurrent commits"
    );
    let items = store
        .transcript_range("m", Role::Persona, 0, None, 100)
        .await
        .unwrap();
    assert_eq!(items.len(), WRITERS);
    store.close().await;
}

/// Issue 13: this process's writers wait for their turn without a pooled connection, so while
/// the file's write lock is held elsewhere (here a raw connection, as another process would)
/// six writers queue, reads still get connections, and every writer goes through once the lock
/// is free. Before the queue, four writers took the pool's four connections into SQLite's busy
/// handler: the reads waited for one until the pool's 10 s, and the writers behind them failed
/// with `Busy` (this test, run against that code, failed so). Nothing is timed: the pause only
/// lets the writers reach their waits, and the reads must succeed however long they took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writers_queued_behind_the_lock_leave_connections_for_reads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("muninn.db");
    let store = Arc::new(SqliteStore::open(&file).await.unwrap());
    store.create_mind(&mind("m")).await.unwrap();
    let other = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(&file))
        .await
        .unwrap();
    let mut holder = other.acquire().await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..6 {
        let store = store.clone();
        writers.spawn(async move {
            let delivery = muninn_store::NewDelivery {
                room: "#swarm".into(),
                sender: "ari".into(),
                is_direct: false,
                to_you: false,
                text: format!("message {i}"),
                source_id: format!("queued-{i}"),
                received_at_ms: i,
                context: Vec::new(),
            };
            store.post_delivery("m", &delivery).await.map(|p| p.seq)
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..4 {
        let read = store.mind("m").await;
        assert!(
            matches!(read, Ok(Some(_))),
            "a read while writers wait: {read:?}"
        );
    }
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut *holder)
        .await
        .unwrap();
    drop(holder);
    other.close().await;
    let mut seqs = Vec::new();
    while let Some(done) = writers.join_next().await {
        seqs.push(done.unwrap().unwrap());
    }
    seqs.sort();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    store.close().await;
}

/// `SyncMode::EveryCommit` is SQLite's own `synchronous=FULL`, with no barrier of ours.
#[tokio::test]
async fn sqlite_every_commit_mode_syncs_inside_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_sync(
        dir.path().join("full.db"),
        muninn_store::StartOptions::default(),
        muninn_store::SyncMode::EveryCommit,
    )
    .await
    .unwrap();
    assert_eq!(store.durability().await.unwrap(), ("wal".to_string(), 2));
    store.create_mind(&mind("m")).await.unwrap();
    assert_eq!(store.fsyncs(), 0);
    store.close().await;
}

#[tokio::test]
async fn sqlite_migrates_an_older_database_forward() {
    // A database left at migration 1 by an older build gains the later migrations on open,
    // keeping its rows.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let (version, name, sql) = muninn_store::sqlite::MIGRATIONS[0];
    sqlx::raw_sql(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY NOT NULL, name TEXT NOT NULL, \
         applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(sql).execute(&pool).await.unwrap();
    sqlx::query("INSERT INTO schema_version (version, name) VALUES ($1, $2)")
        .bind(version)
        .bind(name)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO minds VALUES ('m', 'M', '{}', 5)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let store = SqliteStore::open(&file).await.unwrap();
    let newest = muninn_store::sqlite::MIGRATIONS.last().unwrap().0;
    assert!(newest >= 2);
    assert_eq!(store.schema_version().await.unwrap(), newest);
    assert_eq!(store.mind("m").await.unwrap().unwrap().created_at_ms, 5);
    store.close().await;
}

// ----- Two OS processes, one SQLite file, one lease -----

const CHILD_DB: &str = "MUNINN_STORE_TEST_CHILD_DB";
const CHILD_NOW: &str = "MUNINN_STORE_TEST_CHILD_NOW";
const CHILD_HOLDER: &str = "MUNINN_STORE_TEST_CHILD_HOLDER";

/// Not a test on its own: the child half of `two_processes_contend_for_one_lease`, run in a
/// separate process of this binary. Without the environment variable it does nothing.
#[tokio::test]
async fn lease_child_process() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    let now: i64 = std::env::var(CHILD_NOW).unwrap().parse().unwrap();
    let holder = std::env::var(CHILD_HOLDER).unwrap();
    let store = SqliteStore::open(PathBuf::from(db)).await.unwrap();
    match store
        .acquire_lease("m", &holder, 60_000, now)
        .await
        .unwrap()
    {
        Some(lease) => {
            store
                .append_transcript("m", lease.token, &[item(now)])
                .await
                .unwrap();
            println!("LEASE-RESULT acquired {}", lease.token);
        }
        None => println!("LEASE-RESULT refused"),
    }
    store.close().await;
}

fn run_child(db: &std::path::Path, holder: &str, now: i64) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lease_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, db)
        .env(CHILD_NOW, now.to_string())
        .env(CHILD_HOLDER, holder)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find_map(|line| line.split_once("LEASE-RESULT ").map(|(_, result)| result))
        .unwrap_or_else(|| panic!("child printed no result: {stdout}"))
        .to_string()
}

#[tokio::test]
async fn two_processes_contend_for_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let store = SqliteStore::open(&db).await.unwrap();
    store.create_mind(&mind("m")).await.unwrap();
    let parent = store
        .acquire_lease("m", "parent", 60_000, 1_000)
        .await
        .unwrap()
        .unwrap();

    // While the parent's lease is live, a second process is refused.
    assert_eq!(run_child(&db, "child", 2_000), "refused");
    store
        .append_transcript("m", parent.token, &[item(1)])
        .await
        .unwrap();

    // After it expires, the second process takes the Mind with a newer token and writes ...
    let taken = run_child(&db, "child", 100_000);
    let child_token: i64 = taken.strip_prefix("acquired ").unwrap().parse().unwrap();
    assert!(FencingToken(child_token) > parent.token);

    // ... and the first process's stale token is refused from then on.
    match store.append_transcript("m", parent.token, &[item(2)]).await {
        Err(StoreError::Fenced {
            presented, current, ..
        }) => {
            assert_eq!(presented, parent.token.0);
            assert_eq!(current, Some(child_token));
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    // A third process is refused while the child's lease is live.
    assert_eq!(run_child(&db, "third", 100_001), "refused");
    let seqs: Vec<i64> = store
        .transcript_tail("m", Role::Persona, 10)
        .await
        .unwrap()
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(seqs, vec![1, 2], "the parent's first write and the child's");
    store.close().await;
}

// ----- PostgreSQL -----

/// Each case gets its own schema, created on first open and dropped by `cleanup`.
struct PostgresFactory {
    admin: sqlx::PgPool,
    prefix: String,
    schemas: Mutex<HashMap<String, String>>,
}

static RUN: AtomicU32 = AtomicU32::new(0);

impl PostgresFactory {
    fn new(admin: sqlx::PgPool) -> PostgresFactory {
        let prefix = format!(
            "muninn_t{}_{}",
            std::process::id(),
            RUN.fetch_add(1, Ordering::Relaxed)
        );
        PostgresFactory {
            admin,
            prefix,
            schemas: Mutex::new(HashMap::new()),
        }
    }

    async fn schema_for(&self, name: &str) -> String {
        let existing = self.schemas.lock().unwrap().get(name).cloned();
        if let Some(schema) = existing {
            return schema;
        }
        let schema = format!("{}_{}", self.prefix, name);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        )))
        .execute(&self.admin)
        .await
        .unwrap();
        self.schemas
            .lock()
            .unwrap()
            .insert(name.to_string(), schema.clone());
        schema
    }

    async fn cleanup(&self) {
        let schemas: Vec<String> = self.schemas.lock().unwrap().values().cloned().collect();
        for schema in schemas {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE"
            )))
            .execute(&self.admin)
            .await
            .unwrap();
        }
    }
}

#[async_trait]
impl StoreFactory for PostgresFactory {
    async fn open(&self, name: &str) -> muninn_store::Result<Arc<dyn Store>> {
        let schema = self.schema_for(name).await;
        Ok(Arc::new(
            PostgresStore::connect_in_schema(&postgres_url(), &schema).await?,
        ))
    }

    async fn create_at_version(
        &self,
        name: &str,
        version: i64,
        sql: &str,
    ) -> muninn_store::Result<()> {
        let schema = self.schema_for(name).await;
        let options = sqlx::postgres::PgConnectOptions::from_str(&postgres_url())?
            .options([("search_path", schema.as_str())]);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE schema_version (version BIGINT PRIMARY KEY NOT NULL, \
             name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CAST(CURRENT_TIMESTAMP AS TEXT))",
        )
        .execute(&pool)
        .await?;
        apply_migrations_through(&pool, muninn_store::postgres::MIGRATIONS, version).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&pool)
            .await?;
        pool.close().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_conformance() {
    let Some(admin) = postgres_admin("postgres_conformance").await else {
        return;
    };
    let factory = PostgresFactory::new(admin);
    let started = Instant::now();
    // Drop the schemas even when a case fails.
    let outcome = tokio::spawn({
        let factory = Arc::new(factory);
        let inner = Arc::clone(&factory);
        async move {
            let result = tokio::spawn(async move { run_conformance(inner.as_ref()).await }).await;
            factory.cleanup().await;
            result
        }
    })
    .await
    .unwrap();
    match outcome {
        Ok(timings) => print_timings("postgres", &timings, started.elapsed()),
        Err(panic) => std::panic::resume_unwind(panic.into_panic()),
    }
}

#[tokio::test]
async fn postgres_schema_is_append_only_and_versioned() {
    let Some(admin) = postgres_admin("postgres_schema_is_append_only_and_versioned").await else {
        return;
    };
    let factory = Arc::new(PostgresFactory::new(admin.clone()));
    let checks = tokio::spawn({
        let factory = Arc::clone(&factory);
        async move { raw_postgres_checks(&factory, &admin).await }
    })
    .await;
    // Drop the schema whether or not the checks passed, then report.
    factory.cleanup().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic.into_panic());
    }
}

async fn raw_postgres_checks(factory: &PostgresFactory, admin: &sqlx::PgPool) {
    let store = factory.open("raw").await.unwrap();
    assert_eq!(store.backend(), "postgres");
    store.create_mind(&mind("m")).await.unwrap();
    let token = store
        .acquire_lease("m", "h", 1_000, 0)
        .await
        .unwrap()
        .unwrap()
        .token;
    store
        .append_transcript("m", token, &[item(1)])
        .await
        .unwrap();
    store
        .append_ledger("m", token, &[ledger_row("m")])
        .await
        .unwrap();
    let schema = factory.schema_for("raw").await;
    for sql in [
        format!("UPDATE {schema}.transcript SET body = '{{}}'"),
        format!("DELETE FROM {schema}.transcript"),
        format!("DELETE FROM {schema}.ledger"),
        format!("UPDATE {schema}.ledger SET cost_micro_usd = 0"),
    ] {
        let result = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(admin)
            .await;
        let error = result.unwrap_err();
        assert!(error.to_string().contains("append-only"), "{sql}: {error}");
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.schema_version (version, name) VALUES (999, 'future')"
    )))
    .execute(admin)
    .await
    .unwrap();
    store.close().await;
    let reopened = PostgresStore::connect_in_schema(&postgres_url(), &schema).await;
    assert!(
        matches!(reopened, Err(StoreError::SchemaTooNew { found: 999, .. })),
        "expected SchemaTooNew, got {reopened:?}"
    );
}

// ----- Recovery -----

/// A small filesystem of its own (tmpfs), unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// A `bytes`-sized tmpfs; `None` after `missing_peer` where mounting is not allowed (not
    /// root), which fails the test unless `MUNINN_SKIP_PEERS=1`.
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            muninn_testkit::peers::missing_peer("a tmpfs mount (the test runs as root on CI)");
            return None;
        }
        Some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A commit that fails on a full disk does not poison the store: once there is room again the
/// very same store writes, without a restart (it used to refuse every later write with
/// "attempted to call begin_with at non-zero transaction depth").
#[tokio::test]
async fn a_store_writes_again_once_a_full_disk_has_room() {
    let Some(disk) = SmallDisk::mount(3 * 1024 * 1024) else {
        return;
    };
    let store = SqliteStore::open(disk.dir.path().join("muninn.db"))
        .await
        .unwrap();
    store.create_mind(&mind("vala")).await.unwrap();
    // Fill the disk, leaving a little room.
    let filler = disk.dir.path().join("filler");
    std::fs::write(&filler, vec![0u8; 1_536 * 1024]).unwrap();
    let delivery = |i: usize| muninn_store::NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("{i} {}", "words to fill the disk ".repeat(4_000)),
        source_id: format!("fill-{i}"),
        received_at_ms: i as i64,
        context: Vec::new(),
    };
    let mut failed = None;
    for i in 0..200 {
        if let Err(e) = store.post_delivery("vala", &delivery(i)).await {
            failed = Some((i, e));
            break;
        }
    }
    let (at, error) = failed.expect("the disk filled up");
    eprintln!("the disk was full at delivery {at}: {error}");
    // Room again: the same store writes, reads back, and issues the next seq.
    std::fs::remove_file(&filler).unwrap();
    let posted = store.post_delivery("vala", &delivery(1_000)).await.unwrap();
    assert!(posted.created);
    assert_eq!(posted.seq, at as i64 + 1, "no seq lost or reissued");
    let lease = store
        .acquire_lease("vala", "host-a", 30_000, 1)
        .await
        .unwrap()
        .unwrap();
    store
        .append_transcript("vala", lease.token, &[item(1)])
        .await
        .unwrap();
    // Closed, not dropped: a dropped pool closes its connections later, and the tmpfs could
    // not be unmounted while they (or the store's lock file) are open.
    store.close().await;
    drop(store);
    drop(disk);
}
