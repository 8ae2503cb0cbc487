//! The claude-cli backend against the REAL Claude Code CLI 2.1.332 and `muninn_sim::spawn`.
//!
//! The CLI is found through `MUNINN_CLAUDE_BIN` (default: where `scripts/install-claude-cli.sh`
//! installs it). A missing CLI prints `SKIP` — or fails when `MUNINN_REQUIRE_PEERS=1`.
//!
//! Usage is checked against an independent recomputation of the cache model over the requests
//! the CLI actually sent (the sim's request log), as the sim's own peer test does.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed unwrap is a failed test.

use muninn_anthropic::prompt::shape;
use muninn_anthropic::wire::MessagesRequest;
use muninn_backend::{Backend, BackendError, SessionSpec, TurnInput, TurnOutcome};
use muninn_claude_cli::pool::{ParkReason, PoolConfig, PoolEvent, ProcessPool};
use muninn_claude_cli::{
    BindingKey, ClaudeCliBackend, CliConfig, Secret, SessionEvent, transcript_path, vm_rss_kb,
};
use muninn_core::cache::{CacheRules, CacheState, Ttl};
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use muninn_sim::SimHandle;
use muninn_sim::sim::{Fault, FaultKind, RecordedRequest, SimConfig};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const T0: i64 = 1_796_000_000_000;

