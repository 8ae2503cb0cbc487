//! Answered requests, as the backend keeps and bills them: an answer the backend cannot use is
//! still billed (a request the provider answered whole read the prompt and generated output,
//! so its usage is reported even when the backend refuses what came back), a compaction pass
//! is priced at the request's TTLs, and a reply's blocks go back in the next request as they
//! came.

use crate::scripted::{Scripted, backend_on, billed, spec};
use muninn_anthropic::backend::{AnthropicBackend, ContextTools};
use muninn_anthropic::wire::{Content, ContentBlock, MessagesRequest};
use muninn_backend::{Backend, BackendError, InputPart, SessionSpec, TurnInput};
use muninn_core::cache::Ttl;
use muninn_core::trace::Usage;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

impl Scripted {
    /// Every answer in text.
    fn in_text() -> Scripted {
        Scripted::answering(json!([{"type": "text", "text": "I would rather not summarise."}]))
    }
}

/// A backend on `provider` that compacts on the server, its session started and one turn
/// answered.
async fn compacting_after_one_turn(provider: &Scripted) -> AnthropicBackend<Scripted> {
    let mut backend = backend_on(provider).with_context_tools(ContextTools {
        server_compaction: true,
        ..ContextTools::default()
    });
    backend.start(spec()).await.unwrap();
    backend.turn(TurnInput::text("hello")).await.unwrap();
    backend
}

/// A compaction the provider answered in text, without its `compaction` block, fails (the
/// session is not compacted) — but the provider read the whole session and wrote the answer:
/// the request is reported as an attempt billed, with the usage it was billed and its request
/// id, so the ledger and the spend cap count it (before, the answer's usage was dropped with
/// the refusal, and the host, which ledgers a failed compaction's billed attempts, had none).
#[tokio::test]
async fn a_compaction_answered_without_its_block_is_still_billed() {
    let provider = Scripted::in_text();
    let mut backend = compacting_after_one_turn(&provider).await;
    let error = backend.compact("summarise").await.unwrap_err();
    assert!(
        matches!(&error, BackendError::CompactionFailed(_)),
        "{error:?}"
    );
    assert_eq!(provider.sent().len(), 2);
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

/// The provider may answer a turn with no content at all (`end_turn`, nothing said: documented
/// after tool results). An assistant message with no content is a 400 from the API ("all
/// messages must have non-empty content except for the optional final assistant message"), so
/// the session must not send it back: every later turn of the segment would be refused (before,
/// the next request carried `{"role":"assistant","content":[]}`). So is an empty text block
/// ("text content blocks must be non-empty"), which a reply may hold. The empty answer joins
/// nothing; the next user message follows the last (the API joins consecutive user turns), and
/// the request still begins with the bytes of the one before.
#[tokio::test]
async fn an_empty_answer_is_not_sent_back() {
    for content in [json!([]), json!([{"type": "text", "text": ""}])] {
        answered_with(content).await;
    }
}

/// One session answered `content` twice: the second request sends back nothing empty.
async fn answered_with(content: Value) {
    let provider = Scripted::answering(content.clone());
    let mut backend = backend_on(&provider);
    backend.start(spec()).await.unwrap();
    let first = backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(first.text, "");
    backend
        .turn(TurnInput::text("are you there?"))
        .await
        .unwrap();
    let sent = provider.sent();
    let empty: Vec<usize> = sent[1]
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| match &m.content {
            Content::Blocks(blocks) => blocks.is_empty() || blocks.iter().any(empty_text),
            Content::Text(text) => text.is_empty(),
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        empty,
        Vec::<usize>::new(),
        "{content}: {:?}",
        sent[1].messages
    );
    // Append-only: the first request's messages, markers aside, open the second's.
    let unmarked = |r: &MessagesRequest| {
        let mut v = serde_json::to_value(&r.messages).unwrap();
        for m in v.as_array_mut().unwrap() {
            for b in m["content"].as_array_mut().unwrap() {
                b.as_object_mut().unwrap().remove("cache_control");
            }
        }
        v.as_array().unwrap().clone()
    };
    let (before, after) = (unmarked(&sent[0]), unmarked(&sent[1]));
    assert_eq!(after[..before.len()], before[..]);
}

fn empty_text(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Text { text, .. } if text.is_empty())
}

