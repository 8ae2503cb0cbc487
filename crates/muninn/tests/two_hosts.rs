//! Two real `muninn serve` processes on one database run each Mind once (DESIGN invariant 7).
//!
//! Both hosts share the database and the data directory (so the API token) and listen on their
//! own ephemeral ports, read from each one's ready line. Deliveries are posted through both with
//! `muninn say`; the test waits until the mailbox is drained and then checks, from the store
//! itself, that exactly one host holds the lease and kept it, and that every delivery was
//! answered exactly once: the outbox request ids `<mind>-<first>-<last>-<index>` name batches
//! that partition the delivery seqs, each batch has one outbox message and one Persona ledger
//! row. Then the lease holder is killed (SIGKILL: no release) and the survivor must take over
//! within the lease TTL plus its retry interval, answer new deliveries, and send nothing twice.
//!
//! The hosts run with `lease_ttl_ms = 3000` so a takeover takes seconds, not half a minute.
//! SQLite runs on a temporary file; PostgreSQL on a fresh database created with `psql` and
//! dropped afterwards (`muninn_testkit::peers::FreshDatabase`: a failure when `psql` cannot reach
//! 127.0.0.1, a skip with a note only under `MUNINN_SKIP_PEERS=1`). Every child is killed on the way
//! out, pass or fail.

use crate::serving::{Spawned, serve_command, spawn_ready};
use muninn_store::{LedgerQuery, Store};
use muninn_testkit::peers::FreshDatabase;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIND: &str = "vala";
const LEASE_TTL_MS: u64 = 3_000;

/// One running `muninn serve`.
struct Served {
    child: Child,
    addr: String,
    stderr: PathBuf,
}

impl Served {
    /// The lease holder name this process uses (`<hostname>-<pid>`).
    fn holder_suffix(&self) -> String {
        format!("-{}", self.child.id())
    }
}

/// Kills every child it holds when dropped, so a failed assertion leaves no host running.
#[derive(Default)]
struct Hosts(Vec<Served>);

impl Drop for Hosts {
    fn drop(&mut self) {
        for served in &mut self.0 {
            let _ = served.child.kill();
            let _ = served.child.wait();
        }
    }
}

impl Hosts {
    /// Starts `muninn serve` on `database` and waits for its ready line.
    fn start(&mut self, dir: &Path, database: &str) -> usize {
        let index = self.0.len();
        let stderr = dir.join(format!("serve-{index}.stderr"));
        let mut command = serve_command(&dir.join("muninn.toml"), dir, database, "warn");
        let Spawned { child, line, addr } = spawn_ready(&mut command, &stderr);
        self.0.push(Served {
            child,
            addr: addr.clone().unwrap_or_default(),
            stderr: stderr.clone(),
        });
        assert!(
            addr.is_some(),
            "host {index} printed no ready line ({line:?}); stderr:\n{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        index
    }

    fn stderr(&self) -> String {
        self.0
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "--- host {i} (pid {}) stderr:\n{}",
                    s.child.id(),
                    std::fs::read_to_string(&s.stderr).unwrap_or_default()
                )
            })
            .collect()
    }
}

/// `muninn <args>` against the host at `addr`; panics (with stderr) on failure.
fn muninn(dir: &Path, addr: &str, args: &[&str]) -> String {
    let output: Output = Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(args)
        .args(["--addr", addr])
        .arg("--token-file")
        .arg(dir.join("api-token"))
        .env_remove("MUNINN_CONFIG")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "muninn {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The live lease holder `muninn status` shows for the Mind (`None`: none, or expired).
fn status_holder(dir: &Path, addr: &str) -> Option<String> {
    let out = muninn(dir, addr, &["status", "--format", "json"]);
    let status: serde_json::Value = serde_json::from_str(&out).ok()?;
    let mind = status["minds"]
        .as_array()?
        .iter()
        .find(|m| m["id"] == MIND)?;
    let holder = mind["lease"]["holder"].as_str()?;
    (mind["lease_live"] == true).then(|| holder.to_string())
}

/// Posts delivery `i` through the host at `addr`: public messages in `#swarm`, every third a
/// DM from its own sender (so batches split).
fn say(dir: &Path, addr: &str, i: usize) {
    let text = format!("message {i}: what do you remember?");
    let source = format!("two-hosts-{i}");
    let sender = format!("@user{i}:example.org");
    let mut args = vec!["say", MIND, &text, "--source-id", &source];
    if i % 3 == 2 {
        args.extend(["--dm", "--sender", &sender]);
    }
    let out = muninn(dir, addr, &args);
    assert!(out.starts_with("delivered to vala"), "{out}");
}

/// Waits until the Mind has acknowledged delivery `seq`.
async fn drained(store: &Arc<dyn Store>, seq: i64, hosts: &Hosts) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ack = store.ack_position(MIND).await.unwrap();
        if ack >= seq {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the mailbox was not drained: acked through {ack} of {seq}\n{}",
            hosts.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every delivery 1..=`seqs` answered exactly once: the outbox's batches partition the seqs,
/// request ids are unique, one message per batch, one Persona turn row per batch.
pub(crate) async fn answered_once(store: &Arc<dyn Store>, seqs: i64) {
    let outbox = store.unacked_outbox(MIND, 10_000).await.unwrap();
    let ids: Vec<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "a request id twice: {ids:?}");
    let mut batches: Vec<(i64, i64)> = Vec::new();
    for id in &ids {
        // `vala-<first>-<last>-<index>`
        let parts: Vec<&str> = id.rsplitn(4, '-').collect();
        assert_eq!(parts.len(), 4, "{id}");
        assert_eq!(parts[0], "0", "more than one message for a batch: {ids:?}");
        batches.push((parts[2].parse().unwrap(), parts[1].parse().unwrap()));
    }
    batches.sort();
    let mut next = 1;
    for (first, last) in &batches {
        assert_eq!(
            *first, next,
            "batches do not partition 1..={seqs}: {batches:?}"
        );
        assert!(last >= first, "{batches:?}");
        next = last + 1;
    }
    assert_eq!(next, seqs + 1, "not every delivery answered: {batches:?}");

    let turns = store
        .ledger(&LedgerQuery {
            mind: Some(MIND.into()),
            ..LedgerQuery::default()
        })
        .await
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.row.role == "persona"
                && !e.row.decision.starts_with("ping")
                && e.row.decision != "retry_invalid_reply"
        })
        .count();
    assert_eq!(
        turns,
        batches.len(),
        "Persona turn rows vs batches answered"
    );
}

