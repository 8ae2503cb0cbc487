//! What the aggregate modules need from a database engine, without naming one.
//!
//! Every query in [`crate::sql`] is written once, generic over `DB: Engine`. Rust cannot carry
//! sqlx's bounds (`i64: Encode<DB>`, `&mut DB::Connection: Executor`, …) from a trait to its
//! users, so instead of repeating a dozen `where` lines on every function, the bounds live
//! here, once, behind a few plain methods:
//!
//! - [`query`] starts a statement and [`Stmt::bind`] adds a parameter ([`Param`] lists the
//!   five kinds the store binds: integers, optional integers, booleans, text, optional text).
//! - [`Stmt::execute`], [`Stmt::fetch_optional`], [`Stmt::fetch_one`], [`Stmt::fetch_all`]
//!   run it on a connection (a pooled one, or a [`WriteTx`]'s).
//! - [`RowExt::col`] reads a column as one of the same kinds (see [`Column`]).
//! - [`Backend`] is what a store struct adds: its pool and how its write transactions begin.
//!
//! What differs between the engines is only here and in the backend modules:
//! [`Engine::LEASE_LOCK_SQL`] and [`Engine::MIND_LOCK_SQL`] (PostgreSQL locks the lease row
//! `FOR UPDATE`, the Mind's row `FOR NO KEY UPDATE`; SQLite's write lock already serialises),
//! [`Engine::MEMORY_MATCH_SQL`] (how each folds A–Z and nothing else) and `begin_write()`
//! (`BEGIN IMMEDIATE` vs `BEGIN`).

use std::borrow::Cow;
use std::future::Future;

use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Encode, Pool, Postgres, Sqlite, Type};

use crate::error::Result;
use crate::hosts::HostSignals;
use crate::read::{Conn, ReadConn};
use crate::write::WriteTx;

/// A value bound to a statement parameter. Text is borrowed where it can be: sqlx encodes a
/// parameter when it is bound, so nothing outlives the call.
pub(crate) enum Param<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Bool(bool),
    Text(Cow<'a, str>),
    OptText(Option<Cow<'a, str>>),
}

impl From<i64> for Param<'_> {
    fn from(value: i64) -> Self {
        Param::Int(value)
    }
}
impl From<&i64> for Param<'_> {
    fn from(value: &i64) -> Self {
        Param::Int(*value)
    }
}
impl From<Option<i64>> for Param<'_> {
    fn from(value: Option<i64>) -> Self {
        Param::OptInt(value)
    }
}
impl From<bool> for Param<'_> {
    fn from(value: bool) -> Self {
        Param::Bool(value)
    }
}
impl<'a> From<&'a str> for Param<'a> {
    fn from(value: &'a str) -> Self {
        Param::Text(Cow::Borrowed(value))
    }
}
impl<'a> From<&'a String> for Param<'a> {
    fn from(value: &'a String) -> Self {
        Param::Text(Cow::Borrowed(value))
    }
}
impl From<String> for Param<'_> {
    fn from(value: String) -> Self {
        Param::Text(Cow::Owned(value))
    }
}
impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(value: Option<&'a str>) -> Self {
        Param::OptText(value.map(Cow::Borrowed))
    }
}
impl From<Option<String>> for Param<'_> {
    fn from(value: Option<String>) -> Self {
        Param::OptText(value.map(Cow::Owned))
    }
}

/// A statement with its parameters bound so far; see [`query`].
#[must_use = "a statement does nothing until it is run"]
pub(crate) struct Stmt<DB: Database> {
    query: Query<'static, DB, <DB as Database>::Arguments>,
}

/// Starts a statement. The SQL is a `&'static str` so sqlx can cache it as a prepared
/// statement per connection, as it did when every query was a literal.
pub(crate) fn query<DB: Engine>(sql: &'static str) -> Stmt<DB> {
    Stmt {
        query: sqlx::query(sql),
    }
}

