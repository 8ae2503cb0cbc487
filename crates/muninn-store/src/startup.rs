//! SQLite at start-up: refuse storage that is not what it was, unless the operator says so.
//!
//! A data directory that held a store keeps its identity file (`store.id`, see
//! [`crate::marker`]). At open:
//!
//! 1. With the identity file present, a missing or zero-length `muninn.db` is refused (an empty
//!    store would reissue every seq and request id).
//! 2. The database is opened, `PRAGMA quick_check`ed and migrated; a file that is not a
//!    database, or is truncated or corrupt, is refused with SQLite's own words.
//! 3. Counters are compared with the identity file. After a clean close the file is exact, and
//!    a counter below it means committed writes were lost (a deleted or truncated WAL): refused.
//!    After a crash the file only bounds what was issued: counters are raised to it, so a few
//!    ids are skipped and none repeats.
//!
//! [`StartOptions::fresh_store`] moves the old files aside (never deletes them) and starts an
//! empty store whose counters begin above the old identity file's; [`StartOptions::accept_rollback`]
//! continues on a database that lost commits, its counters raised past every id issued.

use std::path::{Path, PathBuf};

use sqlx::SqlitePool;

use crate::error::{Result, StoreError};
use crate::id_guard::{IdGuard, apply_floors, behind, max_counters, read_counters};
use crate::marker::{StoreMarker, marker_path};

/// What the operator allows at start-up (`muninn serve --fresh-store`, `--accept-rollback`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// Move the existing database files aside and start an empty store (ids continue above the
    /// old store's).
    pub fresh_store: bool,
    /// Continue on a database whose counters went back (lost commits), raising them past every
    /// id the identity file says was issued.
    pub accept_rollback: bool,
}

const REMEDY: &str = "restore the database (with its -wal file) from a backup, or start with \
     `muninn serve --fresh-store`, which moves the old files aside and starts an empty store \
     whose ids continue above the old one's";

/// The WAL and shared-memory files beside `db`.
fn companions(db: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [db.to_path_buf(), with("-wal"), with("-shm")]
}

/// Before connecting: moves the old files aside for a fresh store, or refuses a missing or
/// empty database in a directory whose identity file says it held one.
pub(crate) fn before_open(
    db: &Path,
    marker: Option<&StoreMarker>,
    options: StartOptions,
) -> Result<()> {
    if options.fresh_store {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        for file in companions(db) {
            if file.exists() {
                let mut aside = file.clone().into_os_string();
                aside.push(format!(".aside-{stamp}"));
                std::fs::rename(&file, &aside).map_err(|e| {
                    StoreError::Unavailable(format!("moving {} aside: {e}", file.display()))
                })?;
                tracing::warn!(file = %file.display(), moved_to = %PathBuf::from(&aside).display(),
                    "fresh store: the old file was moved aside");
            }
        }
        return Ok(());
    }
    let Some(marker) = marker else {
        return Ok(());
    };
    let held = format!(
        "its identity file {} says this place held store {}",
        marker_path(db).display(),
        marker.instance
    );
    match std::fs::metadata(db) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::refused(
            db,
            format!("the database file is missing, but {held}"),
            REMEDY,
        )),
        Ok(meta) if meta.len() == 0 => Err(StoreError::refused(
            db,
            format!("the database file is empty (0 bytes), but {held}"),
            REMEDY,
        )),
        _ => Ok(()),
    }
}

/// `PRAGMA quick_check`: "ok", or the first problems SQLite found.
pub(crate) async fn quick_check(pool: &SqlitePool, db: &Path) -> Result<()> {
    let rows: Vec<(String,)> = sqlx::query_as("PRAGMA quick_check(5)")
        .fetch_all(pool)
        .await?;
    let found: Vec<String> = rows.into_iter().map(|(line,)| line).collect();
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    Err(StoreError::refused(
        db,
        format!("the integrity check failed: {}", found.join("; ")),
        REMEDY,
    ))
}

