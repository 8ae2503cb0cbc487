//! The conformance suite: the behaviour every [`Store`] backend must show.
//!
//! [`run_conformance`] runs every case against stores made by a [`StoreFactory`] and panics,
//! naming the case, at the first broken expectation; a long case is a sequence of named
//! sub-checks (`step!`), and its panic names the sub-check too. Each case opens its own database
//! (by a name unique to the case), so cases never see each other's rows. It lives in the test kit, not
//! in `muninn-store`, so that no production build carries it; any crate providing a backend runs
//! it from its own tests with this crate as a dev-dependency.
//!
//! What it pins down: every method's happy path and errors; idempotent intake and outbox;
//! append-only, gap-free, ordered seqs; the ack position never moving backwards;
//! `record_turn` being all-or-nothing (failures injected after earlier writes of the same
//! transaction); lease fencing of every fenced method; distinct gap-free seqs under concurrent
//! writers; reopening keeping everything; migrations being idempotent on reopen; rows written
//! before a migration reading back with its documented defaults; a lease taken over from a
//! holder proven gone fencing that holder; presence and wake-ups answering consistently; a NUL in
//! text dropped alike on every backend.
//!
//! ## Layout
//!
//! This file holds the factory, the list of cases and the helpers they share; the cases live
//! beside it, one file per aggregate of the store, as `muninn-store`'s `sql/` does:
//! `minds` (and settings, unknown Minds), `leases` (and the fence), `segments`, `transcript`,
//! `mailbox`, `transports` (intake batches, cursors, failed sends), `outbox`, `ledger`,
//! `memory`, `briefs`, `turn` (`record_turn`), `durability` (concurrent writers, reopen,
//! migrations) and `takeover` (taking over a dead holder's lease, presence, wake-ups).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::FutureExt;
use muninn_core::ledger::{LedgerRow, MissCause};
use muninn_core::money::MicroUsd;
use muninn_core::trace::Usage;
use serde_json::json;

use muninn_store::types::*;
use muninn_store::{Result, Store, StoreError};

/// Runs one named sub-check of a case: `step!(check(args))` awaits `check(args)` and raises a
/// panic in it again prefixed with `check`'s name, so that a failure says what broke.
macro_rules! step {
    ($check:ident($($arg:expr),* $(,)?)) => {
        $crate::store_conformance::named(stringify!($check), $check($($arg),*)).await
    };
}

mod briefs;
mod durability;
mod leases;
mod ledger;
mod mailbox;
mod memory;
mod minds;
mod outbox;
mod segments;
mod takeover;
mod transcript;
mod transports;
mod turn;
use briefs::briefs;
use durability::{
    concurrent_writers_get_gap_free_seqs, reopen_keeps_everything,
    rows_from_schema_2_migrate_forward,
};
use leases::{fencing_refuses_every_mutator, lease_lifecycle};
use ledger::ledger;
use mailbox::mailbox;
use memory::memory;
use minds::{minds, settings, unknown_mind};
use outbox::outbox;
use segments::segments;
use takeover::{
    presence_and_wakes_answer_consistently, renew_leases_extends_only_the_holders_leases,
    take_over_fences_the_old_holder,
};
use transcript::{transcript_append_only, transcript_keys_from_schema_9_migrate_per_role};
use transports::{
    failed_sends_are_kept_and_never_offered_again, intake_batch_is_all_or_nothing,
    intake_batch_moves_mail_and_cursor_together, nul_in_text_is_dropped_alike,
    outbox_rows_from_schema_5_migrate_to_failures,
};
use turn::{record_turn_all_or_nothing, record_turn_commits_everything};

/// Makes the stores the suite runs against.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// Opens the database called `name`, creating it empty the first time. Opening the same
    /// name again after [`Store::close`] must reopen the same database (the reopen case checks
    /// that nothing was lost).
    async fn open(&self, name: &str) -> Result<Arc<dyn Store>>;

    /// Creates the database called `name` as an older build left it: the backend's migrations
    /// up to and including `version` applied and recorded in `schema_version`, then `sql` (one
    /// or more statements in the dialect both backends share) run on it — without opening a
    /// store. The next [`open`](Self::open) of `name` must migrate it forward. The suite uses
    /// this to check that rows written before a migration read back with the documented
    /// defaults.
    async fn create_at_version(&self, name: &str, version: i64, sql: &str) -> Result<()>;
}

