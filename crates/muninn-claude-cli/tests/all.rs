//! The claude-cli backend against the REAL Claude Code CLI 2.1.332 and `muninn_sim::spawn`.
//!
//! The CLI is found through `MUNINN_CLAUDE_BIN` (default: where `scripts/install-claude-cli.sh`
//! installs it). A missing CLI fails the tests (prints `SKIP` when `MUNINN_SKIP_PEERS=1`).
//!
//! Usage is checked against an independent recomputation of the cache model over the requests
//! the CLI actually sent (the sim's request log), as the sim's own peer test does.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed unwrap is a failed test.

use muninn_anthropic::prompt::shape;
use muninn_anthropic::wire::MessagesRequest;
use muninn_backend::{
    Backend, BackendError, Capability, FlushProtocol, FlushStage, SessionSpec, TurnInput,
    TurnOutcome,
};
use muninn_claude_cli::pool::{ParkReason, PoolConfig, PoolEvent, SharedPool};
use muninn_claude_cli::{
    BindingKey, ClaudeCliBackend, CliConfig, Handle, Secret, SessionEvent, transcript_path,
    vm_rss_kb,
};
use muninn_core::cache::{CacheRules, CacheState, Ttl};
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use muninn_sim::SimHandle;
use muninn_sim::sim::{Fault, FaultKind, RecordedRequest, SimConfig};
use muninn_testkit::peers::claude_cli;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const T0: i64 = 1_796_000_000_000;

