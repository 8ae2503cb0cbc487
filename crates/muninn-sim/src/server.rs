//! The HTTP face of the simulator: an Anthropic-compatible API plus an admin API for tests.
//!
//! # API routes
//!
//! - `POST /v1/messages` (any query, e.g. `?beta=true`): streaming (SSE: `message_start`, `ping`,
//!   per block `content_block_start`, `content_block_delta` (`text_delta`,
//!   `input_json_delta`, or one `compaction_delta` after a compaction block started with
//!   `"content": null`), `content_block_stop`, then `message_delta`, `message_stop`; or an
//!   `error` event) when the body says `"stream": true`, else one JSON message.
//! - `POST /v1/messages/count_tokens`: `{"input_tokens": N}`.
//!
//! Both require a key (`x-api-key` or `Authorization: Bearer`; a 401 `authentication_error`
//! otherwise, and when [`crate::sim::SimConfig::api_key`] is set it must match) and an
//! `anthropic-version` header (a 400 otherwise). `anthropic-beta` is accepted and recorded.
//! Errors use the API's shape `{"type":"error","error":{"type":…,"message":…}}` with a
//! `request-id` header, and `retry-after` for an injected 429. Unknown routes are a 404
//! `not_found_error`.
//!
//! # Admin routes (tests only; no authentication — bind to loopback)
//!
//! - `GET|POST|DELETE /admin/faults` — the fault queue; POST takes one [`Fault`] or a list, e.g.
//!   `{"kind":"rate_limit","retry_after_s":2,"times":2}`, or
//!   `{"kind":"inflate_usage","cache_read_tokens":970000}` to make a client believe its context
//!   is nearly full, or `{"kind":"trickle","every_ms":60000}` for a reply that never goes
//!   silent yet takes hours (one character, or one byte, a minute), or
//!   `{"kind":"stall_before_headers","ms":5000}` for a request answered and billed whose
//!   response then does not start.
//! - `GET|POST /admin/clock` — `{"now_ms":…}`; POST `{"advance_ms":N}` moves virtual time (a
//!   400 for an N below 0 or past [`crate::sim::MAX_NOW_MS`]).
//! - `GET|DELETE /admin/requests` — the recorded [`crate::sim::RecordedRequest`]s.
//! - `POST /admin/reset` — empties the cache, the faults and the log.

use crate::sim::{Answer, ApiError, Fault, FaultKind, MAX_NOW_MS, RecordedRequest, Simulator};
use crate::strict::MAX_BODY_BYTES;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use muninn_anthropic::sse::encode;
use muninn_anthropic::wire::{
    ContentBlock, Delta, ErrorBody, MessageDeltaBody, MessagesResponse, Role, StreamEvent, Usage,
    UsageIteration,
};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The router over a shared simulator.
pub fn router(sim: Arc<Simulator>) -> Router {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route(
            "/admin/faults",
            get(get_faults).post(post_faults).delete(delete_faults),
        )
        .route("/admin/clock", get(get_clock).post(post_clock))
        .route("/admin/requests", get(get_requests).delete(delete_requests))
        .route("/admin/reset", post(reset))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(sim)
}

fn error_response(e: &ApiError, request_id: &str) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = e.body.clone();
    body.request_id = Some(request_id.to_string());
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(s) = e.retry_after_s
        && let Ok(v) = HeaderValue::from_str(&format!("{s}"))
    {
        response.headers_mut().insert("retry-after", v);
    }
    with_request_id(response, request_id)
}

async fn not_found() -> Response {
    error_response(
        &ApiError::new(404, "not_found_error", "Not Found"),
        "req_sim_none",
    )
}

