//! The PostgreSQL backend, for several hosts sharing one database.
//!
//! Selected by a `postgres://` URL. Plain TCP (no TLS stack is linked): meant for loopback or a
//! trusted network; put a TLS-terminating proxy in front otherwise.
//!
//! ## Concurrency
//!
//! Transactions run at READ COMMITTED. Every fenced write starts by locking the Mind's lease row
//! (`SELECT … FOR UPDATE`): one Mind's fenced writers are serialised, and an `acquire_lease` by
//! another holder waits for the in-flight write to commit, after which the old token is refused.
//! Unfenced intake (deliveries, operator briefs) serialises per Mind on its counter row.
//! Migrations run under a transaction-scoped advisory lock, so hosts starting together migrate
//! once.
//!
//! The schema lives in the connection's `search_path` (normally `public`); tests give each case
//! its own schema via [`PostgresStore::connect_in_schema`].
//!
//! ## Every call bounded
//!
//! A lock held elsewhere (an operator's `LOCK TABLE`, a client frozen mid-transaction) would
//! otherwise hold a store call for ever: the Mind's step with it, silently, and — through the
//! lease row a fenced write locks — every other writer of that Mind. So each pooled session
//! runs with [`STATEMENT_TIMEOUT`] (the server cancels a statement, a lock wait included, past
//! it: a retryable `Busy`) and [`IDLE_IN_TRANSACTION_TIMEOUT`] (the server ends a session left
//! idle inside a transaction, releasing its locks). A URL's own `options` naming either setting
//! wins (`?options[statement_timeout]=2s`). Migrations take up to [`MIGRATION_TIMEOUT`]
//! per statement; the session that waits for another host's presence lock
//! (`await_holder_gone`) waits without one, by design.
//!
//! The server's timeouts need a server that answers. One that goes silent without closing the
//! connection (a network partition, a frozen virtual machine, a firewall dropping the flow)
//! leaves the client waiting on TCP, which gives up after many minutes or never. So every
//! [`Store`](crate::Store) call also has a client-side deadline, [`CALL_TIMEOUT`] unless the
//! URL's `call_timeout` says otherwise (`?call_timeout=5s`; `ms`, `s` or `min`, a bare number
//! is milliseconds): past it the call returns a retryable `Unavailable` naming the call, and
//! the connection it was waiting on is closed, never handed back to the pool (`crate::read`,
//! `crate::write`). sqlx exposes no TCP keepalive setting, so the deadline is the bound. It
//! is longer than the statement timeout: a lock wait ends on the server first, as `Busy`.
//! `await_holder_gone` is not bounded (it waits as long as the other host lives); the checks
//! at open are, migrations only by their statement timeout.
//!
//! ## No password shown
//!
//! The connect options hold the URL's password; this store's `Debug` names the server, user
//! and database only (sqlx's own `Debug` of the options prints the password).

use std::str::FromStr;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::error::{Result, StoreError};

/// The PostgreSQL migrations, in order: (version, name, SQL). Append only.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "turn_keys",
        include_str!("../migrations/postgres/0002_turn_keys.sql"),
    ),
    (
        3,
        "delivery_context_ledger_events",
        include_str!("../migrations/postgres/0003_delivery_context_ledger_events.sql"),
    ),
    (
        4,
        "segment_memory",
        include_str!("../migrations/postgres/0004_segment_memory.sql"),
    ),
    (
        5,
        "ledger_decided",
        include_str!("../migrations/postgres/0005_ledger_decided.sql"),
    ),
    (
        6,
        "ledger_provider_miss",
        include_str!("../migrations/postgres/0006_ledger_provider_miss.sql"),
    ),
    (
        7,
        "cursors_failed_sends",
        include_str!("../migrations/postgres/0007_cursors_failed_sends.sql"),
    ),
    (
        8,
        "counter_floors",
        include_str!("../migrations/postgres/0008_counter_floors.sql"),
    ),
    (
        9,
        "transcript_keys",
        include_str!("../migrations/postgres/0009_transcript_keys.sql"),
    ),
    (
        10,
        "transcript_keys_per_role",
        include_str!("../migrations/postgres/0010_transcript_keys_per_role.sql"),
    ),
];

/// The advisory lock key that serialises migrations ("muninn" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x6d75_6e69_6e6e;

