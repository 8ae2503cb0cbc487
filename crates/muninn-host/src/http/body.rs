//! Request bodies under bounds: each is read whole, within `[api] body_read_timeout_s` and
//! within its route's size limit, before a handler sees it.
//!
//! A body larger than the limit is answered `413` — at once when its `Content-Length` says so,
//! otherwise as soon as the bytes read pass it — and one that does not arrive in time `408`
//! (a client that declares a megabyte and sends eight bytes no longer holds a connection and a
//! buffer for ever). Both answers close the connection: what remains of the body is never read.
//! The middleware sits inside the token check, so an unauthenticated client's body is not read
//! at all.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::time::Duration;

use super::ApiError;
use crate::config::ApiConfig;
use crate::config::api::SMALL_BODY_BYTES;

/// The body bounds, resolved from `[api]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimits {
    read_timeout: Duration,
    /// Deliveries and briefs: the routes that carry message text.
    message_bytes: u64,
}

impl BodyLimits {
    pub(super) fn new(config: &ApiConfig) -> BodyLimits {
        BodyLimits {
            read_timeout: Duration::from_secs(config.body_read_timeout_s),
            message_bytes: config.max_body_bytes,
        }
    }

    /// The largest body `path` takes.
    fn for_path(&self, path: &str) -> u64 {
        if path.ends_with("/deliveries") || path.ends_with("/briefs") {
            self.message_bytes
        } else {
            SMALL_BODY_BYTES
        }
    }
}

/// The error answer that also closes the connection (the unread rest of the body is dropped).
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn too_large(limit: u64) -> Response {
    closing(ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is over this route's limit of {limit} bytes"),
    ))
}

pub(super) async fn limit_body(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let limit = limits.for_path(request.uri().path());
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large(limit);
    }
    let (parts, body) = request.into_parts();
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    let read = tokio::time::timeout(
        limits.read_timeout,
        Limited::new(body, limit_usize).collect(),
    );
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<LengthLimitError>() => return too_large(limit),
        Ok(Err(error)) => {
            tracing::debug!(%error, "request body could not be read");
            return closing(ApiError::bad_request("the request body could not be read"));
        }
        Err(_) => {
            tracing::info!(
                path = parts.uri.path(),
                timeout_s = limits.read_timeout.as_secs(),
                "request body not received in time; answered 408"
            );
            return closing(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    limits.read_timeout.as_secs()
                ),
            ));
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
