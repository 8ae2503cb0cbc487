//! The Messages API client: one request in, one assembled reply (or a clear error) out, with
//! retries.
//!
//! # Retries
//!
//! Retried: HTTP 408, 409, 429 and every 5xx (529 is `overloaded_error`), a transport failure, a
//! malformed or truncated stream, and an `error` event inside a stream whose type is
//! `overloaded_error`, `api_error` or `rate_limit_error`. Not retried: every other 4xx (the
//! request is wrong: fix it) — those surface at once as [`BackendError::Api`] with
//! `retryable: false`.
//!
//! The delay before retry *n* (1-based) is the server's `retry-after` when it sent one (seconds,
//! or `retry-after-ms`; a value no `Duration` holds is no hint), capped at
//! [`RetryPolicy::max_retry_after`]; otherwise
//! `base · 2^(n-1)`, capped at `max_delay`, plus up to `jitter` of itself drawn from a seeded
//! generator (deterministic per client, different per seed, so many clients do not retry in
//! lockstep). This is the Claude Code CLI's observed schedule (500 ms doubling to ~32 s, ~25 %
//! jitter). Every retry is returned as a [`RetryEvent`] for the ledger.
//!
//! # Bounds of an attempt
//!
//! Two: the silence between reads ([`ClientConfig::read_timeout`], `ping` events being
//! silence), and an overall deadline from sending to the last byte
//! ([`ClientConfig::attempt_timeout`], by default [`attempt_budget`] of the request's
//! `max_tokens`), so a reply that trickles real events or bytes cannot hold an attempt for
//! hours. Either, expired, is a transport failure (retried as below).
//!
//! # Attempts billed but not answered
//!
//! An attempt that fails after `message_start` — the provider has read the prompt, billed its
//! input, written or read its cache, and begun generating — was billed. It comes back as a
//! [`BilledAttempt`] in [`Failed::billed`] with the usage as far as the stream showed it
//! ([`Assembler::billed_so_far`]), so the ledger counts it and the cache mirror knows the
//! prefix is now cached, and **the client does not retry it**: another attempt costs the
//! prompt again, and only the caller can weigh that against its spend cap (the host asks the
//! cap before its own retry; a client retrying a provider that cuts every stream after
//! `message_start` billed up to `max_retries` prompts in one call unasked). A failure before
//! a stream's `message_start` (a refused connection, a 5xx, a 529) was not billed, is not one,
//! and is retried here as above.
//!
//! A reply that does not stream (a keep-warm ping) has no `message_start`: its `2xx` status
//! comes once the provider has answered, so a body that fails after it (cut, past the
//! deadline or the size limit, not a message) was billed the same way and is not retried
//! either. Its usage is the body's when the body said it; else the raw usage is `null`, and
//! the backend reports the attempt at its cache model's prediction. The same goes for such a
//! request lost after it was sent and before its status came (a reset connection, the
//! attempt's deadline): the provider may have answered and billed it, so it is reported
//! billed at the prediction and not retried; only a connection never made is retried.
//!
//! **Nothing is re-sent after the first content byte** (the first `content_block_start`) unless
//! the caller says the turn is safe to repeat: the partial reply may already have been shown or
//! acted on. Such a failure is [`BackendError::BrokenAfterContent`].
//!
//! # TLS
//!
//! reqwest with rustls and the `ring` provider, installed as the process default before the
//! first client is built (reqwest 0.13 without a default provider panics at build time
//! otherwise). No aws-lc, no OpenSSL.

mod assembler;
mod body;
mod deadline;
mod failure;

use crate::secret::ApiKey;
use crate::sse::SseDecoder;
use crate::wire::{API_VERSION, MessagesRequest, MessagesResponse};
pub use assembler::{Assembler, assemble, billed_by_cut};
use body::{BodyEnd, read_body};
use deadline::Deadline;
pub use deadline::{ATTEMPT_BUDGET_FLOOR, attempt_budget};
use failure::{
    AttemptError, api_failure, billed_unread, millis, protocol, retry_event, too_large,
    transport_failure, transport_failure_text,
};
use muninn_backend::clock::Sleeper;
use muninn_backend::{BackendError, RetryEvent};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most bytes of a reply's body the client reads, whole or streamed. A real reply is far
/// smaller (a streamed `max_tokens` of output with its thinking is a few MiB of events); a
/// server that sends more is broken, and reading on would hold it all in memory.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// How the key is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthScheme {
    /// `x-api-key: <key>` (an API key).
    ApiKeyHeader,
    /// `authorization: Bearer <token>` (`ANTHROPIC_AUTH_TOKEN`).
    Bearer,
}