/// The Mind's lease and which of the hosts holds it, once both hosts report that one holder.
async fn the_one_holder(
    store: &Arc<dyn Store>,
    hosts: &Hosts,
    dir: &Path,
) -> (muninn_store::Lease, usize) {
    let holder = store.lease(MIND).await.unwrap().expect("a lease");
    let leader = hosts
        .0
        .iter()
        .position(|s| holder.holder.ends_with(&s.holder_suffix()))
        .expect("the holder is one of the two hosts");
    for served in &hosts.0 {
        assert_eq!(
            status_holder(dir, &served.addr).as_deref(),
            Some(holder.holder.as_str()),
            "both hosts report the one holder"
        );
    }
    (holder, leader)
}

/// Waits until the host `follower` reports itself the holder, failing after the lease, a
/// third of it (the next look) and 2 s of slack from `killed_at`.
async fn survivor_takes_over(dir: &Path, hosts: &Hosts, follower: usize, killed_at: Instant) {
    let survivor = &hosts.0[follower].addr;
    let bound = Duration::from_millis(LEASE_TTL_MS + LEASE_TTL_MS / 3 + 2_000);
    loop {
        let taken = status_holder(dir, survivor)
            .is_some_and(|h| h.ends_with(&hosts.0[follower].holder_suffix()));
        if taken {
            break;
        }
        assert!(
            killed_at.elapsed() < bound,
            "no takeover within {bound:?}\n{}",
            hosts.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn two_hosts_run_each_mind_once(database: &str, dir: &Path) {
    std::fs::write(
        dir.join("muninn.toml"),
        format!(
            "lease_ttl_ms = {LEASE_TTL_MS}\n[backend]\nkind = 'sim'\n\n[[mind]]\nid = '{MIND}'\n\
             rooms = ['#swarm']\ndoctrine_text = 'You are Vala. Answer briefly.'\n"
        ),
    )
    .unwrap();
    let mut hosts = Hosts::default();
    hosts.start(dir, database);
    hosts.start(dir, database);
    let store = muninn_store::open(database).await.unwrap();

    // Round one: deliveries through both hosts, alternately.
    let mut posted = 0;
    for _ in 0..12 {
        posted += 1;
        say(dir, &hosts.0[posted % 2].addr.clone(), posted);
    }
    drained(&store, posted as i64, &hosts).await;
    let (holder, leader) = the_one_holder(&store, &hosts, dir).await;
    let follower = 1 - leader;
    answered_once(&store, posted as i64).await;

    // Round two: deliveries only through the host that does not run the Mind, one at a time
    // (more than a wake's turn limit), then an idle spell longer than the lease: the holder
    // must see them without a wake-up of its own and keep its lease while idle.
    for _ in 0..6 {
        posted += 1;
        say(dir, &hosts.0[follower].addr.clone(), posted);
        drained(&store, posted as i64, &hosts).await;
    }
    tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS * 3 / 2)).await;
    let still = store.lease(MIND).await.unwrap().expect("a lease");
    assert_eq!(
        (still.holder.as_str(), still.token),
        (holder.holder.as_str(), holder.token),
        "the lease changed hands while its holder was alive\n{}",
        hosts.stderr()
    );
    answered_once(&store, posted as i64).await;

    // The holder dies without releasing: the other takes over once the lease runs out.
    hosts.0[leader].child.kill().unwrap();
    hosts.0[leader].child.wait().unwrap();
    let killed_at = Instant::now();
    let survivor = hosts.0[follower].addr.clone();
    posted += 1;
    say(dir, &survivor, posted);
    survivor_takes_over(dir, &hosts, follower, killed_at).await;
    eprintln!("takeover after {:?}", killed_at.elapsed());
    for _ in 0..5 {
        posted += 1;
        say(dir, &survivor, posted);
    }
    drained(&store, posted as i64, &hosts).await;
    let lease = store.lease(MIND).await.unwrap().expect("a lease");
    assert!(lease.token > holder.token, "a new fencing token");
    answered_once(&store, posted as i64).await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_one_sqlite_file_run_each_mind_once() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("shared.db").display().to_string();
    two_hosts_run_each_mind_once(&database, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_one_postgres_database_run_each_mind_once() {
    let Some(db) = FreshDatabase::for_test("muninn_two_hosts", "two hosts on PostgreSQL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = db.url();
    two_hosts_run_each_mind_once(&url, dir.path()).await;
}
