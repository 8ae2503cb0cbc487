//! Delivery-to-turn latency through the host that holds a Mind and through another host on the
//! same PostgreSQL database (issue 13's goal: cross-host p99 < 100 ms on the simulator).
//!
//! `cargo bench -p muninn --bench cross_host`. Two real `muninn serve` processes of the release
//! build (`CARGO_BIN_EXE_muninn`, which Cargo builds with the bench profile), simulator backend,
//! `lease_ttl_ms = 30000`, on a fresh PostgreSQL database at 127.0.0.1:5432. After one warm-up
//! turn (the session's first), `MUNINN_BENCH_DELIVERIES` deliveries (default 200) are posted one
//! at a time, alternately through the lease holder and through the other host, so both samples
//! see the same load on the machine. Each one's latency runs from just before the `POST` to the
//! moment the Mind's ack position covers it (its turn is recorded), read from the store every
//! millisecond. Prints p50 / p95 / p99 / max per route; prints `FAIL` and exits 1 when the
//! cross-host p99 is 100 ms or more, or the lease moved (a move would time a takeover, not a
//! wake-up). Without cross-host wake-ups a delivery through the other host waits for the
//! holder's next periodic look, a third of the lease (10 s here).
//!
//! `MUNINN_BENCH_LOG` sets the hosts' `RUST_LOG` (default `warn`); their stderr is kept in the
//! temporary directory and printed on a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/serving.rs"]
#[allow(dead_code)]
mod serving;

use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_store::Store;
use muninn_testkit::peers::FreshDatabase;
use serving::{Spawned, serve_command, spawn_ready};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MIND: &str = "vala";
/// Long, so that a delivery the holder only finds at its periodic look (a third of the lease)
/// shows as seconds.
const LEASE_TTL_MS: u64 = 30_000;
/// The goal: a cross-host p99 at or above this fails.
const GOAL_P99: Duration = Duration::from_millis(100);
/// How long one delivery may take before the bench gives up on it.
const GIVE_UP: Duration = Duration::from_secs(20);

/// The running hosts and their stderr files; kills them when dropped or on a failure (which
/// exits without dropping anything).
struct Hosts {
    children: Mutex<Vec<Child>>,
    pids: Vec<u32>,
    clients: Vec<ApiClient>,
    stderr: Vec<PathBuf>,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.kill_all();
    }
}

impl Hosts {
    fn start(dir: &Path, database: &str, count: usize) -> Hosts {
        let config = serving::sim_config(dir, MIND, LEASE_TTL_MS);
        let log = std::env::var("MUNINN_BENCH_LOG").unwrap_or_else(|_| "warn".into());
        let mut hosts = Hosts {
            children: Mutex::new(Vec::new()),
            pids: Vec::new(),
            clients: Vec::new(),
            stderr: Vec::new(),
        };
        for i in 0..count {
            let data_dir = dir.join(format!("host-{i}"));
            let stderr = dir.join(format!("host-{i}.stderr"));
            let mut command = serve_command(&config, &data_dir, database, &log);
            let Spawned { child, line, addr } = spawn_ready(&mut command, &stderr);
            hosts.pids.push(child.id());
            hosts.children.lock().unwrap().push(child);
            hosts.stderr.push(stderr);
            let Some(addr) = addr else {
                fail(
                    &hosts,
                    &format!("host {i} printed no ready line ({line:?})"),
                );
            };
            let token = ApiToken::read(&data_dir.join("api-token")).unwrap();
            hosts.clients.push(ApiClient::new(&addr, token).unwrap());
        }
        hosts
    }

    /// The index of the host whose pid ends the lease holder's name.
    fn index_of(&self, holder: &str) -> Option<usize> {
        self.pids
            .iter()
            .position(|pid| holder.ends_with(&format!("-{pid}")))
    }

