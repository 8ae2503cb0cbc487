//! The SQL both backends share.
//!
//! SQLite (≥ 3.35) and PostgreSQL accept the same dialect for every statement the store runs:
//! `$N` placeholders, `INSERT … ON CONFLICT … DO UPDATE/NOTHING`, `RETURNING`, `COALESCE`, `CASE`.
//! So the whole [`Store`](crate::Store) implementation is written once, in
//! [`impl_sql_store!`], and instantiated for each backend's concrete sqlx types. What differs
//! per backend is supplied by the backend module:
//!
//! - `begin_write()` — how a write transaction starts. SQLite uses `BEGIN IMMEDIATE`, taking the
//!   database's single write lock up front, so two writers never deadlock upgrading a read lock
//!   (they queue on `busy_timeout` instead). PostgreSQL uses a plain `BEGIN` (READ COMMITTED).
//! - `LEASE_LOCK_SQL` — how a transaction reads a Mind's lease row. On PostgreSQL it is
//!   `SELECT … FOR UPDATE`: every fenced write locks the lease row until it commits, so a
//!   concurrent `acquire_lease` by another holder waits and then sees the committed write, and
//!   the fence check cannot go stale between check and commit. It also serialises one Mind's
//!   fenced writers, which is what keeps per-Mind seqs gap-free and ordered. On SQLite the write
//!   lock already does all of that.
//! - migrations and connection options.
//!
//! ## Invariants kept here
//!
//! - Every mutator is one transaction; an early `?` return drops the transaction, which rolls
//!   it back, so an `Err` never leaves a partial write.
//! - Seqs come from the `counters` table, bumped in the same transaction as the row they
//!   number: gap-free (a rollback undoes the bump) and, because the bump is an atomic upsert
//!   that locks the counter row, distinct under concurrency on both engines.
//! - JSON is stored as the text `serde_json` produced, never as a database JSON type.

use crate::error::{Result, StoreError};

/// Converts a token count or other `u64` into the database's `i64`.
pub(crate) fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| StoreError::invalid(format!("{what} {value} exceeds i64")))
}

/// Converts a stored `i64` back into a `u64` count.
pub(crate) fn to_u64(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value} is negative")))
}

/// Serialises JSON for a TEXT column.
pub(crate) fn json_text<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::invalid(format!("unserialisable JSON: {e}")))
}

/// Parses a TEXT column holding JSON.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// Serialises a list (delivery context, ledger events) for a TEXT column.
pub(crate) fn list_text<T: serde::Serialize>(items: &[T], what: &str) -> Result<String> {
    serde_json::to_string(items)
        .map_err(|e| StoreError::invalid(format!("unserialisable {what}: {e}")))
}

/// Parses a TEXT column holding a JSON list.
pub(crate) fn parse_list<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<Vec<T>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// `%needle%` for a `LIKE … ESCAPE '\'` over lower-cased text.
pub(crate) fn like_pattern(needle: &str) -> String {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The stored spelling of a miss cause.
pub(crate) fn miss_cause_text(cause: muninn_core::ledger::MissCause) -> Result<String> {
    match serde_json::to_value(cause) {
        Ok(serde_json::Value::String(text)) => Ok(text),
        _ => Err(StoreError::invalid(
            "miss cause did not serialise to a string",
        )),
    }
}

/// Parses the stored spelling of a miss cause.
pub(crate) fn parse_miss_cause(text: &str) -> Result<muninn_core::ledger::MissCause> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|e| StoreError::Corrupt(format!("miss cause {text:?}: {e}")))
}

/// Checks a memory note before it is written (the schema checks the byte length again).
pub(crate) fn check_note(note: &crate::types::NewMemoryNote) -> Result<()> {
    if note.text.len() > crate::types::MEMORY_NOTE_MAX_BYTES {
        return Err(StoreError::invalid(format!(
            "memory note of {} bytes exceeds {} bytes",
            note.text.len(),
            crate::types::MEMORY_NOTE_MAX_BYTES
        )));
    }
    Ok(())
}

/// The columns each row type is read from (by its `*_from` reader below), one list per table,
/// so a migration that adds a column changes one list rather than every query reading the
/// table. A macro rather than consts so `concat!` keeps each query a `&'static str`.
macro_rules! columns {
    (mind) => {
        "id, display_name, config, created_at_ms"
    };
    (segment) => {
        "mind_id, role, number, started_at_ms, rehydration_tokens, reason, session_id, \
         ended_at_ms, memory, spec_digest"
    };
    (transcript) => {
        "mind_id, role, seq, segment, kind, body, created_at_ms"
    };
    (delivery) => {
        "mind_id, seq, room, sender, is_direct, to_you, text, source_id, received_at_ms, context"
    };
    (outbox) => {
        "mind_id, request_id, seq, room, text, created_at_ms, sent_at_ms, remote_id, acked_at_ms, \
         failed_at_ms, failure"
    };
    (brief) => {
        "mind_id, seq, text, origin, status, result, created_at_ms, started_at_ms, finished_at_ms"
    };
    (ledger) => {
        "id, mind_id, role, segment, turn, at_ms, idle_gap_ms, model, prefix_tokens, \
         rehydration_tokens, usage_input, usage_cache_write_5m, usage_cache_write_1h, \
         usage_cache_read, usage_output, raw_usage, cost_micro_usd, predicted_read, \
         predicted_write, cache_state, miss_cause, decision, boundary, events, decided, \
         provider_miss_reason, provider_missed_tokens"
    };
    (memory) => {
        "id, mind_id, salience, text, created_at_ms, source"
    };
}
pub(crate) use columns;

