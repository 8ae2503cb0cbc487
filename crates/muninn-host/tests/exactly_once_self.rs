//! A Self brief, exactly once, where a store's answer is lost: the brief's append lands but its
//! answer does not come back, or the run's commit does. Either way the runner retries the step,
//! and: the Self model is shown the brief once (the simulator's request log), the brief is run
//! and reported once, the Self ledger holds one row per Self request, each Self request extends
//! the one before it byte for byte (the segment's append-only prefix), and the Self transcript
//! holds exactly the briefs its last request was shown — what a renderer rebuilt from it (a new
//! lease, a resumed CLI session) would send. The kill between a brief's append and its ask is
//! the crash harness's `host-brief-recorded` (`crates/muninn/tests/crash_points.rs`).

use crate::runtime::{World, ledger, mind, runner, stored_brief};
use muninn_host::runtime::{MindRunner, RuntimeError, Step};
use muninn_sim::inprocess::SimBackend;
use muninn_store::{BriefOrigin, BriefStatus, NewBrief, Role, Store, StoreError, TranscriptKind};
use serde_json::Value;
use std::sync::Arc;

mod cli;
mod lease_changes;
mod lost_answers;
mod recovered;

/// A word only the probe brief holds.
const PROBE: &str = "self-exactly-once-probe";

/// Queues an operator brief on `vala`; its seq.
async fn brief(w: &World, text: &str) -> i64 {
    let brief = NewBrief {
        text: text.into(),
        origin: BriefOrigin::Operator,
        created_at_ms: w.sim.now_ms(),
    };
    w.host
        .store
        .enqueue_brief("vala", &brief)
        .await
        .unwrap()
        .seq
}

/// Steps until the runner idles (the Persona reads each report in between); every step must
/// succeed.
async fn settle(r: &mut MindRunner<SimBackend>) -> Vec<Step> {
    let mut steps = Vec::new();
    for _ in 0..10 {
        let step = r.step().await.unwrap();
        if matches!(step, Step::Idle { .. }) {
            return steps;
        }
        steps.push(step);
    }
    panic!("never idle: {steps:?}")
}

/// A world on a fault-armed store whose runner `host-a` has run one brief to its end, and the
/// probe brief queued after it (its seq): the state every test here arms a fault in.
async fn a_brief_after_one_run() -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
    i64,
) {
    a_brief_after_one_run_of(mind("")).await
}

/// [`a_brief_after_one_run`] for a Mind configured as `config`.
async fn a_brief_after_one_run_of(
    config: muninn_host::config::MindConfig,
) -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
    i64,
) {
    let (w, faults) = crate::runtime::faulty_world("").await;
    let mut r = runner(&w, config, "host-a");
    r.register().await.unwrap();
    brief(&w, "Summarise the open issues.").await;
    settle(&mut r).await;
    let seq = brief(&w, &format!("{PROBE}: summarise the week.")).await;
    (w, faults, r, seq)
}

/// A message's text: a string, or its blocks' texts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The user messages' texts of a Messages request body.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .collect()
}

/// `v` without its cache breakpoints (the only bytes that may move between two requests of a
/// segment).
fn without_breakpoints(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), without_breakpoints(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_breakpoints).collect()),
        v => v.clone(),
    }
}

/// The Self's answered Messages requests, oldest first: those whose first user message is a
/// brief (a Persona's is a delivery).
fn self_requests(w: &World) -> Vec<Value> {
    w.sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200 && r.error.is_none())
        .filter(|r| {
            user_texts(&r.body)
                .first()
                .is_some_and(|t| t.starts_with("Brief "))
        })
        .map(|r| r.body)
        .collect()
}

/// What a run left, checked: the probe brief (`seq`) shown to the model once — in one request's
/// new message, never twice in one request —, done and reported once; one Self ledger row per
/// Self request; each Self request of a segment extending the one before (`segments` started);
/// the probe recorded at most once per segment, and the Self transcript's last segment holding
/// exactly the briefs the last Self request was shown.
async fn brief_exactly_once(w: &World, seq: i64, briefs: usize, segments: usize) {
    let requests = self_requests(w);
    shown_once_in_extending_requests(&requests, briefs, segments);
    let rows = ledger(w).await;
    let self_rows = rows
        .iter()
        .filter(|row| row.role == Role::SelfRole.as_str())
        .count();
    assert_eq!(
        self_rows,
        requests.len(),
        "Self ledger rows against requests"
    );
    done_and_reported_once(w, seq).await;
    transcript_as_sent(w, requests.last().unwrap()).await;
}

