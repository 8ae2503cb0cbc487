//! The simulator in the same process, as a [`Transport`] for the Anthropic backend: the
//! embedded model when no credentials are configured, and the fastest peer for tests.
//!
//! A request goes through [`Simulator::messages`] exactly as over HTTP — same mapping, same
//! shared cache, same reply, same request log — minus the HTTP and SSE framing. Faults that
//! refuse a request (429, 529, 500, 400, 401) come back as the same errors the HTTP client
//! reports, without retries (there is no wait to be had in-process); stream faults (a mid-stream
//! error, a cut, a slow or trickling reply) have no meaning without a stream and are consumed
//! unapplied.

use crate::sim::{ApiError, Simulator};
use muninn_anthropic::backend::{AnthropicBackend, Transport};
use muninn_anthropic::client::{Completed, Failed, retryable_status};
use muninn_anthropic::wire::MessagesRequest;
use muninn_backend::BackendError;
use std::sync::Arc;

/// A [`Transport`] that calls a [`Simulator`] directly.
#[derive(Debug, Clone)]
pub struct InProcess {
    sim: Arc<Simulator>,
}

/// The Anthropic backend over an in-process simulator.
pub type SimBackend = AnthropicBackend<InProcess>;

impl InProcess {
    /// A transport over `sim`.
    pub fn new(sim: Arc<Simulator>) -> InProcess {
        InProcess { sim }
    }
}

/// The error the HTTP client would report for a refusal (retryable by the same statuses).
fn failed(e: ApiError) -> Failed {
    let retryable = retryable_status(e.status);
    Failed {
        error: BackendError::Api {
            status: e.status,
            kind: e.body.error.kind,
            message: e.body.error.message,
            retryable,
            retry_after_ms: e.retry_after_s.map(|s| (s * 1000.0) as u64),
        },
        retries: Vec::new(),
        billed: Vec::new(),
    }
}

impl Transport for InProcess {
    async fn send(
        &self,
        request: &MessagesRequest,
        _safe_to_repeat: bool,
    ) -> Result<Completed, Failed> {
        let body = serde_json::to_value(request).map_err(|e| Failed {
            error: BackendError::Invalid(format!("request does not serialise: {e}")),
            retries: Vec::new(),
            billed: Vec::new(),
        })?;
        // The betas the HTTP client would send for this request's own fields.
        let betas = muninn_anthropic::context::betas_for(request);
        let beta = (!betas.is_empty()).then(|| betas.join(","));
        let record = self.sim.arrival("/v1/messages", "in-process", beta, body);
        let seq = record.seq;
        // Stream faults have no stream to act on here and are dropped with the fault.
        let (answer, _fault) = crate::server::answer(&self.sim, record, false)
            .await
            .map_err(failed)?;
        let raw_usage = serde_json::to_value(answer.wire_usage()).unwrap_or_default();
        Ok(Completed {
            response: answer.into_message(),
            raw_usage,
            request_id: Some(format!("req_sim_{seq:08}")),
            retries: Vec::new(),
            billed: Vec::new(),
        })
    }
}
