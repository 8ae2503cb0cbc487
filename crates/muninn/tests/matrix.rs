//! The real `muninn serve` (`CARGO_BIN_EXE_muninn`, the simulator backend) in real Matrix rooms:
//! a Synapse from `muninn_testkit::synapse`, a person posting through the Client-Server API, and
//! assertions on what appears in the rooms.
//!
//! - **A conversation** across two public rooms and a direct chat: every question answered
//!   once, in its room; then the time from a person's message to the Mind's reply in the room,
//!   p50/p99, from the homeserver's own timestamps of the two events (printed; more samples with
//!   `MUNINN_MATRIX_LATENCY_SAMPLES`).
//! - **`kill -9` at each crash point**, armed with `MUNINN_FAULT` so the host dies exactly there
//!   (`abort`: no destructor, no flush): after the homeserver accepted a reply and before the
//!   outbox acknowledged it, and after a `/sync` answer with mail was read and before it was
//!   committed. After a restart each question has exactly one reply in the room and no delivery
//!   is lost (printed: in, out, duplicates, lost).
//! - **The homeserver restarted mid-run**, with a reply waiting to be sent while it is down.
//! - **A gap cut at its limit**, shown in `muninn status`, the API and `/metrics` (`gaps`).
//! - **`muninn doctor`** on a `[matrix]` configuration: an access token checked with `whoami`
//!   (the account's on its device, another account's, a revoked one), a password not tried.
//!
//! Hosts run with `lease_ttl_ms = 2000`, so a restarted host takes a killed one's Mind over
//! within seconds. Rooms are read with `/messages` (Synapse's two-minute `/sync` cache would
//! serve a repeated `/sync` stale). Every child is killed on the way out, pass or fail.

mod doctor;
mod gaps;
mod rooms;

use crate::serving::{Spawned, spawn_ready};
use muninn_store::{Role, SqliteStore, Store};
use muninn_testkit::synapse::{self, MatrixUser, RoomMessage, Synapse};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PASSWORD: &str = "muninn-test-password";

static UNIQUE: AtomicU64 = AtomicU64::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

/// A host's directory, configuration and (while it runs) process.
struct Host {
    dir: tempfile::TempDir,
    child: Option<Child>,
    addr: String,
    starts: usize,
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Host {
    /// A host whose Mind `vala` is `bot` in `rooms` on `homeserver`.
    fn new(homeserver: &str, bot: &str, rooms: &[String]) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let rooms: Vec<String> = rooms.iter().map(|r| format!("{r:?}")).collect();
        let config = format!(
            r#"data_dir = "data"
listen = "127.0.0.1:0"
lease_ttl_ms = 2000

[backend]
kind = "sim"

[matrix]
homeserver = "{homeserver}"

[[mind]]
id = "vala"
doctrine_text = "You are Vala. Answer briefly."
rooms = [{rooms}]
spend_cap_micro_usd = 100000000

[mind.matrix]
user_id = "{bot}"
device_id = "MUNINN_VALA"
password = {{ env = "VALA_MATRIX_PASSWORD" }}
"#,
            rooms = rooms.join(", ")
        );
        std::fs::write(dir.path().join("muninn.toml"), config).unwrap();
        Host {
            dir,
            child: None,
            addr: String::new(),
            starts: 0,
        }
    }

