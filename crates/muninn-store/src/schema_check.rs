//! What a PostgreSQL database at the newest migration must hold, checked at open.
//!
//! The recorded schema version says which tables and columns exist; a database can say so and
//! still lack one (dropped by hand, a partial restore, another program's database). Without a
//! check every call that needs it would fail, the first at some unrelated moment and each with
//! a database error that names a statement, not the cause. So the store is refused at open,
//! naming each missing table and column. [`COLUMNS`] is kept in step with the migrations by a
//! unit test that reads them. (SQLite has no such check, of tables or of columns: its start-up
//! checks, `crate::startup`, look at the file and its counters, not at its schema.)

use sqlx::PgPool;
use std::collections::BTreeSet;

use crate::error::{Result, StoreError};

/// Every table a store at the newest migration has, with every column of it.
pub(crate) const COLUMNS: &[(&str, &[&str])] = &[
    ("minds", &["id", "display_name", "config", "created_at_ms"]),
    ("counters", &["mind_id", "name", "value"]),
    ("leases", &["mind_id", "holder", "token", "expires_at_ms"]),
    (
        "settings",
        &[
            "mind_id",
            "spend_cap_micro_usd",
            "spend_window_ms",
            "brake",
            "turn_limit",
            "updated_at_ms",
        ],
    ),
    (
        "segments",
        &[
            "mind_id",
            "role",
            "number",
            "started_at_ms",
            "rehydration_tokens",
            "reason",
            "session_id",
            "ended_at_ms",
            "memory",
            "spec_digest",
        ],
    ),
    (
        "transcript",
        &[
            "mind_id",
            "role",
            "seq",
            "segment",
            "kind",
            "body",
            "created_at_ms",
        ],
    ),
    (
        "deliveries",
        &[
            "mind_id",
            "seq",
            "room",
            "sender",
            "is_direct",
            "text",
            "source_id",
            "received_at_ms",
            "to_you",
            "context",
        ],
    ),
    ("mailbox_acks", &["mind_id", "acked_seq"]),
    (
        "outbox",
        &[
            "mind_id",
            "request_id",
            "seq",
            "room",
            "text",
            "created_at_ms",
            "sent_at_ms",
            "remote_id",
            "acked_at_ms",
            "failed_at_ms",
            "failure",
        ],
    ),
    (
        "ledger",
        &[
            "id",
            "mind_id",
            "role",
            "segment",
            "turn",
            "at_ms",
            "idle_gap_ms",
            "model",
            "prefix_tokens",
            "rehydration_tokens",
            "usage_input",
            "usage_cache_write_5m",
            "usage_cache_write_1h",
            "usage_cache_read",
            "usage_output",
            "raw_usage",
            "cost_micro_usd",
            "predicted_read",
            "predicted_write",
            "cache_state",
            "miss_cause",
            "decision",
            "boundary",
            "events",
            "decided",
            "provider_miss_reason",
            "provider_missed_tokens",
        ],
    ),
    (
        "memory_notes",
        &[
            "id",
            "mind_id",
            "salience",
            "text",
            "created_at_ms",
            "source",
        ],
    ),
    ("memory_about", &["note_id", "position", "sender"]),
    (
        "briefs",
        &[
            "mind_id",
            "seq",
            "text",
            "origin",
            "status",
            "result",
            "created_at_ms",
            "started_at_ms",
            "finished_at_ms",
        ],
    ),
    ("turns", &["mind_id", "turn_key"]),
    ("transcript_keys", &["mind_id", "append_key", "role", "seq"]),
    ("cursors", &["mind_id", "name", "value", "updated_at_ms"]),
    ("counter_floors", &["mind_id", "name", "value"]),
];

