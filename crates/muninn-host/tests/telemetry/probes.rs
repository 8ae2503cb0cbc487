//! `/healthz`, `/readyz` and `/metrics` need no token, and readiness names what fails: a
//! backend outage, then the store gone.

use super::{parse_exposition, sum};
use crate::runtime::mind;
use muninn_api::ApiToken;
use muninn_backend::{
    Backend, BackendError, FlushProtocol, RunOutcome, SessionEvent, SessionSpec, TurnInput,
    TurnOutcome,
};
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_host::runtime::{MindRunner, run_mind};
use muninn_sim::SimClock;
use muninn_sim::inprocess::{InProcess, SimBackend};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The simulator, failing every call while `down` is set (an outage).
struct Flaky {
    inner: SimBackend,
    down: Arc<AtomicBool>,
}

impl Flaky {
    fn check(&self) -> Result<(), BackendError> {
        match self.down.load(Ordering::SeqCst) {
            true => Err(BackendError::Transport(
                "connection refused (test outage)".into(),
            )),
            false => Ok(()),
        }
    }
}

impl Backend for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        self.inner.start(spec).await
    }
    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        self.check()?;
        self.inner.turn(input).await
    }
    async fn run(
        &mut self,
        input: TurnInput,
        p: &FlushProtocol,
    ) -> Result<RunOutcome, BackendError> {
        self.check()?;
        self.inner.run(input, p).await
    }
    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        self.inner.take_session_events()
    }
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, String) {
    let response = http.get(url).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Polls `url` until its status is `want` (the runner steps on its own).
async fn until_status(http: &reqwest::Client, url: &str, want: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(http, url).await;
        if status == want {
            return body;
        }
        assert!(Instant::now() < deadline, "{url} stayed {status}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Posts a delivery for the test Mind; returns its seq.
async fn deliver(host: &Host, sim: &muninn_sim::sim::Simulator, source_id: &str) -> i64 {
    host.store
        .post_delivery(
            "vala",
            &muninn_store::NewDelivery {
                room: "#swarm".into(),
                sender: "ari".into(),
                is_direct: false,
                to_you: true,
                text: "anyone there?".into(),
                source_id: source_id.into(),
                received_at_ms: sim.now_ms(),
                context: Vec::new(),
            },
        )
        .await
        .unwrap()
        .seq
}

/// A host configured with the test Mind (no runner yet), its API on loopback.
struct ProbeHost {
    host: Host,
    sim: Arc<muninn_sim::sim::Simulator>,
    base: String,
    stop: tokio::sync::watch::Sender<bool>,
    stopped: tokio::sync::watch::Receiver<bool>,
    _dir: tempfile::TempDir,
}

impl ProbeHost {
    async fn start() -> ProbeHost {
        let dir = tempfile::tempdir().unwrap();
        let mut config: Config = toml::from_str("").unwrap();
        config.data_dir = dir.path().to_owned();
        config.minds.push(mind(""));
        let store = muninn_store::open(&config.database_url()).await.unwrap();
        let sim = Arc::new(muninn_sim::sim::Simulator::new(
            muninn_sim::sim::SimConfig {
                frozen_at_ms: Some(crate::runtime::T0),
                ..Default::default()
            },
        ));
        let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
        let token = ApiToken::new("probe-test-token");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut api_stopped = stopped.clone();
        tokio::spawn(serve(host.clone(), token, listener, async move {
            let _ = api_stopped.changed().await;
        }));
        muninn_anthropic::client::install_ring_provider();
        ProbeHost {
            host,
            sim,
            base,
            stop,
            stopped,
            _dir: dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_need_no_token_and_readiness_names_what_fails() {
    let probe = ProbeHost::start().await;
    let (host, sim, base, stopped) = (&probe.host, &probe.sim, &probe.base, &probe.stopped);
    let http = reqwest::Client::new();

    assert_eq!(
        get(&http, &format!("{base}/healthz")).await,
        (200, r#"{"status":"ok"}"#.into())
    );
    // No runner yet.
    let (status, body) = get(&http, &format!("{base}/readyz")).await;
    assert_eq!(status, 503);
    assert!(
        body.contains("mind vala: its runner is not running"),
        "{body}"
    );
    // The API itself still wants the token.
    assert_eq!(get(&http, &format!("{base}/v1/minds")).await.0, 401);

    let down = Arc::new(AtomicBool::new(false));
    let r = flaky_runner(host, sim, &down);
    let running = tokio::spawn(run_mind(r, stopped.clone()));
    let body = until_status(&http, &format!("{base}/readyz"), 200).await;
    assert_eq!(body, r#"{"ready":true,"reasons":[]}"#);

    // An outage: the delivery's turn fails, is retried, and readiness says why.
    let seq = assert_an_outage_is_named(&http, host, sim, &down, base).await;

    // Recovered: the turn goes through, readiness is back.
    down.store(false, Ordering::SeqCst);
    until_status(&http, &format!("{base}/readyz"), 200).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while host.store.ack_position("vala").await.unwrap() < seq {
        assert!(Instant::now() < deadline, "the delivery was never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The store goes away: readiness says so, and never how to reach it.
    host.store.close().await;
    let body = until_status(&http, &format!("{base}/readyz"), 503).await;
    assert!(body.contains("store: the query failed"), "{body}");
    probe.stop.send(true).unwrap();
    let _ = running.await;
}

/// A runner of the test Mind on [`Flaky`] backends, failing while `down` is set.
fn flaky_runner(
    host: &Host,
    sim: &Arc<muninn_sim::sim::Simulator>,
    down: &Arc<AtomicBool>,
) -> MindRunner<Flaky> {
    let flaky = || Flaky {
        inner: SimBackend::new(
            InProcess::new(sim.clone()),
            host.clock.clone(),
            PriceTable::embedded(),
        ),
        down: down.clone(),
    };
    MindRunner::new(
        host.clone(),
        mind(""),
        "probe-host".into(),
        &PriceTable::embedded(),
        flaky(),
        flaky(),
    )
    .unwrap()
}

/// Sets the backend `down` and delivers: the turn fails, is retried, and readiness and
/// `/metrics` say why. Returns the delivery's seq.
async fn assert_an_outage_is_named(
    http: &reqwest::Client,
    host: &Host,
    sim: &muninn_sim::sim::Simulator,
    down: &AtomicBool,
    base: &str,
) -> i64 {
    down.store(true, Ordering::SeqCst);
    let seq = deliver(host, sim, "outage-1").await;
    host.signals.wake("vala");
    let body = until_status(http, &format!("{base}/readyz"), 503).await;
    assert!(
        body.contains(
            "mind vala: the backend is failing: transport: connection refused (test outage)"
        ),
        "{body}"
    );
    let (status, text) = get(http, &format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    let (samples, _) = parse_exposition(&text);
    assert!(
        sum(
            &samples,
            "muninn_backend_errors_total",
            &["kind=\"transport\"", "role=\"persona\""]
        ) >= 1.0,
        "{text}"
    );
    assert!(sum(&samples, "muninn_failing", &["mind=\"vala\""]) >= 1.0);
    assert_eq!(
        sum(&samples, "muninn_mailbox_depth", &["mind=\"vala\""]),
        1.0
    );
    seq
}
