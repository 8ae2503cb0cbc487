//! A write transaction that cannot poison the pool.
//!
//! sqlx's own `Transaction` hands its connection back to the pool whatever happened. When a
//! `COMMIT` fails — a full disk, an I/O error — the connection goes back with the transaction in
//! an unknown state, and sqlx's bookkeeping then refuses every later `BEGIN` on it
//! ("attempted to call begin_with at non-zero transaction depth"): every write failed until the
//! host restarted, even after the disk had room again. [`WriteTx`] begins and ends the
//! transaction itself, on a connection it owns, and takes that connection out of the pool
//! whenever the transaction does not end in a successful `COMMIT` — a failed commit, a rollback
//! that failed, or a transaction dropped by an early return. The connection is detached from
//! the pool and dropped on the spot: SQLite's connection worker closes its handle on its own
//! thread and PostgreSQL's socket closes, so the write lock goes at once (an asynchronous
//! close would wait for the runtime, holding the database's write lock meanwhile), and both
//! engines roll back a transaction whose connection goes. The pool opens a fresh connection
//! for the next writer.

use crate::error::Result;
use sqlx::pool::PoolConnection;
use sqlx::{Database, Executor, Pool};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Work done around every write transaction's `COMMIT`. Before it, on the same connection and
/// still under the write lock: SQLite's [`crate::id_guard::IdGuard`] reserves the ids the
/// transaction issued in the store's identity file there, so no id is committed before the
/// file covers it; an error aborts the transaction. After it, with the connection back in the
/// pool and the write lock released: SQLite's durability barrier ([`crate::wal_sync`]) waits
/// for a shared fsync that covers the commit, so [`WriteTx::commit`] returns only once the
/// commit is on disk, while the next writer already works.
#[async_trait::async_trait]
pub(crate) trait CommitHook<DB: Database>: Send + Sync {
    /// Called once, before `COMMIT`.
    async fn before_commit(&self, conn: &mut DB::Connection) -> Result<()>;

    /// Called once after a successful `COMMIT`; an error means the commit may not be durable.
    async fn after_commit(&self) -> Result<()> {
        Ok(())
    }
}

/// A write transaction on a pooled connection; see the module documentation.
pub(crate) struct WriteTx<DB: Database> {
    /// The connection: taken only by `drop`.
    conn: Option<PoolConnection<DB>>,
    /// Whether the transaction ended cleanly (committed or rolled back): only then does the
    /// connection go back to the pool.
    ended: bool,
    /// Run before `COMMIT` (see [`CommitHook`]).
    hook: Option<Arc<dyn CommitHook<DB>>>,
    /// This process's turn to write (SQLite: see `crate::sqlite`'s "Concurrency"), given back
    /// with the connection: at `COMMIT`'s end, or when the transaction is dropped.
    turn: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<DB: Database> WriteTx<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    /// Takes a connection and begins a transaction on it with `begin` (`BEGIN IMMEDIATE` on
    /// SQLite, `BEGIN` on PostgreSQL), holding `turn` (if any) until the transaction ends.
    pub(crate) async fn begin(
        pool: &Pool<DB>,
        begin: &'static str,
        hook: Option<Arc<dyn CommitHook<DB>>>,
        turn: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<WriteTx<DB>> {
        let mut tx = WriteTx {
            conn: Some(pool.acquire().await?),
            ended: false,
            hook,
            turn,
        };
        sqlx::raw_sql(begin).execute(&mut *tx).await?;
        Ok(tx)
    }

    /// Commits. On failure the connection is closed (after a best-effort rollback), never
    /// handed back to the pool.
    pub(crate) async fn commit(mut self) -> Result<()> {
        if let Some(hook) = self.hook.clone() {
            // Dropping `self` on this error closes the connection, rolling back.
            hook.before_commit(&mut self).await?;
        }
        match sqlx::raw_sql("COMMIT").execute(&mut *self).await {
            Ok(_) => {
                self.ended = true;
                // Back to the pool first, and the writers' turn given up: the next writer need
                // not wait for our fsync.
                drop(self.conn.take());
                drop(self.turn.take());
                match &self.hook {
                    Some(hook) => hook.after_commit().await,
                    None => Ok(()),
                }
            }
            Err(e) => {
                let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *self).await;
                Err(e.into())
            }
        }
    }
}

impl<DB: Database> Drop for WriteTx<DB> {
    fn drop(&mut self) {
        if !self.ended
            && let Some(conn) = self.conn.take()
        {
            drop(conn.detach());
        }
    }
}

/// A statement in a write transaction needs no in-flight mark: whatever cut it short, the
/// transaction did not commit, so `drop` detaches the connection.
impl<DB: Database> crate::read::Conn<DB> for WriteTx<DB> {
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

// The connection is `Some` from `begin` until `drop` takes it: nothing can reach a `WriteTx`
// in between without one.
#[allow(clippy::expect_used)]
impl<DB: Database> Deref for WriteTx<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        self.conn
            .as_ref()
            .expect("a write transaction has its connection")
    }
}

#[allow(clippy::expect_used)]
impl<DB: Database> DerefMut for WriteTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.conn
            .as_mut()
            .expect("a write transaction has its connection")
    }
}
