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
//!
//! ## Every call bounded
//!
//! A lock held elsewhere (an operator's `LOCK TABLE`, a client frozen mid-transaction) would
//! otherwise hold a store call for ever: the Mind's step with it, silently, and — through the
//! lease row a fenced write locks — every other writer of that Mind. So each pooled session
//! runs with [`STATEMENT_TIMEOUT`] (the server cancels a statement, a lock wait included, past
//! it: a retryable `Busy`) and [`IDLE_IN_TRANSACTION_TIMEOUT`] (the server ends a session left
//! idle inside a transaction, releasing its locks). A URL's own `options` naming either setting
//! wins (`?options[statement_timeout]=2s`). Migrations take up to [`MIGRATION_TIMEOUT`]
//! per statement; the session that waits for another host's presence lock
//! (`await_holder_gone`) waits without one, by design.
//!
//! ## No password shown
//!
//! The connect options hold the URL's password; this store's `Debug` names the server, user
//! and database only (sqlx's own `Debug` of the options prints the password).

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

/// How long the server lets one statement of a pooled session run, lock waits included, before
/// cancelling it (see "Every call bounded"): the pool's own acquire timeout, and SQLite's busy
/// timeout.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a pooled session may sit idle inside a transaction before the server ends it. The
/// store never waits on anything but the database inside a transaction, so only a frozen or
/// lost client reaches it.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// The statement timeout of a migration's statements (a column added to a long ledger).
pub const MIGRATION_TIMEOUT: Duration = Duration::from_secs(600);

/// The tables a store at the newest migration has. Checked at open, so a database whose
/// recorded version says they exist but which lacks one (dropped by hand, a partial restore)
/// is refused naming it, instead of failing every call that needs it.
const TABLES: &[&str] = &[
    "minds",
    "counters",
    "leases",
    "settings",
    "segments",
    "transcript",
    "deliveries",
    "mailbox_acks",
    "outbox",
    "ledger",
    "memory_notes",
    "memory_about",
    "briefs",
    "turns",
    "cursors",
    "counter_floors",
];

/// The PostgreSQL store. Cheap to share behind an `Arc`; holds a connection pool.
#[derive(Clone)]
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
        let options = bounded(options);
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
        store.check_tables().await?;
        Ok(store)
    }

    /// Starts a write transaction (READ COMMITTED; fenced writes lock the lease row).
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Postgres>> {
        crate::write::WriteTx::begin(&self.pool, "BEGIN", None, None).await
    }

    /// Applies pending migrations in one transaction under an advisory lock.
    async fn migrate(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // Set first: a host starting while another migrates waits for the lock as long as a
        // migration may take, not the pool's statement timeout.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SET LOCAL statement_timeout = {}",
            MIGRATION_TIMEOUT.as_millis()
        )))
        .execute(&mut *tx)
        .await?;
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

    /// Refuses a database that lacks one of [`TABLES`] (see there).
    async fn check_tables(&self) -> Result<()> {
        let mut missing = Vec::new();
        for table in TABLES {
            let row = sqlx::query("SELECT to_regclass($1) IS NOT NULL AS present")
                .bind(*table)
                .fetch_one(&self.pool)
                .await?;
            if !sqlx::Row::try_get::<bool, _>(&row, "present")? {
                missing.push(*table);
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(StoreError::Incomplete {
            missing: missing.join(", "),
        })
    }
}

/// The connect options with the store's timeouts added where the URL set none (see "Every
/// call bounded").
fn bounded(options: PgConnectOptions) -> PgConnectOptions {
    let given = options.get_options().unwrap_or_default().to_owned();
    let mut options = options;
    for (setting, limit) in [
        ("statement_timeout", STATEMENT_TIMEOUT),
        (
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT,
        ),
    ] {
        if !given.contains(setting) {
            options = options.options([(setting, limit.as_millis())]);
        }
    }
    options
}

/// Where the store is, without the password (see "No password shown").
impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("username", &self.options.get_username())
            .field("database", &self.options.get_database())
            .field("pool", &self.pool)
            .finish_non_exhaustive()
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

#[cfg(test)]
mod tests {
    use super::{MIGRATIONS, TABLES};
    use std::collections::BTreeSet;

    /// The tables the migrations leave, read from their `CREATE TABLE` and `DROP TABLE`
    /// statements in order.
    fn tables_the_migrations_create() -> BTreeSet<String> {
        let mut tables = BTreeSet::new();
        for (_, _, sql) in MIGRATIONS {
            let words: Vec<String> = sql
                .split(|c: char| c.is_whitespace() || c == '(' || c == ';')
                .filter(|w| !w.is_empty())
                .map(str::to_ascii_lowercase)
                .collect();
            for (i, pair) in words.windows(2).enumerate() {
                let create = match (pair[0].as_str(), pair[1].as_str()) {
                    ("create", "table") => true,
                    ("drop", "table") => false,
                    _ => continue,
                };
                let mut rest = words[i + 2..].iter().map(String::as_str);
                let mut name = rest.next().unwrap_or_default();
                if name == "if" {
                    // `IF NOT EXISTS` / `IF EXISTS`
                    name = rest
                        .find(|w| *w == "exists")
                        .and(rest.next())
                        .unwrap_or_default();
                }
                let name = name.trim_matches('"').to_owned();
                if create {
                    tables.insert(name);
                } else {
                    tables.remove(&name);
                }
            }
        }
        tables
    }

    /// The check at open lists every table the migrations create: a migration that adds a
    /// table without adding it to `TABLES` fails here, not in a database missing it.
    #[test]
    fn the_table_check_lists_every_table_the_migrations_create() {
        let listed: BTreeSet<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
        let created = tables_the_migrations_create();
        assert!(created.len() >= 16, "the parse found too few: {created:?}");
        assert_eq!(listed, created);
    }
}
