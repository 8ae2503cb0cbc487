//! Wake-ups with several Minds: `run_minds` on the in-process simulator and a real SQLite store,
//! the HTTP API on loopback, called with raw reqwest.

use muninn_api::ApiToken;
use muninn_host::Host;
use muninn_host::backends::BackendFactory;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_host::runtime::run_minds;
use muninn_sim::SimClock;
use muninn_sim::sim::{SimConfig, Simulator};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An idle runner looks at its mailbox on its own every third of the lease (10 s by default); a
/// delivery whose wake-up reached the wrong Mind waits that long. Its own wake-up answers in
/// milliseconds (tens to hundreds on a loaded machine in a debug build).
const PROMPTLY: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_wakes_its_own_idle_mind_among_several() {
    const MINDS: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..MINDS).map(|m| format!("mind{m}")).collect();
    let config = minds_config(&ids, dir.path());
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(1_800_000_000_000),
        ..SimConfig::default()
    }));
    let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
    let token = ApiToken::new("wake-test");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut api_stopped = stopped.clone();
    let api = tokio::spawn(serve(host.clone(), token.clone(), listener, async move {
        let _ = api_stopped.changed().await;
    }));
    let minds = tokio::spawn(run_minds(
        host.clone(),
        BackendFactory::Sim(sim),
        muninn_core::price::PriceTable::embedded(),
        "wake-test".into(),
        stopped,
    ));

    // Every Mind registered, leased and gone idle: from here on only a wake-up (or the lease
    // third, far later) makes a runner look at its mailbox.
    for id in &ids {
        let deadline = Instant::now() + Duration::from_secs(30);
        while host.store.lease(id).await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "{id} never took its lease");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    muninn_anthropic::client::install_ring_provider();
    let http = reqwest::Client::new();
    // The last Mind first: not the order the runners started (and first waited) in.
    let mut answered = Vec::new();
    for id in ids.iter().rev() {
        let sent = Instant::now();
        let outbox = deliver_and_wait(&http, &base, &token, id).await;
        let took = sent.elapsed();
        answered.push((id.clone(), took));
        assert!(
            !outbox["messages"].as_array().unwrap().is_empty() && took < PROMPTLY,
            "{id} was not answered within {PROMPTLY:?} (answered so far: {answered:?})"
        );
    }

    stop.send(true).unwrap();
    minds.await.unwrap().unwrap();
    api.await.unwrap().unwrap();
}

/// A configuration of one Mind per id, all in `#swarm`, with its data in `dir`: its lease third
/// is far above [`PROMPTLY`].
fn minds_config(ids: &[String], dir: &std::path::Path) -> Config {
    let mut text = String::new();
    for id in ids {
        text.push_str(&format!("[[mind]]\nid = '{id}'\nrooms = ['#swarm']\n"));
    }
    let mut config: Config = toml::from_str(&text).unwrap();
    config.data_dir = dir.to_owned();
    assert!(
        Duration::from_millis(config.lease_ttl_ms as u64 / 3) > PROMPTLY * 3,
        "the lease third must be far above the bound, or a lost wake-up would pass"
    );
    config
}

/// Posts a DM for `id` through the API and long-polls its outbox for up to [`PROMPTLY`]:
/// what the poll answered.
async fn deliver_and_wait(http: &reqwest::Client, base: &str, token: &ApiToken, id: &str) -> Value {
    let posted = http
        .post(format!("{base}/v1/minds/{id}/deliveries"))
        .bearer_auth(token.expose())
        .header("content-type", "application/json")
        .body(
            json!({
                "room": "@ada:example.org",
                "sender": "@ada:example.org",
                "is_direct": true,
                "to_you": true,
                "text": "are you there?",
                "source_id": format!("wake-{id}"),
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 201);
    serde_json::from_slice(
        &http
            .get(format!(
                "{base}/v1/minds/{id}/outbox?wait_s={}",
                PROMPTLY.as_secs()
            ))
            .bearer_auth(token.expose())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap()
}