async fn sim() -> SimHandle {
    muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        SimConfig {
            frozen_at_ms: Some(T0),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// A session directory, a sim and a config for it.
struct Rig {
    sim: SimHandle,
    dir: tempfile::TempDir,
    config: CliConfig,
}

async fn rig(bin: PathBuf, session: &str) -> Rig {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let config = CliConfig::new(
        bin,
        dir.path(),
        sim.base_url(),
        Secret::new("sk-test-cli"),
        session,
    );
    Rig { sim, dir, config }
}

fn spec(tag: &str) -> SessionSpec {
    SessionSpec {
        model: String::new(),
        system: vec![
            format!(
                "You are MUNINN-CLI-TEST ({tag}). {}",
                (0..400)
                    .map(|i| format!("Doctrine line {i}: keep the cache warm."))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            "Persona: terse.".to_string(),
        ],
        tools: Vec::new(),
        output_schema: None,
        system_ttl: Ttl::FiveMinutes,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 1024,
    }
}

/// Recomputes, with a fresh cache model, the usage of every answered messages request.
fn recompute(records: &[RecordedRequest]) -> Vec<(Value, Usage)> {
    let prices = PriceTable::embedded();
    let rules = CacheRules::default();
    let mut cache = CacheState::new();
    records
        .iter()
        .filter(|r| r.path == "/v1/messages" && r.usage.is_some())
        .map(|r| {
            let shaped = shape(&r.body).unwrap();
            let min = prices.model(&shaped.model).unwrap().min_cacheable;
            let outcome = cache.apply(&shaped.prompt(), r.at_ms, min, &rules).unwrap();
            let request: MessagesRequest = serde_json::from_value(r.body.clone()).unwrap();
            let seed = shaped.checkpoints.last().map_or(0, |c| c.fingerprint);
            let usage = outcome.usage(muninn_sim::reply::reply(&request, seed).output_tokens);
            (r.body.clone(), usage)
        })
        .collect()
}

fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == json!("user"))
        .unwrap()
        .to_string()
}

/// The cache model's usage for the (last) request whose last user message carries `text`.
fn expected_for(sim: &SimHandle, text: &str) -> Usage {
    let all = recompute(&sim.sim.requests());
    all.iter()
        .rev()
        .find(|(body, _)| last_user(body).contains(text))
        .map(|(_, u)| *u)
        .unwrap_or_else(|| panic!("no request for {text:?}"))
}

async fn wait_dead(pid: u32) {
    for _ in 0..200 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("pid {pid} did not die");
}

fn sigkill(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

fn ok(r: Result<TurnOutcome, BackendError>) -> TurnOutcome {
    r.unwrap_or_else(|e| panic!("turn failed: {e}"))
}

/// The backend's session events as the host ledgers them: JSON objects with a `type`.
fn session_events_json(b: &mut ClaudeCliBackend) -> Vec<Value> {
    b.take_session_events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_turns_in_one_process_report_the_cache_models_usage() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("six")).await.unwrap();
    let texts = [
        "first: hello",
        "second: what is a raven?",
        "third: and a crow?",
        "fourth: which is larger?",
        "fifth: thanks",
        "sixth: one more thing",
    ];
    let mut pids = Vec::new();
    let mut reads = Vec::new();
    for text in texts {
        let o = ok(b.turn(TurnInput::text(text)).await);
        let expected = expected_for(&r.sim, text);
        assert_eq!(o.usage, expected, "{text}: usage equals the cache model's");
        assert_eq!(
            o.raw_usage["cache_read_input_tokens"].as_u64(),
            Some(expected.cache_read)
        );
        assert!(o.text.contains(text), "{}", o.text);
        let report = b.last_report().unwrap();
        assert!(report.session_events.is_empty());
        assert!(report.model_usage_since_last_result.is_some());
        pids.push(report.pid.unwrap());
        reads.push(o.usage.cache_read);
        eprintln!(
            "turn overhead: to write {:?}, from result {:?}",
            report.to_write, report.from_result
        );
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "one process: {pids:?}"
    );
    assert!(
        reads[0] == 0 && reads.windows(2).all(|w| w[1] > w[0]),
        "reads grow: {reads:?}"
    );
    let rss = vm_rss_kb(pids[0]).unwrap();
    eprintln!("six turns, one process; reads {reads:?}; child VmRSS {rss} kB");
    let status = b.shutdown().await.unwrap();
    assert!(status.success(), "{status:?}");
    drop(r.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_child_is_resumed_and_a_lost_session_is_reseeded() {
    let Some(bin) = claude_cli() else { return };
    let session = "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a52";
    let r = rig(bin, session).await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("kill")).await.unwrap();
    ok(b.turn(TurnInput::text("k1: before the kill")).await);
    ok(b.turn(TurnInput::text("k2: still before")).await);
    let pid = b.last_report().unwrap().pid.unwrap();

    // SIGKILL → the next turn relaunches with --resume and carries the whole history.
    sigkill(pid);
    wait_dead(pid).await;
    let o = ok(b.turn(TurnInput::text("k3: after the kill")).await);
    let report = b.last_report().unwrap().clone();
    assert_eq!(
        report.session_events,
        vec![SessionEvent::Relaunched {
            session_id: session.to_string()
        }]
    );
    assert_ne!(report.pid, Some(pid));
    assert_eq!(report.session_id, session);
    assert_eq!(o.usage, expected_for(&r.sim, "k3: after the kill"));
    let last = r.sim.sim.requests().last().unwrap().body.to_string();
    assert!(last.contains("k1: before the kill") && last.contains("k2: still before"));
    assert!(o.usage.cache_read > 0, "the resumed request read the cache");

    // Delete the transcript, kill → a fresh session with a new id, reported.
    let file = transcript_path(&r.config, session).unwrap();
    std::fs::remove_file(&file).unwrap();
    let pid = report.pid.unwrap();
    sigkill(pid);
    wait_dead(pid).await;
    ok(b.turn(TurnInput::text("k4: after the delete")).await);
    let report = b.last_report().unwrap().clone();
    let [
        SessionEvent::Reseeded {
            old_session_id,
            new_session_id,
            reason,
            seed_tokens,
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(old_session_id, session);
    assert_ne!(new_session_id, session);
    assert_eq!(&report.session_id, new_session_id);
    assert!(reason.contains("missing"), "{reason}");
    // A fresh session, seeded from the backend's log of the turns so far: one user message
    // whose first block is the seed carrying every earlier turn, then the new input.
    let sent = user_messages_sent_with(&r.sim, "k4: after the delete");
    assert_eq!(sent.len(), 1, "a fresh session: {sent:?}");
    let blocks: Value = serde_json::from_str(&sent[0]).unwrap();
    let seed = blocks[0]["text"].as_str().unwrap();
    for earlier in [
        "k1: before the kill",
        "k2: still before",
        "k3: after the kill",
    ] {
        assert!(seed.contains(earlier), "{earlier} in the seed: {seed}");
    }
    assert_eq!(*seed_tokens, muninn_core::tokenize::count(seed));
    assert!(*seed_tokens > 0);
    assert_eq!(blocks[1]["text"], json!("k4: after the delete"));
    ok(b.turn(TurnInput::text("k5: in the new session")).await);
    // The seed went once: the next turn is a plain append.
    let sent = user_messages_sent_with(&r.sim, "k5: in the new session");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[1].contains("k5: in the new session") && !sent[1].contains("[muninn]"),
        "{}",
        sent[1]
    );

    // Corrupt the (new) transcript, kill → the CLI says "No conversation found" → reseeded.
    let second = report.session_id.clone();
    let file = transcript_path(&r.config, &second).unwrap();
    std::fs::write(&file, "garbage{{{\n").unwrap();
    let pid = b.last_report().unwrap().pid.unwrap();
    sigkill(pid);
    wait_dead(pid).await;
    ok(b.turn(TurnInput::text("k6: after the corruption")).await);
    let report = b.last_report().unwrap().clone();
    // The file still exists, so the driver first tries `--resume`; the CLI refuses it.
    match report.session_events.as_slice() {
        [
            SessionEvent::Relaunched { .. },
            SessionEvent::Reseeded {
                old_session_id,
                reason,
                seed_tokens,
                ..
            },
        ] => {
            assert_eq!(old_session_id, &second);
            assert!(reason.contains("No conversation found"), "{reason}");
            assert!(*seed_tokens > 0);
        }
        other => panic!("{other:?}"),
    }
    assert_ne!(report.session_id, second);
    // Seeded again from the whole log, including the turns of the session just lost.
    let sent = user_messages_sent_with(&r.sim, "k6: after the corruption");
    assert_eq!(sent.len(), 1, "{sent:?}");
    for earlier in [
        "k1: before the kill",
        "k4: after the delete",
        "k5: in the new session",
    ] {
        assert!(sent[0].contains(earlier), "{earlier} in {}", sent[0]);
    }
    eprintln!("relaunch and reseeds: {:?}", report.session_events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_come_back_as_the_cli_reports_them() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a53").await;
    r.config.max_retries = Some(2);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("errors")).await.unwrap();
    ok(b.turn(TurnInput::text("e1: fine")).await);

    // 529 ×3: the CLI gives up after 3 attempts (2 retries).
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Overloaded,
        times: 3,
    }]);
    let err = b.turn(TurnInput::text("e2: overloaded")).await.unwrap_err();
    let BackendError::Api {
        status, retryable, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((*status, *retryable), (529, true));
    let retries = &b.last_report().unwrap().retries;
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(retries.iter().all(|r| r.status == Some(529)));

    // 500 ×2 then success: two RetryEvents on a good outcome.
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::ServerError,
        times: 2,
    }]);
    let o = ok(b.turn(TurnInput::text("e3: flaky")).await);
    assert_eq!(o.retries.len(), 2, "{:?}", o.retries);
    assert!(o.retries.iter().all(|r| r.status == Some(500)));
    assert_eq!(o.retries[0].attempt, 1);

    // 500 past the budget of 2 retries: a final failure.
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::ServerError,
        times: 3,
    }]);
    let err = b.turn(TurnInput::text("e4: down")).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Api { status: 500, .. }),
        "{err:?}"
    );
    assert_eq!(b.last_report().unwrap().retries.len(), 2);

    // The process stays usable.
    let pid = b.last_report().unwrap().pid;
    ok(b.turn(TurnInput::text("e5: recovered")).await);
    assert_eq!(b.last_report().unwrap().pid, pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_session_returns_structured_output() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a54").await;
    let schema = json!({
        "type": "object",
        "properties": {"mood": {"type": "string"}, "energy": {"type": "integer"}},
        "required": ["mood", "energy"],
    });
    let mut s = spec("persona");
    s.output_schema = Some(schema.clone());
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(s).await.unwrap();
    let o = ok(b.turn(TurnInput::text("How is the persona today?")).await);
    let v = o.structured.expect("structured output");
    muninn_backend::schema::validate(&schema, &v).unwrap();
    let o = ok(b.turn(TurnInput::text("And now?")).await);
    assert!(o.structured.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_a_slow_turn_and_keeps_the_process() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a55").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("interrupt")).await.unwrap();
    ok(b.turn(TurnInput::text("i1: warm up")).await);
    let pid = b.last_report().unwrap().pid;
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 0,
            event_ms: 1_000,
        },
        times: 1,
    }]);
    let interrupter = b.interrupter();
    let started = std::time::Instant::now();
    let (o, _) = tokio::join!(b.turn(TurnInput::text("i2: a slow one")), async {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert!(interrupter.interrupt().await);
    });
    let o = ok(o);
    assert_eq!(o.stop_reason, "interrupted");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let o = ok(b.turn(TurnInput::text("i3: after the interrupt")).await);
    assert_eq!(o.stop_reason, "end_turn");
    assert_eq!(b.last_report().unwrap().pid, pid, "the same process");
}

