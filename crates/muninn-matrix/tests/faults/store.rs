//! A store that cannot say how far behind the Mind is, or cannot record a send: a failure
//! with its cause, retried, never taken for a hold nor a second send.

use crate::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_say_how_far_the_mind_is_is_a_store_failure_not_a_hold() {
    let Some(rig) = rig("askfail").await else {
        return;
    };
    let name = alias("askfail");
    let room = rig.public_room(&name).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    // The first three reads of the ack position (before the first sync) fail.
    faulty.fail_ack_position_reads(3);
    let running = rig.start_on(faulty.clone(), &[&format!("#{name}")], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let said = rig.human.send(&room, "still listening?", &[]).await;
    let mail = rig.mail_count(1).await;
    let health = running.health.lock().unwrap().clone();
    running.stop().await;
    assert_eq!(
        mail[0].source_id, said,
        "it read on once the store answered"
    );
    let failing: Vec<&AccountHealth> = health
        .iter()
        .filter(|h| matches!(h, AccountHealth::Failing { .. }))
        .collect();
    assert!(
        !health
            .iter()
            .any(|h| matches!(h, AccountHealth::Held { .. })),
        "nothing was held: the Mind has no mail at all: {health:?}"
    );
    assert!(
        failing.iter().any(
            |h| matches!(h, AccountHealth::Failing { stage: "store", error }
            if error.contains("the database server closed the connection"))
        ),
        "the store's failure is reported with its cause: {health:?}"
    );
    assert_eq!(
        health.last(),
        Some(&AccountHealth::Open),
        "and clears: {health:?}"
    );
}

// On one thread: the subscriber below is this thread's, and the connector's tasks run on it.
#[tokio::test(flavor = "current_thread")]
async fn a_send_the_store_cannot_record_is_logged_with_its_cause_and_sent_once() {
    let Some(rig) = rig("ackfail").await else {
        return;
    };
    let (logs, _capture) = Logs::capture(tracing::Level::WARN);
    let name = alias("ackfail");
    let room = rig.public_room(&name).await;
    let public = format!("#{name}");
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.fail_outbox_acks(2);
    let running = rig.start_on(faulty.clone(), &[&public], |_| {});
    rig.bot_joined(&room).await;
    rig.say(&[("vala-1-1-0", &public, "once")]).await;
    running.outbox_changed();
    eventually("the send acked", Duration::from_secs(30), || async {
        let unacked = rig.store.unacked_outbox(MIND, 10).await.unwrap();
        unacked.is_empty().then_some(())
    })
    .await;
    running.stop().await;
    let bodies: Vec<String> = rig
        .human
        .messages(&room)
        .await
        .into_iter()
        .filter(|m| m.sender == rig.bot)
        .map(|m| m.body)
        .collect();
    assert_eq!(
        bodies,
        vec!["once"],
        "sent again after each refused ack, shown once"
    );
    assert_eq!(faulty.refused(), 2);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let logged: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("vala-1-1-0") && l.contains("injected: database or disk is full"))
        .collect();
    assert_eq!(
        logged.len(),
        2,
        "each refused ack logged with its cause:\n{text}"
    );
}
