//! The PostgreSQL backend, for several hosts sharing one database.
//!
//! Selected by a `postgres://` URL. Plain TCP (no TLS stack is linked): meant for loopback or a
//! trusted network; put a TLS-terminating proxy in front otherwise.
//!
//! ## Concurrency
//!
//! Transactions run at READ COMMITTED. Every fenced write starts by locking the Mind's lease row
//! (`SELECT … FOR UPDATE`): one Mind's fenced writers are serialised, and an `acquire_lease` by
//! another holder waits for the in-flight write to commit, after which the old token is refused.
//! Unfenced intake (deliveries, operator briefs) serialises per Mind on its counter row.
//! Migrations run under a transaction-scoped advisory lock, so hosts starting together migrate
//! once.
//!
//! The schema lives in the connection's `search_path` (normally `public`); tests give each case
//! its own schema via [`PostgresStore::connect_in_schema`].

use std::str::FromStr;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::error::{Result, StoreError};

/// The PostgreSQL migrations, in order: (version, name, SQL). Append only.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "turn_keys",
        include_str!("../migrations/postgres/0002_turn_keys.sql"),
    ),
    (
        3,
        "delivery_context_ledger_events",
        include_str!("../migrations/postgres/0003_delivery_context_ledger_events.sql"),
    ),
    (
        4,
        "segment_memory",
        include_str!("../migrations/postgres/0004_segment_memory.sql"),
    ),
    (
        5,
        "ledger_decided",
        include_str!("../migrations/postgres/0005_ledger_decided.sql"),
    ),
    (
        6,
        "ledger_provider_miss",
        include_str!("../migrations/postgres/0006_ledger_provider_miss.sql"),
    ),
    (
        7,
        "cursors_failed_sends",
        include_str!("../migrations/postgres/0007_cursors_failed_sends.sql"),
    ),
    (
        8,
        "counter_floors",
        include_str!("../migrations/postgres/0008_counter_floors.sql"),
    ),
];

/// The advisory lock key that serialises migrations ("muninn" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x6d75_6e69_6e6e;

/// The PostgreSQL store. Cheap to share behind an `Arc`; holds a connection pool.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    /// How to open the dedicated sessions of [`crate::hosts`] (presence, listener, watchers).
    pub(crate) options: PgConnectOptions,
    /// This host's presence session, once held (see [`crate::hosts`]).
    pub(crate) presence: crate::hosts::PresenceCell,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`) and applies pending migrations.
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::invalid(format!("bad postgres URL: {e}")))?;
        PostgresStore::connect_with(options).await
    }

    /// Connects with the tables in `schema` (which must exist) instead of the default
    /// `search_path`.
    pub async fn connect_in_schema(url: &str, schema: &str) -> Result<PostgresStore> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::invalid(format!("bad postgres URL: {e}")))?
            .options([("search_path", schema)]);
        PostgresStore::connect_with(options).await
    }

    async fn connect_with(options: PgConnectOptions) -> Result<PostgresStore> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let store = PostgresStore {
            pool,
            options,
            presence: Default::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Starts a write transaction (READ COMMITTED; fenced writes lock the lease row).
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Postgres>> {
        crate::write::WriteTx::begin(&self.pool, "BEGIN", None, None).await
    }

    /// Applies pending migrations in one transaction under an advisory lock.
    async fn migrate(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK_KEY)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_version (\
             version BIGINT PRIMARY KEY NOT NULL, name TEXT NOT NULL, \
             applied_at TEXT NOT NULL DEFAULT CAST(CURRENT_TIMESTAMP AS TEXT))",
        )
        .execute(&mut *tx)
        .await?;
        crate::sql::migrations::apply(&mut tx, MIGRATIONS).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// What the shared SQL of [`crate::sql`] needs from this store; [`crate::Store`] follows.
impl crate::sql::Backend for PostgresStore {
    type Db = Postgres;
    const NAME: &'static str = "postgres";
    fn pool(&self) -> &PgPool {
        &self.pool
    }
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Postgres>> {
        PostgresStore::begin_write(self).await
    }
    /// Nothing to record at close: PostgreSQL keeps its own counters durable.
    async fn before_close(&self) {}
}
