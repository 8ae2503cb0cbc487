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
use muninn_testkit::wire::last_user;
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

fn bytes(items: &[String]) -> Vec<Vec<u8>> {
    items.iter().map(|i| i.as_bytes().to_vec()).collect()
}

/// Writes an executable stand-in for the CLI at `dir/claude` running `script` (sh).
pub(crate) async fn stand_in(dir: &std::path::Path, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("claude");
    std::fs::write(&bin, format!("#!/bin/sh\n{script}")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    bin
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

/// Stream-json events a stand-in CLI prints, and the script lines that print them.
pub(crate) mod script {
    use serde_json::{Value, json};

    pub fn init() -> Value {
        json!({"type": "system", "subtype": "init", "session_id": "s"})
    }

    pub fn echo(text: &str) -> Value {
        json!({"type": "user", "isReplay": true, "message": {"role": "user", "content": text}})
    }

    /// A main-thread assistant line: one text block of API message `id`, with the usage the CLI
    /// puts on every block (`message_start`'s: `input` uncached tokens, output 1).
    pub fn said(text: &str, id: &str, input: u64) -> Value {
        json!({"type": "assistant", "message": {"id": id, "model": "m",
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": input, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": 1}},
            "parent_tool_use_id": null, "request_id": format!("req_{id}")})
    }

    /// A successful `result` whose turn billed `input` uncached tokens and one output token.
    pub fn result(text: &str, input: u64) -> Value {
        json!({"type": "result", "subtype": "success", "is_error": false, "result": text,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": 1},
            "model_usage_since_last_result": {"claude-opus-5-5": {"inputTokens": input,
                "outputTokens": 1, "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0,
                "costUSD": 0.5}}})
    }

    /// A main-thread background task's end, after which the CLI starts a turn of its own.
    pub fn notification() -> Value {
        json!({"type": "system", "subtype": "task_notification", "task_id": "t1",
            "status": "completed"})
    }

    /// `sh` lines printing `events`, one stdout line each.
    pub fn printed(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("printf '%s\\n' '{e}'\n"))
            .collect()
    }
}

mod budget;
mod compaction;
mod credentials;
mod faults;
mod flush;
mod fuzz;
mod interactions;
mod pool;
mod resume;
mod turns;
mod unprompted;

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
