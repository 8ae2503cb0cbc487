//! Refusals the client retries or surfaces: a rate limit waits for `retry-after`, server
//! errors back off exponentially with jitter, a client error surfaces at once and leaves the
//! session usable, a refusal keeps its request id, and the retries run out.

use super::{fault, spec};
use crate::support::{T0, message_records, sim, wired};
use muninn_backend::{Backend, BackendError, TurnInput};
use muninn_core::cache::Ttl;
use muninn_core::ledger::MissCause;
use muninn_sim::sim::FaultKind;
use pretty_assertions::assert_eq;
use std::time::Duration;

#[tokio::test]
async fn rate_limits_wait_for_retry_after() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("429", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([fault(
        FaultKind::RateLimit {
            retry_after_s: Some(2.0),
        },
        2,
    )]);
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(w.sleeper.delays(), vec![Duration::from_secs(2); 2]);
    assert_eq!(
        o.retries
            .iter()
            .map(|r| (r.attempt, r.status, r.kind.as_str(), r.retry_after_ms))
            .collect::<Vec<_>>(),
        vec![
            (1, Some(429), "rate_limit_error", Some(2000)),
            (2, Some(429), "rate_limit_error", Some(2000))
        ]
    );
    assert_eq!(h.sim.requests().len(), 3);
}

#[tokio::test]
async fn server_errors_back_off_exponentially_with_jitter() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("5xx", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([
        fault(FaultKind::Overloaded, 1),
        fault(FaultKind::ServerError, 2),
    ]);
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    let delays = w.sleeper.delays();
    assert_eq!(delays.len(), 3);
    for (d, base) in delays.iter().zip([500u64, 1000, 2000]) {
        let base = Duration::from_millis(base);
        assert!(*d >= base && *d <= base.mul_f64(1.25), "{d:?} vs {base:?}");
    }
    let statuses: Vec<_> = o.retries.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![Some(529), Some(500), Some(500)]);
    // The refused attempts never touched the cache: the success is the cold start.
    assert_eq!(o.miss, Some(MissCause::ColdStart));
    assert_eq!(Some(o.usage), o.predicted);
}

#[tokio::test]
async fn client_errors_surface_at_once_and_leave_the_session_usable() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("400", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([fault(
        FaultKind::BadRequest {
            message: "prompt is too long: 1000001 tokens > 1000000 maximum".into(),
        },
        1,
    )]);
    let e = w.backend.turn(TurnInput::text("hello")).await.unwrap_err();
    match &e {
        BackendError::Api {
            status: 400,
            kind,
            message,
            retryable: false,
            ..
        } => {
            assert_eq!(kind, "invalid_request_error");
            assert!(message.starts_with("prompt is too long"));
        }
        other => panic!("{other:?}"),
    }
    assert!(w.sleeper.delays().is_empty());
    h.sim.push_faults([fault(FaultKind::Unauthorized, 1)]);
    assert!(matches!(
        w.backend.turn(TurnInput::text("hello")).await,
        Err(BackendError::Api { status: 401, .. })
    ));
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(o.text, "Reply to turn 1: 'hello'");
}

/// The provider's `request-id` of a request it refused is kept, as an answered one's is: the
/// error says it (a user quotes it to the provider), and each retry's event — which goes into
/// the answered request's ledger row — names the attempt it retried.
#[tokio::test]
async fn a_refused_request_keeps_its_request_id() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("request-id", Ttl::FiveMinutes))
        .await
        .unwrap();
    let id = |r: &muninn_sim::sim::RecordedRequest| format!("req_sim_{:08}", r.seq);
    h.sim.push_faults([fault(
        FaultKind::BadRequest {
            message: "refused".into(),
        },
        1,
    )]);
    let refused = w.backend.turn(TurnInput::text("hello")).await.unwrap_err();
    let records = message_records(&h);
    assert!(refused.to_string().contains(&id(&records[0])), "{refused}");
    h.sim.push_faults([fault(FaultKind::Overloaded, 2)]);
    let answered = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    let records = message_records(&h);
    let retried: Vec<serde_json::Value> = answered
        .retries
        .iter()
        .map(|r| serde_json::to_value(r).unwrap()["request_id"].clone())
        .collect();
    assert_eq!(
        retried,
        [id(&records[1]), id(&records[2])].map(serde_json::Value::from)
    );
    assert_eq!(answered.request_id, Some(id(&records[3])));
}

#[tokio::test]
async fn retries_run_out() {
    let h = sim().await;
    let sleeper = muninn_backend::clock::RecordingSleeper::default();
    let client = crate::support::client(&h, &sleeper, 3);
    let mut b = muninn_anthropic::backend::AnthropicBackend::new(
        client,
        std::sync::Arc::new(muninn_backend::clock::ManualClock::new(T0)),
        muninn_core::price::PriceTable::embedded(),
    );
    b.start(spec("exhaust", Ttl::FiveMinutes)).await.unwrap();
    h.sim.push_faults([fault(FaultKind::Overloaded, 10)]);
    match b.turn(TurnInput::text("hello")).await.unwrap_err() {
        BackendError::RetriesExhausted { attempts: 4, last } => {
            assert!(matches!(*last, BackendError::Api { status: 529, .. }));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sleeper.delays().len(), 3);
}
