//! The outbox (`outbox`): messages a turn decided to send, idempotent by request id, then
//! marked sent by the holder, and acked or failed by the transport (unfenced: whichever host
//! holds the lease).

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, counters, leases};
use crate::error::{Result, StoreError};
use crate::types::{FencingToken, NewOutboxMessage, OutboxMessage};

/// Reads an `outbox` row (the columns of [`columns!`]`(outbox)`).
fn message_from<R: RowExt>(row: &R) -> Result<OutboxMessage> {
    Ok(OutboxMessage {
        mind: row.col("mind_id")?,
        request_id: row.col("request_id")?,
        seq: row.col("seq")?,
        room: row.col("room")?,
        text: row.col("text")?,
        created_at_ms: row.col("created_at_ms")?,
        sent_at_ms: row.col("sent_at_ms")?,
        remote_id: row.col("remote_id")?,
        acked_at_ms: row.col("acked_at_ms")?,
        failed_at_ms: row.col("failed_at_ms")?,
        failure: row.col("failure")?,
    })
}

async fn find<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    request_id: &str,
) -> Result<Option<OutboxMessage>> {
    let row = query::<DB>(concat!(
        "SELECT ",
        columns!(outbox),
        " FROM outbox WHERE mind_id = $1 AND request_id = $2",
    ))
    .bind(mind)
    .bind(request_id)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(message_from).transpose()
}

/// [`find`], `NotFound` if absent (after an update that matched nothing).
async fn require<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    request_id: &str,
) -> Result<OutboxMessage> {
    find::<DB>(conn, mind, request_id)
        .await?
        .ok_or_else(|| StoreError::not_found("outbox message", request_id))
}

/// Enqueues messages inside the caller's (fenced) transaction.
pub(crate) async fn insert<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    messages: &[NewOutboxMessage],
) -> Result<Vec<OutboxMessage>> {
    let mut rows = Vec::with_capacity(messages.len());
    for message in messages {
        // Idempotent by request id: a repeat (a turn retried after a crash between send and
        // ack) gets the row recorded the first time, unchanged.
        if let Some(existing) = find::<DB>(conn, mind, &message.request_id).await? {
            rows.push(existing);
            continue;
        }
        let seq = counters::bump::<DB>(conn, mind, "outbox").await?;
        query::<DB>(
            "INSERT INTO outbox (mind_id, request_id, seq, room, text, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(mind)
        .bind(&message.request_id)
        .bind(seq)
        .bind(&message.room)
        .bind(&message.text)
        .bind(message.created_at_ms)
        .execute(conn)
        .await?;
        rows.push(OutboxMessage {
            mind: mind.to_owned(),
            request_id: message.request_id.clone(),
            seq,
            room: message.room.clone(),
            text: message.text.clone(),
            created_at_ms: message.created_at_ms,
            sent_at_ms: None,
            remote_id: None,
            acked_at_ms: None,
            failed_at_ms: None,
            failure: None,
        });
    }
    Ok(rows)
}

pub(crate) async fn enqueue<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    messages: &[NewOutboxMessage],
) -> Result<Vec<OutboxMessage>> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let rows = insert::<B::Db>(&mut tx, mind, messages).await?;
    B::Db::commit(tx).await?;
    Ok(rows)
}

/// Runs one of the listings below: `$1` the Mind, then `after_seq` if given, then the limit.
async fn listing<B: Backend>(
    store: &B,
    sql: &'static str,
    mind: &str,
    after_seq: Option<i64>,
    limit: i64,
) -> Result<Vec<OutboxMessage>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let mut stmt = query::<B::Db>(sql).bind(mind);
    if let Some(after) = after_seq {
        stmt = stmt.bind(after);
    }
    let rows = stmt.bind(limit.max(0)).fetch_all(&mut conn).await?;
    rows.iter().map(message_from).collect()
}

pub(crate) async fn unsent<B: Backend>(
    store: &B,
    mind: &str,
    limit: i64,
) -> Result<Vec<OutboxMessage>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(outbox),
        " FROM outbox WHERE mind_id = $1 AND sent_at_ms IS NULL \
         AND failed_at_ms IS NULL ORDER BY seq LIMIT $2",
    );
    listing(store, SQL, mind, None, limit).await
}