/// Implements [`Store`](crate::Store) for `$store`, a struct with a `pool: sqlx::Pool<$db>`
/// field, a `begin_write()` method and a `LEASE_LOCK_SQL` constant (see the module docs).
macro_rules! impl_sql_store {
    ($store:ident, $db:ty, $conn:ty, $name:literal) => {
        use $crate::error::{Result, StoreError};
        use $crate::sql::{
            check_note, json_text, like_pattern, list_text, miss_cause_text, parse_json,
            parse_list, parse_miss_cause, to_i64, to_u64,
        };
        use $crate::types::*;
        use muninn_core::ledger::LedgerRow;
        use muninn_core::miss::{ProviderMiss, ProviderMissReason};
        use muninn_core::money::MicroUsd;
        use muninn_core::trace::Usage;
        use sqlx::Row;

        type DbRow = <$db as sqlx::Database>::Row;


        fn mind_from(row: &DbRow) -> Result<Mind> {
            Ok(Mind {
                id: row.try_get("id")?,
                display_name: row.try_get("display_name")?,
                config: parse_json(&row.try_get::<String, _>("config")?, "mind config")?,
                created_at_ms: row.try_get("created_at_ms")?,
            })
        }

        fn segment_from(row: &DbRow) -> Result<Segment> {
            Ok(Segment {
                mind: row.try_get("mind_id")?,
                role: Role::parse(&row.try_get::<String, _>("role")?)?,
                number: row.try_get("number")?,
                started_at_ms: row.try_get("started_at_ms")?,
                rehydration_tokens: row.try_get("rehydration_tokens")?,
                reason: row.try_get("reason")?,
                session_id: row.try_get("session_id")?,
                ended_at_ms: row.try_get("ended_at_ms")?,
                memory: row.try_get("memory")?,
                spec_digest: row.try_get("spec_digest")?,
            })
        }

        fn transcript_from(row: &DbRow) -> Result<TranscriptItem> {
            Ok(TranscriptItem {
                mind: row.try_get("mind_id")?,
                role: Role::parse(&row.try_get::<String, _>("role")?)?,
                seq: row.try_get("seq")?,
                segment: row.try_get("segment")?,
                kind: TranscriptKind::parse(&row.try_get::<String, _>("kind")?),
                body: parse_json(&row.try_get::<String, _>("body")?, "transcript body")?,
                created_at_ms: row.try_get("created_at_ms")?,
            })
        }

        fn delivery_from(row: &DbRow) -> Result<Delivery> {
            Ok(Delivery {
                mind: row.try_get("mind_id")?,
                seq: row.try_get("seq")?,
                room: row.try_get("room")?,
                sender: row.try_get("sender")?,
                is_direct: row.try_get("is_direct")?,
                to_you: row.try_get("to_you")?,
                text: row.try_get("text")?,
                source_id: row.try_get("source_id")?,
                received_at_ms: row.try_get("received_at_ms")?,
                context: parse_list(&row.try_get::<String, _>("context")?, "delivery context")?,
            })
        }

        fn outbox_from(row: &DbRow) -> Result<OutboxMessage> {
            Ok(OutboxMessage {
                mind: row.try_get("mind_id")?,
                request_id: row.try_get("request_id")?,
                seq: row.try_get("seq")?,
                room: row.try_get("room")?,
                text: row.try_get("text")?,
                created_at_ms: row.try_get("created_at_ms")?,
                sent_at_ms: row.try_get("sent_at_ms")?,
                remote_id: row.try_get("remote_id")?,
                acked_at_ms: row.try_get("acked_at_ms")?,
                failed_at_ms: row.try_get("failed_at_ms")?,
                failure: row.try_get("failure")?,
            })
        }

        fn cursor_from(row: &DbRow) -> Result<Cursor> {
            Ok(Cursor {
                mind: row.try_get("mind_id")?,
                name: row.try_get("name")?,
                value: row.try_get("value")?,
                updated_at_ms: row.try_get("updated_at_ms")?,
            })
        }

        fn brief_from(row: &DbRow) -> Result<Brief> {
            Ok(Brief {
                mind: row.try_get("mind_id")?,
                seq: row.try_get("seq")?,
                text: row.try_get("text")?,
                origin: BriefOrigin::parse(&row.try_get::<String, _>("origin")?)?,
                status: BriefStatus::parse(&row.try_get::<String, _>("status")?)?,
                result: row.try_get("result")?,
                created_at_ms: row.try_get("created_at_ms")?,
                started_at_ms: row.try_get("started_at_ms")?,
                finished_at_ms: row.try_get("finished_at_ms")?,
            })
        }

        fn ledger_from(row: &DbRow) -> Result<LedgerEntry> {
            let tokens = |column: &str| -> Result<u64> { to_u64(row.try_get(column)?, column) };
            let raw_usage: Option<String> = row.try_get("raw_usage")?;
            let miss_cause: Option<String> = row.try_get("miss_cause")?;
            let decided: Option<String> = row.try_get("decided")?;
            let provider_reason: Option<String> = row.try_get("provider_miss_reason")?;
            let provider_missed: Option<i64> = row.try_get("provider_missed_tokens")?;
            let provider_miss = provider_reason
                .map(|reason| -> Result<ProviderMiss> {
                    // A reason a newer build wrote reads as `Other`, never as corruption.
                    Ok(ProviderMiss {
                        reason: ProviderMissReason::from_wire(&reason),
                        missed_tokens: provider_missed
                            .map(|t| to_u64(t, "provider_missed_tokens"))
                            .transpose()?,
                    })
                })
                .transpose()?;
            Ok(LedgerEntry {
                id: row.try_get("id")?,
                row: LedgerRow {
                    mind: row.try_get("mind_id")?,
                    role: row.try_get("role")?,
                    segment: tokens("segment")?,
                    turn: tokens("turn")?,
                    at_ms: row.try_get("at_ms")?,
                    idle_gap_ms: row.try_get("idle_gap_ms")?,
                    model: row.try_get("model")?,
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
                    cost: MicroUsd(row.try_get("cost_micro_usd")?),
                    predicted_read: tokens("predicted_read")?,
                    predicted_write: tokens("predicted_write")?,
                    cache_state: row.try_get("cache_state")?,
                    miss_cause: miss_cause.map(|text| parse_miss_cause(&text)).transpose()?,
                    decision: row.try_get("decision")?,
                    boundary: row.try_get("boundary")?,
                    events: parse_list(&row.try_get::<String, _>("events")?, "ledger events")?,
                    decided: decided
                        .map(|text| parse_json(&text, "ledger decision"))
                        .transpose()?,
                    provider_miss,
                },
            })
        }

        /// `NotFound` unless the Mind exists.
        async fn require_mind(conn: &mut $conn, mind: &str) -> Result<()> {
            let found = sqlx::query("SELECT 1 FROM minds WHERE id = $1")
                .bind(mind)
                .fetch_optional(&mut *conn)
                .await?;
            match found {
                Some(_) => Ok(()),
                None => Err(StoreError::not_found("mind", mind)),
            }
        }

        /// The fence: fails with `Fenced` unless `token` is the Mind's current lease token.
        /// Runs first in every fenced transaction and (on PostgreSQL) locks the lease row until
        /// commit, so the check holds for the whole transaction.
        async fn fence(conn: &mut $conn, mind: &str, token: FencingToken) -> Result<()> {
            let row = sqlx::query($store::LEASE_LOCK_SQL)
                .bind(mind)
                .fetch_optional(&mut *conn)
                .await?;
            let current = match &row {
                Some(row) => {
                    let holder: Option<String> = row.try_get("holder")?;
                    let current: i64 = row.try_get("token")?;
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

        /// Hands `mind`'s lease to `holder` under `token` until `expires` (an acquire or a
        /// takeover, inside the caller's transaction, after its own checks).
        async fn hand_lease(
            conn: &mut $conn,
            mind: &str,
            holder: &str,
            token: i64,
            expires: i64,
        ) -> Result<Lease> {
            sqlx::query(
                "UPDATE leases SET holder = $2, token = $3, expires_at_ms = $4 WHERE mind_id = $1",
            )
            .bind(mind)
            .bind(holder)
            .bind(token)
            .bind(expires)
            .execute(&mut *conn)
            .await?;
            Ok(Lease {
                mind: mind.to_owned(),
                holder: holder.to_owned(),
                token: FencingToken(token),
                expires_at_ms: expires,
            })
        }

        /// Bumps a per-Mind counter and returns the new value (the next seq). A new counter
        /// starts above its floor, if an earlier store in this place left one.
        async fn bump(conn: &mut $conn, mind: &str, name: &str) -> Result<i64> {
            let row = sqlx::query(
                "INSERT INTO counters (mind_id, name, value) VALUES ($1, $2, 1 + COALESCE(\
                 (SELECT value FROM counter_floors WHERE mind_id = $1 AND name = $2), 0)) \
                 ON CONFLICT (mind_id, name) DO UPDATE SET value = counters.value + 1 \
                 RETURNING value",
            )
            .bind(mind)
            .bind(name)
            .fetch_one(&mut *conn)
            .await?;
            Ok(row.try_get("value")?)
        }

        /// The counter's current value (the last seq assigned), 0 if never bumped.
        async fn counter(conn: &mut $conn, mind: &str, name: &str) -> Result<i64> {
            let row = sqlx::query("SELECT value FROM counters WHERE mind_id = $1 AND name = $2")
                .bind(mind)
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?;
            match row {
                Some(row) => Ok(row.try_get("value")?),
                None => Ok(0),
            }
        }

        fn transcript_counter(role: Role) -> &'static str {
            match role {
                Role::Persona => "transcript:persona",
                Role::SelfRole => "transcript:self",
            }
        }

        async fn insert_transcript(
            conn: &mut $conn,
            mind: &str,
            items: &[NewTranscriptItem],
        ) -> Result<Vec<i64>> {
            let mut seqs = Vec::with_capacity(items.len());
            for item in items {
                let seq = bump(conn, mind, transcript_counter(item.role)).await?;
                sqlx::query(
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
                .execute(&mut *conn)
                .await?;
                seqs.push(seq);
            }
            Ok(seqs)
        }

        /// Locks the Mind's delivery counter for the rest of the transaction (creating it at 0),
        /// so one Mind's intake is serialised: a duplicate check after it sees any concurrent
        /// intake of the same source id that committed first (READ COMMITTED reads a fresh
        /// snapshot per statement; on SQLite the write lock already serialises).
        async fn lock_intake(conn: &mut $conn, mind: &str) -> Result<()> {
            sqlx::query(
                "INSERT INTO counters (mind_id, name, value) VALUES ($1, 'delivery', COALESCE(\
                 (SELECT value FROM counter_floors WHERE mind_id = $1 AND name = 'delivery'), 0)) \
                 ON CONFLICT (mind_id, name) DO UPDATE SET value = counters.value",
            )
            .bind(mind)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        /// Intake of one delivery under [`lock_intake`]: a known source id answers its seq
        /// and adds nothing; a new one gets the next seq.
        async fn intake(conn: &mut $conn, mind: &str, delivery: &NewDelivery) -> Result<Posted> {
            let existing = sqlx::query(
                "SELECT seq FROM deliveries WHERE mind_id = $1 AND source_id = $2",
            )
            .bind(mind)
            .bind(&delivery.source_id)
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(row) = existing {
                return Ok(Posted {
                    seq: row.try_get("seq")?,
                    created: false,
                });
            }
            let seq = bump(conn, mind, "delivery").await?;
            sqlx::query(
                "INSERT INTO deliveries (mind_id, seq, room, sender, is_direct, to_you, \
                 text, source_id, received_at_ms, context) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(mind)
            .bind(seq)
            .bind(&delivery.room)
            .bind(&delivery.sender)
            .bind(delivery.is_direct)
            .bind(delivery.to_you)
            .bind(&delivery.text)
            .bind(&delivery.source_id)
            .bind(delivery.received_at_ms)
            .bind(list_text(&delivery.context, "delivery context")?)
            .execute(&mut *conn)
            .await?;
            Ok(Posted { seq, created: true })
        }

        /// Writes a transport's cursor (validated here, after the batch's deliveries: the
        /// cursor is the one write that, alone, would skip mail).
        async fn write_cursor(conn: &mut $conn, mind: &str, cursor: &NewCursor) -> Result<()> {
            if cursor.name.is_empty() {
                return Err(StoreError::invalid("a cursor needs a name"));
            }
            if cursor.value.len() > CURSOR_MAX_BYTES {
                return Err(StoreError::invalid(format!(
                    "cursor {} of {} bytes exceeds {CURSOR_MAX_BYTES} bytes",
                    cursor.name,
                    cursor.value.len()
                )));
            }
            sqlx::query(
                "INSERT INTO cursors (mind_id, name, value, updated_at_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (mind_id, name) \
                 DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(mind)
            .bind(&cursor.name)
            .bind(&cursor.value)
            .bind(cursor.updated_at_ms)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        async fn find_outbox(
            conn: &mut $conn,
            mind: &str,
            request_id: &str,
        ) -> Result<Option<OutboxMessage>> {
            let row = sqlx::query(
                concat!(
                    "SELECT ",
                    $crate::sql::columns!(outbox),
                    " FROM outbox WHERE mind_id = $1 AND request_id = $2",
                ),
            )
                .bind(mind)
                .bind(request_id)
                .fetch_optional(&mut *conn)
                .await?;
            row.as_ref().map(outbox_from).transpose()
        }


        async fn insert_outbox(
            conn: &mut $conn,
            mind: &str,
            messages: &[NewOutboxMessage],
        ) -> Result<Vec<OutboxMessage>> {
            let mut rows = Vec::with_capacity(messages.len());
            for message in messages {
                // Idempotent by request id: a repeat (a turn retried after a crash between
                // send and ack) gets the row recorded the first time, unchanged.
                if let Some(existing) = find_outbox(conn, mind, &message.request_id).await? {
                    rows.push(existing);
                    continue;
                }
                let seq = bump(conn, mind, "outbox").await?;
                sqlx::query(
                    "INSERT INTO outbox (mind_id, request_id, seq, room, text, created_at_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(mind)
                .bind(&message.request_id)
                .bind(seq)
                .bind(&message.room)
                .bind(&message.text)
                .bind(message.created_at_ms)
                .execute(&mut *conn)
                .await?;
                rows.push(OutboxMessage {
                    mind: mind.to_owned(),
                    request_id: message.request_id.clone(),
                    seq,
                    room: message.room.clone(),
                    text: message.text.clone(),
                    created_at_ms: message.created_at_ms,
                    sent_at_ms: None,
                    remote_id: None,
                    acked_at_ms: None,
                    failed_at_ms: None,
                    failure: None,
                });
            }
            Ok(rows)
        }

        async fn insert_ledger(
            conn: &mut $conn,
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
                let raw_usage = row.raw_usage.as_ref().map(json_text).transpose()?;
                let miss_cause = row.miss_cause.map(miss_cause_text).transpose()?;
                let decided = row.decided.as_ref().map(json_text).transpose()?;
                let provider_missed = (row.provider_miss.and_then(|p| p.missed_tokens))
                    .map(|t| to_i64(t, "provider_miss.missed_tokens"))
                    .transpose()?;
                let inserted = sqlx::query(
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
                .fetch_one(&mut *conn)
                .await?;
                ids.push(inserted.try_get("id")?);
            }
            Ok(ids)
        }

        async fn insert_memory(
            conn: &mut $conn,
            mind: &str,
            notes: &[NewMemoryNote],
        ) -> Result<Vec<i64>> {
            let mut ids = Vec::with_capacity(notes.len());
            for note in notes {
                check_note(note)?;
                let inserted = sqlx::query(
                    "INSERT INTO memory_notes (mind_id, salience, text, created_at_ms, source) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(mind)
                .bind(note.salience)
                .bind(&note.text)
                .bind(note.created_at_ms)
                .bind(&note.source)
                .fetch_one(&mut *conn)
                .await?;
                let id: i64 = inserted.try_get("id")?;
                for (position, sender) in note.about.iter().enumerate() {
                    sqlx::query(
                        "INSERT INTO memory_about (note_id, position, sender) VALUES ($1, $2, $3)",
                    )
                    .bind(id)
                    .bind(to_i64(position as u64, "about position")?)
                    .bind(sender)
                    .execute(&mut *conn)
                    .await?;
                }
                ids.push(id);
            }
            Ok(ids)
        }

        async fn insert_brief(conn: &mut $conn, mind: &str, brief: &NewBrief) -> Result<Brief> {
            let seq = bump(conn, mind, "brief").await?;
            sqlx::query(
                "INSERT INTO briefs (mind_id, seq, text, origin, status, created_at_ms) \
                 VALUES ($1, $2, $3, $4, 'queued', $5)",
            )
            .bind(mind)
            .bind(seq)
            .bind(&brief.text)
            .bind(brief.origin.as_str())
            .bind(brief.created_at_ms)
            .execute(&mut *conn)
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

        /// The mailbox ack position: the last acknowledged delivery seq, 0 if none yet.
        async fn acked(conn: &mut $conn, mind: &str) -> Result<i64> {
            let row = sqlx::query("SELECT acked_seq FROM mailbox_acks WHERE mind_id = $1")
                .bind(mind)
                .fetch_optional(&mut *conn)
                .await?;
            match row {
                Some(row) => Ok(row.try_get("acked_seq")?),
                None => Ok(0),
            }
        }

        /// Moves the ack position to `max(position, seq)`; refuses a seq never delivered, which
        /// would silently skip mail that arrives later.
        async fn advance_ack(conn: &mut $conn, mind: &str, seq: i64) -> Result<i64> {
            let last = counter(conn, mind, "delivery").await?;
            if seq > last {
                return Err(StoreError::invalid(format!(
                    "ack through {seq} is beyond the last delivered seq {last}"
                )));
            }
            if seq < 0 {
                return Err(StoreError::invalid(format!("ack through negative seq {seq}")));
            }
            let row = sqlx::query(
                "INSERT INTO mailbox_acks (mind_id, acked_seq) VALUES ($1, $2) \
                 ON CONFLICT (mind_id) DO UPDATE SET acked_seq = CASE \
                 WHEN excluded.acked_seq > mailbox_acks.acked_seq THEN excluded.acked_seq \
                 ELSE mailbox_acks.acked_seq END RETURNING acked_seq",
            )
            .bind(mind)
            .bind(seq)
            .fetch_one(&mut *conn)
            .await?;
            Ok(row.try_get("acked_seq")?)
        }

        async fn fetch_segment(
            conn: &mut $conn,
            mind: &str,
            role: Role,
            number: i64,
        ) -> Result<Segment> {
            let row = sqlx::query(
                concat!(
                    "SELECT ",
                    $crate::sql::columns!(segment),
                    " FROM segments WHERE mind_id = $1 AND role = $2 AND number = $3",
                ),
            )
            .bind(mind)
            .bind(role.as_str())
            .bind(number)
            .fetch_optional(&mut *conn)
            .await?;
            match row {
                Some(row) => segment_from(&row),
                None => Err(StoreError::not_found(
                    "segment",
                    format!("{mind}/{}/{number}", role.as_str()),
                )),
            }
        }

        async fn fetch_brief(conn: &mut $conn, mind: &str, seq: i64) -> Result<Brief> {
            let row = sqlx::query(
                concat!(
                    "SELECT ",
                    $crate::sql::columns!(brief),
                    " FROM briefs WHERE mind_id = $1 AND seq = $2",
                ),
            )
            .bind(mind)
            .bind(seq)
            .fetch_optional(&mut *conn)
            .await?;
            match row {
                Some(row) => brief_from(&row),
                None => Err(StoreError::not_found("brief", format!("{mind}/{seq}"))),
            }
        }

        async fn memory_with_about(conn: &mut $conn, rows: Vec<DbRow>) -> Result<Vec<MemoryNote>> {
            let mut notes = Vec::with_capacity(rows.len());
            for row in rows {
                let id: i64 = row.try_get("id")?;
                let about_rows = sqlx::query(
                    "SELECT sender FROM memory_about WHERE note_id = $1 ORDER BY position",
                )
                .bind(id)
                .fetch_all(&mut *conn)
                .await?;
                let about = about_rows
                    .iter()
                    .map(|r| r.try_get::<String, _>("sender"))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                notes.push(MemoryNote {
                    id,
                    mind: row.try_get("mind_id")?,
                    about,
                    salience: row.try_get("salience")?,
                    text: row.try_get("text")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                    source: row.try_get("source")?,
                });
            }
            Ok(notes)
        }

        fn lease_from(mind: &str, row: &DbRow) -> Result<Option<Lease>> {
            let holder: Option<String> = row.try_get("holder")?;
            Ok(match holder {
                Some(holder) => Some(Lease {
                    mind: mind.to_owned(),
                    holder,
                    token: FencingToken(row.try_get("token")?),
                    expires_at_ms: row.try_get("expires_at_ms")?,
                }),
                None => None,
            })
        }

        #[async_trait::async_trait]
        impl $crate::Store for $store {
            fn backend(&self) -> &'static str {
                $name
            }

            async fn schema_version(&self) -> Result<i64> {
                let row = sqlx::query(
                    "SELECT CAST(COALESCE(MAX(version), 0) AS BIGINT) AS v FROM schema_version",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok(row.try_get("v")?)
            }

            async fn close(&self) {
                self.before_close().await;
                self.drop_presence().await;
                self.pool.close().await;
            }

            async fn announce_wake(&self, mind: &str, from: &str) -> Result<()> {
                self.announce_wake_impl(mind, from).await
            }

            async fn listen_wakes(&self) -> Result<Option<$crate::WakeListener>> {
                self.listen_wakes_impl().await
            }

            async fn hold_presence(&self, holder: &str) -> Result<bool> {
                self.hold_presence_impl(holder).await
            }

            async fn holder_gone(&self, holder: &str) -> Result<Option<bool>> {
                self.holder_gone_impl(holder).await
            }

            async fn await_holder_gone(&self, holder: &str) -> Result<bool> {
                self.await_holder_gone_impl(holder).await
            }

            async fn create_mind(&self, mind: &Mind) -> Result<Mind> {
                if mind.id.is_empty() {
                    return Err(StoreError::invalid("empty mind id"));
                }
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "INSERT INTO minds (id, display_name, config, created_at_ms) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                )
                .bind(&mind.id)
                .bind(&mind.display_name)
                .bind(json_text(&mind.config)?)
                .bind(mind.created_at_ms)
                .execute(&mut *tx)
                .await?;
                let row = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(mind),
                        " FROM minds WHERE id = $1",
                    ),
                )
                .bind(&mind.id)
                .fetch_one(&mut *tx)
                .await?;
                let stored = mind_from(&row)?;
                tx.commit().await?;
                Ok(stored)
            }

            async fn mind(&self, id: &str) -> Result<Option<Mind>> {
                let row = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(mind),
                        " FROM minds WHERE id = $1",
                    ),
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(mind_from).transpose()
            }

            async fn minds(&self) -> Result<Vec<Mind>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(mind),
                        " FROM minds ORDER BY id",
                    ),
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(mind_from).collect()
            }

            async fn update_mind(
                &self,
                id: &str,
                display_name: &str,
                config: &serde_json::Value,
            ) -> Result<Mind> {
                let mut tx = self.begin_write().await?;
                let row = sqlx::query(
                    concat!(
                        "UPDATE minds SET display_name = $2, config = $3 WHERE id = $1 RETURNING ",
                        $crate::sql::columns!(mind),
                    ),
                )
                .bind(id)
                .bind(display_name)
                .bind(json_text(config)?)
                .fetch_optional(&mut *tx)
                .await?;
                let mind = match row {
                    Some(row) => mind_from(&row)?,
                    None => return Err(StoreError::not_found("mind", id)),
                };
                tx.commit().await?;
                Ok(mind)
            }

            async fn settings(&self, mind: &str) -> Result<MindSettings> {
                let mut conn = self.pool.acquire().await?;
                require_mind(&mut conn, mind).await?;
                let row = sqlx::query(
                    "SELECT spend_cap_micro_usd, spend_window_ms, brake, turn_limit \
                     FROM settings WHERE mind_id = $1",
                )
                .bind(mind)
                .fetch_optional(&mut *conn)
                .await?;
                match row {
                    Some(row) => Ok(MindSettings {
                        spend_cap: row
                            .try_get::<Option<i64>, _>("spend_cap_micro_usd")?
                            .map(MicroUsd),
                        spend_window_ms: row.try_get("spend_window_ms")?,
                        brake: row.try_get("brake")?,
                        turn_limit: row.try_get("turn_limit")?,
                    }),
                    None => Ok(MindSettings::default()),
                }
            }

            async fn put_settings(
                &self,
                mind: &str,
                settings: &MindSettings,
                now_ms: i64,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                require_mind(&mut tx, mind).await?;
                sqlx::query(
                    "INSERT INTO settings (mind_id, spend_cap_micro_usd, spend_window_ms, brake, \
                     turn_limit, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6) \
                     ON CONFLICT (mind_id) DO UPDATE SET \
                     spend_cap_micro_usd = excluded.spend_cap_micro_usd, \
                     spend_window_ms = excluded.spend_window_ms, brake = excluded.brake, \
                     turn_limit = excluded.turn_limit, updated_at_ms = excluded.updated_at_ms",
                )
                .bind(mind)
                .bind(settings.spend_cap.map(|cap| cap.0))
                .bind(settings.spend_window_ms)
                .bind(settings.brake)
                .bind(settings.turn_limit)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn acquire_lease(
                &self,
                mind: &str,
                holder: &str,
                ttl_ms: i64,
                now_ms: i64,
            ) -> Result<Option<Lease>> {
                if ttl_ms <= 0 {
                    return Err(StoreError::invalid(format!("lease ttl {ttl_ms} ms")));
                }
                let mut tx = self.begin_write().await?;
                require_mind(&mut tx, mind).await?;
                // Make sure the row exists before locking it, so two first acquirers race on
                // the lock and not on the insert.
                sqlx::query(
                    "INSERT INTO leases (mind_id, holder, token, expires_at_ms) \
                     VALUES ($1, NULL, 0, 0) ON CONFLICT (mind_id) DO NOTHING",
                )
                .bind(mind)
                .execute(&mut *tx)
                .await?;
                let row = sqlx::query($store::LEASE_LOCK_SQL)
                    .bind(mind)
                    .fetch_one(&mut *tx)
                    .await?;
                let current_holder: Option<String> = row.try_get("holder")?;
                let token: i64 = row.try_get("token")?;
                let expires_at_ms: i64 = row.try_get("expires_at_ms")?;
                let live = expires_at_ms > now_ms;
                let new_token = match current_holder {
                    // Another holder's live lease: refused. Ended with a commit (of at most
                    // the empty row above), not by dropping the transaction: a dropped one
                    // closes its connection (see `write.rs`), and a host that is refused at
                    // every look would open a new database connection each time — tens of
                    // milliseconds on its next write, a delivery posted through it.
                    Some(current) if live && current != holder => {
                        tx.commit().await?;
                        return Ok(None);
                    }
                    // The same holder while live: a renewal, same token.
                    Some(_) if live => token,
                    // Free, released or expired: a new, strictly greater token.
                    _ => token + 1,
                };
                let expires = now_ms.saturating_add(ttl_ms);
                let lease = hand_lease(&mut tx, mind, holder, new_token, expires).await?;
                tx.commit().await?;
                Ok(Some(lease))
            }

            async fn renew_lease(
                &self,
                mind: &str,
                token: FencingToken,
                ttl_ms: i64,
                now_ms: i64,
            ) -> Result<Lease> {
                if ttl_ms <= 0 {
                    return Err(StoreError::invalid(format!("lease ttl {ttl_ms} ms")));
                }
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                // Renewing after expiry is allowed while the token is still current: nobody
                // acquired in between, so nobody else can have written.
                let row = sqlx::query(
                    "UPDATE leases SET expires_at_ms = $2 WHERE mind_id = $1 \
                     RETURNING holder, token, expires_at_ms",
                )
                .bind(mind)
                .bind(now_ms.saturating_add(ttl_ms))
                .fetch_one(&mut *tx)
                .await?;
                let lease = lease_from(mind, &row)?
                    .ok_or_else(|| StoreError::Corrupt("fenced lease has no holder".into()))?;
                tx.commit().await?;
                Ok(lease)
            }

            // groupcommit: per-host lease renewal, one statement for every lease a host holds
            // (the same SQL on both engines).
            async fn renew_leases(
                &self,
                holder: &str,
                ttl_ms: i64,
                now_ms: i64,
            ) -> Result<Vec<Lease>> {
                if ttl_ms <= 0 {
                    return Err(StoreError::invalid(format!("lease ttl {ttl_ms} ms")));
                }
                let mut tx = self.begin_write().await?;
                let rows = sqlx::query(
                    "UPDATE leases SET expires_at_ms = $2 WHERE holder = $1 \
                     RETURNING mind_id, holder, token, expires_at_ms",
                )
                .bind(holder)
                .bind(now_ms.saturating_add(ttl_ms))
                .fetch_all(&mut *tx)
                .await?;
                let mut leases = Vec::with_capacity(rows.len());
                for row in &rows {
                    let mind: String = row.try_get("mind_id")?;
                    leases.extend(lease_from(&mind, row)?);
                }
                tx.commit().await?;
                leases.sort_by(|a, b| a.mind.cmp(&b.mind));
                Ok(leases)
            }
            // groupcommit: end of per-host lease renewal.

            async fn release_lease(&self, mind: &str, token: FencingToken) -> Result<()> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                // The row stays (with its token) so the next acquire's token is greater.
                sqlx::query("UPDATE leases SET holder = NULL, expires_at_ms = 0 WHERE mind_id = $1")
                    .bind(mind)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn take_over_lease(
                &self,
                mind: &str,
                holder: &str,
                previous: FencingToken,
                ttl_ms: i64,
                now_ms: i64,
            ) -> Result<Option<Lease>> {
                if ttl_ms <= 0 {
                    return Err(StoreError::invalid(format!("lease ttl {ttl_ms} ms")));
                }
                let mut tx = self.begin_write().await?;
                require_mind(&mut tx, mind).await?;
                // The fence's own lock: a write of the old holder in flight commits first, and
                // every later one sees the new token.
                let row = sqlx::query($store::LEASE_LOCK_SQL)
                    .bind(mind)
                    .fetch_optional(&mut *tx)
                    .await?;
                let current: Option<i64> = row.map(|r| r.try_get("token")).transpose()?;
                if current != Some(previous.0) {
                    // Nothing written; committed to keep the connection (as in acquire).
                    tx.commit().await?;
                    return Ok(None);
                }
                let token = previous.0 + 1;
                let expires = now_ms.saturating_add(ttl_ms);
                let lease = hand_lease(&mut tx, mind, holder, token, expires).await?;
                tx.commit().await?;
                Ok(Some(lease))
            }

            async fn lease(&self, mind: &str) -> Result<Option<Lease>> {
                let row = sqlx::query(
                    "SELECT holder, token, expires_at_ms FROM leases WHERE mind_id = $1",
                )
                .bind(mind)
                .fetch_optional(&self.pool)
                .await?;
                match row {
                    Some(row) => lease_from(mind, &row),
                    None => Ok(None),
                }
            }

            async fn start_segment(
                &self,
                mind: &str,
                token: FencingToken,
                segment: &NewSegment,
            ) -> Result<Segment> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let role = segment.role.as_str();
                sqlx::query(
                    "UPDATE segments SET ended_at_ms = $3 \
                     WHERE mind_id = $1 AND role = $2 AND ended_at_ms IS NULL",
                )
                .bind(mind)
                .bind(role)
                .bind(segment.started_at_ms)
                .execute(&mut *tx)
                .await?;
                let row = sqlx::query(
                    "SELECT CAST(COALESCE(MAX(number), -1) + 1 AS BIGINT) AS next \
                     FROM segments WHERE mind_id = $1 AND role = $2",
                )
                .bind(mind)
                .bind(role)
                .fetch_one(&mut *tx)
                .await?;
                let number: i64 = row.try_get("next")?;
                sqlx::query(
                    "INSERT INTO segments (mind_id, role, number, started_at_ms, \
                     rehydration_tokens, reason, session_id, memory, spec_digest) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(mind)
                .bind(role)
                .bind(number)
                .bind(segment.started_at_ms)
                .bind(segment.rehydration_tokens)
                .bind(&segment.reason)
                .bind(segment.session_id.as_deref())
                .bind(segment.memory.as_deref())
                .bind(segment.spec_digest.as_deref())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(Segment {
                    mind: mind.to_owned(),
                    role: segment.role,
                    number,
                    started_at_ms: segment.started_at_ms,
                    rehydration_tokens: segment.rehydration_tokens,
                    reason: segment.reason.clone(),
                    session_id: segment.session_id.clone(),
                    ended_at_ms: None,
                    memory: segment.memory.clone(),
                    spec_digest: segment.spec_digest.clone(),
                })
            }

            async fn set_segment_session(
                &self,
                mind: &str,
                token: FencingToken,
                role: Role,
                number: i64,
                session_id: &str,
            ) -> Result<Segment> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                sqlx::query(
                    "UPDATE segments SET session_id = $4 \
                     WHERE mind_id = $1 AND role = $2 AND number = $3",
                )
                .bind(mind)
                .bind(role.as_str())
                .bind(number)
                .bind(session_id)
                .execute(&mut *tx)
                .await?;
                let segment = fetch_segment(&mut tx, mind, role, number).await?;
                tx.commit().await?;
                Ok(segment)
            }

            async fn end_segment(
                &self,
                mind: &str,
                token: FencingToken,
                role: Role,
                number: i64,
                ended_at_ms: i64,
            ) -> Result<Segment> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                sqlx::query(
                    "UPDATE segments SET ended_at_ms = COALESCE(ended_at_ms, $4) \
                     WHERE mind_id = $1 AND role = $2 AND number = $3",
                )
                .bind(mind)
                .bind(role.as_str())
                .bind(number)
                .bind(ended_at_ms)
                .execute(&mut *tx)
                .await?;
                let segment = fetch_segment(&mut tx, mind, role, number).await?;
                tx.commit().await?;
                Ok(segment)
            }

            async fn current_segment(&self, mind: &str, role: Role) -> Result<Option<Segment>> {
                let row = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(segment),
                        " FROM segments WHERE mind_id = $1 AND role = $2 ORDER BY number DESC \
                         LIMIT 1",
                    ),
                )
                .bind(mind)
                .bind(role.as_str())
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(segment_from).transpose()
            }

            async fn segments(&self, mind: &str, role: Role) -> Result<Vec<Segment>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(segment),
                        " FROM segments WHERE mind_id = $1 AND role = $2 ORDER BY number",
                    ),
                )
                .bind(mind)
                .bind(role.as_str())
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(segment_from).collect()
            }

            async fn append_transcript(
                &self,
                mind: &str,
                token: FencingToken,
                items: &[NewTranscriptItem],
            ) -> Result<Vec<i64>> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let seqs = insert_transcript(&mut tx, mind, items).await?;
                tx.commit().await?;
                Ok(seqs)
            }

            async fn transcript_range(
                &self,
                mind: &str,
                role: Role,
                from_seq: i64,
                to_seq: Option<i64>,
                limit: i64,
            ) -> Result<Vec<TranscriptItem>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(transcript),
                        " FROM transcript WHERE mind_id = $1 AND role = $2 \
                         AND seq >= $3 AND seq < $4 ORDER BY seq LIMIT $5",
                    ),
                )
                .bind(mind)
                .bind(role.as_str())
                .bind(from_seq)
                .bind(to_seq.unwrap_or(i64::MAX))
                .bind(limit.max(0))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(transcript_from).collect()
            }

            async fn transcript_tail(
                &self,
                mind: &str,
                role: Role,
                count: i64,
            ) -> Result<Vec<TranscriptItem>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(transcript),
                        " FROM transcript WHERE mind_id = $1 AND role = $2 ORDER BY seq DESC \
                         LIMIT $3",
                    ),
                )
                .bind(mind)
                .bind(role.as_str())
                .bind(count.max(0))
                .fetch_all(&self.pool)
                .await?;
                let mut items = rows.iter().map(transcript_from).collect::<Result<Vec<_>>>()?;
                items.reverse();
                Ok(items)
            }

            async fn post_delivery(&self, mind: &str, delivery: &NewDelivery) -> Result<Posted> {
                let mut tx = self.begin_write().await?;
                require_mind(&mut tx, mind).await?;
                lock_intake(&mut tx, mind).await?;
                let posted = intake(&mut tx, mind, delivery).await?;
                tx.commit().await?;
                Ok(posted)
            }

            async fn post_batch(&self, mind: &str, batch: &IntakeBatch) -> Result<Vec<Posted>> {
                // One transaction: an error anywhere drops `tx`, which rolls back every
                // delivery and counter bump before it, so the cursor and the mail move together.
                let mut tx = self.begin_write().await?;
                require_mind(&mut tx, mind).await?;
                lock_intake(&mut tx, mind).await?;
                let mut posted = Vec::with_capacity(batch.deliveries.len());
                for delivery in &batch.deliveries {
                    posted.push(intake(&mut tx, mind, delivery).await?);
                }
                if let Some(cursor) = &batch.cursor {
                    write_cursor(&mut tx, mind, cursor).await?;
                }
                tx.commit().await?;
                Ok(posted)
            }

            async fn cursor(&self, mind: &str, name: &str) -> Result<Option<Cursor>> {
                let row = sqlx::query(
                    "SELECT mind_id, name, value, updated_at_ms FROM cursors \
                     WHERE mind_id = $1 AND name = $2",
                )
                .bind(mind)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(cursor_from).transpose()
            }

            async fn pending_deliveries(
                &self,
                mind: &str,
                after_seq: i64,
                limit: i64,
            ) -> Result<Vec<Delivery>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(delivery),
                        " FROM deliveries WHERE mind_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                    ),
                )
                .bind(mind)
                .bind(after_seq)
                .bind(limit.max(0))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(delivery_from).collect()
            }

            async fn ack_position(&self, mind: &str) -> Result<i64> {
                let mut conn = self.pool.acquire().await?;
                acked(&mut conn, mind).await
            }

            async fn mailbox(&self, mind: &str) -> Result<Mailbox> {
                let mut conn = self.pool.acquire().await?;
                let after = acked(&mut conn, mind).await?;
                // COUNT is BIGINT on PostgreSQL and INTEGER on SQLite; both read as i64.
                let row = sqlx::query(
                    "SELECT CAST(COUNT(*) AS BIGINT) AS pending, MIN(received_at_ms) AS oldest \
                     FROM deliveries WHERE mind_id = $1 AND seq > $2",
                )
                .bind(mind)
                .bind(after)
                .fetch_one(&mut *conn)
                .await?;
                Ok(Mailbox {
                    pending: row.try_get("pending")?,
                    oldest_received_at_ms: row.try_get("oldest")?,
                })
            }

            async fn ack_through(&self, mind: &str, token: FencingToken, seq: i64) -> Result<i64> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let position = advance_ack(&mut tx, mind, seq).await?;
                tx.commit().await?;
                Ok(position)
            }

            async fn enqueue_outbox(
                &self,
                mind: &str,
                token: FencingToken,
                messages: &[NewOutboxMessage],
            ) -> Result<Vec<OutboxMessage>> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let rows = insert_outbox(&mut tx, mind, messages).await?;
                tx.commit().await?;
                Ok(rows)
            }

            async fn unsent_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(outbox),
                        " FROM outbox WHERE mind_id = $1 AND sent_at_ms IS NULL \
                         AND failed_at_ms IS NULL ORDER BY seq \
                         LIMIT $2",
                    ),
                )
                .bind(mind)
                .bind(limit.max(0))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(outbox_from).collect()
            }

            async fn unacked_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(outbox),
                        " FROM outbox WHERE mind_id = $1 AND acked_at_ms IS NULL \
                         AND failed_at_ms IS NULL ORDER BY seq \
                         LIMIT $2",
                    ),
                )
                .bind(mind)
                .bind(limit.max(0))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(outbox_from).collect()
            }

            async fn outbox_after(
                &self,
                mind: &str,
                after_seq: i64,
                limit: i64,
            ) -> Result<Vec<OutboxMessage>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(outbox),
                        " FROM outbox WHERE mind_id = $1 AND seq > $2 AND acked_at_ms IS NULL \
                         AND failed_at_ms IS NULL ORDER BY seq LIMIT $3",
                    ),
                )
                .bind(mind)
                .bind(after_seq)
                .bind(limit.max(0))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(outbox_from).collect()
            }

            async fn mark_outbox_sent(
                &self,
                mind: &str,
                token: FencingToken,
                request_id: &str,
                remote_id: Option<&str>,
                sent_at_ms: i64,
            ) -> Result<OutboxMessage> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                sqlx::query(
                    "UPDATE outbox SET sent_at_ms = COALESCE(sent_at_ms, $3), \
                     remote_id = COALESCE(remote_id, $4) WHERE mind_id = $1 AND request_id = $2",
                )
                .bind(mind)
                .bind(request_id)
                .bind(sent_at_ms)
                .bind(remote_id)
                .execute(&mut *tx)
                .await?;
                let message = find_outbox(&mut tx, mind, request_id)
                    .await?
                    .ok_or_else(|| StoreError::not_found("outbox message", request_id))?;
                tx.commit().await?;
                Ok(message)
            }

            async fn ack_outbox(
                &self,
                mind: &str,
                request_id: &str,
                remote_id: Option<&str>,
                acked_at_ms: i64,
            ) -> Result<OutboxMessage> {
                // Not fenced: the transport acks, whichever host holds the lease.
                // COALESCE keeps the first ack time and remote id, so a repeat or a race
                // changes nothing.
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "UPDATE outbox SET acked_at_ms = COALESCE(acked_at_ms, $3), \
                     sent_at_ms = COALESCE(sent_at_ms, $3), remote_id = COALESCE(remote_id, $4) \
                     WHERE mind_id = $1 AND request_id = $2",
                )
                .bind(mind)
                .bind(request_id)
                .bind(acked_at_ms)
                .bind(remote_id)
                .execute(&mut *tx)
                .await?;
                let message = find_outbox(&mut tx, mind, request_id)
                    .await?
                    .ok_or_else(|| StoreError::not_found("outbox message", request_id))?;
                tx.commit().await?;
                Ok(message)
            }

            async fn fail_outbox(
                &self,
                mind: &str,
                request_id: &str,
                failure: &str,
                failed_at_ms: i64,
            ) -> Result<OutboxMessage> {
                // Not fenced, like the ack. The first failure stays; an acked message keeps
                // its ack and gets none.
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "UPDATE outbox SET failed_at_ms = COALESCE(failed_at_ms, $3), \
                     failure = COALESCE(failure, $4) \
                     WHERE mind_id = $1 AND request_id = $2 AND acked_at_ms IS NULL",
                )
                .bind(mind)
                .bind(request_id)
                .bind(failed_at_ms)
                .bind(failure)
                .execute(&mut *tx)
                .await?;
                let message = find_outbox(&mut tx, mind, request_id)
                    .await?
                    .ok_or_else(|| StoreError::not_found("outbox message", request_id))?;
                tx.commit().await?;
                Ok(message)
            }

            async fn failed_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(outbox),
                        " FROM outbox WHERE mind_id = $1 AND failed_at_ms IS NOT NULL \
                         ORDER BY failed_at_ms DESC, seq DESC LIMIT $2",
                    ),
                )
                .bind(mind)
                .bind(limit.max(0))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(outbox_from).collect()
            }

            async fn record_turn(
                &self,
                mind: &str,
                token: FencingToken,
                turn: &TurnRecord,
            ) -> Result<TurnReceipt> {
                // One transaction for the whole turn. Any error below returns early and drops
                // `tx`, which rolls back everything written before it.
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                if let Some(key) = &turn.turn_key {
                    // The fence serialises this Mind's writers, so check-then-insert is safe.
                    let seen = sqlx::query("SELECT 1 FROM turns WHERE mind_id = $1 AND turn_key = $2")
                        .bind(mind)
                        .bind(key)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if seen.is_some() {
                        return Err(StoreError::TurnAlreadyRecorded {
                            mind: mind.to_owned(),
                            turn_key: key.clone(),
                        });
                    }
                    sqlx::query("INSERT INTO turns (mind_id, turn_key) VALUES ($1, $2)")
                        .bind(mind)
                        .bind(key)
                        .execute(&mut *tx)
                        .await?;
                }
                let transcript_seqs = insert_transcript(&mut tx, mind, &turn.transcript).await?;
                let outbox = insert_outbox(&mut tx, mind, &turn.outbox).await?;
                let ledger_ids = insert_ledger(&mut tx, mind, &turn.ledger).await?;
                let memory_ids = insert_memory(&mut tx, mind, &turn.memory).await?;
                let mut brief_seqs = Vec::with_capacity(turn.briefs.len());
                for brief in &turn.briefs {
                    brief_seqs.push(insert_brief(&mut tx, mind, brief).await?.seq);
                }
                // The ack goes last: it is the one write that, alone, would lose mail.
                let ack_position = match turn.ack_through {
                    Some(seq) => advance_ack(&mut tx, mind, seq).await?,
                    None => acked(&mut tx, mind).await?,
                };
                tx.commit().await?;
                Ok(TurnReceipt {
                    transcript_seqs,
                    outbox,
                    ledger_ids,
                    memory_ids,
                    brief_seqs,
                    ack_position,
                })
            }

            async fn append_ledger(
                &self,
                mind: &str,
                token: FencingToken,
                rows: &[LedgerRow],
            ) -> Result<Vec<i64>> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let ids = insert_ledger(&mut tx, mind, rows).await?;
                tx.commit().await?;
                Ok(ids)
            }

            async fn ledger(&self, query: &LedgerQuery) -> Result<Vec<LedgerEntry>> {
                let from = query.from_ms.unwrap_or(i64::MIN);
                let to = query.to_ms.unwrap_or(i64::MAX);
                let after = query.after_id.unwrap_or(i64::MIN);
                let limit = query.limit.unwrap_or(i64::MAX).max(0);
                let rows = match &query.mind {
                    Some(mind) => {
                        sqlx::query(
                            concat!(
                                "SELECT ",
                                $crate::sql::columns!(ledger),
                                " FROM ledger WHERE at_ms >= $1 AND at_ms < $2 AND id > $3 \
                                 AND mind_id = $5 ORDER BY id LIMIT $4",
                            ),
                        )
                        .bind(from)
                        .bind(to)
                        .bind(after)
                        .bind(limit)
                        .bind(mind)
                        .fetch_all(&self.pool)
                        .await?
                    }
                    None => {
                        sqlx::query(
                            concat!(
                                "SELECT ",
                                $crate::sql::columns!(ledger),
                                " FROM ledger WHERE at_ms >= $1 AND at_ms < $2 AND id > $3 \
                                 ORDER BY id LIMIT $4",
                            ),
                        )
                        .bind(from)
                        .bind(to)
                        .bind(after)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?
                    }
                };
                rows.iter().map(ledger_from).collect()
            }

            async fn spend(&self, mind: &str, from_ms: i64, to_ms: i64) -> Result<MicroUsd> {
                // SUM over BIGINT is NUMERIC on PostgreSQL; cast back to the i64 we store.
                let row = sqlx::query(
                    "SELECT CAST(COALESCE(SUM(cost_micro_usd), 0) AS BIGINT) AS total FROM ledger \
                     WHERE mind_id = $1 AND at_ms >= $2 AND at_ms < $3",
                )
                .bind(mind)
                .bind(from_ms)
                .bind(to_ms)
                .fetch_one(&self.pool)
                .await?;
                Ok(MicroUsd(row.try_get("total")?))
            }

            async fn add_memory(
                &self,
                mind: &str,
                token: FencingToken,
                notes: &[NewMemoryNote],
            ) -> Result<Vec<i64>> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let ids = insert_memory(&mut tx, mind, notes).await?;
                tx.commit().await?;
                Ok(ids)
            }

            async fn memory_newest(&self, mind: &str, limit: i64) -> Result<Vec<MemoryNote>> {
                let mut conn = self.pool.acquire().await?;
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(memory),
                        " FROM memory_notes WHERE mind_id = $1 \
                         ORDER BY created_at_ms DESC, id DESC LIMIT $2",
                    ),
                )
                .bind(mind)
                .bind(limit.max(0))
                .fetch_all(&mut *conn)
                .await?;
                memory_with_about(&mut conn, rows).await
            }

            async fn memory_about(
                &self,
                mind: &str,
                sender: &str,
                limit: i64,
            ) -> Result<Vec<MemoryNote>> {
                let mut conn = self.pool.acquire().await?;
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(memory),
                        " FROM memory_notes WHERE mind_id = $1 AND id IN \
                         (SELECT note_id FROM memory_about WHERE sender = $2) \
                         ORDER BY created_at_ms DESC, id DESC LIMIT $3",
                    ),
                )
                .bind(mind)
                .bind(sender)
                .bind(limit.max(0))
                .fetch_all(&mut *conn)
                .await?;
                memory_with_about(&mut conn, rows).await
            }

            async fn memory_search(
                &self,
                mind: &str,
                needle: &str,
                limit: i64,
            ) -> Result<Vec<MemoryNote>> {
                let mut conn = self.pool.acquire().await?;
                let rows = sqlx::query(
                    concat!(
                        "SELECT ",
                        $crate::sql::columns!(memory),
                        " FROM memory_notes WHERE mind_id = $1 AND lower(text) LIKE $2 ESCAPE '\\' \
                         ORDER BY created_at_ms DESC, id DESC LIMIT $3",
                    ),
                )
                .bind(mind)
                .bind(like_pattern(needle))
                .bind(limit.max(0))
                .fetch_all(&mut *conn)
                .await?;
                memory_with_about(&mut conn, rows).await
            }

            async fn enqueue_brief(&self, mind: &str, brief: &NewBrief) -> Result<Brief> {
                let mut tx = self.begin_write().await?;
                require_mind(&mut tx, mind).await?;
                let brief = insert_brief(&mut tx, mind, brief).await?;
                tx.commit().await?;
                Ok(brief)
            }

            async fn claim_brief(
                &self,
                mind: &str,
                token: FencingToken,
                now_ms: i64,
            ) -> Result<Option<Brief>> {
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let row = sqlx::query(
                    "SELECT seq FROM briefs WHERE mind_id = $1 AND status = 'queued' \
                     ORDER BY seq LIMIT 1",
                )
                .bind(mind)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Ok(None);
                };
                let seq: i64 = row.try_get("seq")?;
                sqlx::query(
                    "UPDATE briefs SET status = 'running', started_at_ms = $3 \
                     WHERE mind_id = $1 AND seq = $2",
                )
                .bind(mind)
                .bind(seq)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                let brief = fetch_brief(&mut tx, mind, seq).await?;
                tx.commit().await?;
                Ok(Some(brief))
            }

            async fn finish_brief(
                &self,
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
                let mut tx = self.begin_write().await?;
                fence(&mut tx, mind, token).await?;
                let brief = fetch_brief(&mut tx, mind, seq).await?;
                if brief.status != BriefStatus::Running {
                    return Err(StoreError::invalid(format!(
                        "brief {seq} is {}, not running",
                        brief.status.as_str()
                    )));
                }
                sqlx::query(
                    "UPDATE briefs SET status = $3, result = $4, finished_at_ms = $5 \
                     WHERE mind_id = $1 AND seq = $2",
                )
                .bind(mind)
                .bind(seq)
                .bind(status.as_str())
                .bind(result)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                let brief = fetch_brief(&mut tx, mind, seq).await?;
                tx.commit().await?;
                Ok(brief)
            }

            async fn briefs(
                &self,
                mind: &str,
                status: Option<BriefStatus>,
                limit: i64,
            ) -> Result<Vec<Brief>> {
                let rows = match status {
                    Some(status) => {
                        sqlx::query(
                            concat!(
                                "SELECT ",
                                $crate::sql::columns!(brief),
                                " FROM briefs WHERE mind_id = $1 AND status = $3 ORDER BY seq \
                                 LIMIT $2",
                            ),
                        )
                        .bind(mind)
                        .bind(limit.max(0))
                        .bind(status.as_str())
                        .fetch_all(&self.pool)
                        .await?
                    }
                    None => {
                        sqlx::query(
                            concat!(
                                "SELECT ",
                                $crate::sql::columns!(brief),
                                " FROM briefs WHERE mind_id = $1 ORDER BY seq LIMIT $2",
                            ),
                        )
                        .bind(mind)
                        .bind(limit.max(0))
                        .fetch_all(&self.pool)
                        .await?
                    }
                };
                rows.iter().map(brief_from).collect()
            }
        }
    };
}