    fn kill_all(&self) {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        for child in children.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Prints `FAIL`, the reason and every host's stderr, and exits 1.
fn fail(hosts: &Hosts, reason: &str) -> ! {
    println!("FAIL: {reason}");
    for (i, path) in hosts.stderr.iter().enumerate() {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        eprintln!("--- host {i} stderr:\n{text}");
    }
    hosts.kill_all();
    std::process::exit(1);
}

/// Posts delivery `i` and waits until the Mind's ack covers it; the time from just before the
/// POST.
async fn time_one(store: &Arc<dyn Store>, hosts: &Hosts, via: usize, i: usize) -> Duration {
    let request = serving::question("cross-host", i);
    let started = Instant::now();
    let seq = hosts.clients[via]
        .post_delivery(MIND, &request)
        .await
        .unwrap()
        .seq;
    loop {
        if store.ack_position(MIND).await.unwrap() >= seq {
            return started.elapsed();
        }
        if started.elapsed() > GIVE_UP {
            fail(
                hosts,
                &format!("delivery {i} not answered within {GIVE_UP:?}"),
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Nearest-rank percentile of a sorted sample, ms.
fn percentile_ms(sorted: &[Duration], p: usize) -> f64 {
    let rank = (sorted.len() * p).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

/// Prints one route's figures; returns its p99, ms.
fn report(label: &str, sample: &mut [Duration]) -> f64 {
    sample.sort();
    let p99 = percentile_ms(sample, 99);
    println!(
        "{label:<28} n={:<4} p50 {:>6.1} ms  p95 {:>6.1} ms  p99 {:>6.1} ms  max {:>6.1} ms",
        sample.len(),
        percentile_ms(sample, 50),
        percentile_ms(sample, 95),
        p99,
        sample[sample.len() - 1].as_secs_f64() * 1e3,
    );
    p99
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let deliveries: usize = std::env::var("MUNINN_BENCH_DELIVERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let Ok(db) = FreshDatabase::create("muninn_cross_host") else {
        println!("FAIL: cannot create a database on PostgreSQL at 127.0.0.1:5432");
        std::process::exit(1);
    };
    let dir = tempfile::tempdir().unwrap();
    let database = db.url();
    let hosts = Hosts::start(dir.path(), &database, 2);
    let store = muninn_store::open(&database).await.unwrap();

    // The holder is whichever host took the lease first; the warm-up turn opens the session.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (holder, lease) = loop {
        if let Some(lease) = store.lease(MIND).await.unwrap()
            && let Some(index) = hosts.index_of(&lease.holder)
        {
            break (index, lease);
        }
        if Instant::now() > deadline {
            fail(&hosts, "no host took the lease within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let other = 1 - holder;
    time_one(&store, &hosts, other, 0).await;

    let (mut same, mut cross) = (Vec::new(), Vec::new());
    for i in 1..=deliveries.div_ceil(2) {
        same.push(time_one(&store, &hosts, holder, 2 * i).await);
        cross.push(time_one(&store, &hosts, other, 2 * i + 1).await);
    }
    // `cargo bench` builds the binary with the bench profile; `--profile dev` would time a
    // debug build, which is said rather than passed off as the release figure.
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "cross_host: 2 `muninn serve` ({build} build), simulator, PostgreSQL, lease \
         {LEASE_TTL_MS} ms; delivery POST -> turn recorded (ack covers it)"
    );
    report("through the holder", &mut same);
    let p99 = report("through the other host", &mut cross);
    let still = store.lease(MIND).await.unwrap();
    store.close().await;
    if still.as_ref().map(|l| l.token) != Some(lease.token) {
        fail(&hosts, "the lease moved during the run");
    }
    if p99 >= GOAL_P99.as_secs_f64() * 1e3 {
        fail(
            &hosts,
            &format!("cross-host p99 {p99:.1} ms >= {} ms", GOAL_P99.as_millis()),
        );
    }
    println!(
        "ok: cross-host p99 {p99:.1} ms < {} ms",
        GOAL_P99.as_millis()
    );
}
