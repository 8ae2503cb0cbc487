//! `muninn say`, `status`, `brake`, `caps`, `ledger` and `tail` against the host's router served
//! on an ephemeral loopback port with a real SQLite store.

use muninn_api::ApiToken;
use muninn_backend::clock::ManualClock;
use muninn_host::Host;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_store::{Mind, NewOutboxMessage};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

pub(crate) struct Served {
    pub(crate) host: Host,
    addr: String,
    token_file: PathBuf,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub(crate) async fn served() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::demo();
    config.data_dir = dir.path().to_owned();
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    store
        .create_mind(&Mind {
            id: "vala".into(),
            display_name: "Vala".into(),
            config: serde_json::json!({}),
            created_at_ms: 0,
        })
        .await
        .unwrap();
    let host = Host::new(store, config, Arc::new(ManualClock::new(1_750_000_000_000)));
    let token_file = host.config.api_token_path();
    let token = ApiToken::load_or_create(&token_file).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(host.clone(), token, listener, async {
        let _ = stopped.await;
    }));
    Served {
        host,
        addr,
        token_file,
        _dir: dir,
        _stop: stop,
    }
}

impl Served {
    /// The binary with `args`, pointed at this host.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
        command
            .args(args)
            .arg("--addr")
            .arg(&self.addr)
            .arg("--token-file")
            .arg(&self.token_file);
        command
    }

    /// Runs the binary off the runtime's threads, so the server keeps answering.
    pub(crate) async fn muninn(&self, args: &[&str]) -> Output {
        let mut command = self.command(args);
        tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap()
    }
}

pub(crate) fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "muninn failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn say_posts_a_delivery_idempotently() {
    let served = served().await;
    let out = stdout(
        &served
            .muninn(&["say", "vala", "hello there", "--source-id", "s-1"])
            .await,
    );
    assert_eq!(out, "delivered to vala in #swarm: seq 1\n");
    let out = stdout(
        &served
            .muninn(&["say", "vala", "hello there", "--source-id", "s-1"])
            .await,
    );
    assert_eq!(out, "already delivered to vala in #swarm: seq 1\n");
    let out = stdout(
        &served
            .muninn(&[
                "say",
                "vala",
                "psst",
                "--dm",
                "--sender",
                "@ada:example.org",
            ])
            .await,
    );
    assert_eq!(out, "delivered to vala in @ada:example.org: seq 2\n");
    let stored = served
        .host
        .store
        .pending_deliveries("vala", 0, 10)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(
        (
            stored[1].room.as_str(),
            stored[1].is_direct,
            stored[1].text.as_str()
        ),
        ("@ada:example.org", true, "psst")
    );
    assert!(stored[1].source_id.starts_with("cli-"));

    // A wrong token: a clear error on stderr, without the token.
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("token");
    std::fs::write(&wrong, "wrong-token\n").unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
    command.args(["say", "vala", "x", "--addr", &served.addr, "--token-file"]);
    command.arg(&wrong);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unauthorized") && !stderr.contains("wrong-token"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_brake_caps_ledger_and_tail_print_what_the_host_has() {
    let served = served().await;
    let out = stdout(&served.muninn(&["status"]).await);
    assert!(out.contains("vala") && out.contains("brake: off"), "{out}");

    brake_and_caps_are_set_and_shown(&served).await;

    let out = stdout(
        &served
            .muninn(&["ledger", "vala", "--format", "jsonl"])
            .await,
    );
    assert_eq!(out, "");
    let out = stdout(&served.muninn(&["ledger", "vala"]).await);
    assert!(out.contains("0 rows"), "{out}");

    enqueue_a_reply(&served, "b1-0", "well met").await;
    let out = stdout(&served.muninn(&["tail", "vala"]).await);
    assert!(out.contains("outbox b1-0 → #swarm: well met"), "{out}");

    // A send the transport gave up on is listed with when and why.
    served
        .host
        .store
        .fail_outbox(
            "vala",
            "b1-0",
            "M_FORBIDDEN: not in the room",
            1_750_000_000_000,
        )
        .await
        .unwrap();
    let out = stdout(&served.muninn(&["status"]).await);
    assert!(
        out.contains(
            "vala: send b1-0 to #swarm failed at 2025-06-15 15:06:40: M_FORBIDDEN: not in the room"
        ),
        "{out}"
    );
}

