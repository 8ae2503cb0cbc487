//! PostgreSQL restarted under load (issue 11): a private PostgreSQL (its own cluster and port,
//! `muninn_testkit::private_postgres`), the real `muninn serve` on it, deliveries flowing
//! through `muninn say`, and the server stopped and started again mid-load. The host is not
//! restarted. While the database is down `/readyz` answers 503 naming the store, a delivery
//! is refused with a 5xx (and retried by the sender with the same source id); afterwards every
//! delivery is answered exactly once (the outbox's batches partition the seqs, one Persona
//! turn each) and the host is ready again. And a password in the database URL is in no output
//! of a run.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muninn_testkit::private_postgres::PrivatePostgres;

use crate::storage_faults::{Serve, client, serve_command, start, stop};
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
    let load = spawn_load(dir.path(), &serve, &sent, &refused);
    while sent.load(Ordering::Relaxed) < DELIVERIES / 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Mid-load: the server goes away for a few seconds; /readyz must say so meanwhile.
    postgres.stop().unwrap();
    let loud = readyz_503_naming_the_store(&serve.addr).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    postgres.start_again().unwrap();
    let loud = loud.expect("/readyz answered 503 naming the store while PostgreSQL was down");
    eprintln!("during the outage: /readyz 503 {loud}");
    load.join().unwrap();

    // Drained without a restart of the host, then exactly once.
    let store = muninn_store::open(&url).await.unwrap();
    acked_through(store.as_ref(), &serve, DELIVERIES as i64).await;
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

/// The load: deliveries one after another through `muninn say`, each retried (same source id)
/// until accepted, counted in `sent`, its refusals in `refused`.
fn spawn_load(
    dir: &Path,
    serve: &Arc<Serve>,
    sent: &Arc<AtomicUsize>,
    refused: &Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    let (serve, sent, refused) = (serve.clone(), sent.clone(), refused.clone());
    let dir = dir.to_owned();
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
}

/// `/readyz`'s body once it answers 503 naming the store (within 20 s).
async fn readyz_503_naming_the_store(addr: &str) -> Option<String> {
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(20) {
        let (code, body) = get(addr, "/readyz");
        if code == 503 && body.contains("store") {
            return Some(body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Waits (up to 120 s) until vala's deliveries are acknowledged through `seq`.
async fn acked_through(store: &dyn muninn_store::Store, serve: &Serve, seq: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ack = store.ack_position("vala").await.unwrap();
        if ack >= seq {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acked through {ack} of {seq}; host log:\n{}",
            std::fs::read_to_string(&serve.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A password in the database URL is in no output of a run: the real `muninn serve` on
/// PostgreSQL at `RUST_LOG=debug` answering a delivery, `status`, `tail`, `ledger`, `doctor`
/// (on the database and on one that does not exist), a `serve` refused for a database that
/// does not exist, nor any file of the data directory.
#[test]
fn a_database_password_is_in_no_output_of_a_run() {
    const SECRET: &str = "pg-canary-5f0c1e";
    let Some(db) = muninn_testkit::peers::FreshDatabase::for_test("muninn_cli_pgpw", "password")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The machine's cluster trusts loopback: any password logs in.
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:5432/{}", db.name());
    let missing = format!("{url}_missing");
    let mut command = serve_command(dir.path(), &["--database", &url]);
    command.env("RUST_LOG", "debug");
    let serve = start(dir.path(), command).unwrap();
    let mut outputs = Vec::new();
    let (seq, ids) = crate::storage_faults::say_answered(dir.path(), &serve, 1);
    assert_eq!((seq, ids.len()), (1, 1));
    for args in [
        &["status"][..],
        &["status", "--format", "json"],
        &["tail", "vala", "--format", "json"],
        &["ledger", "vala", "--format", "json"],
    ] {
        let out = client(dir.path(), &serve, args);
        assert!(out.status.success(), "{args:?}");
        outputs.push(out.stdout);
        outputs.push(out.stderr);
    }
    for (name, database) in [("ok.toml", &url), ("missing.toml", &missing)] {
        let config = dir.path().join(name);
        std::fs::write(
            &config,
            format!(
                "data_dir = 'data'\ndatabase = '{database}'\n[[mind]]\nid = 'vala'\n\
                 rooms = ['#swarm']\ndoctrine_text = 'x'\n"
            ),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_muninn"))
            .args(["doctor", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        outputs.push(out.stdout);
        outputs.push(out.stderr);
    }
    let refused = start(
        dir.path(),
        serve_command(dir.path(), &["--database", &missing]),
    );
    let refused = refused.err().expect("no database, no serve");
    assert!(refused.contains("does not exist"), "{refused}");
    outputs.push(refused.into_bytes());
    let stderr = serve.stderr.clone();
    stop(serve);
    outputs.push(std::fs::read(&stderr).unwrap());
    assert!(
        outputs
            .iter()
            .any(|o| String::from_utf8_lossy(o).contains("postgres://…@127.0.0.1")),
        "doctor names the database without its password"
    );
    for (i, output) in outputs.iter().enumerate() {
        let text = String::from_utf8_lossy(output);
        assert!(!text.contains(SECRET), "output {i}: {text}");
    }
    for entry in walk(dir.path()) {
        if entry.extension().is_some_and(|e| e == "toml") {
            continue; // the configurations written above hold it, as an operator's would
        }
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{}",
            entry.display()
        );
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
