//! The conformance suite: the behaviour every [`Store`] backend must show.
//!
//! [`run_conformance`] runs every case against stores made by a [`StoreFactory`] and panics,
//! naming the case, at the first broken expectation. Each case opens its own database (by a
//! name unique to the case), so cases never see each other's rows. It lives in the test kit, not
//! in `muninn-store`, so that no production build carries it; any crate providing a backend runs
//! it from its own tests with this crate as a dev-dependency.
//!
//! What it pins down: every method's happy path and errors; idempotent intake and outbox;
//! append-only, gap-free, ordered seqs; the ack position never moving backwards;
//! `record_turn` being all-or-nothing (failures injected after earlier writes of the same
//! transaction); lease fencing of every fenced method; distinct gap-free seqs under concurrent
//! writers; reopening keeping everything; migrations being idempotent on reopen; rows written
//! before a migration reading back with its documented defaults; a lease taken over from a
//! holder proven gone fencing that holder; presence and wake-ups answering consistently.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use muninn_core::ledger::{LedgerRow, MissCause};
use muninn_core::money::MicroUsd;
use muninn_core::trace::Usage;
use serde_json::json;

use muninn_store::types::*;
use muninn_store::{Result, Store, StoreError};

mod takeover;
mod transports;
use takeover::{
    presence_and_wakes_answer_consistently, renew_leases_extends_only_the_holders_leases,
    take_over_fences_the_old_holder,
};
use transports::{
    failed_sends_are_kept_and_never_offered_again, intake_batch_is_all_or_nothing,
    intake_batch_moves_mail_and_cursor_together, outbox_rows_from_schema_5_migrate_to_failures,
};

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

// ----- cases -----

async fn minds(factory: &dyn StoreFactory) {
    let store = open(factory, "minds").await;
    assert_eq!(ok(store.minds().await, "minds"), vec![]);
    let created = ok(store.create_mind(&mind("b")).await, "create b");
    assert_eq!(created, mind("b"));
    ok(store.create_mind(&mind("a")).await, "create a");
    let mut changed = mind("b");
    changed.display_name = "other".into();
    changed.config = json!({});
    assert_eq!(
        ok(store.create_mind(&changed).await, "create b again"),
        mind("b"),
        "creating an existing mind returns it unchanged"
    );
    assert_eq!(ok(store.mind("b").await, "get b"), Some(mind("b")));
    assert_eq!(ok(store.mind("zz").await, "get zz"), None);
    let ids: Vec<String> = ok(store.minds().await, "minds")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, vec!["a", "b"]);
    let updated = ok(
        store.update_mind("a", "Alpha", &json!({"x": 1})).await,
        "update",
    );
    assert_eq!(updated.display_name, "Alpha");
    assert_eq!(updated.config, json!({"x": 1}));
    assert_eq!(updated.created_at_ms, 1_000);
    assert_eq!(ok(store.mind("a").await, "get a"), Some(updated));
    assert_not_found(
        store.update_mind("zz", "x", &json!({})).await,
        "update unknown",
    );
    let mut empty = mind("x");
    empty.id = String::new();
    assert_invalid(store.create_mind(&empty).await, "empty id");
    assert!(ok(store.schema_version().await, "schema version") >= 1);
    assert!(!store.backend().is_empty());
    store.close().await;
}

async fn settings(factory: &dyn StoreFactory) {
    let store = open(factory, "settings").await;
    ok(store.create_mind(&mind("m")).await, "create");
    assert_eq!(
        ok(store.settings("m").await, "default"),
        MindSettings::default()
    );
    let set = MindSettings {
        spend_cap: Some(MicroUsd(5_000_000)),
        spend_window_ms: Some(86_400_000),
        brake: true,
        turn_limit: Some(4),
    };
    ok(store.put_settings("m", &set, 2_000).await, "put");
    assert_eq!(ok(store.settings("m").await, "get"), set);
    let unset = MindSettings {
        brake: false,
        ..MindSettings::default()
    };
    ok(store.put_settings("m", &unset, 3_000).await, "put again");
    assert_eq!(ok(store.settings("m").await, "get again"), unset);
    assert_not_found(store.settings("zz").await, "settings of unknown");
    assert_not_found(
        store.put_settings("zz", &set, 1).await,
        "put settings of unknown",
    );
    store.close().await;
}

async fn lease_lifecycle(factory: &dyn StoreFactory) {
    let store = open(factory, "lease_lifecycle").await;
    ok(store.create_mind(&mind("m")).await, "create");
    assert_eq!(ok(store.lease("m").await, "no lease"), None);
    assert_not_found(
        store.acquire_lease("zz", "a", 1_000, 0).await,
        "unknown mind",
    );
    assert_invalid(store.acquire_lease("m", "a", 0, 0).await, "zero ttl");

    let a = ok(
        store.acquire_lease("m", "host-a", 1_000, 10_000).await,
        "a acquires",
    );
    let a = a.unwrap_or_else(|| panic!("free lease refused"));
    assert_eq!(a.holder, "host-a");
    assert_eq!(a.expires_at_ms, 11_000);
    assert_eq!(ok(store.lease("m").await, "lease"), Some(a.clone()));

    // Another holder is refused while the lease is live (up to and excluding expiry).
    assert_eq!(
        ok(
            store.acquire_lease("m", "host-b", 1_000, 10_999).await,
            "b early"
        ),
        None
    );
    // The holder itself re-acquiring is a renewal with the same token.
    let again = ok(
        store.acquire_lease("m", "host-a", 1_000, 10_500).await,
        "a again",
    );
    assert_eq!(again.as_ref().map(|l| l.token), Some(a.token));
    assert_eq!(again.map(|l| l.expires_at_ms), Some(11_500));
    let renewed = ok(
        store.renew_lease("m", a.token, 2_000, 11_000).await,
        "renew",
    );
    assert_eq!(renewed.token, a.token);
    assert_eq!(renewed.expires_at_ms, 13_000);
    assert_eq!(
        ok(
            store.acquire_lease("m", "host-b", 1_000, 12_999).await,
            "b still early"
        ),
        None
    );

    // After expiry another holder takes it with a strictly greater token.
    let b = ok(
        store.acquire_lease("m", "host-b", 1_000, 13_000).await,
        "b after expiry",
    );
    let b = b.unwrap_or_else(|| panic!("expired lease refused"));
    assert!(
        b.token > a.token,
        "token must increase: {} -> {}",
        a.token,
        b.token
    );
    assert_fenced(
        store.renew_lease("m", a.token, 1_000, 13_001).await,
        "stale renew",
    );
    assert_fenced(store.release_lease("m", a.token).await, "stale release");

    // Release frees it; the next acquire (even by the same holder) gets a newer token.
    ok(store.release_lease("m", b.token).await, "release");
    assert_eq!(ok(store.lease("m").await, "released"), None);
    assert_fenced(
        store.renew_lease("m", b.token, 1_000, 13_002).await,
        "renew released",
    );
    let b2 = ok(
        store.acquire_lease("m", "host-b", 1_000, 13_003).await,
        "b re-acquires",
    );
    let b2 = b2.unwrap_or_else(|| panic!("released lease refused"));
    assert!(b2.token > b.token);

    // An expired lease renewed by its still-current holder keeps its token.
    let late = ok(
        store.renew_lease("m", b2.token, 1_000, 20_000).await,
        "late renew",
    );
    assert_eq!(late.token, b2.token);
    // Expired and re-acquired by the same holder: a new token (someone may have looked).
    let b3 = ok(
        store.acquire_lease("m", "host-b", 1_000, 30_000).await,
        "same holder after expiry",
    );
    assert!(b3.map(|l| l.token > b2.token).unwrap_or(false));
    store.close().await;
}