/// Checks the key and the version header; returns how the key was presented.
fn check_headers(sim: &Simulator, headers: &HeaderMap) -> Result<&'static str, ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (scheme, key) = if let Some(k) = header("x-api-key") {
        ("x-api-key", k)
    } else if let Some(k) = header("authorization").and_then(|a| a.strip_prefix("Bearer ")) {
        ("bearer", k)
    } else {
        return Err(ApiError::new(
            401,
            "authentication_error",
            "x-api-key header is required",
        ));
    };
    if key.trim().is_empty() {
        return Err(ApiError::new(
            401,
            "authentication_error",
            "invalid x-api-key",
        ));
    }
    if let Some(expected) = &sim.config().api_key
        && key != expected
    {
        return Err(ApiError::new(
            401,
            "authentication_error",
            "invalid x-api-key",
        ));
    }
    if header("anthropic-version").is_none() {
        return Err(ApiError::new(
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
        ));
    }
    Ok(scheme)
}

/// The refusal a fault stands for, if it is one (stream faults are not).
pub(crate) fn fault_error(kind: &FaultKind) -> Option<ApiError> {
    Some(match kind {
        FaultKind::RateLimit { retry_after_s } => ApiError {
            retry_after_s: *retry_after_s,
            ..ApiError::new(
                429,
                "rate_limit_error",
                "This request would exceed your organization's rate limit (simulated).",
            )
        },
        FaultKind::Overloaded => ApiError::new(529, "overloaded_error", "Overloaded"),
        FaultKind::CompactionUnavailable => ApiError::new(
            529,
            "compaction_unavailable",
            "Compaction is temporarily unavailable (simulated).",
        ),
        FaultKind::ServerError => ApiError::new(500, "api_error", "Internal server error"),
        FaultKind::BadRequest { message } => {
            ApiError::new(400, "invalid_request_error", message.clone())
        }
        FaultKind::Unauthorized => ApiError::new(401, "authentication_error", "invalid x-api-key"),
        FaultKind::MidStreamError { .. }
        | FaultKind::Truncate { .. }
        | FaultKind::Slow { .. }
        | FaultKind::StallBeforeHeaders { .. }
        | FaultKind::Trickle { .. }
        | FaultKind::InflateUsage { .. } => {
            return None;
        }
    })
}

/// A request as received, before it is checked: its record (body `null` when not JSON) and,
/// when the body is not JSON, the 400 it will be refused with (after the header checks).
fn receive(
    sim: &Simulator,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> (RecordedRequest, Option<ApiError>) {
    let (body, invalid) = match serde_json::from_slice::<Value>(body) {
        Ok(value) => (value, None),
        Err(e) => (
            Value::Null,
            Some(ApiError::new(
                400,
                "invalid_request_error",
                format!("invalid JSON body: {e}"),
            )),
        ),
    };
    let beta = headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let record = sim.arrival(path, "none", beta, body);
    (record, invalid)
}

/// The API's answer to a body it would not read: 413 `request_too_large` past
/// [`MAX_BODY_BYTES`], as JSON like every other error.
fn unread_body(rejection: BytesRejection) -> Response {
    let e = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            413,
            "request_too_large",
            format!("Request exceeds the maximum allowed number of bytes ({MAX_BODY_BYTES})"),
        )
    } else {
        ApiError::new(400, "invalid_request_error", rejection.body_text())
    };
    error_response(&e, "req_sim_unread")
}

/// What both API routes do first: read the body, make the request's record, check the headers,
/// then the JSON. A refusal is recorded and answered here; an accepted request comes back as
/// its record and its `request-id` (the refusal boxed: a `Response` is large).
fn admit(
    sim: &Simulator,
    path: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(RecordedRequest, String), Box<Response>> {
    let body = body.map_err(|rejection| Box::new(unread_body(rejection)))?;
    let (mut record, invalid) = receive(sim, path, headers, &body);
    let request_id = request_id(record.seq);
    let checked = check_headers(sim, headers).and_then(|scheme| {
        record.auth = scheme.to_string();
        invalid.map_or(Ok(()), Err)
    });
    match checked {
        Ok(()) => Ok((record, request_id)),
        Err(e) => {
            record_refusal(sim, record, &e);
            Err(Box::new(error_response(&e, &request_id)))
        }
    }
}

/// `response` with its `request-id` header.
fn with_request_id(mut response: Response, request_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert("request-id", v);
    }
    response
}

