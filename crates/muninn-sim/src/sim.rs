//! The simulator's state and its transport-free core: the shared prompt cache, the virtual
//! clock, the fault queue and the request log, and [`Simulator::messages`], which turns one
//! request body into a reply with exact usage. The HTTP server ([`crate::server`]) is a thin
//! layer over it, and an in-process backend can call it directly.
//!
//! # Usage
//!
//! Every accepted request is mapped by [`muninn_anthropic::prompt::shape`] and applied to one
//! [`CacheState`] shared by all requests (per model, as the API's cache is per organisation and
//! model) at the virtual clock's time; the reported usage is the cache model's outcome, with
//! output tokens from [`crate::reply`]. Minimum cacheable sizes come from the price table. A
//! request the cache model refuses (a 5th breakpoint, 1h after 5m) is the API's 400 with the
//! cache model's wording. A model the price table does not know is the API's 404.
//!
//! Faults that refuse a request (429, 529, 500, 400, 401) leave the cache untouched, as the API
//! does not process a refused request; a stream that fails midway was processed, so its cache
//! writes stand.
//!
//! # The provider's context tools
//!
//! Before it is shaped, a request is read as the provider reads it ([`crate::context`]): the
//! messages before the last compaction block sent back are dropped, and `context_management`
//! edits (tool-result and thinking clearing) are applied; an on-demand compaction, and a
//! threshold compaction (`compact_20260112`) once the prompt passes its trigger, are answered
//! with the signed summary and billed in `usage.iterations[]`. `max_tokens: 0` (a keep-warm ping) is
//! answered with no content and no output, except with streaming or thinking.
//!
//! # Cache diagnostics
//!
//! A request with a `diagnostics` object (beta `cache-diagnosis-2026-04-07`; the header is not
//! required) opts in: the simulator keeps the request's shape under the response's id (the
//! newest [`SimConfig::max_recorded`] of them) and compares the request with the shape of
//! `diagnostics.previous_message_id` by [`muninn_anthropic::prompt::diverge`] — model, tools,
//! system, then messages. A divergence is answered as `diagnostics.cache_miss_reason` with its
//! `cache_missed_input_tokens`; an unknown previous id as `previous_message_not_found`; no
//! divergence, or no previous id, as no `diagnostics` at all. Streaming carries it on
//! `message_start`. The comparison is structural, as the provider's is: it says nothing of the
//! TTL, which shows in the usage alone.
//!
//! # Clock
//!
//! `now = base + (real time elapsed, unless frozen) + offset`; tests move `offset` forward to
//! expire cache entries without waiting.

use crate::context;
use crate::reply::{Reply, reply};
use muninn_anthropic::context::{apply_edits, compaction_due};
use muninn_anthropic::prompt::{PromptShape, diverge, shape};
use muninn_anthropic::wire::{
    CacheMissReason, ContextManagementResponse, Diagnostics, DiagnosticsRequest, ErrorResponse,
    MessagesRequest, MessagesResponse, Role, STOP_COMPACTION, Usage as WireUsage, UsageIteration,
};
use muninn_core::cache::{CacheOutcome, CacheRules, CacheState, Ttl};
use muninn_core::ledger::{MissCause, ProviderMiss};
use muninn_core::miss::ProviderMissReason;
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

/// How the simulator starts.
#[derive(Clone)]
pub struct SimConfig {
    /// Start the virtual clock frozen at this Unix-ms time (it then moves only when advanced);
    /// `None` follows real time from the system clock.
    pub frozen_at_ms: Option<i64>,
    /// Require exactly this key (`x-api-key` or bearer); `None` accepts any non-empty key.
    pub api_key: Option<String>,
    /// Prices and minimum cacheable sizes.
    pub prices: PriceTable,
    /// Cache rules.
    pub rules: CacheRules,
    /// Keep at most this many recorded requests (oldest dropped first).
    pub max_recorded: usize,
    /// Keep recorded bodies up to about this many bytes in all (oldest dropped first; the
    /// newest is always kept).
    pub max_recorded_bytes: usize,
    /// Whether `ttl: "1h"` is honoured. `false` emulates a provider that ignores it (a missing
    /// beta, a policy) and caches every breakpoint for 5 minutes, so clients can test their
    /// honoured-TTL detection.
    pub honour_1h: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            frozen_at_ms: None,
            api_key: None,
            prices: PriceTable::embedded(),
            rules: CacheRules::default(),
            max_recorded: 1_000,
            max_recorded_bytes: 64 * 1024 * 1024,
            honour_1h: true,
        }
    }
}

