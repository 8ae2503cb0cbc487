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

    /// The database's recorded schema version says this build's tables and columns exist, but
    /// some do not (dropped by hand, a partial restore, another program's database). Returned
    /// by `open` on PostgreSQL. Not retryable: the operator restores them or points muninn at
    /// the right database.
    #[error(
        "the database lacks {missing}, which its schema version has: restore them, or use a \
         database muninn created"
    )]
    Incomplete {
        /// What is missing, comma-separated: `table briefs`, `column ledger.decided`.
        missing: String,
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
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                database_error(&code, error.to_string())
            }
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(error.to_string())
            }
            _ => StoreError::Database(error.to_string()),
        }
    }
}

/// A database's error by its code. SQLite reports *extended* result codes
/// (`sqlite3_extended_errcode`: 261 `SQLITE_BUSY_RECOVERY`, 773 `SQLITE_BUSY_TIMEOUT`, 262
/// `SQLITE_LOCKED_SHAREDCACHE`, …) whose low byte is the primary code, so it is classified by
/// that byte: every kind of busy or locked is a lock to wait out, not a failure for good.
/// SQLite's codes are numbers below 10,000; PostgreSQL's SQLSTATEs are five characters (some
/// all digits), read as they are.
fn database_error(code: &str, message: String) -> StoreError {
    match code.parse::<u32>() {
        Ok(sqlite) if code.len() < 5 => match sqlite & 0xff {
            // SQLITE_BUSY, SQLITE_LOCKED.
            5 | 6 => StoreError::Busy(message),
            // A full disk passes once there is room: SQLITE_FULL. (It was `Database`, not
            // retryable: an answer whose commit met it was given up and the provider asked
            // again.)
            13 => StoreError::Unavailable(message),
            _ => StoreError::Database(message),
        },
        // PostgreSQL: 40001 serialization_failure, 40P01 deadlock_detected, 55P03
        // lock_not_available, 57014 query_canceled (the store's statement timeout: a lock held
        // elsewhere, an overloaded server); 57P01 admin_shutdown (`pg_terminate_backend`),
        // 57P02 crash_shutdown, 57P03 cannot_connect_now, 25P03
        // idle_in_transaction_session_timeout, class 08 connection exceptions, and class 53
        // insufficient resources (53100 disk_full).
        _ => match code {
            "40001" | "40P01" | "55P03" | "57014" => StoreError::Busy(message),
            "57P01" | "57P02" | "57P03" | "25P03" | "08000" | "08003" | "08006" | "53000"
            | "53100" | "53200" | "53300" => StoreError::Unavailable(message),
            _ => StoreError::Database(message),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use std::borrow::Cow;

    /// A driver's database error with a chosen code: SQLite reports its extended result code
    /// (`sqlite3_extended_errcode`), PostgreSQL its SQLSTATE.
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error {}", self.0)
        }
    }
    impl std::error::Error for Coded {}
    impl sqlx::error::DatabaseError for Coded {
        fn message(&self) -> &str {
            "injected"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn class(code: &'static str) -> &'static str {
        match StoreError::from(sqlx::Error::Database(Box::new(Coded(code)))) {
            StoreError::Busy(_) => "busy",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Database(_) => "database",
            _ => "other",
        }
    }

    /// Every extended code of SQLITE_BUSY and SQLITE_LOCKED is a lock to wait out, as the
    /// primary codes are; PostgreSQL's SQLSTATEs (five characters, some all digits) are read as
    /// they are.
    #[test]
    fn database_codes_are_classified_by_their_family() {
        let cases = [
            // SQLITE_BUSY, _RECOVERY, _SNAPSHOT, _TIMEOUT
            ("5", "busy"),
            ("261", "busy"),
            ("517", "busy"),
            ("773", "busy"),
            // SQLITE_LOCKED, _SHAREDCACHE, _VTAB
            ("6", "busy"),
            ("262", "busy"),
            ("518", "busy"),
            // SQLITE_FULL
            ("13", "unavailable"),
            // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CORRUPT
            ("2067", "database"),
            ("11", "database"),
            // PostgreSQL: serialization failure, deadlock, disk full, connection failure,
            // unique violation, and one that reads as a number whose low byte is 5.
            ("40001", "busy"),
            ("40P01", "busy"),
            ("57014", "busy"),
            ("57P01", "unavailable"),
            ("25P03", "unavailable"),
            ("53100", "unavailable"),
            ("08006", "unavailable"),
            ("23505", "database"),
            ("22021", "database"),
        ];
        let got: Vec<(&str, &str)> = cases.iter().map(|(code, _)| (*code, class(code))).collect();
        assert_eq!(got, cases);
    }
}
