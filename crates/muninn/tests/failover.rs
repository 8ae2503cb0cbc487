//! Several real `muninn serve` hosts on one database: wake-ups across hosts and no stall on
//! restart or failover (issue 13).
//!
//! - **Wake-ups.** Two hosts on a fresh PostgreSQL database; deliveries posted through the
//!   host that does *not* hold the Mind's lease, one at a time. Each one's latency runs from
//!   the POST to the moment the Mind's ack position covers it (the turn is recorded), polled
//!   on the store every 2 ms. Printed as p50/p99; the goal is p99 < 100 ms on the simulator,
//!   and the test fails when the cross-host p99 is over [`WAKE_P99_FAIL`] beyond the p99 of the
//!   same deliveries posted through the holder itself, alternating with them (so a loaded
//!   machine's slow turns do not fail it; a missing wake-up does). Without cross-host wake-ups
//!   the holder sees a delivery only at its next periodic look, a third of the lease (10 s
//!   here).
//! - **Failover.** The holder is killed with SIGKILL while the other host waits; the first
//!   turn for a delivery posted right after must come within [`STALL_FAIL`] (goal 2 s) — the
//!   lease (30 s) is far from run out, so only the dead host's freed presence lets it move.
//!   Twice (the killed host comes back and waits, then the new holder is killed), judged on
//!   the faster: a loaded server once took ~10 s to free a killed client's session lock, and a
//!   failover that does not work stalls both.
//! - **Restart.** The surviving holder is killed and restarted on its own data directory; the
//!   first turn after the kill (the restart's start-up included) must come within
//!   [`STALL_FAIL`]. On SQLite the same, with a single host, and its log must name the proof
//!   (an earlier process of its own instance).
//!
//! Every delivery is answered exactly once throughout: outbox request ids are unique, and
//! the old holder's token is fenced (a new, greater token after each move).

use crate::serving::{Spawned, serve_command, spawn_ready};
use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_store::Store;
use muninn_testkit::peers::FreshDatabase;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIND: &str = "vala";
/// Long, so that waiting out a lease (or a third of it) cannot pass for a fast move.
const LEASE_TTL_MS: u64 = 30_000;
/// A cross-host p99 more than this above the same-host p99 fails (the goal is a cross-host p99
/// under 100 ms; a missed wake-up costs up to a third of the lease, 10 s).
const WAKE_P99_FAIL: Duration = Duration::from_secs(1);
/// A first turn after a kill later than this fails (the goal is 2 s).
const STALL_FAIL: Duration = Duration::from_secs(5);
/// Deliveries timed through the other host.
const TIMED: usize = 100;

/// One running `muninn serve`, on a data directory of its own.
struct Served {
    child: Child,
    addr: String,
    data_dir: PathBuf,
    stderr: PathBuf,
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
    /// Starts `muninn serve` on `database` with data directory `data_dir`, waits for its ready
    /// line, and returns its index.
    fn start(&mut self, config: &Path, data_dir: &Path, database: &str) -> usize {
        let index = self.0.len();
        let stderr = data_dir.with_extension(format!("{index}.stderr"));
        let mut command = serve_command(
            config,
            data_dir,
            database,
            "warn,muninn_host::runtime::takeover=info",
        );
        let Spawned { child, line, addr } = spawn_ready(&mut command, &stderr);
        self.0.push(Served {
            child,
            addr: addr.clone().unwrap_or_default(),
            data_dir: data_dir.to_path_buf(),
            stderr: stderr.clone(),
        });
        assert!(
            addr.is_some(),
            "host {index} printed no ready line ({line:?}); stderr:\n{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        index
    }

    /// SIGKILL: no release, no clean close of anything.
    fn kill(&mut self, index: usize) -> Instant {
        self.0[index].child.kill().unwrap();
        self.0[index].child.wait().unwrap();
        Instant::now()
    }

    fn client(&self, index: usize) -> ApiClient {
        let served = &self.0[index];
        let token = ApiToken::read(&served.data_dir.join("api-token")).unwrap();
        ApiClient::new(&served.addr, token).unwrap()
    }

    /// The index of the host whose pid ends the lease holder's name.
    fn index_of(&self, holder: &str) -> Option<usize> {
        self.0
            .iter()
            .position(|s| holder.ends_with(&format!("-{}", s.child.id())))
    }

    fn stderr(&self) -> String {
        self.0
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "--- host {i} stderr:\n{}",
                    std::fs::read_to_string(&s.stderr).unwrap_or_default()
                )
            })
            .collect()
    }
}

fn config(dir: &Path) -> PathBuf {
    crate::serving::sim_config(dir, MIND, LEASE_TTL_MS)
}

