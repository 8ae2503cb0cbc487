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
//! A request that opts in is compared with the shape of the previous message it names
//! (`sim/diagnose.rs`).
//!
//! # Clock
//!
//! `now = base + (real time elapsed, unless frozen) + offset`; tests move `offset` forward to
//! expire cache entries without waiting.
//!
//! # Layout
//!
//! - this module — [`SimConfig`] and [`Simulator`]: the cache, the clock, and answering a
//!   messages or `count_tokens` body.
//! - `answer.rs` — [`Answer`] and [`ApiError`]: what a request is answered with, and its usage
//!   on the wire.
//! - `faults.rs` — [`FaultKind`], [`Fault`] and the queue requests take them from.
//! - `log.rs` — [`RecordedRequest`] and the bounded request log.
//! - `diagnose.rs` — the cache diagnostics' fingerprints and comparison.

mod answer;
mod diagnose;
mod faults;
mod log;

pub use answer::{Answer, ApiError};
pub use faults::{Fault, FaultKind};
pub use log::RecordedRequest;

use diagnose::Fingerprints;

use crate::context;
use crate::reply::{Reply, reply};
use muninn_anthropic::context::{apply_edits, compaction_due};
use muninn_anthropic::prompt::{PromptShape, ShapeError, shape};
use muninn_anthropic::wire::{
    AppliedEdit, ContextManagementResponse, MessagesRequest, STOP_COMPACTION,
};
use muninn_core::cache::{CacheError, CacheOutcome, CacheRules, CacheState, Ttl};
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

/// The latest virtual time the clock reaches (the last millisecond of the year 9999, Unix ms):
/// far past any test, and far enough from `i64::MAX` that a time plus a TTL cannot overflow.
pub const MAX_NOW_MS: i64 = 253_402_300_799_999;

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
    /// newest is always kept), and the cache diagnostics' request shapes likewise (a checkpoint
    /// per block).
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

/// How a request was answered: the reply, the usage of its (last) pass, and a threshold
/// compaction's own pass when it went on to answer.
struct Passes {
    reply: Reply,
    usage: Usage,
    compaction: bool,
    compacted: Option<Usage>,
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
        let base_ms = config
            .frozen_at_ms
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64)
            })
            .clamp(0, MAX_NOW_MS);
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

    /// Virtual now, Unix ms; never past [`MAX_NOW_MS`].
    pub fn now_ms(&self) -> i64 {
        let real = if self.config.frozen_at_ms.is_some() {
            0
        } else {
            i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
        };
        self.base_ms
            .saturating_add(real)
            .saturating_add(self.offset_ms.load(Ordering::SeqCst))
            .min(MAX_NOW_MS)
    }

    /// Moves the virtual clock forward (up to [`MAX_NOW_MS`], where it stops); returns the new
    /// now.
    pub fn advance_clock(&self, ms: i64) -> i64 {
        // Saturating: an advance is a test's input, and an offset that wrapped would send the
        // clock back.
        let _previous = self
            .offset_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |offset| {
                Some(offset.saturating_add(ms.max(0)).min(MAX_NOW_MS))
            });
        self.now_ms()
    }

    /// The next request's sequence number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
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
        let Read {
            body,
            request,
            applied,
            shaped,
        } = as_read(body, betas)?;
        let body = &*body;
        let shaped = self.as_cached(shaped);
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
        let outcome = self.apply_cache(body, &shaped, now_ms)?;
        let passes = self.passes(&request, body, &shaped, &outcome, now_ms)?;
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

    /// The passes that answer `request` (its prompt `shaped`, whose cache outcome was
    /// `outcome`): a threshold compaction that goes on to answer takes two, anything else one.
    fn passes(
        &self,
        request: &MessagesRequest,
        body: &Value,
        shaped: &PromptShape,
        outcome: &CacheOutcome,
        now_ms: i64,
    ) -> Result<Passes, ApiError> {
        let seed = shaped.checkpoints.last().map_or(0, |c| c.fingerprint);
        Ok(match compaction_due(request, shaped.total_tokens) {
            Some(edit) if !edit.pause_after_compaction => {
                self.answer_from_summary(request, body, outcome, seed, now_ms)?
            }
            // An on-demand compaction and a paused threshold one answer alike: the summary
            // alone, billed as one compaction pass.
            due => {
                let compaction = due.is_some() || request.compaction.is_some();
                let reply = if compaction {
                    compaction_reply(request)
                } else {
                    reply(request, seed)
                };
                Passes {
                    usage: outcome.usage(reply.output_tokens),
                    reply,
                    compaction,
                    compacted: None,
                }
            }
        })
    }

    /// A body's prompt as the provider caches it: shaped, and with every 1h breakpoint cached
    /// for 5 minutes where `ttl: "1h"` is not honoured. Every pass of a request (a threshold
    /// compaction's message pass too) is shaped here, so no pass caches by other rules.
    fn shape_as_cached(&self, body: &Value) -> Result<PromptShape, ApiError> {
        Ok(self.as_cached(shape(body).map_err(refused_shape)?))
    }

    /// `shape_as_cached` of a body already shaped: `shaped` as the provider caches it.
    fn as_cached(&self, mut shaped: PromptShape) -> PromptShape {
        if !self.config.honour_1h {
            for c in &mut shaped.checkpoints {
                if c.breakpoint == Some(Ttl::OneHour) {
                    c.breakpoint = Some(Ttl::FiveMinutes);
                }
            }
        }
        shaped
    }

    /// Applies `body`'s prompt from [`Simulator::shape_as_cached`] to the shared cache at
    /// `now_ms`, with its model's minimum cacheable size.
    fn apply_cache(
        &self,
        body: &Value,
        shaped: &PromptShape,
        now_ms: i64,
    ) -> Result<CacheOutcome, ApiError> {
        let min_cacheable = self.min_cacheable(&shaped.model)?;
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| ApiError::new(500, "api_error", "simulator state poisoned"))?;
        cache
            .apply(&shaped.prompt(), now_ms, min_cacheable, &self.config.rules)
            .map_err(|e| cache_refusal(body, &e))
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
        let compacted_body = context::compacted_body(body, &block)?;
        let compacted = self.shape_as_cached(&compacted_body)?;
        let second = self.apply_cache(&compacted_body, &compacted, now_ms)?;
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

    /// Answers a `count_tokens` body: the prompt's tokens, the limits checked, the cache
    /// untouched. Shaped as a messages request is (`shape_as_cached`), so that a
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
            .map_err(|e| cache_refusal(body, &e))?;
        Ok(shaped.total_tokens)
    }
}