type Case = for<'a> fn(&'a dyn StoreFactory) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), |f| Box::pin($name(f)))),*]
    };
}

/// Every case, by name.
const CASES: &[(&str, Case)] = cases![
    minds,
    settings,
    lease_lifecycle,
    fencing_refuses_every_mutator,
    segments,
    transcript_append_only,
    mailbox,
    outbox,
    ledger,
    memory,
    briefs,
    record_turn_commits_everything,
    record_turn_all_or_nothing,
    concurrent_writers_get_gap_free_seqs,
    reopen_keeps_everything,
    rows_from_schema_2_migrate_forward,
    unknown_mind,
    intake_batch_moves_mail_and_cursor_together,
    intake_batch_is_all_or_nothing,
    failed_sends_are_kept_and_never_offered_again,
    outbox_rows_from_schema_5_migrate_to_failures,
    transcript_keys_from_schema_9_migrate_per_role,
    nul_in_text_is_dropped_alike,
    take_over_fences_the_old_holder,
    renew_leases_extends_only_the_holders_leases,
    presence_and_wakes_answer_consistently,
];

/// The names of the cases [`run_conformance`] runs, in order.
pub fn case_names() -> Vec<&'static str> {
    CASES.iter().map(|(name, _)| *name).collect()
}

/// Runs every case against `factory`, returning each case's name and duration. Panics (naming
/// the case) on the first failure.
pub async fn run_conformance(factory: &dyn StoreFactory) -> Vec<(&'static str, Duration)> {
    let mut timings = Vec::with_capacity(CASES.len());
    for (name, case) in CASES {
        let started = Instant::now();
        eprintln!("conformance: {name} ...");
        case(factory).await;
        let elapsed = started.elapsed();
        eprintln!("conformance: {name} ok ({} ms)", elapsed.as_millis());
        timings.push((*name, elapsed));
    }
    timings
}

// ----- helpers -----

/// Awaits `check`; a panic in it is raised again as `sub-check {name}: {its message}` (the
/// first panic has already been reported with its location by the panic hook).
pub(crate) async fn named<T>(name: &str, check: impl Future<Output = T>) -> T {
    match AssertUnwindSafe(check).catch_unwind().await {
        Ok(value) => value,
        Err(panic) => {
            let message = muninn_backend::panic::payload_text(&*panic);
            panic!("sub-check {name}: {message}");
        }
    }
}

/// Unwraps a store result, panicking with the context on error.
#[track_caller]
fn ok<T>(result: Result<T>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{what}: unexpected error: {error}"),
    }
}

/// Asserts that `result` is `Fenced`.
#[track_caller]
fn assert_fenced<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(StoreError::Fenced { .. }) => {}
        other => panic!("{what}: expected Fenced, got {other:?}"),
    }
}

/// Asserts that `result` is `Invalid`.
#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(StoreError::Invalid(_)) => {}
        other => panic!("{what}: expected Invalid, got {other:?}"),
    }
}

/// Asserts that `result` is `NotFound`.
#[track_caller]
fn assert_not_found<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(StoreError::NotFound { .. }) => {}
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

async fn open(factory: &dyn StoreFactory, name: &str) -> Arc<dyn Store> {
    ok(factory.open(name).await, "open store")
}

fn mind(id: &str) -> Mind {
    Mind {
        id: id.to_owned(),
        display_name: format!("Mind {id}"),
        config: json!({"model": "claude-sim", "rooms": ["#swarm", "#burn"], "nested": {"k": [1, 2.5, null]}}),
        created_at_ms: 1_000,
    }
}

/// Creates a Mind and takes its lease as `holder`.
async fn mind_with_lease(store: &dyn Store, id: &str, holder: &str) -> FencingToken {
    ok(store.create_mind(&mind(id)).await, "create mind");
    let lease = ok(
        store.acquire_lease(id, holder, 60_000, 10_000).await,
        "acquire",
    );
    match lease {
        Some(lease) => lease.token,
        None => panic!("fresh mind's lease was refused"),
    }
}

fn item(role: Role, n: i64) -> NewTranscriptItem {
    NewTranscriptItem {
        role,
        segment: 0,
        kind: TranscriptKind::Delivery,
        body: json!({"n": n, "text": format!("item {n}")}),
        created_at_ms: 20_000 + n,
    }
}

