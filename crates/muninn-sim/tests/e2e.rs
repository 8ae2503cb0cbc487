//! The Anthropic backend end to end against `sim-api`: growth of cache reads, TTL expiry on the
//! virtual clock, every injected error retried with the right delay or surfaced, the honoured
//! TTL, and the key kept out of everything recorded.

use crate::support::{T0, long_system, message_records, recompute, sim, sim_with, wired};
use muninn_backend::{Backend, BackendError, SessionSpec, TurnEvent, TurnInput};
use muninn_core::cache::Ttl;
use muninn_core::ledger::MissCause;
use muninn_sim::SimHandle;
use muninn_sim::sim::{Fault, FaultKind, SimConfig};
use pretty_assertions::assert_eq;
use std::time::Duration;

fn spec(tag: &str, system_ttl: Ttl) -> SessionSpec {
    SessionSpec {
        model: "claude-opus-5-5".to_string(),
        system: vec![long_system(tag, 2), "Be brief.".to_string()],
        tools: Vec::new(),
        output_schema: None,
        system_ttl,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 512,
    }
}

fn fault(kind: FaultKind, times: u32) -> Fault {
    Fault { kind, times }
}

#[tokio::test]
async fn cache_reads_grow_turn_by_turn_and_match_the_model() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("grow", Ttl::FiveMinutes))
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    for turn in 1..=6 {
        w.clock.advance(20_000);
        h.sim.advance_clock(20_000);
        let o = w
            .backend
            .turn(TurnInput::text(format!("turn {turn}, tell me more")))
            .await
            .unwrap();
        assert_eq!(Some(o.usage), o.predicted, "turn {turn}");
        assert!(o.retries.is_empty() && o.events.is_empty());
        outcomes.push(o);
    }
    assert_eq!(outcomes[0].miss, Some(MissCause::ColdStart));
    assert_eq!(outcomes[0].usage.cache_read, 0);
    for pair in outcomes.windows(2) {
        assert!(pair[1].usage.cache_read > pair[0].usage.cache_read);
        // Append-only: each turn reads everything the previous one wrote or read.
        assert_eq!(
            pair[1].usage.cache_read,
            pair[0].usage.prompt() - pair[0].usage.input
        );
    }
    let records = h.sim.requests();
    let reported: Vec<_> = outcomes.iter().map(|o| o.usage).collect();
    assert_eq!(recompute(&records), reported);
    assert!(
        records
            .iter()
            .all(|r| r.body["stream"] == serde_json::json!(true))
    );
}

#[tokio::test]
async fn an_idle_gap_past_the_ttl_is_a_ttl_expiry_miss() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("idle", Ttl::FiveMinutes))
        .await
        .unwrap();
    w.backend.turn(TurnInput::text("one")).await.unwrap();
    let warm = w.backend.turn(TurnInput::text("two")).await.unwrap();
    assert!(warm.usage.cache_read > 0);
    w.clock.advance(6 * 60_000);
    h.sim.advance_clock(6 * 60_000);
    let cold = w.backend.turn(TurnInput::text("three")).await.unwrap();
    assert_eq!(cold.usage.cache_read, 0);
    assert_eq!(cold.miss, Some(MissCause::TtlExpiry));
    assert_eq!(h.sim.requests()[2].miss, Some(MissCause::TtlExpiry));
    assert_eq!(Some(cold.usage), cold.predicted);
}

#[tokio::test]
async fn a_1h_system_layer_survives_a_gap_the_5m_tail_does_not() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend.start(spec("layers", Ttl::OneHour)).await.unwrap();
    let first = w.backend.turn(TurnInput::text("one")).await.unwrap();
    assert!(first.usage.cache_write_1h > 1000 && first.usage.cache_write_5m > 0);
    assert_eq!(first.ttl.honoured(), Some(Ttl::OneHour));
    w.backend.turn(TurnInput::text("two")).await.unwrap();
    w.clock.advance(10 * 60_000);
    h.sim.advance_clock(10 * 60_000);
    let third = w.backend.turn(TurnInput::text("three")).await.unwrap();
    assert_eq!(third.usage.cache_read, first.usage.cache_write_1h);
    assert_eq!(third.miss, Some(MissCause::TtlExpiry));
}

