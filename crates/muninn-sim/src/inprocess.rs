//! The simulator in the same process, as a [`Transport`] for the Anthropic backend: the
//! embedded model when no credentials are configured, and the fastest peer for tests.
//!
//! A request goes through [`Simulator::messages`] exactly as over HTTP — same mapping, same
//! shared cache, same reply, same request log — minus the HTTP and SSE framing. Faults that
//! refuse a request (429, 529, 500, 400, 401) come back as the same errors the HTTP client
//! reports, without retries (there is no wait to be had in-process). A stream cut after
//! `message_start` (`truncate`, `mid_stream_error`) fails the call as the HTTP client fails it
//! (which does not retry an attempt the provider billed) — after content, unless the turn is
//! safe to repeat, as [`BackendError::BrokenAfterContent`] — billed as the HTTP path bills it
//! (the attempt is in [`Failed::billed`] with what the client would have read before the cut).
//! A slow reply's first-byte delay is waited out as over HTTP (the request is processed when it
//! ends); its delays between events, and a trickle, have no meaning without a stream and are
//! consumed unapplied.

use crate::sim::{ApiError, Simulator};
use muninn_anthropic::backend::{AnthropicBackend, Transport};
use muninn_anthropic::client::{BilledAttempt, Completed, Failed, retryable_status};
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

/// The error the HTTP client would report for a refusal of request `seq` (retryable by the
/// same statuses, with the request id the server's header gives it).
fn failed(e: ApiError, seq: u64) -> Failed {
    let retryable = retryable_status(e.status);
    Failed {
        error: BackendError::Api {
            status: e.status,
            kind: e.body.error.kind,
            message: e.body.error.message,
            retryable,
            retry_after_ms: e.retry_after_s.map(|s| (s * 1000.0) as u64),
            request_id: Some(crate::server::request_id(seq).into()),
        },
        retries: Vec::new(),
        billed: Vec::new(),
    }
}

impl Transport for InProcess {
    async fn send(
        &self,
        request: &MessagesRequest,
        safe_to_repeat: bool,
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
        // A streamed request is billed as over HTTP: a cut up to the cut (the other stream
        // faults have no stream to act on here and are dropped with the fault, as a cut is for
        // a request that does not stream).
        let (answer, fault) = crate::server::answer(&self.sim, record, request.stream)
            .await
            .map_err(|e| failed(e, seq))?;
        let request_id = Some(crate::server::request_id(seq));
        let cut = request
            .stream
            .then(|| crate::server::cut_seen(&answer, fault.as_ref()))
            .flatten();
        if let Some(cut) = cut {
            return Err(cut_off(cut, fault, request_id, safe_to_repeat));
        }
        let raw_usage = serde_json::to_value(answer.wire_usage()).unwrap_or_default();
        Ok(Completed {
            response: answer.into_message(),
            raw_usage,
            request_id,
            retries: Vec::new(),
        })
    }
}

/// The failure the HTTP client reports for a stream cut after `message_start` (it does not
/// retry a billed attempt), the cut attempt billed.
fn cut_off(
    cut: crate::server::CutSeen,
    fault: Option<crate::sim::FaultKind>,
    request_id: Option<String>,
    safe_to_repeat: bool,
) -> Failed {
    use crate::sim::FaultKind;
    let error = match fault {
        // The stream's `error` event, as the client reads it (status 0: the reply was a 200).
        Some(FaultKind::MidStreamError { error_type, .. }) => BackendError::Api {
            status: 0,
            retryable: matches!(
                error_type.as_str(),
                "overloaded_error" | "rate_limit_error" | "api_error"
            ),
            kind: error_type,
            message: "Overloaded (simulated mid-stream failure)".to_string(),
            retry_after_ms: None,
            request_id: request_id.as_deref().map(Into::into),
        },
        _ => BackendError::Protocol("the stream ended before message_stop".to_string()),
    };
    let reported = if cut.after_content && !safe_to_repeat {
        BackendError::BrokenAfterContent(Box::new(error.clone()))
    } else {
        error.clone()
    };
    Failed {
        error: reported,
        retries: Vec::new(),
        billed: vec![BilledAttempt {
            usage: cut.usage,
            raw_usage: cut.raw_usage,
            request_id,
            error,
            // The simulator cuts a stream before its `message_delta` (`cut_at`): the output is
            // counted from the content sent, as the client counts it.
            output_estimated: true,
        }],
    }
}
