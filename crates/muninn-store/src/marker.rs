//! The store's identity file (`store.id` beside `muninn.db`): proof that a data directory held a
//! database, and the high-water mark of every id the database ever issued.
//!
//! ## Why a file outside the database
//!
//! A SQLite database can lose committed transactions without noticing: a deleted or truncated
//! WAL rolls back everything not yet checkpointed, a deleted or zero-length `muninn.db` starts
//! an empty store. Its per-Mind counters then go back, and seqs and outbox request ids that
//! were already answered (`m1-1-1-0`) would be issued again (design §3.10). This file survives
//! those losses because it is written on its own, fsynced and renamed into place, *before* any
//! id beyond it is committed: `id_guard` reserves ids in blocks, so the file is
//! rewritten once per block, not once per commit.
//!
//! `exact` is true only after a clean close (every counter is then exactly the database's);
//! after a crash the file says only that no id above `reserved` was issued.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// The identity file's name beside the default database file.
pub const MARKER_FILE_NAME: &str = "store.id";

/// The largest identity file read, bytes (16 MiB): a Mind's counters take some 200 bytes, so
/// this holds tens of thousands of Minds; a larger file is not ours, and is refused rather
/// than read whole.
pub const MARKER_MAX_BYTES: u64 = 16 << 20;

/// Per Mind, per counter (`delivery`, `outbox`, `brief`, `transcript:persona`, …): a value.
pub type Counters = BTreeMap<String, BTreeMap<String, i64>>;

/// The identity file's contents (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreMarker {
    /// A random-enough id given to the store when it was first created; kept across restarts
    /// and across `--fresh-store` (ids continue above the old store's).
    pub instance: String,
    /// True after a clean close: `reserved` is then exactly the database's counters, and a
    /// database whose counters are lower lost committed writes.
    pub exact: bool,
    /// The highest value each counter may have reached (after a clean close: has reached).
    pub reserved: Counters,
}

/// Where the identity file of the database file `db` lives: `store.id` beside `muninn.db`,
/// `<name>.id` beside any other file name (two databases in one directory keep two files).
pub fn marker_path(db: &Path) -> PathBuf {
    let name = db.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if name == crate::sqlite::DEFAULT_FILE_NAME {
        db.with_file_name(MARKER_FILE_NAME)
    } else {
        db.with_file_name(format!("{name}.id"))
    }
}

impl StoreMarker {
    /// A new identity: no ids issued yet.
    pub fn new() -> StoreMarker {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        StoreMarker {
            instance: format!("{nanos:x}-{:x}", std::process::id()),
            exact: true,
            reserved: Counters::new(),
        }
    }

    /// Reads the file; `None` if there is none. A file that does not parse is refused: it is
    /// the only record of which ids were issued. So is one that is not a regular file of at
    /// most [`MARKER_MAX_BYTES`]: a named pipe there was waited on for a writer, for ever,
    /// hanging the store's open.
    pub fn read(path: &Path) -> Result<Option<StoreMarker>> {
        let what = "the store's identity file";
        let text = match muninn_fs::read_text_limited(path, MARKER_MAX_BYTES, what) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "reading {}: {e}",
                    path.display()
                )));
            }
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            StoreError::refused(
                path,
                format!("the store's identity file does not parse ({e})"),
                "restore it from a backup, or start with --fresh-store (which keeps the old files)",
            )
        })
    }

    /// Writes the file atomically and durably: a temporary file, fsynced, renamed over the old
    /// one, and the directory fsynced so the rename itself survives a power loss.
    pub fn write(&self, path: &Path) -> Result<()> {
        let io = |what: &str, e: std::io::Error| {
            StoreError::Unavailable(format!("{what} {}: {e}", path.display()))
        };
        let text = serde_json::to_string(self).map_err(|e| StoreError::Database(e.to_string()))?;
        let tmp = path.with_extension("id.tmp");
        let mut file = std::fs::File::create(&tmp).map_err(|e| io("creating", e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| io("writing", e))?;
        std::fs::rename(&tmp, path).map_err(|e| io("renaming into", e))?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("syncing the directory of", e))?;
        }
        Ok(())
    }

    /// The value reserved for one counter, 0 if none.
    pub fn get(&self, mind: &str, name: &str) -> i64 {
        self.reserved
            .get(mind)
            .and_then(|c| c.get(name))
            .copied()
            .unwrap_or(0)
    }
}

impl Default for StoreMarker {
    fn default() -> StoreMarker {
        StoreMarker::new()
    }
}