struct Harness {
    bin: PathBuf,
    base_url: String,
    dir: tempfile::TempDir,
    sessions: std::sync::atomic::AtomicU32,
}

impl muninn_testkit::SuiteHarness for Harness {
    type B = ClaudeCliBackend;

    async fn backend(&self) -> ClaudeCliBackend {
        let n = self
            .sessions
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ClaudeCliBackend::new(CliConfig::new(
            &self.bin,
            self.dir.path(),
            &self.base_url,
            Secret::new("sk-test-cli"),
            format!("5017e000-0000-4000-8000-{n:012x}"),
        ))
    }

    fn model(&self) -> String {
        // The CLI's default model (what it sends when not told otherwise).
        String::new()
    }

    fn nonce(&self) -> String {
        "claude-cli-suite".to_string()
    }

    async fn advance_clock(&self, _ms: u64) -> bool {
        // The CLI runs on the wall clock; the TTL case is skipped.
        false
    }
}

/// The behaviour suite: `tool_round_trip` is skipped by design — the backend runs the CLI with
/// `--tools=` and says at `start` that it cannot offer custom tools (offering muninn's tools
/// would need an MCP bridge); nor can it ping. The test pins exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_suite_passes_without_custom_tools_and_pings() {
    let Some(bin) = claude_cli() else { return };
    let sim = sim().await;
    let h = Harness {
        bin,
        base_url: sim.base_url(),
        dir: tempfile::tempdir().unwrap(),
        sessions: std::sync::atomic::AtomicU32::new(0),
    };
    let report = muninn_testkit::run_backend_suite(&h).await.unwrap();
    assert_eq!(
        report.passed,
        vec!["append_reads_grow", "structured_output", "capabilities"]
    );
    assert_eq!(report.skipped, vec!["tool_round_trip", "ttl_expiry"]);
    assert_eq!(
        report.unsupported,
        vec![Capability::Ping, Capability::PingHead]
    );
}

/// The caller's transcript items, in the bytes a handle is minted over.
fn items(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(u, a)| [format!("user:{u}"), format!("assistant:{a}")])
        .collect()
}