async fn fencing_refuses_every_mutator(factory: &dyn StoreFactory) {
    let store = open(factory, "fencing").await;
    let stale = mind_with_lease(store.as_ref(), "m", "host-a").await;
    // Prepare rows the stale holder will try to touch.
    ok(store.post_delivery("m", &delivery(1)).await, "deliver");
    ok(
        store.enqueue_outbox("m", stale, &[out("b1-0", "hi")]).await,
        "outbox",
    );
    ok(
        store
            .enqueue_brief("m", &brief("do it", BriefOrigin::Operator, 1))
            .await,
        "brief",
    );
    let seg = NewSegment {
        role: Role::Persona,
        started_at_ms: 1,
        rehydration_tokens: 100,
        reason: "cold start".into(),
        session_id: None,
        memory: None,
        spec_digest: None,
    };
    ok(store.start_segment("m", stale, &seg).await, "segment");
    ok(
        store
            .append_transcript("m", stale, &[item(Role::Persona, 1)])
            .await,
        "transcript",
    );

    // The lease expires and host-b takes it.
    let fresh = ok(
        store.acquire_lease("m", "host-b", 60_000, 100_000).await,
        "b takes over",
    );
    let fresh = fresh.unwrap_or_else(|| panic!("takeover refused")).token;
    assert!(fresh > stale);

    let m = "m";
    assert_fenced(
        store
            .append_transcript(m, stale, &[item(Role::Persona, 2)])
            .await,
        "append",
    );
    assert_fenced(store.ack_through(m, stale, 1).await, "ack");
    assert_fenced(
        store.enqueue_outbox(m, stale, &[out("b1-1", "x")]).await,
        "outbox",
    );
    assert_fenced(
        store.mark_outbox_sent(m, stale, "b1-0", None, 5).await,
        "mark sent",
    );
    assert_fenced(
        store.append_ledger(m, stale, &[ledger_row(m, 1, 1)]).await,
        "ledger",
    );
    assert_fenced(
        store.add_memory(m, stale, &[note(&[], 1, "x", 1)]).await,
        "memory",
    );
    assert_fenced(store.claim_brief(m, stale, 5).await, "claim");
    assert_fenced(
        store
            .finish_brief(m, stale, 1, BriefStatus::Done, "r", 5)
            .await,
        "finish",
    );
    assert_fenced(store.start_segment(m, stale, &seg).await, "start segment");
    assert_fenced(
        store
            .set_segment_session(m, stale, Role::Persona, 0, "s")
            .await,
        "set session",
    );
    assert_fenced(
        store.end_segment(m, stale, Role::Persona, 0, 5).await,
        "end segment",
    );
    let turn = TurnRecord {
        transcript: vec![item(Role::Persona, 3)],
        ack_through: Some(1),
        ..TurnRecord::default()
    };
    assert_fenced(store.record_turn(m, stale, &turn).await, "record turn");
    assert_fenced(store.renew_lease(m, stale, 1_000, 100_001).await, "renew");
    assert_fenced(store.release_lease(m, stale).await, "release");
    // An unknown mind has no lease: fenced too.
    assert_fenced(
        store.append_transcript("zz", stale, &[]).await,
        "unknown mind",
    );

    // Nothing the stale holder tried was written.
    assert_eq!(
        ok(store.transcript_tail(m, Role::Persona, 10).await, "tail").len(),
        1
    );
    assert_eq!(ok(store.ack_position(m).await, "ack"), 0);
    let outbox = ok(store.unacked_outbox(m, 10).await, "outbox");
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox[0].sent_at_ms, None);
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger"),
        vec![]
    );
    assert_eq!(ok(store.memory_newest(m, 10).await, "memory"), vec![]);
    assert_eq!(
        ok(
            store.briefs(m, Some(BriefStatus::Queued), 10).await,
            "briefs"
        )
        .len(),
        1
    );
    assert_eq!(
        ok(store.segments(m, Role::Persona).await, "segments").len(),
        1
    );
    assert_eq!(ok(store.current_segment(m, Role::Persona).await, "seg"), {
        let mut s = ok(store.segments(m, Role::Persona).await, "segments");
        s.pop()
    });

    // An outbox ack is not fenced: it comes from the transport, not from a lease holder.
    let acked = ok(store.ack_outbox(m, "b1-0", None, 5).await, "ack outbox");
    assert_eq!(acked.acked_at_ms, Some(5));

    // The fresh holder writes fine, and the seq continues without a gap.
    let seqs = ok(
        store
            .append_transcript(m, fresh, &[item(Role::Persona, 4)])
            .await,
        "fresh",
    );
    assert_eq!(seqs, vec![2]);
    store.close().await;
}

