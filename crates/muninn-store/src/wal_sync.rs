//! Group commit for SQLite: many writers' commits made durable by one shared fsync.
//!
//! With `journal_mode=WAL` and `synchronous=FULL` SQLite fsyncs the `-wal` file inside every
//! `COMMIT`, under the write lock: writers queue behind each other's fsyncs, so a host makes at
//! most one commit per fsync (milliseconds each: 9 ms on this machine's disk under load). The store runs `synchronous=NORMAL` instead —
//! a commit is still atomic and ordered (frames are appended to the WAL and the commit frame
//! marks them valid), only not yet on disk — and makes each commit durable *after* it, outside
//! the write lock, through this barrier: the committer waits for an `fdatasync` of the `-wal`
//! file that **began after its `COMMIT` returned**. Concurrent committers share one: the first
//! to arrive leads (runs the sync), the others wait; those that committed before the running
//! sync began ride on it, the rest on the next one, which one of them leads. Under load every
//! fsync covers the commits of everyone who queued during the previous one.
//!
//! ## Why an fsync of our own descriptor is enough
//!
//! - Linux keeps a file's dirty pages per inode (its page cache), not per descriptor:
//!   `fdatasync` on any descriptor of the `-wal` inode writes every page any process or
//!   connection wrote to it before the call, and the size change (`fdatasync` includes the
//!   metadata needed to read the data back). SQLite writes WAL frames with `pwrite`, not
//!   through a memory map, so the pages are in that cache once `COMMIT` returns.
//! - The file is the same inode as long as SQLite keeps it: a WAL *reset* after a checkpoint
//!   rewrites the file from its start in place, and only after that checkpoint copied every
//!   frame into the database and synced the database file (SQLite syncs at each checkpoint
//!   under `NORMAL`), so frames it overwrites are durable elsewhere. Truncation keeps the inode.
//! - SQLite deletes the `-wal` file only when the last connection closes, after a complete
//!   checkpoint (synced); the next connection creates a new inode. So the leader looks the path
//!   up *when its sync starts* and reopens when the inode changed: a commit that went into an
//!   older inode is then already durable in the database file, and a missing file means every
//!   commit was checkpointed. Either way the sync that began after the commit covers it.
//!
//! ## Failure
//!
//! A failed `fdatasync` may have dropped the very pages it could not write (Linux marks them
//! clean), so a later sync succeeding proves nothing. The barrier is then poisoned: the commit
//! that met it and every later one return an error (PostgreSQL stops the server for the same
//! reason); the operator restarts the host, whose start-up checks and identity file see what
//! reached the disk.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Result, StoreError};

/// What makes the WAL durable: an `fdatasync` of the file, or (in tests) a stand-in.
pub(crate) type Syncer = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// The barrier's shared state; see the module docs.
#[derive(Debug, Default)]
struct SyncState {
    /// Syncs begun so far: sync `n` is the `n`-th to start.
    started: u64,
    /// Whether a sync is running now.
    running: bool,
    /// Set by a failed sync: every later commit fails (see "Failure").
    poisoned: Option<String>,
}

/// The durability barrier of one SQLite database; see the module docs.
pub(crate) struct WalSync {
    syncer: Syncer,
    state: Mutex<SyncState>,
    /// The number of the last sync that completed successfully (syncs complete in order: one
    /// runs at a time).
    done: tokio::sync::watch::Sender<u64>,
    /// Syncs run, for the bench's "fsyncs per turn" and the tests.
    fsyncs: AtomicU64,
}

