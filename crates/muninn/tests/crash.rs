//! The crash harness: real `muninn serve` processes under a steady load of deliveries to
//! several Minds, in two public rooms and in DMs, posted through the HTTP API, while hosts are
//! killed with SIGKILL at random points (every fourth stop a SIGTERM) and restarted — or, in
//! the Claude Code variant, while the hosts' CLI children are killed instead. Then the checker
//! (`muninn_testkit::crash`) reads the store: every delivery answered exactly once (outbox), the
//! transcript replaying to the same batches, the ledger agreeing with the transcript.
//!
//! Each run prints one line — `crash harness <variant>: kills K (sigterm S), deliveries D,
//! lost L, duplicated U, batches B, seed X` — and fails when anything was lost or duplicated or
//! did not agree. Small by default (a few kills, a few dozen deliveries: CI); sized by
//! `MUNINN_CRASH_KILLS` and `MUNINN_CRASH_DELIVERIES` for a long run, `MUNINN_CRASH_SEED`
//! replays a run's kill points and load.
//!
//! The load generator posts one delivery at a time with a fixed source id and retries it (same
//! id: intake is idempotent) until a host accepts it, so a delivery the harness counts was
//! acknowledged by a host with 201/200 before the kill that may follow. PostgreSQL runs on a
//! fresh database per run (`FreshDatabase`, skipped with a note when PostgreSQL is not there,
//! unless `MUNINN_REQUIRE_PEERS=1`); the Claude Code variant needs the pinned CLI
//! (`MUNINN_CLAUDE_BIN`). The kills at the host's own crash points, where a random kill rarely
//! lands, are in `crash_points.rs`.

use crate::serving::{Spawned, serve_command, spawn_ready};
use muninn_api::client::ApiClient;
use muninn_api::token::ApiToken;
use muninn_api::wire::PostDeliveryRequest;
use muninn_testkit::crash::{MindCheck, SplitMix64, check_mind};
use muninn_testkit::peers::{FreshDatabase, claude_cli};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The Minds under load.
const MINDS: [&str; 3] = ["vala", "huginn", "mimir"];

/// A short lease, so a killed host's Minds are taken over (or its restart resumes them) in
/// seconds.
const LEASE_TTL_MS: u64 = 2_000;

/// How big a run is, from the environment.
#[derive(Debug, Clone, Copy)]
struct Size {
    kills: usize,
    deliveries: usize,
    seed: u64,
}

impl Size {
    fn from_env(kills: usize, deliveries: usize) -> Size {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let seed = var("MUNINN_CRASH_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        Size {
            kills: var("MUNINN_CRASH_KILLS").map_or(kills, |v| v as usize),
            deliveries: var("MUNINN_CRASH_DELIVERIES").map_or(deliveries, |v| v as usize),
            seed,
        }
    }
}

/// One `muninn serve` process.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) addr: String,
}

/// The hosts of a run, each restartable in its slot; every child is killed on the way out.
pub(crate) struct Hosts {
    pub(crate) dir: PathBuf,
    pub(crate) database: String,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) slots: Vec<Option<Served>>,
    pub(crate) started: usize,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for served in self.slots.iter_mut().flatten() {
            let _ = served.child.kill();
            let _ = served.child.wait();
        }
    }
}

