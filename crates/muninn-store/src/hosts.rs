//! What several hosts on one database tell each other: wake-ups and presence.
//!
//! ## Wake-ups (PostgreSQL `LISTEN/NOTIFY`)
//!
//! A delivery, brief, settings change or brake posted through one host must wake the runner of
//! that Mind on whichever host holds its lease. [`Store::announce_wake`](crate::Store) sends a
//! `NOTIFY` on [`WAKE_CHANNEL`] with the Mind and the sending host; every host listens
//! ([`Store::listen_wakes`](crate::Store)) on a connection of its own and wakes its local runner.
//! A notification is a hint, never the truth: the runner reads the mailbox, so a lost one (a
//! dropped listener connection) costs latency until the holder's next periodic look, not data.
//! A listener connection can also fall silent without closing (a partition, a flow lost in
//! the network): a listener that heard nothing for one call deadline asks its connection to
//! answer a query within another, and replaces a connection that does not (see
//! [`WakeListener::recv`]). Meanwhile the runners' periodic look is the fallback.
//! `NOTIFY` channels are per database, not per schema: hosts on two schemas of one database wake
//! each other spuriously, which costs one extra read each.
//!
//! SQLite has no cross-process notification; its hosts keep their in-process wake-ups and the
//! periodic look.
//!
//! ## Presence (PostgreSQL session advisory locks)
//!
//! Each host holds, on a dedicated connection, a session-scoped advisory lock named by its
//! holder name ([`Store::hold_presence`](crate::Store)). PostgreSQL drops it the moment that
//! session ends — a clean exit, `kill -9`, a lost machine once TCP gives up — so another host
//! that can take the lock knows the holder is gone and may take its leases over at once
//! ([`Store::take_over_lease`](crate::Store)) instead of waiting out the lease TTL. Fencing stays
//! the guard: a holder that is in fact alive (its presence connection broke and it has not yet
//! re-locked) has its next write refused, and never interleaves with the new holder.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions};
use sqlx::{Connection, Row};

use crate::error::{Result, StoreError};
use crate::postgres::PostgresStore;
use crate::sql::engine::{Engine, RowExt, query};
use crate::sqlite::SqliteStore;

/// The `NOTIFY` channel wake-ups travel on.
pub const WAKE_CHANNEL: &str = "muninn_wake";

/// The advisory-lock namespace of presence locks (`pg_advisory_lock(int4, int4)`'s first key,
/// "mu" in ASCII), so a presence lock never collides with the migration lock (one `int8` key).
const PRESENCE_NAMESPACE: i32 = 0x6d75;

/// A wake-up from another host (or this one: the listener hears its own host too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    /// The Mind something arrived for.
    pub mind: String,
    /// The holder name of the host that announced it.
    pub from: String,
}

impl Wake {
    /// The payload: `from`, a newline, `mind` (a holder name has no newline).
    fn payload(&self) -> String {
        format!("{}\n{}", self.from, self.mind)
    }

    fn parse(payload: &str) -> Option<Wake> {
        let (from, mind) = payload.split_once('\n')?;
        Some(Wake {
            mind: mind.to_owned(),
            from: from.to_owned(),
        })
    }
}

/// Wake-ups announced through the database, on a connection of their own.
pub struct WakeListener {
    /// `None` once a silent connection was given up and no new one is listening yet.
    listener: Option<PgListener>,
    /// How to open a new connection.
    options: PgConnectOptions,
    /// The store's call deadline: how long the listener waits for a notification before it
    /// checks its connection, and for that check's answer.
    deadline: Duration,
}

/// Where it listens, without the password: sqlx's `Debug` of the connect options prints it (as
/// for [`PostgresStore`]'s own `Debug`).
impl std::fmt::Debug for WakeListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("WakeListener");
        out.field("listening", &self.listener.is_some());
        crate::postgres::server(&mut out, &self.options)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl WakeListener {
    /// Listens on a connection of its own (a one-connection pool: the pool is how `PgListener`
    /// reconnects after a connection closes), within `deadline`.
    async fn connect(options: PgConnectOptions, deadline: Duration) -> Result<WakeListener> {
        let listener = listening(&options, deadline).await?;
        Ok(WakeListener {
            listener: Some(listener),
            options,
            deadline,
        })
    }

    /// The next wake-up. `Ok(None)`: the connection was lost (closed, failed, or silent past
    /// the check) and a new one listens, and wake-ups sent meanwhile are gone — the caller
    /// should look at every Mind once. `Unavailable` if it cannot listen again (call again
    /// later: the next call tries again, and answers `Ok(None)` once it listens).
    ///
    /// Every new connection is made here (`listening`), never by `PgListener` inside the
    /// wait: that wait is cut at the deadline, and a reconnect cut with it would have ended
    /// on the next use of the listener, unreported. A connection that falls silent without
    /// closing would keep `recv` waiting as long as TCP does (hours without keepalives):
    /// after a deadline with no notification the connection is asked `SELECT 1`; one that
    /// does not answer within another is dropped for a new one.
    pub async fn recv(&mut self) -> Result<Option<Wake>> {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                self.listener = Some(listening(&self.options, self.deadline).await?);
                return Ok(None);
            };
            // `try_recv` is cancel-safe: a notification read in part waits in the
            // connection's buffer for the next call.
            let note = match tokio::time::timeout(self.deadline, listener.try_recv()).await {
                Ok(Ok(Some(note))) => note,
                // Closed (the listener does not reconnect by itself: `listening`).
                Ok(Ok(None)) => {
                    tracing::warn!("the wake-up listener's connection closed: listening again");
                    self.listener = None;
                    continue;
                }
                Ok(Err(e)) => {
                    self.listener = None;
                    return Err(e.into());
                }
                Err(_) if answers(listener, self.deadline).await => continue,
                Err(_) => {
                    tracing::warn!(
                        deadline = ?self.deadline,
                        "the wake-up listener's connection is silent: listening on a new one"
                    );
                    self.listener = None;
                    continue;
                }
            };
            match Wake::parse(note.payload()) {
                Some(wake) => return Ok(Some(wake)),
                // Not ours (someone else's NOTIFY on the channel): skip it.
                None => continue,
            }
        }
    }
}

