//! Minds and their settings: the rows every other aggregate hangs from (`minds`, `settings`).

use muninn_core::money::MicroUsd;

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, json_text, parse_json};
use crate::error::{Result, StoreError};
use crate::read::Conn;
use crate::types::{Caps, CapsWrite, Mind, MindSettings};

/// Reads a `minds` row (the columns of [`columns!`]`(mind)`).
pub(crate) fn mind_from<R: RowExt>(row: &R) -> Result<Mind> {
    Ok(Mind {
        id: row.col("id")?,
        display_name: row.col("display_name")?,
        config: parse_json(&row.col::<String>("config")?, "mind config")?,
        created_at_ms: row.col("created_at_ms")?,
    })
}

/// `NotFound` unless the Mind exists.
pub(crate) async fn require<DB: Engine>(conn: &mut impl Conn<DB>, mind: &str) -> Result<()> {
    let found = query::<DB>("SELECT 1 FROM minds WHERE id = $1")
        .bind(mind)
        .fetch_optional(conn)
        .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::not_found("mind", mind)),
    }
}

/// Creates the Mind unless one with its id exists; answers the stored row either way.
pub(crate) async fn create<B: Backend>(store: &B, mind: &Mind) -> Result<Mind> {
    if mind.id.is_empty() {
        return Err(StoreError::invalid("empty mind id"));
    }
    let mut tx = store.begin_write().await?;
    query::<B::Db>(
        "INSERT INTO minds (id, display_name, config, created_at_ms) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
    )
    .bind(&mind.id)
    .bind(&mind.display_name)
    .bind(json_text(&mind.config)?)
    .bind(mind.created_at_ms)
    .execute(&mut tx)
    .await?;
    let row = query::<B::Db>(concat!(
        "SELECT ",
        columns!(mind),
        " FROM minds WHERE id = $1"
    ))
    .bind(&mind.id)
    .fetch_one(&mut tx)
    .await?;
    let stored = mind_from(&row)?;
    B::Db::commit(tx).await?;
    Ok(stored)
}

pub(crate) async fn get<B: Backend>(store: &B, id: &str) -> Result<Option<Mind>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let row = query::<B::Db>(concat!(
        "SELECT ",
        columns!(mind),
        " FROM minds WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&mut conn)
    .await?;
    row.as_ref().map(mind_from).transpose()
}

/// Every Mind, by id in byte order. Sorted here, not by `ORDER BY id`: that is the database's
/// collation, which on PostgreSQL is the locale the database was created with (a language's
/// puts `_z` first and `B` after `a`) and on SQLite byte order, and one dialect has no
/// collation the other knows.
pub(crate) async fn list<B: Backend>(store: &B) -> Result<Vec<Mind>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let rows = query::<B::Db>(concat!("SELECT ", columns!(mind), " FROM minds"))
        .fetch_all(&mut conn)
        .await?;
    let mut minds = rows.iter().map(mind_from).collect::<Result<Vec<_>>>()?;
    minds.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    Ok(minds)
}

pub(crate) async fn update<B: Backend>(
    store: &B,
    id: &str,
    display_name: &str,
    config: &serde_json::Value,
) -> Result<Mind> {
    let mut tx = store.begin_write().await?;
    let row = query::<B::Db>(concat!(
        "UPDATE minds SET display_name = $2, config = $3 WHERE id = $1 RETURNING ",
        columns!(mind),
    ))
    .bind(id)
    .bind(display_name)
    .bind(json_text(config)?)
    .fetch_optional(&mut tx)
    .await?;
    let mind = match row {
        Some(row) => mind_from(&row)?,
        None => return Err(StoreError::not_found("mind", id)),
    };
    B::Db::commit(tx).await?;
    Ok(mind)
}

/// The Mind's settings; the defaults until any were put.
pub(crate) async fn settings<B: Backend>(store: &B, mind: &str) -> Result<MindSettings> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    require::<B::Db>(&mut conn, mind).await?;
    read_settings::<B::Db>(&mut conn, mind).await
}