/// The retry schedule (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff delay.
    pub base_delay: Duration,
    /// The most any backoff delay grows to (before jitter).
    pub max_delay: Duration,
    /// Jitter as a fraction of the delay (0.25 adds up to 25 %).
    pub jitter: f64,
    /// The longest `retry-after` honoured; a longer one is capped.
    pub max_retry_after: Duration,
    /// Seed of the jitter generator.
    pub jitter_seed: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 8,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(32),
            jitter: 0.25,
            max_retry_after: Duration::from_secs(120),
            jitter_seed: 0x5eed_1234_abcd_ef01,
        }
    }
}

/// Everything the client needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root, e.g. `https://api.anthropic.com` or `http://127.0.0.1:8088`.
    pub base_url: String,
    /// The key.
    pub api_key: ApiKey,
    /// How the key is sent.
    pub auth: AuthScheme,
    /// `anthropic-beta` values (joined with commas; none sends no header).
    pub betas: Vec<String>,
    /// Retries.
    pub retry: RetryPolicy,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// The longest silence between two reads of a response body; in a stream, `ping` events
    /// are silence too.
    pub read_timeout: Duration,
    /// The longest one attempt may take, from sending the request to the reply's last byte
    /// (see [`attempt_budget`]); `None` derives it from the request's `max_tokens`.
    pub attempt_timeout: Option<Duration>,
}

/// The credentials in the environment (looked up through `get`, so tests need no process
/// environment): `ANTHROPIC_API_KEY` as `x-api-key`, else `ANTHROPIC_AUTH_TOKEN` as a bearer
/// token, as the Claude Code CLI does.
pub fn credentials_from_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<(ApiKey, AuthScheme), crate::secret::ApiKeyError> {
    match ApiKey::from_env(&get) {
        Err(crate::secret::ApiKeyError::Missing) => match get("ANTHROPIC_AUTH_TOKEN") {
            Some(token) => Ok((ApiKey::new(token)?, AuthScheme::Bearer)),
            None => Err(crate::secret::ApiKeyError::Missing),
        },
        other => other.map(|k| (k, AuthScheme::ApiKeyHeader)),
    }
}

impl ClientConfig {
    /// Defaults for `base_url` and `api_key`: x-api-key auth, the 1h-TTL and cache-diagnosis
    /// betas, default retries,
    /// 10 s connect and 600 s read timeouts (the CLI's `x-stainless-timeout`), each attempt
    /// bounded by [`attempt_budget`] of its `max_tokens`.
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            api_key,
            auth: AuthScheme::ApiKeyHeader,
            betas: vec![
                "extended-cache-ttl-2025-04-11".to_string(),
                crate::wire::CACHE_DIAGNOSIS_BETA.to_string(),
            ],
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(600),
            attempt_timeout: None,
        }
    }
}

/// A reply received.
#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    /// The whole reply (assembled from the stream when streaming).
    pub response: MessagesResponse,
    /// The usage JSON verbatim (streaming: `message_start`'s, with `message_delta`'s fields laid
    /// over it).
    pub raw_usage: Value,
    /// The `request-id` header.
    pub request_id: Option<String>,
    /// Retries made before it (none after an attempt the provider billed: that one is the
    /// caller's to retry, see the module docs).
    pub retries: Vec<RetryEvent>,
}

/// An attempt the provider billed (it sent `message_start`) that failed before its reply was
/// whole (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct BilledAttempt {
    /// The usage as far as the stream showed it ([`Assembler::billed_so_far`]).
    pub usage: muninn_core::trace::Usage,
    /// `message_start`'s usage JSON verbatim (with any `message_delta` laid over it).
    pub raw_usage: Value,
    /// The `request-id` header.
    pub request_id: Option<String>,
    /// Why it failed.
    pub error: BackendError,
    /// Whether the output is counted from the content received, no `message_delta` having
    /// said the provider's count: an estimate (the provider may have generated more).
    pub output_estimated: bool,
}