/// A listener on [`WAKE_CHANNEL`], on a new one-connection pool, within `deadline`.
async fn listening(options: &PgConnectOptions, deadline: Duration) -> Result<PgListener> {
    let connect = async {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_with(options.clone())
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let mut listener = PgListener::connect_with(&pool).await?;
        // A lost connection ends `try_recv` with `Ok(None)` at once; `recv` listens again.
        listener.eager_reconnect(false);
        listener.listen(WAKE_CHANNEL).await?;
        Ok(listener)
    };
    match tokio::time::timeout(deadline, connect).await {
        Ok(listener) => listener,
        Err(_) => Err(StoreError::Unavailable(format!(
            "listen_wakes: no answer from the database within {} ms",
            deadline.as_millis()
        ))),
    }
}

/// Whether the listener's connection answers a query within `deadline` (notifications that
/// arrive meanwhile are buffered by the listener, not lost).
async fn answers(listener: &mut PgListener, deadline: Duration) -> bool {
    let ping = sqlx::query("SELECT 1").execute(&mut *listener);
    matches!(tokio::time::timeout(deadline, ping).await, Ok(Ok(_)))
}

/// A presence lock's second key: the holder name's 32-bit FNV-1a hash. Two holders sharing a
/// hash would only make one look alive while the other lives (a takeover waits out the TTL);
/// with a handful of hosts per database the chance is about one in a billion.
fn presence_key(holder: &str) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in holder.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash as i32
}

/// The dedicated session holding this host's presence lock, and the holder it is held for.
#[derive(Debug, Default)]
pub(crate) struct Presence {
    held: Option<(String, PgConnection)>,
}

/// Shared between clones of one store.
pub(crate) type PresenceCell = Arc<Mutex<Presence>>;

/// What a backend does for hosts sharing its database: the methods of the same names on
/// [`crate::Store`], and ending the presence session on close. Each backend implements it here,
/// beside the others, so that the store types need not forward each method.
pub(crate) trait HostSignals {
    fn announce_wake(&self, mind: &str, from: &str) -> impl Future<Output = Result<()>> + Send;
    fn listen_wakes(&self) -> impl Future<Output = Result<Option<WakeListener>>> + Send;
    fn hold_presence(&self, holder: &str) -> impl Future<Output = Result<bool>> + Send;
    fn holder_gone(&self, holder: &str) -> impl Future<Output = Result<Option<bool>>> + Send;
    fn await_holder_gone(&self, holder: &str) -> impl Future<Output = Result<bool>> + Send;
    /// Ends the presence session (on close): the lock goes with it.
    fn drop_presence(&self) -> impl Future<Output = ()> + Send;
}

impl HostSignals for PostgresStore {
    async fn announce_wake(&self, mind: &str, from: &str) -> Result<()> {
        let wake = Wake {
            mind: mind.to_owned(),
            from: from.to_owned(),
        };
        // On a read connection: one cut short by the call's deadline is closed, not pooled.
        let mut conn = Postgres::acquire(&self.pool).await?;
        query::<Postgres>("SELECT pg_notify($1, $2)")
            .bind(WAKE_CHANNEL)
            .bind(wake.payload())
            .execute(&mut conn)
            .await
    }

    async fn listen_wakes(&self) -> Result<Option<WakeListener>> {
        let listener = WakeListener::connect(self.options.clone(), self.call_timeout).await?;
        Ok(Some(listener))
    }

