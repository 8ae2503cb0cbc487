//! Leases and the fence (`leases`): which host runs a Mind, and the token every fenced write
//! presents.
//!
//! A fenced transaction starts with [`fence`], which reads the lease row with
//! [`Engine::LEASE_LOCK_SQL`]. On PostgreSQL that is `SELECT … FOR UPDATE`: the row stays locked
//! until commit, so a concurrent `acquire_lease` by another holder waits and then sees the
//! committed write, and the check cannot go stale between check and commit. It also serialises
//! one Mind's fenced writers, which keeps per-Mind seqs gap-free and ordered. On SQLite the
//! write lock taken by `BEGIN IMMEDIATE` already does all of that.

use super::engine::{Backend, Engine, RowExt, query};
use super::minds;
use crate::error::{Result, StoreError};
use crate::types::{FencingToken, Lease};

/// The fence: fails with `Fenced` unless `token` is the Mind's current lease token. Runs first
/// in every fenced transaction and (on PostgreSQL) locks the lease row until commit, so the
/// check holds for the whole transaction.
pub(crate) async fn fence<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    token: FencingToken,
) -> Result<()> {
    let row = query::<DB>(DB::LEASE_LOCK_SQL)
        .bind(mind)
        .fetch_optional(conn)
        .await?;
    let current = match &row {
        Some(row) => {
            let holder: Option<String> = row.col("holder")?;
            let current: i64 = row.col("token")?;
            holder.map(|_| current)
        }
        None => None,
    };
    if current == Some(token.0) {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            mind: mind.to_owned(),
            presented: token.0,
            current,
        })
    }
}

/// Reads a lease row: `None` when nobody holds it (released, or never taken).
fn lease_from<R: RowExt>(mind: &str, row: &R) -> Result<Option<Lease>> {
    let holder: Option<String> = row.col("holder")?;
    Ok(match holder {
        Some(holder) => Some(Lease {
            mind: mind.to_owned(),
            holder,
            token: FencingToken(row.col("token")?),
            expires_at_ms: row.col("expires_at_ms")?,
        }),
        None => None,
    })
}

/// Hands `mind`'s lease to `holder` under `token` until `expires` (an acquire or a takeover,
/// inside the caller's transaction, after its own checks).
async fn hand<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    holder: &str,
    token: i64,
    expires: i64,
) -> Result<Lease> {
    query::<DB>("UPDATE leases SET holder = $2, token = $3, expires_at_ms = $4 WHERE mind_id = $1")
        .bind(mind)
        .bind(holder)
        .bind(token)
        .bind(expires)
        .execute(conn)
        .await?;
    Ok(Lease {
        mind: mind.to_owned(),
        holder: holder.to_owned(),
        token: FencingToken(token),
        expires_at_ms: expires,
    })
}

fn check_ttl(ttl_ms: i64) -> Result<()> {
    if ttl_ms <= 0 {
        return Err(StoreError::invalid(format!("lease ttl {ttl_ms} ms")));
    }
    Ok(())
}