/// The Self requests: `briefs` of them, `segments` started (a segment's first request holds one
/// brief; every other extends the one before, byte for byte), the probe the new message of one
/// and never shown twice in one.
fn shown_once_in_extending_requests(requests: &[Value], briefs: usize, segments: usize) {
    assert_eq!(requests.len(), briefs, "one Self request per brief");
    // A segment's first request holds one brief; every other extends the one before.
    let starts = |r: &Value| user_texts(r).len() == 1;
    assert_eq!(
        requests.iter().filter(|r| starts(r)).count(),
        segments,
        "Self segments started"
    );
    let shown_new = requests
        .iter()
        .filter(|r| user_texts(r).last().is_some_and(|t| t.contains(PROBE)))
        .count();
    assert_eq!(shown_new, 1, "requests whose new brief is the probe");
    // In what the model was told (its own answers echo the brief).
    for (n, r) in requests.iter().enumerate() {
        let told = user_texts(r).concat();
        assert!(
            told.matches(PROBE).count() <= 1,
            "Self request {n} shows the probe twice: {told}"
        );
    }
    for pair in requests.windows(2).filter(|pair| !starts(&pair[1])) {
        let (before, after) = (without_breakpoints(&pair[0]), without_breakpoints(&pair[1]));
        assert_eq!(before["system"], after["system"], "the system changed");
        let (before, after) = (
            before["messages"].as_array().unwrap(),
            after["messages"].as_array().unwrap(),
        );
        assert!(
            after.len() > before.len() && after[..before.len()] == before[..],
            "a Self request does not extend the one before:\n{before:#?}\n{after:#?}"
        );
    }
}

/// The probe brief (`seq`) done, and reported to the Persona once, as finished.
async fn done_and_reported_once(w: &World, seq: i64) {
    let stored = stored_brief(w, seq).await;
    assert_eq!(stored.status, BriefStatus::Done, "{stored:?}");
    let reports = reports_of(w, seq).await;
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].starts_with(&format!("Self run {seq} finished: ")),
        "{reports:?}"
    );
}

/// The probe brief (`seq`) failed, and reported to the Persona once, as interrupted: `by` what
/// (after "was interrupted: "), and saying `says`.
async fn failed_and_reported_once(w: &World, seq: i64, by: &str, says: &str) {
    let stored = stored_brief(w, seq).await;
    assert_eq!(stored.status, BriefStatus::Failed, "{stored:?}");
    let reports = reports_of(w, seq).await;
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].starts_with(&format!("Self run {seq} was interrupted: {by}"))
            && reports[0].contains(says),
        "{reports:?}"
    );
}

/// How many Self requests showed the probe anywhere in what the model was told.
fn showing_the_probe(w: &World) -> usize {
    self_requests(w)
        .iter()
        .filter(|r| user_texts(r).concat().contains(PROBE))
        .count()
}

/// `r` shut down cleanly (its lease released) and the same host started again with `config`,
/// settled: the restarted runner.
async fn restarted_cleanly(
    w: &World,
    mut r: MindRunner<SimBackend>,
    config: muninn_host::config::MindConfig,
) -> MindRunner<SimBackend> {
    r.release().await.unwrap();
    drop(r);
    let mut restarted = runner(w, config, "host-a");
    settle(&mut restarted).await;
    restarted
}

/// The probe recorded at most once per segment, and the Self transcript's last segment holding
/// exactly the briefs the `last` Self request was shown.
async fn transcript_as_sent(w: &World, last: &Value) {
    let transcript = self_transcript(&w.host.store).await;
    // At most once per segment it was rendered in (a restart renders it in a new one).
    let probes: Vec<i64> = transcript
        .iter()
        .filter(|(_, kind, text)| *kind == TranscriptKind::Brief && text.contains(PROBE))
        .map(|(segment, _, _)| *segment)
        .collect();
    let mut once = probes.clone();
    once.dedup();
    assert_eq!(
        once, probes,
        "the probe recorded twice in a segment: {transcript:#?}"
    );
    let segment = transcript.last().map(|(s, _, _)| *s);
    let recorded: Vec<&String> = transcript
        .iter()
        .filter(|(s, kind, _)| Some(*s) == segment && *kind == TranscriptKind::Brief)
        .map(|(_, _, text)| text)
        .collect();
    let sent = user_texts(last);
    let sent: Vec<&String> = sent.iter().collect();
    assert_eq!(
        recorded, sent,
        "the transcript's briefs are not what the model was shown"
    );
}

/// What the Persona was told of brief `seq`: the texts of the deliveries its report posted.
async fn reports_of(w: &World, seq: i64) -> Vec<String> {
    w.host
        .store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .map(|d| d.text)
        .collect()
}

/// The Self transcript: each item's segment, kind and text.
async fn self_transcript(store: &Arc<dyn Store>) -> Vec<(i64, TranscriptKind, String)> {
    let items = store
        .transcript_tail("vala", Role::SelfRole, 100)
        .await
        .unwrap();
    items
        .into_iter()
        .map(|i| {
            let text = i.body["text"].as_str().unwrap_or_default().to_string();
            (i.segment, i.kind, text)
        })
        .collect()
}

/// Another host takes the Mind over from `r`'s lease and lets it go at once, without a step:
/// `r`'s token is stale, and its next lease is a new one, with nothing run in between.
pub(crate) async fn lease_changes_hands(w: &World) {
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().expect("host-a leads");
    let now = w.sim.now_ms();
    let b = (store.take_over_lease("vala", "host-b", held.token, 30_000, now))
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    store.release_lease("vala", b.token).await.unwrap();
}

/// Steps until the runner idles, failed steps included (a step under a stale lease fails).
async fn settle_through_errors(r: &mut MindRunner<SimBackend>) {
    for _ in 0..10 {
        r.woken();
        if matches!(r.step().await, Ok(Step::Idle { .. })) {
            return;
        }
    }
    panic!("never idle");
}

/// `vala` with a spend cap far above what the tests spend: the cap is read before each brief.
fn capped() -> muninn_host::config::MindConfig {
    mind("spend_cap_micro_usd = 1000000000\n")
}