/// An error from opening, checking or migrating an existing file: a file that is not a
/// database, or is malformed, becomes a refusal naming it; anything else (busy, permissions,
/// I/O) stays what it is — nothing says the file itself is broken.
pub(crate) fn refusal(db: &Path, error: StoreError) -> StoreError {
    let text = error.to_string();
    let broken = ["not a database", "malformed", "corrupt"]
        .iter()
        .any(|sign| text.contains(sign));
    if broken && !matches!(error, StoreError::Refused { .. }) {
        return StoreError::refused(db, format!("the database cannot be read ({text})"), REMEDY);
    }
    error
}

/// After migrating: compares the counters with the identity file (see the module docs),
/// raises them where needed, writes the file, and returns the guard for later commits.
pub(crate) async fn reconcile(
    pool: &SqlitePool,
    db: &Path,
    marker: Option<StoreMarker>,
    options: StartOptions,
) -> Result<IdGuard> {
    let path = marker_path(db);
    let (lock, alone) = hold_open_lock(&path)?;
    let mut conn = pool.acquire().await?;
    sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    let result = reconcile_locked(&mut conn, db, &path, marker, options, alone).await;
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = sqlx::raw_sql(end).execute(&mut *conn).await;
    if ended.is_err() {
        drop(conn.detach());
    }
    let guard = result?;
    ended?;
    Ok(guard.holding(lock))
}

/// Takes a shared lock on `<identity file>.lock` for as long as the store is open, and says
/// whether this process is alone (it could take the lock exclusively first). Alone, an
/// unclean identity file means the last process crashed; with another process running, the
/// file is unclean because that process is live, and its counters are the truth.
fn hold_open_lock(marker: &Path) -> Result<(std::fs::File, bool)> {
    let mut name = marker.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            StoreError::refused(
                &path,
                format!("the store's lock file cannot be opened ({e})"),
                "make the data directory writable",
            )
        })?;
    let io =
        |e: std::io::Error| StoreError::Unavailable(format!("locking {}: {e}", path.display()));
    let alone = match file.try_lock() {
        Ok(()) => {
            // Another process opening in this instant may also find itself alone: both then
            // raise counters, which only skips ids.
            file.unlock().map_err(io)?;
            true
        }
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    };
    file.lock_shared().map_err(io)?;
    Ok((file, alone))
}

async fn reconcile_locked(
    conn: &mut sqlx::SqliteConnection,
    db: &Path,
    path: &Path,
    marker: Option<StoreMarker>,
    options: StartOptions,
    alone: bool,
) -> Result<IdGuard> {
    let counters = read_counters(conn).await?;
    let marker = marker.unwrap_or_default();
    // Not alone and unclean: a live process holds the file's reservations; nothing was lost.
    let lost = if alone || marker.exact {
        behind(&counters, &marker)
    } else {
        Vec::new()
    };
    if !lost.is_empty() {
        let shown: Vec<String> = lost
            .iter()
            .take(4)
            .map(|(mind, name, have, was)| format!("{mind} {name} {have} < {was}"))
            .collect();
        let list = shown.join(", ");
        if marker.exact && !options.fresh_store && !options.accept_rollback {
            return Err(StoreError::refused(
                db,
                format!(
                    "committed writes were lost since the last clean stop (counters went \
                     back: {list}), e.g. a deleted or truncated WAL"
                ),
                "restore the database with its -wal file from a backup, or start with \
                 `muninn serve --accept-rollback` to continue with ids above every one \
                 issued, or --fresh-store",
            ));
        }
        tracing::warn!(
            database = %db.display(),
            counters = %list,
            clean_stop = marker.exact,
            "raising counters to the identity file's so no id is issued twice"
        );
        apply_floors(conn, &lost).await?;
    }
    let mut next = marker;
    next.exact = false;
    next.reserved = max_counters(&next.reserved, &read_counters(conn).await?);
    next.write(path).map_err(|e| {
        StoreError::refused(
            path,
            format!("the store's identity file cannot be written ({e})"),
            "make the data directory writable and give it free space",
        )
    })?;
    Ok(IdGuard::new(path.to_path_buf(), next))
}