    /// Takes (or checks) the presence lock for `holder` on the dedicated session: a held,
    /// answering session is kept; a broken one is replaced and the lock taken again.
    async fn hold_presence(&self, holder: &str) -> Result<bool> {
        let held = self.take_presence();
        if let Some((name, mut conn)) = held {
            if name == holder && sqlx::query("SELECT 1").execute(&mut conn).await.is_ok() {
                self.put_presence(name, conn);
                return Ok(true);
            }
            // A broken session (its lock is gone with it) or another name: start again.
            let _ = conn.close().await;
        }
        let mut conn = PgConnection::connect_with(&self.options)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let row = sqlx::query("SELECT pg_try_advisory_lock($1, $2) AS locked")
            .bind(PRESENCE_NAMESPACE)
            .bind(presence_key(holder))
            .fetch_one(&mut conn)
            .await?;
        let locked: bool = row.try_get("locked")?;
        if !locked {
            // Another live session holds it: the previous session of this very host, not yet
            // seen dead by the server, or another host with the same name (a configuration
            // error). Either way this host cannot prove it is present.
            return Err(StoreError::Busy(format!(
                "presence lock for {holder} is held by another session"
            )));
        }
        self.put_presence(holder.to_owned(), conn);
        Ok(true)
    }

    async fn drop_presence(&self) {
        if let Some((_, conn)) = self.take_presence() {
            let _ = conn.close().await;
        }
    }

    async fn holder_gone(&self, holder: &str) -> Result<Option<bool>> {
        // Try the lock on one pooled connection and give it straight back on the same one: a
        // session lock taken and kept would make the holder look alive to everyone else.
        let mut conn = Postgres::acquire(&self.pool).await?;
        // Parameters are bound as BIGINT: cast to the `(int4, int4)` form the presence lock
        // is taken with.
        let free: bool = query::<Postgres>(
            "SELECT pg_try_advisory_lock(CAST($1 AS INTEGER), CAST($2 AS INTEGER)) AS free",
        )
        .bind(i64::from(PRESENCE_NAMESPACE))
        .bind(i64::from(presence_key(holder)))
        .fetch_one(&mut conn)
        .await?
        .col("free")?;
        if free {
            query::<Postgres>(
                "SELECT pg_advisory_unlock(CAST($1 AS INTEGER), CAST($2 AS INTEGER))",
            )
            .bind(i64::from(PRESENCE_NAMESPACE))
            .bind(i64::from(presence_key(holder)))
            .execute(&mut conn)
            .await?;
        }
        Ok(Some(free))
    }

    async fn await_holder_gone(&self, holder: &str) -> Result<bool> {
        // A session of its own that blocks in `pg_advisory_lock` until the holder's session
        // ends; the server wakes it at that instant. Then the lock is let go at once.
        let mut conn = PgConnection::connect_with(&self.options)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        // This one wait is meant to last as long as the holder lives: not the pool's statement
        // timeout (see `crate::postgres`).
        sqlx::query("SET statement_timeout = 0")
            .execute(&mut conn)
            .await?;
        sqlx::query("SELECT pg_advisory_lock($1, $2)")
            .bind(PRESENCE_NAMESPACE)
            .bind(presence_key(holder))
            .execute(&mut conn)
            .await?;
        let _ = sqlx::query("SELECT pg_advisory_unlock($1, $2)")
            .bind(PRESENCE_NAMESPACE)
            .bind(presence_key(holder))
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        Ok(true)
    }
}

impl PostgresStore {
    fn take_presence(&self) -> Option<(String, PgConnection)> {
        let mut cell = self.presence.lock().unwrap_or_else(PoisonError::into_inner);
        cell.held.take()
    }

    fn put_presence(&self, holder: String, conn: PgConnection) {
        let mut cell = self.presence.lock().unwrap_or_else(PoisonError::into_inner);
        cell.held = Some((holder, conn));
    }
}

/// SQLite: one machine, no sessions to watch. Wake-ups stay in process; presence is proved by
/// the host's own data-directory lock (see `muninn-host`), not by the store.
impl HostSignals for SqliteStore {
    async fn announce_wake(&self, _mind: &str, _from: &str) -> Result<()> {
        Ok(())
    }

    async fn listen_wakes(&self) -> Result<Option<WakeListener>> {
        Ok(None)
    }

    async fn hold_presence(&self, _holder: &str) -> Result<bool> {
        Ok(false)
    }

    async fn holder_gone(&self, _holder: &str) -> Result<Option<bool>> {
        Ok(None)
    }

    async fn await_holder_gone(&self, _holder: &str) -> Result<bool> {
        Ok(false)
    }

    async fn drop_presence(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_payload_round_trips_and_foreign_payloads_are_skipped() {
        let wake = Wake {
            mind: "vala".into(),
            from: "box-1a2b-77".into(),
        };
        assert_eq!(Wake::parse(&wake.payload()), Some(wake));
        assert_eq!(Wake::parse("no newline"), None);
    }

    #[test]
    fn presence_keys_differ_by_holder_and_are_stable() {
        assert_eq!(presence_key("a"), presence_key("a"));
        assert_ne!(presence_key("box-1-10"), presence_key("box-1-11"));
        // FNV-1a of the empty string is its offset basis.
        assert_eq!(presence_key("") as u32, 0x811c_9dc5);
    }
}
