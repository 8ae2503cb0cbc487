//! Injected faults (`POST /admin/faults`): what they are, and the queue each `/v1/messages`
//! request takes its fault from.

use super::Simulator;
use serde::{Deserialize, Serialize};

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
    /// A slow reply: a delay before the first byte, and between stream events. The request is
    /// processed when the first delay ends (a client gone by then has it dropped unprocessed).
    Slow {
        /// Milliseconds before the response starts.
        #[serde(default)]
        first_byte_ms: u64,
        /// Milliseconds between stream events.
        #[serde(default)]
        event_ms: u64,
    },
    /// A reply that trickles: every piece is real progress, `every_ms` apart, so a client that
    /// bounds only the silence between reads waits for all of it (a stuck provider or proxy).
    /// Streamed, each content delta carries one character and one event goes every `every_ms`;
    /// whole, the JSON body goes one byte every `every_ms`. The request is answered (and
    /// billed) as usual: only the delivery is slow.
    Trickle {
        /// Milliseconds between two pieces.
        every_ms: u64,
    },
    /// The request is answered — the prompt read, the cache written or read, the answer billed
    /// and recorded — and then nothing of the response, its status included, is sent for
    /// `ms`: what a client sees when the connection fails (a reset, a proxy's timeout) after
    /// the provider has done the work of a whole (non-streaming) reply, whose status the API
    /// sends only once it is done. Over HTTP only (in-process it is dropped, as stream faults
    /// are).
    StallBeforeHeaders {
        /// Milliseconds before the response starts.
        ms: u64,
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

impl Simulator {
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
}
