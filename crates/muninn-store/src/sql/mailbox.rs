//! The mailbox: deliveries posted to a Mind (`deliveries`), the transports' cursors
//! (`cursors`) and the ack position (`mailbox_acks`), the last delivery seq a turn took in.
//!
//! Intake is unfenced (any host may post) and serialised per Mind on its delivery counter row
//! ([`lock_intake`]); the ack is fenced and moves only forward.

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, counters, leases, list_text, minds, parse_list};
use crate::error::{Result, StoreError};
use crate::read::Conn;
use crate::types::{
    CURSOR_MAX_BYTES, Cursor, Delivery, FencingToken, IntakeBatch, Mailbox, NewCursor, NewDelivery,
    Posted,
};

/// Reads a `deliveries` row (the columns of [`columns!`]`(delivery)`).
fn delivery_from<R: RowExt>(row: &R) -> Result<Delivery> {
    Ok(Delivery {
        mind: row.col("mind_id")?,
        seq: row.col("seq")?,
        room: row.col("room")?,
        sender: row.col("sender")?,
        is_direct: row.col("is_direct")?,
        to_you: row.col("to_you")?,
        text: row.col("text")?,
        source_id: row.col("source_id")?,
        received_at_ms: row.col("received_at_ms")?,
        context: parse_list(&row.col::<String>("context")?, "delivery context")?,
    })
}

fn cursor_from<R: RowExt>(row: &R) -> Result<Cursor> {
    Ok(Cursor {
        mind: row.col("mind_id")?,
        name: row.col("name")?,
        value: row.col("value")?,
        updated_at_ms: row.col("updated_at_ms")?,
    })
}

/// Locks the Mind's delivery counter for the rest of the transaction (creating it at 0), so
/// one Mind's intake is serialised: a duplicate check after it sees any concurrent intake of
/// the same source id that committed first (READ COMMITTED reads a fresh snapshot per
/// statement; on SQLite the write lock already serialises).
async fn lock_intake<DB: Engine>(conn: &mut DB::Connection, mind: &str) -> Result<()> {
    query::<DB>(
        "INSERT INTO counters (mind_id, name, value) VALUES ($1, 'delivery', COALESCE(\
         (SELECT value FROM counter_floors WHERE mind_id = $1 AND name = 'delivery'), 0)) \
         ON CONFLICT (mind_id, name) DO UPDATE SET value = counters.value",
    )
    .bind(mind)
    .execute(conn)
    .await
}

/// Intake of one delivery under [`lock_intake`]: a known source id answers its seq and adds
/// nothing; a new one gets the next seq.
async fn intake<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    delivery: &NewDelivery,
) -> Result<Posted> {
    let existing = query::<DB>("SELECT seq FROM deliveries WHERE mind_id = $1 AND source_id = $2")
        .bind(mind)
        .bind(&delivery.source_id)
        .fetch_optional(conn)
        .await?;
    if let Some(row) = existing {
        return Ok(Posted {
            seq: row.col("seq")?,
            created: false,
        });
    }
    let seq = counters::bump::<DB>(conn, mind, "delivery").await?;
    query::<DB>(
        "INSERT INTO deliveries (mind_id, seq, room, sender, is_direct, to_you, \
         text, source_id, received_at_ms, context) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(mind)
    .bind(seq)
    .bind(&delivery.room)
    .bind(&delivery.sender)
    .bind(delivery.is_direct)
    .bind(delivery.to_you)
    .bind(&delivery.text)
    .bind(&delivery.source_id)
    .bind(delivery.received_at_ms)
    .bind(list_text(&delivery.context, "delivery context")?)
    .execute(conn)
    .await?;
    Ok(Posted { seq, created: true })
}

/// A cursor a transport may write: named, and not over [`CURSOR_MAX_BYTES`].
fn check_cursor(cursor: &NewCursor) -> Result<()> {
    if cursor.name.is_empty() {
        return Err(StoreError::invalid("a cursor needs a name"));
    }
    if cursor.value.len() > CURSOR_MAX_BYTES {
        return Err(StoreError::invalid(format!(
            "cursor {} of {} bytes exceeds {CURSOR_MAX_BYTES} bytes",
            cursor.name,
            cursor.value.len()
        )));
    }
    Ok(())
}

/// Writes a transport's cursor (validated here, after the batch's deliveries: the cursor is
/// the one write that, alone, would skip mail).
async fn write_cursor<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    cursor: &NewCursor,
) -> Result<()> {
    check_cursor(cursor)?;
    query::<DB>(
        "INSERT INTO cursors (mind_id, name, value, updated_at_ms) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (mind_id, name) \
         DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
    )
    .bind(mind)
    .bind(&cursor.name)
    .bind(&cursor.value)
    .bind(cursor.updated_at_ms)
    .execute(conn)
    .await
}

/// The mailbox ack position: the last acknowledged delivery seq, 0 if none yet.
pub(crate) async fn acked<DB: Engine>(conn: &mut impl Conn<DB>, mind: &str) -> Result<i64> {
    let row = query::<DB>("SELECT acked_seq FROM mailbox_acks WHERE mind_id = $1")
        .bind(mind)
        .fetch_optional(conn)
        .await?;
    match row {
        Some(row) => row.col("acked_seq"),
        None => Ok(0),
    }
}