/// Posts delivery `i` (a public message) and returns its seq.
async fn post(client: &ApiClient, i: usize) -> i64 {
    let request = crate::serving::question("failover", i);
    client.post_delivery(MIND, &request).await.unwrap().seq
}

/// Waits (polling every 2 ms) until the Mind acknowledged `seq`, up to `limit`; the time taken.
async fn acked(store: &Arc<dyn Store>, seq: i64, limit: Duration, hosts: &Hosts) -> Duration {
    let started = Instant::now();
    loop {
        if store.ack_position(MIND).await.unwrap() >= seq {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "delivery {seq} not answered within {limit:?}\n{}",
            hosts.stderr()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until some host holds the lease; returns its index and the lease.
async fn holder(store: &Arc<dyn Store>, hosts: &Hosts) -> (usize, muninn_store::Lease) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(lease) = store.lease(MIND).await.unwrap()
            && let Some(index) = hosts.index_of(&lease.holder)
        {
            return (index, lease);
        }
        assert!(Instant::now() < deadline, "no lease\n{}", hosts.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// No request id twice in the outbox (each batch answered once, whoever held the Mind).
async fn answered_once(store: &Arc<dyn Store>) {
    let outbox = store.unacked_outbox(MIND, 10_000).await.unwrap();
    let ids: BTreeSet<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids.len(), outbox.len(), "a request id twice: {outbox:?}");
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// The latency of one delivery posted through `client` (numbered `i`): from just before the
/// POST until the Mind's ack covers it.
async fn time_one(store: &Arc<dyn Store>, hosts: &Hosts, client: &ApiClient, i: usize) -> Duration {
    let started = Instant::now();
    let seq = post(client, i).await;
    acked(store, seq, Duration::from_secs(20), hosts).await;
    started.elapsed()
}

/// Prints a sample's p50/p99/max under `label`; returns (p50, p99).
fn report(label: &str, latencies: &mut [Duration]) -> (Duration, Duration) {
    latencies.sort();
    let (p50, p99) = (percentile(latencies, 50), percentile(latencies, 99));
    eprintln!(
        "{label}: delivery-to-turn latency over {} deliveries: p50 {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        p50.as_millis(),
        p99.as_millis(),
        latencies[latencies.len() - 1].as_millis()
    );
    (p50, p99)
}

/// The first turn for a delivery posted through `via` right after `since` (a kill), as time
/// since the kill; fails above [`STALL_FAIL`].
async fn first_turn_after(
    store: &Arc<dyn Store>,
    hosts: &Hosts,
    via: usize,
    i: usize,
    since: Instant,
) -> Duration {
    let took = first_turn_took(store, hosts, via, i, since).await;
    assert!(
        took < STALL_FAIL,
        "first turn after {took:?}\n{}",
        hosts.stderr()
    );
    took
}

/// [`first_turn_after`] without the verdict (the caller judges).
async fn first_turn_took(
    store: &Arc<dyn Store>,
    hosts: &Hosts,
    via: usize,
    i: usize,
    since: Instant,
) -> Duration {
    let seq = post(&hosts.client(via), i).await;
    acked(
        store,
        seq,
        Duration::from_secs(LEASE_TTL_MS / 1000 + 10),
        hosts,
    )
    .await;
    since.elapsed()
}

/// After a warm-up turn, deliveries alternately through the holder itself (what a turn costs
/// without crossing hosts) and through the other host, so both see the same load on the
/// machine: the cross-host p99 is within [`WAKE_P99_FAIL`] of the same-host p99.
async fn cross_host_wake_ups_cost_no_more_than_the_bound(
    store: &Arc<dyn Store>,
    hosts: &Hosts,
    leader: usize,
    other: usize,
) {
    let seq = post(&hosts.client(other), 0).await;
    acked(store, seq, Duration::from_secs(20), hosts).await;
    let (same_client, other_client) = (hosts.client(leader), hosts.client(other));
    let (mut same, mut cross) = (Vec::new(), Vec::new());
    for i in 1..=TIMED {
        same.push(time_one(store, hosts, &same_client, 2 * i).await);
        cross.push(time_one(store, hosts, &other_client, 2 * i + 1).await);
    }
    let (same_p50, same_p99) = report("same host", &mut same);
    let (p50, p99) = report("cross-host", &mut cross);
    eprintln!(
        "cross-host wake-up adds p50 {} ms, p99 {} ms over the same host (goal: cross-host p99 \
         < 100 ms)",
        p50.as_millis() as i128 - same_p50.as_millis() as i128,
        p99.as_millis() as i128 - same_p99.as_millis() as i128,
    );
    assert!(
        p99 < same_p99 + WAKE_P99_FAIL,
        "cross-host p99 {p99:?}\n{}",
        hosts.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_hosts_wake_each_other_and_take_over_without_stalls() {
    let Some(db) = FreshDatabase::for_test("muninn_failover", "failover on PostgreSQL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let database = db.url();
    let mut hosts = Hosts::default();
    hosts.start(&config, &dir.path().join("a"), &database);
    hosts.start(&config, &dir.path().join("b"), &database);
    let store = muninn_store::open(&database).await.unwrap();
    let (leader, first_lease) = holder(&store, &hosts).await;
    let other = 1 - leader;

    // Warm up (the session's first turn), then time deliveries through the other host.
    cross_host_wake_ups_cost_no_more_than_the_bound(&store, &hosts, leader, other).await;
    let still = store.lease(MIND).await.unwrap().unwrap();
    assert_eq!(still.token, first_lease.token, "the lease never moved");

    // Failover: the holder dies; the other, waiting, takes the Mind over at once.
    let killed = hosts.kill(leader);
    let took = first_turn_took(&store, &hosts, other, 1_000, killed).await;
    eprintln!(
        "failover: first turn {} ms after kill -9 of the holder, a second host waiting \
         (lease {LEASE_TTL_MS} ms; goal < 2000 ms)",
        took.as_millis()
    );
    let moved = store.lease(MIND).await.unwrap().unwrap();
    assert_eq!(hosts.index_of(&moved.holder), Some(other));
    assert!(moved.token > first_lease.token, "a new fencing token");
    answered_once(&store).await;

    // Failover back: the killed host returns (on its data directory) and waits; the holder
    // dies. The verdict is on the faster of the two failovers: under a heavily loaded CI the
    // server once took ~10 s to free a killed client's session lock, while a failover that
    // does not work stalls both (until a look a third of the lease away, or the lease's end).
    let waiting = hosts.start(&config, &hosts.0[leader].data_dir.clone(), &database);
    let seq = post(&hosts.client(waiting), 1_500).await;
    acked(&store, seq, Duration::from_secs(20), &hosts).await;
    let killed = hosts.kill(other);
    let again = first_turn_took(&store, &hosts, waiting, 1_600, killed).await;
    eprintln!(
        "failover back: first turn {} ms after kill -9 of the holder, the restarted host waiting",
        again.as_millis()
    );
    assert!(
        took.min(again) < STALL_FAIL,
        "both failovers stalled: {took:?}, {again:?}\n{}",
        hosts.stderr()
    );
    let moved = store.lease(MIND).await.unwrap().unwrap();
    assert_eq!(hosts.index_of(&moved.holder), Some(waiting));
    answered_once(&store).await;
    let other = waiting;

    // Restart: the new holder dies and comes back on its own data directory.
    let killed = hosts.kill(other);
    let data_dir = hosts.0[other].data_dir.clone();
    let restarted = hosts.start(&config, &data_dir, &database);
    let took = first_turn_after(&store, &hosts, restarted, 2_000, killed).await;
    eprintln!(
        "restart (PostgreSQL): first turn {} ms after kill -9 and restart on the same data \
         directory (lease {LEASE_TTL_MS} ms; goal < 2000 ms)",
        took.as_millis()
    );
    let back = store.lease(MIND).await.unwrap().unwrap();
    assert_eq!(hosts.index_of(&back.holder), Some(restarted));
    assert!(back.token > moved.token, "a new fencing token");
    answered_once(&store).await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_host_restarted_on_its_data_dir_takes_its_mind_back_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let data_dir = dir.path().join("a");
    let database = data_dir.join("muninn.db").display().to_string();
    let mut hosts = Hosts::default();
    let first = hosts.start(&config, &data_dir, &database);
    let store = muninn_store::open(&database).await.unwrap();
    let seq = post(&hosts.client(first), 0).await;
    acked(&store, seq, Duration::from_secs(20), &hosts).await;
    let (_, before) = holder(&store, &hosts).await;

    let killed = hosts.kill(first);
    let restarted = hosts.start(&config, &data_dir, &database);
    let took = first_turn_after(&store, &hosts, restarted, 1, killed).await;
    eprintln!(
        "restart (SQLite): first turn {} ms after kill -9 and restart on the same data \
         directory (lease {LEASE_TTL_MS} ms; goal < 2000 ms)",
        took.as_millis()
    );
    let after = store.lease(MIND).await.unwrap().unwrap();
    assert!(after.token > before.token, "a new fencing token");
    let log = std::fs::read_to_string(&hosts.0[restarted].stderr).unwrap();
    assert!(
        log.contains("earlier process of this instance"),
        "the restart names its proof:\n{log}"
    );
    answered_once(&store).await;
    store.close().await;
}
