//! The connector's one error type.

use muninn_store::StoreError;
use std::time::Duration;
use thiserror::Error;

/// Everything that can go wrong talking to the homeserver or the store. Each variant says
/// whether waiting and retrying can help ([`MatrixError::retry_after`]); none carries a
/// credential (request bodies and the `Authorization` header never reach an error).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MatrixError {
    /// The homeserver could not be reached, or the connection broke (refused, reset, timed
    /// out). **Retry** with backoff: the homeserver may be restarting.
    #[error("homeserver unreachable: {0}")]
    Unreachable(String),

    /// The homeserver answered with an error status. `M_LIMIT_EXCEEDED` (429) and 5xx are
    /// retryable (429 after `retry_after_ms`); 401 `M_UNKNOWN_TOKEN` means the credential is no
    /// longer valid (log in again, or fix the configuration); any other 4xx refuses this request
    /// for good (`M_FORBIDDEN`, `M_NOT_FOUND`, `M_TOO_LARGE`, …).
    #[error("homeserver refused {what}: HTTP {status} {errcode}: {message}")]
    Refused {
        /// What was asked (`send`, `sync`, `join !room`), without any secret.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The Matrix error code, e.g. `M_FORBIDDEN` (empty if the body had none).
        errcode: String,
        /// The homeserver's sentence.
        message: String,
        /// `retry_after_ms` of a rate limit.
        retry_after_ms: Option<u64>,
    },

    /// The homeserver answered 200 with a body this connector cannot read. Retryable (a
    /// proxy's error page, a truncated body), with backoff.
    #[error("unreadable answer to {what}: {message}")]
    Decode {
        /// What was asked.
        what: String,
        /// The parser's message.
        message: String,
    },

    /// The homeserver's answer was larger than this connector reads for `what`
    /// ([`crate::client::SYNC_ANSWER_MAX_BYTES`], [`crate::client::ANSWER_MAX_BYTES`]); the rest
    /// of it was not read. Retryable with backoff (a later answer may be smaller), and loud in
    /// the account's health while it lasts.
    // It is retried and will recur until what is asked shrinks, so the message names the way out.
    #[error(
        "the answer to {what} is over the limit of {limit} bytes; the rest was not read (for a /sync, lower the account's `timeline_limit`)"
    )]
    TooLarge {
        /// What was asked.
        what: String,
        /// The limit, bytes.
        limit: usize,
    },

    /// The configuration cannot work: a bad homeserver URL, a token that belongs to another
    /// user or device, a secret that cannot be read. Not retryable: fix the configuration.
    #[error("matrix configuration: {0}")]
    Config(String),

    /// The homeserver refused the configured access token (401: logged out, its device
    /// deleted, the password changed), and the token read again from its file (if it has one)
    /// is the same. An account configured with an access token cannot log in again by itself:
    /// **not retryable** until a new token is configured (in its file, read again at the next
    /// try; in a variable, read at a restart). An account with a password logs in again
    /// instead of returning this.
    #[error(
        "the homeserver refused the access token ({errcode}: {message}); configure a new one \
         (a token file is read again every 30 s; a variable, when muninn restarts)"
    )]
    TokenRefused {
        /// The Matrix error code (`M_UNKNOWN_TOKEN`, …).
        errcode: String,
        /// The homeserver's sentence.
        message: String,
    },

    /// The store failed; retryable as [`StoreError::is_retryable`] says.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// The wait before retrying a rate-limited request that named none.
const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(1);

impl MatrixError {
    /// How long to wait before trying again, or `None` when trying again cannot help. The
    /// wait is the homeserver's own `retry_after_ms` for a rate limit; for other transient
    /// failures it is the caller's backoff (this returns zero).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            MatrixError::Unreachable(_)
            | MatrixError::Decode { .. }
            | MatrixError::TooLarge { .. } => Some(Duration::ZERO),
            MatrixError::Refused {
                status,
                errcode,
                retry_after_ms,
                ..
            } => {
                if *status == 429 || errcode == "M_LIMIT_EXCEEDED" {
                    Some(retry_after_ms.map_or(DEFAULT_RATE_LIMIT_WAIT, Duration::from_millis))
                } else if *status >= 500 {
                    Some(Duration::ZERO)
                } else {
                    None
                }
            }
            MatrixError::Config(_) | MatrixError::TokenRefused { .. } => None,
            MatrixError::Store(e) => e.is_retryable().then_some(Duration::ZERO),
        }
    }

    /// Whether this is a rate limit (429 / `M_LIMIT_EXCEEDED`).
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, MatrixError::Refused { status, errcode, .. }
            if *status == 429 || errcode == "M_LIMIT_EXCEEDED")
    }

    /// Whether the access token was refused (401 `M_UNKNOWN_TOKEN`, `M_MISSING_TOKEN`).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, MatrixError::Refused { status: 401, .. })
    }
}