    /// Starts `muninn serve` (with `fault` armed, if any) and waits for its ready line.
    fn start(&mut self, fault: Option<&str>) {
        assert!(self.child.is_none(), "already running");
        let stderr = self
            .dir
            .path()
            .join(format!("serve-{}.stderr", self.starts));
        self.starts += 1;
        let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
        command
            .arg("serve")
            .arg("--config")
            .arg(self.dir.path().join("muninn.toml"))
            .env("VALA_MATRIX_PASSWORD", PASSWORD)
            .env_remove("MUNINN_FAULT")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("MUNINN_CONFIG");
        if let Some(fault) = fault {
            command.env("MUNINN_FAULT", fault);
        }
        let Spawned { child, line, addr } = spawn_ready(&mut command, &stderr);
        assert!(
            addr.is_some() && line.contains("Matrix: 1 account(s)"),
            "no ready line ({line:?}); stderr:\n{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        self.addr = addr.unwrap_or_default();
        self.child = Some(child);
    }

    /// Waits for a host with `fault` armed to die at it.
    fn died(&mut self, fault: &str, within: Duration) {
        let mut child = self.child.take().expect("a running host");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    !status.success(),
                    "the host exited cleanly at a fault point"
                );
                let stderr = self.stderr();
                assert!(
                    stderr.contains(&format!("fault point {fault} reached")),
                    "the host died elsewhere: {stderr}"
                );
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let db = self.dir.path().join("data/muninn.db");
                let dump = Command::new("sqlite3")
                    .arg(&db)
                    .arg("select 'd', seq, text from deliveries; select 'ack', acked_seq from mailbox_acks; select 'o', request_id, sent_at_ms, acked_at_ms, failed_at_ms, failure from outbox; select 'c', value from cursors; select 'l', holder, token, expires_at_ms from leases;")
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                panic!(
                    "the host did not reach its fault point within {within:?}; stderr:\n{}\nstore:\n{dump}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last start's stderr.
    fn stderr(&self) -> String {
        let path = self
            .dir
            .path()
            .join(format!("serve-{}.stderr", self.starts.saturating_sub(1)));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Stops the host as an operator does (Ctrl-C) and waits for it to exit cleanly.
    fn stop(&mut self) {
        let mut child = self.child.take().expect("a running host");
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the host did not stop on Ctrl-C");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(child.wait().unwrap().success(), "a clean stop");
    }

    /// `muninn <args>` against this host.
    fn muninn(&self, args: &[&str]) -> String {
        let output = Command::new(env!("CARGO_BIN_EXE_muninn"))
            .args(args)
            .args(["--addr", &self.addr])
            .arg("--token-file")
            .arg(self.dir.path().join("data/api-token"))
            .env_remove("MUNINN_CONFIG")
            .output()
            .unwrap();
        assert!(output.status.success(), "muninn {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    /// `GET path` on the host's API without a token: (status code, body).
    fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let code = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (code, body.to_owned())
    }

    async fn store(&self) -> SqliteStore {
        SqliteStore::open_in(self.dir.path().join("data"))
            .await
            .unwrap()
    }
}

/// The person's and the bot's accounts on `synapse`.
async fn accounts(synapse: &Synapse, test: &str) -> (MatrixUser, String) {
    let human = synapse
        .register(&unique(&format!("ann-{test}")), PASSWORD)
        .await;
    let bot = synapse
        .register(&unique(&format!("vala-{test}")), PASSWORD)
        .await;
    (human, bot.user_id)
}

/// A public room with an alias, the bot invited; returns (room id, the name the Mind uses).
async fn public_room(human: &MatrixUser, bot: &str, test: &str) -> (String, String) {
    let alias = unique(test);
    let room = human.create_room(Some(&alias), &[bot], false).await;
    (room, format!("#{alias}"))
}

async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the host's first sync is committed: a message sent before it is history (the
/// first sync's timeline is context, not mail), so a test asks only after it.
async fn synced(host: &Host) {
    let store = host.store().await;
    wait_for("the first sync", Duration::from_secs(60), || async {
        store
            .cursor("vala", muninn_matrix::config::SYNC_CURSOR)
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
}

async fn joined(human: &MatrixUser, room: &str, bot: &str) {
    wait_for("the bot in the room", Duration::from_secs(60), || async {
        human
            .joined_members(room)
            .await
            .iter()
            .any(|m| m == bot)
            .then_some(())
    })
    .await;
}

/// The reply the simulator gives `human`'s `question`.
fn reply_to(human: &MatrixUser, question: &str) -> String {
    muninn_sim::reply::sentence(&human.user_id, question)
}

/// Asks `question` in `room` and waits for its reply there; returns both events.
async fn ask(human: &MatrixUser, room: &str, bot: &str, question: &str) -> (String, RoomMessage) {
    let asked = human.send(room, question, &[]).await;
    let expected = reply_to(human, question);
    let reply = wait_for(
        &format!("the reply to {question:?}"),
        Duration::from_secs(60),
        || async {
            human
                .messages(room)
                .await
                .into_iter()
                .find(|m| m.sender == bot && m.body == expected)
        },
    )
    .await;
    (asked, reply)
}

/// How many times each question has its reply from `bot` in `room`.
async fn replies(human: &MatrixUser, room: &str, bot: &str, questions: &[String]) -> Vec<usize> {
    let messages = human.messages(room).await;
    questions
        .iter()
        .map(|q| {
            let expected = reply_to(human, q);
            messages
                .iter()
                .filter(|m| m.sender == bot && m.body == expected)
                .count()
        })
        .collect()
}

/// Each question asked in `room` has exactly one reply there, and the bot said nothing else.
async fn answered_once_in_its_room(
    human: &MatrixUser,
    room: &str,
    bot: &str,
    asked: &[(String, String)],
) {
    let questions: Vec<String> = asked
        .iter()
        .filter(|(r, _)| r == room)
        .map(|(_, q)| q.clone())
        .collect();
    assert!(
        replies(human, room, bot, &questions)
            .await
            .iter()
            .all(|n| *n == 1)
    );
    let from_bot = human
        .messages(room)
        .await
        .into_iter()
        .filter(|m| m.sender == bot)
        .count();
    assert_eq!(from_bot, questions.len(), "only answers, in the room asked");
}

/// Context from what the Mind already saw: no delivery carries the Mind's own words from the
/// segment that was open when it came (that segment's transcript holds them as its replies).
async fn no_own_words_of_the_open_segment(
    store: &SqliteStore,
    mail: &[muninn_store::Delivery],
    human: &MatrixUser,
    rooms: &[&String],
    bot: &str,
) {
    let segments = store.segments("vala", Role::Persona).await.unwrap();
    let mut bot_said = std::collections::HashMap::new();
    for room in rooms {
        for m in human.messages(room).await {
            if m.sender == bot {
                bot_said.insert(m.event_id, m.ts);
            }
        }
    }
    for delivery in mail {
        let open_since = segments
            .iter()
            .filter(|s| s.started_at_ms <= delivery.received_at_ms)
            .map(|s| s.started_at_ms)
            .max();
        for line in delivery.context.iter().filter(|l| l.sender == bot) {
            let said = bot_said[line.id.as_deref().unwrap()];
            assert!(
                open_since.is_none_or(|start| said < start),
                "{:?} repeats the Mind's own words of its open segment: {line:?}",
                delivery.text
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_across_two_rooms_and_a_dm_and_the_reply_latency() {
    let Some(synapse) = synapse::shared() else {
        return;
    };
    let (human, bot) = accounts(synapse, "conv").await;
    let (room_a, name_a) = public_room(&human, &bot, "conv-a").await;
    let (room_b, name_b) = public_room(&human, &bot, "conv-b").await;
    let mut host = Host::new(&synapse.url(), &bot, &[name_a.clone(), name_b.clone()]);
    host.start(None);
    joined(&human, &room_a, &bot).await;
    joined(&human, &room_b, &bot).await;
    synced(&host).await;
    let dm = human.create_room(None, &[&bot], true).await;
    joined(&human, &dm, &bot).await;

    let mut asked = Vec::new();
    for (room, question) in [
        (&room_a, "what is the weather in room a?"),
        (&room_b, "and in room b?"),
        (&dm, "a secret, just for you"),
    ] {
        ask(&human, room, &bot, question).await;
        asked.push((room.clone(), question.to_string()));
    }
    let samples: usize = std::env::var("MUNINN_MATRIX_LATENCY_SAMPLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30);
    let mut latencies = Vec::new();
    for i in 0..samples {
        let room = [&room_a, &room_b, &dm][i % 3];
        let question = format!("question {i}: still there?");
        let (_, reply) = ask(&human, room, &bot, &question).await;
        let asked_at = human
            .messages(room)
            .await
            .into_iter()
            .find(|m| m.sender == human.user_id && m.body == question)
            .map(|m| m.ts)
            .unwrap();
        latencies.push(reply.ts - asked_at);
        asked.push((room.clone(), question));
    }
    for room in [&room_a, &room_b, &dm] {
        answered_once_in_its_room(&human, room, &bot, &asked).await;
    }
    let status = host.muninn(&["status"]);
    assert!(!status.contains("failed"), "{status}");
    host.stop();

    // The store: every question a delivery (its event id the source id), every reply acked
    // with its event id.
    let store = host.store().await;
    let mail = store.pending_deliveries("vala", 0, 10_000).await.unwrap();
    assert_eq!(mail.len(), asked.len());
    assert!(mail.iter().any(|d| d.is_direct && d.room == dm));
    assert!(store.unacked_outbox("vala", 10).await.unwrap().is_empty());
    no_own_words_of_the_open_segment(&store, &mail, &human, &[&room_a, &room_b, &dm], &bot).await;
    latencies.sort_unstable();
    let pick = |q: f64| {
        latencies[((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1]
    };
    eprintln!(
        "matrix latency (message to reply in the room, simulator backend): n={} p50={} ms p99={} ms max={} ms",
        latencies.len(),
        pick(0.50),
        pick(0.99),
        latencies[latencies.len() - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_send_and_ack_and_between_sync_and_commit_loses_and_repeats_nothing() {
    let Some(synapse) = synapse::shared() else {
        return;
    };
    let (human, bot) = accounts(synapse, "kill").await;
    let (room, name) = public_room(&human, &bot, "kill").await;
    let mut host = Host::new(&synapse.url(), &bot, &[name]);
    host.start(None);
    joined(&human, &room, &bot).await;
    synced(&host).await;
    let mut questions = Vec::new();
    for fault in ["matrix-sent-before-ack", "matrix-synced-before-commit"] {
        for round in 0..3 {
            host.stop();
            host.start(Some(fault));
            let question = format!("{fault} round {round}: answer me once");
            human.send(&room, &question, &[]).await;
            host.died(fault, Duration::from_secs(60));
            // Sent before the crash, or not yet read: either way, after the restart the room
            // has the reply exactly once.
            host.start(None);
            let expected = reply_to(&human, &question);
            wait_for(
                "the reply after the restart",
                Duration::from_secs(60),
                || async {
                    human
                        .messages(&room)
                        .await
                        .iter()
                        .any(|m| m.sender == bot && m.body == expected)
                        .then_some(())
                },
            )
            .await;
            questions.push(question);
        }
    }
    // Let anything still in flight land before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    host.stop();
    let counts = replies(&human, &room, &bot, &questions).await;
    let out: usize = counts.iter().sum();
    let duplicates: usize = counts.iter().map(|n| n.saturating_sub(1)).sum();
    let lost = counts.iter().filter(|n| **n == 0).count();
    let store = host.store().await;
    let mail = store.pending_deliveries("vala", 0, 10_000).await.unwrap();
    let delivered: std::collections::BTreeSet<&str> =
        mail.iter().map(|d| d.text.as_str()).collect();
    eprintln!(
        "matrix kill tests: {} messages in ({} delivered), {out} replies out, {duplicates} duplicates, {lost} lost",
        questions.len(),
        mail.len()
    );
    assert_eq!((duplicates, lost), (0, 0), "{counts:?}");
    assert_eq!(mail.len(), questions.len(), "each question delivered once");
    assert!(questions.iter().all(|q| delivered.contains(q.as_str())));
    let from_bot = human
        .messages(&room)
        .await
        .into_iter()
        .filter(|m| m.sender == bot)
        .count();
    assert_eq!(from_bot, questions.len());
}

/// With the brake on, "during the restart" is said and waits in the mailbox; the homeserver
/// stops and the brake is released: the reply is recorded in the outbox with nowhere to go.
/// Returns the store it read through, to be kept open for the rest of the run.
async fn a_reply_waits_while_the_homeserver_is_down(
    host: &Host,
    human: &MatrixUser,
    room: &str,
    synapse: &mut Synapse,
) -> SqliteStore {
    host.muninn(&["brake", "on"]);
    human.send(room, "during the restart", &[]).await;
    let store = host.store().await;
    wait_for(
        "the question in the mailbox",
        Duration::from_secs(60),
        || async {
            let mail = store.pending_deliveries("vala", 0, 100).await.unwrap();
            (mail.len() == 2).then_some(())
        },
    )
    .await;
    synapse.stop();
    host.muninn(&["brake", "off"]);
    wait_for("the reply recorded", Duration::from_secs(60), || async {
        let outbox = store.unacked_outbox("vala", 10).await.unwrap();
        (!outbox.is_empty()).then_some(())
    })
    .await;
    store
}

/// The outage is loud: `muninn status` names it, `/readyz` is not ready and says why.
async fn the_outage_is_loud(host: &Host) {
    wait_for(
        "status naming the sync failure",
        Duration::from_secs(60),
        || async {
            let status = host.muninn(&["status"]);
            status
                .lines()
                .any(|l| l.starts_with("vala: matrix failing (sync) since"))
                .then_some(())
        },
    )
    .await;
    let (code, body) = host.get("/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("mind vala: matrix is failing to read its rooms"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_homeserver_restarted_mid_run_delays_a_reply_and_loses_none() {
    let Some(mut synapse) = Synapse::start("restart") else {
        return;
    };
    let (human, bot) = accounts(&synapse, "restart").await;
    let (room, name) = public_room(&human, &bot, "restart").await;
    let mut host = Host::new(&synapse.url(), &bot, &[name]);
    host.start(None);
    joined(&human, &room, &bot).await;
    synced(&host).await;
    ask(&human, &room, &bot, "before the restart").await;

    // A question read, its answer held by the brake; the homeserver goes down; the brake is
    // released, so the reply waits to be sent while nothing answers.
    let _store =
        a_reply_waits_while_the_homeserver_is_down(&host, &human, &room, &mut synapse).await;
    the_outage_is_loud(&host).await;
    synapse.restart();
    let expected = reply_to(&human, "during the restart");
    wait_for(
        "the held reply after the restart",
        Duration::from_secs(90),
        || async {
            human
                .messages(&room)
                .await
                .iter()
                .any(|m| m.sender == bot && m.body == expected)
                .then_some(())
        },
    )
    .await;
    // And the sync loop is back: a new question is answered.
    ask(&human, &room, &bot, "after the restart").await;
    assert!(!host.muninn(&["status"]).contains("matrix failing"));
    let (code, body) = host.get("/readyz");
    assert_eq!(code, 200, "{body}");
    host.stop();
    let questions: Vec<String> = [
        "before the restart",
        "during the restart",
        "after the restart",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        replies(&human, &room, &bot, &questions).await,
        vec![1, 1, 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_that_cannot_log_in_is_loud_in_status_readyz_and_metrics() {
    let Some(synapse) = synapse::shared() else {
        return;
    };
    let (_human, bot) = accounts(synapse, "login").await;
    let mut host = Host::new(&synapse.url(), &bot, &["#nowhere".to_string()]);
    let path = host.dir.path().join("muninn.toml");
    let config = std::fs::read_to_string(&path).unwrap().replace(
        r#"password = { env = "VALA_MATRIX_PASSWORD" }"#,
        r#"password = { file = "wrong-password" }"#,
    );
    std::fs::write(&path, config).unwrap();
    std::fs::write(host.dir.path().join("wrong-password"), "not the password").unwrap();
    host.start(None);
    let line = wait_for(
        "status naming the login failure",
        Duration::from_secs(60),
        || async {
            host.muninn(&["status"])
                .lines()
                .find(|l| l.starts_with("vala: matrix failing (login) since"))
                .map(str::to_owned)
        },
    )
    .await;
    assert!(
        line.contains("M_FORBIDDEN") || line.contains("403"),
        "{line}"
    );
    assert!(!line.contains("not the password"), "{line}");
    let (code, body) = host.get("/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("mind vala: matrix is failing to open the account"),
        "{body}"
    );
    let (_, metrics) = host.get("/metrics");
    assert!(
        metrics.contains(
            r#"muninn_transport_state{mind="vala",transport="matrix",state="failing"} 1"#
        ),
        "{metrics}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&host.muninn(&["status", "--format", "json"])).unwrap();
    let transport = &json["minds"][0]["transport"];
    assert_eq!(transport["state"], "failing", "{json}");
    assert_eq!(transport["stage"], "login", "{json}");
    host.stop();
}