impl Hosts {
    /// Starts (or restarts) the host in `slot` and waits for its ready line.
    pub(crate) fn start(&mut self, slot: usize) {
        let index = self.started;
        self.started += 1;
        let stderr = self.dir.join(format!("serve-{index}.stderr"));
        let mut command = serve_command(
            &self.dir.join("muninn.toml"),
            &self.dir,
            &self.database,
            "warn",
        );
        for (k, v) in &self.env {
            command.env(k, v);
        }
        let Spawned {
            mut child,
            line,
            addr,
        } = spawn_ready(&mut command, &stderr);
        let Some(addr) = addr else {
            let _ = child.kill();
            panic!(
                "host {index} printed no ready line ({line:?}); stderr:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        self.slots[slot] = Some(Served { child, addr });
    }

    /// Stops the host in `slot` with `signal` (`-9` or `-TERM`) and waits for it to exit.
    pub(crate) fn stop(&mut self, slot: usize, signal: &str) {
        if let Some(mut served) = self.slots[slot].take() {
            let _ = Command::new("kill")
                .args([signal, &served.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while served.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            // A host that did not stop on SIGTERM in 30 s is a finding; do not leave it running.
            let _ = served.child.kill();
            let _ = served.child.wait();
        }
    }

    pub(crate) fn addrs(&self) -> Vec<String> {
        self.slots
            .iter()
            .flatten()
            .map(|s| s.addr.clone())
            .collect()
    }

    /// The pids of the live hosts' direct children (Claude Code CLI processes).
    fn cli_children(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for served in self.slots.iter().flatten() {
            let tasks = format!("/proc/{}/task", served.child.id());
            for task in std::fs::read_dir(tasks).into_iter().flatten().flatten() {
                let children = std::fs::read_to_string(task.path().join("children"));
                for pid in children.unwrap_or_default().split_whitespace() {
                    pids.extend(pid.parse::<u32>().ok());
                }
            }
        }
        pids
    }

    pub(crate) fn stderr(&self) -> String {
        (0..self.started)
            .map(|i| {
                let path = self.dir.join(format!("serve-{i}.stderr"));
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- host run {i} (last lines):\n{}\n", tail.join("\n"))
            })
            .collect()
    }
}

/// What the load generator posted, per Mind: the source ids a host accepted.
type Posted = Arc<Mutex<Vec<BTreeSet<String>>>>;

/// Posts `count` deliveries one at a time through whichever host is up, each retried with its
/// source id until accepted: Minds in turn, `#swarm` / `#burn` / a DM from one of a few senders.
async fn load(
    count: usize,
    addrs: Arc<Mutex<Vec<String>>>,
    token: ApiToken,
    posted: Posted,
    seed: u64,
) {
    let mut rng = SplitMix64::new(seed ^ 0x5EED);
    for i in 0..count {
        let mind = MINDS[i % MINDS.len()];
        let sender = format!("@user{}:example.org", rng.range(0, 4));
        let (room, is_direct) = match rng.range(0, 3) {
            0 => ("#swarm".to_string(), false),
            1 => ("#burn".to_string(), false),
            _ => (sender.clone(), true),
        };
        let request = PostDeliveryRequest {
            room,
            sender,
            is_direct,
            to_you: false,
            text: format!("message {i}: what do you remember of the last one?"),
            source_id: format!("crash-{i}"),
            context: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let candidates = addrs.lock().unwrap().clone();
            let mut accepted = false;
            for addr in &candidates {
                let Ok(client) = ApiClient::new(addr, token.clone()) else {
                    continue;
                };
                if client.post_delivery(mind, &request).await.is_ok() {
                    accepted = true;
                    break;
                }
            }
            if accepted {
                posted.lock().unwrap()[i % MINDS.len()].insert(request.source_id.clone());
                break;
            }
            assert!(
                Instant::now() < deadline,
                "delivery {i} not accepted for 120 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A steady trickle: about a hundred deliveries a second at most.
        tokio::time::sleep(Duration::from_millis(rng.range(2, 20))).await;
    }
}

/// Waits until every Mind's mailbox is acknowledged through its last seq.
async fn drained(store: &dyn muninn_store::Store, hosts: &Hosts, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut behind = Vec::new();
        for mind in MINDS {
            let last = store
                .pending_deliveries(mind, 0, 1_000_000)
                .await
                .map_or(0, |d| d.last().map_or(0, |d| d.seq));
            let ack = store.ack_position(mind).await.unwrap_or(0);
            if ack < last {
                behind.push(format!("{mind}: {ack} of {last}"));
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not drained: {behind:?}\n{}",
            hosts.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The run's variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// Hosts are stopped (SIGKILL, every fourth a SIGTERM) and restarted.
    Host,
    /// The hosts' Claude Code children are SIGKILLed; the hosts live on.
    CliChild,
}

/// Writes the configuration: three Minds in `#swarm` and `#burn`, on `backend` (TOML lines).
fn configure(dir: &Path, backend: &str) {
    let mut toml = format!("lease_ttl_ms = {LEASE_TTL_MS}\n[backend]\n{backend}\n");
    for mind in MINDS {
        toml.push_str(&format!(
            "\n[[mind]]\nid = '{mind}'\nrooms = ['#swarm', '#burn']\n\
             doctrine_text = 'You are {mind}. Answer briefly.'\n"
        ));
    }
    std::fs::write(dir.join("muninn.toml"), toml).unwrap();
}

/// One run: `hosts` hosts on `database`, the load, `size.kills` kills of `victim`, the drain,
/// the check. Prints the summary line, then fails if anything was lost, duplicated or did not
/// agree.
async fn run(
    variant: &str,
    dir: &Path,
    database: &str,
    host_count: usize,
    victim: Victim,
    env: Vec<(String, String)>,
    size: Size,
) {
    let mut hosts = Hosts {
        dir: dir.to_path_buf(),
        database: database.to_string(),
        env,
        slots: (0..host_count).map(|_| None).collect(),
        started: 0,
    };
    for slot in 0..host_count {
        hosts.start(slot);
    }
    let token = ApiToken::read(&dir.join("api-token")).unwrap();
    let addrs = Arc::new(Mutex::new(hosts.addrs()));
    let posted: Posted = Arc::new(Mutex::new(vec![BTreeSet::new(); MINDS.len()]));
    let loader = tokio::spawn(load(
        size.deliveries,
        addrs.clone(),
        token,
        posted.clone(),
        size.seed,
    ));
    let (kills, sigterms) = kill_at_random_points(&mut hosts, &addrs, victim, size).await;
    loader.await.unwrap();
    let store = muninn_store::open(database).await.unwrap();
    drained(store.as_ref(), &hosts, Duration::from_secs(180)).await;
    for slot in 0..host_count {
        hosts.stop(slot, "-TERM");
    }
    let posted = posted.lock().unwrap().clone();
    let total = check_every_mind(store.as_ref(), &posted).await;
    store.close().await;
    let verdict = if total.lost == 0 && total.duplicated == 0 && total.problems.is_empty() {
        "PASS"
    } else {
        "FAIL"
    };
    println!(
        "crash harness {variant}: kills {kills} (sigterm {sigterms}), deliveries {}, lost {}, \
         duplicated {}, batches {}, seed {}: {verdict}",
        total.posted, total.lost, total.duplicated, total.batches, size.seed
    );
    assert_eq!(total.posted, size.deliveries, "posted");
    assert!(
        verdict == "PASS",
        "lost {}, duplicated {}, problems {:#?}\n{}",
        total.lost,
        total.duplicated,
        total.problems,
        hosts.stderr()
    );
}

/// `size.kills` kills of `victim` at random points (from `size.seed`) spread over the load's
/// expected length, keeping `addrs` to the live hosts' addresses: the kills and how many of
/// them were SIGTERMs.
async fn kill_at_random_points(
    hosts: &mut Hosts,
    addrs: &Mutex<Vec<String>>,
    victim: Victim,
    size: Size,
) -> (usize, usize) {
    let mut rng = SplitMix64::new(size.seed);
    // Kills spread over the load's expected length (about 11 ms a delivery), at random points.
    let spread_ms = (size.deliveries as u64 * 11 / size.kills.max(1) as u64).max(300);
    let mut sigterms = 0;
    let mut kills = 0;
    while kills < size.kills {
        tokio::time::sleep(Duration::from_millis(rng.range(100, spread_ms * 2))).await;
        match victim {
            Victim::Host => {
                let slot = rng.range(0, hosts.slots.len() as u64) as usize;
                let signal = if kills % 4 == 3 { "-TERM" } else { "-9" };
                sigterms += usize::from(signal == "-TERM");
                hosts.stop(slot, signal);
                *addrs.lock().unwrap() = hosts.addrs();
                // Down for a moment: deliveries queue at the other host or wait for this one.
                tokio::time::sleep(Duration::from_millis(rng.range(0, 500))).await;
                hosts.start(slot);
                *addrs.lock().unwrap() = hosts.addrs();
                kills += 1;
            }
            Victim::CliChild => {
                let children = hosts.cli_children();
                if children.is_empty() {
                    continue;
                }
                let pid = children[rng.range(0, children.len() as u64) as usize];
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                kills += 1;
            }
        }
    }
    (kills, sigterms)
}

/// Every Mind's check, summed.
async fn check_every_mind(
    store: &dyn muninn_store::Store,
    posted: &[BTreeSet<String>],
) -> MindCheck {
    let mut total = MindCheck::default();
    for (mind, ids) in MINDS.iter().zip(posted) {
        let check = check_mind(store, mind, ids).await.unwrap();
        total.posted += check.posted;
        total.lost += check.lost;
        total.duplicated += check.duplicated;
        total.batches += check.batches;
        total.problems.extend(check.problems);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_one_host_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), "kind = 'sim'");
    let database = dir.path().join("muninn.db").display().to_string();
    let size = Size::from_env(4, 60);
    run(
        "sqlite, 1 host",
        dir.path(),
        &database,
        1,
        Victim::Host,
        Vec::new(),
        size,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_one_host_on_postgres() {
    let Some(db) = FreshDatabase::for_test("muninn_crash_one", "crash harness on PostgreSQL")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), "kind = 'sim'");
    let size = Size::from_env(4, 60);
    run(
        "postgres, 1 host",
        dir.path(),
        &db.url(),
        1,
        Victim::Host,
        Vec::new(),
        size,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_two_hosts_on_postgres() {
    let Some(db) = FreshDatabase::for_test("muninn_crash_two", "crash harness, two hosts") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), "kind = 'sim'");
    let size = Size::from_env(4, 60);
    run(
        "postgres, 2 hosts",
        dir.path(),
        &db.url(),
        2,
        Victim::Host,
        Vec::new(),
        size,
    )
    .await;
}

/// The hosts live; their Claude Code children (against the simulator's HTTP endpoint) are
/// killed mid-load, and each turn a killed child left is relaunched or rebuilt and answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_claude_cli_children_on_sqlite() {
    let Some(bin) = claude_cli() else { return };
    let server = muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        muninn_sim::sim::SimConfig::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    configure(
        dir.path(),
        &format!(
            "kind = 'claude-cli'\nbase_url = '{}'\nclaude_bin = {:?}\napi_key_env = 'MUNINN_CRASH_KEY'",
            server.base_url(),
            bin.display().to_string()
        ),
    );
    let database = dir.path().join("muninn.db").display().to_string();
    let env = vec![("MUNINN_CRASH_KEY".to_string(), "sk-test-crash".to_string())];
    let size = Size::from_env(3, 24);
    run(
        "sqlite, claude-cli children",
        dir.path(),
        &database,
        1,
        Victim::CliChild,
        env,
        size,
    )
    .await;
    server.stop().await.unwrap();
}

/// The checker can fail: a posted delivery the mailbox never got is lost, a seq answered by
/// two batches is duplicated, and an outbox the transcript does not replay to is a problem.
#[tokio::test]
async fn the_checker_counts_lost_and_duplicated_deliveries() {
    use muninn_store::{Mind, NewDelivery, NewOutboxMessage};
    let dir = tempfile::tempdir().unwrap();
    let store = muninn_store::open(dir.path().join("c.db").to_str().unwrap())
        .await
        .unwrap();
    store
        .create_mind(&Mind {
            id: "vala".into(),
            display_name: "vala".into(),
            config: serde_json::Value::Null,
            created_at_ms: 1,
        })
        .await
        .unwrap();
    for id in ["a", "b"] {
        let delivery = NewDelivery {
            room: "#swarm".into(),
            sender: "ari".into(),
            is_direct: false,
            to_you: false,
            text: id.into(),
            source_id: id.into(),
            received_at_ms: 1,
            context: Vec::new(),
        };
        store.post_delivery("vala", &delivery).await.unwrap();
    }
    let lease = store
        .acquire_lease("vala", "checker", 60_000, 1)
        .await
        .unwrap()
        .unwrap();
    let message = |id: &str| NewOutboxMessage {
        request_id: id.into(),
        room: "#swarm".into(),
        text: "hi".into(),
        created_at_ms: 1,
    };
    store
        .enqueue_outbox(
            "vala",
            lease.token,
            &[message("vala-1-2-0"), message("vala-2-2-0")],
        )
        .await
        .unwrap();
    store.ack_through("vala", lease.token, 2).await.unwrap();
    let posted: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let check = check_mind(store.as_ref(), "vala", &posted).await.unwrap();
    assert_eq!((check.lost, check.duplicated), (1, 1), "{check:?}");
    assert!(
        check.problems.iter().any(|p| p.contains("transcript")),
        "{check:?}"
    );
}