async fn segments(factory: &dyn StoreFactory) {
    let store = open(factory, "segments").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    assert_eq!(
        ok(store.current_segment("m", Role::Persona).await, "none"),
        None
    );
    let first = ok(
        store
            .start_segment(
                "m",
                token,
                &NewSegment {
                    role: Role::Persona,
                    started_at_ms: 100,
                    rehydration_tokens: 5_000,
                    reason: "cold start".into(),
                    session_id: None,
                    memory: None,
                    spec_digest: None,
                },
            )
            .await,
        "start 0",
    );
    assert_eq!(first.number, 0);
    assert_eq!(first.ended_at_ms, None);
    let with_session = ok(
        store
            .set_segment_session("m", token, Role::Persona, 0, "sess-0")
            .await,
        "set session",
    );
    assert_eq!(with_session.session_id.as_deref(), Some("sess-0"));
    assert_eq!(with_session.memory, None, "no memory stays none");
    assert_eq!(with_session.spec_digest, None);
    // The Self's segments are numbered independently.
    let self_first = ok(
        store
            .start_segment(
                "m",
                token,
                &NewSegment {
                    role: Role::SelfRole,
                    started_at_ms: 150,
                    rehydration_tokens: 9_000,
                    reason: "brief".into(),
                    session_id: Some("self-sess".into()),
                    memory: Some(String::new()),
                    spec_digest: Some("self-digest".into()),
                },
            )
            .await,
        "start self 0",
    );
    assert_eq!(self_first.number, 0);
    assert_eq!(
        self_first.memory.as_deref(),
        Some(""),
        "empty memory is not none"
    );
    let second = ok(
        store
            .start_segment(
                "m",
                token,
                &NewSegment {
                    role: Role::Persona,
                    started_at_ms: 200,
                    rehydration_tokens: 4_000,
                    reason: "growth: read excess reached rebuild".into(),
                    session_id: Some("sess-1".into()),
                    // Memory is kept byte for byte: a restarted host rebuilds the segment's
                    // system prompt from it.
                    memory: Some("- (ari) likes \"rye\" bread\n- (bo) ßø 🦜\n".into()),
                    spec_digest: Some("0123456789abcdef".into()),
                },
            )
            .await,
        "start 1",
    );
    assert_eq!(second.number, 1);
    let all = ok(store.segments("m", Role::Persona).await, "list");
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[0].ended_at_ms,
        Some(200),
        "starting a segment ends the open one"
    );
    assert_eq!(all[0].session_id.as_deref(), Some("sess-0"));
    assert_eq!(all[1], second);
    assert_eq!(
        all[1].memory.as_deref(),
        Some("- (ari) likes \"rye\" bread\n- (bo) ßø 🦜\n")
    );
    assert_eq!(all[1].spec_digest.as_deref(), Some("0123456789abcdef"));
    let self_read = ok(store.current_segment("m", Role::SelfRole).await, "self");
    assert_eq!(self_read.and_then(|s| s.memory).as_deref(), Some(""));
    let ended = ok(
        store.end_segment("m", token, Role::Persona, 1, 300).await,
        "end",
    );
    assert_eq!(ended.ended_at_ms, Some(300));
    let again = ok(
        store.end_segment("m", token, Role::Persona, 1, 400).await,
        "end again",
    );
    assert_eq!(again.ended_at_ms, Some(300), "the first end time stays");
    assert_eq!(
        ok(store.current_segment("m", Role::Persona).await, "current"),
        Some(again)
    );
    assert_eq!(
        ok(
            store.current_segment("m", Role::SelfRole).await,
            "current self"
        ),
        Some(self_first)
    );
    assert_not_found(
        store.end_segment("m", token, Role::Persona, 9, 1).await,
        "unknown",
    );
    assert_not_found(
        store
            .set_segment_session("m", token, Role::Persona, 9, "x")
            .await,
        "unknown session",
    );
    store.close().await;
}

async fn transcript_append_only(factory: &dyn StoreFactory) {
    let store = open(factory, "transcript").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    let kinds = [
        TranscriptKind::Delivery,
        TranscriptKind::Reply,
        TranscriptKind::Brief,
        TranscriptKind::Result,
        TranscriptKind::Notice,
        TranscriptKind::MemoryFlush,
        TranscriptKind::OutsideEvent,
        TranscriptKind::Other("future_kind".into()),
    ];
    let items: Vec<NewTranscriptItem> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| NewTranscriptItem {
            role: Role::Persona,
            segment: (i / 4) as i64,
            kind: kind.clone(),
            body: json!({"i": i, "unicode": "ünïcødé ✓", "deep": {"a": [1, {"b": null}]}, "big": 9_007_199_254_740_993u64}),
            created_at_ms: 1_000 + i as i64,
        })
        .collect();
    let seqs = ok(store.append_transcript("m", token, &items).await, "append");
    assert_eq!(seqs, (1..=8).collect::<Vec<i64>>());
    // The Self's transcript has its own seqs.
    let self_seqs = ok(
        store
            .append_transcript(
                "m",
                token,
                &[item(Role::SelfRole, 1), item(Role::SelfRole, 2)],
            )
            .await,
        "append self",
    );
    assert_eq!(self_seqs, vec![1, 2]);
    let more = ok(
        store
            .append_transcript("m", token, &[item(Role::Persona, 9)])
            .await,
        "more",
    );
    assert_eq!(more, vec![9]);
    assert_eq!(
        ok(store.append_transcript("m", token, &[]).await, "empty"),
        Vec::<i64>::new()
    );

    let all = ok(
        store
            .transcript_range("m", Role::Persona, 1, None, 100)
            .await,
        "range",
    );
    assert_eq!(all.len(), 9);
    for (i, stored) in all.iter().take(8).enumerate() {
        assert_eq!(stored.seq, i as i64 + 1);
        assert_eq!(stored.mind, "m");
        assert_eq!(stored.role, Role::Persona);
        assert_eq!(stored.kind, items[i].kind);
        assert_eq!(stored.body, items[i].body);
        assert_eq!(stored.segment, items[i].segment);
        assert_eq!(stored.created_at_ms, items[i].created_at_ms);
    }
    let window = ok(
        store
            .transcript_range("m", Role::Persona, 3, Some(6), 100)
            .await,
        "window",
    );
    assert_eq!(
        window.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    let limited = ok(
        store.transcript_range("m", Role::Persona, 3, None, 2).await,
        "limited",
    );
    assert_eq!(
        limited.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![3, 4]
    );
    let tail = ok(store.transcript_tail("m", Role::Persona, 3).await, "tail");
    assert_eq!(
        tail.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    let self_tail = ok(
        store.transcript_tail("m", Role::SelfRole, 10).await,
        "self tail",
    );
    assert_eq!(
        self_tail.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 0).await, "tail 0"),
        vec![]
    );
    store.close().await;
}

