//! `muninn replay --closed-loop` on the host's own ledger export, as an operator runs it: a Mind
//! served on the in-process simulator answers deliveries over idle gaps, `muninn ledger
//! --format jsonl` exports its ledger through the HTTP API, and the replay of that export passes
//! — or fails, with a non-zero exit, once the export says something the host did not do.

use muninn_api::ApiToken;
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::config::{Config, MindConfig};
use muninn_host::http::serve;
use muninn_host::runtime::{MindRunner, Step};
use muninn_sim::SimClock;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use muninn_store::NewDelivery;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

const T0: i64 = 1_800_000_000_000;

/// Runs the Mind until `until` on the frozen clock: steps while there is work, sleeps to the
/// decision times it names.
async fn run_until(r: &mut MindRunner<SimBackend>, sim: &Simulator, until: i64) {
    for _ in 0..10_000 {
        let now = sim.now_ms();
        let next = match r.step().await.unwrap() {
            Step::PersonaTurn { .. } | Step::SelfTurn { .. } | Step::Ping => continue,
            Step::Idle { until_ms: Some(t) } if t <= now => continue,
            Step::Idle { until_ms: Some(t) } => t.min(until),
            _ => until,
        };
        if next <= now {
            return;
        }
        sim.advance_clock(next - now);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_ledger_export_replays_in_closed_loop_and_a_changed_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..SimConfig::default()
    }));
    let (host, mut r) = vala(dir.path(), &sim).await;
    deliver_over_gaps(&host, &mut r, &sim, None).await;
    let jsonl = export_ledger(&host).await;
    assert!(
        decision_kinds(&jsonl).contains(&"ping"),
        "no ping in {jsonl}"
    );
    let file = dir.path().join("vala.jsonl");
    std::fs::write(&file, &jsonl).unwrap();
    let replay = replay_closed_loop(&file).await;
    let out = String::from_utf8_lossy(&replay.stdout).into_owned();
    assert!(
        replay.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(out.contains("PASS"), "{out}");
    let rows = jsonl.lines().count();
    assert!(out.contains(&format!("{rows} rows replayed")), "{out}");

    // The same export with one ping left out: the replay would have pinged there.
    std::fs::write(&file, without_first_ping(&jsonl)).unwrap();
    let replay = replay_closed_loop(&file).await;
    let out = String::from_utf8_lossy(&replay.stdout).into_owned();
    assert!(!replay.status.success(), "{out}");
    assert!(out.contains("FAIL"), "{out}");

    // The same export with a corrupt row whose cost is far below zero: refused, naming its
    // line, neither a panic (the difference's subtraction overflowed) nor a figure.
    std::fs::write(&file, with_first_cost(&jsonl, i64::MIN)).unwrap();
    let replay = replay_closed_loop(&file).await;
    let err = String::from_utf8_lossy(&replay.stderr).into_owned();
    assert!(!replay.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("vala.jsonl:1: a negative cost"), "{err}");
}

/// `jsonl` with its first row's `cost` set to `cost`.
fn with_first_cost(jsonl: &str, cost: i64) -> String {
    let mut lines = jsonl.lines();
    let mut first: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    first["cost"] = cost.into();
    std::iter::once(first.to_string())
        .chain(lines.map(str::to_string))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The provider loses its cache while the host's cache model holds it warm (the simulator's
/// cache emptied 250 s into a gap): the next turn writes what it was sent to read, its row says
/// `cache_state: "expired"`, and the replay of the export takes that row as the provider
/// answered and passes, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_with_a_row_that_found_the_cache_expired_replays_in_closed_loop() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..SimConfig::default()
    }));
    let (host, mut r) = vala(dir.path(), &sim).await;
    deliver_over_gaps(&host, &mut r, &sim, Some(2)).await;
    let jsonl = export_ledger(&host).await;
    assert_eq!(
        jsonl.matches("\"cache_state\":\"expired\"").count(),
        1,
        "{jsonl}"
    );
    let file = dir.path().join("vala.jsonl");
    std::fs::write(&file, &jsonl).unwrap();
    let replay = replay_closed_loop(&file).await;
    let out = String::from_utf8_lossy(&replay.stdout).into_owned();
    assert!(replay.status.success(), "{out}");
    assert!(out.contains("PASS"), "{out}");
    assert!(out.contains("1 rows found the cache expired"), "{out}");
    assert!(!out.contains("priced apart"), "{out}");
}

