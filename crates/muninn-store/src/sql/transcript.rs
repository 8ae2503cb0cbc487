//! The append-only transcript (`transcript`): every item a Mind role saw or said, numbered by
//! a gap-free per-role seq.

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, counters, json_text, leases, parse_json};
use crate::error::Result;
use crate::types::{
    Appended, FencingToken, NewTranscriptItem, Role, TranscriptItem, TranscriptKind,
};

/// Reads a `transcript` row (the columns of [`columns!`]`(transcript)`).
fn item_from<R: RowExt>(row: &R) -> Result<TranscriptItem> {
    Ok(TranscriptItem {
        mind: row.col("mind_id")?,
        role: Role::parse(&row.col::<String>("role")?)?,
        seq: row.col("seq")?,
        segment: row.col("segment")?,
        kind: TranscriptKind::parse(&row.col::<String>("kind")?),
        body: parse_json(&row.col::<String>("body")?, "transcript body")?,
        created_at_ms: row.col("created_at_ms")?,
    })
}

/// Each role numbers its own transcript.
fn counter_name(role: Role) -> &'static str {
    match role {
        Role::Persona => "transcript:persona",
        Role::SelfRole => "transcript:self",
    }
}

/// Appends items inside the caller's (fenced) transaction; answers their seqs.
pub(crate) async fn insert<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    items: &[NewTranscriptItem],
) -> Result<Vec<i64>> {
    let mut seqs = Vec::with_capacity(items.len());
    for item in items {
        let seq = counters::bump::<DB>(conn, mind, counter_name(item.role)).await?;
        query::<DB>(
            "INSERT INTO transcript (mind_id, role, seq, segment, kind, body, \
             created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(mind)
        .bind(item.role.as_str())
        .bind(seq)
        .bind(item.segment)
        .bind(item.kind.as_str())
        .bind(json_text(&item.body)?)
        .bind(item.created_at_ms)
        .execute(conn)
        .await?;
        seqs.push(seq);
    }
    Ok(seqs)
}

pub(crate) async fn append<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    items: &[NewTranscriptItem],
) -> Result<Vec<i64>> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let seqs = insert::<B::Db>(&mut tx, mind, items).await?;
    B::Db::commit(tx).await?;
    Ok(seqs)
}

/// Appends `item` under `key` unless the key is recorded for the item's role: the check, the
/// item and the key in one fenced transaction. The role is part of the key, so another role's
/// item under the same key is never taken for this one.
pub(crate) async fn append_once<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    key: &str,
    item: &NewTranscriptItem,
) -> Result<Appended> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    // The fence serialises this Mind's writers, so check-then-insert is safe (as for turn keys).
    let seen = query::<B::Db>(
        "SELECT seq FROM transcript_keys WHERE mind_id = $1 AND role = $2 AND append_key = $3",
    )
    .bind(mind)
    .bind(item.role.as_str())
    .bind(key)
    .fetch_optional(&mut tx)
    .await?;
    if let Some(row) = seen {
        return Ok(Appended {
            seq: row.col("seq")?,
            created: false,
        });
    }
    let seq = insert::<B::Db>(&mut tx, mind, std::slice::from_ref(item)).await?[0];
    query::<B::Db>(
        "INSERT INTO transcript_keys (mind_id, append_key, role, seq) VALUES ($1, $2, $3, $4)",
    )
    .bind(mind)
    .bind(key)
    .bind(item.role.as_str())
    .bind(seq)
    .execute(&mut tx)
    .await?;
    B::Db::commit(tx).await?;
    Ok(Appended { seq, created: true })
}

pub(crate) async fn range<B: Backend>(
    store: &B,
    mind: &str,
    role: Role,
    from_seq: i64,
    to_seq: Option<i64>,
    limit: i64,
) -> Result<Vec<TranscriptItem>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let rows = query::<B::Db>(concat!(
        "SELECT ",
        columns!(transcript),
        " FROM transcript WHERE mind_id = $1 AND role = $2 \
         AND seq >= $3 AND seq < $4 ORDER BY seq LIMIT $5",
    ))
    .bind(mind)
    .bind(role.as_str())
    .bind(from_seq)
    .bind(to_seq.unwrap_or(i64::MAX))
    .bind(limit.max(0))
    .fetch_all(&mut conn)
    .await?;
    rows.iter().map(item_from).collect()
}

/// The last `count` items, oldest first.
pub(crate) async fn tail<B: Backend>(
    store: &B,
    mind: &str,
    role: Role,
    count: i64,
) -> Result<Vec<TranscriptItem>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let rows = query::<B::Db>(concat!(
        "SELECT ",
        columns!(transcript),
        " FROM transcript WHERE mind_id = $1 AND role = $2 ORDER BY seq DESC LIMIT $3",
    ))
    .bind(mind)
    .bind(role.as_str())
    .bind(count.max(0))
    .fetch_all(&mut conn)
    .await?;
    let mut items = rows.iter().map(item_from).collect::<Result<Vec<_>>>()?;
    items.reverse();
    Ok(items)
}
