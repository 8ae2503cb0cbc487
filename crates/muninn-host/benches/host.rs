//! The host's own cost per turn: throughput, added latency and memory per idle Mind.
//!
//! `cargo bench -p muninn-host --bench host`. Every run prints its parameters, then one table row
//! per store in `MUNINN_BENCH_STORES` (default `sqlite-full,sqlite,postgres`: SQLite as it was
//! before group commit, SQLite with it, then PostgreSQL when `psql` reaches 127.0.0.1):
//!
//! - **turns/s** — `MUNINN_BENCH_MINDS` Minds (default 50), each with `MUNINN_BENCH_DELIVERIES`
//!   (default 40) deliveries pre-posted, each a DM in its own room so every delivery is its own
//!   batch and its own Persona turn. One task per Mind calls [`MindRunner::step`] until the Mind
//!   is idle; Persona turns completed over wall time.
//! - **added latency** — per Persona turn, the time of `step()` minus the time spent inside the
//!   backend (`start`, `turn`, `ping` of a wrapping [`Backend`]), p50 / p99 / max in ms: under the
//!   load above, and for one Mind stepping alone (`MUNINN_BENCH_SOLO`, default 300 turns), which
//!   is the host's cost without queueing behind other Minds. The backend's time includes the
//!   Anthropic backend's request building and reply parsing (the simulator runs behind the same
//!   `AnthropicBackend` as the real API), so "added" is the runtime and the store.
//! - **fsyncs/turn** — the group commit's WAL fsyncs per Persona turn under that load (SQLite
//!   with group commit only: `synchronous=FULL` syncs inside SQLite, once per commit).
//! - **id guard** (SQLite, a line under the table) — counters compared with the identity file
//!   and rewrites of that file per Persona turn under that load: the check follows the counters a
//!   turn bumps, so a count that grows with `MUNINN_BENCH_MINDS` is issue 13 back.
//! - **memory per idle Mind** — `MUNINN_BENCH_IDLE` Minds (default `1000,10000`, cumulative)
//!   registered, given one delivery and stepped once each (one turn), then kept idle; growth of
//!   `VmRSS` (`/proc/self/status`) per Mind, and the projection for 10,000. The in-process
//!   simulator's provider-side cache lives in the same process and is included: a host on the
//!   real API would not hold it.
//!
//! The simulator's clock is frozen (`T0`), so the decider sees no idle gaps and the lease never
//! expires; every commit is durable: SQLite in WAL mode in `MUNINN_BENCH_DIR` (default the
//! system temp dir), and PostgreSQL with its defaults in a fresh database created and dropped
//! with `psql`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/watched.rs"]
mod watched;

use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::config::{Config, MindConfig};
use muninn_host::runtime::{MindRunner, RuntimeError, Step};
use muninn_sim::SimClock;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use muninn_store::{
    IdGuardStats, NewDelivery, SqliteStore, StartOptions, Store, StoreError, SyncMode,
};
use muninn_testkit::peers::FreshDatabase;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use watched::{Call, Watch, Watched};

const T0: i64 = 1_800_000_000_000;

/// Steps that failed with the store busy (no pooled connection within its timeout) and were
/// retried, as the host retries them.
static BUSY_RETRIES: AtomicU64 = AtomicU64::new(0);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Records the time spent inside the backend's calls that reach the model.
struct Timed(Arc<AtomicU64>);

