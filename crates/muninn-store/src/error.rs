//! The store's one error type.
//!
//! Every fallible [`Store`](crate::Store) method returns [`StoreError`]. Each variant says which
//! methods return it and whether retrying can help; [`StoreError::is_retryable`] encodes the latter
//! so the host's retry loop does not have to pattern-match driver errors.

use thiserror::Error;

/// Shorthand for `Result<T, StoreError>`.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in a [`Store`](crate::Store).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A fenced mutator was called with a fencing token that is no longer the Mind's current
    /// lease (another holder acquired it since, or this holder released it). Returned by every
    /// method that takes a [`FencingToken`](crate::FencingToken), checked inside the same
    /// transaction as the write, so nothing was written. **Do not retry**: the caller has lost
    /// the Mind and must stop running it.
    #[error("mind {mind}: fencing token {presented} is stale (current lease token: {current:?})")]
    Fenced {
        /// The Mind whose lease was checked.
        mind: String,
        /// The token the caller presented.
        presented: i64,
        /// The token of the Mind's live lease, if any holder has one.
        current: Option<i64>,
    },

    /// [`Store::record_turn`](crate::Store::record_turn) was given a `turn_key` that an earlier
    /// call already committed (typically a retry after a commit whose acknowledgment was lost).
    /// Nothing was written this time; the earlier commit's effects stand. Not retryable: treat
    /// the turn as recorded and re-read the state.
    #[error("mind {mind}: turn {turn_key} was already recorded")]
    TurnAlreadyRecorded {
        /// The Mind.
        mind: String,
        /// The turn's key.
        turn_key: String,
    },

    /// The named Mind, brief, outbox message or segment does not exist. Returned by lookups that
    /// require an existing row and by unfenced writes to an unknown Mind. Not retryable.
    #[error("{what} not found: {key}")]
    NotFound {
        /// What was looked up (`mind`, `brief`, `outbox message`, `segment`).
        what: &'static str,
        /// The key that was looked up.
        key: String,
    },

    /// The caller broke the contract: a memory note over 1000 bytes, an ack beyond the last
    /// delivered seq, a ledger row for another Mind, a token count beyond `i64`, a brief finished
    /// twice. Nothing was written (the transaction was rolled back). Not retryable.
    #[error("invalid request: {0}")]
    Invalid(String),

    /// The database is momentarily unable to serve the request: a SQLite lock held past the busy
    /// timeout, a PostgreSQL serialization failure or deadlock, a pool timeout. Nothing was
    /// written. **Retry** with backoff.
    #[error("database busy: {0}")]
    Busy(String),

    /// The database cannot be reached or its file cannot be opened (I/O, connection refused,
    /// connection lost mid-transaction), or it has no room (a full disk, a PostgreSQL server out
    /// of resources). Returned by `open` and by any method. **Retry** later;
    /// a write whose commit outcome is unknown is safe to retry only where the method is
    /// idempotent (intake by source id, outbox by request id, ack, lease acquire).
    #[error("database unavailable: {0}")]
    Unavailable(String),

    /// The database was written by a newer muninn (its schema version is above the newest
    /// migration this build knows). Returned by `open`. Not retryable: upgrade muninn.
    #[error("database schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// The version recorded in `schema_version`.
        found: i64,
        /// The newest migration this build carries.
        supported: i64,
    },

    /// A numbered migration failed to apply at open. Nothing was kept: the pending migrations
    /// apply in one transaction. Not retryable without operator attention.
    #[error("migration {version} failed: {message}")]
    Migration {
        /// The migration's number.
        version: i64,
        /// The database's error.
        message: String,
    },

    /// A stored row did not decode (an unknown enum value, malformed JSON). Not retryable.
    #[error("corrupt row: {0}")]
    Corrupt(String),

    /// The storage is not what it was: at start-up, a data directory that held a database (its
    /// identity file `store.id` says so) whose database file is missing, empty, truncated or
    /// corrupt, or whose counters went back (committed writes were lost, e.g. with a deleted
    /// WAL). Returned by the checked open. Not retryable: the operator restores the files or
    /// asks for a fresh store explicitly; continuing silently would reissue seqs and request
    /// ids that were already answered.
    #[error("refusing the store {path}: {problem}; {remedy}")]
    Refused {
        /// The file at fault.
        path: String,
        /// What is wrong with it.
        problem: String,
        /// What the operator can do.
        remedy: String,
    },

    /// Any other database error (constraint violations the API should have prevented, SQL
    /// errors). Not retryable.
    #[error("database error: {0}")]
    Database(String),
}

impl StoreError {
    /// Whether the same call may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Unavailable(_))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> StoreError {
        StoreError::Invalid(message.into())
    }

    pub(crate) fn refused(
        path: &std::path::Path,
        problem: impl Into<String>,
        remedy: impl Into<String>,
    ) -> StoreError {
        StoreError::Refused {
            path: path.display().to_string(),
            problem: problem.into(),
            remedy: remedy.into(),
        }
    }

    pub(crate) fn not_found(what: &'static str, key: impl Into<String>) -> StoreError {
        StoreError::NotFound {
            what,
            key: key.into(),
        }
    }
}

// A stored spelling this build does not know is a corrupt row ("unknown role \"x\"").
impl From<muninn_core::records::UnknownName> for StoreError {
    fn from(error: muninn_core::records::UnknownName) -> StoreError {
        StoreError::Corrupt(error.to_string())
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> StoreError {
        match &error {
            sqlx::Error::PoolTimedOut => StoreError::Busy(error.to_string()),
            sqlx::Error::Io(_) | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
                StoreError::Unavailable(error.to_string())
            }
            sqlx::Error::Database(db) => {
                // SQLite: 5 SQLITE_BUSY, 6 SQLITE_LOCKED, 517 SQLITE_BUSY_SNAPSHOT.
                // PostgreSQL: 40001 serialization_failure, 40P01 deadlock_detected,
                // 55P03 lock_not_available, 57P01 admin_shutdown.
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                match code.as_str() {
                    "5" | "6" | "517" | "40001" | "40P01" | "55P03" => {
                        StoreError::Busy(error.to_string())
                    }
                    // A full disk passes once there is room: SQLite 13 SQLITE_FULL; PostgreSQL
                    // 53100 disk_full and the rest of class 53, insufficient resources. (It was
                    // `Database`, not retryable: an answer whose commit met it was given up
                    // and the provider asked again.)
                    "57P01" | "08000" | "08003" | "08006" | "13" | "53000" | "53100" | "53200"
                    | "53300" => StoreError::Unavailable(error.to_string()),
                    _ => StoreError::Database(error.to_string()),
                }
            }
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(error.to_string())
            }
            _ => StoreError::Database(error.to_string()),
        }
    }
}
