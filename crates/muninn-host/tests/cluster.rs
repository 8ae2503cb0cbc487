//! A host's presence on a shared PostgreSQL database is loud when it fails: while another
//! session holds this host's presence lock (its own previous session, not yet seen dead), the
//! host cannot prove it is alive, other hosts may take its Minds over, and `/readyz` says so;
//! once the lock is free the presence keeper takes it within a check interval and the host is
//! ready again.

use muninn_host::Host;
use muninn_host::cluster::{self, PRESENCE_CHECK};
use muninn_host::config::Config;
use muninn_host::instance::Instance;
use muninn_host::telemetry::health::readiness;
use muninn_testkit::peers::FreshDatabase;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_a_presence_lock_this_host_cannot_hold() {
    let Some(db) = FreshDatabase::for_test("muninn_presence_ready", "presence readiness") else {
        return;
    };
    let store = muninn_store::open(&db.url()).await.unwrap();
    let squatter = muninn_store::open(&db.url()).await.unwrap();
    let instance = Instance::unshared("presence-test", std::process::id());
    let holder = instance.holder.clone();
    assert!(squatter.hold_presence(&holder).await.unwrap());

    let config: Config = toml::from_str("").unwrap();
    let clock = Arc::new(muninn_backend::clock::SystemClock);
    let host = Host::new(store.clone(), config, clock).with_instance(instance);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    cluster::spawn(&host, &holder, stopped).await;
    let not_ready = readiness(&host).await;
    assert!(!not_ready.ready);
    assert!(
        not_ready.reasons.iter().any(|r| r.starts_with("presence:")),
        "{not_ready:?}"
    );
    assert!(host.cluster.presence_failure().is_some());

    // The other session ends; the keeper takes the lock at its next check.
    squatter.close().await;
    let deadline = Instant::now() + PRESENCE_CHECK * 3;
    while !readiness(&host).await.ready {
        assert!(Instant::now() < deadline, "{:?}", readiness(&host).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let other = muninn_store::open(&db.url()).await.unwrap();
    assert_eq!(other.holder_gone(&holder).await.unwrap(), Some(false));
    let _ = stop.send(true);
    store.close().await;
    other.close().await;
}