/// Moves the ack position to `max(position, seq)`; refuses a seq never delivered, which would
/// silently skip mail that arrives later.
pub(crate) async fn advance_ack<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    seq: i64,
) -> Result<i64> {
    let last = counters::current::<DB>(conn, mind, "delivery").await?;
    if seq > last {
        return Err(StoreError::invalid(format!(
            "ack through {seq} is beyond the last delivered seq {last}"
        )));
    }
    if seq < 0 {
        return Err(StoreError::invalid(format!(
            "ack through negative seq {seq}"
        )));
    }
    let row = query::<DB>(
        "INSERT INTO mailbox_acks (mind_id, acked_seq) VALUES ($1, $2) \
         ON CONFLICT (mind_id) DO UPDATE SET acked_seq = CASE \
         WHEN excluded.acked_seq > mailbox_acks.acked_seq THEN excluded.acked_seq \
         ELSE mailbox_acks.acked_seq END RETURNING acked_seq",
    )
    .bind(mind)
    .bind(seq)
    .fetch_one(conn)
    .await?;
    row.col("acked_seq")
}

pub(crate) async fn post<B: Backend>(
    store: &B,
    mind: &str,
    delivery: &NewDelivery,
) -> Result<Posted> {
    let mut tx = store.begin_write().await?;
    minds::require::<B::Db>(&mut tx, mind).await?;
    lock_intake::<B::Db>(&mut tx, mind).await?;
    let posted = intake::<B::Db>(&mut tx, mind, delivery).await?;
    B::Db::commit(tx).await?;
    Ok(posted)
}

pub(crate) async fn post_batch<B: Backend>(
    store: &B,
    mind: &str,
    batch: &IntakeBatch,
) -> Result<Vec<Posted>> {
    // One transaction: an error anywhere drops `tx`, which rolls back every delivery and
    // counter bump before it, so the cursor and the mail move together.
    let mut tx = store.begin_write().await?;
    minds::require::<B::Db>(&mut tx, mind).await?;
    lock_intake::<B::Db>(&mut tx, mind).await?;
    let mut posted = Vec::with_capacity(batch.deliveries.len());
    for delivery in &batch.deliveries {
        posted.push(intake::<B::Db>(&mut tx, mind, delivery).await?);
    }
    if let Some(cursor) = &batch.cursor {
        write_cursor::<B::Db>(&mut tx, mind, cursor).await?;
    }
    B::Db::commit(tx).await?;
    Ok(posted)
}

pub(crate) async fn cursor<B: Backend>(
    store: &B,
    mind: &str,
    name: &str,
) -> Result<Option<Cursor>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let row = query::<B::Db>(
        "SELECT mind_id, name, value, updated_at_ms FROM cursors \
         WHERE mind_id = $1 AND name = $2",
    )
    .bind(mind)
    .bind(name)
    .fetch_optional(&mut conn)
    .await?;
    row.as_ref().map(cursor_from).transpose()
}

/// Writes `cursor` unless the Mind has one by its name, and returns the one stored. The
/// insert waits for a concurrent one of the same name to commit (PostgreSQL's unique index;
/// SQLite's write lock) and then does nothing, and the read after it, a fresh snapshot under
/// READ COMMITTED, sees the row that won.
pub(crate) async fn first_cursor<B: Backend>(
    store: &B,
    mind: &str,
    cursor: &NewCursor,
) -> Result<Cursor> {
    check_cursor(cursor)?;
    let mut tx = store.begin_write().await?;
    minds::require::<B::Db>(&mut tx, mind).await?;
    query::<B::Db>(
        "INSERT INTO cursors (mind_id, name, value, updated_at_ms) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (mind_id, name) DO NOTHING",
    )
    .bind(mind)
    .bind(&cursor.name)
    .bind(&cursor.value)
    .bind(cursor.updated_at_ms)
    .execute(&mut tx)
    .await?;
    let row = query::<B::Db>(
        "SELECT mind_id, name, value, updated_at_ms FROM cursors \
         WHERE mind_id = $1 AND name = $2",
    )
    .bind(mind)
    .bind(&cursor.name)
    .fetch_one(&mut tx)
    .await?;
    let stored = cursor_from(&row)?;
    B::Db::commit(tx).await?;
    Ok(stored)
}

pub(crate) async fn pending<B: Backend>(
    store: &B,
    mind: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<Delivery>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let rows = query::<B::Db>(concat!(
        "SELECT ",
        columns!(delivery),
        " FROM deliveries WHERE mind_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    ))
    .bind(mind)
    .bind(after_seq)
    .bind(limit.max(0))
    .fetch_all(&mut conn)
    .await?;
    rows.iter().map(delivery_from).collect()
}

pub(crate) async fn ack_position<B: Backend>(store: &B, mind: &str) -> Result<i64> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    acked::<B::Db>(&mut conn, mind).await
}

/// How much mail waits: the count and the oldest receipt time after the ack position.
pub(crate) async fn summary<B: Backend>(store: &B, mind: &str) -> Result<Mailbox> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let after = acked::<B::Db>(&mut conn, mind).await?;
    // COUNT is BIGINT on PostgreSQL and INTEGER on SQLite; both read as i64.
    let row = query::<B::Db>(
        "SELECT CAST(COUNT(*) AS BIGINT) AS pending, MIN(received_at_ms) AS oldest \
         FROM deliveries WHERE mind_id = $1 AND seq > $2",
    )
    .bind(mind)
    .bind(after)
    .fetch_one(&mut conn)
    .await?;
    Ok(Mailbox {
        pending: row.col("pending")?,
        oldest_received_at_ms: row.col("oldest")?,
    })
}

pub(crate) async fn ack_through<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    seq: i64,
) -> Result<i64> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let position = advance_ack::<B::Db>(&mut tx, mind, seq).await?;
    B::Db::commit(tx).await?;
    Ok(position)
}
