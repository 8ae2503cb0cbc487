//! The HTTP API: how deliveries come in, replies go out, and operators look and steer.
//!
//! axum on loopback by default (`listen` in the configuration). Every route — including unknown
//! ones — requires `Authorization: Bearer <token>` (the scheme in any case), the token compared
//! in constant time; the token is created on first start in `<data_dir>/api-token`
//! ([`ApiToken`], mode 0600) and never logged, echoed or put in an error. Bodies are JSON ([`muninn_api::wire`], which the client in
//! `muninn-api` shares); every error is `{"error":{"type","message"}}`.
//!
//! Three probes need no token: `GET /healthz`, `GET /readyz` and `GET /metrics` (`ops.rs`). The
//! [`dashboard`](crate::dashboard) (`/dashboard…`) takes the bearer token or the dashboard's
//! cookie (set by its login page, `HttpOnly`, `SameSite=Strict`); the `/v1` routes accept that
//! cookie too, but only on requests carrying `X-Muninn-Dashboard: 1` — a header a cross-site page
//! cannot send without a CORS preflight this server never grants — which is how the dashboard's
//! brake and caps controls call the API.
//!
//! ## Routes
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/minds/{mind}/deliveries` | a message for the Mind → mailbox (idempotent by `source_id`); wakes the runtime |
//! | `GET /v1/minds/{mind}/outbox?after&wait_s&limit` | unacknowledged replies; long-polls up to `wait_s` |
//! | `GET /v1/minds/{mind}/outbox/stream?after` | the same as Server-Sent Events (`event: outbox`, `id: <seq>`) |
//! | `POST /v1/minds/{mind}/outbox/{request_id}/ack` | the transport delivered it (idempotent; needs no lease) |
//! | `POST /v1/minds/{mind}/briefs` | an operator brief for the Self; wakes the runtime |
//! | `GET /v1/minds`, `GET /v1/minds/{mind}` | config summary, settings, lease, segments, spend |
//! | `GET /v1/minds/{mind}/segments?limit&before&role` | each role's (or `role`'s) newest segments (default 100, at most 1000), below segment `before` if given |
//! | `GET /v1/minds/{mind}/transcript?role&after&last&limit&wait_s` | transcript items; long-polls |
//! | `GET /v1/minds/{mind}/ledger?from_ms&to_ms&after_id&limit&format=json\|jsonl` | ledger rows |
//! | `GET`/`PUT /v1/minds/{mind}/settings` | spend cap, window, turn limit (and the brake, read-only) |
//! | `POST`/`DELETE /v1/minds/{mind}/brake` | the operator brake on/off for one Mind |
//! | `POST`/`DELETE /v1/brake` | the operator brake on/off for every Mind |
//! | `GET /healthz`, `GET /readyz`, `GET /metrics` | liveness, readiness (503 with the reasons), Prometheus (no token) |
//! | `GET /dashboard`, `GET /dashboard/minds/{mind}`, `/dashboard/login` | the dashboard (HTML) |
//!
//! ## Wake-ups
//!
//! Intake (deliveries, briefs, settings) calls `signals.wake(mind)` after the store committed,
//! which wakes that Mind's runner and no other; the brake wakes every Mind it set. Long polls
//! and streams wait on `signals.outbox`, which the runtime fires with `notify_waiters()` (every
//! waiter, whichever Mind it reads) after it records outbox messages or transcript items; they
//! also re-read every [`POLL_SLICE`], so a write by another host (PostgreSQL) or a missed
//! wake-up costs at most that much latency, never a hang. Times written to the store come from
//! `host.clock`.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use muninn_store::{
    BriefOrigin, CapsWrite, LedgerQuery, MindSettings, NewBrief, NewDelivery, OutboxMessage, Role,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::Host;
use crate::config::MindConfig;
use muninn_api::ApiToken;
use muninn_api::wire::*;

mod body;
mod error;
mod minds;
mod ops;
mod server;

/// The longest a long poll waits (`wait_s` is clamped to it).
pub const MAX_WAIT: Duration = Duration::from_secs(MAX_WAIT_S);
/// How often a waiting long poll or stream re-reads the store without a wake-up.
pub const POLL_SLICE: Duration = Duration::from_secs(2);
/// Default and largest page of outbox messages and transcript items.
const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

pub use error::ApiError;
pub(crate) use error::ApiResult;
pub(crate) use minds::mind_status;
use minds::{brake_mind, brake_off, brake_on, get_mind, get_settings, list_minds, put_settings};

// ----- The router -----

#[derive(Clone)]
struct AppState {
    host: Host,
    token: Arc<ApiToken>,
    /// Becomes `true` when the server shuts down, so long polls answer and streams end at once
    /// instead of holding the graceful shutdown open.
    closing: Closing,
    /// Keeps the sender of a router built without [`serve`] alive (a dropped sender would
    /// make `closing` unusable).
    _closer: Option<Arc<tokio::sync::watch::Sender<bool>>>,
}

type Closing = tokio::sync::watch::Receiver<bool>;

/// Completes when the server starts shutting down; never, if it cannot tell.
async fn closed(closing: &Closing) {
    if closing.clone().wait_for(|closing| *closing).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Every `/v1` route [`router`] serves, as `(method, path)`: what the checked-in OpenAPI
/// document (`crates/muninn-api/openapi.json`) describes. A test compares the three.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/minds"),
    ("GET", "/v1/minds/{mind}"),
    ("POST", "/v1/minds/{mind}/deliveries"),
    ("GET", "/v1/minds/{mind}/outbox"),
    ("GET", "/v1/minds/{mind}/outbox/stream"),
    ("POST", "/v1/minds/{mind}/outbox/{request_id}/ack"),
    ("POST", "/v1/minds/{mind}/briefs"),
    ("GET", "/v1/minds/{mind}/segments"),
    ("GET", "/v1/minds/{mind}/transcript"),
    ("GET", "/v1/minds/{mind}/ledger"),
    ("GET", "/v1/minds/{mind}/settings"),
    ("PUT", "/v1/minds/{mind}/settings"),
    ("POST", "/v1/minds/{mind}/brake"),
    ("DELETE", "/v1/minds/{mind}/brake"),
    ("POST", "/v1/brake"),
    ("DELETE", "/v1/brake"),
];

/// The API as a router (see the [module docs](self) for the routes).
pub fn router(host: Host, token: ApiToken) -> Router {
    let (closer, closing) = tokio::sync::watch::channel(false);
    router_with(host, token, closing, Some(Arc::new(closer)))
}

fn router_with(
    host: Host,
    token: ApiToken,
    closing: Closing,
    closer: Option<Arc<tokio::sync::watch::Sender<bool>>>,
) -> Router {
    let state = AppState {
        host,
        token: Arc::new(token),
        closing,
        _closer: closer,
    };
    Router::new()
        .route("/v1/minds", get(list_minds))
        .route("/v1/minds/{mind}", get(get_mind))
        .route("/v1/minds/{mind}/deliveries", post(post_delivery))
        .route("/v1/minds/{mind}/outbox", get(get_outbox))
        .route("/v1/minds/{mind}/outbox/stream", get(stream_outbox))
        .route("/v1/minds/{mind}/outbox/{request_id}/ack", post(ack_outbox))
        .route("/v1/minds/{mind}/briefs", post(post_brief))
        .route("/v1/minds/{mind}/segments", get(get_segments))
        .route("/v1/minds/{mind}/transcript", get(get_transcript))
        .route("/v1/minds/{mind}/ledger", get(get_ledger))
        .route(
            "/v1/minds/{mind}/settings",
            get(get_settings).put(put_settings),
        )
        .route(
            "/v1/minds/{mind}/brake",
            post(brake_mind).delete(brake_mind),
        )
        .route("/v1/brake", post(brake_on).delete(brake_off))
        .with_state(state.clone())
        .merge(ops::router(state.host.clone()))
        .merge(crate::dashboard::router(
            state.host.clone(),
            state.token.clone(),
        ))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request",
                "method not allowed on this route",
            )
        })
        // Inside the token check: an unauthenticated client's body is never read.
        .layer(axum::middleware::from_fn_with_state(
            body::BodyLimits::new(&state.host.config.api),
            body::limit_body,
        ))
        // Outermost, so every route and the fallbacks are behind the token (but the probes and
        // the dashboard's login page).
        .layer(axum::middleware::from_fn_with_state(state, require_token))
}

/// Serves the API on `listener` until `shutdown` completes, under the `[api]` bounds (see
/// `server.rs`). Graceful: requests in flight finish, waiting long polls answer at once with
/// what they have, and event streams end.
pub async fn serve(
    host: Host,
    token: ApiToken,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (closer, closing) = tokio::sync::watch::channel(false);
    let limits = host.config.api.clone();
    let refused = host.telemetry.api_refused_counter();
    let router = router_with(host, token, closing.clone(), None);
    tokio::spawn(async move {
        shutdown.await;
        let _ = closer.send(true);
    });
    server::accept_loop(listener, router, &limits, refused, closing).await
}

/// The request header the dashboard's own API calls carry: with it (and only with it) a `/v1`
/// route accepts the dashboard's cookie instead of the bearer token.
pub const DASHBOARD_HEADER: &str = "x-muninn-dashboard";

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if ops::PUBLIC_PATHS.contains(&path) || path == crate::dashboard::LOGIN_PATH {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| bearer(value.as_bytes()));
    let dashboard = crate::dashboard::is_dashboard_path(path);
    if presented.is_none() {
        let cookie = crate::dashboard::cookie_token(request.headers());
        let by_cookie = dashboard || request.headers().contains_key(DASHBOARD_HEADER);
        if by_cookie && cookie.is_some_and(|c| state.token.matches(c.as_bytes())) {
            return next.run(request).await;
        }
        if dashboard {
            return crate::dashboard::to_login();
        }
    }
    match presented {
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing bearer token (Authorization: Bearer <token from <data_dir>/api-token>)",
        )
        .into_response(),
        Some(presented) if !state.token.matches(presented) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "invalid bearer token",
        )
        .into_response(),
        Some(_) => next.run(request).await,
    }
}

/// The token of a `Bearer` credential. The scheme is matched in any case (RFC 9110, 11.1):
/// a client that sends `bearer <token>` presents the token, and is not told it sent none.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(b"Bearer ".len())?;
    scheme.eq_ignore_ascii_case(b"Bearer ").then_some(token)
}

// ----- Helpers -----

/// Fails with `mind_not_found` unless the store has the Mind.
async fn require_mind(host: &Host, mind: &str) -> ApiResult<muninn_store::Mind> {
    host.store
        .mind(mind)
        .await?
        .ok_or_else(|| ApiError::mind_not_found(mind))
}

fn clamp_limit(limit: Option<i64>) -> ApiResult<i64> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if n <= 0 => Err(ApiError::bad_request("limit must be positive")),
        Some(n) => Ok(n.min(MAX_LIMIT)),
    }
}

/// Reads with `read` until it returns something, `wait` has passed or the server is closing,
/// sleeping on the outbox signal in between. The waiter is registered *before* each read, so a
/// notification between the read and the sleep is not lost.
async fn long_poll<T, F, Fut>(
    host: &Host,
    closing: &Closing,
    wait: Duration,
    mut read: F,
) -> ApiResult<Vec<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ApiResult<Vec<T>>>,
{
    let deadline = Instant::now() + wait.min(MAX_WAIT);
    loop {
        let notified = host.signals.outbox.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let items = read().await?;
        let now = Instant::now();
        if !items.is_empty() || now >= deadline || *closing.borrow() {
            return Ok(items);
        }
        let slice = deadline.min(now + POLL_SLICE);
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(slice) => {}
            () = closed(closing) => {}
        }
    }
}

async fn post_delivery(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<PostDeliveryRequest>, JsonRejection>,
) -> ApiResult<Response> {
    let Path(mind) = path?;
    let Json(request) = body?;
    // Bounds first, so no error below echoes an oversized value.
    muninn_api::limits::check_delivery(&request).map_err(ApiError::limit)?;
    crate::config::check_room(&request.room).map_err(ApiError::unprocessable)?;
    for (name, value) in [
        ("sender", &request.sender),
        ("text", &request.text),
        ("source_id", &request.source_id),
    ] {
        if value.trim().is_empty() {
            return Err(ApiError::unprocessable(format!("{name} must not be empty")));
        }
    }
    // The store drops NUL from the text it keeps (PostgreSQL cannot hold one): in a text that
    // is harmless, but `$ev\u{0}1` kept as `$ev1` is another event's id, which would then be
    // answered as a repeat of this one and lost.
    if request.source_id.contains('\0') {
        return Err(ApiError::unprocessable(
            "source_id must not hold a NUL (U+0000)",
        ));
    }
    require_mind(&state.host, &mind).await?;
    let delivery = NewDelivery {
        room: request.room,
        sender: request.sender,
        is_direct: request.is_direct,
        to_you: request.to_you,
        text: request.text,
        source_id: request.source_id,
        received_at_ms: state.host.clock.now_ms(),
        context: request
            .context
            .into_iter()
            .map(|line| muninn_store::ContextLine {
                id: line.id,
                sender: line.sender,
                text: line.text,
            })
            .collect(),
    };
    let posted = state.host.store.post_delivery(&mind, &delivery).await?;
    // Durable first, then the wake-up: the runtime reads the mailbox, not the notification.
    state.host.signals.wake(&mind);
    let status = if posted.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(PostDeliveryResponse {
            seq: posted.seq,
            created: posted.created,
        }),
    )
        .into_response())
}

/// The outbox messages the transport may send now: none while the operator brake is on (it stops
/// sends at once, not only new model calls); they are handed out when it is released.
async fn sendable(
    host: &Host,
    mind: &str,
    after: i64,
    limit: i64,
) -> ApiResult<Vec<OutboxMessage>> {
    if host.store.settings(mind).await?.brake {
        return Ok(Vec::new());
    }
    Ok(host.store.outbox_after(mind, after, limit).await?)
}

async fn get_outbox(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<OutboxQuery>, QueryRejection>,
) -> ApiResult<Json<OutboxResponse>> {
    let Path(mind) = path?;
    let Query(query) = query?;
    let host = &state.host;
    require_mind(host, &mind).await?;
    let after = query.after.unwrap_or(0);
    let limit = clamp_limit(query.limit)?;
    let wait = Duration::from_secs(query.wait_s.unwrap_or(0));
    let messages = long_poll(host, &state.closing, wait, || async {
        sendable(host, &mind, after, limit).await
    })
    .await?;
    let next_after = messages.last().map_or(after, |m| m.seq);
    Ok(Json(OutboxResponse {
        messages,
        next_after,
    }))
}

async fn stream_outbox(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<OutboxQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Path(mind) = path?;
    let Query(query) = query?;
    require_mind(&state.host, &mind).await?;
    // A reconnecting EventSource resumes after the last event it saw.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(query.after)
        .unwrap_or(0);
    let host = state.host.clone();
    let start = (
        host,
        state.closing.clone(),
        mind,
        after,
        VecDeque::<OutboxMessage>::new(),
    );
    let events = futures_util::stream::unfold(
        start,
        |(host, closing, mind, mut after, mut pending)| async move {
            loop {
                if let Some(message) = pending.pop_front() {
                    after = message.seq;
                    let event = Event::default()
                        .event("outbox")
                        .id(message.seq.to_string())
                        .json_data(&message)
                        .unwrap_or_else(|_| Event::default().event("error"));
                    return Some((
                        Ok::<Event, std::convert::Infallible>(event),
                        (host, closing, mind, after, pending),
                    ));
                }
                if *closing.borrow() {
                    return None;
                }
                match long_poll(&host, &closing, MAX_WAIT, || async {
                    sendable(&host, &mind, after, DEFAULT_LIMIT).await
                })
                .await
                {
                    Ok(messages) => pending.extend(messages),
                    // A store error ends the stream; the client reconnects with Last-Event-ID.
                    Err(error) => {
                        tracing::warn!(?error, "outbox stream ended");
                        return None;
                    }
                }
            }
        },
    );
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

async fn ack_outbox(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult<Json<OutboxMessage>> {
    let Path((mind, request_id)) = path?;
    muninn_api::limits::check_request_id(&request_id).map_err(ApiError::limit)?;
    // The store drops NUL from what it looks up (PostgreSQL cannot hold one): `b1-0\u{0}`
    // would ack the message `b1-0`, which would then never be sent.
    if request_id.contains('\0') {
        return Err(ApiError::unprocessable(
            "request_id must not hold a NUL (U+0000)",
        ));
    }
    let host = &state.host;
    require_mind(host, &mind).await?;
    // Not fenced: the ack is the transport's word, not the Mind's writer's, so it lands
    // whether or not a host holds the Mind's lease right now.
    let message = host
        .store
        .ack_outbox(&mind, &request_id, None, host.clock.now_ms())
        .await?;
    Ok(Json(message))
}

async fn post_brief(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<PostBriefRequest>, JsonRejection>,
) -> ApiResult<Response> {
    let Path(mind) = path?;
    let Json(request) = body?;
    muninn_api::limits::check_brief(&request).map_err(ApiError::limit)?;
    if request.text.trim().is_empty() {
        return Err(ApiError::unprocessable("text must not be empty"));
    }
    require_mind(&state.host, &mind).await?;
    let brief = state
        .host
        .store
        .enqueue_brief(
            &mind,
            &NewBrief {
                text: request.text,
                origin: BriefOrigin::Operator,
                created_at_ms: state.host.clock.now_ms(),
            },
        )
        .await?;
    state.host.signals.wake(&mind);
    Ok((StatusCode::CREATED, Json(brief)).into_response())
}

/// Each role's newest segments: a page, as every list here is (a Mind that has lived long has
/// thousands, each with its memory layer). Each role numbers its own segments, so `before` pages
/// back one role at a time (`role`): one cursor for both would repeat the role with fewer
/// segments on every page of the other, or skip the other's.
async fn get_segments(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<SegmentsQuery>, QueryRejection>,
) -> ApiResult<Json<SegmentsResponse>> {
    let Path(mind) = path?;
    let Query(query) = query?;
    let limit = clamp_limit(query.limit)?;
    let host = &state.host;
    require_mind(host, &mind).await?;
    let mut page = SegmentsResponse::default();
    for (role, list) in [
        (Role::Persona, &mut page.persona),
        (Role::SelfRole, &mut page.self_role),
    ] {
        if query.role.is_none_or(|asked| asked == role) {
            *list = host
                .store
                .newest_segments(&mind, role, query.before, limit)
                .await?;
        }
    }
    Ok(Json(page))
}

async fn get_transcript(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<TranscriptQuery>, QueryRejection>,
) -> ApiResult<Json<TranscriptResponse>> {
    let Path(mind) = path?;
    let Query(query) = query?;
    let host = &state.host;
    require_mind(host, &mind).await?;
    let role = query.role.unwrap_or(Role::Persona);
    let limit = clamp_limit(query.limit)?;
    let after = query.after.unwrap_or(0);
    let items = match query.last {
        Some(last) if last <= 0 => return Err(ApiError::bad_request("last must be positive")),
        Some(last) => {
            host.store
                .transcript_tail(&mind, role, last.min(MAX_LIMIT))
                .await?
        }
        None => {
            let wait = Duration::from_secs(query.wait_s.unwrap_or(0));
            long_poll(host, &state.closing, wait, || async {
                Ok(host
                    .store
                    .transcript_range(&mind, role, after.saturating_add(1), None, limit)
                    .await?)
            })
            .await?
        }
    };
    let items: Vec<TranscriptItemBody> = items
        .into_iter()
        .map(|item| TranscriptItemBody {
            role: item.role,
            seq: item.seq,
            segment: item.segment,
            kind: item.kind.as_str().to_owned(),
            body: item.body,
            created_at_ms: item.created_at_ms,
        })
        .collect();
    let next_after = items.last().map_or(after, |i| i.seq);
    Ok(Json(TranscriptResponse { items, next_after }))
}

async fn get_ledger(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<LedgerParams>, QueryRejection>,
) -> ApiResult<Response> {
    let Path(mind) = path?;
    let Query(params) = query?;
    let host = &state.host;
    require_mind(host, &mind).await?;
    if params.limit.is_some_and(|n| n <= 0) {
        return Err(ApiError::bad_request("limit must be positive"));
    }
    let entries = host
        .store
        .ledger(&LedgerQuery {
            mind: Some(mind),
            from_ms: params.from_ms,
            to_ms: params.to_ms,
            after_id: params.after_id,
            // Every answer is bounded: a whole ledger is read in pages (`after_id`).
            limit: Some(
                params
                    .limit
                    .map_or(LEDGER_PAGE_LIMIT, |n| n.min(LEDGER_PAGE_LIMIT)),
            ),
        })
        .await?;
    match params.format.unwrap_or_default() {
        LedgerFormat::Json => Ok(Json(LedgerResponse {
            rows: entries
                .into_iter()
                .map(|e| LedgerEntryBody {
                    id: e.id,
                    row: e.row,
                })
                .collect(),
        })
        .into_response()),
        LedgerFormat::Jsonl => {
            let mut text = String::new();
            for entry in &entries {
                let line = serde_json::to_string(&entry.row).map_err(|e| {
                    tracing::error!(error = %e, "ledger row did not serialize");
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        "internal error",
                    )
                })?;
                text.push_str(&line);
                text.push('\n');
            }
            Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], text).into_response())
        }
    }
}