// Written by hand so that the accepted key never reaches a log line or a `{:?}`.
impl std::fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimConfig")
            .field("frozen_at_ms", &self.frozen_at_ms)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("rules", &self.rules)
            .field("max_recorded", &self.max_recorded)
            .field("max_recorded_bytes", &self.max_recorded_bytes)
            .field("honour_1h", &self.honour_1h)
            .finish_non_exhaustive()
    }
}

/// An injected fault (`POST /admin/faults`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultKind {
    /// 429 `rate_limit_error`, with `retry-after` when given.
    RateLimit {
        /// Seconds for the `retry-after` header.
        #[serde(default)]
        retry_after_s: Option<f64>,
    },
    /// 529 `overloaded_error`.
    Overloaded,
    /// 500 `api_error`.
    ServerError,
    /// 400 `invalid_request_error` with this message.
    BadRequest {
        /// The message.
        message: String,
    },
    /// 401 `authentication_error`.
    Unauthorized,
    /// A stream that sends an `error` event after this many content deltas (0: right after
    /// `message_start` and `ping`, before any content).
    MidStreamError {
        /// Deltas sent before the error.
        after_deltas: u32,
        /// The error type (default `overloaded_error`).
        #[serde(default = "overloaded")]
        error_type: String,
    },
    /// A stream cut after this many content deltas, with no error and no `message_stop`.
    Truncate {
        /// Deltas sent before the cut.
        after_deltas: u32,
    },
    /// A slow reply: a delay before the first byte, and between stream events.
    Slow {
        /// Milliseconds before the response starts.
        #[serde(default)]
        first_byte_ms: u64,
        /// Milliseconds between stream events.
        #[serde(default)]
        event_ms: u64,
    },
    /// 529 `compaction_unavailable`: the provider cannot compact right now (retryable).
    CompactionUnavailable,
    /// A normal answer whose *reported* usage claims `cache_read_tokens` more cache reads than
    /// the cache model computed, so a client that sizes its context from reported usage (the
    /// Claude Code CLI's auto-compaction) believes the window is nearly full. The cache itself
    /// is updated as for any request; only the reply's and the log's usage are inflated.
    InflateUsage {
        /// Tokens added to `cache_read_input_tokens`.
        cache_read_tokens: u64,
    },
}

fn overloaded() -> String {
    "overloaded_error".to_string()
}

/// A fault and how many consecutive `/v1/messages` requests it hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// What happens.
    #[serde(flatten)]
    pub kind: FaultKind,
    /// How many requests it applies to (default 1).
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// One request as the simulator saw and answered it (`GET /admin/requests`). Credentials are
/// not recorded, only how they were presented.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// 1-based order of arrival.
    pub seq: u64,
    /// Virtual time of arrival, Unix ms: what the cache model was applied at.
    pub at_ms: i64,
    /// `/v1/messages` or `/v1/messages/count_tokens`.
    pub path: String,
    /// `x-api-key`, `bearer` or `none`.
    pub auth: String,
    /// The `anthropic-beta` header.
    pub anthropic_beta: Option<String>,
    /// The body as received (`null` if it was not JSON).
    pub body: Value,
    /// The HTTP status answered (200 for a stream that later failed).
    pub status: u16,
    /// The usage reported, for answered messages requests.
    pub usage: Option<Usage>,
    /// Why the request read less than it could have.
    pub miss: Option<MissCause>,
    /// The diagnosis answered, for a request that asked with a previous message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_miss: Option<ProviderMiss>,
    /// The fault applied, if any.
    pub fault: Option<FaultKind>,
    /// The error answered, if any.
    pub error: Option<String>,
}

/// A refusal in the API's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// The error body.
    pub body: ErrorResponse,
    /// `retry-after` seconds.
    pub retry_after_s: Option<f64>,
}

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(status: u16, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorResponse::new(kind, message),
            retry_after_s: None,
        }
    }
}

