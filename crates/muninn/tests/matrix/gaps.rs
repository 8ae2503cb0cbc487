//! A gap cut at `[matrix] max_gap_events` through the real `muninn serve`: the cut shows in
//! `muninn status` (a line naming the room, the time and the events read), in `GET
//! /v1/minds/{mind}` (`transport.gaps_cut`) and in `/metrics`, and leaves the account open
//! and `/readyz` ready: a cut is a mark, not a failure. The mark is the running host's ("since
//! the host started"): a restart starts it again.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_cut_at_its_limit_is_shown_in_status_the_api_and_metrics() {
    let Some(synapse) = synapse::shared() else {
        return;
    };
    let (human, bot) = accounts(synapse, "gapcut").await;
    let (room, name) = public_room(&human, &bot, "gapcut").await;
    let mut host = Host::new(&synapse.url(), &bot, &[name]);
    limit_gaps_to_one_event(&host);
    host.start(None);
    synced(&host).await;
    // The brake keeps the Mind from answering, so one delivery holds the sync (no long poll
    // open) while three more messages are said: the next sync's timeline holds the last, and
    // its gap of two is read to its limit of one.
    let store = a_gap_of_two_behind_a_held_delivery(&host, &human, &room).await;
    assert!(!host.muninn(&["status"]).contains("gap"), "nothing cut yet");
    host.muninn(&["brake", "off"]);
    the_cut_is_shown_in_status_the_api_and_metrics(&host, &room).await;
    let delivered: Vec<String> = store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.text)
        .collect();
    assert!(
        !delivered.iter().any(|t| t == "m1, skipped"),
        "{delivered:?}"
    );
    // The record is the running host's, as the line says ("since the host started"): a
    // restarted host starts it again, and its lasting trace is the error line in the log.
    host.stop();
    host.start(None);
    let json: serde_json::Value =
        serde_json::from_str(&host.muninn(&["status", "--format", "json"])).unwrap();
    assert_eq!(
        json["minds"][0]["transport"]["gaps_cut"],
        serde_json::Value::Null,
        "{json}"
    );
    assert!(
        !host.muninn(&["status"]).contains("gap"),
        "no cut since this start"
    );
    host.stop();
}

/// Small limits: a sync timeline of one event, a gap read to one event, one pending delivery.
fn limit_gaps_to_one_event(host: &Host) {
    let path = host.dir.path().join("muninn.toml");
    let config = std::fs::read_to_string(&path).unwrap().replace(
        "[matrix]\n",
        "[matrix]\ntimeline_limit = 1\nmax_gap_events = 1\nmax_pending = 1\n",
    );
    std::fs::write(&path, config).unwrap();
}

/// m0 is delivered and held by the brake; then three more messages are said, "m1, skipped"
/// first. Returns the host's store.
async fn a_gap_of_two_behind_a_held_delivery(
    host: &Host,
    human: &MatrixUser,
    room: &str,
) -> SqliteStore {
    host.muninn(&["brake", "on"]);
    human.send(room, "m0", &[]).await;
    let store = host.store().await;
    wait_for("m0 delivered", Duration::from_secs(60), || async {
        let mail = store.pending_deliveries("vala", 0, 10).await.unwrap();
        (!mail.is_empty()).then_some(())
    })
    .await;
    for text in ["m1, skipped", "m2", "m3"] {
        human.send(room, text, &[]).await;
    }
    store
}

/// `muninn status` names the cut (room, time, events read, what to raise); the API's
/// `transport.gaps_cut` and `/metrics` count it; the account is not failing and `/readyz` is
/// ready.
async fn the_cut_is_shown_in_status_the_api_and_metrics(host: &Host, room: &str) {
    let line = wait_for("status naming the cut", Duration::from_secs(60), || async {
        host.muninn(&["status"])
            .lines()
            .find(|l| l.starts_with("vala: matrix cut 1 gap since the host started"))
            .map(str::to_owned)
    })
    .await;
    assert!(line.contains(&format!("the last in {room} at ")), "{line}");
    assert!(line.contains("after 1 events"), "{line}");
    assert!(line.contains("raise [matrix] max_gap_events"), "{line}");
    let json: serde_json::Value =
        serde_json::from_str(&host.muninn(&["status", "--format", "json"])).unwrap();
    let transport = &json["minds"][0]["transport"];
    // Open, or held while the Mind answers m2 and m3: reading on, whichever.
    assert_ne!(transport["state"], "failing", "not a failure: {json}");
    assert_eq!(transport["gaps_cut"]["count"], 1, "{json}");
    assert_eq!(transport["gaps_cut"]["last_room"], room, "{json}");
    assert_eq!(transport["gaps_cut"]["last_events_read"], 1, "{json}");
    let (_, metrics) = host.get("/metrics");
    assert!(
        metrics.contains(r#"muninn_transport_gaps_cut_total{mind="vala",transport="matrix"} 1"#),
        "{metrics}"
    );
    let (code, body) = host.get("/readyz");
    assert_eq!(code, 200, "a cut gap is no failure: {body}");
}
