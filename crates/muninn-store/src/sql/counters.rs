//! Per-Mind seq counters (`counters`, `counter_floors`): the transcript, the mailbox, the
//! outbox and the brief queue number their rows from here.
//!
//! A counter is bumped in the same transaction as the row it numbers: gap-free (a rollback
//! undoes the bump) and, because the bump is an atomic upsert that locks the counter row,
//! distinct under concurrency on both engines. A new counter starts above its floor, which an
//! earlier store in the same place may have left (see `crate::startup`).

use super::engine::{Engine, RowExt, query};
use crate::error::Result;

/// Bumps a per-Mind counter and returns the new value (the next seq).
pub(crate) async fn bump<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    name: &str,
) -> Result<i64> {
    let row = query::<DB>(
        "INSERT INTO counters (mind_id, name, value) VALUES ($1, $2, 1 + COALESCE(\
         (SELECT value FROM counter_floors WHERE mind_id = $1 AND name = $2), 0)) \
         ON CONFLICT (mind_id, name) DO UPDATE SET value = counters.value + 1 \
         RETURNING value",
    )
    .bind(mind)
    .bind(name)
    .fetch_one(conn)
    .await?;
    row.col("value")
}

/// The counter's current value (the last seq assigned), 0 if never bumped.
pub(crate) async fn current<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    name: &str,
) -> Result<i64> {
    let row = query::<DB>("SELECT value FROM counters WHERE mind_id = $1 AND name = $2")
        .bind(mind)
        .bind(name)
        .fetch_optional(conn)
        .await?;
    match row {
        Some(row) => row.col("value"),
        None => Ok(0),
    }
}