/// The user messages of the last request whose last user message carries `text` (the CLI also
/// sends a `system` message of its own, which is left out).
fn user_messages_sent_with(sim: &SimHandle, text: &str) -> Vec<String> {
    let body = sim
        .sim
        .requests()
        .into_iter()
        .rev()
        .filter(|r| r.path == "/v1/messages")
        .find(|r| last_user(&r.body).contains(text))
        .unwrap_or_else(|| panic!("no request for {text:?}"))
        .body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == json!("user"))
        .map(|m| m["content"].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_only_through_a_handle_that_verifies() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.binding_key = Some(BindingKey::new(&[7u8; 32]).unwrap());

    // A first start: two turns, then the handle over the transcript so far.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("bind")).await.unwrap();
    let a1 = ok(b.turn(TurnInput::text("bind one")).await).text;
    let a2 = ok(b.turn(TurnInput::text("bind two")).await).text;
    let transcript = items(&[("bind one", &a1), ("bind two", &a2)]);
    let handle = b.mint_handle(&transcript).unwrap();
    assert_eq!(handle.session_id, r.config.session_id);
    b.shutdown().await;

    // It verifies: the session is resumed, with its history and a warm cache.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.resume_with(handle.clone(), &transcript);
    b.start(spec("bind")).await.unwrap();
    let o = ok(b.turn(TurnInput::text("bind three")).await);
    let report = b.last_report().unwrap();
    assert_eq!(report.session_events, vec![]);
    assert_eq!(report.session_id, r.config.session_id);
    // The history went with it.
    let sent = user_messages_sent_with(&r.sim, "bind three");
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent[0].contains("bind one") && sent[1].contains("bind two"));
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    let a3 = o.text;
    let transcript = items(&[("bind one", &a1), ("bind two", &a2), ("bind three", &a3)]);
    let handle = b.mint_handle(&transcript).unwrap();
    b.shutdown().await;

    // An item changed (the caller's transcript diverged): a fresh session, and it says so.
    let mut edited = transcript.clone();
    edited[1] = "assistant:something else".to_string();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.resume_with(handle.clone(), &edited);
    b.start(spec("bind")).await.unwrap();
    ok(b.turn(TurnInput::text("bind four")).await);
    let report = b.last_report().unwrap().clone();
    let [
        SessionEvent::Reseeded {
            old_session_id,
            new_session_id,
            reason,
            ..
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(old_session_id, &r.config.session_id);
    assert_eq!(new_session_id, &report.session_id);
    assert_ne!(new_session_id, &r.config.session_id);
    assert!(reason.contains("did not verify"), "{reason}");
    assert_eq!(user_messages_sent_with(&r.sim, "bind four").len(), 1);
    b.shutdown().await;

    // The instructions changed: the same transcript no longer vouches for the session.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.resume_with(handle.clone(), &transcript);
    b.start(spec("bind, new doctrine")).await.unwrap();
    ok(b.turn(TurnInput::text("bind five")).await);
    let report = b.last_report().unwrap();
    assert!(
        matches!(report.session_events.as_slice(), [SessionEvent::Reseeded { reason, .. }] if reason.contains("did not verify")),
        "{:?}",
        report.session_events
    );
    assert_eq!(user_messages_sent_with(&r.sim, "bind five").len(), 1);
    b.shutdown().await;

    // No handle at all: a fresh session by the caller's choice (a new segment) — a new id, not
    // the one on disk, none of its history, and no reseed event: nothing was lost.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("bind")).await.unwrap();
    ok(b.turn(TurnInput::text("bind six")).await);
    let report = b.last_report().unwrap();
    assert!(
        report.session_events.is_empty(),
        "{:?}",
        report.session_events
    );
    assert_ne!(report.session_id, r.config.session_id);
    assert_eq!(user_messages_sent_with(&r.sim, "bind six").len(), 1);
    b.shutdown().await;
}

/// A pool clock the test moves by hand (seconds from a base), so least-recently-used order
/// and idle times are exact whatever the machine's speed.
fn test_clock() -> (
    muninn_claude_cli::pool::Clock,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let base = std::time::Instant::now();
    let secs = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = secs.clone();
    let clock = std::sync::Arc::new(move || {
        base + Duration::from_secs(read.load(std::sync::atomic::Ordering::SeqCst))
    });
    (clock, secs)
}

fn live_keys(pool: &SharedPool) -> Vec<String> {
    pool.live().into_iter().map(|s| s.key).collect()
}

/// The pool's live keys once they are `expected`: a park the pool asked for completes in the
/// parked session's own driver task, which a loaded machine may run a moment later (the
/// session shows as parking until then).
async fn live_keys_settle(pool: &SharedPool, expected: &[&str]) -> Vec<String> {
    for _ in 0..500 {
        let live = live_keys(pool);
        if live == expected {
            return live;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    live_keys(pool)
}

/// A backend of `r`'s sim under session `id`, in `pool` as `key`.
fn pooled(r: &Rig, pool: &SharedPool, key: &str, id: &str) -> ClaudeCliBackend {
    let mut b = ClaudeCliBackend::new(CliConfig {
        session_id: id.to_string(),
        ..r.config.clone()
    });
    b.join_pool(pool.clone(), key);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_two_parks_the_idle_session_and_resumes_it_with_its_history() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let (clock, secs) = test_clock();
    let set = |s: u64| secs.store(s, std::sync::atomic::Ordering::SeqCst);
    let pool = SharedPool::with_clock(
        PoolConfig {
            max_processes: 2,
            ..PoolConfig::default()
        },
        clock,
    );
    let ids = [
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a",
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b",
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5c",
    ];
    // Each backend is owned here, not by the pool, as each Mind's runner owns its own.
    let mut a = pooled(&r, &pool, "a", ids[0]);
    let mut b = pooled(&r, &pool, "b", ids[1]);
    let mut c = pooled(&r, &pool, "c", ids[2]);
    let mut pids = Vec::new();
    for (i, (key, backend)) in [("a", &mut a), ("b", &mut b), ("c", &mut c)]
        .into_iter()
        .enumerate()
    {
        set(10 * i as u64);
        backend.start(spec(key)).await.unwrap();
        pids.push(backend.child_pid().await.unwrap());
        set(10 * i as u64 + 1);
        let o = ok(backend
            .turn(TurnInput::text(format!("pool {key} one")))
            .await);
        assert!(o.text.contains(&format!("pool {key} one")));
    }
    // Starting c needed a second slot: a, least recently used, was parked and its child ended.
    for s in pool.live() {
        eprintln!(
            "FIGURE live session {} pid {:?}: {:.0} MiB resident",
            s.key, s.pid, s.rss_mib
        );
    }
    assert_eq!(live_keys_settle(&pool, &["b", "c"]).await, ["b", "c"]);
    wait_dead(pids[0]).await;
    assert!(
        matches!(
            pool.events().as_slice(),
            [PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, event: SessionEvent::Parked { pid, .. } }]
                if key == "a" && *pid == pids[0]
        ),
        "{:?}",
        pool.events()
    );

    // a's next turn resumes it (parking b, now the least recently used), history intact.
    set(40);
    let resumed_at = std::time::Instant::now();
    let o = ok(a.turn(TurnInput::text("pool a two")).await);
    let resumed_turn = resumed_at.elapsed();
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    let sent = user_messages_sent_with(&r.sim, "pool a two");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[0].contains("pool a one"));
    let report = a.last_report().unwrap();
    assert!(
        matches!(
            report.session_events.as_slice(),
            [SessionEvent::Parked { .. }, SessionEvent::Unparked { session_id }] if session_id == ids[0]
        ),
        "{:?}",
        report.session_events
    );
    let events = pool.events();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        matches!(&events[1], PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, .. } if key == "b")
    );
    assert_eq!(
        events[2],
        PoolEvent::Resumed {
            key: "a".into(),
            session_id: ids[0].into()
        }
    );
    wait_dead(pids[1]).await;
    assert_eq!(live_keys_settle(&pool, &["a", "c"]).await, ["a", "c"]);

    // An idle sweep: c has been idle 20 s with no gaps to go by (a coin flip over the horizon,
    // so parked); a spoke a second ago.
    set(41);
    let swept = pool.sweep(pool.now()).await;
    assert_eq!(live_keys(&pool), ["a"], "{:?}", pool.events());
    assert!(
        matches!(swept.as_slice(), [PoolEvent::Parked { key, reason: ParkReason::Idle(_), .. }] if key == "c"),
        "{swept:?}"
    );
    assert_eq!(pool.events().last(), swept.last());
    // A warm turn on the live child, for comparison with the resumed one.
    set(42);
    let warm_at = std::time::Instant::now();
    ok(a.turn(TurnInput::text("pool a three")).await);
    eprintln!(
        "FIGURE turn on a parked session (resume): {resumed_turn:?}; on a live one: {:?}",
        warm_at.elapsed()
    );
    assert_eq!(pool.take_events().len(), 4);
    assert_eq!(pool.events(), []);
    for backend in [&mut a, &mut b, &mut c] {
        backend.shutdown().await;
    }
    assert_eq!(live_keys(&pool), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_parks_the_least_recently_used_session() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    // Room for one child (~190 MiB measured) but not for a second at the 300 MiB estimate.
    let pool = SharedPool::new(PoolConfig {
        max_processes: 8,
        memory_budget_mib: 400,
        per_process_mib: 300,
        ..PoolConfig::default()
    });
    let ids = [
        "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a",
        "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b",
    ];
    // Two Minds, each owning its backend in its own task, one after the other.
    let mut owners = Vec::new();
    for (key, id) in ["a", "b"].into_iter().zip(ids) {
        let mut backend = pooled(&r, &pool, key, id);
        let task = tokio::spawn(async move {
            backend.start(spec(key)).await.unwrap();
            ok(backend.turn(TurnInput::text(format!("mem {key}"))).await);
            backend
        });
        owners.push(task.await.unwrap());
    }
    assert_eq!(live_keys(&pool), ["b"]);
    assert!(
        matches!(
            pool.events().as_slice(),
            [PoolEvent::Parked { key, reason: ParkReason::MemoryBudget, .. }] if key == "a"
        ),
        "{:?}",
        pool.events()
    );
    for mut backend in owners {
        backend.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_a_turn_is_never_parked_to_make_room() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "e1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let pool = SharedPool::new(PoolConfig {
        max_processes: 1,
        ..PoolConfig::default()
    });
    let mut a = pooled(&r, &pool, "a", "e1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a");
    let mut b = pooled(&r, &pool, "b", "e1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b");
    a.start(spec("a")).await.unwrap();
    ok(a.turn(TurnInput::text("busy a one")).await);
    let pid = a.last_report().unwrap().pid;
    assert!(pid.is_some());
    // a's next request streams slowly; its owner runs it in its own task.
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 0,
            event_ms: 300,
        },
        times: 1,
    }]);
    let a_task = tokio::spawn(async move {
        let o = a.turn(TurnInput::text("busy a two")).await;
        (a, o, std::time::Instant::now())
    });
    // Wait until a's request reached the API: a is mid-turn from here on.
    while !r
        .sim
        .sim
        .requests()
        .iter()
        .any(|q| q.path == "/v1/messages" && q.body.to_string().contains("busy a two"))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        pool.live().iter().map(|s| s.in_turn).collect::<Vec<_>>(),
        [true]
    );
    // b needs the one slot; the only live session is in a turn, so b waits for it to end.
    b.start(spec("b")).await.unwrap();
    let b_started = std::time::Instant::now();
    let (mut a, o, a_ended) = a_task.await.unwrap();
    let o = ok(o);
    assert!(o.text.contains("busy a two"), "{}", o.text);
    assert!(a_ended <= b_started, "b started before a's turn ended");
    let report = a.last_report().unwrap();
    assert_eq!(report.pid, pid, "a's turn ran to its end in the same child");
    assert_eq!(report.session_events, vec![]);
    // Then a, idle, was parked for b.
    assert!(
        matches!(
            pool.events().as_slice(),
            [PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, event: SessionEvent::Parked { pid: p, .. } }]
                if key == "a" && Some(*p) == pid
        ),
        "{:?}",
        pool.events()
    );
    assert_eq!(live_keys(&pool), ["b"]);
    a.shutdown().await;
    b.shutdown().await;
}

