//! The Self's brief queue (`briefs`): queued by an operator or a turn, claimed one at a time by
//! the lease holder, finished as done or failed.

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, counters, leases, minds};
use crate::error::{Result, StoreError};
use crate::types::{Brief, BriefOrigin, BriefStatus, FencingToken, NewBrief};

/// Reads a `briefs` row (the columns of [`columns!`]`(brief)`).
fn brief_from<R: RowExt>(row: &R) -> Result<Brief> {
    Ok(Brief {
        mind: row.col("mind_id")?,
        seq: row.col("seq")?,
        text: row.col("text")?,
        origin: BriefOrigin::parse(&row.col::<String>("origin")?)?,
        status: BriefStatus::parse(&row.col::<String>("status")?)?,
        result: row.col("result")?,
        created_at_ms: row.col("created_at_ms")?,
        started_at_ms: row.col("started_at_ms")?,
        finished_at_ms: row.col("finished_at_ms")?,
    })
}

/// Queues a brief inside the caller's transaction.
pub(crate) async fn insert<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    brief: &NewBrief,
) -> Result<Brief> {
    let seq = counters::bump::<DB>(conn, mind, "brief").await?;
    query::<DB>(
        "INSERT INTO briefs (mind_id, seq, text, origin, status, created_at_ms) \
         VALUES ($1, $2, $3, $4, 'queued', $5)",
    )
    .bind(mind)
    .bind(seq)
    .bind(&brief.text)
    .bind(brief.origin.as_str())
    .bind(brief.created_at_ms)
    .execute(conn)
    .await?;
    Ok(Brief {
        mind: mind.to_owned(),
        seq,
        text: brief.text.clone(),
        origin: brief.origin,
        status: BriefStatus::Queued,
        result: None,
        created_at_ms: brief.created_at_ms,
        started_at_ms: None,
        finished_at_ms: None,
    })
}

async fn fetch<DB: Engine>(conn: &mut DB::Connection, mind: &str, seq: i64) -> Result<Brief> {
    let row = query::<DB>(concat!(
        "SELECT ",
        columns!(brief),
        " FROM briefs WHERE mind_id = $1 AND seq = $2",
    ))
    .bind(mind)
    .bind(seq)
    .fetch_optional(conn)
    .await?;
    match row {
        Some(row) => brief_from(&row),
        None => Err(StoreError::not_found("brief", format!("{mind}/{seq}"))),
    }
}

/// Queues a brief from outside a turn (the operator): unfenced.
pub(crate) async fn enqueue<B: Backend>(store: &B, mind: &str, brief: &NewBrief) -> Result<Brief> {
    let mut tx = store.begin_write().await?;
    minds::require::<B::Db>(&mut tx, mind).await?;
    let brief = insert::<B::Db>(&mut tx, mind, brief).await?;
    B::Db::commit(tx).await?;
    Ok(brief)
}

/// Marks the oldest queued brief running and answers it; `None` if none is queued.
pub(crate) async fn claim<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    now_ms: i64,
) -> Result<Option<Brief>> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let row = query::<B::Db>(
        "SELECT seq FROM briefs WHERE mind_id = $1 AND status = 'queued' \
         ORDER BY seq LIMIT 1",
    )
    .bind(mind)
    .fetch_optional(&mut tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let seq: i64 = row.col("seq")?;
    query::<B::Db>(
        "UPDATE briefs SET status = 'running', started_at_ms = $3 \
         WHERE mind_id = $1 AND seq = $2",
    )
    .bind(mind)
    .bind(seq)
    .bind(now_ms)
    .execute(&mut tx)
    .await?;
    let brief = fetch::<B::Db>(&mut tx, mind, seq).await?;
    B::Db::commit(tx).await?;
    Ok(Some(brief))
}

/// Finishes a running brief as done or failed, with its result.
pub(crate) async fn finish<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    seq: i64,
    status: BriefStatus,
    result: &str,
    now_ms: i64,
) -> Result<Brief> {
    if !matches!(status, BriefStatus::Done | BriefStatus::Failed) {
        return Err(StoreError::invalid(format!(
            "a brief finishes as done or failed, not {}",
            status.as_str()
        )));
    }
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let brief = fetch::<B::Db>(&mut tx, mind, seq).await?;
    if brief.status != BriefStatus::Running {
        return Err(StoreError::invalid(format!(
            "brief {seq} is {}, not running",
            brief.status.as_str()
        )));
    }
    query::<B::Db>(
        "UPDATE briefs SET status = $3, result = $4, finished_at_ms = $5 \
         WHERE mind_id = $1 AND seq = $2",
    )
    .bind(mind)
    .bind(seq)
    .bind(status.as_str())
    .bind(result)
    .bind(now_ms)
    .execute(&mut tx)
    .await?;
    let brief = fetch::<B::Db>(&mut tx, mind, seq).await?;
    B::Db::commit(tx).await?;
    Ok(brief)
}

/// The Mind's briefs by seq, optionally of one status.
pub(crate) async fn list<B: Backend>(
    store: &B,
    mind: &str,
    status: Option<BriefStatus>,
    limit: i64,
) -> Result<Vec<Brief>> {
    const ALL: &str = concat!(
        "SELECT ",
        columns!(brief),
        " FROM briefs WHERE mind_id = $1 ORDER BY seq LIMIT $2",
    );
    const OF_STATUS: &str = concat!(
        "SELECT ",
        columns!(brief),
        " FROM briefs WHERE mind_id = $1 AND status = $3 ORDER BY seq LIMIT $2",
    );
    let mut conn = B::Db::acquire(store.pool()).await?;
    let stmt = query::<B::Db>(if status.is_some() { OF_STATUS } else { ALL })
        .bind(mind)
        .bind(limit.max(0));
    let stmt = match status {
        Some(status) => stmt.bind(status.as_str()),
        None => stmt,
    };
    let rows = stmt.fetch_all(&mut conn).await?;
    rows.iter().map(brief_from).collect()
}
