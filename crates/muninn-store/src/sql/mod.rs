//! The SQL both backends share, one file per aggregate of the store.
//!
//! SQLite (≥ 3.35) and PostgreSQL accept the same dialect for every statement the store runs:
//! `$N` placeholders, `INSERT … ON CONFLICT … DO UPDATE/NOTHING`, `RETURNING`, `COALESCE`, `CASE`.
//! So each query is written once, as a plain function generic over the engine, and the
//! [`Store`](crate::Store) implementation ([`store_impl`]) is one call per method into the file
//! that holds the aggregate.
//!
//! ## Map
//!
//! | file | tables | what |
//! | --- | --- | --- |
//! | [`minds`] | `minds`, `settings` | Minds and their per-Mind settings |
//! | [`leases`] | `leases` | leases and the fence every fenced write starts with |
//! | [`counters`] | `counters`, `counter_floors` | the per-Mind seq counters |
//! | [`segments`] | `segments` | the numbered stretches of a role's transcript |
//! | [`transcript`] | `transcript`, `transcript_keys` | the append-only transcript; the keys of items appended once |
//! | [`mailbox`] | `deliveries`, `cursors`, `mailbox_acks` | intake, transports' cursors, the ack |
//! | [`outbox`] | `outbox` | messages to send, sent, acked or failed |
//! | [`ledger`] | `ledger` | one row per model request; spend |
//! | [`memory`] | `memory_notes`, `memory_about` | memory notes and whom they are about |
//! | [`briefs`] | `briefs` | the Self's brief queue |
//! | [`turn`] | `turns` | a whole turn in one transaction |
//! | [`migrations`] | `schema_version` | numbered migrations |
//! | [`store_impl`] | — | the `Store` trait, method by method, onto the files above |
//! | [`engine`] | — | what the files need from an engine ([`Engine`](engine::Engine)) and from a store struct ([`Backend`]) |
//!
//! A function that takes `store: &B` (`B: Backend`) is a whole `Store` method: it opens its own
//! transaction with `store.begin_write()` or reads on a pooled connection. One that takes
//! `conn: &mut DB::Connection` runs inside its caller's transaction (`insert` functions shared
//! with [`turn`], the fence, the counters).
//!
//! What differs per engine is only [`Engine::LEASE_LOCK_SQL`](engine::Engine::LEASE_LOCK_SQL)
//! (see [`leases`]), the caps' lock ([`Engine::MIND_LOCK_SQL`](engine::Engine::MIND_LOCK_SQL);
//! see [`minds`]), the memory search's case folding
//! ([`Engine::MEMORY_MATCH_SQL`](engine::Engine::MEMORY_MATCH_SQL); see [`memory`]),
//! `begin_write()` (SQLite `BEGIN IMMEDIATE`, taking the single write lock up
//! front so two writers never deadlock upgrading a read lock; PostgreSQL a plain `BEGIN` at READ
//! COMMITTED), the migrations, the connection options and the hosts' signalling — all in
//! `crate::sqlite`, `crate::postgres` and `crate::hosts`.
//!
//! ## Invariants kept here
//!
//! - Every mutator is one transaction; an early `?` return drops the transaction, which rolls
//!   it back (see `crate::write`), so an `Err` never leaves a partial write.
//! - Seqs come from [`counters`], bumped in the same transaction as the row they number.
//! - JSON is stored as the text `serde_json` produced, never as a database JSON type.

use crate::error::{Result, StoreError};

pub(crate) mod briefs;
pub(crate) mod counters;
pub(crate) mod engine;
pub(crate) mod leases;
pub(crate) mod ledger;
pub(crate) mod mailbox;
pub(crate) mod memory;
pub(crate) mod migrations;
pub(crate) mod minds;
pub(crate) mod outbox;
pub(crate) mod segments;
mod store_impl;
pub(crate) mod transcript;
pub(crate) mod turn;

pub(crate) use engine::Backend;

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

/// The columns each row type is read from (by its `*_from` reader in the aggregate's file), one list per table,
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
