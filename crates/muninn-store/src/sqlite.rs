//! The SQLite backend: the embedded default, one file in the data directory.
//!
//! ## Durability
//!
//! - `journal_mode=WAL` and group commit: a commit has reached the disk (the WAL is fsynced)
//!   before `commit()` returns, so an acknowledged write survives power loss, not only a
//!   process crash. SQLite runs `synchronous=NORMAL` (commits atomic and ordered, not synced)
//!   and every write transaction then waits, after its `COMMIT` and outside the write lock, for
//!   a shared `fdatasync` of the WAL that began after it (`wal_sync`): concurrent
//!   writers share one fsync instead of queueing behind one each. [`SyncMode::EveryCommit`]
//!   keeps the old way (`synchronous=FULL`, one fsync inside every `COMMIT`) for comparison.
//! - `foreign_keys=ON`, so per-Mind rows cannot outlive or precede their Mind.
//! - The file is created on first open and migrated (see [`MIGRATIONS`]) before anything else.
//!
//! ## Concurrency
//!
//! SQLite has one writer at a time per file. Every write transaction starts with
//! `BEGIN IMMEDIATE`, taking the write lock at once. This process's writers first take turns
//! on a one-permit queue, *before* they take a pooled connection, and give the turn back with
//! the connection when their `COMMIT` returns (before the group commit's fsync). Without it,
//! up to three of the pool's four connections sat in SQLite's busy handler — which sleeps
//! 1 ms … 100 ms and is not woken when the lock frees — holding connections the Mind's reads
//! then queued for: with 500 Minds the measured wait in `BEGIN IMMEDIATE` was 48 s over 9,000
//! writes and the reads' wait for a connection 3,050 s over 10,000 (summed over concurrent
//! waiters); with the queue 1.2 s and 21 s. Another `muninn serve` on the same file still
//! meets the file lock: it waits up to the busy timeout and then gets [`StoreError::Busy`],
//! which is retryable, as does a writer of this process that waited as long for its turn.
//! Readers never block under WAL. Because writes are serialised by the file lock, the lease
//! check, the seq counters and the writes they guard can never interleave with another
//! writer's.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, Sqlite};

use crate::error::{Result, StoreError};
use crate::id_guard::{IdGuard, IdGuardStats};
use crate::marker::{StoreMarker, marker_path};
use crate::startup::{self, StartOptions};
use crate::wal_sync::WalSync;
use std::sync::Arc;

/// The database file's name inside a data directory.
pub const DEFAULT_FILE_NAME: &str = "muninn.db";

/// The SQLite migrations, in order: (version, name, SQL). Append only; never edit a released one.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "turn_keys",
        include_str!("../migrations/sqlite/0002_turn_keys.sql"),
    ),
    (
        3,
        "delivery_context_ledger_events",
        include_str!("../migrations/sqlite/0003_delivery_context_ledger_events.sql"),
    ),
    (
        4,
        "segment_memory",
        include_str!("../migrations/sqlite/0004_segment_memory.sql"),
    ),
    (
        5,
        "ledger_decided",
        include_str!("../migrations/sqlite/0005_ledger_decided.sql"),
    ),
    (
        6,
        "ledger_provider_miss",
        include_str!("../migrations/sqlite/0006_ledger_provider_miss.sql"),
    ),
    (
        7,
        "cursors_failed_sends",
        include_str!("../migrations/sqlite/0007_cursors_failed_sends.sql"),
    ),
    (
        8,
        "counter_floors",
        include_str!("../migrations/sqlite/0008_counter_floors.sql"),
    ),
    (
        9,
        "transcript_keys",
        include_str!("../migrations/sqlite/0009_transcript_keys.sql"),
    ),
    (
        10,
        "transcript_keys_per_role",
        include_str!("../migrations/sqlite/0010_transcript_keys_per_role.sql"),
    ),
];

/// How a SQLite store makes each commit durable (see the module docs); both fsync the WAL
/// before a write returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `synchronous=NORMAL` and a shared fsync after the commit (group commit): the default.
    #[default]
    Grouped,
    /// `synchronous=FULL`: SQLite fsyncs inside every `COMMIT`, under the write lock.
    EveryCommit,
}

