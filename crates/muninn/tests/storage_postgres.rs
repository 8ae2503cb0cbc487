//! PostgreSQL restarted under load (issue 11): a private PostgreSQL (its own cluster and port,
//! `muninn_testkit::private_postgres`), the real `muninn serve` on it, deliveries flowing
//! through `muninn say`, and the server stopped and started again mid-load. The host is not
//! restarted. While the database is down `/readyz` answers 503 naming the store, a delivery
//! is refused with a 5xx (and retried by the sender with the same source id); afterwards every
//! delivery is answered exactly once (the outbox's batches partition the seqs, one Persona
//! turn each) and the host is ready again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muninn_testkit::private_postgres::PrivatePostgres;

use crate::storage_faults::{client, serve_command, start, stop};
use crate::storage_runtime::get;

const DELIVERIES: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load_answers_every_delivery_once() {
    let postgres = match PrivatePostgres::start() {
        Ok(postgres) => postgres,
        Err(why) => {
            muninn_testkit::peers::missing_peer(&format!("a private PostgreSQL: {why}"));
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let url = postgres.url();
    let serve = start(dir.path(), serve_command(dir.path(), &["--database", &url])).unwrap();
    let serve = Arc::new(serve);

    // The load: deliveries one after another, each retried (same source id) until accepted.
    let sent = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let load = {
        let (serve, sent, refused) = (serve.clone(), sent.clone(), refused.clone());
        let dir = dir.path().to_owned();
        std::thread::spawn(move || {
            for i in 0..DELIVERIES {
                let text = format!("message {i}: still there?");
                let source = format!("pg-restart-{i}");
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    let out = client(
                        &dir,
                        &serve,
                        &["say", "vala", &text, "--source-id", &source],
                    );
                    if out.status.success() {
                        break;
                    }
                    refused.fetch_add(1, Ordering::Relaxed);
                    assert!(Instant::now() < deadline, "delivery {i} never accepted");
                    std::thread::sleep(Duration::from_millis(200));
                }
                sent.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    while sent.load(Ordering::Relaxed) < DELIVERIES / 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Mid-load: the server goes away for a few seconds; /readyz must say so meanwhile.
    postgres.stop().unwrap();
    let mut loud = None;
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(20) {
        let (code, body) = get(&serve.addr, "/readyz");
        if code == 503 && body.contains("store") {
            loud = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    postgres.start_again().unwrap();
    let loud = loud.expect("/readyz answered 503 naming the store while PostgreSQL was down");
    eprintln!("during the outage: /readyz 503 {loud}");
    load.join().unwrap();

    // Drained without a restart of the host, then exactly once.
    let store = muninn_store::open(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ack = store.ack_position("vala").await.unwrap();
        if ack >= DELIVERIES as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acked through {ack} of {DELIVERIES}; host log:\n{}",
            std::fs::read_to_string(&serve.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    crate::two_hosts::answered_once(&store, DELIVERIES as i64).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&serve.addr, "/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready again after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "PostgreSQL restarted under load: {DELIVERIES} deliveries, {} refused while down \
         (retried), every one answered once, ready again without restarting muninn",
        refused.load(Ordering::Relaxed)
    );
    store.close().await;
    let serve = Arc::into_inner(serve).expect("the load thread is done");
    stop(serve);
}