async fn mailbox(factory: &dyn StoreFactory) {
    let store = open(factory, "mailbox").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    assert_not_found(
        store.post_delivery("zz", &delivery(1)).await,
        "unknown mind",
    );
    for n in 1..=5 {
        let posted = ok(store.post_delivery("m", &delivery(n)).await, "post");
        assert_eq!(
            posted,
            Posted {
                seq: n,
                created: true
            }
        );
    }
    // Idempotent intake: the same source id (even with other content) adds nothing.
    let mut repeat = delivery(3);
    repeat.text = "changed".into();
    assert_eq!(
        ok(store.post_delivery("m", &repeat).await, "repeat"),
        Posted {
            seq: 3,
            created: false
        }
    );
    // ... and does not leave a gap.
    assert_eq!(
        ok(store.post_delivery("m", &delivery(6)).await, "post 6").seq,
        6
    );

    let pending = ok(store.pending_deliveries("m", 0, 100).await, "pending");
    assert_eq!(
        pending.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    // Whole rows round-trip, mention flag and room history included (the first row has
    // neither, the third both).
    let stored = |n: i64, posted: NewDelivery| Delivery {
        mind: "m".into(),
        seq: n,
        room: posted.room,
        sender: posted.sender,
        is_direct: posted.is_direct,
        to_you: posted.to_you,
        text: posted.text,
        source_id: posted.source_id,
        received_at_ms: posted.received_at_ms,
        context: posted.context,
    };
    assert_eq!(pending[0], stored(1, delivery(1)));
    assert_eq!(pending[2], stored(3, delivery(3)));
    assert!(!pending[0].to_you && pending[0].context.is_empty());
    assert!(pending[2].to_you && pending[2].context.len() == 2);
    assert!(pending[1].is_direct && !pending[2].is_direct);
    let page = ok(store.pending_deliveries("m", 2, 2).await, "page");
    assert_eq!(page.iter().map(|d| d.seq).collect::<Vec<_>>(), vec![3, 4]);

    assert_eq!(ok(store.ack_position("m").await, "initial ack"), 0);
    assert_eq!(
        ok(store.mailbox("m").await, "mailbox before acks"),
        Mailbox {
            pending: 6,
            oldest_received_at_ms: Some(delivery(1).received_at_ms),
        }
    );
    assert_eq!(ok(store.ack_through("m", token, 4).await, "ack 4"), 4);
    assert_eq!(
        ok(store.mailbox("m").await, "mailbox after ack 4"),
        Mailbox {
            pending: 2,
            oldest_received_at_ms: Some(delivery(5).received_at_ms),
        }
    );
    assert_eq!(
        ok(store.mailbox("nobody").await, "an unknown Mind's mailbox"),
        Mailbox::default()
    );
    assert_eq!(
        ok(store.ack_through("m", token, 2).await, "ack 2"),
        4,
        "never backwards"
    );
    assert_eq!(ok(store.ack_position("m").await, "ack pos"), 4);
    assert_invalid(
        store.ack_through("m", token, 7).await,
        "ack beyond last delivery",
    );
    assert_invalid(store.ack_through("m", token, -1).await, "negative ack");
    assert_eq!(
        ok(store.ack_position("m").await, "ack pos after invalid"),
        4
    );
    assert_eq!(ok(store.ack_through("m", token, 6).await, "ack 6"), 6);
    assert_eq!(
        ok(store.pending_deliveries("m", 6, 10).await, "none left"),
        vec![]
    );
    store.close().await;
}

async fn outbox(factory: &dyn StoreFactory) {
    let store = open(factory, "outbox").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    let rows = ok(
        store
            .enqueue_outbox("m", token, &[out("b1-0", "hello"), out("b1-1", "world")])
            .await,
        "enqueue",
    );
    assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(rows[0].text, "hello");
    assert_eq!(rows[0].sent_at_ms, None);
    // The same request id again returns the first row unchanged.
    let again = ok(
        store
            .enqueue_outbox("m", token, &[out("b1-0", "DIFFERENT"), out("b2-0", "next")])
            .await,
        "enqueue again",
    );
    assert_eq!(again[0], rows[0]);
    assert_eq!(again[1].seq, 3, "no gap after a repeat");
    assert_eq!(ok(store.unsent_outbox("m", 10).await, "unsent").len(), 3);

    let sent = ok(
        store
            .mark_outbox_sent("m", token, "b1-0", Some("$remote"), 50)
            .await,
        "sent",
    );
    assert_eq!(sent.sent_at_ms, Some(50));
    assert_eq!(sent.remote_id.as_deref(), Some("$remote"));
    let resent = ok(
        store
            .mark_outbox_sent("m", token, "b1-0", Some("$other"), 60)
            .await,
        "resent",
    );
    assert_eq!(resent, sent, "marking sent twice keeps the first");
    let unsent: Vec<String> = ok(store.unsent_outbox("m", 10).await, "unsent")
        .into_iter()
        .map(|m| m.request_id)
        .collect();
    assert_eq!(unsent, vec!["b1-1", "b2-0"]);
    assert_eq!(ok(store.unacked_outbox("m", 10).await, "unacked").len(), 3);

    // A page after a seq: unacknowledged, seq > after, in seq order, at most `limit`.
    let seqs = |page: Vec<OutboxMessage>| page.iter().map(|m| m.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 10).await, "after 0")),
        vec![1, 2, 3]
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 1, 10).await, "after 1")),
        vec![2, 3]
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 2).await, "limit 2")),
        vec![1, 2]
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 3, 10).await, "after last")),
        Vec::<i64>::new()
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 0).await, "limit 0")),
        Vec::<i64>::new()
    );
    assert_eq!(
        ok(store.outbox_after("m", 0, 10).await, "whole rows"),
        ok(store.unacked_outbox("m", 10).await, "unacked")
    );

    let acked = ok(store.ack_outbox("m", "b1-0", None, 70).await, "ack");
    assert_eq!(acked.acked_at_ms, Some(70));
    assert_eq!(acked.sent_at_ms, Some(50));
    assert_eq!(
        ok(
            store.ack_outbox("m", "b1-0", Some("$late"), 75).await,
            "ack again"
        ),
        acked,
        "acking twice keeps the first"
    );
    assert_eq!(
        seqs(ok(store.outbox_after("m", 0, 10).await, "acked skipped")),
        vec![2, 3]
    );
    // An ack needs no lease: the transport acks while no host holds the Mind. Acknowledging
    // an unsent message implies it was sent.
    ok(store.release_lease("m", token).await, "release");
    let acked2 = ok(
        store.ack_outbox("m", "b1-1", Some("$event-b1-1"), 80).await,
        "ack unsent, no lease",
    );
    assert_eq!(acked2.sent_at_ms, Some(80));
    assert_eq!(acked2.acked_at_ms, Some(80));
    assert_eq!(acked2.remote_id.as_deref(), Some("$event-b1-1"));
    let token = ok(
        store.acquire_lease("m", "h", 60_000, 90).await,
        "re-acquire",
    )
    .unwrap_or_else(|| panic!("lease refused after release"))
    .token;
    let unacked: Vec<String> = ok(store.unacked_outbox("m", 10).await, "unacked")
        .into_iter()
        .map(|m| m.request_id)
        .collect();
    assert_eq!(unacked, vec!["b2-0"]);
    assert_eq!(ok(store.unacked_outbox("m", 0).await, "limit 0"), vec![]);
    assert_not_found(
        store.mark_outbox_sent("m", token, "nope", None, 1).await,
        "unknown id",
    );
    assert_not_found(
        store.ack_outbox("m", "nope", None, 1).await,
        "unknown id ack",
    );
    store.close().await;
}