/// An accepted messages request: the reply and its usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The message id.
    pub id: String,
    /// The model.
    pub model: String,
    /// The reply.
    pub reply: Reply,
    /// The usage (cache model + output tokens).
    pub usage: Usage,
    /// The miss cause.
    pub miss: Option<MissCause>,
    /// The cache diagnostics answered (`None`: not asked, or no divergence).
    pub diagnostics: Option<Diagnostics>,
    /// The diagnosis as recorded, for a request that asked with a previous message id.
    pub provider_miss: Option<ProviderMiss>,
    /// Whether this is a compaction: its usage is then reported in `usage.iterations[]` alone.
    pub compaction: bool,
    /// A threshold compaction that went on to answer: the `compaction` pass's usage, billed on
    /// top of `usage` (then the `message` pass's).
    pub compacted: Option<Usage>,
    /// The context edits applied, for `context_management.applied_edits[]` (`None`: none).
    pub context_management: Option<ContextManagementResponse>,
}

impl Answer {
    /// Applies a fault that changes what is reported rather than whether it is answered
    /// ([`FaultKind::InflateUsage`]); other faults leave the answer as it is.
    pub fn apply_report_fault(&mut self, fault: Option<&FaultKind>) {
        if let Some(FaultKind::InflateUsage { cache_read_tokens }) = fault {
            self.usage.cache_read = self.usage.cache_read.saturating_add(*cache_read_tokens);
        }
    }

    /// What the request is billed: `usage`, and a threshold compaction's own pass.
    pub fn billed(&self) -> Usage {
        let mut billed = self.usage;
        if let Some(compacted) = &self.compacted {
            billed.add(compacted);
        }
        billed
    }

    /// The usage as the wire reports it. A compaction's is reported only as one `compaction`
    /// entry of `iterations[]`, the top-level counts 0 — as the API does, which is why a ledger
    /// must read the iterations. A threshold compaction that went on to answer reports a
    /// `compaction` and a `message` entry, the top-level counts the `message` entry's alone.
    pub fn wire_usage(&self) -> WireUsage {
        if let Some(compacted) = &self.compacted {
            let mut wire = WireUsage::from_core(&self.usage);
            wire.iterations = Some(vec![
                iteration("compaction", compacted),
                iteration("message", &self.usage),
            ]);
            return wire;
        }
        if !self.compaction {
            return WireUsage::from_core(&self.usage);
        }
        let mut wire = WireUsage::from_core(&Usage::default());
        wire.iterations = Some(vec![iteration("compaction", &self.usage)]);
        wire
    }

    /// The whole reply as one (non-streamed) message.
    pub fn into_message(self) -> MessagesResponse {
        let usage = self.wire_usage();
        MessagesResponse {
            id: self.id,
            kind: "message".to_string(),
            role: Role::Assistant,
            model: self.model,
            content: self.reply.content,
            stop_reason: Some(self.reply.stop_reason.to_string()),
            stop_sequence: None,
            usage,
            diagnostics: self.diagnostics,
            context_management: self.context_management,
        }
    }
}

/// One `usage.iterations[]` entry (writes as one total: the entry gives no TTL split).
fn iteration(kind: &str, usage: &Usage) -> UsageIteration {
    UsageIteration {
        kind: kind.to_string(),
        input_tokens: usage.input,
        output_tokens: usage.output,
        cache_read_input_tokens: usage.cache_read,
        cache_creation_input_tokens: usage.written(),
        extra: serde_json::Map::new(),
    }
}

/// How a request was answered: the reply, the usage of its (last) pass, and a threshold
/// compaction's own pass when it went on to answer.
struct Passes {
    reply: Reply,
    usage: Usage,
    compaction: bool,
    compacted: Option<Usage>,
}

/// The shapes of the requests that opted into diagnostics, by response id, the newest kept.
#[derive(Debug, Default)]
struct Fingerprints {
    shapes: HashMap<String, PromptShape>,
    order: VecDeque<String>,
}

impl Fingerprints {
    fn keep(&mut self, id: &str, shape: PromptShape, max: usize) {
        self.shapes.insert(id.to_string(), shape);
        self.order.push_back(id.to_string());
        while self.order.len() > max {
            if let Some(old) = self.order.pop_front() {
                self.shapes.remove(&old);
            }
        }
    }
}

