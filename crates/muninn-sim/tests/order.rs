//! Requests answered while others wait: the shared cache sees them in the order they are
//! processed, at the time each is processed.

use crate::support::{long_system, sim};
use muninn_core::trace::Usage;
use muninn_sim::SimHandle;
use muninn_sim::sim::{Fault, FaultKind};
use serde_json::{Value, json};
use std::time::Duration;

const MINUTE: i64 = 60_000;

fn body(system: &str) -> Value {
    json!({"model": "claude-opus-5-5", "max_tokens": 50,
           "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
           "messages": [{"role": "user", "content": "hello"}]})
}

async fn post(h: &SimHandle, body: &Value) -> Usage {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", h.base_url()))
        .header("x-api-key", "sk-test")
        .header("anthropic-version", "2023-06-01")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let m: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let usage: muninn_anthropic::wire::Usage = serde_json::from_value(m["usage"].clone()).unwrap();
    usage.to_core()
}

/// A slow request (its first byte delayed) is processed when its delay ends, not when it
/// arrived. It used to be applied to the cache at its arrival time after a request that arrived
/// later had been: it read what that later request wrote, and refreshed the entry with an
/// expiry counted from its own, earlier arrival — cutting the entry's life short, so that a
/// request 6 minutes after the last write missed a 5-minute entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_does_not_cut_short_the_ttl_a_later_one_set() {
    let h = sim().await;
    muninn_anthropic::client::install_ring_provider();
    let system = long_system("order", 2);
    let body = body(&system);
    h.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 5_000,
            event_ms: 0,
        },
        times: 1,
    }]);
    let slow = tokio::spawn({
        let (base, body) = (h.base_url(), body.clone());
        async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/messages"))
                .header("x-api-key", "sk-test")
                .header("anthropic-version", "2023-06-01")
                .body(body.to_string())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    // The slow request has arrived once it took its fault.
    while !h.sim.faults().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h.sim.advance_clock(4 * MINUTE);
    let written = post(&h, &body).await;
    assert!(written.written() > 1_000, "{written:?}");
    assert_eq!(slow.await.unwrap(), 200);
    h.sim.advance_clock(2 * MINUTE);
    let read = post(&h, &body).await;
    assert_eq!(
        (read.cache_read, read.written()),
        (written.written(), 0),
        "6 minutes after the write, 2 after the slow request's delay: {read:?}"
    );
}
