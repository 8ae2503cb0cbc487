//! Answers the backend cannot use are still billed: a request the provider answered whole read
//! the prompt and generated output, so its usage is reported even when the backend refuses
//! what came back.

use muninn_anthropic::backend::{AnthropicBackend, ContextTools, Transport};
use muninn_anthropic::client::{Completed, Failed};
use muninn_anthropic::wire::{MessagesRequest, MessagesResponse};
use muninn_backend::clock::ManualClock;
use muninn_backend::{Backend, BackendError, SessionSpec, TurnInput};
use muninn_core::cache::Ttl;
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// A provider that answers every request with `content` (`end_turn`), billed [`billed`], and
/// keeps the requests it was sent.
#[derive(Debug, Clone)]
struct Scripted {
    content: Value,
    sent: Arc<Mutex<Vec<MessagesRequest>>>,
}

impl Scripted {
    /// Every answer in text.
    fn in_text() -> Scripted {
        Scripted::answering(json!([{"type": "text", "text": "I would rather not summarise."}]))
    }

    fn answering(content: Value) -> Scripted {
        Scripted {
            content,
            sent: Arc::default(),
        }
    }
}

/// What [`Scripted`] bills each request.
fn billed() -> Value {
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
            "content": self.content,
            "stop_reason": "end_turn",
            "usage": billed()
        }))
        .unwrap();
        Ok(Completed {
            raw_usage: billed(),
            response,
            request_id: Some(format!("req_{n}")),
            retries: Vec::new(),
        })
    }
}

fn spec() -> SessionSpec {
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

/// A compaction the provider answered in text, without its `compaction` block, fails (the
/// session is not compacted) — but the provider read the whole session and wrote the answer:
/// the request is reported as an attempt billed, with the usage it was billed and its request
/// id, so the ledger and the spend cap count it (before, the answer's usage was dropped with
/// the refusal, and the host, which ledgers a failed compaction's billed attempts, had none).
#[tokio::test]
async fn a_compaction_answered_without_its_block_is_still_billed() {
    let provider = Scripted::in_text();
    let mut backend = AnthropicBackend::new(
        provider.clone(),
        Arc::new(ManualClock::new(1_800_000_000_000)),
        PriceTable::embedded(),
    )
    .with_context_tools(ContextTools {
        server_compaction: true,
        ..ContextTools::default()
    });
    backend.start(spec()).await.unwrap();
    backend.turn(TurnInput::text("hello")).await.unwrap();
    let error = backend.compact("summarise").await.unwrap_err();
    assert!(
        matches!(&error, BackendError::CompactionFailed(_)),
        "{error:?}"
    );
    assert_eq!(provider.sent.lock().unwrap().len(), 2);
    let failed = backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let expected = Usage {
        input: 12,
        cache_write_5m: 40,
        cache_write_1h: 0,
        cache_read: 300,
        output: 7,
    };
    assert_eq!(failed[0].usage, expected);
    assert_eq!(failed[0].raw_usage, billed());
    assert_eq!(failed[0].request_id.as_deref(), Some("req_2"));
    assert_eq!(failed[0].error, error.to_string());
    assert!(failed[0].predicted.is_some());
    assert!(!failed[0].cleared);
}
