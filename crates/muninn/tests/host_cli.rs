//! `muninn say`, `status`, `brake`, `caps`, `ledger` and `tail` against the host's router served
//! on an ephemeral loopback port with a real SQLite store.

use muninn_api::ApiToken;
use muninn_backend::clock::ManualClock;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_host::{Host, Signals};
use muninn_store::{Mind, NewOutboxMessage};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

struct Served {
    host: Host,
    addr: String,
    token_file: PathBuf,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn served() -> Served {
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
    let host = Host {
        store,
        config: Arc::new(config),
        clock: Arc::new(ManualClock::new(1_750_000_000_000)),
        signals: Arc::new(Signals::default()),
    };
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
    /// Runs the binary off the runtime's threads, so the server keeps answering.
    async fn muninn(&self, args: &[&str]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
        command
            .args(args)
            .arg("--addr")
            .arg(&self.addr)
            .arg("--token-file")
            .arg(&self.token_file);
        tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap()
    }
}

fn stdout(output: &Output) -> String {
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

    let out = stdout(&served.muninn(&["brake", "on"]).await);
    assert_eq!(out, "brake on for 1 Minds: vala\n");
    let out = stdout(&served.muninn(&["status"]).await);
    assert!(out.contains("brake: on for every Mind"), "{out}");
    stdout(&served.muninn(&["brake", "off"]).await);

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

    let out = stdout(
        &served
            .muninn(&["ledger", "vala", "--format", "jsonl"])
            .await,
    );
    assert_eq!(out, "");
    let out = stdout(&served.muninn(&["ledger", "vala"]).await);
    assert!(out.contains("0 rows"), "{out}");

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
                request_id: "b1-0".into(),
                room: "#swarm".into(),
                text: "well met".into(),
                created_at_ms: 1_750_000_000_000,
            }],
        )
        .await
        .unwrap();
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