/// `brake on` is shown in `status` (then turned off); `caps` sets a spend cap and a turn limit,
/// prints them and stores them.
async fn brake_and_caps_are_set_and_shown(served: &Served) {
    let out = stdout(&served.muninn(&["brake", "on"]).await);
    assert_eq!(out, "brake on for 1 Minds: vala\n");
    let out = stdout(&served.muninn(&["status"]).await);
    assert!(out.contains("brake: on for every Mind"), "{out}");

    // Caps set while braked leave the brake on: `muninn caps` never sends it.
    let out = stdout(
        &served
            .muninn(&[
                "caps",
                "vala",
                "--spend-cap-usd",
                "2.5",
                "--turn-limit",
                "12",
            ])
            .await,
    );
    assert!(
        out.contains("$2.5000") && out.contains("turn limit 12"),
        "{out}"
    );
    let settings = served.host.store.settings("vala").await.unwrap();
    assert_eq!(settings.spend_cap.map(|c| c.0), Some(2_500_000));
    assert_eq!(settings.turn_limit, Some(12));
    assert!(settings.brake, "caps released the brake");
    stdout(&served.muninn(&["brake", "off"]).await);
}

/// Takes vala's lease as host "h" and queues one outbox message to #swarm.
async fn enqueue_a_reply(served: &Served, request_id: &str, text: &str) {
    let lease = served
        .host
        .store
        .acquire_lease("vala", "h", 60_000, 1_750_000_000_000)
        .await
        .unwrap()
        .unwrap();
    served
        .host
        .store
        .enqueue_outbox(
            "vala",
            lease.token,
            &[NewOutboxMessage {
                request_id: request_id.into(),
                room: "#swarm".into(),
                text: text.into(),
                created_at_ms: 1_750_000_000_000,
            }],
        )
        .await
        .unwrap();
}

