//! The ledger (`ledger`): one append-only row per model request, with its usage, cost,
//! predicted cache state and the decision taken. Token counts are `u64` in memory and `i64` in
//! the database; [`to_i64`]/[`to_u64`] convert at the edge and refuse what does not fit.

use muninn_core::ledger::LedgerRow;
use muninn_core::miss::{ProviderMiss, ProviderMissReason};
use muninn_core::money::MicroUsd;
use muninn_core::trace::Usage;

use super::engine::{Backend, Engine, RowExt, query};
use super::{
    columns, json_text, leases, list_text, miss_cause_text, parse_json, parse_list,
    parse_miss_cause, to_i64, to_u64,
};
use crate::error::{Result, StoreError};
use crate::types::{FencingToken, LedgerEntry, LedgerQuery};

/// The provider's own miss report, if the row has one.
fn provider_miss_from<R: RowExt>(row: &R) -> Result<Option<ProviderMiss>> {
    let reason: Option<String> = row.col("provider_miss_reason")?;
    let missed: Option<i64> = row.col("provider_missed_tokens")?;
    reason
        .map(|reason| -> Result<ProviderMiss> {
            // A reason a newer build wrote reads as `Other`, never as corruption.
            Ok(ProviderMiss {
                reason: ProviderMissReason::from_wire(&reason),
                missed_tokens: missed
                    .map(|t| to_u64(t, "provider_missed_tokens"))
                    .transpose()?,
            })
        })
        .transpose()
}

/// Reads a `ledger` row (the columns of [`columns!`]`(ledger)`).
fn entry_from<R: RowExt>(row: &R) -> Result<LedgerEntry> {
    let tokens = |column: &str| -> Result<u64> { to_u64(row.col(column)?, column) };
    let raw_usage: Option<String> = row.col("raw_usage")?;
    let miss_cause: Option<String> = row.col("miss_cause")?;
    let decided: Option<String> = row.col("decided")?;
    Ok(LedgerEntry {
        id: row.col("id")?,
        row: LedgerRow {
            mind: row.col("mind_id")?,
            role: row.col("role")?,
            segment: tokens("segment")?,
            turn: tokens("turn")?,
            at_ms: row.col("at_ms")?,
            idle_gap_ms: row.col("idle_gap_ms")?,
            model: row.col("model")?,
            prefix_tokens: tokens("prefix_tokens")?,
            rehydration_tokens: tokens("rehydration_tokens")?,
            usage: Usage {
                input: tokens("usage_input")?,
                cache_write_5m: tokens("usage_cache_write_5m")?,
                cache_write_1h: tokens("usage_cache_write_1h")?,
                cache_read: tokens("usage_cache_read")?,
                output: tokens("usage_output")?,
            },
            raw_usage: raw_usage
                .map(|text| parse_json(&text, "raw usage"))
                .transpose()?,
            cost: MicroUsd(row.col("cost_micro_usd")?),
            predicted_read: tokens("predicted_read")?,
            predicted_write: tokens("predicted_write")?,
            cache_state: row.col("cache_state")?,
            miss_cause: miss_cause.map(|text| parse_miss_cause(&text)).transpose()?,
            decision: row.col("decision")?,
            boundary: row.col("boundary")?,
            events: parse_list(&row.col::<String>("events")?, "ledger events")?,
            decided: decided
                .map(|text| parse_json(&text, "ledger decision"))
                .transpose()?,
            provider_miss: provider_miss_from(row)?,
        },
    })
}

/// Appends rows inside the caller's (fenced) transaction; answers their ids.
pub(crate) async fn insert<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    rows: &[LedgerRow],
) -> Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(rows.len());
    for row in rows {
        if row.mind != mind {
            return Err(StoreError::invalid(format!(
                "ledger row for mind {:?} recorded under mind {mind:?}",
                row.mind
            )));
        }
        let inserted = insert_row::<DB>(conn, mind, row).await?;
        ids.push(inserted);
    }
    Ok(ids)
}