/// The processes of one rig: every live process whose environment carries its data directory
/// (a check independent of the pool's own bookkeeping; a zombie's environment is empty).
fn rig_processes(dir: &std::path::Path) -> usize {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&needle))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_under_a_budget_of_one_process_take_turns() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let pool = SharedPool::new(PoolConfig {
        max_processes: 1,
        ..PoolConfig::default()
    });
    // Counts this rig's CLI children while the Minds run.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = {
        let done = done.clone();
        let dir = r.dir.path().to_path_buf();
        tokio::spawn(async move {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                most = most.max(rig_processes(&dir));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            most
        })
    };
    let keys = ["x", "y", "z"];
    let tasks: Vec<_> = keys
        .into_iter()
        .enumerate()
        .map(|(i, key)| {
            let mut b = pooled(
                &r,
                &pool,
                key,
                &format!("f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a6{i}"),
            );
            tokio::spawn(async move {
                b.start(spec(key)).await.unwrap();
                for n in 1..=3 {
                    let text = format!("serial {key} {n}");
                    let o = ok(b.turn(TurnInput::text(&text)).await);
                    assert!(o.text.contains(&text), "{}", o.text);
                }
                b
            })
        })
        .collect();
    // A deadlock would hang here: bound it generously (a dozen launches on a loaded machine).
    let all = tokio::time::timeout(Duration::from_secs(240), async {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    })
    .await
    .expect("the Minds deadlocked under a budget of one process");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let most = monitor.await.unwrap();
    assert_eq!(
        most, 1,
        "at most one CLI child at any time, and one did run"
    );
    for key in keys {
        // Every Mind's last turn carried its whole history, whatever parking went on between.
        let sent = user_messages_sent_with(&r.sim, &format!("serial {key} 3"));
        assert_eq!(sent.len(), 3, "{key}: {sent:?}");
        assert!(sent[0].contains(&format!("serial {key} 1")));
    }
    let events = pool.events();
    let parks = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                PoolEvent::Parked {
                    reason: ParkReason::ProcessBudget,
                    ..
                }
            )
        })
        .count();
    let resumes = events
        .iter()
        .filter(|e| matches!(e, PoolEvent::Resumed { .. }))
        .count();
    eprintln!("FIGURE budget of 1, 3 Minds x 3 turns: {parks} parks, {resumes} resumes");
    // Three Minds shared one slot: at least two had to give it up, and since a live Mind does
    // not jump the line, the first gave it up before its second turn and resumed later.
    assert!(parks >= 2 && resumes >= 1, "{events:?}");
    assert!(live_keys(&pool).len() <= 1);
    for mut b in all {
        b.shutdown().await;
    }
}