/// How long the server lets one statement of a pooled session run, lock waits included, before
/// cancelling it (see "Every call bounded"): the pool's own acquire timeout, and SQLite's busy
/// timeout.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a pooled session may sit idle inside a transaction before the server ends it. The
/// store never waits on anything but the database inside a transaction, so only a frozen or
/// lost client reaches it.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// The statement timeout of a migration's statements (a column added to a long ledger).
pub const MIGRATION_TIMEOUT: Duration = Duration::from_secs(600);

/// How long one store call may wait for the database before it is given up as unanswered (see
/// "Every call bounded"). Three statement timeouts: a call runs a few statements, and each may
/// wait out a lock until the server cancels it; only a silent server takes longer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The URL parameter that sets the call deadline (see "Every call bounded"); muninn's own, so
/// it is taken out before sqlx reads the URL.
const CALL_TIMEOUT_PARAM: &str = "call_timeout";

/// The PostgreSQL store. Cheap to share behind an `Arc`; holds a connection pool.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    /// How to open the dedicated sessions of [`crate::hosts`] (presence, listener, watchers).
    pub(crate) options: PgConnectOptions,
    /// This host's presence session, once held (see [`crate::hosts`]).
    pub(crate) presence: crate::hosts::PresenceCell,
    /// The deadline of one store call (see "Every call bounded").
    pub(crate) call_timeout: Duration,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`) and applies pending migrations.
    /// A `call_timeout` parameter sets the deadline of each call (see "Every call bounded").
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        let (url, call_timeout) = call_timeout_of(url)?;
        let options = PgConnectOptions::from_str(&url)
            .map_err(|e| StoreError::invalid(format!("bad postgres URL: {e}")))?;
        PostgresStore::connect_with(options, call_timeout).await
    }

    /// Connects with the tables in `schema` (which must exist) instead of the default
    /// `search_path`.
    pub async fn connect_in_schema(url: &str, schema: &str) -> Result<PostgresStore> {
        let (url, call_timeout) = call_timeout_of(url)?;
        let options = PgConnectOptions::from_str(&url)
            .map_err(|e| StoreError::invalid(format!("bad postgres URL: {e}")))?
            .options([("search_path", schema)]);
        PostgresStore::connect_with(options, call_timeout).await
    }

    async fn connect_with(
        options: PgConnectOptions,
        call_timeout: Duration,
    ) -> Result<PostgresStore> {
        let options = bounded(options);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let store = PostgresStore {
            pool,
            options,
            presence: Default::default(),
            call_timeout,
        };
        store.migrate().await?;
        match tokio::time::timeout(call_timeout, crate::schema_check::check(&store.pool)).await {
            Ok(checked) => checked?,
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "the schema check at open: no answer from the database within {} ms",
                    call_timeout.as_millis()
                )));
            }
        }
        Ok(store)
    }

    /// Starts a write transaction (READ COMMITTED; fenced writes lock the lease row).
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Postgres>> {
        crate::write::WriteTx::begin(&self.pool, "BEGIN", None, None).await
    }

    /// Applies pending migrations in one transaction under an advisory lock.
    async fn migrate(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // Set first: a host starting while another migrates waits for the lock as long as a
        // migration may take, not the pool's statement timeout.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SET LOCAL statement_timeout = {}",
            MIGRATION_TIMEOUT.as_millis()
        )))
        .execute(&mut *tx)
        .await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK_KEY)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_version (\
             version BIGINT PRIMARY KEY NOT NULL, name TEXT NOT NULL, \
             applied_at TEXT NOT NULL DEFAULT CAST(CURRENT_TIMESTAMP AS TEXT))",
        )
        .execute(&mut *tx)
        .await?;
        crate::sql::migrations::apply(&mut tx, MIGRATIONS).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The connect options with the store's timeouts added where the URL set none (see "Every
/// call bounded").
fn bounded(options: PgConnectOptions) -> PgConnectOptions {
    let given = options.get_options().unwrap_or_default().to_owned();
    let mut options = options;
    for (setting, limit) in [
        ("statement_timeout", STATEMENT_TIMEOUT),
        (
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT,
        ),
    ] {
        if !given.contains(setting) {
            options = options.options([(setting, limit.as_millis())]);
        }
    }
    options
}

/// The URL without its `call_timeout` parameter, and the deadline it sets ([`CALL_TIMEOUT`]
/// if none).
fn call_timeout_of(url: &str) -> Result<(String, Duration)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), CALL_TIMEOUT));
    };
    let mut call_timeout = CALL_TIMEOUT;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((CALL_TIMEOUT_PARAM, value)) => call_timeout = duration(value)?,
            _ => kept.push(pair),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((url, call_timeout))
}

/// A positive duration as `250ms`, `5s`, `2min` or a bare number of milliseconds.
fn duration(text: &str) -> Result<Duration> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let per_unit_ms = match &text[digits.len()..] {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" => 60_000,
        _ => 0,
    };
    match digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(per_unit_ms))
    {
        Some(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(StoreError::invalid(format!(
            "bad postgres URL: {CALL_TIMEOUT_PARAM}={text} is not a positive duration \
             (250ms, 5s, 2min)"
        ))),
    }
}

/// Where the store is, without the password (see "No password shown").
impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        server(&mut f.debug_struct("PostgresStore"), &self.options)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// The fields that say where a PostgreSQL database is — server, port, user, database — and
/// never the password: every `Debug` of connect options or a URL goes through here.
pub(crate) fn server<'s, 'a, 'b>(
    out: &'s mut std::fmt::DebugStruct<'a, 'b>,
    options: &PgConnectOptions,
) -> &'s mut std::fmt::DebugStruct<'a, 'b> {
    out.field("host", &options.get_host())
        .field("port", &options.get_port())
        .field("username", &options.get_username())
        .field("database", &options.get_database())
}

/// A database spec (what [`crate::open`] takes) as a `Debug` may show it, for a configuration
/// printed in a log or a panic: a PostgreSQL URL as [`PostgresStore`]'s own `Debug` names it,
/// without the password; a SQLite path as it is (it holds no secret).
pub struct ShownDatabase<'a>(pub &'a str);

impl std::fmt::Debug for ShownDatabase<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !crate::is_postgres(self.0) {
            return std::fmt::Debug::fmt(self.0, f);
        }
        let options = call_timeout_of(self.0)
            .ok()
            .and_then(|(url, _)| PgConnectOptions::from_str(&url).ok());
        match options {
            Some(options) => server(&mut f.debug_struct("PostgresUrl"), &options).finish(),
            // Where the password would sit in a URL that does not parse is anyone's guess.
            None => f.write_str("<a postgres URL that does not parse, not shown>"),
        }
    }
}

/// What the shared SQL of [`crate::sql`] needs from this store; [`crate::Store`] follows.
impl crate::sql::Backend for PostgresStore {
    type Db = Postgres;
    const NAME: &'static str = "postgres";
    fn pool(&self) -> &PgPool {
        &self.pool
    }
    async fn begin_write(&self) -> Result<crate::write::WriteTx<Postgres>> {
        PostgresStore::begin_write(self).await
    }
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.call_timeout)
    }
    /// Nothing to record at close: PostgreSQL keeps its own counters durable.
    async fn before_close(&self) {}
}

#[cfg(test)]
mod tests {
    use super::{CALL_TIMEOUT, call_timeout_of};
    use std::time::Duration;

    /// The URL parameter sets the deadline and is taken out; other parameters stay.
    #[test]
    fn the_call_timeout_comes_from_the_url_and_leaves_it() {
        let base = "postgres://u@h:5432/db";
        let cases = [
            (base.to_owned(), (base.to_owned(), CALL_TIMEOUT)),
            (
                format!("{base}?call_timeout=2s"),
                (base.to_owned(), Duration::from_secs(2)),
            ),
            (
                format!("{base}?sslmode=disable&call_timeout=250ms&application_name=m"),
                (
                    format!("{base}?sslmode=disable&application_name=m"),
                    Duration::from_millis(250),
                ),
            ),
            (
                format!("{base}?call_timeout=1500"),
                (base.to_owned(), Duration::from_millis(1500)),
            ),
            (
                format!("{base}?call_timeout=2min"),
                (base.to_owned(), Duration::from_secs(120)),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(call_timeout_of(&url).unwrap(), expected, "{url}");
        }
        for bad in ["0", "5h", "s", "-1s", ""] {
            let url = format!("{base}?call_timeout={bad}");
            let refused = call_timeout_of(&url).unwrap_err().to_string();
            assert!(refused.contains("call_timeout"), "{bad}: {refused}");
        }
    }
}