impl std::fmt::Debug for WalSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalSync")
            .field("fsyncs", &self.fsyncs.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl WalSync {
    /// The barrier of the database file at `db_path` (its WAL is `<db_path>-wal`).
    pub(crate) fn for_database(db_path: &std::path::Path) -> WalSync {
        let mut wal = db_path.as_os_str().to_owned();
        wal.push("-wal");
        let file = WalFile {
            path: PathBuf::from(wal),
            open: Mutex::new(None),
        };
        WalSync::with_syncer(Arc::new(move || file.sync()))
    }

    /// A barrier that runs `syncer` for each sync.
    pub(crate) fn with_syncer(syncer: Syncer) -> WalSync {
        WalSync {
            syncer,
            state: Mutex::new(SyncState::default()),
            done: tokio::sync::watch::Sender::new(0),
            fsyncs: AtomicU64::new(0),
        }
    }

    /// Syncs run so far.
    pub(crate) fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once a sync that began after this call began has completed: called right after
    /// a `COMMIT` returned, the commit is then on disk. Starts the sync when none is running.
    /// The sync runs on a blocking thread of its own and publishes its end there, so a caller
    /// that stops waiting (its future dropped) cannot leave the barrier stuck.
    pub(crate) async fn wait_durable(self: &Arc<Self>) -> Result<()> {
        // Subscribed before reading the state, so a sync completing in between is not missed.
        let mut completed = self.done.subscribe();
        // A sync running now may have begun before our commit: only the next one counts.
        let target = self.lock().started + 1;
        loop {
            if *completed.borrow_and_update() >= target {
                return Ok(());
            }
            {
                let mut state = self.lock();
                if let Some(why) = &state.poisoned {
                    return Err(poisoned(why));
                }
                if !state.running {
                    state.running = true;
                    state.started += 1;
                    let (this, number) = (self.clone(), state.started);
                    drop(tokio::task::spawn_blocking(move || this.run_sync(number)));
                }
            }
            // Woken when the running sync ends, well or badly.
            if completed.changed().await.is_err() {
                return Err(StoreError::Unavailable("the store was closed".into()));
            }
        }
    }

    /// Runs sync `number` and publishes its end; a failure poisons the barrier.
    fn run_sync(&self, number: u64) {
        let result = (self.syncer)();
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        {
            let mut state = self.lock();
            state.running = false;
            if let Err(e) = &result {
                tracing::error!(error = %e, "fsync of the SQLite WAL failed; every later write is refused");
                state.poisoned = Some(format!("fsync of the SQLite WAL failed: {e}"));
            }
        }
        // Wakes every waiter either way: on success those it covers return and the others start
        // the next sync; on failure they meet the poison.
        self.done.send_modify(|last| {
            if result.is_ok() {
                *last = (*last).max(number);
            }
        });
    }
}

fn poisoned(why: &str) -> StoreError {
    StoreError::Unavailable(format!("{why}: writes are refused until the host restarts"))
}

/// The `-wal` file, opened on first use and reopened when SQLite replaced it.
struct WalFile {
    path: PathBuf,
    /// The open descriptor and its (device, inode).
    open: Mutex<Option<(File, (u64, u64))>>,
}

impl WalFile {
    /// `fdatasync` of the file the path names now (see the module docs on why that covers
    /// every commit before the call). A missing file has nothing unsynced: SQLite deletes it
    /// only after a synced checkpoint.
    fn sync(&self) -> std::io::Result<()> {
        let named = match std::fs::metadata(&self.path) {
            Ok(meta) => (meta.dev(), meta.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.as_ref().is_none_or(|(_, id)| *id != named) {
            let file = match File::open(&self.path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            let meta = file.metadata()?;
            *open = Some((file, (meta.dev(), meta.ino())));
        }
        match open.as_ref() {
            Some((file, _)) => file.sync_data(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The barrier's contract with a stand-in sync that records when it began, on a clock of
    //! events shared with the "commits".

    use super::*;
    use std::time::Duration;

    /// Each of 16 concurrent committers returns only after a sync that began after its
    /// commit, and they share syncs. The test decides the interleaving itself instead of
    /// leaving it to the scheduler (a loaded machine can delay a committer between its commit
    /// and its wait by more than a sync): it polls each committer's wait once while the first
    /// sync is held, then releases it — so exactly two syncs must serve all 16.
    #[tokio::test]
    async fn every_commit_waits_for_a_sync_begun_after_it_and_syncs_are_shared() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};

        let events = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // (event at which the sync began, event at which it ended)
        let syncs: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
        let syncer: Syncer = {
            let (events, gate, syncs) = (events.clone(), gate.clone(), syncs.clone());
            Arc::new(move || {
                let began = events.fetch_add(1, Ordering::SeqCst);
                // Bounded, so a barrier that never lets the others wait fails, not hangs.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !gate.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let ended = events.fetch_add(1, Ordering::SeqCst);
                syncs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((began, ended));
                Ok(())
            })
        };
        let barrier = Arc::new(WalSync::with_syncer(syncer));
        let mut cx = Context::from_waker(Waker::noop());
        let mut waits = Vec::new();
        for _ in 0..16 {
            let committed = events.fetch_add(1, Ordering::SeqCst);
            let mut wait = Box::pin(barrier.wait_durable());
            // The first starts the (held) sync; the others find it running.
            assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Pending));
            waits.push((committed, wait));
        }
        gate.store(true, Ordering::SeqCst);
        let mut commits = Vec::new();
        for (committed, wait) in waits {
            wait.await.unwrap();
            commits.push((committed, events.fetch_add(1, Ordering::SeqCst)));
        }
        let syncs = syncs.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for (committed, returned) in commits {
            assert!(
                syncs
                    .iter()
                    .any(|&(began, ended)| began > committed && ended < returned),
                "commit at {committed} returned at {returned} without a sync begun after it: {syncs:?}"
            );
        }
        // The first commit's sync, then one for the 15 that committed while it ran.
        assert_eq!(syncs.len(), 2, "{syncs:?}");
        assert_eq!(barrier.fsyncs(), 2);
    }

    /// A failed sync fails its commit and every later one, even if the disk recovers.
    #[tokio::test]
    async fn a_failed_sync_poisons_the_barrier() {
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let syncer: Syncer = {
            let fail = fail.clone();
            Arc::new(move || {
                if fail.swap(false, Ordering::SeqCst) {
                    Err(std::io::Error::other("EIO"))
                } else {
                    Ok(())
                }
            })
        };
        let barrier = Arc::new(WalSync::with_syncer(syncer));
        assert!(barrier.wait_durable().await.is_err());
        assert!(barrier.wait_durable().await.is_err());
        assert_eq!(barrier.fsyncs(), 1);
    }
}