async fn messages(
    State(sim): State<Arc<Simulator>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (record, request_id) = match admit(&sim, "/v1/messages", &headers, body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let stream = record
        .body
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (answer, fault) = match answer(&sim, record, stream).await {
        Ok(answered) => answered,
        Err(e) => return error_response(&e, &request_id),
    };
    // Answered and billed already: a client that gives up now has paid for it.
    if let Some(FaultKind::StallBeforeHeaders { ms }) = &fault {
        tokio::time::sleep(Duration::from_millis(*ms)).await;
    }
    let response = match (stream, &fault) {
        (true, _) => stream_response(&answer, fault.as_ref()),
        (false, Some(FaultKind::Trickle { every_ms })) => trickled_message(answer, *every_ms),
        (false, _) => axum::Json(answer.into_message()).into_response(),
    };
    with_request_id(response, &request_id)
}

/// Records a refused request with the error it was answered.
pub(crate) fn record_refusal(sim: &Simulator, mut record: RecordedRequest, e: &ApiError) {
    record.status = e.status;
    record.error = Some(format!("{}: {}", e.body.error.kind, e.body.error.message));
    sim.record(record);
}

/// Answers a messages request whose headers and body were accepted, the same over HTTP and
/// in-process: takes the next fault (waiting out a slow first byte — the request is then
/// processed, and its cache applied, at the time the wait ends —, refusing for a refusal
/// fault), asks the simulator, applies a usage-report fault and records the outcome either
/// way. Returns the answer with the fault, whose stream effects are the caller's to apply.
///
/// A `streamed` answer that the fault cuts ([`FaultKind::Truncate`], [`FaultKind::MidStreamError`])
/// is billed as the provider bills a stream that broke off after `message_start`: its input and
/// cache in full (the cache was written), and the output it sent
/// ([`muninn_anthropic::client::billed_by_cut`] of the events before the cut). In-process, the
/// cut is the transport's to report (`inprocess.rs`), billed the same.
pub(crate) async fn answer(
    sim: &Simulator,
    mut record: RecordedRequest,
    streamed: bool,
) -> Result<(Answer, Option<FaultKind>), ApiError> {
    let fault = sim.take_fault();
    record.fault = fault.clone();
    if let Some(FaultKind::Slow { first_byte_ms, .. }) = &fault {
        tokio::time::sleep(Duration::from_millis(*first_byte_ms)).await;
        // Processed now, not at its arrival: requests that arrived meanwhile were applied to the
        // cache already, and one applied at an earlier time would read what they wrote and
        // refresh it with an expiry from before theirs. (A client gone during the delay has its
        // request dropped unprocessed, as before.)
        record.at_ms = sim.now_ms();
    }
    let outcome = match fault.as_ref().and_then(fault_error) {
        Some(e) => Err(e),
        None => sim.messages(
            &record.body,
            record.anthropic_beta.as_deref(),
            record.seq,
            record.at_ms,
        ),
    };
    match outcome {
        Ok(mut answer) => {
            answer.apply_report_fault(fault.as_ref());
            let cut = streamed
                .then(|| billed_by_cut(&answer, fault.as_ref()))
                .flatten();
            record.usage = Some(cut.unwrap_or_else(|| answer.billed()));
            record.miss = answer.miss;
            record.provider_miss = answer.provider_miss;
            sim.record(record);
            Ok((answer, fault))
        }
        Err(e) => {
            record_refusal(sim, record, &e);
            Err(e)
        }
    }
}

/// A whole (non-streaming) answer sent one byte every `every_ms` ([`FaultKind::Trickle`]).
fn trickled_message(answer: Answer, every_ms: u64) -> Response {
    let json = serde_json::to_vec(&answer.into_message()).unwrap_or_default();
    let bytes = json.iter().map(|b| Bytes::copy_from_slice(&[*b])).collect();
    let mut response = Response::new(paced(bytes, every_ms));
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// The `request-id` the server gives request `seq` (the in-process transport gives the same).
pub(crate) fn request_id(seq: u64) -> String {
    format!("req_sim_{seq:08}")
}

/// A body of `pieces`, `delay_ms` between each two (none before the first).
fn paced(pieces: Vec<Bytes>, delay_ms: u64) -> Body {
    let stream = futures_util::stream::unfold(
        (pieces.into_iter(), true),
        move |(mut it, first)| async move {
            let piece = it.next()?;
            if delay_ms > 0 && !first {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            Some((Ok::<Bytes, std::io::Error>(piece), (it, false)))
        },
    );
    Body::from_stream(stream)
}

/// The events of a streamed answer, in order, each flagged when it is a content delta; with
/// `one_char`, each delta carries one character (a trickle).
fn events(answer: &Answer, one_char: bool) -> Vec<(StreamEvent, bool)> {
    let full = answer.wire_usage();
    let mut out = vec![
        (message_start(answer, &full), false),
        (StreamEvent::Ping, false),
    ];
    for (index, block) in answer.reply.content.iter().enumerate() {
        out.extend(block_events(index, block, one_char));
    }
    out.push((
        StreamEvent::MessageDelta {
            delta: MessageDeltaBody {
                stop_reason: Some(answer.reply.stop_reason.to_string()),
                stop_sequence: None,
            },
            usage: full,
            // Said on `message_start` (see there).
            context_management: None,
        },
        false,
    ));
    out.push((StreamEvent::MessageStop, false));
    out
}

/// `message_start`: the message without content, its usage with one output token so far and
/// each pass's (`iterations[]`) with none — its prompt is known at the start, its output not
/// (a stream cut before `message_delta` is billed the output it sent).
fn message_start(answer: &Answer, full: &Usage) -> StreamEvent {
    let iterations = full.iterations.clone().map(|passes| {
        passes
            .into_iter()
            .map(|pass| UsageIteration {
                output_tokens: 0,
                ..pass
            })
            .collect()
    });
    StreamEvent::MessageStart {
        message: MessagesResponse {
            id: answer.id.clone(),
            kind: "message".to_string(),
            role: Role::Assistant,
            model: answer.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: Usage {
                output_tokens: Some(1),
                iterations,
                ..full.clone()
            },
            diagnostics: answer.diagnostics.clone(),
            // Like the diagnostics, the applied edits are known before any output.
            context_management: answer.context_management.clone(),
            unapplied_deltas: Vec::new(),
        },
    }
}

/// One content block's events: its start (empty for text and tool calls), its deltas (of one
/// character each with `one_char`), its stop.
fn block_events(index: usize, block: &ContentBlock, one_char: bool) -> Vec<(StreamEvent, bool)> {
    let (text_chars, json_chars) = if one_char { (1, 1) } else { (24, 32) };
    let start = |content_block| {
        (
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            },
            false,
        )
    };
    let delta = |delta| (StreamEvent::ContentBlockDelta { index, delta }, true);
    let mut out = Vec::new();
    match block {
        // Each block starts with the fields it carries besides its text or input, as the
        // API's do.
        ContentBlock::Text { text, extra, .. } => {
            out.push(start(ContentBlock::Text {
                text: String::new(),
                cache_control: None,
                extra: extra.clone(),
            }));
            out.extend(
                pieces(text, text_chars)
                    .into_iter()
                    .map(|piece| delta(Delta::TextDelta { text: piece })),
            );
        }
        ContentBlock::ToolUse {
            id,
            name,
            input,
            extra,
            ..
        } => {
            out.push(start(ContentBlock::ToolUse {
                id: id.clone(),
                name: name.clone(),
                input: json!({}),
                cache_control: None,
                extra: extra.clone(),
            }));
            let json_text = serde_json::to_string(input).unwrap_or_else(|_| "{}".to_string());
            out.extend(pieces(&json_text, json_chars).into_iter().map(|piece| {
                delta(Delta::InputJsonDelta {
                    partial_json: piece,
                })
            }));
        }
        // As the API streams a compaction: the block starts with its summary `null` (the
        // signature already there, where the official SDK's accumulator keeps it from), and
        // the whole summary follows in one `compaction_delta`.
        // A compaction's fields besides its summary and signature come with its summary, as
        // the API's `encrypted_content` does.
        ContentBlock::Compaction {
            content,
            signature,
            extra,
        } => {
            out.push(start(ContentBlock::Unknown(json!({
                "type": "compaction",
                "content": null,
                "signature": signature,
            }))));
            out.push(delta(Delta::CompactionDelta {
                content: Some(content.clone()),
                extra: extra.clone(),
            }));
        }
        // Any other block (none yet) starts whole.
        other => out.push(start(other.clone())),
    }
    out.push((StreamEvent::ContentBlockStop { index }, false));
    out
}

/// `text` cut into pieces of at most `n` characters (at least one piece).
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// What a streamed answer that `fault` cuts is billed (see [`answer`]); `None` when it is not
/// cut.
fn billed_by_cut(answer: &Answer, fault: Option<&FaultKind>) -> Option<muninn_core::trace::Usage> {
    cut_seen(answer, fault).map(|cut| cut.usage)
}

/// What the client sees of a stream that a fault cuts: the billing it reads from the events
/// before the cut, and whether content had begun.
pub(crate) struct CutSeen {
    /// As [`muninn_anthropic::client::billed_by_cut`] reads it.
    pub(crate) usage: muninn_core::trace::Usage,
    /// `message_start`'s usage JSON (with any `message_delta` laid over it).
    pub(crate) raw_usage: Value,
    /// Whether a content delta came before the cut.
    pub(crate) after_content: bool,
}

/// What the client sees of `answer`'s stream when `fault` cuts it; `None` when it is not cut.
pub(crate) fn cut_seen(answer: &Answer, fault: Option<&FaultKind>) -> Option<CutSeen> {
    let all = events(answer, false);
    let cut = cut_at(&all, fault)?;
    let sent: Vec<String> = all[..cut]
        .iter()
        .filter_map(|(e, _)| serde_json::to_string(e).ok())
        .collect();
    let (usage, raw_usage) = muninn_anthropic::client::billed_by_cut(&sent)?;
    Some(CutSeen {
        usage,
        raw_usage,
        after_content: all[..cut].iter().any(|(_, is_delta)| *is_delta),
    })
}

/// How many of a stream's events `fault` lets through before it cuts the stream, if it does.
fn cut_at(all: &[(StreamEvent, bool)], fault: Option<&FaultKind>) -> Option<usize> {
    match fault {
        Some(
            FaultKind::MidStreamError { after_deltas, .. } | FaultKind::Truncate { after_deltas },
        ) => {
            // After `message_start` and `ping` when 0; else just after the n-th content delta,
            // or at `message_delta` when the reply has fewer deltas than that.
            let n = *after_deltas as usize;
            let at = if n == 0 {
                Some(2)
            } else {
                all.iter()
                    .enumerate()
                    .filter(|(_, (_, is_delta))| *is_delta)
                    .nth(n - 1)
                    .map(|(i, _)| i + 1)
            };
            Some(at.unwrap_or_else(|| {
                all.iter()
                    .position(|(e, _)| matches!(e, StreamEvent::MessageDelta { .. }))
                    .unwrap_or(all.len())
            }))
        }
        _ => None,
    }
}

fn stream_response(answer: &Answer, fault: Option<&FaultKind>) -> Response {
    let all = events(answer, matches!(fault, Some(FaultKind::Trickle { .. })));
    let cut = cut_at(&all, fault);
    let mut frames: Vec<String> = all
        .iter()
        .take(cut.unwrap_or(all.len()))
        .map(|(e, _)| encode(e))
        .collect();
    if let Some(FaultKind::MidStreamError { error_type, .. }) = fault {
        frames.push(encode(&StreamEvent::Error {
            error: ErrorBody {
                kind: error_type.clone(),
                message: "Overloaded (simulated mid-stream failure)".to_string(),
            },
        }));
    }
    let delay = match fault {
        Some(FaultKind::Slow { event_ms, .. }) => *event_ms,
        Some(FaultKind::Trickle { every_ms }) => *every_ms,
        _ => 0,
    };
    let frames = frames.into_iter().map(Bytes::from).collect();
    let mut response = Response::new(paced(frames, delay));
    let h = response.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

async fn count_tokens(
    State(sim): State<Arc<Simulator>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (record, request_id) = match admit(&sim, "/v1/messages/count_tokens", &headers, body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    match sim.count_tokens(&record.body, record.at_ms) {
        Ok(n) => {
            sim.record(record);
            let response = axum::Json(json!({ "input_tokens": n })).into_response();
            with_request_id(response, &request_id)
        }
        Err(e) => {
            record_refusal(&sim, record, &e);
            error_response(&e, &request_id)
        }
    }
}

async fn get_faults(State(sim): State<Arc<Simulator>>) -> Response {
    axum::Json(sim.faults()).into_response()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FaultBody {
    One(Fault),
    Many(Vec<Fault>),
}

async fn post_faults(State(sim): State<Arc<Simulator>>, body: Bytes) -> Response {
    match serde_json::from_slice::<FaultBody>(&body) {
        Ok(FaultBody::One(f)) => sim.push_faults([f]),
        Ok(FaultBody::Many(fs)) => sim.push_faults(fs),
        Err(e) => {
            return error_response(
                &ApiError::new(400, "invalid_request_error", format!("not a fault: {e}")),
                "req_sim_admin",
            );
        }
    }
    axum::Json(sim.faults()).into_response()
}

async fn delete_faults(State(sim): State<Arc<Simulator>>) -> Response {
    sim.clear_faults();
    StatusCode::NO_CONTENT.into_response()
}

async fn get_clock(State(sim): State<Arc<Simulator>>) -> Response {
    axum::Json(json!({ "now_ms": sim.now_ms() })).into_response()
}

#[derive(Deserialize)]
struct ClockBody {
    advance_ms: i64,
}

async fn post_clock(State(sim): State<Arc<Simulator>>, body: Bytes) -> Response {
    let room = MAX_NOW_MS - sim.now_ms();
    match serde_json::from_slice::<ClockBody>(&body) {
        Ok(b) if (0..=room).contains(&b.advance_ms) => {
            axum::Json(json!({ "now_ms": sim.advance_clock(b.advance_ms) })).into_response()
        }
        _ => error_response(
            &ApiError::new(
                400,
                "invalid_request_error",
                format!(
                    "expected {{\"advance_ms\": N}} with 0 <= N <= {room} (the clock never goes \
                     back, nor past the year 9999)"
                ),
            ),
            "req_sim_admin",
        ),
    }
}

async fn get_requests(State(sim): State<Arc<Simulator>>) -> Response {
    axum::Json(sim.requests()).into_response()
}

async fn delete_requests(State(sim): State<Arc<Simulator>>) -> Response {
    sim.clear_requests();
    StatusCode::NO_CONTENT.into_response()
}

async fn reset(State(sim): State<Arc<Simulator>>) -> Response {
    sim.reset();
    StatusCode::NO_CONTENT.into_response()
}