/// A request that failed, with the retries made on the way.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct Failed {
    /// Why.
    pub error: BackendError,
    /// Retries made before giving up.
    pub retries: Vec<RetryEvent>,
    /// The attempts the provider billed without a whole reply (the last one's failure
    /// included), in order.
    pub billed: Vec<BilledAttempt>,
}

/// The client. Cheap to clone; clones share the connection pool and the jitter generator.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    config: ClientConfig,
    sleeper: Arc<dyn Sleeper>,
    rng: Arc<Mutex<u64>>,
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// reqwest refused the configuration.
    #[error("building the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// Tokio's timer: the [`Sleeper`] the client waits on between attempts outside tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(
        &self,
        duration: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Installs rustls's `ring` provider as the process default, once; a provider installed
/// earlier (by us or the embedding program) is kept.
pub fn install_ring_provider() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

impl AnthropicClient {
    /// A client with the given configuration and sleeper.
    pub fn new(
        config: ClientConfig,
        sleeper: Arc<dyn Sleeper>,
    ) -> Result<AnthropicClient, BuildError> {
        install_ring_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .user_agent(concat!("muninn/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let seed = config.retry.jitter_seed | 1;
        Ok(AnthropicClient {
            http,
            config,
            sleeper,
            rng: Arc::new(Mutex::new(seed)),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The backoff delay before retry `attempt` (1-based) when the server gave no `retry-after`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let p = &self.config.retry;
        let exp = p
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let base = exp.min(p.max_delay);
        let unit = match self.rng.lock() {
            Ok(mut state) => {
                // xorshift64*: a tiny deterministic generator; jitter needs spread, not secrecy.
                let mut x = *state;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                *state = x;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
            }
            // A poisoned generator only loses the jitter, never the retry.
            Err(_) => 0.0,
        };
        base + base.mul_f64(p.jitter * unit)
    }

    /// Sends `request` (streaming if `request.stream`), retrying per the module docs.
    /// `safe_to_repeat` allows a retry after reply content has begun arriving.
    pub async fn messages(
        &self,
        request: &MessagesRequest,
        safe_to_repeat: bool,
    ) -> Result<Completed, Failed> {
        let body = match serde_json::to_vec(request) {
            Ok(b) => b,
            Err(e) => {
                return Err(Failed {
                    error: BackendError::Invalid(format!("request does not serialise: {e}")),
                    retries: Vec::new(),
                    billed: Vec::new(),
                });
            }
        };
        let betas = self.betas_for(request);
        let budget = self
            .config
            .attempt_timeout
            .unwrap_or_else(|| attempt_budget(request.max_tokens));
        let mut retries = Vec::new();
        let mut attempt: u32 = 0;
        loop {
            // The attempt's `request-id`, once its status came: a retry names it whatever the
            // failure (a transport failure's error has no field of its own for it).
            let mut request_id = None;
            let deadline = Deadline::after(budget);
            let sent = self.attempt(&body, request.stream, &betas, deadline, &mut request_id);
            let (failure, billed) = match sent.await {
                Ok((response, raw_usage, request_id)) => {
                    return Ok(Completed {
                        response,
                        raw_usage,
                        request_id,
                        retries,
                    });
                }
                Err(mut f) => {
                    let billed: Vec<BilledAttempt> =
                        f.billed.take().map(|b| *b).into_iter().collect();
                    (f, billed)
                }
            };
            // A billed attempt is the caller's to retry: its retry costs a prompt again, which
            // the caller's spend cap must weigh first (module docs).
            let was_billed = !billed.is_empty();
            if failure.after_content && !safe_to_repeat {
                return Err(Failed {
                    error: BackendError::BrokenAfterContent(Box::new(failure.error)),
                    retries,
                    billed,
                });
            }
            if !failure.retryable || was_billed {
                return Err(Failed {
                    error: failure.error,
                    retries,
                    billed,
                });
            }
            if attempt >= self.config.retry.max_retries {
                return Err(Failed {
                    error: BackendError::RetriesExhausted {
                        attempts: attempt + 1,
                        last: Box::new(failure.error),
                    },
                    retries,
                    billed,
                });
            }
            attempt += 1;
            let delay = match failure.retry_after {
                Some(d) => d.min(self.config.retry.max_retry_after),
                None => self.backoff(attempt),
            };
            tracing::warn!(attempt, delay_ms = millis(delay), error = %failure.error, request_id = request_id.as_deref(), "retrying Messages API request");
            retries.push(retry_event(attempt, delay, &failure, request_id));
            self.sleeper.sleep(delay).await;
        }
    }

    /// The configured betas, and those this request's own fields need (compaction, context
    /// edits), so a caller never sends a beta field without its header.
    fn betas_for(&self, request: &MessagesRequest) -> Vec<String> {
        let mut betas = self.config.betas.clone();
        for beta in crate::context::betas_for(request) {
            if !betas.iter().any(|b| b == beta) {
                betas.push(beta.to_string());
            }
        }
        betas
    }

    async fn attempt(
        &self,
        body: &[u8],
        stream: bool,
        betas: &[String],
        deadline: Deadline,
        said_request_id: &mut Option<String>,
    ) -> Result<(MessagesResponse, Value, Option<String>), AttemptError> {
        let req = self.request_builder(stream, betas);
        // A whole reply's status comes only once the provider has done the work: a failure
        // after the request went and before the status came (a reset, the deadline) may have
        // been billed — the prompt read, the cache written or read — or the request may never
        // have arrived, and nothing says which. It is reported as billed at the cache model's
        // prediction (raw usage `null`), as a whole reply cut after its status is, and not
        // resent here: a resend may be billed again, which only the caller's spend cap may
        // allow. Counting a ping that was not billed costs the ledger one ping's estimate;
        // resending one that was cost a ping the ledger never saw. A stream's status comes
        // before the work, so a stream lost before it was not billed.
        let lost = |failure: AttemptError| {
            if stream {
                failure
            } else {
                billed_unread(failure, None)
            }
        };
        let response = tokio::time::timeout_at(deadline.at, req.body(body.to_vec()).send())
            .await
            .map_err(|_| lost(deadline.failure(false)))?
            .map_err(|e| {
                // A connection never made carried nothing to the provider.
                if e.is_connect() {
                    transport_failure(e)
                } else {
                    lost(transport_failure(e))
                }
            })?;
        let status = response.status().as_u16();
        let request_id = response
            .headers()
            .get("request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        said_request_id.clone_from(&request_id);
        if !(200..300).contains(&status) {
            let refused = api_failure(status, response, deadline).await;
            return Err(refused.under(request_id.as_ref()));
        }
        let read = if stream {
            read_stream(response, self.config.read_timeout, deadline).await
        } else {
            read_whole(response, deadline).await
        };
        let (message, raw_usage) = read.map_err(|f| f.under(request_id.as_ref()))?;
        Ok((message, raw_usage, request_id))
    }

    /// The POST with its version, content-type, accept, auth and beta headers.
    fn request_builder(&self, stream: bool, betas: &[String]) -> reqwest::RequestBuilder {
        let url = format!("{}/v1/messages", self.config.base_url.trim_end_matches('/'));
        let mut req = self
            .http
            .post(url)
            .header("anthropic-version", API_VERSION)
            .header("content-type", "application/json")
            .header(
                "accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            );
        req = match self.config.auth {
            AuthScheme::ApiKeyHeader => req.header("x-api-key", self.config.api_key.expose()),
            AuthScheme::Bearer => req.header(
                "authorization",
                format!("Bearer {}", self.config.api_key.expose()),
            ),
        };
        if !betas.is_empty() {
            req = req.header("anthropic-beta", betas.join(","));
        }
        req
    }
}

/// A non-streaming reply: the message and its usage JSON verbatim. Its `2xx` status came once
/// the provider had answered, so a body that then fails was billed (see [`billed_unread`]).
async fn read_whole(
    mut response: reqwest::Response,
    deadline: Deadline,
) -> Result<(MessagesResponse, Value), AttemptError> {
    let bytes = match read_body(&mut response, MAX_RESPONSE_BYTES, deadline.at).await {
        (bytes, BodyEnd::Whole) => bytes,
        (_, BodyEnd::TooLarge) => return Err(billed_unread(too_large(false), None)),
        (_, BodyEnd::TimedOut) => return Err(billed_unread(deadline.failure(false), None)),
        (_, BodyEnd::Failed(e)) => return Err(billed_unread(transport_failure(e), None)),
    };
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| billed_unread(protocol(format!("reply is not JSON: {e}"), false), None))?;
    let raw_usage = value.get("usage").cloned().unwrap_or(Value::Null);
    let message: MessagesResponse = serde_json::from_value(value).map_err(|e| {
        let failure = protocol(format!("reply is not a message: {e}"), false);
        billed_unread(failure, Some(&raw_usage))
    })?;
    Ok((message, raw_usage))
}

/// A streamed reply, assembled up to `message_stop`; every failure records whether content had
/// begun, which decides whether it may be retried. `ping` events are silence: a stream that sends
/// nothing else for `silence` fails, however busy its socket; one still unfinished at
/// `deadline` fails however lively (a trickle of real events).
async fn read_stream(
    response: reqwest::Response,
    silence: Duration,
    deadline: Deadline,
) -> Result<(MessagesResponse, Value), AttemptError> {
    let mut assembler = Assembler::default();
    let read = read_events(response, silence, deadline, &mut assembler).await;
    // A failure after `message_start` was billed: say what, as far as the stream showed.
    read.map_err(|mut f| {
        let output_estimated = !assembler.output_reported();
        f.billed = assembler.billed_so_far().map(|(usage, raw_usage)| {
            Box::new(BilledAttempt {
                usage,
                raw_usage,
                request_id: None,
                error: f.error.clone(),
                output_estimated,
            })
        });
        f
    })
}

/// The events of a stream fed to `assembler` up to `message_stop` (see [`read_stream`]).
async fn read_events(
    mut response: reqwest::Response,
    silence: Duration,
    deadline: Deadline,
    assembler: &mut Assembler,
) -> Result<(MessagesResponse, Value), AttemptError> {
    let mut decoder = SseDecoder::new();
    // Each event is bounded by the decoder; the whole stream by this count, since the
    // assembler keeps every delta.
    let mut read = 0usize;
    let mut heard_at = tokio::time::Instant::now();
    loop {
        if deadline.passed() {
            return Err(deadline.failure(assembler.content_started));
        }
        let silent_at = heard_at + silence;
        let wake_at = silent_at.min(deadline.at);
        let chunk = match tokio::time::timeout_at(wake_at, response.chunk()).await {
            Ok(Ok(Some(c))) => c,
            Ok(Ok(None)) => break,
            Err(_) if silent_at > deadline.at => {
                return Err(deadline.failure(assembler.content_started));
            }
            Err(_) => {
                let mut f = transport_failure_text(format!(
                    "no event but ping within {silence:?} (timed out)"
                ));
                f.after_content = assembler.content_started;
                return Err(f);
            }
            Ok(Err(e)) => {
                let mut f = transport_failure(e);
                f.after_content = assembler.content_started;
                return Err(f);
            }
        };
        read += chunk.len();
        if read > MAX_RESPONSE_BYTES {
            return Err(too_large(assembler.content_started));
        }
        let frames = decoder
            .push(&chunk)
            .map_err(|e| protocol(e.to_string(), assembler.content_started))?;
        for frame in frames {
            if frame.event.as_deref() != Some("ping") {
                heard_at = tokio::time::Instant::now();
            }
            assembler.on_frame(&frame.data)?;
            if assembler.stopped {
                return assembler.finish();
            }
        }
    }
    decoder
        .finish()
        .map_err(|e| protocol(e.to_string(), assembler.content_started))?;
    Err(protocol(
        "the stream ended before message_stop".to_string(),
        assembler.content_started,
    ))
}

/// Whether an HTTP error status is worth retrying (see the module docs): 408, 409, 429, 5xx.
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}