impl<DB: Engine> Stmt<DB> {
    /// Binds the next `$N` parameter, text without NUL characters (see [`without_nul`]).
    pub(crate) fn bind<'a>(self, value: impl Into<Param<'a>>) -> Stmt<DB> {
        let value = match value.into() {
            Param::Text(text) => Param::Text(without_nul(text)),
            Param::OptText(text) => Param::OptText(text.map(without_nul)),
            other => other,
        };
        Stmt {
            query: DB::bind(self.query, value),
        }
    }
}

/// Text as the store keeps it: without U+0000. PostgreSQL refuses a NUL in text (SQLSTATE
/// 22021, not retryable) where SQLite keeps it, so one Matrix event or model reply carrying one
/// would commit on SQLite and fail for ever on PostgreSQL — a transport re-reading the same
/// batch, a turn retried without end. Dropped on every backend, from what is written and what
/// is looked up alike, a key keeps matching itself; and dropping (rather than replacing it with
/// U+FFFD, three bytes) never takes a value over a size bound checked before it was bound.
fn without_nul(text: Cow<'_, str>) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', ""))
    } else {
        text
    }
}

impl<DB: Engine> Stmt<DB> {
    /// Runs it for its effect.
    pub(crate) async fn execute(self, conn: &mut impl Conn<DB>) -> Result<()> {
        conn.in_flight(true);
        let answer = DB::execute(conn.connection(), self.query).await;
        conn.in_flight(false);
        answer
    }

    /// Runs it for at most one row.
    pub(crate) async fn fetch_optional(self, conn: &mut impl Conn<DB>) -> Result<Option<DB::Row>> {
        conn.in_flight(true);
        let answer = DB::fetch_optional(conn.connection(), self.query).await;
        conn.in_flight(false);
        answer
    }

    /// Runs it for exactly one row (`RowNotFound` otherwise, as sqlx reports it).
    pub(crate) async fn fetch_one(self, conn: &mut impl Conn<DB>) -> Result<DB::Row> {
        conn.in_flight(true);
        let answer = DB::fetch_one(conn.connection(), self.query).await;
        conn.in_flight(false);
        answer
    }

    /// Runs it for every row.
    pub(crate) async fn fetch_all(self, conn: &mut impl Conn<DB>) -> Result<Vec<DB::Row>> {
        conn.in_flight(true);
        let answer = DB::fetch_all(conn.connection(), self.query).await;
        conn.in_flight(false);
        answer
    }
}

/// A column type the store reads: the same five kinds as [`Param`].
pub(crate) trait Column: Sized {
    fn read<DB: Engine>(row: &DB::Row, name: &str) -> Result<Self>;
}

impl Column for i64 {
    fn read<DB: Engine>(row: &DB::Row, name: &str) -> Result<Self> {
        DB::read_int(row, name)
    }
}
impl Column for Option<i64> {
    fn read<DB: Engine>(row: &DB::Row, name: &str) -> Result<Self> {
        DB::read_opt_int(row, name)
    }
}
impl Column for bool {
    fn read<DB: Engine>(row: &DB::Row, name: &str) -> Result<Self> {
        DB::read_bool(row, name)
    }
}
impl Column for String {
    fn read<DB: Engine>(row: &DB::Row, name: &str) -> Result<Self> {
        DB::read_text(row, name)
    }
}
impl Column for Option<String> {
    fn read<DB: Engine>(row: &DB::Row, name: &str) -> Result<Self> {
        DB::read_opt_text(row, name)
    }
}

/// `row.col("name")`: sqlx's `try_get` for the engines behind [`Engine`].
pub(crate) trait RowExt {
    fn col<T: Column>(&self, name: &str) -> Result<T>;
}

impl<R: sqlx::Row> RowExt for R
where
    R::Database: Engine,
{
    fn col<T: Column>(&self, name: &str) -> Result<T> {
        T::read::<R::Database>(self, name)
    }
}

