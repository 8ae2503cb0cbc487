//! The scripted provider the backend's tests talk to: it answers every request from a script,
//! billed the same each time, and keeps the requests it was sent.

use muninn_anthropic::backend::{AnthropicBackend, Transport};
use muninn_anthropic::client::{Completed, Failed};
use muninn_anthropic::wire::{MessagesRequest, MessagesResponse};
use muninn_backend::SessionSpec;
use muninn_backend::clock::ManualClock;
use muninn_core::cache::Ttl;
use muninn_core::price::PriceTable;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The content of the answer to the n-th request (1-based).
type Script = Arc<dyn Fn(usize) -> Value + Send + Sync>;

/// A provider that answers the n-th request with its script's content for n (`end_turn`
/// unless told), billed `usage` ([`billed`] unless told), as message `msg_<n>` with request id
/// `req_<n>`.
#[derive(Clone)]
pub struct Scripted {
    script: Script,
    /// Every answer's stop reason.
    pub stop_reason: &'static str,
    /// Every answer's usage, which is also its raw usage.
    pub usage: Value,
    /// The requests sent, in order.
    pub sent: Arc<Mutex<Vec<MessagesRequest>>>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted")
            .field("stop_reason", &self.stop_reason)
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

impl Scripted {
    /// Every answer is `content`.
    pub fn answering(content: Value) -> Scripted {
        Scripted::by_request(move |_| content.clone())
    }

    /// The n-th answer is `script(n)`.
    pub fn by_request(script: impl Fn(usize) -> Value + Send + Sync + 'static) -> Scripted {
        Scripted {
            script: Arc::new(script),
            stop_reason: "end_turn",
            usage: billed(),
            sent: Arc::default(),
        }
    }

    /// The requests sent so far.
    pub fn sent(&self) -> Vec<MessagesRequest> {
        self.sent.lock().unwrap().clone()
    }
}

/// What [`Scripted`] bills each request unless told otherwise.
pub fn billed() -> Value {
    json!({"input_tokens": 12, "cache_read_input_tokens": 300,
           "cache_creation_input_tokens": 40, "output_tokens": 7})
}

impl Transport for Scripted {
    async fn send(&self, request: &MessagesRequest, _: bool) -> Result<Completed, Failed> {
        let n = {
            let mut sent = self.sent.lock().unwrap();
            sent.push(request.clone());
            sent.len()
        };
        let response: MessagesResponse = serde_json::from_value(json!({
            "id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": request.model,
            "content": (self.script)(n),
            "stop_reason": self.stop_reason,
            "usage": self.usage
        }))
        .unwrap();
        Ok(Completed {
            raw_usage: self.usage.clone(),
            response,
            request_id: Some(format!("req_{n}")),
            retries: Vec::new(),
        })
    }
}

/// A session of Vala on Opus 5.5: a 1-hour system breakpoint, a 5-minute conversation one.
pub fn spec() -> SessionSpec {
    SessionSpec {
        model: "claude-opus-5-5".to_string(),
        system: vec!["You are Vala.".to_string()],
        tools: Vec::new(),
        output_schema: None,
        system_ttl: Ttl::OneHour,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 1_000,
    }
}

/// A backend on `provider`, its clock stopped, pricing from the embedded table (no session
/// started).
pub fn backend_on(provider: &Scripted) -> AnthropicBackend<Scripted> {
    AnthropicBackend::new(
        provider.clone(),
        Arc::new(ManualClock::new(1_800_000_000_000)),
        PriceTable::embedded(),
    )
}
