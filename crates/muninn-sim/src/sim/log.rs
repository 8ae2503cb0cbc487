//! The request log (`GET /admin/requests`): every request as it arrived and was answered,
//! bounded by count and by the bodies' size.

use super::Simulator;
use super::faults::FaultKind;
use muninn_core::ledger::{MissCause, ProviderMiss};
use muninn_core::trace::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// One request as the simulator saw and answered it (`GET /admin/requests`). Credentials are
/// not recorded, only how they were presented.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// 1-based order of arrival.
    pub seq: u64,
    /// Virtual time of arrival, Unix ms: what the cache model was applied at (for a request
    /// whose first byte a [`FaultKind::Slow`] delayed, the time the delay ended, when it was
    /// processed).
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

impl Simulator {
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