/// The compaction block goes back exactly as the provider gave it: its summary, its signature
/// and every field it carries that this crate does not name (the provider checks the block it
/// signed, and answers `compaction_content_mismatch` or `compaction_signature_invalid` to one
/// that lost a field). Before, the block kept `content` and `signature` alone.
#[tokio::test]
async fn a_compaction_block_is_sent_back_as_received() {
    let block = json!({"type": "compaction", "content": "<summary>the mill</summary>",
                       "signature": "sig_1", "summary_format": {"version": 3},
                       "encrypted_content": "ZW5j"});
    let mut provider = Scripted::answering(json!([block.clone()]));
    provider.stop_reason = "compaction";
    let mut backend = compacting_after_one_turn(&provider).await;
    backend.compact("summarise").await.unwrap();
    backend.turn(TurnInput::text("and now?")).await.unwrap();
    let sent = provider.sent();
    let body = serde_json::to_value(&sent[2]).unwrap();
    assert_eq!(body["messages"][0]["content"][0], block);
}

/// Every block of a reply goes back in the next request with every field and value it came
/// with — a thinking block's fields besides its text and signature, a text block's
/// `citations`, a tool call's `caller`, and the blocks of kinds this crate does not name
/// (`redacted_thinking`, a server tool's call and result) whole — or the provider's prefix
/// (and its cache) breaks, and a thinking block fails its signature. Before, the named kinds
/// lost every field they do not name.
#[tokio::test]
async fn every_block_of_a_reply_goes_back_as_received() {
    let reply = json!([
        {"type": "thinking", "thinking": "Look it up.", "signature": "sig_t",
         "origin": {"pass": 1}},
        {"type": "redacted_thinking", "data": "ZW5j"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "mill"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "text", "text": "It is a mill.",
         "citations": [{"type": "web_search_result_location", "url": "https://mill.example",
                        "title": "The mill", "encrypted_index": "RW5j", "cited_text": "a mill"}]},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "mill"},
         "caller": {"type": "direct"}}
    ]);
    let provider = Scripted::answering(reply.clone());
    let mut backend = backend_on(&provider);
    backend.start(spec()).await.unwrap();
    backend.turn(TurnInput::text("what is it?")).await.unwrap();
    let answer = TurnInput {
        parts: vec![InputPart::ToolResult {
            tool_use_id: "toolu_1".to_string(),
            content: "a mill".to_string(),
            is_error: false,
        }],
        safe_to_repeat: false,
    };
    backend.turn(answer).await.unwrap();
    let sent = provider.sent();
    let body = serde_json::to_value(&sent[1]).unwrap();
    assert_eq!(body["messages"][1]["content"], reply);
}

/// A compaction pass whose `usage.iterations[]` entry gives no TTL split of its writes is
/// priced at the TTLs of the request's breakpoints: the pass reads the cached head of the
/// request's prompt and writes on to its last breakpoint, so its writes are the last tokens
/// before that breakpoint, each span at the TTL of the breakpoint closing it. Under 1-hour
/// breakpoints throughout they are 1-hour writes; when the conversation's breakpoint is
/// 5-minute, a write shorter than the conversation's span (here some 9 tokens) is 5-minute.
/// Before, every such write was
/// priced as a 5-minute one, whatever the breakpoints asked.
#[tokio::test]
async fn a_compaction_pass_without_its_split_writes_at_the_breakpoints_ttls() {
    for (conversation_ttl, expected) in [(Ttl::OneHour, (0, 5)), (Ttl::FiveMinutes, (5, 0))] {
        let mut provider = Scripted::by_request(|n| match n {
            1 => json!([{"type": "text", "text": "The mill grinds at dawn."}]),
            _ => json!([{"type": "compaction", "content": "<summary>s</summary>",
                         "signature": "sig"}]),
        });
        provider.stop_reason = "compaction";
        provider.usage = json!({
            "input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "iterations": [{"type": "compaction", "input_tokens": 3, "output_tokens": 40,
                            "cache_read_input_tokens": 900, "cache_creation_input_tokens": 5}]
        });
        let mut backend = backend_on(&provider).with_context_tools(ContextTools {
            server_compaction: true,
            ..ContextTools::default()
        });
        // A system prompt past the model's least cacheable length (512 tokens), so that every
        // breakpoint caches.
        let system = vec!["The mill by the river grinds at dawn. ".repeat(200)];
        let session = SessionSpec {
            system,
            conversation_ttl,
            ..spec()
        };
        backend.start(session).await.unwrap();
        backend.turn(TurnInput::text("hello")).await.unwrap();
        let compacted = backend.compact("summarise").await.unwrap();
        let writes = (
            compacted.usage.cache_write_5m,
            compacted.usage.cache_write_1h,
        );
        assert_eq!(writes, expected, "conversation at {conversation_ttl:?}");
        assert_eq!(compacted.usage.cache_read, 900);
    }
}
