//! Ids are never issued twice: every SQLite write transaction, before its `COMMIT`, checks the
//! per-Mind counters against the identity file ([`crate::marker`]) and, when a counter has
//! passed its reservation, reserves the next block there (fsynced) first.
//!
//! The check runs under the database's write lock, so two processes on one file reserve in
//! turn; the file is re-read whenever it changed on disk (another process reserved). A commit
//! that cannot reserve — the directory is read-only, the disk is full — fails loudly instead
//! of issuing an id the file does not cover.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use sqlx::sqlite::SqliteConnection;
use sqlx::{Row, Sqlite};

use crate::error::Result;
use crate::marker::{Counters, StoreMarker};

/// How many ids of one counter a reservation covers: the file is rewritten once per block,
/// and after a crash at most this many ids of each counter are skipped (a gap, never a
/// repeat).
pub const RESERVATION_BLOCK: i64 = 64;

/// The identity file as last read or written, and its on-disk stamp (to notice another
/// process's rewrite).
#[derive(Debug)]
struct Cached {
    marker: StoreMarker,
    stamp: Option<(u64, SystemTime)>,
}

/// Guards one SQLite database's counters with its identity file; see the module docs.
#[derive(Debug)]
pub(crate) struct IdGuard {
    path: PathBuf,
    cached: Mutex<Cached>,
    /// The shared lock that tells later openers this process is running (see
    /// [`crate::startup`]); released when the store is dropped.
    _open_lock: Option<std::fs::File>,
}

/// Every counter in the database: mind → name → value.
pub(crate) async fn read_counters(conn: &mut SqliteConnection) -> Result<Counters> {
    let rows = sqlx::query("SELECT mind_id, name, value FROM counters")
        .fetch_all(&mut *conn)
        .await?;
    let mut counters = Counters::new();
    for row in rows {
        let mind: String = row.try_get("mind_id")?;
        let name: String = row.try_get("name")?;
        let value: i64 = row.try_get("value")?;
        counters.entry(mind).or_default().insert(name, value);
    }
    Ok(counters)
}

fn stamp(path: &std::path::Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

impl IdGuard {
    /// A guard over the file at `path`, which `marker` was just written to.
    pub(crate) fn new(path: PathBuf, marker: StoreMarker) -> IdGuard {
        let stamp = stamp(&path);
        IdGuard {
            path,
            cached: Mutex::new(Cached { marker, stamp }),
            _open_lock: None,
        }
    }

    /// The guard, keeping `lock` held while it lives.
    pub(crate) fn holding(mut self, lock: std::fs::File) -> IdGuard {
        self._open_lock = Some(lock);
        self
    }

    /// The identity file's path.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reserves, if needed, so the file covers `counters`.
    fn cover(&self, counters: &Counters) -> Result<()> {
        let mut cached = self.lock();
        if stamp(&self.path) != cached.stamp
            && let Some(on_disk) = StoreMarker::read(&self.path)?
        {
            cached.marker = on_disk;
        }
        let mut next = cached.marker.clone();
        let mut changed = next.exact;
        next.exact = false;
        for (mind, names) in counters {
            for (name, &value) in names {
                if value > next.get(mind, name) {
                    next.reserved
                        .entry(mind.clone())
                        .or_default()
                        .insert(name.clone(), value + RESERVATION_BLOCK);
                    changed = true;
                }
            }
        }
        if changed {
            next.write(&self.path).inspect_err(|e| {
                tracing::error!(file = %self.path.display(), error = %e,
                    "cannot reserve ids in the store's identity file: the write is refused");
            })?;
            cached.marker = next;
            cached.stamp = stamp(&self.path);
        }
        Ok(())
    }

    /// After a clean close: the file holds exactly the database's counters, so a later open
    /// can tell lost commits from a crash. Called under the write lock.
    pub(crate) async fn write_exact(&self, conn: &mut SqliteConnection) -> Result<()> {
        let counters = read_counters(conn).await?;
        let mut cached = self.lock();
        let mut next = StoreMarker::read(&self.path)?.unwrap_or_else(|| cached.marker.clone());
        next.exact = true;
        next.reserved = counters;
        next.write(&self.path)?;
        cached.marker = next;
        cached.stamp = stamp(&self.path);
        Ok(())
    }
}

#[async_trait::async_trait]
impl crate::write::CommitHook<Sqlite> for IdGuard {
    async fn before_commit(&self, conn: &mut SqliteConnection) -> Result<()> {
        let counters = read_counters(conn).await?;
        self.cover(&counters)
    }
}

/// Counters of `db` below the file's values: what a rollback lost (mind, name, db, file).
pub(crate) fn behind(db: &Counters, marker: &StoreMarker) -> Vec<(String, String, i64, i64)> {
    let mut lost = Vec::new();
    for (mind, names) in &marker.reserved {
        for (name, &value) in names {
            let have = db.get(mind).and_then(|n| n.get(name)).copied().unwrap_or(0);
            if have < value {
                lost.push((mind.clone(), name.clone(), have, value));
            }
        }
    }
    lost
}

/// `a` with every counter raised to at least `b`'s.
pub(crate) fn max_counters(a: &Counters, b: &Counters) -> Counters {
    let mut out: Counters = a.clone();
    for (mind, names) in b {
        let entry: &mut BTreeMap<String, i64> = out.entry(mind.clone()).or_default();
        for (name, &value) in names {
            let v = entry.entry(name.clone()).or_insert(value);
            *v = (*v).max(value);
        }
    }
    out
}

/// Raises the database's counters to `floors`: existing counters are moved up, and a floor
/// is kept for counters not yet created (a Mind of the old store not yet re-created in a fresh
/// one), which the first bump starts above. Run in a write transaction.
pub(crate) async fn apply_floors(
    conn: &mut SqliteConnection,
    floors: &[(String, String, i64, i64)],
) -> Result<()> {
    for (mind, name, _, value) in floors {
        sqlx::query(
            "INSERT INTO counter_floors (mind_id, name, value) VALUES ($1, $2, $3) \
             ON CONFLICT (mind_id, name) DO UPDATE SET value = MAX(value, excluded.value)",
        )
        .bind(mind)
        .bind(name)
        .bind(value)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "UPDATE counters SET value = $3 WHERE mind_id = $1 AND name = $2 AND value < $3",
        )
        .bind(mind)
        .bind(name)
        .bind(value)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
