//! How long a delivery to an idle Mind waits before its Persona turn starts, with many Minds.
//!
//! `cargo bench -p muninn-host --bench wake`. `MUNINN_BENCH_MINDS` Minds (default 50), each in
//! its own [`run_mind`] task as `muninn serve` runs them, on the in-process simulator (frozen
//! clock, so model time is zero) and SQLite (WAL, group commit: every commit fsynced) in a
//! temporary directory under `MUNINN_BENCH_DIR` (default the system temp dir), with the HTTP API served on loopback.
//! Once every Mind holds its lease and is idle, one DM is posted to each Mind in turn through
//! `POST /v1/minds/{mind}/deliveries` (a shuffled order, not the order the Minds started in),
//! `MUNINN_BENCH_ROUNDS` rounds (default 4; the first turn of a Mind opens its segment, later
//! ones append); after each delivery the bench waits for the turn to finish and then
//! `MUNINN_BENCH_PAUSE_MS` (default 50), so every delivery meets idle Minds.
//!
//! **Latency** is from just before the POST is sent to the moment the runner calls its Persona
//! backend's `turn` for that delivery (after it read the mailbox, decided, rendered and wrote the
//! delivery to the transcript): delivery to turn start, p50 / p95 / p99 / max in ms (nearest
//! rank over every delivery of every round; more than one round, so that p99 is not simply the
//! max). The aim is p99 < 50 ms: the bench prints `FAIL` and exits 1 when it is missed. An idle
//! runner looks at its mailbox on its own only every third of the lease (10 s by default), so a
//! wake-up that reaches the wrong Mind shows as seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/watched.rs"]
mod watched;

use muninn_api::ApiToken;
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_host::runtime::{MindRunner, run_mind};
use muninn_sim::SimClock;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use watched::{Call, Watch, Watched};

const T0: i64 = 1_800_000_000_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// When a Persona backend began and ended a turn.
#[derive(Debug)]
enum Seen {
    Started(String, Instant),
    Ended(String),
}

/// Reports when a Persona backend's turns start and end (a Self backend reports nothing).
struct Probe {
    /// The Mind's id for a Persona session; `None` for a Self session.
    persona_of: Option<String>,
    seen: mpsc::UnboundedSender<Seen>,
}

/// A call that answers the conversation: a turn, with or without a clear.
fn is_turn(call: Call) -> bool {
    matches!(call, Call::Turn | Call::TurnCleared)
}

impl Watch for Probe {
    fn before(&self, call: Call) {
        if let (true, Some(mind)) = (is_turn(call), &self.persona_of) {
            // The receiver lives as long as the bench; a send can fail only after it ends.
            let _ = self.seen.send(Seen::Started(mind.clone(), Instant::now()));
        }
    }