/// Work around each write transaction's `COMMIT`: ids reserved before it, durability after.
#[derive(Debug)]
struct SqliteCommit {
    guard: Arc<IdGuard>,
    /// `None` under [`SyncMode::EveryCommit`]: SQLite synced inside the commit.
    wal: Option<Arc<WalSync>>,
}

#[async_trait::async_trait]
impl crate::write::CommitHook<Sqlite> for SqliteCommit {
    async fn before_commit(&self, conn: &mut sqlx::sqlite::SqliteConnection) -> Result<()> {
        crate::write::CommitHook::<Sqlite>::before_commit(self.guard.as_ref(), conn).await
    }

    async fn after_commit(&self) -> Result<()> {
        match &self.wal {
            Some(wal) => wal.wait_durable().await,
            None => Ok(()),
        }
    }
}

/// The store cannot be reached at `path`: a refusal when a store was there before.
fn unavailable(path: &Path, e: sqlx::Error) -> StoreError {
    startup::refusal(
        path,
        StoreError::Unavailable(format!("{}: {e}", path.display())),
    )
}

/// How long a writer waits for another writer's lock before giving up with `Busy`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a serving connection waits for a lock while it is being opened (its `PRAGMA`s),
/// before [`BUSY_TIMEOUT`] applies to it. Opening one normally needs only a shared lock that
/// nothing in WAL mode holds off for long. The one wait seen was a database file emptied under
/// the running host (rewritten whole: truncated, then written): a connection opened in that
/// moment sees zero pages, SQLite deletes the WAL beside them, and the `journal_mode = WAL`
/// pragma then waits for the exclusive lock that the store's live connections (which hold
/// shared locks for as long as they are open) never give up, holding the pending lock that
/// keeps every other new connection from reading. With the full busy timeout that was 10 s in
/// which each call waited out the pool and failed as "pool timed out", the cause unnamed;
/// with this one the opening fails at once with SQLite's `database is locked` and gives its
/// locks back.
const OPEN_BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// The pool that serves the store once the start-up checks are done: each connection opens
/// with [`OPEN_BUSY_TIMEOUT`], then gets [`BUSY_TIMEOUT`] and the id guard's triggers.
async fn serving_pool(options_db: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(BUSY_TIMEOUT)
        .after_connect(|conn, _| {
            Box::pin(async move {
                // The busy timeout its queries get, derived from the constant (a number is
                // all that is spliced in; the unit test
                // `a_serving_connection_waits_the_full_busy_timeout_once_open` reads it back).
                let pragma = format!("PRAGMA busy_timeout = {}", BUSY_TIMEOUT.as_millis());
                sqlx::raw_sql(sqlx::AssertSqlSafe(pragma))
                    .execute(&mut *conn)
                    .await?;
                sqlx::raw_sql(crate::id_guard::TRACK_BUMPS)
                    .execute(&mut *conn)
                    .await
                    .map(drop)
            })
        })
        .connect_with(
            options_db
                .busy_timeout(OPEN_BUSY_TIMEOUT)
                .pragma("temp_store", "MEMORY"),
        )
        .await
}

