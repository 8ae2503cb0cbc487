//! A read connection that cannot poison the pool, and what a statement runs on.
//!
//! A store call cut short by its deadline (see `crate::postgres`, "Every call bounded") is a
//! future dropped mid-statement: its query was sent, its answer never read. sqlx hands a
//! connection dropped that way back to the pool by pinging it first, in a task of its own and
//! without a deadline; on a network gone silent that ping waits as long as TCP does (hours),
//! holding one of the pool's few slots meanwhile, and a handful of such calls leave the pool
//! nothing to serve with even once a new connection would work. [`ReadConn`] knows whether a
//! statement is in flight on it ([`Conn::in_flight`], set by every statement the store runs):
//! dropped with one in flight, its connection is detached from the pool and dropped on the
//! spot, closing the socket; the pool opens a fresh one for the next caller. Dropped between
//! statements it goes back as usual. Write transactions need no such mark: [`WriteTx`] already
//! detaches its connection whenever the transaction did not end in a `COMMIT`.
//!
//! [`WriteTx`]: crate::write::WriteTx

use sqlx::pool::PoolConnection;
use sqlx::{Database, Postgres, Sqlite};

/// Something a statement runs on: a plain connection, a [`ReadConn`] or a write transaction.
pub(crate) trait Conn<DB: Database>: Send {
    /// The connection itself.
    fn connection(&mut self) -> &mut DB::Connection;
    /// Told `true` as a statement starts on it and `false` once it has been answered. A
    /// statement whose future is dropped in between never hears `false`.
    fn in_flight(&mut self, _running: bool) {}
}

impl Conn<Postgres> for sqlx::PgConnection {
    fn connection(&mut self) -> &mut sqlx::PgConnection {
        self
    }
}

impl Conn<Sqlite> for sqlx::SqliteConnection {
    fn connection(&mut self) -> &mut sqlx::SqliteConnection {
        self
    }
}

/// A pooled connection for reads outside a write transaction; see the module documentation.
pub(crate) struct ReadConn<DB: Database> {
    /// Taken only by `drop`.
    conn: Option<PoolConnection<DB>>,
    /// Whether a statement was started on it and not yet answered.
    running: bool,
}

impl<DB: Database> ReadConn<DB> {
    pub(crate) fn new(conn: PoolConnection<DB>) -> ReadConn<DB> {
        ReadConn {
            conn: Some(conn),
            running: false,
        }
    }
}

// The connection is `Some` from `new` until `drop` takes it.
#[allow(clippy::expect_used)]
impl<DB: Database> Conn<DB> for ReadConn<DB> {
    fn connection(&mut self) -> &mut DB::Connection {
        self.conn
            .as_mut()
            .expect("a read connection has its connection")
    }
    fn in_flight(&mut self, running: bool) {
        self.running = running;
    }
}

impl<DB: Database> Drop for ReadConn<DB> {
    fn drop(&mut self) {
        if self.running
            && let Some(conn) = self.conn.take()
        {
            drop(conn.detach());
        }
    }
}
