//! Attempts cut short and billed: a stream cut before or after content is billed as the
//! simulator bills it and left to the caller, never resent by the client; a refusal before
//! `message_start` is not billed; a whole reply cut after its `200`, or lost before its status,
//! is counted billed and not resent; the in-process transport bills a cut as HTTP does.

use super::{fault, spec};
use crate::support::{T0, message_records, recompute, sim, wired};
use muninn_backend::{Backend, BackendError, TurnInput};
use muninn_core::cache::Ttl;
use muninn_sim::SimHandle;
use muninn_sim::sim::{FaultKind, SimConfig};
use pretty_assertions::assert_eq;
use std::time::Duration;

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