pub(crate) async fn acquire<B: Backend>(
    store: &B,
    mind: &str,
    holder: &str,
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Option<Lease>> {
    check_ttl(ttl_ms)?;
    let mut tx = store.begin_write().await?;
    minds::require::<B::Db>(&mut tx, mind).await?;
    // Make sure the row exists before locking it, so two first acquirers race on the lock and
    // not on the insert.
    query::<B::Db>(
        "INSERT INTO leases (mind_id, holder, token, expires_at_ms) \
         VALUES ($1, NULL, 0, 0) ON CONFLICT (mind_id) DO NOTHING",
    )
    .bind(mind)
    .execute(&mut tx)
    .await?;
    let row = query::<B::Db>(B::Db::LEASE_LOCK_SQL)
        .bind(mind)
        .fetch_one(&mut tx)
        .await?;
    let current_holder: Option<String> = row.col("holder")?;
    let token: i64 = row.col("token")?;
    let expires_at_ms: i64 = row.col("expires_at_ms")?;
    let live = expires_at_ms > now_ms;
    let new_token = match current_holder {
        // Another holder's live lease: refused. Ended with a commit (of at most the empty row
        // above), not by dropping the transaction: a dropped one closes its connection (see
        // `write.rs`), and a host that is refused at every look would open a new database
        // connection each time — tens of milliseconds on its next write, a delivery posted
        // through it.
        Some(current) if live && current != holder => {
            B::Db::commit(tx).await?;
            return Ok(None);
        }
        // The same holder while live: a renewal, same token.
        Some(_) if live => token,
        // Free, released or expired: a new, strictly greater token.
        _ => token + 1,
    };
    let expires = now_ms.saturating_add(ttl_ms);
    let lease = hand::<B::Db>(&mut tx, mind, holder, new_token, expires).await?;
    B::Db::commit(tx).await?;
    Ok(Some(lease))
}

pub(crate) async fn renew<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Lease> {
    check_ttl(ttl_ms)?;
    let mut tx = store.begin_write().await?;
    fence::<B::Db>(&mut tx, mind, token).await?;
    // Renewing after expiry is allowed while the token is still current: nobody acquired in
    // between, so nobody else can have written.
    let row = query::<B::Db>(
        "UPDATE leases SET expires_at_ms = $2 WHERE mind_id = $1 \
         RETURNING holder, token, expires_at_ms",
    )
    .bind(mind)
    .bind(now_ms.saturating_add(ttl_ms))
    .fetch_one(&mut tx)
    .await?;
    let lease = lease_from(mind, &row)?
        .ok_or_else(|| StoreError::Corrupt("fenced lease has no holder".into()))?;
    B::Db::commit(tx).await?;
    Ok(lease)
}

/// Renews every lease `holder` holds in one statement (the host renews for all its runners at
/// once, instead of one transaction per Mind). A lease taken over meanwhile is not the holder's
/// any more and is not renewed; the leases renewed are returned, by Mind.
pub(crate) async fn renew_all<B: Backend>(
    store: &B,
    holder: &str,
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Vec<Lease>> {
    check_ttl(ttl_ms)?;
    let mut tx = store.begin_write().await?;
    let rows = query::<B::Db>(
        "UPDATE leases SET expires_at_ms = $2 WHERE holder = $1 \
         RETURNING mind_id, holder, token, expires_at_ms",
    )
    .bind(holder)
    .bind(now_ms.saturating_add(ttl_ms))
    .fetch_all(&mut tx)
    .await?;
    let mut leases = Vec::with_capacity(rows.len());
    for row in &rows {
        let mind: String = row.col("mind_id")?;
        leases.extend(lease_from(&mind, row)?);
    }
    B::Db::commit(tx).await?;
    leases.sort_by(|a, b| a.mind.cmp(&b.mind));
    Ok(leases)
}

pub(crate) async fn release<B: Backend>(store: &B, mind: &str, token: FencingToken) -> Result<()> {
    let mut tx = store.begin_write().await?;
    fence::<B::Db>(&mut tx, mind, token).await?;
    // The row stays (with its token) so the next acquire's token is greater.
    query::<B::Db>("UPDATE leases SET holder = NULL, expires_at_ms = 0 WHERE mind_id = $1")
        .bind(mind)
        .execute(&mut tx)
        .await?;
    B::Db::commit(tx).await?;
    Ok(())
}

pub(crate) async fn take_over<B: Backend>(
    store: &B,
    mind: &str,
    holder: &str,
    previous: FencingToken,
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Option<Lease>> {
    check_ttl(ttl_ms)?;
    let mut tx = store.begin_write().await?;
    minds::require::<B::Db>(&mut tx, mind).await?;
    // The fence's own lock: a write of the old holder in flight commits first, and every later
    // one sees the new token.
    let row = query::<B::Db>(B::Db::LEASE_LOCK_SQL)
        .bind(mind)
        .fetch_optional(&mut tx)
        .await?;
    let current: Option<i64> = row.map(|r| r.col("token")).transpose()?;
    if current != Some(previous.0) {
        // Nothing written; committed to keep the connection (as in acquire).
        B::Db::commit(tx).await?;
        return Ok(None);
    }
    let token = previous.0 + 1;
    let expires = now_ms.saturating_add(ttl_ms);
    let lease = hand::<B::Db>(&mut tx, mind, holder, token, expires).await?;
    B::Db::commit(tx).await?;
    Ok(Some(lease))
}

pub(crate) async fn get<B: Backend>(store: &B, mind: &str) -> Result<Option<Lease>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let row = query::<B::Db>("SELECT holder, token, expires_at_ms FROM leases WHERE mind_id = $1")
        .bind(mind)
        .fetch_optional(&mut conn)
        .await?;
    match row {
        Some(row) => lease_from(mind, &row),
        None => Ok(None),
    }
}