/// A sweep of what a Claude Code CLI child left behind that could not look for it (here the
/// process list is read from a directory that is not there, as on a host without `/proc`) is
/// shown: a line for the host in `muninn status`, the count in its JSON and in `/metrics`. The
/// child is a CLI stand-in, stopped as every session's child is. Before, only the host's log
/// said so, in a warn line among many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_that_could_not_look_shows_in_status_and_metrics() {
    use muninn_backend::{Backend, SessionSpec};
    use muninn_claude_cli::{ClaudeCliBackend, CliConfig, Secret, Sweeps};
    use std::os::unix::fs::PermissionsExt;
    let served = served().await;
    let line = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("host: "))
            .map(str::to_owned)
    };
    assert_eq!(line(&stdout(&served.muninn(&["status"]).await)), None);
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("claude");
    std::fs::write(&bin, "#!/bin/sh\nwhile read line; do :; done\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let sweeps = Sweeps::looking_in(dir.path().join("no-proc"));
    // What `run_minds` does with the claude-cli factory's sweeps.
    served.host.telemetry.set_sweeps(sweeps.clone());
    let mut config = CliConfig::new(
        bin,
        dir.path().join("cli"),
        "http://127.0.0.1:9",
        Secret::new("sk-test-sweeps"),
        "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a96",
    );
    config.sweeps = sweeps;
    let mut backend = ClaudeCliBackend::new(config);
    backend
        .start(SessionSpec {
            model: String::new(),
            system: vec!["You are a stand-in's session.".into()],
            tools: Vec::new(),
            output_schema: None,
            system_ttl: muninn_core::cache::Ttl::FiveMinutes,
            conversation_ttl: muninn_core::cache::Ttl::FiveMinutes,
            max_tokens: 1024,
        })
        .await
        .unwrap();
    backend.close().await;
    let shown = line(&stdout(&served.muninn(&["status"]).await)).unwrap_or_default();
    assert!(
        shown.starts_with(
            "host: 1 sweep of what the Claude Code CLI children left behind could not look"
        ),
        "{shown}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(
        &served.muninn(&["status", "--format", "json"]).await,
    ))
    .unwrap();
    assert_eq!(json["claude_cli_sweeps_failed"], 1, "{json}");
    let metrics = muninn_host::telemetry::metrics::render(&served.host).await;
    assert!(
        metrics.contains("\nmuninn_claude_cli_sweeps_failed_total 1\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_printing_command_speaks_json_and_the_ledger_csv() {
    let served = served().await;
    let status: serde_json::Value = serde_json::from_str(&stdout(
        &served.muninn(&["status", "--format", "json"]).await,
    ))
    .unwrap();
    assert_eq!(status["minds"][0]["id"], "vala");
    assert_eq!(status["minds"][0]["pending_deliveries"], 0);
    let caps: serde_json::Value = serde_json::from_str(&stdout(
        &served
            .muninn(&["caps", "vala", "--window", "6h", "--format", "json"])
            .await,
    ))
    .unwrap();
    assert_eq!(caps["spend_window_ms"], 6 * 3_600_000);
    let said: serde_json::Value = serde_json::from_str(&stdout(
        &served
            .muninn(&[
                "say",
                "vala",
                "hi",
                "--source-id",
                "j-1",
                "--format",
                "json",
            ])
            .await,
    ))
    .unwrap();
    assert_eq!(
        (said["seq"].as_i64(), said["room"].as_str()),
        (Some(1), Some("#swarm"))
    );
    // No host holds the lease in this fixture: `say` says the Mind will not answer now.
    assert!(
        said["warning"].as_str().unwrap().contains("lease"),
        "{said}"
    );
    let ledger: serde_json::Value = serde_json::from_str(&stdout(
        &served
            .muninn(&["ledger", "vala", "--format", "json", "--since", "1d"])
            .await,
    ))
    .unwrap();
    assert_eq!(ledger["rows"], serde_json::json!([]));
    let csv = stdout(
        &served
            .muninn(&["ledger", "vala", "--format", "csv", "--since", "2026-01-31"])
            .await,
    );
    assert!(csv.starts_with("at_ms,at,mind,role,"), "{csv}");
    let tail = stdout(&served.muninn(&["tail", "vala", "--format", "json"]).await);
    assert!(
        tail.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
    // Not a date: refused, with the text named.
    let out = served
        .muninn(&["ledger", "vala", "--since", "2026-02-31"])
        .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("2026-02-31"));
}

/// `muninn status | head -1` and friends: a reader that goes away ends the command quietly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_a_command_quietly() {
    let served = served().await;
    for args in [
        vec!["status"],
        vec!["ledger", "vala"],
        vec!["ledger", "vala", "--format", "csv"],
        vec!["caps", "vala"],
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
        command
            .args(&args)
            .arg("--addr")
            .arg(&served.addr)
            .arg("--token-file")
            .arg(&served.token_file)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let output = tokio::task::spawn_blocking(move || {
            let mut child = command.spawn().unwrap();
            // The reader is gone before the first line is written.
            drop(child.stdout.take());
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The demo end to end, as a new user runs it: `muninn serve` in one directory, client
/// commands from another with no address or token given (they find the host through the file
/// it leaves in the state directory); `say --wait` prints the Mind's reply, a DM is answered in
/// its DM room, text comes from stdin with `-`; SIGTERM stops the host like Ctrl-C (lease
/// released, host file removed); then "connection refused" says to start `muninn serve`.
#[test]
fn the_demo_answers_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut serve = demo_serve(dir.path(), &state);
    let client = |args: &[&str], stdin: Option<&str>| demo_client(&elsewhere, &state, args, stdin);
    let out = client(&["say", "vala", "what are you working on?", "--wait"], None);
    let text = stdout(&out);
    let reply = text.lines().nth(1).unwrap_or_default();
    assert!(reply.starts_with("vala → #swarm: "), "{text}");
    assert!(reply.split_whitespace().count() > 4, "a sentence: {reply}");
    let out = client(
        &["say", "vala", "-", "--dm", "--sender", "@ada", "--wait"],
        Some("a word in private, please\n"),
    );
    let text = stdout(&out);
    assert!(
        text.contains("vala → @ada: "),
        "the DM is answered in its DM room: {text}"
    );
    let status = stdout(&client(&["status"], None));
    assert!(status.contains("vala"), "{status}");

    // SIGTERM: a clean stop, like Ctrl-C.
    let (exit, stderr) = stop_with_sigterm(&mut serve);
    assert!(exit.success(), "{exit:?}: {stderr}");
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    assert!(
        !state.join("host.json").exists(),
        "the host file is removed"
    );
    let released = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = muninn_store::open(dir.path().join("muninn-data/muninn.db").to_str().unwrap())
            .await
            .unwrap();
        store.lease("vala").await.unwrap()
    });
    assert!(released.is_none(), "the lease was released: {released:?}");

    // Nothing listens now: the error says what to do.
    let token = dir.path().join("muninn-data/api-token");
    let out = client(
        &[
            "status",
            "--addr",
            "127.0.0.1:9",
            "--token-file",
            token.to_str().unwrap(),
        ],
        None,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("muninn serve"), "{stderr}");
}

/// `muninn serve` on an ephemeral port in `dir`, with no configuration or credential in its
/// environment, once its first line says it runs the demo Mind on the built-in simulator.
fn demo_serve(dir: &std::path::Path, state: &std::path::Path) -> std::process::Child {
    use std::io::{BufRead, BufReader};
    let mut serve = Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .env("MUNINN_STATE_DIR", state)
        .env_remove("MUNINN_CONFIG")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(
        banner.contains("1 Mind(s) on the built-in simulator"),
        "{banner}"
    );
    serve
}

/// A client command run from `elsewhere` with no address or token given (only the state
/// directory, where the host leaves its file), `stdin` written to it.
fn demo_client(
    elsewhere: &std::path::Path,
    state: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(args)
        .current_dir(elsewhere)
        .env("MUNINN_STATE_DIR", state)
        .env_remove("MUNINN_CONFIG")
        .env_remove("MUNINN_ADDR")
        .env_remove("MUNINN_TOKEN_FILE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Sends `serve` SIGTERM and waits (up to 30 s) for it to exit: its exit status and stderr.
fn stop_with_sigterm(serve: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let exit = loop {
        if let Some(status) = serve.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "serve did not stop on SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut stderr).unwrap();
    (exit, stderr)
}
