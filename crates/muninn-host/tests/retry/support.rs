//! What the retry tests share: the Mind's transcript kinds and ledger as the store lists them,
//! polls of its activity and acknowledgements, and the real loop run over it.

use crate::runtime::{World, ledger, mind, runner};
use muninn_host::Activity;
use muninn_host::runtime::run_mind;
use muninn_store::Role;
use std::time::Duration;

/// The Persona's transcript kinds in order, a failed attempt's notice as `attempt_failed`.
pub(crate) async fn persona_kinds(host: &muninn_host::Host) -> Vec<String> {
    let items = host
        .store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    items
        .iter()
        .map(|i| match i.body.get("attempt_failed") {
            Some(_) => "attempt_failed".to_string(),
            None => i.kind.as_str().to_string(),
        })
        .collect()
}

/// Vala's ledger rows, as the store lists them.
pub(super) async fn vala_ledger(host: &muninn_host::Host) -> Vec<muninn_store::LedgerEntry> {
    host.store
        .ledger(&muninn_store::LedgerQuery {
            mind: Some("vala".into()),
            ..Default::default()
        })
        .await
        .unwrap()
}

/// Polls the runner's activity until `done` holds for it (at most `within`).
pub(super) async fn activity_until(
    w: &World,
    within: Duration,
    done: impl Fn(&Activity) -> bool,
) -> Option<Activity> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let seen = w.host.signals.activity("vala");
        if seen.as_ref().is_some_and(&done) {
            return seen;
        }
        if tokio::time::Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the mailbox is acknowledged through `seq` (at most `within`).
pub(super) async fn acked(w: &World, seq: i64, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if w.host.store.ack_position("vala").await.unwrap() >= seq {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Registers the Mind, so mail can be posted to it before its loop runs.
pub(super) async fn register(w: &World) {
    runner(w, mind(""), "host-a").register().await.unwrap();
}

/// Runs the real loop over the world's Mind; the sender stops it.
pub(super) fn spawn_mind(
    w: &World,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let r = runner(w, mind("turns_per_wake = 1"), "host-a");
    let task = tokio::spawn(async move {
        run_mind(r, shutdown).await.unwrap();
    });
    (stop, task)
}

/// The pending delivery was answered once: one reply in the outbox, one ledger row, and the
/// transcript holds it once with one notice of the failure.
pub(super) async fn answered_once(w: &World) {
    assert_eq!(
        persona_kinds(&w.host).await,
        ["delivery", "attempt_failed", "reply"]
    );
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    let ids: Vec<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids, ["vala-1-1-0"]);
    assert_eq!(ledger(w).await.len(), 1);
    let answered = w.sim.requests().iter().filter(|r| r.status == 200).count();
    assert_eq!(answered, 1, "one request went through");
}