/// Refuses a database that lacks a table or a column of [`COLUMNS`], naming each one (a
/// missing table's columns are not listed again).
pub(crate) async fn check(pool: &PgPool) -> Result<()> {
    let mut missing = Vec::new();
    for (table, _) in COLUMNS {
        let row = sqlx::query("SELECT to_regclass($1) IS NOT NULL AS present")
            .bind(*table)
            .fetch_one(pool)
            .await?;
        if !sqlx::Row::try_get::<bool, _>(&row, "present")? {
            missing.push(format!("table {table}"));
        }
    }
    // The schema the tables were found in: the first of the `search_path` that exists, as
    // `to_regclass` resolves names.
    let present: BTreeSet<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT) \
         FROM information_schema.columns WHERE table_schema = current_schema()",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    for (table, columns) in COLUMNS {
        if missing.contains(&format!("table {table}")) {
            continue;
        }
        for column in *columns {
            if !present.contains(&((*table).to_owned(), (*column).to_owned())) {
                missing.push(format!("column {table}.{column}"));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(StoreError::Incomplete {
        missing: missing.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::COLUMNS;
    use crate::postgres::MIGRATIONS;
    use std::collections::BTreeMap;

    /// The statements of the migrations in order, lower case, without `--` comments.
    fn statements() -> Vec<String> {
        let mut statements = Vec::new();
        for (_, _, sql) in MIGRATIONS {
            let text: Vec<&str> = sql
                .lines()
                .map(|line| line.split("--").next().unwrap_or_default())
                .collect();
            let text = text.join("\n").to_ascii_lowercase();
            statements.extend(text.split(';').map(|s| s.trim().to_owned()));
        }
        statements
    }

    /// The parts of a `CREATE TABLE`'s parenthesised body split at its top-level commas.
    fn definitions(body: &str) -> Vec<String> {
        let (mut parts, mut current, mut depth) = (Vec::new(), String::new(), 0);
        for c in body.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        parts.push(current);
        parts
    }

    /// The tables and columns the migrations leave, read from their `CREATE TABLE`,
    /// `ALTER TABLE … ADD COLUMN`, `ALTER TABLE … DROP COLUMN` and `DROP TABLE` statements
    /// (`ALTER TABLE … DROP CONSTRAINT` and `… ADD PRIMARY KEY` leave the columns as they are).
    fn columns_the_migrations_create() -> BTreeMap<String, Vec<String>> {
        let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for statement in statements() {
            let words: Vec<&str> = statement
                .split(|c: char| c.is_whitespace() || c == '(')
                .filter(|w| !w.is_empty())
                .map(|w| w.trim_matches('"'))
                .filter(|w| !["if", "not", "exists"].contains(w))
                .collect();
            match words.as_slice() {
                ["create", "table", name, ..] => {
                    let open = statement.find('(').unwrap();
                    let close = statement.rfind(')').unwrap();
                    let columns = definitions(&statement[open + 1..close])
                        .iter()
                        .filter_map(|d| d.split_whitespace().next().map(str::to_owned))
                        .filter(|w| {
                            !["primary", "unique", "foreign", "check", "constraint"]
                                .contains(&w.as_str())
                        })
                        .collect();
                    tables.insert((*name).to_owned(), columns);
                }
                ["alter", "table", name, "add", "column", column, ..] => {
                    tables.get_mut(*name).unwrap().push((*column).to_owned());
                }
                ["alter", "table", name, "drop", "column", column, ..] => {
                    tables.get_mut(*name).unwrap().retain(|c| c != column);
                }
                // A key swapped (migration 10's) changes no column; the table must exist.
                ["alter", "table", name, "drop", "constraint", ..]
                | ["alter", "table", name, "add", "primary", "key", ..] => {
                    assert!(tables.contains_key(*name), "{statement}");
                }
                ["alter", "table", ..] => panic!("a migration this test cannot read: {statement}"),
                ["drop", "table", name, ..] => {
                    tables.remove(*name);
                }
                _ => {}
            }
        }
        tables
    }

    /// The check at open lists every table and column the migrations create: a migration that
    /// adds one without adding it to `COLUMNS` fails here, not in a database missing it.
    #[test]
    fn the_schema_check_lists_every_table_and_column_the_migrations_create() {
        let listed: BTreeMap<String, Vec<String>> = COLUMNS
            .iter()
            .map(|(t, cs)| {
                (
                    (*t).to_owned(),
                    cs.iter().map(|c| (*c).to_owned()).collect(),
                )
            })
            .collect();
        let created = columns_the_migrations_create();
        assert!(created.len() >= 16, "the parse found too few: {created:?}");
        assert!(
            created["ledger"].len() >= 27,
            "the parse found too few: {created:?}"
        );
        assert_eq!(listed, created);
    }
}
