//! Errors on their way to the client: a status, a class and a safe message, as
//! `{"error":{"type","message"}}`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muninn_api::wire::{ErrorDetail, ErrorResponse};
use muninn_store::StoreError;

/// An error on its way to the client: a status, a class and a safe message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    pub(crate) fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }
    /// An input over one of the bounds in [`muninn_api::limits`]: `400`, naming the field
    /// and the limit.
    pub(crate) fn limit(exceeded: muninn_api::limits::LimitExceeded) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "limit_exceeded",
            exceeded.to_string(),
        )
    }
    pub(crate) fn mind_not_found(mind: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "mind_not_found",
            format!("no Mind {mind:?}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorResponse {
            error: ErrorDetail {
                kind: self.kind.to_owned(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

// Store errors become a small wire-level error: the contract's own classes pass through, while
// database internals (SQL text, connection details) are logged and replaced by a generic message.
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match &error {
            StoreError::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", error.to_string())
            }
            StoreError::Invalid(_) => ApiError::unprocessable(error.to_string()),
            StoreError::Fenced { .. } | StoreError::TurnAlreadyRecorded { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", error.to_string())
            }
            _ if error.is_retryable() => {
                tracing::warn!(%error, "store unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the store is busy or unreachable; retry",
                )
            }
            _ => {
                tracing::error!(%error, "store error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error (logged by the host)",
                )
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        ApiError::bad_request(rejection.body_text())
    }
}
impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::bad_request(rejection.body_text())
    }
}
impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::bad_request(rejection.body_text())
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;