#[tokio::test]
async fn an_ignored_1h_ttl_is_flagged() {
    let h = sim_with(SimConfig {
        frozen_at_ms: Some(T0),
        honour_1h: false,
        ..Default::default()
    })
    .await;
    let mut w = wired(&h);
    w.backend
        .start(spec("ignored-1h", Ttl::OneHour))
        .await
        .unwrap();
    let o = w.backend.turn(TurnInput::text("one")).await.unwrap();
    assert_eq!(o.usage.cache_write_1h, 0);
    assert_eq!(o.ttl.honoured(), Some(Ttl::FiveMinutes));
    assert!(o.ttl.expected_1h > 0);
    assert!(
        matches!(o.events.as_slice(), [TurnEvent::TtlMismatch { .. }]),
        "{:?}",
        o.events
    );
}

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

/// A stream ended by an `error` event right after `message_start`, three times running: the
/// provider billed each attempt (it read the prompt), so the client retries none of them — each
/// retry would cost the prompt again unasked, past any spend cap the caller keeps (before, the
/// client retried inside the call and this turn was billed three prompts before it answered).
/// The call fails with the stream's retryable error and the one billed attempt, predicted
/// exactly; the caller's retry reads what the cut attempt wrote, as the mirror predicts.
#[tokio::test]
async fn a_stream_error_before_content_is_billed_and_left_to_the_caller() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("midstream-0", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([fault(
        FaultKind::MidStreamError {
            after_deltas: 0,
            error_type: "overloaded_error".into(),
        },
        3,
    )]);
    let error = w.backend.turn(TurnInput::text("hello")).await.unwrap_err();
    assert!(
        matches!(&error, BackendError::Api { kind, retryable: true, .. } if kind == "overloaded_error"),
        "{error:?}"
    );
    let records = message_records(&h);
    assert_eq!(records.len(), 1, "the client retried a billed attempt");
    let failed = w.backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(Some(failed[0].usage), records[0].usage);
    assert_eq!(failed[0].predicted, Some(failed[0].usage));
    assert_eq!(failed[0].usage.cache_read, 0);
    assert_eq!(
        failed[0].usage.output, 1,
        "message_start's count, no content"
    );
    // The caller retries (the host, after asking its cap): the fault's other two cuts, then
    // the answer, which reads what the cut attempts wrote.
    for _ in 0..2 {
        w.backend.turn(TurnInput::text("hello")).await.unwrap_err();
        assert_eq!(w.backend.take_failed_attempts().len(), 1);
    }
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    assert!(o.retries.is_empty(), "{:?}", o.retries);
    assert!(o.usage.cache_read > 0);
    assert_eq!(o.events.len(), 0, "{:?}", o.events);
    assert_eq!(o.predicted, Some(o.usage));
    assert_eq!(Some(o.usage), message_records(&h)[3].usage);
    assert!(w.backend.take_failed_attempts().is_empty(), "drained");
}

/// A question whose reply (which quotes it) streams in several deltas.
const ASKED: &str = "what did the mountain weather do to the expedition's plans this week?";