/// The SQLite store. Cheap to share behind an `Arc`; holds a small connection pool.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
    /// Reserves ids in the identity file before each commit (see [`crate::id_guard`]) and
    /// waits for the commit's fsync after it (see [`crate::wal_sync`]).
    commit: Arc<SqliteCommit>,
    /// One permit: this process's write transactions take turns here, before they take a
    /// pooled connection (see "Concurrency" in the module docs).
    writers: Arc<tokio::sync::Semaphore>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path` and applies pending migrations,
    /// with the start-up checks of [`crate::startup`] and no operator overrides.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(path, StartOptions::default()).await
    }

    /// Opens the database file at `path`: refuses a missing, empty, truncated or corrupt file
    /// where the identity file says a store was, and counters that went back after a clean
    /// stop, unless `options` allow it (see [`crate::startup`]).
    pub async fn open_with(path: impl AsRef<Path>, options: StartOptions) -> Result<SqliteStore> {
        SqliteStore::open_with_sync(path, options, SyncMode::default()).await
    }

    /// [`SqliteStore::open_with`], making commits durable the way `sync` says.
    pub async fn open_with_sync(
        path: impl AsRef<Path>,
        options: StartOptions,
        sync: SyncMode,
    ) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let marker = StoreMarker::read(&marker_path(&path))?;
        startup::before_open(&path, marker.as_ref(), options)?;
        let existed = std::fs::metadata(&path).is_ok_and(|m| m.len() > 0);
        let options_db = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match sync {
                SyncMode::Grouped => SqliteSynchronous::Normal,
                SyncMode::EveryCommit => SqliteSynchronous::Full,
            })
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        // The start-up checks, migrations and repairs run on a pool of their own, closed
        // before the serving pool opens: every serving connection is then made after the
        // migrations, so each can install the id guard's triggers on `counters` when it opens
        // (see `crate::id_guard`), and none can be missing them.
        let startup_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(BUSY_TIMEOUT)
            .connect_with(options_db.clone())
            .await
            .map_err(|e| unavailable(&path, e))?;
        let checked = async {
            if existed {
                startup::quick_check(&startup_pool, &path).await?;
            }
            SqliteStore::migrate(&startup_pool).await?;
            startup::reconcile(&startup_pool, &path, marker, options).await
        };
        let checked = checked.await;
        startup_pool.close().await;
        let guard = match checked {
            Ok(guard) => guard,
            Err(e) => {
                let e = if existed {
                    startup::refusal(&path, e)
                } else {
                    e
                };
                tracing::error!(database = %path.display(), error = %e, "the store was not opened");
                return Err(e);
            }
        };
        let pool = serving_pool(options_db)
            .await
            .map_err(|e| unavailable(&path, e))?;
        let wal = (sync == SyncMode::Grouped).then(|| Arc::new(WalSync::for_database(&path)));
        if let Some(wal) = &wal {
            // The migrations and start-up repairs committed without the barrier: one sync
            // covers them before anything is served.
            wal.wait_durable().await?;
        }
        Ok(SqliteStore {
            pool,
            path,
            commit: Arc::new(SqliteCommit {
                guard: Arc::new(guard),
                wal,
            }),
            writers: Arc::new(tokio::sync::Semaphore::new(1)),
        })
    }

    /// Opens `muninn.db` inside `data_dir` (which must exist).
    pub async fn open_in(data_dir: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open(data_dir.as_ref().join(DEFAULT_FILE_NAME)).await
    }

    /// Opens a `sqlite://path` (or `sqlite:path`) URL.
    pub async fn open_url(url: &str) -> Result<SqliteStore> {
        SqliteStore::open_url_with(url, StartOptions::default()).await
    }

    /// [`SqliteStore::open_url`] with the operator's start-up overrides.
    pub async fn open_url_with(url: &str, start: StartOptions) -> Result<SqliteStore> {
        // Parse only to validate; the path is what we keep.
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::invalid(format!("bad sqlite URL {url:?}: {e}")))?;
        SqliteStore::open_with(options.get_filename(), start).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability settings in force on a pooled connection: `(journal_mode, synchronous)`,
    /// e.g. `("wal", 1)` (1 is `NORMAL`, made durable by group commit; 2 is `FULL`). For
    /// `muninn status` and the tests.
    pub async fn durability(&self) -> Result<(String, i64)> {
        let mut conn = self.pool.acquire().await?;
        let mode: String = sqlx::query("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)?;
        let synchronous: i64 = sqlx::query("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)?;
        Ok((mode, synchronous))
    }

    /// Starts a write transaction holding the database's write lock; its commit first
    /// reserves the ids it issued in the identity file.
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Sqlite>> {
        let hook: Arc<dyn crate::write::CommitHook<Sqlite>> = self.commit.clone();
        let turn = self.writer_turn().await?;
        crate::write::WriteTx::begin(&self.pool, "BEGIN IMMEDIATE", Some(hook), turn).await
    }

    /// Waits for this process's turn to write (see "Concurrency" in the module docs), as long
    /// as a pooled connection may be waited for.
    async fn writer_turn(&self) -> Result<Option<tokio::sync::OwnedSemaphorePermit>> {
        match tokio::time::timeout(BUSY_TIMEOUT, self.writers.clone().acquire_owned()).await {
            Ok(Ok(turn)) => Ok(Some(turn)),
            Ok(Err(_)) => Err(StoreError::Unavailable("the store was closed".into())),
            Err(_) => Err(StoreError::Busy(format!(
                "no turn to write within {} s: this process's writers are queued",
                BUSY_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The identity file beside the database (`store.id`).
    pub fn marker_path(&self) -> &Path {
        self.commit.guard.path()
    }

    /// The WAL fsyncs the group commit has run since the store opened (0 under
    /// [`SyncMode::EveryCommit`], where SQLite syncs inside each commit): the bench's "fsyncs
    /// per turn".
    pub fn fsyncs(&self) -> u64 {
        self.commit.wal.as_ref().map_or(0, |wal| wal.fsyncs())
    }

    /// What the identity file's guard did since the store opened: counters checked before
    /// commits and reservations written (see the private `id_guard` module).
    pub fn id_guard_stats(&self) -> IdGuardStats {
        self.commit.guard.stats()
    }

    /// Applies pending migrations in one `BEGIN IMMEDIATE` transaction, so two processes
    /// opening a new file at once migrate it exactly once (the second sees the first's
    /// `schema_version` rows). Re-opening a current database applies nothing.
    async fn migrate(pool: &SqlitePool) -> Result<()> {
        let mut tx = crate::write::WriteTx::begin(pool, "BEGIN IMMEDIATE", None, None).await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_version (\
             version INTEGER PRIMARY KEY NOT NULL, name TEXT NOT NULL, \
             applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        )
        .execute(&mut *tx)
        .await?;
        crate::sql::migrations::apply(&mut tx, MIGRATIONS).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// What the shared SQL of [`crate::sql`] needs from this store; [`crate::Store`] follows.
impl crate::sql::Backend for SqliteStore {
    type Db = Sqlite;
    const NAME: &'static str = "sqlite";
    fn pool(&self) -> &SqlitePool {
        &self.pool
    }
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Sqlite>> {
        SqliteStore::begin_write(self).await
    }
    /// None: no network lies between this process and its file, and a call that waits on the
    /// write lock is already bounded by the busy timeout. A call cut short here would leave
    /// the connection's worker thread running the statement anyway.
    fn call_timeout(&self) -> Option<std::time::Duration> {
        None
    }
    /// On a clean close: under the write lock, the identity file takes exactly the database's
    /// counters, so the next open can tell lost commits from a crash. A failure is logged: the
    /// file then still bounds every id issued, it only cannot prove a clean stop.
    async fn before_close(&self) {
        let exact = async {
            // No barrier: closing the pool checkpoints the WAL into the database, synced.
            let turn = self.writer_turn().await?;
            let mut tx =
                crate::write::WriteTx::begin(&self.pool, "BEGIN IMMEDIATE", None, turn).await?;
            self.commit.guard.write_exact(&mut tx).await?;
            tx.commit().await
        };
        if let Err(e) = exact.await {
            tracing::warn!(database = %self.path.display(), error = %e,
                "could not record a clean stop in the store's identity file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BUSY_TIMEOUT, SqliteStore};

    /// The short wait is for opening a connection only: once open, its queries wait for a
    /// lock as long as [`BUSY_TIMEOUT`] says (another host's writer, a checkpoint).
    #[tokio::test]
    async fn a_serving_connection_waits_the_full_busy_timeout_once_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("muninn.db"))
            .await
            .unwrap();
        let mut conns = Vec::new();
        for _ in 0..2 {
            conns.push(store.pool.acquire().await.unwrap());
        }
        for conn in &mut conns {
            let ms: i64 = sqlx::Row::get(
                &sqlx::query("PRAGMA busy_timeout")
                    .fetch_one(&mut **conn)
                    .await
                    .unwrap(),
                0,
            );
            assert_eq!(ms, BUSY_TIMEOUT.as_millis() as i64);
        }
    }
}