fn bytes(items: &[String]) -> Vec<Vec<u8>> {
    items.iter().map(|i| i.as_bytes().to_vec()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_resume_continues_a_copy_and_leaves_the_original_untouched() {
    let Some(bin) = claude_cli() else { return };
    let session = "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a51";
    let mut r = rig(bin, session).await;
    r.config.binding_key = Some(BindingKey::new(&[9u8; 32]).unwrap());

    // The first writer: two turns, a handle, and it stays alive (it may still be running when a
    // lease is taken over).
    let mut first = ClaudeCliBackend::new(r.config.clone());
    first.start(spec("fork")).await.unwrap();
    let a1 = ok(first.turn(TurnInput::text("fork one")).await).text;
    let a2 = ok(first.turn(TurnInput::text("fork two")).await).text;
    let transcript = bytes(&items(&[("fork one", &a1), ("fork two", &a2)]));
    let handle = first.session_handle(&transcript).unwrap();
    let original = transcript_path(&r.config, session).unwrap();
    let before = std::fs::read(&original).unwrap();

    // The second writer forks it.
    let mut fork = ClaudeCliBackend::new(r.config.clone());
    assert!(fork.resume_session(&handle, &transcript, true));
    fork.start(spec("fork")).await.unwrap();
    let o = ok(fork.turn(TurnInput::text("fork three")).await);
    let report = fork.last_report().unwrap().clone();
    let [SessionEvent::Forked { from, to }] = report.session_events.as_slice() else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(from, session);
    assert_ne!(to, session);
    assert_eq!(&report.session_id, to);
    assert_eq!(fork.session_id(), to);
    // The host records session events from the queue: the fork is there, once.
    assert_eq!(
        session_events_json(&mut fork),
        vec![json!({"type": "forked", "from": session, "to": to})]
    );
    // The copy's first request carries the whole history, from the cache.
    let sent = user_messages_sent_with(&r.sim, "fork three");
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent[0].contains("fork one") && sent[1].contains("fork two"));
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    // The original file is byte for byte what it was; the copy has its own.
    assert_eq!(std::fs::read(&original).unwrap(), before);
    assert!(transcript_path(&r.config, to).is_some());
    // Handles are minted over the copy from now on.
    let transcript = bytes(&items(&[
        ("fork one", &a1),
        ("fork two", &a2),
        ("fork three", &o.text),
    ]));
    let next = Handle::decode(&fork.session_handle(&transcript).unwrap()).unwrap();
    assert_eq!(&next.session_id, to);
    // Later turns continue the copy, with nothing more to report.
    ok(fork.turn(TurnInput::text("fork four")).await);
    let report = fork.last_report().unwrap();
    assert_eq!(report.session_events, vec![]);
    assert_eq!(&report.session_id, to);
    assert_eq!(std::fs::read(&original).unwrap(), before);

    // A handle that does not verify is seeded as before, fork or not.
    let mut stale = ClaudeCliBackend::new(r.config.clone());
    assert!(stale.resume_session(&handle, &transcript, true));
    stale.start(spec("fork")).await.unwrap();
    ok(stale.turn(TurnInput::text("fork five")).await);
    assert!(
        matches!(
            stale.last_report().unwrap().session_events.as_slice(),
            [SessionEvent::Reseeded { reason, .. }] if reason.contains("did not verify")
        ),
        "{:?}",
        stale.last_report().unwrap().session_events
    );
    for b in [&mut first, &mut fork, &mut stale] {
        b.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_is_seeded_from_the_hosts_seed() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "5eed0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    r.config.binding_key = Some(BindingKey::new(&[5u8; 32]).unwrap());
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("seed")).await.unwrap();
    let a1 = ok(b.turn(TurnInput::text("seed one")).await).text;
    let handle = b
        .session_handle(&bytes(&items(&[("seed one", &a1)])))
        .unwrap();
    b.shutdown().await;

    // The host's transcript no longer matches the handle: the session is refused, and the new
    // one starts from the seed the host rendered.
    let host_seed = "User: seed one\n\nAssistant: (the host's own record of the reply)";
    let mut b = ClaudeCliBackend::new(r.config.clone());
    assert!(b.resume_session(&handle, &bytes(&items(&[("seed one", "edited")])), false));
    b.set_seed(Some(host_seed.to_string()));
    b.start(spec("seed")).await.unwrap();
    ok(b.turn(TurnInput::text("seed two")).await);
    let report = b.last_report().unwrap().clone();
    let [
        SessionEvent::Reseeded {
            reason,
            seed_tokens,
            ..
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert!(reason.contains("did not verify"), "{reason}");
    let sent = user_messages_sent_with(&r.sim, "seed two");
    assert_eq!(sent.len(), 1, "{sent:?}");
    let blocks: Value = serde_json::from_str(&sent[0]).unwrap();
    let seed = blocks[0]["text"].as_str().unwrap();
    assert!(seed.contains(host_seed), "{seed}");
    assert_eq!(*seed_tokens, muninn_core::tokenize::count(seed));
    assert_eq!(blocks[1]["text"], json!("seed two"));
    // Sent once.
    ok(b.turn(TurnInput::text("seed three")).await);
    let sent = user_messages_sent_with(&r.sim, "seed three");
    assert_eq!(sent.len(), 2);
    assert!(!sent[1].contains(host_seed));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_an_error_not_a_success() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b0d9e7c2-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    // One micro-dollar: the first request crosses it.
    r.config.max_budget_micro_usd = Some(1);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("budget")).await.unwrap();
    let err = b.turn(TurnInput::text("budget one")).await.unwrap_err();
    let BackendError::Api {
        kind,
        message,
        retryable,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(kind, "budget_exhausted");
    assert!(!retryable);
    assert!(message.contains("--max-budget-usd"), "{message}");
    // The crossing request ran; the next turn is refused without one.
    let count = || {
        r.sim
            .sim
            .requests()
            .iter()
            .filter(|q| q.path == "/v1/messages")
            .count()
    };
    assert_eq!(count(), 1);
    let err = b.turn(TurnInput::text("budget two")).await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Api { kind, .. } if kind == "budget_exhausted"),
        "{err:?}"
    );
    assert_eq!(count(), 1);
}

/// The session's cumulative `total_cost_usd` after the last exchange, micro-dollars.
fn total_micros(b: &ClaudeCliBackend) -> u64 {
    let total = b.last_report().unwrap().result.as_ref().unwrap()["total_cost_usd"]
        .as_f64()
        .unwrap();
    (total * 1e6).round() as u64
}

/// The `--max-budget-usd` argument of a live child, from `/proc/<pid>/cmdline`.
fn budget_arg(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--max-budget-usd")?;
    args.get(at + 1).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_budget_is_whole_for_every_run() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b0d9e7c2-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.tools = vec!["Read".to_string()];
    let plain = protocol(10_000_000);

    // What one run costs on a warm, resumed session (the CLI's own pricing of the sim's usage):
    // the first request of a resumed child rewrites a little of the cache, so it costs more
    // than a turn in a running process, and it is what every budgeted run after the first is.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("run budget")).await.unwrap();
    ok(b.turn(TurnInput::text("budget warm")).await);
    let warm = total_micros(&b);
    b.shutdown().await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("run budget")).await.unwrap();
    ok(b.turn(TurnInput::text("budget measure")).await);
    let resumed_run = total_micros(&b) - warm;
    let before = total_micros(&b);
    ok(b.turn(TurnInput::text("budget measure two")).await);
    let live_run = total_micros(&b) - before;
    b.shutdown().await;
    eprintln!("FIGURE run cost: resumed child {resumed_run} µ$, live child {live_run} µ$");
    // One run fits; two in one process do not.
    let budget = resumed_run * 3 / 2;
    assert!(resumed_run + live_run > budget, "{resumed_run} {live_run}");

    // Control: the same budget per process (today's `--max-budget-usd`) is spent by the
    // second run.
    let mut per_process = r.config.clone();
    per_process.max_budget_micro_usd = Some(budget);
    let mut b = ClaudeCliBackend::new(per_process);
    b.start(spec("run budget")).await.unwrap();
    b.run(TurnInput::text("budget control one"), &plain)
        .await
        .unwrap();
    let err = b
        .run(TurnInput::text("budget control two"), &plain)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Api { kind, .. } if kind == "budget_exhausted"),
        "{err:?}"
    );
    b.shutdown().await;

    // Per run: three runs in a row, each under the whole budget.
    let mut per_run = r.config.clone();
    per_run.run_budget_micro_usd = Some(budget);
    let mut b = ClaudeCliBackend::new(per_run.clone());
    b.start(spec("run budget")).await.unwrap();
    let expected_arg = format!("{}.{:06}", budget / 1_000_000, budget % 1_000_000);
    let mut pids = Vec::new();
    for n in 0..3 {
        let pid = b.child_pid().await.unwrap();
        assert_eq!(budget_arg(pid).as_deref(), Some(expected_arg.as_str()));
        let before = total_micros_or_zero(&b);
        let run = b
            .run(TurnInput::text(format!("budget run {n}")), &plain)
            .await
            .unwrap_or_else(|e| panic!("run {n} failed: {e}"));
        assert!(run.outcome.text.contains(&format!("budget run {n}")));
        let report = b.last_report().unwrap();
        // The first run uses the child launched at start; later ones a fresh one, planned, so
        // not reported as a relaunch.
        assert_eq!(report.budget_relaunch, n > 0);
        eprintln!("FIGURE run {n}: to_write {:?}", report.to_write);
        assert!(
            report.session_events.is_empty(),
            "{:?}",
            report.session_events
        );
        assert_eq!(report.session_id, r.config.session_id);
        if n > 0 {
            let spent = total_micros(&b) - before;
            assert!(spent <= budget, "{spent} > {budget}");
        }
        pids.push(report.pid.unwrap());
    }
    pids.dedup();
    assert_eq!(pids.len(), 3, "a child per run: {pids:?}");
    // The relaunched children continued the one session: the last run saw the first.
    let sent = user_messages_sent_with(&r.sim, "budget run 2");
    assert!(sent.iter().any(|m| m.contains("budget run 0")), "{sent:?}");

    // A run that alone costs more than its budget (a tool loop) ends with the budget error,
    // after the request that crossed it; the next run has a whole budget.
    let requests = messages_from(&r.sim, 0).len();
    let err = b
        .run(
            TurnInput::text("budget: use Read to look around [sim: tool rounds 6]"),
            &plain,
        )
        .await
        .unwrap_err();
    let BackendError::Api {
        kind,
        message,
        retryable,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(kind, "budget_exhausted");
    assert!(!retryable);
    assert!(message.contains("the run's budget"), "{message}");
    let loop_requests = messages_from(&r.sim, requests).len();
    // A tool call's reply costs more than a plain one (its output is priced 100 times a cached
    // read), so here the loop's first request already crosses it: the loop of 7 stops there.
    assert_eq!(loop_requests, 1);
    // The next run is not refused (a spent per-process budget refuses without a request):
    // it sends its request under a whole budget. Its outcome is not asserted: it re-caches the
    // tool call the spent run left behind, which costs about as much as the budget.
    let n0 = messages_from(&r.sim, 0).len();
    let _ = b
        .run(TurnInput::text("budget after the spent run"), &plain)
        .await;
    assert!(b.last_report().unwrap().budget_relaunch);
    assert_eq!(messages_from(&r.sim, n0).len(), 1);
    let run = b
        .run(TurnInput::text("budget after, again"), &plain)
        .await
        .unwrap();
    assert!(run.outcome.text.contains("budget after, again"));
    assert!(b.last_report().unwrap().budget_relaunch);
    b.shutdown().await;

    // The two budgets cannot be combined.
    let mut both = per_run;
    both.max_budget_micro_usd = Some(budget);
    let err = ClaudeCliBackend::new(both)
        .start(spec("run budget"))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err:?}");
}

