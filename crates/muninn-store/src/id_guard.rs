//! Ids are never issued twice: every SQLite write transaction, before its `COMMIT`, checks the
//! per-Mind counters it bumped against the identity file ([`crate::marker`]) and, when a
//! counter has passed its reservation, reserves the next block there (fsynced) first.
//!
//! The check runs under the database's write lock, so two processes on one file reserve in
//! turn; the file is re-read whenever it changed on disk (another process reserved). A commit
//! that cannot reserve — the directory is read-only, the disk is full — fails loudly instead
//! of issuing an id the file does not cover.
//!
//! ## Only the counters the transaction bumped
//!
//! The check once read every row of `counters` (one per Mind and counter) before every commit,
//! under the write lock: with 500 Minds that was ~1,500 rows decoded and a copy of the whole
//! reservation map per commit, and the host's commits queued behind it (issue 13: 500 Minds
//! made 45–52 turns/s where 50 made 190). Now every serving connection carries two `TEMP`
//! triggers ([`TRACK_BUMPS`], installed when the pool opens the connection) that copy each
//! counter a statement inserts or raises into the connection's own `temp.counters_bumped`;
//! the check takes and empties that table ([`take_bumped`]), so its cost follows the
//! transaction's own ids, not the number of Minds. The triggers catch every write to
//! `counters`, whichever code path made it; the temporary table is part of the transaction
//! (a rollback restores it with the bumps it recorded) and private to the connection.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Counter values compared with the file before commits, and rewrites of the file for a
    /// new reservation, since the store opened: see [`IdGuardStats`].
    checked: AtomicU64,
    reservations: AtomicU64,
}

/// What the id guard did since the store opened ([`crate::SqliteStore::id_guard_stats`]): the
/// bench's "reservations per turn", and the tests' proof that a commit checks only its own
/// counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdGuardStats {
    /// Counter values compared with the identity file before a commit (one per counter a
    /// transaction bumped).
    pub counters_checked: u64,
    /// Rewrites of the identity file (each fsyncs the file and its directory, under the
    /// write lock): a counter passed its reservation, or the first commit after an open.
    pub reservations: u64,
}

/// Per connection: the table and triggers that record the counters each write transaction
/// bumps (see the module docs). Run on every connection of the serving pool when it opens,
/// after the migrations made `counters`; `temp_store=MEMORY` keeps the table off the disk.
pub(crate) const TRACK_BUMPS: &str = "\
    CREATE TEMP TABLE IF NOT EXISTS counters_bumped (\
        mind_id TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, \
        PRIMARY KEY (mind_id, name)) WITHOUT ROWID; \
    CREATE TEMP TRIGGER IF NOT EXISTS counters_bumped_insert AFTER INSERT ON main.counters \
    BEGIN \
        INSERT INTO counters_bumped (mind_id, name, value) VALUES (new.mind_id, new.name, new.value) \
        ON CONFLICT (mind_id, name) DO UPDATE SET value = excluded.value; \
    END; \
    CREATE TEMP TRIGGER IF NOT EXISTS counters_bumped_update AFTER UPDATE OF value ON main.counters \
    BEGIN \
        INSERT INTO counters_bumped (mind_id, name, value) VALUES (new.mind_id, new.name, new.value) \
        ON CONFLICT (mind_id, name) DO UPDATE SET value = excluded.value; \
    END;";

/// The counters this connection's transaction bumped so far (their latest values), taking
/// them out of `temp.counters_bumped` so the next transaction starts empty.
pub(crate) async fn take_bumped(conn: &mut SqliteConnection) -> Result<Counters> {
    let rows = sqlx::query("DELETE FROM temp.counters_bumped RETURNING mind_id, name, value")
        .fetch_all(&mut *conn)
        .await?;
    counters_from(rows)
}

/// Every counter in the database: mind → name → value.
pub(crate) async fn read_counters(conn: &mut SqliteConnection) -> Result<Counters> {
    let rows = sqlx::query("SELECT mind_id, name, value FROM counters")
        .fetch_all(&mut *conn)
        .await?;
    counters_from(rows)
}

fn counters_from(rows: Vec<sqlx::sqlite::SqliteRow>) -> Result<Counters> {
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
            checked: AtomicU64::new(0),
            reservations: AtomicU64::new(0),
        }
    }

    /// The guard, keeping `lock` held while it lives.
    pub(crate) fn holding(mut self, lock: std::fs::File) -> IdGuard {
        self._open_lock = Some(lock);
        self
    }

    /// What the guard did since the store opened.
    pub(crate) fn stats(&self) -> IdGuardStats {
        IdGuardStats {
            counters_checked: self.checked.load(Ordering::Relaxed),
            reservations: self.reservations.load(Ordering::Relaxed),
        }
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

    /// Reserves, if needed, so the file covers `counters`. The reservation map is copied only
    /// when the file must be rewritten (once per block of a counter), not on every commit.
    fn cover(&self, counters: &Counters) -> Result<()> {
        let mut cached = self.lock();
        if stamp(&self.path) != cached.stamp
            && let Some(on_disk) = StoreMarker::read(&self.path)?
        {
            cached.marker = on_disk;
        }
        let checked = counters.values().map(|names| names.len() as u64).sum();
        self.checked.fetch_add(checked, Ordering::Relaxed);
        let short: Vec<(&String, &String, i64)> = counters
            .iter()
            .flat_map(|(mind, names)| names.iter().map(move |(name, &value)| (mind, name, value)))
            .filter(|&(mind, name, value)| value > cached.marker.get(mind, name))
            .collect();
        // `exact` is cleared by the first commit after a (re)start: ids are being issued.
        if short.is_empty() && !cached.marker.exact {
            return Ok(());
        }
        let mut next = cached.marker.clone();
        next.exact = false;
        for (mind, name, value) in short {
            next.reserved
                .entry(mind.clone())
                .or_default()
                .insert(name.clone(), value + RESERVATION_BLOCK);
        }
        next.write(&self.path).inspect_err(|e| {
            tracing::error!(file = %self.path.display(), error = %e,
                "cannot reserve ids in the store's identity file: the write is refused");
        })?;
        self.reservations.fetch_add(1, Ordering::Relaxed);
        cached.marker = next;
        cached.stamp = stamp(&self.path);
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
        let counters = take_bumped(conn).await?;
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