/// The settings row of a Mind known to exist; the defaults if it has none.
async fn read_settings<DB: Engine>(conn: &mut impl Conn<DB>, mind: &str) -> Result<MindSettings> {
    let row = query::<DB>(
        "SELECT spend_cap_micro_usd, spend_window_ms, brake, turn_limit \
         FROM settings WHERE mind_id = $1",
    )
    .bind(mind)
    .fetch_optional(conn)
    .await?;
    match row {
        Some(row) => Ok(MindSettings {
            spend_cap: row.col::<Option<i64>>("spend_cap_micro_usd")?.map(MicroUsd),
            spend_window_ms: row.col("spend_window_ms")?,
            brake: row.col("brake")?,
            turn_limit: row.col("turn_limit")?,
        }),
        None => Ok(MindSettings::default()),
    }
}

/// The caps alone: a new row takes the default brake (off), an existing row keeps its own — one
/// statement, so a brake set between an operator's read and this write stays set.
///
/// With `expected`, a compare-and-set in one transaction: the Mind's row is locked first
/// (`Engine::MIND_LOCK_SQL`), so the caps read after it are the ones the write replaces. A read
/// outside the transaction, as the API once made, let two `PUT`s expecting the same caps both
/// pass the check and the second overwrite the first. The lock is the Mind's row rather than
/// the settings row because a Mind that never had settings has no row to lock: two first
/// writes would both see the defaults.
pub(crate) async fn put_caps<B: Backend>(
    store: &B,
    mind: &str,
    caps: &Caps,
    expected: Option<&Caps>,
    now_ms: i64,
) -> Result<CapsWrite> {
    let mut tx = store.begin_write().await?;
    let locked = query::<B::Db>(<B::Db as Engine>::MIND_LOCK_SQL)
        .bind(mind)
        .fetch_optional(&mut tx)
        .await?;
    if locked.is_none() {
        return Err(StoreError::not_found("mind", mind));
    }
    let before = read_settings::<B::Db>(&mut tx, mind).await?;
    if expected.is_some_and(|expected| *expected != Caps::of(&before)) {
        // Dropping the transaction rolls it back: nothing was written.
        return Ok(CapsWrite::Changed { current: before });
    }
    query::<B::Db>(
        "INSERT INTO settings (mind_id, spend_cap_micro_usd, spend_window_ms, brake, \
         turn_limit, updated_at_ms) VALUES ($1, $2, $3, FALSE, $4, $5) \
         ON CONFLICT (mind_id) DO UPDATE SET \
         spend_cap_micro_usd = excluded.spend_cap_micro_usd, \
         spend_window_ms = excluded.spend_window_ms, \
         turn_limit = excluded.turn_limit, updated_at_ms = excluded.updated_at_ms",
    )
    .bind(mind)
    .bind(caps.spend_cap.map(|cap| cap.0))
    .bind(caps.spend_window_ms)
    .bind(caps.turn_limit)
    .bind(now_ms)
    .execute(&mut tx)
    .await?;
    // Read back, not computed: the brake is the row's, whatever it was.
    let after = read_settings::<B::Db>(&mut tx, mind).await?;
    B::Db::commit(tx).await?;
    Ok(CapsWrite::Written { before, after })
}

/// The brake alone: a new row takes no caps, an existing row keeps its own (one statement).
pub(crate) async fn put_brake<B: Backend>(
    store: &B,
    mind: &str,
    brake: bool,
    now_ms: i64,
) -> Result<()> {
    let mut tx = store.begin_write().await?;
    require::<B::Db>(&mut tx, mind).await?;
    query::<B::Db>(
        "INSERT INTO settings (mind_id, spend_cap_micro_usd, spend_window_ms, brake, \
         turn_limit, updated_at_ms) VALUES ($1, NULL, NULL, $2, NULL, $3) \
         ON CONFLICT (mind_id) DO UPDATE SET \
         brake = excluded.brake, updated_at_ms = excluded.updated_at_ms",
    )
    .bind(mind)
    .bind(brake)
    .bind(now_ms)
    .execute(&mut tx)
    .await?;
    B::Db::commit(tx).await?;
    Ok(())
}
