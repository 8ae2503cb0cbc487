//! What goes over the wire: slow and trickled replies arrive whole, the key is never recorded,
//! requests are rendered append-only with at most four breakpoints, the client speaks
//! non-streaming and bearer auth too, and the server runs until its shutdown future resolves.

use super::{fault, spec};
use crate::support::{sim, wired};
use muninn_backend::{Backend, TurnInput};
use muninn_core::cache::Ttl;
use muninn_sim::sim::{FaultKind, SimConfig};
use pretty_assertions::assert_eq;
use std::time::Duration;

#[tokio::test]
async fn slow_streams_complete() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("slow", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([fault(
        FaultKind::Slow {
            first_byte_ms: 50,
            event_ms: 5,
        },
        1,
    )]);
    let started = std::time::Instant::now();
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(70));
    assert!(o.retries.is_empty());
}

/// A trickled reply is the same reply, only slow: streamed one character an event, or whole
/// one byte at a time, each piece `every_ms` apart — what a client without an overall deadline
/// would wait out in full.
#[tokio::test]
async fn trickled_replies_are_whole_and_slow() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("trickle", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim
        .push_faults([fault(FaultKind::Trickle { every_ms: 5 }, 2)]);
    let started = std::time::Instant::now();
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(o.text, "Reply to turn 1: 'hello'");
    // One event per character of the reply, at the least, each 5 ms after the one before.
    assert!(started.elapsed() >= Duration::from_millis(5 * 24));
    assert!(o.retries.is_empty());

    let whole: muninn_anthropic::wire::MessagesRequest =
        serde_json::from_value(serde_json::json!({
            "model": "claude-opus-5-5",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hello"}],
        }))
        .unwrap();
    let started = std::time::Instant::now();
    let sleeper = muninn_backend::clock::RecordingSleeper::default();
    let done = crate::support::client(&h, &sleeper, 0)
        .messages(&whole, false)
        .await
        .unwrap();
    let bytes = serde_json::to_vec(&done.response).unwrap().len() as u64;
    assert!(started.elapsed() >= Duration::from_millis(5 * (bytes / 2)));
    assert!(h.sim.requests().iter().all(|r| r.fault.is_some()));
}

#[tokio::test]
async fn the_key_is_never_recorded() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("secret", Ttl::FiveMinutes))
        .await
        .unwrap();
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    let everything = format!(
        "{}{:?}{:?}",
        serde_json::to_string(&h.sim.requests()).unwrap(),
        o,
        w.backend
    );
    assert!(!everything.contains("sk-test-secret-123"));
    assert_eq!(h.sim.requests()[0].auth, "x-api-key");
}

#[tokio::test]
async fn the_backend_renders_append_only_with_at_most_four_breakpoints() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend.start(spec("render", Ttl::OneHour)).await.unwrap();
    for turn in 0..4 {
        w.backend
            .turn(TurnInput::text(format!("turn {turn}")))
            .await
            .unwrap();
    }
    let bodies: Vec<serde_json::Value> = h.sim.requests().into_iter().map(|r| r.body).collect();
    for body in &bodies {
        let markers = body.to_string().matches("cache_control").count();
        assert_eq!(markers, 3, "one per system layer + the moving tail: {body}");
    }
    for pair in bodies.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(a["system"], b["system"]);
        let a_msgs = a["messages"].as_array().unwrap();
        let b_msgs = b["messages"].as_array().unwrap();
        // Request N+1 = request N (its marker removed) + reply + new user message.
        let mut unmarked = a_msgs.clone();
        unmarked.last_mut().unwrap()["content"][0]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        assert_eq!(&b_msgs[..a_msgs.len()], unmarked.as_slice());
        assert_eq!(b_msgs.len(), a_msgs.len() + 2);
    }
}

#[tokio::test]
async fn the_client_speaks_non_streaming_and_bearer_too() {
    use muninn_anthropic::client::{AnthropicClient, AuthScheme, ClientConfig};
    use muninn_anthropic::wire::{Content, Message, MessagesRequest, Role};
    let h = sim().await;
    let mut config = ClientConfig::new(
        h.base_url(),
        muninn_anthropic::secret::ApiKey::new("tok-bearer").unwrap(),
    );
    config.auth = AuthScheme::Bearer;
    let client = AnthropicClient::new(
        config,
        std::sync::Arc::new(muninn_backend::clock::RecordingSleeper::default()),
    )
    .unwrap();
    let request = MessagesRequest {
        model: "claude-opus-5-5".into(),
        max_tokens: 64,
        messages: vec![Message {
            role: Role::User,
            content: Content::Text("plain".into()),
            extra: Default::default(),
        }],
        system: None,
        tools: Vec::new(),
        tool_choice: None,
        cache_control: None,
        stream: false,
        extra: Default::default(),
        diagnostics: None,
        compaction: None,
        context_management: None,
    };
    let done = client.messages(&request, false).await.unwrap();
    assert_eq!(done.response.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(done.raw_usage["input_tokens"], serde_json::json!(2));
    assert_eq!(done.request_id.as_deref(), Some("req_sim_00000001"));
    assert_eq!(h.sim.requests()[0].auth, "bearer");
}

#[tokio::test]
async fn serve_runs_until_its_shutdown_future_resolves() {
    // What `muninn sim-api` runs.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(muninn_sim::serve(listener, SimConfig::default(), async {
        let _ = rx.await;
    }));
    muninn_anthropic::client::install_ring_provider();
    let r = reqwest::Client::new()
        .get(format!("http://{addr}/admin/clock"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}