/// A database engine the store runs on: SQLite or PostgreSQL. See the module docs.
pub(crate) trait Engine: Database<Connection: Conn<Self>> {
    /// How a fenced transaction reads a Mind's lease row (see [`crate::sql::leases`]).
    const LEASE_LOCK_SQL: &'static str;
    /// The memory search: notes whose text holds a needle, A–Z folded and nothing else (see
    /// `matching_sql!` in [`crate::sql::memory`]).
    const MEMORY_MATCH_SQL: &'static str;
    /// Reads a Mind's row (`$1`) and holds it against every other transaction that locks it
    /// until this one ends: a caps compare-and-set (see `put_caps` in [`crate::sql::minds`]).
    const MIND_LOCK_SQL: &'static str;

    // The plumbing behind [`Stmt`] and [`RowExt::col`]: the aggregate modules call those.

    fn bind(
        query: Query<'static, Self, Self::Arguments>,
        value: Param<'_>,
    ) -> Query<'static, Self, Self::Arguments>;
    fn execute(
        conn: &mut Self::Connection,
        query: Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn fetch_optional(
        conn: &mut Self::Connection,
        query: Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;
    fn fetch_one(
        conn: &mut Self::Connection,
        query: Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<Self::Row>> + Send;
    fn fetch_all(
        conn: &mut Self::Connection,
        query: Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;
    /// Runs SQL without parameters, possibly several statements (a migration). The error is
    /// sqlx's own, so a failed migration reports the database's words.
    fn execute_raw(
        conn: &mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<(), sqlx::Error>> + Send;
    /// A connection from the pool, for reads outside a write transaction (detached, not
    /// returned, if dropped mid-statement: see [`ReadConn`]).
    fn acquire(pool: &Pool<Self>) -> impl Future<Output = Result<ReadConn<Self>>> + Send;
    /// Commits a write transaction (see [`WriteTx::commit`]).
    fn commit(tx: WriteTx<Self>) -> impl Future<Output = Result<()>> + Send;

    fn read_int(row: &Self::Row, name: &str) -> Result<i64>;
    fn read_opt_int(row: &Self::Row, name: &str) -> Result<Option<i64>>;
    fn read_bool(row: &Self::Row, name: &str) -> Result<bool>;
    fn read_text(row: &Self::Row, name: &str) -> Result<String>;
    fn read_opt_text(row: &Self::Row, name: &str) -> Result<Option<String>>;
}

/// What a store struct gives the aggregate modules and the [`Store`](crate::Store)
/// implementation: its pool, how a write transaction begins (the only way one does; see
/// [`crate::write`]), and the few things that differ per backend beyond SQL.
pub(crate) trait Backend: HostSignals + Send + Sync + std::fmt::Debug {
    type Db: Engine;
    /// [`Store::backend`](crate::Store::backend).
    const NAME: &'static str;
    fn pool(&self) -> &Pool<Self::Db>;
    fn begin_write(&self) -> impl Future<Output = Result<WriteTx<Self::Db>>> + Send;
    /// How long one [`Store`](crate::Store) call may wait for the database before it is given
    /// up as unanswered (`bounded` in `store_impl`); `None` waits as long as the call does.
    fn call_timeout(&self) -> Option<std::time::Duration>;
    /// What the backend records on a clean close, before its pool closes.
    fn before_close(&self) -> impl Future<Output = ()> + Send;
    /// [`Store::close`](crate::Store::close): what the backend records, then the presence
    /// session ends (see `crate::hosts`), then the pool closes.
    fn shut_down(&self) -> impl Future<Output = ()> + Send {
        async move {
            self.before_close().await;
            self.drop_presence().await;
            self.pool().close().await;
        }
    }
}

// The engines' implementations: the same few lines for both, written once with sqlx's bounds
// spelt out, and instantiated below.

fn bind_with<DB>(
    query: Query<'static, DB, DB::Arguments>,
    value: Param<'_>,
) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
    for<'t> bool: Encode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
{
    match value {
        Param::Int(v) => query.bind(v),
        Param::OptInt(v) => query.bind(v),
        Param::Bool(v) => query.bind(v),
        Param::Text(v) => query.bind(v.as_ref()),
        Param::OptText(v) => query.bind(v.as_deref()),
    }
}

fn read_with<DB, T>(row: &DB::Row, name: &str) -> Result<T>
where
    DB: Database,
    T: for<'r> Decode<'r, DB> + Type<DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
{
    use sqlx::Row;
    Ok(row.try_get(name)?)
}

macro_rules! engine {
    ($db:ty, $lease_lock:expr, $memory_match:expr, $mind_lock:expr) => {
        impl Engine for $db {
            const LEASE_LOCK_SQL: &'static str = $lease_lock;
            const MEMORY_MATCH_SQL: &'static str = $memory_match;
            const MIND_LOCK_SQL: &'static str = $mind_lock;

            fn bind(
                query: Query<'static, Self, Self::Arguments>,
                value: Param<'_>,
            ) -> Query<'static, Self, Self::Arguments> {
                bind_with(query, value)
            }
            async fn execute(
                conn: &mut Self::Connection,
                query: Query<'static, Self, Self::Arguments>,
            ) -> Result<()> {
                query.execute(&mut *conn).await?;
                Ok(())
            }
            async fn fetch_optional(
                conn: &mut Self::Connection,
                query: Query<'static, Self, Self::Arguments>,
            ) -> Result<Option<Self::Row>> {
                Ok(query.fetch_optional(&mut *conn).await?)
            }
            async fn fetch_one(
                conn: &mut Self::Connection,
                query: Query<'static, Self, Self::Arguments>,
            ) -> Result<Self::Row> {
                Ok(query.fetch_one(&mut *conn).await?)
            }
            async fn fetch_all(
                conn: &mut Self::Connection,
                query: Query<'static, Self, Self::Arguments>,
            ) -> Result<Vec<Self::Row>> {
                Ok(query.fetch_all(&mut *conn).await?)
            }
            async fn execute_raw(
                conn: &mut Self::Connection,
                sql: &'static str,
            ) -> std::result::Result<(), sqlx::Error> {
                sqlx::raw_sql(sql).execute(&mut *conn).await?;
                Ok(())
            }
            async fn acquire(pool: &Pool<Self>) -> Result<ReadConn<Self>> {
                Ok(ReadConn::new(pool.acquire().await?))
            }
            async fn commit(tx: WriteTx<Self>) -> Result<()> {
                tx.commit().await
            }
            fn read_int(row: &Self::Row, name: &str) -> Result<i64> {
                read_with::<Self, _>(row, name)
            }
            fn read_opt_int(row: &Self::Row, name: &str) -> Result<Option<i64>> {
                read_with::<Self, _>(row, name)
            }
            fn read_bool(row: &Self::Row, name: &str) -> Result<bool> {
                read_with::<Self, _>(row, name)
            }
            fn read_text(row: &Self::Row, name: &str) -> Result<String> {
                read_with::<Self, _>(row, name)
            }
            fn read_opt_text(row: &Self::Row, name: &str) -> Result<Option<String>> {
                read_with::<Self, _>(row, name)
            }
        }
    };
}

// SQLite: the write lock taken by `BEGIN IMMEDIATE` already makes the lease row and the Mind's
// row stable; its `lower()` folds A–Z only.
engine!(
    Sqlite,
    "SELECT holder, token, expires_at_ms FROM leases WHERE mind_id = $1",
    super::memory::matching_sql!("lower(text)"),
    "SELECT id FROM minds WHERE id = $1"
);
// PostgreSQL: lock the lease row until commit, so the fence cannot go stale (see `leases`); its
// `lower()` folds A–Z only in the "C" collation (the database's may fold "É" too). The Mind's row
// is locked `FOR NO KEY UPDATE`, not `FOR UPDATE`: that would also wait for every transaction
// inserting a row that references the Mind (their foreign-key checks take `FOR KEY SHARE`), a
// caps edit queueing behind a turn's commit.
engine!(
    Postgres,
    "SELECT holder, token, expires_at_ms FROM leases WHERE mind_id = $1 FOR UPDATE",
    super::memory::matching_sql!(r#"lower(text COLLATE "C")"#),
    "SELECT id FROM minds WHERE id = $1 FOR NO KEY UPDATE"
);