/// A stream cut after `message_start` and some content, on a turn not safe to repeat: the
/// turn fails, but the provider billed the attempt — its input, its cache write, the output it
/// sent — and the backend says so, with the simulator's own billing of the cut to the token;
/// the caller's retry of the turn reads the prefix the cut attempt wrote, as predicted.
#[tokio::test]
async fn a_stream_cut_after_content_is_billed_and_its_prefix_read_by_the_retry() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("cut-billed", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim
        .push_faults([fault(FaultKind::Truncate { after_deltas: 1 }, 1)]);
    let error = w.backend.turn(TurnInput::text(ASKED)).await.unwrap_err();
    assert!(
        matches!(error, BackendError::BrokenAfterContent(_)),
        "{error:?}"
    );
    let failed = w.backend.take_failed_attempts();
    let records = message_records(&h);
    assert_eq!(records.len(), 1);
    assert_eq!(failed.len(), 1, "{failed:?}");
    let cut = &failed[0];
    assert_eq!(Some(cut.usage), records[0].usage, "the simulator's billing");
    assert_eq!(cut.predicted, Some(cut.usage));
    assert!(cut.usage.written() > 0 && cut.usage.cache_read == 0);
    // One delta of 24 characters: more than `message_start`'s one token, less than the whole
    // reply.
    let whole = recompute(&records)[0].output;
    assert!(
        cut.usage.output > 1 && cut.usage.output < whole,
        "{} of {whole}",
        cut.usage.output
    );
    assert_eq!(
        cut.raw_usage["cache_creation_input_tokens"],
        cut.usage.written()
    );
    assert_eq!(cut.request_id.as_deref(), Some("req_sim_00000001"));
    assert!(cut.error.contains("before message_stop"), "{}", cut.error);

    let o = w.backend.turn(TurnInput::text(ASKED)).await.unwrap();
    assert_eq!(o.usage.cache_read, cut.usage.written());
    assert_eq!(o.predicted, Some(o.usage));
    assert_eq!(Some(o.usage), message_records(&h)[1].usage);
    assert!(w.backend.take_failed_attempts().is_empty());
}

/// Refusals before `message_start` (a 500, a 529) were not billed: no failed attempt, and the
/// answer that follows is predicted cold, as the simulator reports it.
#[tokio::test]
async fn a_refusal_before_message_start_is_not_billed() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("refused", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([
        fault(FaultKind::ServerError, 1),
        fault(FaultKind::Overloaded, 1),
    ]);
    let o = w.backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(o.retries.len(), 2);
    assert!(w.backend.take_failed_attempts().is_empty());
    assert_eq!(o.usage.cache_read, 0);
    assert_eq!(o.predicted, Some(o.usage));
    let billed: Vec<bool> = message_records(&h)
        .iter()
        .map(|r| r.usage.is_some())
        .collect();
    assert_eq!(billed, [false, false, true]);
}