fn claude_bin() -> Option<PathBuf> {
    let found = std::env::var("MUNINN_CLAUDE_BIN")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var("HOME").ok()?;
            let p = PathBuf::from(home).join(
                ".cache/muninn/claude-cli/node_modules/@anthropic-ai/claude-code/bin/claude.exe",
            );
            p.exists().then_some(p)
        });
    // Only the pinned version: the driver relies on its observed protocol.
    let pinned = found.filter(|bin| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).starts_with("2.1.332 "))
    });
    if pinned.is_none() {
        if std::env::var("MUNINN_REQUIRE_PEERS").as_deref() == Ok("1") {
            panic!(
                "MUNINN_REQUIRE_PEERS=1 but Claude Code CLI 2.1.332 is missing (set MUNINN_CLAUDE_BIN)"
            );
        }
        eprintln!(
            "SKIP: Claude Code CLI 2.1.332 not found (run scripts/install-claude-cli.sh, or set MUNINN_CLAUDE_BIN)"
        );
    }
    pinned
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_turns_in_one_process_report_the_cache_models_usage() {
    let Some(bin) = claude_bin() else { return };
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
    let Some(bin) = claude_bin() else { return };
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
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(old_session_id, session);
    assert_ne!(new_session_id, session);
    assert_eq!(&report.session_id, new_session_id);
    assert!(reason.contains("missing"), "{reason}");
    let last = r.sim.sim.requests().last().unwrap().body.to_string();
    assert!(!last.contains("k1: before the kill"), "a fresh session");
    ok(b.turn(TurnInput::text("k5: in the new session")).await);

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
                ..
            },
        ] => {
            assert_eq!(old_session_id, &second);
            assert!(reason.contains("No conversation found"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_ne!(report.session_id, second);
    eprintln!("relaunch and reseeds: {:?}", report.session_events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_come_back_as_the_cli_reports_them() {
    let Some(bin) = claude_bin() else { return };
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
    let Some(bin) = claude_bin() else { return };
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
    let Some(bin) = claude_bin() else { return };
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

impl muninn_backend::suite::SuiteHarness for Harness {
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

/// The behaviour suite: `append_reads_grow` passes; `tool_round_trip` cannot, by design — the
/// backend runs the CLI with `--tools=` and refuses custom tools at `start` (offering muninn's
/// tools would need an MCP bridge). The test pins exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_suite_passes_up_to_custom_tools() {
    let Some(bin) = claude_bin() else { return };
    let sim = sim().await;
    let h = Harness {
        bin,
        base_url: sim.base_url(),
        dir: tempfile::tempdir().unwrap(),
        sessions: std::sync::atomic::AtomicU32::new(0),
    };
    let failure = muninn_backend::suite::run_backend_suite(&h)
        .await
        .unwrap_err();
    assert_eq!(failure.case, "tool_round_trip", "{failure}");
    assert!(
        failure.message.contains("cannot offer custom tools"),
        "{failure}"
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
    let Some(bin) = claude_bin() else { return };
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

    // No handle at all for a session on disk: not resumed either.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("bind")).await.unwrap();
    ok(b.turn(TurnInput::text("bind six")).await);
    assert!(matches!(
        b.last_report().unwrap().session_events.as_slice(),
        [SessionEvent::Reseeded { .. }]
    ));
    assert_eq!(user_messages_sent_with(&r.sim, "bind six").len(), 1);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_two_parks_the_idle_session_and_resumes_it_with_its_history() {
    let Some(bin) = claude_bin() else { return };
    let r = rig(bin, "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let mut pool = ProcessPool::new(PoolConfig {
        max_processes: 2,
        ..PoolConfig::default()
    });
    let t0 = std::time::Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let ids = [
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a",
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b",
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5c",
    ];
    let mut pids = Vec::new();
    for (i, (key, id)) in ["a", "b", "c"].into_iter().zip(ids).enumerate() {
        let config = CliConfig {
            session_id: id.to_string(),
            ..r.config.clone()
        };
        let mut b = ClaudeCliBackend::new(config);
        b.start(spec(key)).await.unwrap();
        pids.push(b.child_pid().await.unwrap());
        pool.insert(key, b, at(10 * i as u64)).await;
        let o = pool
            .turn(
                key,
                TurnInput::text(format!("pool {key} one")),
                at(10 * i as u64 + 1),
            )
            .await
            .unwrap();
        assert!(o.text.contains(&format!("pool {key} one")));
    }
    // Inserting c needed a second slot: a, least recently used, was parked and its child ended.
    let live = pool.live().await;
    for (key, pid, mib) in &live {
        eprintln!("FIGURE live session {key} pid {pid}: {mib:.0} MiB resident");
    }
    let live_keys: Vec<&str> = live.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(live_keys, ["b", "c"]);
    wait_dead(pids[0]).await;
    assert!(
        matches!(
            pool.events(),
            [PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, event: SessionEvent::Parked { pid, .. } }]
                if key == "a" && *pid == pids[0]
        ),
        "{:?}",
        pool.events()
    );

    // a's next turn resumes it (parking b, now the least recently used), history intact.
    let resumed_at = std::time::Instant::now();
    let o = pool
        .turn("a", TurnInput::text("pool a two"), at(40))
        .await
        .unwrap();
    let resumed_turn = resumed_at.elapsed();
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    let sent = user_messages_sent_with(&r.sim, "pool a two");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[0].contains("pool a one"));
    let report = pool.backend("a").unwrap().last_report().unwrap();
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

    // An idle sweep: c has been idle far longer than any gap it had; a just spoke.
    pool.sweep(at(41)).await;
    let live_keys: Vec<String> = pool.live().await.into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(live_keys, ["a"], "{:?}", pool.events());
    assert!(
        matches!(pool.events().last(), Some(PoolEvent::Parked { key, reason: ParkReason::Idle(_), .. }) if key == "c")
    );
    // A warm turn on the live child, for comparison with the resumed one.
    let warm_at = std::time::Instant::now();
    pool.turn("a", TurnInput::text("pool a three"), at(42))
        .await
        .unwrap();
    eprintln!(
        "FIGURE turn on a parked session (resume): {resumed_turn:?}; on a live one: {:?}",
        warm_at.elapsed()
    );
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_parks_the_least_recently_used_session() {
    let Some(bin) = claude_bin() else { return };
    let r = rig(bin, "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    // Room for one child (~190 MiB measured) but not for a second at the 300 MiB estimate.
    let mut pool = ProcessPool::new(PoolConfig {
        max_processes: 8,
        memory_budget_mib: 400,
        per_process_mib: 300,
        ..PoolConfig::default()
    });
    let now = std::time::Instant::now();
    let ids = [
        "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a",
        "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b",
    ];
    for (key, id) in ["a", "b"].into_iter().zip(ids) {
        let mut b = ClaudeCliBackend::new(CliConfig {
            session_id: id.to_string(),
            ..r.config.clone()
        });
        b.start(spec(key)).await.unwrap();
        pool.insert(key, b, now).await;
        pool.turn(key, TurnInput::text(format!("mem {key}")), now)
            .await
            .unwrap();
    }
    let live: Vec<String> = pool.live().await.into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(live, ["b"]);
    assert!(
        matches!(
            pool.events(),
            [PoolEvent::Parked { key, reason: ParkReason::MemoryBudget, .. }] if key == "a"
        ),
        "{:?}",
        pool.events()
    );
    pool.shutdown().await;
}

mod compaction;
mod credentials;