/// [`total_micros`], or 0 before the backend's first exchange.
fn total_micros_or_zero(b: &ClaudeCliBackend) -> u64 {
    match b.last_report() {
        Some(_) => total_micros(b),
        None => 0,
    }
}

const FLUSH_MESSAGE: &str = "MUNINN FLUSH: write your memory now and stop";

fn protocol(ceiling_tokens: u64) -> FlushProtocol {
    FlushProtocol {
        ceiling_tokens,
        headroom_tokens: 0,
        message: FLUSH_MESSAGE.to_string(),
        grace: Duration::from_secs(30),
        escalate_after: Duration::from_secs(30),
        exit_drain: Duration::from_secs(5),
    }
}

/// The messages requests recorded from index `from` on.
fn messages_from(sim: &SimHandle, from: usize) -> Vec<RecordedRequest> {
    sim.sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .skip(from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_below_the_trigger_needs_no_flush_and_a_long_tool_loop_is_flushed() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "f1a5b000-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    r.config.tools = vec!["Read".to_string()];
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("flush")).await.unwrap();

    // (a) Far below the ceiling: a plain turn.
    let a = b
        .run(TurnInput::text("flush a: hello"), &protocol(10_000_000))
        .await
        .unwrap();
    assert_eq!(a.flush, FlushStage::NotNeeded);
    assert!(a.outcome.text.contains("flush a: hello"));
    let pid = b.last_report().unwrap().pid;

    // (b) A tool loop of up to 8 rounds; each round adds a tool call and its result (about 240
    // tokens with the sim's Read input), so a trigger 150 tokens above the last prompt is
    // crossed by the loop's second request, not its first.
    let trigger = a.outcome.usage.prompt() + 150;
    let before = messages_from(&r.sim, 0).len();
    let run = b
        .run(
            TurnInput::text("use Read to look around [sim: tool rounds 8]"),
            &protocol(trigger),
        )
        .await
        .unwrap();
    assert_eq!(run.flush, FlushStage::Flushed, "{:?}", run.outcome);
    assert!(
        run.outcome.text.contains(FLUSH_MESSAGE),
        "{}",
        run.outcome.text
    );
    let requests = messages_from(&r.sim, before);
    let prompts: Vec<u64> = requests.iter().map(|q| q.usage.unwrap().prompt()).collect();
    eprintln!("FIGURE flush run: trigger {trigger}, request prompts {prompts:?}");
    assert!(prompts[0] < trigger, "{prompts:?}");
    // The flush reached the sim inside the loop: beside a tool result, in a request after the
    // one that crossed the trigger, and it ended the loop before its 8 rounds.
    let flushed_at = requests
        .iter()
        .position(|q| {
            let last = last_user(&q.body);
            last.contains(FLUSH_MESSAGE) && last.contains("tool_result")
        })
        .unwrap_or_else(|| panic!("no request carried the flush inside the loop"));
    assert!(flushed_at >= 2, "{flushed_at}");
    assert!(prompts[flushed_at - 1] >= trigger, "{prompts:?}");
    assert_eq!(
        flushed_at,
        requests.len() - 1,
        "the flush answer ended the run"
    );
    assert!(requests.len() < 9, "{}", requests.len());
    // The run's usage is the sum over its requests.
    let summed = requests
        .iter()
        .fold(muninn_core::trace::Usage::default(), |mut u, q| {
            u.add(&q.usage.unwrap());
            u
        });
    assert_eq!(run.outcome.usage, summed);

    // The process carries on.
    ok(b.turn(TurnInput::text("flush c: after")).await);
    assert_eq!(b.last_report().unwrap().pid, pid);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_flush_is_interrupted_after_its_grace_and_terminated_when_told() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "f1a5b000-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.tools = vec!["Read".to_string()];
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("slow flush")).await.unwrap();
    ok(b.turn(TurnInput::text("slow warm")).await);
    let pid = b.last_report().unwrap().pid;

    // The loop's first request crosses a trigger of 1 token, so the flush is asked at once;
    // the next request streams one event a second, far past a 1 s grace.
    let slow = || {
        [
            Fault {
                kind: FaultKind::Slow {
                    first_byte_ms: 0,
                    event_ms: 0,
                },
                times: 1,
            },
            Fault {
                kind: FaultKind::Slow {
                    first_byte_ms: 0,
                    event_ms: 1_000,
                },
                times: 1,
            },
        ]
    };
    r.sim.sim.push_faults(slow());
    let short = FlushProtocol {
        grace: Duration::from_secs(1),
        ..protocol(1)
    };
    let started = std::time::Instant::now();
    let run = b
        .run(
            TurnInput::text("use Read to look [sim: tool rounds 3]"),
            &short,
        )
        .await
        .unwrap();
    eprintln!("FIGURE interrupted flush run took {:?}", started.elapsed());
    assert_eq!(run.flush, FlushStage::Interrupted, "{:?}", run.outcome);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // The process stays usable.
    ok(b.turn(TurnInput::text("slow after the interrupt")).await);
    assert_eq!(b.last_report().unwrap().pid, pid, "the same process");

    // No time to wait after the interrupt: the child is terminated, and the next turn
    // relaunches it with `--resume`, the history intact.
    r.sim.sim.clear_faults();
    r.sim.sim.push_faults(slow());
    let hasty = FlushProtocol {
        grace: Duration::from_secs(1),
        escalate_after: Duration::ZERO,
        ..protocol(1)
    };
    let run = b
        .run(
            TurnInput::text("use Read to peek [sim: tool rounds 3]"),
            &hasty,
        )
        .await
        .unwrap();
    assert_eq!(run.flush, FlushStage::Terminated, "{:?}", run.outcome);
    if let Some(pid) = pid {
        wait_dead(pid).await;
    }
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("slow after the termination")).await);
    let report = b.last_report().unwrap();
    assert!(
        matches!(report.session_events.as_slice(), [SessionEvent::Relaunched { session_id }] if session_id == &r.config.session_id),
        "{:?}",
        report.session_events
    );
    assert_ne!(report.pid, pid);
    let sent = user_messages_sent_with(&r.sim, "slow after the termination");
    assert!(sent.iter().any(|m| m.contains("slow warm")), "{sent:?}");
    b.shutdown().await;
}