pub(crate) use impl_sql_store;

/// Applies the numbered migrations newer than the recorded schema version, inside the open
/// transaction `$tx`, recording each; a database newer than this build is refused. A macro, like
/// [`impl_sql_store`], so one text serves both backends' transaction types.
macro_rules! apply_migrations {
    ($tx:ident, $migrations:expr) => {
        let current: i64 = sqlx::query(
            "SELECT CAST(COALESCE(MAX(version), 0) AS BIGINT) AS v FROM schema_version",
        )
        .fetch_one(&mut *$tx)
        .await?
        .try_get("v")?;
        let newest = $migrations.last().map(|m| m.0).unwrap_or(0);
        if current > newest {
            return Err(StoreError::SchemaTooNew {
                found: current,
                supported: newest,
            });
        }
        for (version, name, sql) in $migrations.iter().filter(|m| m.0 > current) {
            sqlx::raw_sql(*sql)
                .execute(&mut *$tx)
                .await
                .map_err(|e| StoreError::Migration {
                    version: *version,
                    message: e.to_string(),
                })?;
            sqlx::query("INSERT INTO schema_version (version, name) VALUES ($1, $2)")
                .bind(version)
                .bind(name)
                .execute(&mut *$tx)
                .await?;
        }
    };
}
pub(crate) use apply_migrations;