/// A messages body as the provider reads it (`as_read`).
struct Read<'a> {
    /// The body read: the one sent, unless a compaction dropped messages or an edit applied.
    body: Cow<'a, Value>,
    /// `body`, typed, after the edits.
    request: MessagesRequest,
    /// The edits applied.
    applied: Vec<AppliedEdit>,
    /// `body` mapped for the cache model (before `Simulator::as_cached`).
    shaped: PromptShape,
}

/// A messages body as the provider reads it: from the last compaction block sent back, after
/// the context edits — the body, the typed request, the edits applied and the body's shape.
/// Refused where the API refuses the body, a compaction or an edit.
fn as_read<'a>(body: &'a Value, betas: Option<&str>) -> Result<Read<'a>, ApiError> {
    // The mapping first: its errors name the field the way the API does. A body read as it was
    // sent keeps this shape (the mapping depends on the body alone), so a turn maps its prompt
    // once, not twice.
    let shaped = shape(body).map_err(refused_shape)?;
    let request = MessagesRequest::deserialize(body)
        .map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
    let (received, request) = context::receive_compactions(body, request)?;
    let received = received.map_or(Cow::Borrowed(body), Cow::Owned);
    context::check_fields(&received, &request, betas)?;
    context::check_compaction(&request, betas)?;
    let (edited, applied) = apply_edits(&request)
        .map_err(|e| ApiError::new(400, "invalid_request_error", e.to_string()))?;
    let (body, shaped) = match received {
        Cow::Borrowed(body) if applied.is_empty() => (Cow::Borrowed(body), shaped),
        received => {
            let body = if applied.is_empty() {
                received.into_owned()
            } else {
                context::edited_body(&received, &request, &edited)?
            };
            let shaped = shape(&body).map_err(refused_shape)?;
            (Cow::Owned(body), shaped)
        }
    };
    Ok(Read {
        body,
        request: edited,
        applied,
        shaped,
    })
}

/// The API's 400 for a body the mapping refuses.
fn refused_shape(e: ShapeError) -> ApiError {
    ApiError::new(400, "invalid_request_error", e.to_string())
}

/// The API's 400 for a prompt the cache model refuses. A TTL out of order names the offending
/// block's field first, as the API does (`system.1.cache_control.ttl: …`); a marker that came
/// from the top-level `cache_control` (automatic caching) is named as that field — a simulator
/// choice: no recorded refusal shows how the API names it.
fn cache_refusal(body: &Value, e: &CacheError) -> ApiError {
    let message = match e {
        CacheError::TtlOrder { block } => {
            let path = muninn_anthropic::prompt::block_path(body, *block as usize)
                .filter(|path| {
                    let pointer = format!("/{}/cache_control", path.replace('.', "/"));
                    body.pointer(&pointer).is_some_and(|cc| !cc.is_null())
                })
                .unwrap_or_default();
            let field = if path.is_empty() {
                "cache_control.ttl".to_string()
            } else {
                format!("{path}.cache_control.ttl")
            };
            format!("{field}: {e}")
        }
        other => other.to_string(),
    };
    ApiError::new(400, "invalid_request_error", message)
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