async fn ledger(factory: &dyn StoreFactory) {
    let store = open(factory, "ledger").await;
    let ta = mind_with_lease(store.as_ref(), "a", "h").await;
    let tb = mind_with_lease(store.as_ref(), "b", "h").await;
    let mut no_raw = ledger_row("a", 3_000, 7);
    no_raw.raw_usage = None;
    no_raw.miss_cause = None;
    no_raw.boundary = false;
    // A request with flagged events: two retries, a TTL the provider did not honour, a read
    // shortfall. They come back as written, in order.
    let mut flagged = ledger_row("a", 2_000, 250);
    flagged.events = vec![
        json!({"attempt": 1, "delay_ms": 500, "status": 529, "kind": "overloaded_error", "retry_after_ms": null}),
        json!({"attempt": 2, "delay_ms": 1_000, "status": null, "kind": "transport", "retry_after_ms": 1_000}),
        json!({"type": "ttl_mismatch", "check": {"expected_5m": 0, "expected_1h": 300, "honoured_5m": 300, "honoured_1h": 0}}),
        json!({"type": "read_shortfall", "predicted": 12_000, "reported": 0, "note": "ünïcode \"q\""}),
    ];
    // The accounting's record of a decision comes back whole.
    let mut decided = ledger_row("a", 1_000, 100);
    decided.decided = Some(muninn_core::ledger::Decided {
        kind: muninn_core::ledger::RowKind::Request,
        event: Some(muninn_core::decide::Event::Arrival {
            boundary: true,
            delta: 420,
        }),
        action: Some(muninn_core::decide::Action::Refresh),
        reason: Some(muninn_core::decide::Reason::GrowthBreakEven),
        segment: Some(muninn_core::ledger::SegmentStart {
            head: 4_000,
            rehydration: 6_500,
            forced: Some(muninn_core::ledger::ForcedStart::Rebuilt),
            head_digest: Some(0x9e37_79b9_7f4a_7c15),
            system_digest: Some(u64::MAX),
        }),
        lost_at_ms: Some(900),
        policy: "ski-rental".to_string(),
        ttl: muninn_core::cache::Ttl::FiveMinutes,
        head_ttl: muninn_core::cache::Ttl::OneHour,
        bounds: muninn_core::decide::Bounds {
            head_tokens: 4_000,
            rehydrate_tokens: 2_500,
            flush_prompt_tokens: 0,
            flush_output_tokens: 0,
            ping_tokens: 12,
            min_segment_requests: 4,
            ceiling_tokens: 200_000,
            context_window: 200_000,
        },
        decide_before_expiry_ms: 30_000,
        can: muninn_core::decide::Capabilities::default(),
    });
    // The provider's diagnosis beside muninn's cause comes back whole: a change with its
    // magnitude on one row, a label without one on another, a reason this build does not know
    // (kept as `other`) on a third.
    decided.miss_cause = Some(MissCause::SystemChange);
    decided.provider_miss = Some(muninn_core::miss::ProviderMiss {
        reason: muninn_core::miss::ProviderMissReason::SystemChanged,
        missed_tokens: Some(u64::from(u32::MAX) + 7),
    });
    flagged.provider_miss = Some(muninn_core::miss::ProviderMiss {
        reason: muninn_core::miss::ProviderMissReason::NoDivergence,
        missed_tokens: None,
    });
    no_raw.provider_miss = Some(muninn_core::miss::ProviderMiss {
        reason: muninn_core::miss::ProviderMissReason::Other,
        missed_tokens: None,
    });
    let a_rows = vec![decided, flagged, no_raw];
    let a_ids = ok(store.append_ledger("a", ta, &a_rows).await, "append a");
    let b_ids = ok(
        store
            .append_ledger("b", tb, &[ledger_row("b", 1_500, 1_000)])
            .await,
        "b",
    );
    let a4 = ok(
        store
            .append_ledger("a", ta, &[ledger_row("a", 4_000, 1)])
            .await,
        "a4",
    );
    assert!(a_ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        a_ids[2] < b_ids[0] && b_ids[0] < a4[0],
        "ids follow append order"
    );

    // Export: every row, in append order, exactly as written (raw usage verbatim).
    let export = ok(store.ledger(&LedgerQuery::default()).await, "export");
    let rows: Vec<LedgerRow> = export.iter().map(|e| e.row.clone()).collect();
    let mut expected = a_rows.clone();
    expected.push(ledger_row("b", 1_500, 1_000));
    expected.push(ledger_row("a", 4_000, 1));
    assert_eq!(rows, expected);

    let a_only = ok(
        store
            .ledger(&LedgerQuery {
                mind: Some("a".into()),
                from_ms: Some(2_000),
                to_ms: Some(4_000),
                ..LedgerQuery::default()
            })
            .await,
        "query a",
    );
    assert_eq!(
        a_only.iter().map(|e| e.row.at_ms).collect::<Vec<_>>(),
        vec![2_000, 3_000]
    );
    let paged = ok(
        store
            .ledger(&LedgerQuery {
                after_id: Some(export[1].id),
                limit: Some(2),
                ..LedgerQuery::default()
            })
            .await,
        "page",
    );
    assert_eq!(paged, export[2..4].to_vec());

    assert_eq!(
        ok(store.spend("a", 0, 10_000).await, "spend a"),
        MicroUsd(358)
    );
    assert_eq!(
        ok(store.spend("a", 1_000, 3_000).await, "window"),
        MicroUsd(350)
    );
    assert_eq!(
        ok(store.spend("b", 0, 10_000).await, "spend b"),
        MicroUsd(1_000)
    );
    assert_eq!(
        ok(store.spend("a", 5_000, 6_000).await, "empty window"),
        MicroUsd::ZERO
    );

    assert_invalid(
        store.append_ledger("a", ta, &[ledger_row("b", 1, 1)]).await,
        "wrong mind",
    );
    let mut huge = ledger_row("a", 1, 1);
    huge.prefix_tokens = u64::MAX;
    assert_invalid(store.append_ledger("a", ta, &[huge]).await, "u64 overflow");
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "unchanged").len(),
        5
    );
    store.close().await;
}

async fn memory(factory: &dyn StoreFactory) {
    let store = open(factory, "memory").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    let notes = vec![
        note(
            &["@ann:x", "@bob:x"],
            3,
            "Ann and Bob run the Tuesday build",
            100,
        ),
        note(&["@bob:x"], 5, "Bob prefers short answers", 200),
        note(&[], 1, "The burn rate is 100% on Fridays", 300),
    ];
    let ids = ok(store.add_memory("m", token, &notes).await, "add");
    assert!(ids.windows(2).all(|w| w[0] < w[1]));

    let newest = ok(store.memory_newest("m", 10).await, "newest");
    assert_eq!(
        newest.iter().map(|n| n.created_at_ms).collect::<Vec<_>>(),
        vec![300, 200, 100]
    );
    assert_eq!(
        newest[2].about,
        vec!["@ann:x", "@bob:x"],
        "about keeps its order"
    );
    assert_eq!(newest[2].salience, 3);
    assert_eq!(newest[2].source, "batch-1");
    assert_eq!(newest[2].mind, "m");
    assert_eq!(newest[2].id, ids[0]);
    assert_eq!(ok(store.memory_newest("m", 1).await, "newest 1").len(), 1);

    let bob: Vec<i64> = ok(store.memory_about("m", "@bob:x", 10).await, "about bob")
        .iter()
        .map(|n| n.created_at_ms)
        .collect();
    assert_eq!(bob, vec![200, 100]);
    assert_eq!(
        ok(store.memory_about("m", "@nobody", 10).await, "nobody"),
        vec![]
    );

    let found = ok(store.memory_search("m", "BOB", 10).await, "search");
    assert_eq!(found.len(), 2, "search is case-insensitive");
    let percent = ok(store.memory_search("m", "100%", 10).await, "search percent");
    assert_eq!(percent.len(), 1, "LIKE wildcards in the needle are literal");
    assert_eq!(
        ok(store.memory_search("m", "_", 10).await, "underscore"),
        vec![]
    );

    // The 1000-byte bound counts bytes, not characters.
    let exactly = "é".repeat(500);
    ok(
        store
            .add_memory("m", token, &[note(&[], 1, &exactly, 400)])
            .await,
        "1000 bytes",
    );
    let over = format!("{exactly}x");
    assert_invalid(
        store
            .add_memory(
                "m",
                token,
                &[note(&[], 1, "fine", 500), note(&[], 1, &over, 501)],
            )
            .await,
        "1001 bytes",
    );
    assert_eq!(
        ok(store.memory_newest("m", 10).await, "after invalid").len(),
        4,
        "a batch with one bad note writes none"
    );
    store.close().await;
}

