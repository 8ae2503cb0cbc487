//! The operator's probes: `GET /healthz`, `GET /readyz` and `GET /metrics`, none behind the
//! token (see [`crate::telemetry::health`] and [`crate::telemetry::metrics`] for what each
//! shows, and why that is safe to show without one).

use crate::Host;
use crate::telemetry::{health, metrics};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

/// The paths served without a token.
pub(crate) const PUBLIC_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The probes as a router.
pub(crate) fn router(host: Host) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(scrape))
        .with_state(host)
}

/// The process is up and serves HTTP.
async fn healthz() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"status":"ok"}"#,
    )
        .into_response()
}

/// 200 when the store answers, every Mind's runner runs and none is failing; else 503 with the
/// reasons.
async fn readyz(State(host): State<Host>) -> Response {
    let readiness = health::readiness(&host).await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness)).into_response()
}

/// The Prometheus exposition.
async fn scrape(State(host): State<Host>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(&host).await,
    )
        .into_response()
}