mod compaction;
mod credentials;
mod fuzz;
mod interactions;

/// The system prompt reaches the CLI through a file only this user can read, not argv: a
/// doctrine over Linux's 128 KiB argument limit starts a session (on argv the launch failed with
/// E2BIG), the model is given it whole, and no other local user can read it from the child's
/// `/proc/<pid>/cmdline`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doctrine_over_the_argument_limit_goes_through_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "5a7c0e2f-5b4d-4e6f-8a9b-0c1d2e3f4a53").await;
    let doctrine = format!(
        "DOCTRINE-MARKER. {}",
        (0..6_000)
            .map(|i| format!("Rule {i}: keep the cache warm."))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(doctrine.len() > 150 * 1024, "{}", doctrine.len());
    let mut b = ClaudeCliBackend::new(r.config.clone());
    let mut big = spec("big");
    big.system[0] = doctrine.clone();
    b.start(big).await.unwrap();
    ok(b.turn(TurnInput::text("big one")).await);
    let sent = r.sim.sim.requests().last().unwrap().body.to_string();
    assert!(
        sent.contains("Rule 5999: keep the cache warm."),
        "the whole doctrine was sent"
    );
    let pid = b.child_pid().await.unwrap();
    let cmdline = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap())
        .into_owned();
    assert!(!cmdline.contains("DOCTRINE-MARKER"), "{cmdline}");
    let file = r.config.work_dir().join("system-prompt.md");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    b.shutdown().await.unwrap();
}