async fn insert_row<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    row: &LedgerRow,
) -> Result<i64> {
    let raw_usage = row.raw_usage.as_ref().map(json_text).transpose()?;
    let miss_cause = row.miss_cause.map(miss_cause_text).transpose()?;
    let decided = row.decided.as_ref().map(json_text).transpose()?;
    let provider_missed = (row.provider_miss.and_then(|p| p.missed_tokens))
        .map(|t| to_i64(t, "provider_miss.missed_tokens"))
        .transpose()?;
    let inserted = query::<DB>(
        "INSERT INTO ledger (mind_id, role, segment, turn, at_ms, idle_gap_ms, model, \
         prefix_tokens, rehydration_tokens, usage_input, usage_cache_write_5m, \
         usage_cache_write_1h, usage_cache_read, usage_output, raw_usage, \
         cost_micro_usd, predicted_read, predicted_write, cache_state, miss_cause, \
         decision, boundary, events, decided, provider_miss_reason, \
         provider_missed_tokens) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
         $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, \
         $26) RETURNING id",
    )
    .bind(mind)
    .bind(&row.role)
    .bind(to_i64(row.segment, "segment")?)
    .bind(to_i64(row.turn, "turn")?)
    .bind(row.at_ms)
    .bind(row.idle_gap_ms)
    .bind(&row.model)
    .bind(to_i64(row.prefix_tokens, "prefix_tokens")?)
    .bind(to_i64(row.rehydration_tokens, "rehydration_tokens")?)
    .bind(to_i64(row.usage.input, "usage.input")?)
    .bind(to_i64(row.usage.cache_write_5m, "usage.cache_write_5m")?)
    .bind(to_i64(row.usage.cache_write_1h, "usage.cache_write_1h")?)
    .bind(to_i64(row.usage.cache_read, "usage.cache_read")?)
    .bind(to_i64(row.usage.output, "usage.output")?)
    .bind(raw_usage)
    .bind(row.cost.0)
    .bind(to_i64(row.predicted_read, "predicted_read")?)
    .bind(to_i64(row.predicted_write, "predicted_write")?)
    .bind(&row.cache_state)
    .bind(miss_cause)
    .bind(&row.decision)
    .bind(row.boundary)
    .bind(list_text(&row.events, "ledger events")?)
    .bind(decided)
    .bind(row.provider_miss.map(|p| p.reason.as_str()))
    .bind(provider_missed)
    .fetch_one(conn)
    .await?;
    inserted.col("id")
}

pub(crate) async fn append<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    rows: &[LedgerRow],
) -> Result<Vec<i64>> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let ids = insert::<B::Db>(&mut tx, mind, rows).await?;
    B::Db::commit(tx).await?;
    Ok(ids)
}

/// Rows in `[from_ms, to_ms)` after `after_id`, by id; one Mind's or everyone's.
pub(crate) async fn find<B: Backend>(store: &B, q: &LedgerQuery) -> Result<Vec<LedgerEntry>> {
    const ALL: &str = concat!(
        "SELECT ",
        columns!(ledger),
        " FROM ledger WHERE at_ms >= $1 AND at_ms < $2 AND id > $3 ORDER BY id LIMIT $4",
    );
    const ONE_MIND: &str = concat!(
        "SELECT ",
        columns!(ledger),
        " FROM ledger WHERE at_ms >= $1 AND at_ms < $2 AND id > $3 \
         AND mind_id = $5 ORDER BY id LIMIT $4",
    );
    let mut conn = B::Db::acquire(store.pool()).await?;
    let stmt = query::<B::Db>(if q.mind.is_some() { ONE_MIND } else { ALL })
        .bind(q.from_ms.unwrap_or(i64::MIN))
        .bind(q.to_ms.unwrap_or(i64::MAX))
        .bind(q.after_id.unwrap_or(i64::MIN))
        .bind(q.limit.unwrap_or(i64::MAX).max(0));
    let stmt = match &q.mind {
        Some(mind) => stmt.bind(mind),
        None => stmt,
    };
    let rows = stmt.fetch_all(&mut conn).await?;
    rows.iter().map(entry_from).collect()
}

/// Micro-dollars the Mind spent in `[from_ms, to_ms)`.
pub(crate) async fn spend<B: Backend>(
    store: &B,
    mind: &str,
    from_ms: i64,
    to_ms: i64,
) -> Result<MicroUsd> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    // SUM over BIGINT is NUMERIC on PostgreSQL; cast back to the i64 we store.
    let row = query::<B::Db>(
        "SELECT CAST(COALESCE(SUM(cost_micro_usd), 0) AS BIGINT) AS total FROM ledger \
         WHERE mind_id = $1 AND at_ms >= $2 AND at_ms < $3",
    )
    .bind(mind)
    .bind(from_ms)
    .bind(to_ms)
    .fetch_one(&mut conn)
    .await?;
    Ok(MicroUsd(row.col("total")?))
}
