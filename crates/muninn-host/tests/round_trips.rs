//! Fewer store round trips per turn, still correct: the settings and ack position the runner
//! holds between turns are read again after a settings change through the API, and the host's
//! one lease renewal for all its Minds replaces the runners' own.

use crate::runtime::{mind, post, runner, world};
use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_host::http::serve;
use muninn_host::runtime::{LEASE_TTL_MS, Step, renew_host_leases};

/// Serves the world's host's HTTP API on an ephemeral port until the returned sender drops.
async fn api(host: &muninn_host::Host) -> (ApiClient, tokio::sync::oneshot::Sender<()>) {
    let token = ApiToken::new("round-trips-test-token");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(host.clone(), token.clone(), listener, async {
        let _ = stopped.await;
    }));
    (ApiClient::new(&addr.to_string(), token).unwrap(), stop)
}

/// A streak of turns holds the settings (fewer reads), and a brake put through the API between
/// two turns of the streak stops the very next one: the API's wake-up makes the runner read
/// again.
#[tokio::test]
async fn a_settings_change_through_the_api_is_seen_on_the_next_turn() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    // Three DMs in three rooms: three batches, three turns.
    let mut last = 0;
    for (i, room) in ["@a:x", "@b:x", "@c:x"].iter().enumerate() {
        last = post(&w, &format!("e{i}"), room, room, "hello").await;
    }
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert_eq!(
        r.held_reads_saved(),
        1,
        "the second turn of the streak used the held settings and ack"
    );
    let (client, _stop) = api(&w.host).await;
    client.brake_mind("vala", true).await.unwrap();
    let calls = w.sim.requests().len();
    assert_eq!(r.step().await.unwrap(), Step::Braked);
    assert_eq!(w.sim.requests().len(), calls, "no call after the brake");
    // Off again through the API: the last batch runs, acked through the last delivery.
    client.brake_mind("vala", false).await.unwrap();
    let step = r.step().await.unwrap();
    assert!(
        matches!(step, Step::PersonaTurn { acked_through, .. } if acked_through == last),
        "{step:?}"
    );
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), last);
}

/// The host renews every lease its holder holds in one statement; a runner due for renewal
/// adopts it instead of writing its own. A lease whose Mind has no runner here is released.
#[tokio::test]
async fn the_host_renews_its_runners_leases_and_they_adopt_it() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let taken = w.host.store.lease("vala").await.unwrap().unwrap();
    // Past two thirds of the lease: the runner would renew at its next step.
    w.sim.advance_clock(LEASE_TTL_MS * 3 / 4);
    let renewed = renew_host_leases(&w.host, "host-a").await.unwrap();
    let at = w.sim.now_ms();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0].token, taken.token);
    assert_eq!(renewed[0].expires_at_ms, at + LEASE_TTL_MS);
    // A moment later the runner steps: had it renewed on its own, the lease would end 1 ms
    // later than the host's renewal made it.
    w.sim.advance_clock(1);
    post(&w, "e2", "#swarm", "ari", "again").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let lease = w.host.store.lease("vala").await.unwrap().unwrap();
    assert_eq!(
        (lease.token, lease.expires_at_ms),
        (taken.token, at + LEASE_TTL_MS),
        "the runner adopted the host's renewal instead of writing its own"
    );

    // The runner goes (as a panicked task would): the next host renewal lets its lease go.
    drop(r);
    assert!(
        renew_host_leases(&w.host, "host-a")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(w.host.store.lease("vala").await.unwrap(), None);
}