/// The simulator.
#[derive(Debug)]
pub struct Simulator {
    config: SimConfig,
    cache: Mutex<CacheState>,
    faults: Mutex<VecDeque<Fault>>,
    /// The request log, each entry with its body's approximate size, and their total.
    requests: Mutex<(VecDeque<(RecordedRequest, usize)>, usize)>,
    fingerprints: Mutex<Fingerprints>,
    seq: AtomicU64,
    started: Instant,
    base_ms: i64,
    offset_ms: AtomicI64,
}

impl Simulator {
    /// A simulator with an empty cache.
    pub fn new(config: SimConfig) -> Simulator {
        let base_ms = config.frozen_at_ms.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        });
        Simulator {
            config,
            cache: Mutex::new(CacheState::new()),
            faults: Mutex::new(VecDeque::new()),
            requests: Mutex::new((VecDeque::new(), 0)),
            fingerprints: Mutex::new(Fingerprints::default()),
            seq: AtomicU64::new(0),
            started: Instant::now(),
            base_ms,
            offset_ms: AtomicI64::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Virtual now, Unix ms.
    pub fn now_ms(&self) -> i64 {
        let real = if self.config.frozen_at_ms.is_some() {
            0
        } else {
            self.started.elapsed().as_millis() as i64
        };
        self.base_ms + real + self.offset_ms.load(Ordering::SeqCst)
    }

    /// Moves the virtual clock forward; returns the new now.
    pub fn advance_clock(&self, ms: i64) -> i64 {
        self.offset_ms.fetch_add(ms.max(0), Ordering::SeqCst);
        self.now_ms()
    }

    /// The next request's sequence number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Queues faults.
    pub fn push_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        if let Ok(mut q) = self.faults.lock() {
            q.extend(faults.into_iter().filter(|f| f.times > 0));
        }
    }

    /// The queued faults.
    pub fn faults(&self) -> Vec<Fault> {
        self.faults
            .lock()
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        if let Ok(mut q) = self.faults.lock() {
            q.clear();
        }
    }

    /// Takes the fault for the next messages request, if any.
    pub fn take_fault(&self) -> Option<FaultKind> {
        let mut q = self.faults.lock().ok()?;
        let front = q.front_mut()?;
        let kind = front.kind.clone();
        front.times -= 1;
        if front.times == 0 {
            q.pop_front();
        }
        Some(kind)
    }

    /// A request as it arrives on `path`, before it is answered: the next sequence number, at
    /// virtual now, status 200 and nothing of an answer yet.
    pub fn arrival(
        &self,
        path: &str,
        auth: &str,
        anthropic_beta: Option<String>,
        body: Value,
    ) -> RecordedRequest {
        RecordedRequest {
            seq: self.next_seq(),
            at_ms: self.now_ms(),
            path: path.to_string(),
            auth: auth.to_string(),
            anthropic_beta,
            body,
            status: 200,
            usage: None,
            miss: None,
            provider_miss: None,
            fault: None,
            error: None,
        }
    }

    /// Records a request.
    pub fn record(&self, r: RecordedRequest) {
        if let Ok(mut log) = self.requests.lock() {
            let (entries, bytes) = &mut *log;
            let size = approx_size(&r.body);
            entries.push_back((r, size));
            *bytes += size;
            // Bounded by count and by the bodies' size, the oldest dropped first.
            while entries.len() > self.config.max_recorded
                || (*bytes > self.config.max_recorded_bytes && entries.len() > 1)
            {
                if let Some((_, dropped)) = entries.pop_front() {
                    *bytes -= dropped;
                }
            }
        }
    }

    /// The recorded requests, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .map(|l| l.0.iter().map(|(r, _)| r.clone()).collect())
            .unwrap_or_default()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        if let Ok(mut l) = self.requests.lock() {
            // A new log, so the memory the old one held goes back too.
            *l = (VecDeque::new(), 0);
        }
    }

    /// Empties the cache, the diagnostics' fingerprints, the faults and the log.
    pub fn reset(&self) {
        if let Ok(mut c) = self.cache.lock() {
            *c = CacheState::new();
        }
        if let Ok(mut f) = self.fingerprints.lock() {
            *f = Fingerprints::default();
        }
        self.clear_faults();
        self.clear_requests();
    }

    fn min_cacheable(&self, model: &str) -> Result<u64, ApiError> {
        self.config
            .prices
            .model(model)
            .map(|p| p.min_cacheable)
            .map_err(|_| ApiError::new(404, "not_found_error", format!("model: {model}")))
    }

    /// Answers a messages request body at `now_ms`, updating the shared cache.
    /// `betas` is the request's `anthropic-beta` header.
    pub fn messages(
        &self,
        body: &Value,
        betas: Option<&str>,
        seq: u64,
        now_ms: i64,
    ) -> Result<Answer, ApiError> {
        // The mapping first: its errors name the field the way the API does.
        shape(body).map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
        let request = MessagesRequest::deserialize(body)
            .map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
        // What the provider reads: from the last compaction block sent back, after the
        // context edits.
        let (body, request) = context::receive_compactions(body, request)?;
        context::check_fields(&body, &request, betas)?;
        context::check_compaction(&request, betas)?;
        let (request, applied) = apply_edits(&request)
            .map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
        let body = if applied.is_empty() {
            body
        } else {
            serde_json::to_value(&request)
                .map_err(|e| ApiError::new(500, "api_error", e.to_string()))?
        };
        let body = &body;
        let shaped = self.shape_as_cached(body)?;
        let context_window = self
            .config
            .prices
            .model(&shaped.model)
            .map(|p| p.context_window)
            .map_err(|_| {
                ApiError::new(404, "not_found_error", format!("model: {}", shaped.model))
            })?;
        crate::strict::check(body, &request, betas, shaped.total_tokens, context_window)?;
        if request.messages.is_empty() {
            return Err(ApiError::new(
                400,
                "invalid_request_error",
                "messages: at least one message is required",
            ));
        }
        crate::strict::check_tool_pairing(&request)?;
        let outcome = self.apply_cache(&shaped, now_ms)?;
        let seed = shaped.checkpoints.last().map_or(0, |c| c.fingerprint);
        let passes = match compaction_due(&request, shaped.total_tokens) {
            Some(edit) if !edit.pause_after_compaction => {
                self.answer_from_summary(&request, body, &outcome, seed, now_ms)?
            }
            // An on-demand compaction and a paused threshold one answer alike: the summary
            // alone, billed as one compaction pass.
            due => {
                let compaction = due.is_some() || request.compaction.is_some();
                let reply = if compaction {
                    compaction_reply(&request)
                } else {
                    reply(&request, seed)
                };
                Passes {
                    usage: outcome.usage(reply.output_tokens),
                    reply,
                    compaction,
                    compacted: None,
                }
            }
        };
        let id = format!("msg_sim_{seq:08}");
        let (diagnostics, provider_miss) = match &request.diagnostics {
            Some(asked) => self.diagnose(asked, &id, shaped),
            None => (None, None),
        };
        Ok(Answer {
            id,
            model: request.model,
            usage: passes.usage,
            miss: outcome.miss,
            reply: passes.reply,
            diagnostics,
            provider_miss,
            compaction: passes.compaction,
            compacted: passes.compacted,
            context_management: (!applied.is_empty()).then_some(ContextManagementResponse {
                applied_edits: applied,
            }),
        })
    }

    /// A body's prompt as the provider caches it: shaped, and with every 1h breakpoint cached
    /// for 5 minutes where `ttl: "1h"` is not honoured. Every pass of a request (a threshold
    /// compaction's message pass too) is shaped here, so no pass caches by other rules.
    fn shape_as_cached(&self, body: &Value) -> Result<PromptShape, ApiError> {
        let mut shaped =
            shape(body).map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
        if !self.config.honour_1h {
            for c in &mut shaped.checkpoints {
                if c.breakpoint == Some(Ttl::OneHour) {
                    c.breakpoint = Some(Ttl::FiveMinutes);
                }
            }
        }
        Ok(shaped)
    }

    /// Applies a prompt from [`Simulator::shape_as_cached`] to the shared cache at `now_ms`,
    /// with its model's minimum cacheable size.
    fn apply_cache(&self, shaped: &PromptShape, now_ms: i64) -> Result<CacheOutcome, ApiError> {
        let min_cacheable = self.min_cacheable(&shaped.model)?;
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| ApiError::new(500, "api_error", "simulator state poisoned"))?;
        cache
            .apply(&shaped.prompt(), now_ms, min_cacheable, &self.config.rules)
            .map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))
    }

    /// A threshold compaction that goes on to answer ([`crate::context`]): the compaction pass
    /// was `first` (the full prompt's cache outcome) and outputs the summary; the message pass
    /// reads the compacted prompt, whose cache it reads and writes in turn, and outputs the
    /// model's answer to the request. The reply is the summary's block, then that answer.
    fn answer_from_summary(
        &self,
        request: &MessagesRequest,
        body: &Value,
        first: &CacheOutcome,
        seed: u64,
        now_ms: i64,
    ) -> Result<Passes, ApiError> {
        let block = context::compaction_block(request);
        let compacted = self.shape_as_cached(&context::compacted_body(body, &block)?)?;
        let second = self.apply_cache(&compacted, now_ms)?;
        let answer = reply(request, seed);
        let summary_tokens = crate::reply::output_tokens(std::slice::from_ref(&block));
        let mut content = vec![block];
        content.extend(answer.content);
        Ok(Passes {
            usage: second.usage(answer.output_tokens),
            reply: Reply {
                content,
                stop_reason: answer.stop_reason,
                output_tokens: answer.output_tokens,
            },
            compaction: false,
            compacted: Some(first.usage(summary_tokens)),
        })
    }

    /// Compares a request that opted into diagnostics with its previous message's shape, then
    /// keeps its own shape under `id` for the request that will name it.
    fn diagnose(
        &self,
        asked: &DiagnosticsRequest,
        id: &str,
        shaped: PromptShape,
    ) -> (Option<Diagnostics>, Option<ProviderMiss>) {
        let Ok(mut fingerprints) = self.fingerprints.lock() else {
            return (None, None);
        };
        let answer = asked.previous_message_id.as_deref().map(|previous| {
            let (kind, missed) = match fingerprints.shapes.get(previous) {
                None => (ProviderMissReason::PreviousMessageNotFound, None),
                Some(before) => match diverge(before, &shaped) {
                    None => (ProviderMissReason::NoDivergence, None),
                    Some((level, tokens)) => {
                        (ProviderMissReason::of_level(Some(level)), Some(tokens))
                    }
                },
            };
            let diagnostics = (kind != ProviderMissReason::NoDivergence).then(|| Diagnostics {
                cache_miss_reason: Some(CacheMissReason {
                    kind: kind.as_str().to_string(),
                    cache_missed_input_tokens: missed,
                }),
            });
            let recorded = ProviderMiss {
                reason: kind,
                missed_tokens: missed,
            };
            (diagnostics, recorded)
        });
        fingerprints.keep(id, shaped, self.config.max_recorded.max(1));
        match answer {
            Some((diagnostics, recorded)) => (diagnostics, Some(recorded)),
            None => (None, None),
        }
    }

    /// Answers a `count_tokens` body: the prompt's tokens, the limits checked, the cache
    /// untouched. Shaped as a messages request is ([`Simulator::shape_as_cached`]), so that a
    /// prompt one accepts the other does too: where `ttl: "1h"` is not honoured, a 1h
    /// breakpoint after a 5m one is no longer out of order.
    pub fn count_tokens(&self, body: &Value, now_ms: i64) -> Result<u64, ApiError> {
        let shaped = self.shape_as_cached(body)?;
        let min_cacheable = self.min_cacheable(&shaped.model)?;
        let cache = self
            .cache
            .lock()
            .map_err(|_| ApiError::new(500, "api_error", "simulator state poisoned"))?;
        cache
            .predict(&shaped.prompt(), now_ms, min_cacheable, &self.config.rules)
            .map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
        Ok(shaped.total_tokens)
    }
}

/// The answer to an on-demand (or a paused threshold) compaction: the summary in one signed
/// block.
fn compaction_reply(request: &MessagesRequest) -> Reply {
    let content = vec![context::compaction_block(request)];
    Reply {
        output_tokens: crate::reply::output_tokens(&content),
        content,
        stop_reason: STOP_COMPACTION,
    }
}

/// About how many bytes a JSON value holds: its strings and numbers, and a little per node.
fn approx_size(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 8,
        Value::Array(items) => 16 + items.iter().map(approx_size).sum::<usize>(),
        Value::Object(fields) => {
            16 + fields
                .iter()
                .map(|(k, v)| k.len() + 8 + approx_size(v))
                .sum::<usize>()
        }
        _ => 8,
    }
}