fn delivery(n: i64) -> NewDelivery {
    NewDelivery {
        room: "#swarm".into(),
        sender: format!("@user{}:example.org", n % 3),
        is_direct: n % 2 == 0,
        to_you: n % 3 == 0,
        text: format!("message {n}"),
        source_id: format!("$event{n}"),
        received_at_ms: 30_000 + n,
        // Every third delivery brings the room history before it; one line has no event id,
        // one has text that needs escaping in JSON.
        context: if n % 3 == 0 {
            vec![
                ContextLine {
                    id: Some(format!("$before{n}")),
                    sender: "@ann:example.org".into(),
                    text: "earlier, \"quoted\"\nand on two lines — ünïcode".into(),
                },
                ContextLine {
                    id: None,
                    sender: "@bob:example.org".into(),
                    text: format!("just before {n}"),
                },
            ]
        } else {
            Vec::new()
        },
    }
}

fn out(request_id: &str, text: &str) -> NewOutboxMessage {
    NewOutboxMessage {
        request_id: request_id.into(),
        room: "#swarm".into(),
        text: text.into(),
        created_at_ms: 40_000,
    }
}

fn ledger_row(mind: &str, at_ms: i64, cost: i64) -> LedgerRow {
    LedgerRow {
        mind: mind.into(),
        role: "persona".into(),
        segment: 2,
        turn: 7,
        at_ms,
        idle_gap_ms: 61_000,
        model: "claude-sonnet-4-5".into(),
        prefix_tokens: 12_345,
        rehydration_tokens: 0,
        usage: Usage {
            input: 12,
            cache_write_5m: 300,
            cache_write_1h: 0,
            cache_read: 12_000,
            output: 250,
        },
        raw_usage: Some(json!({
            "input_tokens": 12,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 12000,
            "output_tokens": 250,
            "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
            "server_tool_use": null
        })),
        cost: MicroUsd(cost),
        predicted_read: 12_000,
        predicted_write: 300,
        cache_state: "warm".into(),
        miss_cause: Some(MissCause::TtlExpiry),
        decision: "append".into(),
        boundary: true,
        events: Vec::new(),
        decided: None,
        provider_miss: None,
    }
}

fn note(about: &[&str], salience: i64, text: &str, at: i64) -> NewMemoryNote {
    NewMemoryNote {
        about: about.iter().map(|s| s.to_string()).collect(),
        salience,
        text: text.into(),
        created_at_ms: at,
        source: "batch-1".into(),
    }
}

fn brief(text: &str, origin: BriefOrigin, at: i64) -> NewBrief {
    NewBrief {
        text: text.into(),
        origin,
        created_at_ms: at,
    }
}

fn full_turn(mind: &str, ack: Option<i64>) -> TurnRecord {
    TurnRecord {
        turn_key: Some("batch7".into()),
        transcript: vec![
            NewTranscriptItem {
                role: Role::Persona,
                segment: 0,
                kind: TranscriptKind::Delivery,
                body: json!({"deliveries": [1, 2]}),
                created_at_ms: 5_000,
            },
            NewTranscriptItem {
                role: Role::Persona,
                segment: 0,
                kind: TranscriptKind::Reply,
                body: json!({"say": [{"room": "#swarm", "text": "hi"}], "start_self_run": null}),
                created_at_ms: 5_100,
            },
        ],
        outbox: vec![out("batch7-0", "hi"), out("batch7-1", "there")],
        ledger: vec![ledger_row(mind, 5_000, 1_234)],
        memory: vec![note(&["@ann:x"], 2, "Ann said hi", 5_100)],
        briefs: vec![brief(
            "look into the flaky test",
            BriefOrigin::Persona,
            5_100,
        )],
        ack_through: ack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn the_check_that_breaks(ack: i64) {
        assert_eq!(ack, 2, "ack 2");
    }

    #[tokio::test]
    async fn a_failed_sub_check_is_named_in_the_panic() {
        let caught = AssertUnwindSafe(async { step!(the_check_that_breaks(4)) })
            .catch_unwind()
            .await;
        let Err(panic) = caught else {
            panic!("the sub-check passed")
        };
        let message = panic.downcast_ref::<String>().map(String::as_str);
        assert!(
            message.is_some_and(
                |m| m.starts_with("sub-check the_check_that_breaks: ") && m.contains("ack 2")
            ),
            "{message:?}"
        );
    }

    #[tokio::test]
    async fn a_passing_sub_check_gives_its_value() {
        async fn three() -> i64 {
            3
        }
        assert_eq!(step!(three()), 3);
    }
}
