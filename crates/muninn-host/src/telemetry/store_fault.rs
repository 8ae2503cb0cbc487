//! What kind of storage fault a store error is, in words safe to show without a token.
//!
//! `/readyz` does not repeat the store's errors (a PostgreSQL error may name database hosts),
//! but "the store refuses its steps" alone leaves the operator to dig through logs for the one
//! thing they need: is the disk full, the directory read-only, the database corrupt, the
//! server gone? This names the kind, from the engines' own stable messages; the full error is
//! in the host's log.

/// The kind of storage fault `error` (a store error's text) shows, if it is one we know.
pub fn store_fault(error: &str) -> Option<&'static str> {
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
            &[
                "Connection refused",
                "connection reset",
                "terminating connection",
                "database unavailable",
                "pool timed out",
            ],
            "the database server is unreachable",
        ),
    ];
    KINDS
        .iter()
        .find(|(signs, _)| signs.iter().any(|sign| error.contains(sign)))
        .map(|(_, kind)| *kind)
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
            ("mind m: fencing token 3 is stale", None),
        ];
        for (error, kind) in cases {
            assert_eq!(store_fault(error), kind, "{error}");
        }
    }
}