async fn briefs(factory: &dyn StoreFactory) {
    let store = open(factory, "briefs").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    assert_not_found(
        store
            .enqueue_brief("zz", &brief("x", BriefOrigin::Operator, 1))
            .await,
        "unknown",
    );
    assert_eq!(ok(store.claim_brief("m", token, 1).await, "empty"), None);
    let first = ok(
        store
            .enqueue_brief("m", &brief("fix CI", BriefOrigin::Operator, 10))
            .await,
        "q1",
    );
    let second = ok(
        store
            .enqueue_brief("m", &brief("write docs", BriefOrigin::Persona, 20))
            .await,
        "q2",
    );
    assert_eq!((first.seq, second.seq), (1, 2));
    assert_eq!(first.status, BriefStatus::Queued);

    let claimed = ok(store.claim_brief("m", token, 30).await, "claim");
    let claimed = claimed.unwrap_or_else(|| panic!("nothing claimed"));
    assert_eq!(claimed.seq, 1);
    assert_eq!(claimed.status, BriefStatus::Running);
    assert_eq!(claimed.started_at_ms, Some(30));
    assert_invalid(
        store
            .finish_brief("m", token, 2, BriefStatus::Done, "r", 31)
            .await,
        "finish a queued brief",
    );
    assert_invalid(
        store
            .finish_brief("m", token, 1, BriefStatus::Queued, "r", 31)
            .await,
        "finish as queued",
    );
    assert_not_found(
        store
            .finish_brief("m", token, 9, BriefStatus::Done, "r", 31)
            .await,
        "unknown",
    );
    let done = ok(
        store
            .finish_brief("m", token, 1, BriefStatus::Done, "merged", 40)
            .await,
        "done",
    );
    assert_eq!(done.status, BriefStatus::Done);
    assert_eq!(done.result.as_deref(), Some("merged"));
    assert_eq!(done.finished_at_ms, Some(40));
    assert_invalid(
        store
            .finish_brief("m", token, 1, BriefStatus::Failed, "again", 41)
            .await,
        "finish twice",
    );

    let next = ok(store.claim_brief("m", token, 50).await, "claim 2");
    assert_eq!(next.as_ref().map(|b| b.seq), Some(2));
    assert_eq!(next.map(|b| b.origin), Some(BriefOrigin::Persona));
    assert_eq!(
        ok(store.claim_brief("m", token, 51).await, "none queued"),
        None
    );
    let failed = ok(
        store
            .finish_brief("m", token, 2, BriefStatus::Failed, "no result", 60)
            .await,
        "fail",
    );
    assert_eq!(failed.status, BriefStatus::Failed);

    ok(
        store
            .enqueue_brief("m", &brief("third", BriefOrigin::Operator, 70))
            .await,
        "q3",
    );
    let all = ok(store.briefs("m", None, 10).await, "all");
    assert_eq!(all.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(all[0], done);
    let queued = ok(
        store.briefs("m", Some(BriefStatus::Queued), 10).await,
        "queued",
    );
    assert_eq!(queued.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![3]);
    let finished = ok(
        store.briefs("m", Some(BriefStatus::Failed), 10).await,
        "failed",
    );
    assert_eq!(finished, vec![failed]);
    store.close().await;
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

async fn record_turn_commits_everything(factory: &dyn StoreFactory) {
    let store = open(factory, "record_turn").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    ok(store.post_delivery("m", &delivery(1)).await, "d1");
    ok(store.post_delivery("m", &delivery(2)).await, "d2");
    ok(store.post_delivery("m", &delivery(3)).await, "d3");
    let receipt = ok(
        store
            .record_turn("m", token, &full_turn("m", Some(2)))
            .await,
        "turn",
    );
    assert_eq!(receipt.transcript_seqs, vec![1, 2]);
    assert_eq!(
        receipt
            .outbox
            .iter()
            .map(|o| (o.request_id.as_str(), o.seq))
            .collect::<Vec<_>>(),
        vec![("batch7-0", 1), ("batch7-1", 2)]
    );
    assert_eq!(receipt.ledger_ids.len(), 1);
    assert_eq!(receipt.memory_ids.len(), 1);
    assert_eq!(receipt.brief_seqs, vec![1]);
    assert_eq!(receipt.ack_position, 2);

    let tail = ok(store.transcript_tail("m", Role::Persona, 10).await, "tail");
    assert_eq!(tail.len(), 2);
    assert_eq!(tail[1].kind, TranscriptKind::Reply);
    assert_eq!(
        ok(store.unsent_outbox("m", 10).await, "outbox"),
        receipt.outbox
    );
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].row, ledger_row("m", 5_000, 1_234));
    assert_eq!(ledger[0].id, receipt.ledger_ids[0]);
    assert_eq!(
        ok(store.memory_newest("m", 10).await, "memory")[0].text,
        "Ann said hi"
    );
    assert_eq!(
        ok(store.briefs("m", None, 10).await, "briefs")[0].text,
        "look into the flaky test"
    );
    assert_eq!(ok(store.ack_position("m").await, "ack"), 2);
    assert_eq!(
        ok(store.pending_deliveries("m", 2, 10).await, "pending").len(),
        1
    );

    // A turn with nothing but an ack, and an ack below the position (kept, not moved back).
    let ack_only = TurnRecord {
        ack_through: Some(1),
        ..TurnRecord::default()
    };
    assert_eq!(
        ok(store.record_turn("m", token, &ack_only).await, "ack only").ack_position,
        2
    );
    let empty = ok(
        store.record_turn("m", token, &TurnRecord::default()).await,
        "empty turn",
    );
    assert_eq!(
        empty,
        TurnReceipt {
            ack_position: 2,
            ..TurnReceipt::default()
        }
    );

    // The same turn again (a retry after a lost commit acknowledgment) is refused whole.
    match store
        .record_turn("m", token, &full_turn("m", Some(3)))
        .await
    {
        Err(StoreError::TurnAlreadyRecorded { turn_key, .. }) => assert_eq!(turn_key, "batch7"),
        other => panic!("repeated turn key: expected TurnAlreadyRecorded, got {other:?}"),
    }
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 10).await, "tail").len(),
        2
    );
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger").len(),
        1
    );
    assert_eq!(ok(store.ack_position("m").await, "ack"), 2);

    // A retried turn's sends keep their first rows (idempotent request ids).
    let retry = TurnRecord {
        outbox: vec![out("batch7-0", "changed"), out("batch8-0", "new")],
        ack_through: Some(3),
        ..TurnRecord::default()
    };
    let receipt = ok(store.record_turn("m", token, &retry).await, "retry");
    assert_eq!(receipt.outbox[0].text, "hi");
    assert_eq!(receipt.outbox[1].seq, 3);
    assert_eq!(receipt.ack_position, 3);
    store.close().await;
}