#[tokio::test]
async fn a_cut_is_never_resent_by_the_client_and_is_broken_after_content_unless_safe() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("midstream-1", Ttl::FiveMinutes))
        .await
        .unwrap();
    h.sim.push_faults([fault(
        FaultKind::MidStreamError {
            after_deltas: 1,
            error_type: "overloaded_error".into(),
        },
        1,
    )]);
    match w.backend.turn(TurnInput::text("hello")).await.unwrap_err() {
        BackendError::BrokenAfterContent(inner) => {
            assert!(
                matches!(*inner, BackendError::Api { ref kind, .. } if kind == "overloaded_error")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.sim.requests().len(), 1);
    h.sim
        .push_faults([fault(FaultKind::Truncate { after_deltas: 1 }, 1)]);
    assert!(matches!(
        w.backend.turn(TurnInput::text("hello")).await.unwrap_err(),
        BackendError::BrokenAfterContent(inner) if matches!(*inner, BackendError::Protocol(_))
    ));
    h.sim
        .push_faults([fault(FaultKind::Truncate { after_deltas: 1 }, 1)]);
    let safe = TurnInput {
        safe_to_repeat: true,
        ..TurnInput::text("hello")
    };
    // Safe to repeat, the cut is a plain retryable failure, not a broken reply — still the
    // caller's to retry, as every attempt the provider billed is.
    let error = w.backend.turn(safe.clone()).await.unwrap_err();
    assert!(matches!(error, BackendError::Protocol(_)), "{error:?}");
    let o = w.backend.turn(safe).await.unwrap();
    assert!(o.retries.is_empty(), "{:?}", o.retries);
    assert_eq!(o.text, "Reply to turn 1: 'hello'");
}

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

/// An Anthropic backend on `h` whose attempts time out after `attempt_timeout`, its session
/// `name` started, one turn answered and a minute gone by (the cache warm, a keep-warm ping
/// due), with the sleeper its retries would wait on.
async fn a_minute_after_a_turn(
    h: &SimHandle,
    name: &str,
    attempt_timeout: Duration,
) -> (
    muninn_anthropic::backend::AnthropicBackend,
    muninn_backend::clock::RecordingSleeper,
) {
    use muninn_anthropic::client::{AnthropicClient, ClientConfig};
    let clock = muninn_backend::clock::ManualClock::new(T0);
    let sleeper = muninn_backend::clock::RecordingSleeper::default();
    let key = muninn_anthropic::secret::ApiKey::new("sk-test-secret-123").unwrap();
    let mut config = ClientConfig::new(h.base_url(), key);
    config.attempt_timeout = Some(attempt_timeout);
    let client = AnthropicClient::new(config, std::sync::Arc::new(sleeper.clone())).unwrap();
    let mut backend = muninn_anthropic::backend::AnthropicBackend::new(
        client,
        std::sync::Arc::new(clock.clone()),
        muninn_core::price::PriceTable::embedded(),
    );
    backend.start(spec(name, Ttl::FiveMinutes)).await.unwrap();
    backend.turn(TurnInput::text("hello")).await.unwrap();
    clock.advance(60_000);
    (backend, sleeper)
}

/// A keep-warm ping goes whole (`max_tokens: 0`, not streamed), so its `200` comes once the
/// provider has answered it — read the prompt, refreshed its cache, billed it. A body that then
/// breaks off (here: trickled past the attempt's deadline) is that billed answer lost, and the
/// client does not send it again: each resend is billed again (before, the client resent it
/// three times unsaid and the ping "succeeded" with four prompts billed and one reported). The
/// attempt is reported billed, its usage the cache model's prediction (the body never said),
/// which is the simulator's own billing.
#[tokio::test]
async fn a_whole_reply_cut_after_its_200_is_billed_and_not_resent() {
    let h = sim().await;
    let (mut backend, sleeper) =
        a_minute_after_a_turn(&h, "ping-cut", Duration::from_secs(2)).await;
    h.sim
        .push_faults([fault(FaultKind::Trickle { every_ms: 200 }, 3)]);
    let outcome = backend.ping().await;
    let records = message_records(&h);
    let billed: Vec<bool> = records.iter().map(|r| r.usage.is_some()).collect();
    assert_eq!(billed, [true, true], "resent after a 200: {outcome:?}");
    let error = outcome.unwrap_err();
    assert!(
        matches!(&error, BackendError::Transport(t) if t.contains("deadline")),
        "{error:?}"
    );
    assert!(sleeper.delays().is_empty(), "{:?}", sleeper.delays());
    let failed = backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        Some(failed[0].usage),
        records[1].usage,
        "the simulator's billing"
    );
    assert!(failed[0].usage.cache_read > 0, "{:?}", failed[0].usage);
    assert_eq!(failed[0].predicted, Some(failed[0].usage));
    assert_eq!(failed[0].request_id.as_deref(), Some("req_sim_00000002"));
    assert_eq!(
        failed[0].raw_usage,
        serde_json::Value::Null,
        "nothing reported"
    );
}

/// A keep-warm ping goes whole, so the provider has done its work — read the prompt,
/// refreshed the cache, billed it — before it sends the status. A connection that fails after
/// the request went and before the status came (here: the response stalls past the attempt's
/// deadline, the ping answered and billed) may have been billed: the client does not send it
/// again unasked (each resend may be billed again) and the backend reports the attempt as
/// billed at its prediction, which is the simulator's billing. Before, the client resent it:
/// two pings billed, one reported.
#[tokio::test]
async fn a_whole_reply_lost_before_its_status_may_be_billed_and_is_not_resent() {
    let h = sim().await;
    let (mut backend, _) = a_minute_after_a_turn(&h, "ping-stall", Duration::from_secs(1)).await;
    h.sim
        .push_faults([fault(FaultKind::StallBeforeHeaders { ms: 3_000 }, 1)]);
    let outcome = backend.ping().await;
    let records = message_records(&h);
    let billed: Vec<bool> = records.iter().map(|r| r.usage.is_some()).collect();
    assert_eq!(billed, [true, true], "resent unasked: {outcome:?}");
    let error = outcome.unwrap_err();
    assert!(
        matches!(&error, BackendError::Transport(t) if t.contains("deadline")),
        "{error:?}"
    );
    let failed = backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        Some(failed[0].usage),
        records[1].usage,
        "the simulator's billing"
    );
    assert!(failed[0].usage.cache_read > 0, "{:?}", failed[0].usage);
    assert_eq!(failed[0].raw_usage, serde_json::Value::Null, "nothing said");
    assert_eq!(failed[0].request_id, None, "no status, no id");
    // The row (its `attempt_failed` event) says the usage is an estimate: it reads as the
    // provider's otherwise, and the request may not have been billed.
    assert!(
        failed[0]
            .error
            .ends_with(muninn_anthropic::backend::USAGE_ESTIMATED),
        "{}",
        failed[0].error
    );
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