    fn after(&self, call: Call, _started: Instant) {
        if let (true, Some(mind)) = (is_turn(call), &self.persona_of) {
            let _ = self.seen.send(Seen::Ended(mind.clone()));
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// Each delivery's Mind and latency, in the order posted.
async fn bench(
    minds: usize,
    rounds: usize,
    pause: Duration,
    dir: &std::path::Path,
) -> Vec<(String, Duration)> {
    let ids: Vec<String> = (0..minds).map(|m| format!("w{m}")).collect();
    let (host, sim) = open_host(&ids, dir).await;

    let token = ApiToken::new("wake-bench");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut api_stopped = stopped.clone();
    let api = tokio::spawn(serve(host.clone(), token.clone(), listener, async move {
        let _ = api_stopped.changed().await;
    }));

    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let mut runners = spawn_runners(&host, &sim, &seen_tx, &stopped);

    // Every Mind registered, leased and idle.
    for id in &ids {
        while host.store.lease(id).await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // reqwest is built without a TLS provider and will not build a client without one.
    muninn_anthropic::client::install_ring_provider();
    let client = reqwest::Client::new();
    let mut latencies = Vec::with_capacity(minds * rounds);
    // A stride coprime with the count: an order unrelated to the order the runners started in.
    let stride = (1..).map(|s| 7 * s).find(|s| gcd(*s, minds) == 1).unwrap();
    for k in 0..minds * rounds {
        let id = &ids[(k * stride) % minds];
        let sent = Instant::now();
        post_delivery(&client, &base, &token, id, k).await;
        let started = turn_started(&mut seen, id).await;
        latencies.push((id.clone(), started - sent));
        loop {
            match seen.recv().await.unwrap() {
                Seen::Ended(mind) if &mind == id => break,
                _ => {}
            }
        }
        tokio::time::sleep(pause).await;
    }

    stop.send(true).unwrap();
    while let Some(done) = runners.join_next().await {
        done.unwrap().unwrap();
    }
    api.await.unwrap().unwrap();
    host.store.close().await;
    latencies
}

/// A host on a fresh SQLite store in `dir` with one Mind per id, all in one room, on a
/// simulator whose clock is frozen.
async fn open_host(ids: &[String], dir: &std::path::Path) -> (Host, Arc<Simulator>) {
    let mut text = String::new();
    for id in ids {
        text.push_str(&format!(
            "[[mind]]\nid = '{id}'\nrooms = ['#swarm']\ndoctrine_text = '''{}'''\n",
            "You are a careful and curious mind of the swarm. ".repeat(40)
        ));
    }
    let mut config: Config = toml::from_str(&text).unwrap();
    config.data_dir = dir.to_owned();
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..SimConfig::default()
    }));
    let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
    (host, sim)
}

/// A runner for every Mind of the host, each on probed simulator backends.
fn spawn_runners(
    host: &Host,
    sim: &Arc<Simulator>,
    seen_tx: &mpsc::UnboundedSender<Seen>,
    stopped: &tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinSet<Result<(), muninn_host::runtime::RuntimeError>> {
    let mut runners = tokio::task::JoinSet::new();
    for mind in host.config.minds.iter().cloned() {
        let backend = |persona_of: Option<String>| Watched {
            inner: SimBackend::new(
                InProcess::new(sim.clone()),
                host.clock.clone(),
                PriceTable::embedded(),
            ),
            watch: Probe {
                persona_of,
                seen: seen_tx.clone(),
            },
        };
        let persona = backend(Some(mind.id.clone()));
        let runner = MindRunner::new(
            host.clone(),
            mind,
            "wake-bench".to_string(),
            &PriceTable::embedded(),
            persona,
            backend(None),
        )
        .unwrap();
        runners.spawn(run_mind(runner, stopped.clone()));
    }
    runners
}

/// Posts delivery `k` to Mind `id` through the HTTP API.
async fn post_delivery(client: &reqwest::Client, base: &str, token: &ApiToken, id: &str, k: usize) {
    let response = client
        .post(format!("{base}/v1/minds/{id}/deliveries"))
        .bearer_auth(token.expose())
        .header("content-type", "application/json")
        .body(
            json!({
            "room": "@ada:example.org",
            "sender": "@ada:example.org",
            "is_direct": true,
            "to_you": true,
            "text": "what did we decide about the release?",
            "source_id": format!("wake-{k}"),
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

/// When Mind `id`'s next Persona turn started.
async fn turn_started(seen: &mut mpsc::UnboundedReceiver<Seen>, id: &str) -> Instant {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), seen.recv())
            .await
            .expect("no turn within 60 s")
            .unwrap()
        {
            Seen::Started(mind, at) if mind == id => break at,
            // Another Mind answering its Self run's result: not this delivery.
            _ => {}
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn main() {
    let minds = env_or("MUNINN_BENCH_MINDS", 50);
    let rounds = env_or("MUNINN_BENCH_ROUNDS", 4).max(1);
    let pause = Duration::from_millis(env_or("MUNINN_BENCH_PAUSE_MS", 50) as u64);
    let dir = tempfile::tempdir_in(
        std::env::var("MUNINN_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    )
    .unwrap();
    println!(
        "muninn-host wake bench: delivery (HTTP POST) to Persona turn start, one DM to each idle \
         Mind in turn"
    );
    println!(
        "  minds={minds} rounds={rounds} pause_ms={} sqlite={} (WAL, group commit) lease_ttl_ms={} \
         tokio_workers=2",
        pause.as_millis(),
        dir.path().join("muninn.db").display(),
        muninn_host::runtime::LEASE_TTL_MS,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let posted = runtime.block_on(bench(minds, rounds, pause, dir.path()));
    let mut latencies: Vec<Duration> = posted.iter().map(|(_, took)| *took).collect();
    latencies.sort();
    let p99 = percentile(&latencies, 0.99);
    println!(
        "delivery -> turn start, ms: p50 {:.1} / p95 {:.1} / p99 {:.1} / max {:.1} ({} deliveries)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.95),
        p99,
        percentile(&latencies, 1.0),
        latencies.len()
    );
    let mut slowest: Vec<(usize, &(String, Duration))> = posted.iter().enumerate().collect();
    slowest.sort_by_key(|(_, (_, took))| std::cmp::Reverse(*took));
    let slowest: Vec<String> = slowest
        .iter()
        .take(3)
        .map(|(k, (id, took))| format!("{id} {:.1} ms (#{})", took.as_secs_f64() * 1e3, k + 1))
        .collect();
    println!("slowest: {}", slowest.join(", "));
    if p99 >= 50.0 {
        println!("FAIL: p99 {p99:.1} ms >= 50 ms");
        std::process::exit(1);
    }
    println!("ok: p99 < 50 ms");
}