async fn record_turn_all_or_nothing(factory: &dyn StoreFactory) {
    let store = open(factory, "record_turn_atomic").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    ok(store.post_delivery("m", &delivery(1)).await, "d1");
    ok(store.post_delivery("m", &delivery(2)).await, "d2");

    // Each of these fails after earlier parts of the turn were written in the transaction.
    let mut ack_beyond = full_turn("m", Some(3));
    ack_beyond
        .outbox
        .push(out("batch7-0", "duplicate inside the turn is fine"));
    let mut foreign_ledger = full_turn("m", Some(2));
    foreign_ledger.ledger.push(ledger_row("other", 1, 1));
    let mut long_note = full_turn("m", Some(2));
    long_note.memory.push(note(&[], 1, &"x".repeat(1001), 1));
    let mut overflow = full_turn("m", Some(2));
    overflow.ledger[0].usage.output = u64::MAX;
    for (what, turn) in [
        ("ack beyond the last delivery", ack_beyond),
        ("ledger row of another mind", foreign_ledger),
        ("memory note over 1000 bytes", long_note),
        ("token count beyond i64", overflow),
    ] {
        assert_invalid(store.record_turn("m", token, &turn).await, what);
    }
    // A stale token fails before anything.
    let newer = ok(
        store.acquire_lease("m", "thief", 60_000, 1_000_000).await,
        "steal",
    );
    let newer = newer
        .unwrap_or_else(|| panic!("expired lease not taken"))
        .token;
    assert_fenced(
        store
            .record_turn("m", token, &full_turn("m", Some(2)))
            .await,
        "stale token",
    );

    // Nothing of any failed turn is visible.
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 10).await, "tail"),
        vec![]
    );
    assert_eq!(ok(store.unacked_outbox("m", 10).await, "outbox"), vec![]);
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger"),
        vec![]
    );
    assert_eq!(ok(store.memory_newest("m", 10).await, "memory"), vec![]);
    assert_eq!(ok(store.briefs("m", None, 10).await, "briefs"), vec![]);
    assert_eq!(ok(store.ack_position("m").await, "ack"), 0);

    // And no seq was consumed: the next good turn starts at 1.
    let receipt = ok(
        store
            .record_turn("m", newer, &full_turn("m", Some(2)))
            .await,
        "good turn",
    );
    assert_eq!(receipt.transcript_seqs, vec![1, 2]);
    assert_eq!(receipt.outbox[0].seq, 1);
    assert_eq!(receipt.brief_seqs, vec![1]);
    assert_eq!(receipt.ack_position, 2);
    // The failed attempts did not burn the turn key; the committed one did.
    assert!(matches!(
        store
            .record_turn("m", newer, &full_turn("m", Some(2)))
            .await,
        Err(StoreError::TurnAlreadyRecorded { .. })
    ));
    store.close().await;
}

async fn concurrent_writers_get_gap_free_seqs(factory: &dyn StoreFactory) {
    const PER_TASK: i64 = 25;
    let store = open(factory, "concurrency").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    let mut tasks = Vec::new();
    for task in 0..2 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut transcript = Vec::new();
            let mut deliveries = Vec::new();
            for i in 0..PER_TASK {
                let n = task * 1_000 + i;
                let seqs = ok(
                    store
                        .append_transcript("m", token, &[item(Role::Persona, n)])
                        .await,
                    "concurrent append",
                );
                transcript.extend(seqs);
                let posted = ok(
                    store.post_delivery("m", &delivery(n)).await,
                    "concurrent post",
                );
                deliveries.push(posted.seq);
            }
            (transcript, deliveries)
        }));
    }
    let mut all_transcript = Vec::new();
    let mut all_deliveries = Vec::new();
    for task in tasks {
        let (transcript, deliveries) = match task.await {
            Ok(result) => result,
            Err(error) => panic!("writer task failed: {error}"),
        };
        assert!(
            transcript.windows(2).all(|w| w[0] < w[1]),
            "one task's seqs increase"
        );
        assert!(deliveries.windows(2).all(|w| w[0] < w[1]));
        all_transcript.extend(transcript);
        all_deliveries.extend(deliveries);
    }
    all_transcript.sort_unstable();
    all_deliveries.sort_unstable();
    let expected: Vec<i64> = (1..=2 * PER_TASK).collect();
    assert_eq!(all_transcript, expected, "distinct and gap-free");
    assert_eq!(all_deliveries, expected, "distinct and gap-free");
    let stored = ok(
        store
            .transcript_range("m", Role::Persona, 1, None, 1_000)
            .await,
        "read",
    );
    assert_eq!(stored.iter().map(|t| t.seq).collect::<Vec<_>>(), expected);

    // Two holders racing for a free lease: exactly one wins.
    ok(store.create_mind(&mind("race")).await, "create race");
    let (a, b) = tokio::join!(
        store.acquire_lease("race", "host-a", 60_000, 1),
        store.acquire_lease("race", "host-b", 60_000, 1)
    );
    let winners = [ok(a, "race a"), ok(b, "race b")]
        .iter()
        .filter(|l| l.is_some())
        .count();
    assert_eq!(winners, 1, "exactly one holder wins the lease");
    store.close().await;
}

