//! Segments (`segments`): the numbered stretches of one Mind role's transcript between
//! compactions, each with its provider session id and the memory it started from.

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, leases};
use crate::error::{Result, StoreError};
use crate::types::{FencingToken, NewSegment, Role, Segment};

/// Reads a `segments` row (the columns of [`columns!`]`(segment)`).
pub(crate) fn segment_from<R: RowExt>(row: &R) -> Result<Segment> {
    Ok(Segment {
        mind: row.col("mind_id")?,
        role: Role::parse(&row.col::<String>("role")?)?,
        number: row.col("number")?,
        started_at_ms: row.col("started_at_ms")?,
        rehydration_tokens: row.col("rehydration_tokens")?,
        reason: row.col("reason")?,
        session_id: row.col("session_id")?,
        ended_at_ms: row.col("ended_at_ms")?,
        memory: row.col("memory")?,
        spec_digest: row.col("spec_digest")?,
    })
}

/// One segment, `NotFound` if it does not exist.
async fn fetch<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    role: Role,
    number: i64,
) -> Result<Segment> {
    let row = query::<DB>(concat!(
        "SELECT ",
        columns!(segment),
        " FROM segments WHERE mind_id = $1 AND role = $2 AND number = $3",
    ))
    .bind(mind)
    .bind(role.as_str())
    .bind(number)
    .fetch_optional(conn)
    .await?;
    match row {
        Some(row) => segment_from(&row),
        None => Err(StoreError::not_found(
            "segment",
            format!("{mind}/{}/{number}", role.as_str()),
        )),
    }
}

/// Ends the role's open segment (if any) and starts the next number.
pub(crate) async fn start<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    segment: &NewSegment,
) -> Result<Segment> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let role = segment.role.as_str();
    query::<B::Db>(
        "UPDATE segments SET ended_at_ms = $3 \
         WHERE mind_id = $1 AND role = $2 AND ended_at_ms IS NULL",
    )
    .bind(mind)
    .bind(role)
    .bind(segment.started_at_ms)
    .execute(&mut tx)
    .await?;
    let row = query::<B::Db>(
        "SELECT CAST(COALESCE(MAX(number), -1) + 1 AS BIGINT) AS next \
         FROM segments WHERE mind_id = $1 AND role = $2",
    )
    .bind(mind)
    .bind(role)
    .fetch_one(&mut tx)
    .await?;
    let number: i64 = row.col("next")?;
    query::<B::Db>(
        "INSERT INTO segments (mind_id, role, number, started_at_ms, \
         rehydration_tokens, reason, session_id, memory, spec_digest) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(mind)
    .bind(role)
    .bind(number)
    .bind(segment.started_at_ms)
    .bind(segment.rehydration_tokens)
    .bind(&segment.reason)
    .bind(segment.session_id.as_deref())
    .bind(segment.memory.as_deref())
    .bind(segment.spec_digest.as_deref())
    .execute(&mut tx)
    .await?;
    B::Db::commit(tx).await?;
    Ok(Segment {
        mind: mind.to_owned(),
        role: segment.role,
        number,
        started_at_ms: segment.started_at_ms,
        rehydration_tokens: segment.rehydration_tokens,
        reason: segment.reason.clone(),
        session_id: segment.session_id.clone(),
        ended_at_ms: None,
        memory: segment.memory.clone(),
        spec_digest: segment.spec_digest.clone(),
    })
}

pub(crate) async fn set_session<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    role: Role,
    number: i64,
    session_id: &str,
) -> Result<Segment> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    query::<B::Db>(
        "UPDATE segments SET session_id = $4 \
         WHERE mind_id = $1 AND role = $2 AND number = $3",
    )
    .bind(mind)
    .bind(role.as_str())
    .bind(number)
    .bind(session_id)
    .execute(&mut tx)
    .await?;
    let segment = fetch::<B::Db>(&mut tx, mind, role, number).await?;
    B::Db::commit(tx).await?;
    Ok(segment)
}

/// Ends a segment; ending it again keeps the first end time.
pub(crate) async fn end<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    role: Role,
    number: i64,
    ended_at_ms: i64,
) -> Result<Segment> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    query::<B::Db>(
        "UPDATE segments SET ended_at_ms = COALESCE(ended_at_ms, $4) \
         WHERE mind_id = $1 AND role = $2 AND number = $3",
    )
    .bind(mind)
    .bind(role.as_str())
    .bind(number)
    .bind(ended_at_ms)
    .execute(&mut tx)
    .await?;
    let segment = fetch::<B::Db>(&mut tx, mind, role, number).await?;
    B::Db::commit(tx).await?;
    Ok(segment)
}

pub(crate) async fn current<B: Backend>(
    store: &B,
    mind: &str,
    role: Role,
) -> Result<Option<Segment>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let row = query::<B::Db>(concat!(
        "SELECT ",
        columns!(segment),
        " FROM segments WHERE mind_id = $1 AND role = $2 ORDER BY number DESC LIMIT 1",
    ))
    .bind(mind)
    .bind(role.as_str())
    .fetch_optional(&mut conn)
    .await?;
    row.as_ref().map(segment_from).transpose()
}

/// The newest `limit` segments numbered below `before` (if given), oldest first.
pub(crate) async fn newest<B: Backend>(
    store: &B,
    mind: &str,
    role: Role,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<Segment>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let rows = query::<B::Db>(concat!(
        "SELECT ",
        columns!(segment),
        " FROM segments WHERE mind_id = $1 AND role = $2 AND number < $3 \
         ORDER BY number DESC LIMIT $4",
    ))
    .bind(mind)
    .bind(role.as_str())
    .bind(before.unwrap_or(i64::MAX))
    .bind(limit.max(0))
    .fetch_all(&mut conn)
    .await?;
    let mut segments = rows.iter().map(segment_from).collect::<Result<Vec<_>>>()?;
    segments.reverse();
    Ok(segments)
}

pub(crate) async fn list<B: Backend>(store: &B, mind: &str, role: Role) -> Result<Vec<Segment>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let rows = query::<B::Db>(concat!(
        "SELECT ",
        columns!(segment),
        " FROM segments WHERE mind_id = $1 AND role = $2 ORDER BY number",
    ))
    .bind(mind)
    .bind(role.as_str())
    .fetch_all(&mut conn)
    .await?;
    rows.iter().map(segment_from).collect()
}
