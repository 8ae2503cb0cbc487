//! How an attempt fails: [`AttemptError`], the failure of one attempt classified (retryable or
//! not, after content or not, billed or not), and the constructors that make one from a
//! transport error, an API refusal, a body past its limit or a broken stream, with the retry
//! event the ledger records for each retry.

use super::body::{MAX_ERROR_BODY_BYTES, read_body};
use super::deadline::Deadline;
use super::{BilledAttempt, MAX_RESPONSE_BYTES, retryable_status};
use crate::wire::ErrorResponse;
use muninn_backend::{BackendError, RetryEvent};
use serde_json::Value;
use std::time::Duration;

/// One failed attempt, classified.
pub(super) struct AttemptError {
    pub(super) error: BackendError,
    pub(super) retryable: bool,
    pub(super) retry_after: Option<Duration>,
    pub(super) after_content: bool,
    /// What the provider billed, when the failure came after `message_start`, and the request
    /// id it came under (boxed: every `Result` of the stream's reading carries this error).
    pub(super) billed: Option<Box<BilledAttempt>>,
}

impl AttemptError {
    /// This failure of the response with `request_id`: said by its API error and by its billed
    /// attempt, so a refusal and a retry are as quotable as an answer.
    pub(super) fn under(mut self, request_id: Option<&String>) -> AttemptError {
        let Some(id) = request_id else {
            return self;
        };
        for error in std::iter::once(&mut self.error)
            .chain(self.billed.as_mut().map(|billed| &mut billed.error))
        {
            if let BackendError::Api { request_id, .. } = error {
                *request_id = Some(id.as_str().into());
            }
        }
        if let Some(billed) = &mut self.billed {
            billed.request_id = Some(id.clone());
        }
        self
    }
}

/// A transport failure before any content arrived: always worth retrying.
pub(super) fn transport_failure(e: reqwest::Error) -> AttemptError {
    transport_failure_text(transport_cause(e))
}

pub(super) fn transport_failure_text(cause: String) -> AttemptError {
    AttemptError {
        error: BackendError::Transport(cause),
        retryable: true,
        retry_after: None,
        after_content: false,
        billed: None,
    }
}

/// A non-2xx reply as an [`AttemptError`]: the API's own error type and message when the body is
/// an error object, else `http_<status>` and the body's first 500 characters; the body's
/// `request_id`, which the caller's header overrides. At most [`MAX_ERROR_BODY_BYTES`] of the
/// body are read, within the attempt's deadline.
pub(super) async fn api_failure(
    status: u16,
    mut response: reqwest::Response,
    deadline: Deadline,
) -> AttemptError {
    let retry_after = retry_after(response.headers());
    // A body cut at the limit, by a failed read or by the deadline still gives its first
    // characters: the status already says what happened.
    let (body, _) = read_body(&mut response, MAX_ERROR_BODY_BYTES, deadline.at).await;
    let text = String::from_utf8_lossy(&body);
    let (kind, message, request_id) = match serde_json::from_str::<ErrorResponse>(&text) {
        Ok(e) => (
            e.error.kind,
            e.error.message,
            e.request_id.map(String::into_boxed_str),
        ),
        Err(_) => (
            format!("http_{status}"),
            text.chars().take(500).collect::<String>(),
            None,
        ),
    };
    let retryable = retryable_status(status);
    AttemptError {
        error: BackendError::Api {
            status,
            kind,
            message,
            retryable,
            retry_after_ms: retry_after.map(millis),
            request_id,
        },
        retryable,
        retry_after,
        after_content: false,
        billed: None,
    }
}

/// The error of a reply whose body passed [`MAX_RESPONSE_BYTES`].
pub(super) fn too_large(after_content: bool) -> AttemptError {
    protocol(
        format!("the reply passed the limit of {MAX_RESPONSE_BYTES} bytes; the rest was not read"),
        after_content,
    )
}

/// A whole reply that failed after its `2xx` status, as the attempt the provider billed: the
/// API sends a non-streaming reply's status only once it has generated the reply, so the
/// prompt was read, the cache written or read and the output billed, and another attempt
/// would be billed again (the client does not retry it; module docs). Its usage is the body's
/// `usage` when the body was JSON that said it; else the provider's numbers never arrived and
/// the raw usage is `null` (zero counts), for the caller to estimate.
pub(super) fn billed_unread(mut failure: AttemptError, raw_usage: Option<&Value>) -> AttemptError {
    let said = raw_usage.filter(|raw| raw.is_object()).and_then(|raw| {
        let usage = serde_json::from_value::<crate::wire::Usage>(raw.clone()).ok()?;
        Some((usage.to_core(), raw.clone()))
    });
    let (usage, raw_usage) = said.unwrap_or((muninn_core::trace::Usage::default(), Value::Null));
    failure.billed = Some(Box::new(BilledAttempt {
        usage,
        raw_usage,
        request_id: None,
        error: failure.error.clone(),
        // A whole reply's usage is final when the body said it; when it did not, the whole
        // usage is the caller's estimate (raw usage `null`), which says so itself.
        output_estimated: false,
    }));
    failure
}

/// The ledger's record of retry `attempt` after `failure` of the response with `request_id`
/// (when its status came), waiting `delay`.
pub(super) fn retry_event(
    attempt: u32,
    delay: Duration,
    failure: &AttemptError,
    request_id: Option<String>,
) -> RetryEvent {
    let (status, kind) = match &failure.error {
        BackendError::Api { status, kind, .. } => ((*status != 0).then_some(*status), kind.clone()),
        BackendError::Protocol(_) => (None, "protocol".to_string()),
        _ => (None, "transport".to_string()),
    };
    RetryEvent {
        attempt,
        delay_ms: millis(delay),
        status,
        kind,
        retry_after_ms: failure.retry_after.map(millis),
        // The header's, for any failure (a transport failure's too: the provider gave the id
        // with its status); else a refusal's body's.
        request_id: request_id.or_else(|| match &failure.error {
            BackendError::Api { request_id, .. } => request_id.as_deref().map(str::to_string),
            _ => None,
        }),
    }
}

pub(super) fn protocol(message: String, after_content: bool) -> AttemptError {
    AttemptError {
        error: BackendError::Protocol(message),
        retryable: true,
        retry_after: None,
        after_content,
        billed: None,
    }
}

/// A duration in whole milliseconds, the longest `u64` holds when it is longer (`as` would wrap
/// a huge `retry-after` into an arbitrary shorter wait).
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `retry-after-ms` (milliseconds) or `retry-after` (seconds, possibly fractional). A value no
/// `Duration` holds (`1e300`) is no hint: converting it would panic.
pub(super) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
        && let Ok(delay) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(delay);
    }
    get("retry-after")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// A transport failure in words, with its causes: reqwest's own text is only "error sending
/// request"; why (a read timeout, a refused connection) is further down its source chain, and an
/// operator reading `muninn status` needs it. reqwest's errors and their sources never include
/// header values, so the key cannot leak here.
pub(super) fn transport_cause(e: reqwest::Error) -> String {
    let timed_out = e.is_timeout();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    if timed_out && !text.contains("timed out") {
        text.push_str(" (timed out)");
    }
    text
}
