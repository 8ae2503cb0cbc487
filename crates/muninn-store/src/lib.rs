//! # muninn-store
//!
//! The durable state of `muninn serve`: Minds, their segments and append-only transcripts, the
//! mailbox of deliveries, the outbox, the ledger, memory notes, the Self's brief queue, leases
//! and per-Mind settings — behind one [`Store`] trait.
//!
//! ## Layout
//!
//! - [`store`] — the [`Store`] trait: the contract every backend keeps.
//! - [`types`] — the rows it holds.
//! - [`error`] — [`StoreError`], with a retry hint per variant.
//! - [`sqlite`] — [`SqliteStore`], the embedded default (one WAL file, every commit fsynced:
//!   group commit, `wal_sync` (private), shares one fsync among concurrent writers).
//! - [`postgres`] — [`PostgresStore`], for several hosts on one database, every call bounded
//!   by a client-side deadline; `schema_check` (private) refuses at open a database missing a
//!   table or column its schema version has; `read` and `write` (private) keep a connection
//!   whose call was cut short out of the pool.
//! - [`startup`] — SQLite's start-up checks: broken storage is refused, not silently replaced.
//! - [`marker`] — the identity file (`store.id`) holding the high-water mark of issued ids;
//!   `id_guard` (private) reserves ids there before each SQLite commit.
//! - [`hosts`] — what hosts sharing a database tell each other: wake-ups (`LISTEN/NOTIFY`) and
//!   presence (session advisory locks), so a dead holder's leases are taken over at once.
//! - `sql` (private) — the SQL both backends share, one file per aggregate (minds, leases,
//!   counters, segments, transcript, mailbox, outbox, ledger, memory, briefs, turn,
//!   migrations); its module docs hold the map from each file to its tables, and
//!   `sql/store_impl.rs` maps every [`Store`] method to the function that runs it.
//!
//! The conformance suite every backend passes is `muninn_testkit::run_conformance`, in the
//! dev-only test kit.
//!
//! ## Invariants
//!
//! - A mutator that returns `Ok` has committed durably; one that returns `Err` wrote nothing —
//!   but for an `Unavailable` whose commit's answer was lost (on PostgreSQL the call's deadline
//!   passed, or the connection dropped, after `COMMIT` was sent): that one may have committed.
//!   Writes a caller retries are keyed so a retry finds them instead of writing them again:
//!   [`Store::record_turn`] by turn key, [`Store::append_transcript_once`] by append key,
//!   [`Store::post_delivery`] by source id.
//! - The transcript, the mailbox and the ledger are append-only; seqs are gap-free per Mind
//!   while the store runs, and never issued twice: after a crash or lost commits (SQLite) a
//!   counter may skip ahead, never back.
//! - Fenced writes are refused once a newer lease token exists, checked in the same transaction.
//! - [`Store::record_turn`] commits a turn's transcript, outbox, ledger, memory, briefs and ack
//!   together or not at all (design §3.6, exactly-once effects).
//! - No clock: every time is a Unix-ms argument. Money is integer micro-dollars, tokens integers,
//!   and the provider's raw usage JSON is stored verbatim.
//! - Each backend has numbered migrations, applied at open and recorded in `schema_version`.

pub mod error;
pub mod hosts;
mod id_guard;
pub mod marker;
pub mod postgres;
mod read;
mod schema_check;
mod sql;
pub mod sqlite;
pub mod startup;
pub mod store;
pub mod types;
mod wal_sync;
mod write;

pub use error::{Result, StoreError};
pub use hosts::{Wake, WakeListener};
pub use id_guard::IdGuardStats;
pub use postgres::{PostgresStore, ShownDatabase};
pub use sqlite::{SqliteStore, SyncMode};
pub use startup::StartOptions;
pub use store::Store;
pub use types::*;

use std::sync::Arc;

/// Opens the store a configuration names: a `postgres://` or `postgresql://` URL selects
/// PostgreSQL; a `sqlite:` URL or anything else is a SQLite file path (a directory means
/// `muninn.db` inside it).
pub async fn open(spec: &str) -> Result<Arc<dyn Store>> {
    open_with(spec, StartOptions::default()).await
}

/// Whether [`open`] takes `spec` for a PostgreSQL URL.
pub(crate) fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

/// [`open`] with the operator's start-up overrides (SQLite only: see [`startup`]).
pub async fn open_with(spec: &str, options: StartOptions) -> Result<Arc<dyn Store>> {
    if is_postgres(spec) {
        Ok(Arc::new(PostgresStore::connect(spec).await?))
    } else if spec.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::open_url_with(spec, options).await?))
    } else if std::path::Path::new(spec).is_dir() {
        let path = std::path::Path::new(spec).join(sqlite::DEFAULT_FILE_NAME);
        Ok(Arc::new(SqliteStore::open_with(path, options).await?))
    } else {
        Ok(Arc::new(SqliteStore::open_with(spec, options).await?))
    }
}
