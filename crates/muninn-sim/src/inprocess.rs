//! The simulator in the same process, as a [`Transport`] for the Anthropic backend: the
//! embedded model when no credentials are configured, and the fastest peer for tests.
//!
//! A request goes through [`Simulator::messages`] exactly as over HTTP — same mapping, same
//! shared cache, same reply, same request log — minus the HTTP and SSE framing. Faults that
//! refuse a request (429, 529, 500, 400, 401) come back as the same errors the HTTP client
//! reports, without retries (there is no wait to be had in-process); stream faults (a mid-stream
//! error, a cut, a slow stream) have no meaning without a stream and are consumed unapplied.

use crate::sim::{ApiError, FaultKind, RecordedRequest, Simulator};
use muninn_anthropic::backend::{AnthropicBackend, Transport};
use muninn_anthropic::client::{Completed, Failed};
use muninn_anthropic::wire::{MessagesRequest, MessagesResponse, Role};
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

    fn refuse(&self, mut record: RecordedRequest, e: ApiError) -> Failed {
        record.status = e.status;
        record.error = Some(format!("{}: {}", e.body.error.kind, e.body.error.message));
        self.sim.record(record);
        let retryable = matches!(e.status, 408 | 409 | 429) || e.status >= 500;
        Failed {
            error: BackendError::Api {
                status: e.status,
                kind: e.body.error.kind,
                message: e.body.error.message,
                retryable,
                retry_after_ms: e.retry_after_s.map(|s| (s * 1000.0) as u64),
            },
            retries: Vec::new(),
        }
    }
}

impl Transport for InProcess {
    async fn send(
        &self,
        request: &MessagesRequest,
        _safe_to_repeat: bool,
    ) -> Result<Completed, Failed> {
        let seq = self.sim.next_seq();
        let at_ms = self.sim.now_ms();
        let body = serde_json::to_value(request).map_err(|e| Failed {
            error: BackendError::Invalid(format!("request does not serialise: {e}")),
            retries: Vec::new(),
        })?;
        let mut record = RecordedRequest {
            seq,
            at_ms,
            path: "/v1/messages".to_string(),
            auth: "in-process".to_string(),
            anthropic_beta: None,
            body: body.clone(),
            status: 200,
            usage: None,
            miss: None,
            fault: None,
            error: None,
        };
        let fault = self.sim.take_fault();
        record.fault = fault.clone();
        if let Some(e) = fault.as_ref().and_then(crate::server::fault_error) {
            return Err(self.refuse(record, e));
        }
        if let Some(FaultKind::Slow { first_byte_ms, .. }) = fault {
            tokio::time::sleep(std::time::Duration::from_millis(first_byte_ms)).await;
        }
        let mut answer = match self.sim.messages(&body, seq, at_ms) {
            Ok(a) => a,
            Err(e) => return Err(self.refuse(record, e)),
        };
        answer.apply_report_fault(fault.as_ref());
        record.usage = Some(answer.usage);
        record.miss = answer.miss;
        self.sim.record(record);
        let usage = answer.wire_usage();
        let raw_usage = serde_json::to_value(&usage).unwrap_or_default();
        Ok(Completed {
            response: MessagesResponse {
                id: answer.id,
                kind: "message".to_string(),
                role: Role::Assistant,
                model: answer.model,
                content: answer.reply.content,
                stop_reason: Some(answer.reply.stop_reason.to_string()),
                stop_sequence: None,
                usage,
            },
            raw_usage,
            request_id: Some(format!("req_sim_{seq:08}")),
            retries: Vec::new(),
        })
    }
}
