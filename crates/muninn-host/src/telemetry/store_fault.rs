//! What kind of storage fault a store error is, in words safe to show without a token.
//!
//! `/readyz` does not repeat the store's errors (a PostgreSQL error may name database hosts),
//! but "the store refuses its steps" alone leaves the operator to dig through logs for the one
//! thing they need: is the disk full, the directory read-only, the database corrupt, the
//! server gone? This names the kind, from the engines' own stable messages; the full error is
//! in the host's log.
//!
//! One message means different things per backend: sqlx's "pool timed out" (no pooled
//! connection came free within the wait). On PostgreSQL a server that is down looks like that
//! (opening a connection is retried until the wait ends); SQLite has no server: its
//! connections are busy with queries, or waiting for a lock on the file (a database emptied
//! under the running host held every new connection 10 s that way, see
//! `muninn_store::SqliteStore`), so saying "the server is unreachable" there sent the reader
//! looking for a server that does not exist.

/// The kind of storage fault `error` (a store error's text) shows on the store `backend`
/// (`Store::backend`: `"sqlite"` or `"postgres"`), if it is one we know.
pub fn store_fault(error: &str, backend: &str) -> Option<&'static str> {
    const KINDS: &[(&[&str], &str)] = &[
        (
            &["database or disk is full", "No space left", "(os error 28)"],
            "the disk is full",
        ),
        (
            &["File too large", "(os error 27)"],
            "a file-size limit (ulimit -f) was reached",
        ),
        (
            &[
                "readonly database",
                "Read-only file system",
                "(os error 30)",
                "Permission denied",
            ],
            "the data directory is read-only",
        ),
        (
            &["malformed", "not a database", "corrupt"],
            "the database is corrupt",
        ),
        (&["store.id"], "the store's identity file cannot be written"),
        (&["disk I/O error", "(os error 5)"], "an I/O error"),
        (
            // SQLite's SQLITE_BUSY and SQLITE_LOCKED: a lock stayed held past the busy timeout.
            &["database is locked", "database table is locked"],
            "the database file is locked (another connection or process holds it)",
        ),
        (
            // PostgreSQL cancelled a statement at the store's statement timeout
            // (`muninn_store::postgres::STATEMENT_TIMEOUT`).
            &["canceling statement due to statement timeout"],
            "the database did not answer in time (a statement outlasted its timeout: a lock held \
             elsewhere, or an overloaded server)",
        ),
        (
            // The store's own deadline on a call (`muninn_store::postgres::CALL_TIMEOUT`).
            &["no answer from the database within"],
            "the database server does not answer (its connections stay open but silent: a \
             network partition, or a frozen server)",
        ),
        (
            &[
                "Connection refused",
                "connection reset",
                "terminating connection",
            ],
            "the database server is unreachable",
        ),
    ];
    let known = KINDS
        .iter()
        .find(|(signs, _)| signs.iter().any(|sign| error.contains(sign)))
        .map(|(_, kind)| *kind);
    known.or_else(|| by_backend(error, backend))
}

/// The kinds whose words depend on the backend: muninn's own "database unavailable" (the pool
/// closed, an I/O error, a file that cannot be opened) and sqlx's "pool timed out" name a
/// server only where there is one.
fn by_backend(error: &str, backend: &str) -> Option<&'static str> {
    let sqlite = backend == "sqlite";
    if error.contains("database unavailable") {
        return Some(if sqlite {
            "the database file cannot be reached (it cannot be opened, or the store is closed)"
        } else {
            "the database server is unreachable"
        });
    }
    error.contains("pool timed out").then_some(if sqlite {
        "no connection to the database file came free in time (each was busy with a query or \
         waiting for a lock)"
    } else {
        "the database server is unreachable (no connection came free in time)"
    })
}

#[cfg(test)]
mod tests {
    use super::store_fault;

    #[test]
    fn engine_messages_name_their_fault() {
        let cases = [
            (
                "error returned from database: (code: 13) database or disk is full",
                Some("the disk is full"),
            ),
            (
                "(code: 8) attempt to write a readonly database",
                Some("the data directory is read-only"),
            ),
            (
                "(code: 11) database disk image is malformed",
                Some("the database is corrupt"),
            ),
            (
                "writing /d/store.id: File too large (os error 27)",
                Some("a file-size limit (ulimit -f) was reached"),
            ),
            (
                "database unavailable: error communicating with database: Connection refused (os error 111)",
                Some("the database server is unreachable"),
            ),
            (
                "database busy: error returned from database: (code: 5) database is locked",
                Some("the database file is locked (another connection or process holds it)"),
            ),
            (
                "store: database busy: error returned from database: canceling statement due to \
                 statement timeout",
                Some(
                    "the database did not answer in time (a statement outlasted its timeout: a \
                     lock held elsewhere, or an overloaded server)",
                ),
            ),
            (
                "database unavailable: append_transcript: no answer from the database within \
                 2000 ms",
                Some(
                    "the database server does not answer (its connections stay open but \
                     silent: a network partition, or a frozen server)",
                ),
            ),
            ("mind m: fencing token 3 is stale", None),
        ];
        for (error, kind) in cases {
            assert_eq!(store_fault(error, "sqlite"), kind, "{error}");
        }
    }

    /// A store that is unavailable (muninn's own words for a closed pool, an I/O error, a file
    /// that cannot be opened) names a server only where there is one: on SQLite it was "the
    /// database server is unreachable", as the pool timeout was before.
    #[test]
    fn an_unavailable_store_is_named_by_the_backend_it_happened_on() {
        let error =
            "store: database unavailable: attempted to acquire a connection on a closed pool";
        let sqlite = store_fault(error, "sqlite").unwrap();
        assert!(!sqlite.contains("server"), "{sqlite}");
        assert!(sqlite.contains("database file"), "{sqlite}");
        assert_eq!(
            store_fault(error, "postgres"),
            Some("the database server is unreachable")
        );
    }

    /// A pool timeout is a server that cannot be reached only where there is a server.
    #[test]
    fn a_pool_timeout_is_named_by_the_backend_it_happened_on() {
        let error = "store: database busy: pool timed out while waiting for an open connection";
        let sqlite = store_fault(error, "sqlite").unwrap();
        assert!(!sqlite.contains("server"), "{sqlite}");
        assert!(sqlite.contains("database file"), "{sqlite}");
        assert_eq!(
            store_fault(error, "postgres"),
            Some("the database server is unreachable (no connection came free in time)")
        );
    }
}
