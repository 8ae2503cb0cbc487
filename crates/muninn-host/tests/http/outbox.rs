//! The outbox over HTTP: long polls and server-sent events wake on a new message, acks are
//! idempotent, and the brake holds sends back until it is released.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test]
async fn the_outbox_long_poll_wakes_when_a_message_is_recorded() {
    let server = Arc::new(Server::start().await);
    let token = server.lease("vala").await;
    // Nothing yet, no wait: an empty answer at once.
    let empty = server.client.outbox("vala", 0, 0).await.unwrap();
    assert_eq!(
        empty,
        OutboxResponse {
            messages: vec![],
            next_after: 0
        }
    );

    let poller = {
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = server.client.outbox("vala", 0, 30).await.unwrap();
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.enqueue("vala", token, "b1-0").await;
    let (answer, waited) = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.messages.len(), 1);
    assert_eq!(answer.messages[0].request_id, "b1-0");
    assert_eq!(answer.next_after, answer.messages[0].seq);
    // Woken by the signal, not by the periodic re-read (every 2 s) nor the 30 s deadline.
    assert!(waited < Duration::from_millis(1_500), "waited {waited:?}");

    // `after` skips what was seen.
    server.enqueue("vala", token, "b1-1").await;
    let next = server
        .client
        .outbox("vala", answer.next_after, 0)
        .await
        .unwrap();
    let ids: Vec<_> = next
        .messages
        .iter()
        .map(|m| m.request_id.as_str())
        .collect();
    assert_eq!(ids, ["b1-1"]);
}

#[tokio::test]
async fn the_outbox_stream_delivers_messages_as_server_sent_events() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    let mut response = reqwest::Client::new()
        .get(format!("{}/v1/minds/vala/outbox/stream", server.base))
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let mut enqueued_second = false;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !seen.contains("b1-1") {
            let chunk = response.chunk().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("b1-0") && !enqueued_second {
                enqueued_second = true;
                server.enqueue("vala", token, "b1-1").await;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("stream stalled; saw {seen:?}"));
    let events: Vec<OutboxMessage> = seen
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let ids: Vec<_> = events.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids, ["b1-0", "b1-1"]);
    assert!(seen.contains("event: outbox"));
    assert!(seen.contains(&format!("id: {}", events[1].seq)));
}

use muninn_store::OutboxMessage;

#[tokio::test]
async fn ack_is_idempotent_and_removes_the_message_from_the_outbox() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    server.clock.advance(500);
    let acked = server.client.ack("vala", "b1-0").await.unwrap();
    assert_eq!(acked.acked_at_ms, Some(T0 + 500));
    assert_eq!(acked.sent_at_ms, Some(T0 + 500));
    server.clock.advance(500);
    let again = server.client.ack("vala", "b1-0").await.unwrap();
    assert_eq!(again, acked);
    assert!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .is_empty()
    );

    let error = server.client.ack("vala", "no-such").await.unwrap_err();
    assert_eq!(api_error(error), (404, "not_found".into()));
    // The ack is the transport's, not the runtime's: it needs no lease, so it lands while
    // the Mind is not running (a host restarting, the lease changing hands).
    server.enqueue("vala", token, "b1-1").await;
    server
        .host
        .store
        .release_lease("vala", token)
        .await
        .unwrap();
    server.clock.advance(500);
    let acked = server.client.ack("vala", "b1-1").await.unwrap();
    assert_eq!(acked.acked_at_ms, Some(T0 + 1_500));
    assert!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
}

/// An ack whose request id holds a NUL (U+0000) acks nothing: the store drops NUL from what it
/// looks up, so `b1-0\u{0}` acked the message `b1-0`, which was then never sent.
#[tokio::test]
async fn an_ack_with_a_nul_in_its_request_id_acks_no_other_message() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    let error = server.client.ack("vala", "b1-0\u{0}").await.unwrap_err();
    assert_eq!(api_error(error).0, 422);
    let waiting = server.client.outbox("vala", 0, 0).await.unwrap().messages;
    assert_eq!(waiting.len(), 1, "b1-0 still waits to be sent");
}

#[tokio::test]
async fn the_brake_holds_back_sends_until_it_is_released() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    assert_eq!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
    server.client.brake(true).await.unwrap();
    assert!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .is_empty(),
        "no send while braked"
    );
    server.client.brake(false).await.unwrap();
    let released = server.client.outbox("vala", 0, 0).await.unwrap();
    assert_eq!(released.messages.len(), 1);
    assert_eq!(released.messages[0].request_id, "b1-0");
}
