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

mod disk;
mod hosts;
mod memory_search;
mod pg_faults;
mod silent;
use sqlx::Row;

mod sqlite;
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

/// Mind `m` created in `store` and leased by holder `h` for `ttl_ms` from `now_ms`: the
/// lease's token.
async fn leased_mind(store: &dyn Store, ttl_ms: i64, now_ms: i64) -> FencingToken {
    store.create_mind(&mind("m")).await.unwrap();
    store
        .acquire_lease("m", "h", ttl_ms, now_ms)
        .await
        .unwrap()
        .unwrap()
        .token
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

/// `minds()` answers in byte order of the ids on a PostgreSQL database whose collation is a
/// language's (ICU `en`), as SQLite does: the order must not depend on how the database was
/// created (before, it was the collation's: `_z`, `a`, `B`, `Z`).
#[tokio::test]
async fn postgres_minds_are_in_byte_order_whatever_the_collation() {
    let Some(admin) =
        postgres_admin("postgres_minds_are_in_byte_order_whatever_the_collation").await
    else {
        return;
    };
    let db = format!("muninn_collation_{}", std::process::id());
    let create = format!(
        "CREATE DATABASE {db} TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu \
         ICU_LOCALE 'en' LOCALE 'C.UTF-8'"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(create))
        .execute(&admin)
        .await
        .unwrap();
    let base = postgres_url();
    let (server, _) = base.rsplit_once('/').unwrap();
    let store = PostgresStore::connect(&format!("{server}/{db}"))
        .await
        .unwrap();
    for id in ["_z", "a", "B", "Z"] {
        store.create_mind(&mind(id)).await.unwrap();
    }
    let ids: Vec<String> = store
        .minds()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    store.close().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {db} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    .unwrap();
    assert_eq!(ids, ["B", "Z", "_z", "a"]);
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
    let token = leased_mind(store.as_ref(), 1_000, 0).await;
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