/// The Mind `vala` on a host whose data lives in `dir`, registered, served by `sim`.
async fn vala(dir: &Path, sim: &Arc<Simulator>) -> (Host, MindRunner<SimBackend>) {
    let mut config = Config::demo();
    config.data_dir = dir.to_owned();
    config.lease_ttl_ms = 3_600_000;
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
    let mind: MindConfig = toml::from_str(&format!(
        "id = 'vala'\nrooms = ['#swarm']\nmin_segment = 2\ndoctrine_text = '''{}'''",
        "You are Vala, a careful and curious mind. ".repeat(200)
    ))
    .unwrap();
    let backend = || {
        SimBackend::new(
            InProcess::new(sim.clone()),
            host.clock.clone(),
            PriceTable::embedded(),
        )
    };
    let r = MindRunner::new(
        host.clone(),
        mind,
        "host-a".into(),
        &PriceTable::embedded(),
        backend(),
        backend(),
    )
    .unwrap();
    r.register().await.unwrap();
    (host, r)
}

/// Deliveries over gaps around the 5-minute TTL and the hour: appends, pings, cold wakes. With
/// `evict_before`, the provider loses its whole cache just before that delivery.
async fn deliver_over_gaps(
    host: &Host,
    r: &mut MindRunner<SimBackend>,
    sim: &Simulator,
    evict_before: Option<usize>,
) {
    for (i, gap) in [
        2_000i64, 250_000, 290_000, 900_000, 3_500_000, 3_700_000, 60_000,
    ]
    .iter()
    .cycle()
    .take(16)
    .enumerate()
    {
        if evict_before == Some(i) {
            sim.reset();
        }
        host.store
            .post_delivery(
                "vala",
                &NewDelivery {
                    room: "#swarm".into(),
                    sender: "ari".into(),
                    is_direct: false,
                    to_you: false,
                    text: format!("message {i}: {}", "words and more words ".repeat(i + 3)),
                    source_id: format!("e{i}"),
                    received_at_ms: sim.now_ms(),
                    context: Vec::new(),
                },
            )
            .await
            .unwrap();
        r.woken();
        let until = sim.now_ms() + gap;
        run_until(r, sim, until).await;
    }
}

/// `vala`'s ledger as `muninn ledger --format jsonl` exports it through the API, as an
/// operator would.
async fn export_ledger(host: &Host) -> String {
    let token = ApiToken::load_or_create(&host.config.api_token_path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(host.clone(), token, listener, async {
        let _ = stopped.await;
    }));
    let token_file = host.config.api_token_path();
    let export = muninn(vec![
        "ledger".into(),
        "vala".into(),
        "--format".into(),
        "jsonl".into(),
        "--addr".into(),
        addr,
        "--token-file".into(),
        token_file.display().to_string(),
    ])
    .await;
    assert!(export.status.success(), "{export:?}");
    String::from_utf8(export.stdout).unwrap()
}

/// Each exported row's decision, as ping_head, ping, refresh or other.
fn decision_kinds(jsonl: &str) -> Vec<&'static str> {
    jsonl
        .lines()
        .map(|l| {
            let row: serde_json::Value = serde_json::from_str(l).unwrap();
            row["decision"].as_str().unwrap_or_default().to_owned()
        })
        .map(|d| {
            if d.starts_with("ping_head") {
                "ping_head"
            } else if d.starts_with("ping") {
                "ping"
            } else if d.starts_with("refresh") {
                "refresh"
            } else {
                "other"
            }
        })
        .collect()
}

/// The export without its first ping row.
fn without_first_ping(jsonl: &str) -> String {
    let ping = jsonl
        .lines()
        .position(|l| l.contains("\"decision\":\"ping:"))
        .unwrap();
    jsonl
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != ping)
        .map(|(_, l)| format!("{l}\n"))
        .collect()
}

/// `muninn replay --closed-loop file`.
async fn replay_closed_loop(file: &Path) -> Output {
    muninn(vec![
        "replay".into(),
        "--closed-loop".into(),
        file.display().to_string(),
    ])
    .await
}

/// Runs the `muninn` binary off the runtime's threads.
async fn muninn(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_muninn"))
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}