impl Watch for Timed {
    fn after(&self, _call: Call, started: Instant) {
        self.0
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// One Mind under test, with its backend-time counter.
struct Driven {
    runner: MindRunner<Watched<SimBackend, Timed>>,
    spent_ns: Arc<AtomicU64>,
}

impl Driven {
    /// Steps once; returns the step and (whole step, time in the backend).
    async fn step(&mut self) -> (Step, Duration, Duration) {
        let before = self.spent_ns.load(Ordering::Relaxed);
        let started = Instant::now();
        // A store too busy to hand out a connection in time fails the step; the host retries
        // such a step on the Mind's own backoff, so the bench does the same and counts it.
        let step = loop {
            match self.runner.step().await {
                Ok(step) => break step,
                Err(
                    RuntimeError::Store(StoreError::Busy(_))
                    | RuntimeError::Held(StoreError::Busy(_)),
                ) => {
                    BUSY_RETRIES.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("step failed: {e}"),
            }
        };
        let total = started.elapsed();
        let backend = Duration::from_nanos(self.spent_ns.load(Ordering::Relaxed) - before);
        (step, total, backend)
    }
}

struct Bench {
    host: Host,
    sim: Arc<Simulator>,
    doctrine: String,
}

impl Bench {
    fn mind(&self, id: &str) -> MindConfig {
        let mut mind: MindConfig = toml::from_str(&format!(
            "id = '{id}'\nrooms = ['#swarm']\nturns_per_wake = 1000000\n"
        ))
        .unwrap();
        mind.doctrine_text = Some(self.doctrine.clone());
        mind
    }

    async fn driven(&self, id: &str) -> Driven {
        let spent_ns = Arc::new(AtomicU64::new(0));
        let backend = || Watched {
            inner: SimBackend::new(
                InProcess::new(self.sim.clone()),
                self.host.clock.clone(),
                PriceTable::embedded(),
            ),
            watch: Timed(spent_ns.clone()),
        };
        let runner = MindRunner::new(
            self.host.clone(),
            self.mind(id),
            "bench-host".to_string(),
            &PriceTable::embedded(),
            backend(),
            backend(),
        )
        .unwrap();
        runner.register().await.unwrap();
        Driven { runner, spent_ns }
    }

    /// Posts `n` deliveries to `mind`, each a DM in its own room (so each is its own batch).
    async fn post(&self, mind: &str, n: usize) {
        for i in 0..n {
            let room = format!("@user{i}:example.org");
            self.host
                .store
                .post_delivery(
                    mind,
                    &NewDelivery {
                        room: room.clone(),
                        sender: room,
                        is_direct: true,
                        text: format!("message {i}: what did we decide about the release?"),
                        source_id: format!("{mind}-{i}"),
                        received_at_ms: T0,
                        to_you: true,
                        context: Vec::new(),
                    },
                )
                .await
                .unwrap();
        }
    }
}

/// Steps until idle; returns the added latency (step − backend) of each Persona turn.
async fn drain(mut driven: Driven) -> (Driven, Vec<Duration>) {
    let mut added = Vec::new();
    loop {
        match driven.step().await {
            (Step::PersonaTurn { valid, .. }, total, backend) => {
                assert!(valid);
                added.push(total.saturating_sub(backend));
            }
            (Step::Idle { .. }, _, _) => return (driven, added),
            (other, _, _) => panic!("unexpected step {other:?}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn latency(mut added: Vec<Duration>) -> String {
    added.sort();
    format!(
        "{:.2} / {:.2} / {:.2}",
        percentile(&added, 0.5),
        percentile(&added, 0.99),
        percentile(&added, 1.0)
    )
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

struct Row {
    store: String,
    turns_per_s: f64,
    /// WAL fsyncs of the group commit per Persona turn under load (SQLite grouped only).
    fsyncs_per_turn: Option<f64>,
    /// Steps of the loaded run retried after the store was too busy to give a connection.
    busy_retries: u64,
    /// SQLite: the id guard's counters checked and identity-file rewrites per Persona turn.
    id_guard_per_turn: Option<(f64, f64)>,
    loaded: String,
    solo: String,
    memory: Vec<(usize, f64)>,
}

/// The group commit's fsync counter, for stores that have one.
type Fsyncs = Option<Box<dyn Fn() -> u64>>;

/// The id guard's counts, for SQLite stores.
type IdGuard = Option<Box<dyn Fn() -> IdGuardStats>>;

async fn run(
    store_name: &str,
    store: Arc<dyn Store>,
    fsyncs: Fsyncs,
    id_guard: IdGuard,
    minds: usize,
    deliveries: usize,
) -> Row {
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..SimConfig::default()
    }));
    let config: Config = toml::from_str("").unwrap();
    let bench = Arc::new(Bench {
        host: Host::new(store, config, Arc::new(SimClock(sim.clone()))),
        sim,
        doctrine: "You are a careful and curious mind of the swarm. ".repeat(40),
    });

    // (b, solo) One Mind alone: the host's cost without queueing.
    let solo_turns = env_or("MUNINN_BENCH_SOLO", 300);
    let solo = bench.driven("solo").await;
    bench.post("solo", solo_turns).await;
    let (_, solo_added) = drain(solo).await;
    assert_eq!(solo_added.len(), solo_turns);

    // (a) and (b, loaded): N Minds stepping concurrently.
    let mut driven = Vec::new();
    for m in 0..minds {
        let id = format!("m{m}");
        driven.push(bench.driven(&id).await);
        bench.post(&id, deliveries).await;
    }
    let fsyncs_before = fsyncs.as_ref().map(|f| f());
    let id_guard_before = id_guard.as_ref().map(|f| f());
    let busy_before = BUSY_RETRIES.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for d in driven {
        tasks.spawn(drain(d));
    }
    let mut loaded = Vec::new();
    while let Some(done) = tasks.join_next().await {
        loaded.extend(done.unwrap().1);
    }
    let elapsed = started.elapsed();
    assert_eq!(loaded.len(), minds * deliveries);
    let turns_per_s = loaded.len() as f64 / elapsed.as_secs_f64();
    let busy_retries = BUSY_RETRIES.load(Ordering::Relaxed) - busy_before;
    let fsyncs_per_turn = fsyncs
        .as_ref()
        .zip(fsyncs_before)
        .map(|(f, before)| (f() - before) as f64 / loaded.len() as f64);
    let id_guard_per_turn = id_guard.as_ref().zip(id_guard_before).map(|(f, before)| {
        let now = f();
        let per_turn = |n: u64| n as f64 / loaded.len() as f64;
        (
            per_turn(now.counters_checked - before.counters_checked),
            per_turn(now.reservations - before.reservations),
        )
    });

    let memory = idle_memory(&bench).await;
    bench.host.store.close().await;
    Row {
        store: store_name.to_string(),
        turns_per_s,
        busy_retries,
        fsyncs_per_turn,
        id_guard_per_turn,
        loaded: latency(loaded),
        solo: latency(solo_added),
        memory,
    }
}

/// (c) Memory per idle Mind: cumulative steps of registered, stepped-once, idle Minds; for each
/// count of `MUNINN_BENCH_IDLE`, the MiB the process grew by per idle Mind.
async fn idle_memory(bench: &Bench) -> Vec<(usize, f64)> {
    let idle_steps: Vec<usize> = std::env::var("MUNINN_BENCH_IDLE")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let mut idle: Vec<Driven> = Vec::new();
    let mut memory = Vec::new();
    let base = rss_kib();
    for &target in &idle_steps {
        let mut fresh = Vec::new();
        for m in idle.len()..target {
            let id = format!("idle{m}");
            fresh.push(bench.driven(&id).await);
            bench.post(&id, 1).await;
        }
        // Step them, a few tasks at a time, each once (one turn), and keep them.
        let chunk = fresh.len().div_ceil(8).max(1);
        let mut tasks = tokio::task::JoinSet::new();
        while !fresh.is_empty() {
            let part: Vec<Driven> = fresh.drain(..chunk.min(fresh.len())).collect();
            tasks.spawn(async move {
                let mut out = Vec::with_capacity(part.len());
                for mut d in part {
                    assert!(matches!(d.step().await.0, Step::PersonaTurn { .. }));
                    assert!(matches!(d.step().await.0, Step::Idle { .. }));
                    out.push(d);
                }
                out
            });
        }
        while let Some(done) = tasks.join_next().await {
            idle.extend(done.unwrap());
        }
        let grown = rss_kib().saturating_sub(base);
        memory.push((idle.len(), grown as f64 / 1024.0 / idle.len() as f64));
    }
    memory
}

fn main() {
    let minds = env_or("MUNINN_BENCH_MINDS", 50);
    let deliveries = env_or("MUNINN_BENCH_DELIVERIES", 40);
    let workers = env_or("MUNINN_BENCH_WORKERS", 2);
    let dir = tempfile::tempdir_in(
        std::env::var("MUNINN_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    )
    .unwrap();
    println!(
        "muninn-host bench: the host's own cost per turn (in-process simulator, frozen clock)"
    );
    println!(
        "  minds={minds} deliveries/mind={deliveries} (one DM batch each) solo_turns={} idle={} \
         tokio_workers={workers} doctrine_bytes={}",
        env_or("MUNINN_BENCH_SOLO", 300),
        std::env::var("MUNINN_BENCH_IDLE").unwrap_or_else(|_| "1000,10000".into()),
        "You are a careful and curious mind of the swarm. ".len() * 40,
    );
    println!(
        "  sqlite-full: WAL, synchronous=FULL (an fsync inside every commit, as before group \
         commit); sqlite: WAL, synchronous=NORMAL + group commit (a shared fsync after commits); \
         in {}; postgres: fresh database on 127.0.0.1 via psql",
        dir.path().display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let stores = std::env::var("MUNINN_BENCH_STORES")
        .unwrap_or_else(|_| "sqlite-full,sqlite,postgres".into());
    let rows: Vec<Row> = runtime.block_on(async {
        let mut rows = Vec::new();
        for name in stores.split(',').map(str::trim) {
            rows.extend(bench_store(name, dir.path(), minds, deliveries).await);
        }
        rows
    });
    print_rows(&rows);
    println!("aims: >= 2000 turns/s, p99 added < 2 ms, 10,000 idle Minds < 1 GiB");
}

/// Runs the bench on one store (`sqlite-full`, `sqlite` or `postgres`); `None` when PostgreSQL
/// cannot be reached (said on stdout).
async fn bench_store(
    name: &str,
    dir: &std::path::Path,
    minds: usize,
    deliveries: usize,
) -> Option<Row> {
    let sqlite = |sync| {
        let path = dir.join(format!("{name}.db"));
        async move {
            Arc::new(
                SqliteStore::open_with_sync(path, StartOptions::default(), sync)
                    .await
                    .unwrap(),
            )
        }
    };
    Some(match name {
        "sqlite-full" => {
            let store = sqlite(SyncMode::EveryCommit).await;
            let counter = store.clone();
            let id_guard: IdGuard = Some(Box::new(move || counter.id_guard_stats()));
            run(name, store, None, id_guard, minds, deliveries).await
        }
        "sqlite" => {
            let store = sqlite(SyncMode::Grouped).await;
            let counter = store.clone();
            let fsyncs: Fsyncs = Some(Box::new(move || counter.fsyncs()));
            let counter = store.clone();
            let id_guard: IdGuard = Some(Box::new(move || counter.id_guard_stats()));
            run(name, store, fsyncs, id_guard, minds, deliveries).await
        }
        "postgres" => match FreshDatabase::create("muninn_bench") {
            Ok(database) => {
                let store = muninn_store::open(&database.url()).await.unwrap();
                run(name, store, None, None, minds, deliveries).await
            }
            Err(e) => {
                println!("  SKIP postgres: {e}");
                return None;
            }
        },
        other => panic!("unknown store {other:?} in MUNINN_BENCH_STORES"),
    })
}

/// The table of every store's figures, then the lines that only some rows have.
fn print_rows(rows: &[Row]) {
    println!();
    println!(
        "{:<11} {:>8} {:>12} {:>26} {:>26} {:>34}",
        "store",
        "turns/s",
        "fsyncs/turn",
        "added ms p50/p99/max (N)",
        "added ms p50/p99/max (1)",
        "MiB per idle Mind (Minds)"
    );
    for row in rows {
        let memory = row
            .memory
            .iter()
            .map(|(n, per)| format!("{per:.3} ({n})"))
            .collect::<Vec<_>>()
            .join(", ");
        let fsyncs = row
            .fsyncs_per_turn
            .map_or("-".to_string(), |f| format!("{f:.3}"));
        println!(
            "{:<11} {:>8.0} {:>12} {:>26} {:>26} {:>34}",
            row.store, row.turns_per_s, fsyncs, row.loaded, row.solo, memory
        );
    }
    for row in rows {
        if let Some((checked, reservations)) = row.id_guard_per_turn {
            println!(
                "{}: id guard per turn: {checked:.2} counters checked, {reservations:.3} \
                 identity-file rewrites",
                row.store
            );
        }
    }
    for row in rows.iter().filter(|r| r.busy_retries > 0) {
        println!(
            "{}: {} steps under load failed with the store busy and were retried after 250 ms \
             (as the host retries them; their wait is in the added latency)",
            row.store, row.busy_retries
        );
    }
    for row in rows {
        if let Some((_, per)) = row.memory.last() {
            println!(
                "{}: 10,000 idle Minds ≈ {:.0} MiB (aim < 1024)",
                row.store,
                per * 10_000.0
            );
        }
    }
}