async fn reopen_keeps_everything(factory: &dyn StoreFactory) {
    let store = open(factory, "reopen").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    ok(store.post_delivery("m", &delivery(1)).await, "d1");
    ok(store.post_delivery("m", &delivery(2)).await, "d2");
    ok(
        store
            .record_turn("m", token, &full_turn("m", Some(1)))
            .await,
        "turn",
    );
    ok(
        store
            .put_settings(
                "m",
                &MindSettings {
                    brake: true,
                    ..MindSettings::default()
                },
                1,
            )
            .await,
        "settings",
    );
    let version = ok(store.schema_version().await, "version");
    let transcript = ok(store.transcript_tail("m", Role::Persona, 10).await, "tail");
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    let lease = ok(store.lease("m").await, "lease");
    store.close().await;
    drop(store);

    // Reopening runs the migrations again: they must find nothing to do.
    let store = open(factory, "reopen").await;
    assert_eq!(ok(store.schema_version().await, "version"), version);
    assert_eq!(ok(store.mind("m").await, "mind"), Some(mind("m")));
    assert_eq!(
        ok(store.transcript_tail("m", Role::Persona, 10).await, "tail"),
        transcript
    );
    assert_eq!(
        ok(store.ledger(&LedgerQuery::default()).await, "ledger"),
        ledger
    );
    assert_eq!(ok(store.lease("m").await, "lease"), lease);
    assert_eq!(
        ok(store.ack_position("m").await, "ack"),
        1,
        "the ack position is durable"
    );
    assert_eq!(
        ok(store.pending_deliveries("m", 1, 10).await, "pending").len(),
        1
    );
    assert_eq!(ok(store.unsent_outbox("m", 10).await, "outbox").len(), 2);
    assert_eq!(ok(store.memory_newest("m", 10).await, "memory").len(), 1);
    assert_eq!(ok(store.briefs("m", None, 10).await, "briefs").len(), 1);
    assert!(ok(store.settings("m").await, "settings").brake);
    // The fencing token survives a restart; seqs continue.
    let seqs = ok(
        store
            .append_transcript("m", token, &[item(Role::Persona, 9)])
            .await,
        "append",
    );
    assert_eq!(seqs, vec![3]);
    assert_eq!(
        ok(store.post_delivery("m", &delivery(3)).await, "d3").seq,
        3
    );
    store.close().await;
    // A third open, for idempotence of the migration run on a current database.
    let store = open(factory, "reopen").await;
    assert_eq!(ok(store.schema_version().await, "version"), version);
    store.close().await;
}

/// Rows as a build at schema version 2 wrote them: a delivery (before `to_you` and `context`)
/// and a ledger row (before `events`). Plain SQL both backends accept.
const ROWS_AT_SCHEMA_2: &str = "\
    INSERT INTO minds (id, display_name, config, created_at_ms) VALUES ('m', 'M', '{}', 1);\
    INSERT INTO counters (mind_id, name, value) VALUES ('m', 'delivery', 1);\
    INSERT INTO deliveries (mind_id, seq, room, sender, is_direct, text, source_id, \
        received_at_ms) VALUES ('m', 1, '#swarm', '@ann:example.org', TRUE, 'old message', \
        '$old1', 30001);\
    INSERT INTO ledger (mind_id, role, segment, turn, at_ms, idle_gap_ms, model, \
        prefix_tokens, rehydration_tokens, usage_input, usage_cache_write_5m, \
        usage_cache_write_1h, usage_cache_read, usage_output, raw_usage, cost_micro_usd, \
        predicted_read, predicted_write, cache_state, miss_cause, decision, boundary) \
        VALUES ('m', 'persona', 0, 1, 5000, 0, 'sim', 10, 10, 10, 0, 0, 0, 5, NULL, 42, 0, 10, \
        'cold', 'cold_start', 'append', TRUE);\
    INSERT INTO segments (mind_id, role, number, started_at_ms, rehydration_tokens, reason, \
        session_id) VALUES ('m', 'persona', 0, 4000, 10, 'start', 'old-handle');";

async fn rows_from_schema_2_migrate_forward(factory: &dyn StoreFactory) {
    ok(
        factory
            .create_at_version("schema_2", 2, ROWS_AT_SCHEMA_2)
            .await,
        "create at schema 2",
    );
    let store = open(factory, "schema_2").await;
    assert!(
        ok(store.schema_version().await, "version") > 2,
        "migrated forward"
    );
    // The old delivery: not addressed to the Mind, no room history.
    let old = Delivery {
        mind: "m".into(),
        seq: 1,
        room: "#swarm".into(),
        sender: "@ann:example.org".into(),
        is_direct: true,
        to_you: false,
        text: "old message".into(),
        source_id: "$old1".into(),
        received_at_ms: 30_001,
        context: Vec::new(),
    };
    assert_eq!(
        ok(store.pending_deliveries("m", 0, 10).await, "pending"),
        vec![old.clone()]
    );
    // The old ledger row: no events.
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].row.events, Vec::<serde_json::Value>::new());
    assert_eq!(ledger[0].row.cost, MicroUsd(42));
    assert_eq!(ledger[0].row.miss_cause, Some(MissCause::ColdStart));
    assert_eq!(
        ledger[0].row.provider_miss, None,
        "no diagnosis before migration 6"
    );
    // The old segment: its handle kept, no memory and no spec digest (so it is never resumed).
    let segment = ok(store.current_segment("m", Role::Persona).await, "segment");
    let segment = segment.unwrap_or_else(|| panic!("the old segment is gone"));
    assert_eq!(segment.session_id.as_deref(), Some("old-handle"));
    assert_eq!((segment.memory, segment.spec_digest), (None, None));
    // New rows beside the old ones carry the new fields.
    assert_eq!(
        ok(store.post_delivery("m", &delivery(3)).await, "post").seq,
        2
    );
    let pending = ok(store.pending_deliveries("m", 0, 10).await, "pending");
    assert_eq!(pending[0], old);
    assert_eq!(pending[1].context, delivery(3).context);
    assert!(pending[1].to_you);
    let token = match ok(store.acquire_lease("m", "h", 60_000, 10_000).await, "lease") {
        Some(lease) => lease.token,
        None => panic!("lease refused"),
    };
    let mut row = ledger_row("m", 6_000, 1);
    row.events = vec![json!({"type": "read_shortfall", "predicted": 10, "reported": 0})];
    ok(
        store.append_ledger("m", token, &[row.clone()]).await,
        "append",
    );
    let ledger = ok(store.ledger(&LedgerQuery::default()).await, "ledger");
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[1].row, row);
    store.close().await;
}

async fn unknown_mind(factory: &dyn StoreFactory) {
    let store = open(factory, "unknown_mind").await;
    assert_eq!(
        ok(store.transcript_tail("zz", Role::Persona, 5).await, "tail"),
        vec![]
    );
    assert_eq!(
        ok(store.pending_deliveries("zz", 0, 5).await, "pending"),
        vec![]
    );
    assert_eq!(ok(store.ack_position("zz").await, "ack"), 0);
    assert_eq!(ok(store.unsent_outbox("zz", 5).await, "outbox"), vec![]);
    assert_eq!(
        ok(store.outbox_after("zz", 0, 5).await, "outbox after"),
        vec![]
    );
    assert_not_found(store.ack_outbox("zz", "b1-0", None, 1).await, "ack");
    assert_eq!(
        ok(store.spend("zz", 0, i64::MAX).await, "spend"),
        MicroUsd::ZERO
    );
    assert_eq!(ok(store.memory_newest("zz", 5).await, "memory"), vec![]);
    assert_eq!(ok(store.briefs("zz", None, 5).await, "briefs"), vec![]);
    assert_eq!(ok(store.lease("zz").await, "lease"), None);
    assert_eq!(
        ok(store.segments("zz", Role::SelfRole).await, "segments"),
        vec![]
    );
    store.close().await;
}