pub(crate) async fn unacked<B: Backend>(
    store: &B,
    mind: &str,
    limit: i64,
) -> Result<Vec<OutboxMessage>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(outbox),
        " FROM outbox WHERE mind_id = $1 AND acked_at_ms IS NULL \
         AND failed_at_ms IS NULL ORDER BY seq LIMIT $2",
    );
    listing(store, SQL, mind, None, limit).await
}

pub(crate) async fn after<B: Backend>(
    store: &B,
    mind: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<OutboxMessage>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(outbox),
        " FROM outbox WHERE mind_id = $1 AND seq > $2 AND acked_at_ms IS NULL \
         AND failed_at_ms IS NULL ORDER BY seq LIMIT $3",
    );
    listing(store, SQL, mind, Some(after_seq), limit).await
}

pub(crate) async fn failed<B: Backend>(
    store: &B,
    mind: &str,
    limit: i64,
) -> Result<Vec<OutboxMessage>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(outbox),
        " FROM outbox WHERE mind_id = $1 AND failed_at_ms IS NOT NULL \
         ORDER BY failed_at_ms DESC, seq DESC LIMIT $2",
    );
    listing(store, SQL, mind, None, limit).await
}

pub(crate) async fn mark_sent<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    request_id: &str,
    remote_id: Option<&str>,
    sent_at_ms: i64,
) -> Result<OutboxMessage> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    query::<B::Db>(
        "UPDATE outbox SET sent_at_ms = COALESCE(sent_at_ms, $3), \
         remote_id = COALESCE(remote_id, $4) WHERE mind_id = $1 AND request_id = $2",
    )
    .bind(mind)
    .bind(request_id)
    .bind(sent_at_ms)
    .bind(remote_id)
    .execute(&mut tx)
    .await?;
    let message = require::<B::Db>(&mut tx, mind, request_id).await?;
    B::Db::commit(tx).await?;
    Ok(message)
}

pub(crate) async fn ack<B: Backend>(
    store: &B,
    mind: &str,
    request_id: &str,
    remote_id: Option<&str>,
    acked_at_ms: i64,
) -> Result<OutboxMessage> {
    // Not fenced: the transport acks, whichever host holds the lease. COALESCE keeps the first
    // ack time and remote id, so a repeat or a race changes nothing.
    let mut tx = store.begin_write().await?;
    query::<B::Db>(
        "UPDATE outbox SET acked_at_ms = COALESCE(acked_at_ms, $3), \
         sent_at_ms = COALESCE(sent_at_ms, $3), remote_id = COALESCE(remote_id, $4) \
         WHERE mind_id = $1 AND request_id = $2",
    )
    .bind(mind)
    .bind(request_id)
    .bind(acked_at_ms)
    .bind(remote_id)
    .execute(&mut tx)
    .await?;
    let message = require::<B::Db>(&mut tx, mind, request_id).await?;
    B::Db::commit(tx).await?;
    Ok(message)
}

pub(crate) async fn fail<B: Backend>(
    store: &B,
    mind: &str,
    request_id: &str,
    failure: &str,
    failed_at_ms: i64,
) -> Result<OutboxMessage> {
    // Not fenced, like the ack. The first failure stays; an acked message keeps its ack and
    // gets none.
    let mut tx = store.begin_write().await?;
    query::<B::Db>(
        "UPDATE outbox SET failed_at_ms = COALESCE(failed_at_ms, $3), \
         failure = COALESCE(failure, $4) \
         WHERE mind_id = $1 AND request_id = $2 AND acked_at_ms IS NULL",
    )
    .bind(mind)
    .bind(request_id)
    .bind(failed_at_ms)
    .bind(failure)
    .execute(&mut tx)
    .await?;
    let message = require::<B::Db>(&mut tx, mind, request_id).await?;
    B::Db::commit(tx).await?;
    Ok(message)
}
