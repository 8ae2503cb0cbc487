//! A host's presence on a shared PostgreSQL database is loud when it fails: while another
//! session holds this host's presence lock (its own previous session, not yet seen dead), the
//! host cannot prove it is alive, other hosts may take its Minds over, and `/readyz` says so;
//! once the lock is free the presence keeper takes it within a check interval and the host is
//! ready again.

use crate::runtime::{mind, post, runner, world};
use muninn_host::Host;
use muninn_host::cluster::{self, PRESENCE_CHECK};
use muninn_host::config::Config;
use muninn_host::instance::Instance;
use muninn_host::runtime::Step;
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

/// A runner whose write is refused by the fence (another host took the Mind over: its presence
/// session had been killed, say) lets its lease go at once: its next step looks at the lease
/// again (another holder, live: not the leader; gone: taken back), instead of presenting the
/// stale token at every step until its own copy of the lease neared expiry — up to two thirds
/// of the TTL of refused steps, the Mind shown failing on the store, the backoff growing, and a
/// takeover from a holder that died meanwhile delayed as long.
#[tokio::test]
async fn a_runner_fenced_mid_step_lets_its_lease_go_at_once() {
    let w = world().await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    assert!(matches!(a.step().await.unwrap(), Step::PersonaTurn { .. }));
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().unwrap();
    let now = w.sim.now_ms();
    let taken = store
        .take_over_lease("vala", "host-b", held.token, 30_000, now)
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    post(&w, "e2", "#swarm", "ari", "still there?").await;
    let refused = a.step().await.unwrap_err();
    assert!(refused.to_string().contains("stale"), "{refused}");
    // The next look sees host-b's live lease: not the leader, not another refused write.
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
    // host-b lets go; host-a takes the Mind back and answers.
    store.release_lease("vala", taken.token).await.unwrap();
    assert!(matches!(a.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert_eq!(store.ack_position("vala").await.unwrap(), 2);
}