/// What a cut turn leaves: the error, with the retries the HTTP client gave up after taken off
/// (the in-process transport makes none), and the attempts billed.
fn cut_seen(
    error: BackendError,
    failed: Vec<muninn_backend::FailedAttempt>,
) -> (String, Vec<muninn_backend::FailedAttempt>) {
    let error = match error {
        BackendError::RetriesExhausted { last, .. } => *last,
        other => other,
    };
    (format!("{error:?}"), failed)
}

/// The in-process transport (the host tests' peer) fails and bills a stream cut after
/// `message_start` exactly as the HTTP client does once it gives up (here with no retries):
/// for a cut before content and after it, by a `truncate` and by an `error` event, on a turn
/// not safe to repeat, the same error — `BrokenAfterContent` after content — and the same
/// billed attempt: usage, raw usage, prediction, request id, error text.
#[tokio::test]
async fn a_cut_in_process_fails_and_is_billed_as_over_http() {
    let kinds = [
        FaultKind::Truncate { after_deltas: 0 },
        FaultKind::Truncate { after_deltas: 1 },
        FaultKind::Truncate { after_deltas: 99 },
        FaultKind::MidStreamError {
            after_deltas: 0,
            error_type: "overloaded_error".into(),
        },
        FaultKind::MidStreamError {
            after_deltas: 2,
            error_type: "invalid_request_error".into(),
        },
    ];
    for kind in kinds {
        let h = sim().await;
        let sleeper = muninn_backend::clock::RecordingSleeper::default();
        let clock = muninn_backend::clock::ManualClock::new(T0);
        let mut http = muninn_anthropic::backend::AnthropicBackend::new(
            crate::support::client(&h, &sleeper, 0),
            std::sync::Arc::new(clock.clone()),
            muninn_core::price::PriceTable::embedded(),
        );
        let local = std::sync::Arc::new(muninn_sim::sim::Simulator::new(SimConfig {
            frozen_at_ms: Some(T0),
            ..Default::default()
        }));
        let mut inprocess = muninn_anthropic::backend::AnthropicBackend::new(
            muninn_sim::inprocess::InProcess::new(local.clone()),
            std::sync::Arc::new(clock),
            muninn_core::price::PriceTable::embedded(),
        );
        http.start(spec("cut-alike", Ttl::FiveMinutes))
            .await
            .unwrap();
        inprocess
            .start(spec("cut-alike", Ttl::FiveMinutes))
            .await
            .unwrap();
        h.sim.push_faults([fault(kind.clone(), 1)]);
        local.push_faults([fault(kind.clone(), 1)]);
        let over_http = http.turn(TurnInput::text(ASKED)).await.unwrap_err();
        let here = inprocess.turn(TurnInput::text(ASKED)).await.unwrap_err();
        let over_http = cut_seen(over_http, http.take_failed_attempts());
        let here = cut_seen(here, inprocess.take_failed_attempts());
        assert_eq!(here, over_http, "{kind:?}");
        assert_eq!(here.1.len(), 1, "{kind:?}");
        assert_eq!(
            local.requests()[0].usage,
            h.sim.requests()[0].usage,
            "{kind:?}"
        );
    }
}
