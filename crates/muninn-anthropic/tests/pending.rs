//! What the backend adds to a request by itself, said before it is sent
//! (`Backend::pending_input`): the acknowledgement of the last structured-output call, which
//! opens the next user message — the parts the host plans the request with are the parts sent.

use crate::scripted::{Scripted, backend_on, spec};
use muninn_anthropic::backend::STRUCTURED_OUTPUT_TOOL;
use muninn_anthropic::wire::{Content, ContentBlock, MessagesRequest};
use muninn_backend::{Backend, InputPart, SessionSpec, TurnInput};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// A provider that answers every request with a structured-output call (`toolu_<n>`).
fn structured() -> Scripted {
    let mut provider = Scripted::by_request(|n| {
        json!([{"type": "tool_use", "id": format!("toolu_{n}"),
                "name": STRUCTURED_OUTPUT_TOOL, "input": {"say": []}}])
    });
    provider.stop_reason = "tool_use";
    provider
}

/// The first block of the last message of `request`.
fn opening_block(request: &MessagesRequest) -> Value {
    match &request.messages.last().unwrap().content {
        Content::Blocks(blocks) => serde_json::to_value(&blocks[0]).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// Nothing is pending before the first reply; after a reply that called the structured-output
/// tool, its acknowledgement is, and the next request's user message opens with exactly that
/// tool result (counted among the request's tool results); a compaction's request ends with it.
#[tokio::test]
async fn the_pending_acknowledgement_is_what_the_next_request_opens_with() {
    let provider = structured();
    let mut backend = backend_on(&provider);
    backend
        .start(SessionSpec {
            output_schema: Some(json!({"type": "object"})),
            ..spec()
        })
        .await
        .unwrap();
    assert_eq!(backend.pending_input(), Vec::new());
    let first = backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(first.tool_results.uses, 0);
    let ack = InputPart::ToolResult {
        tool_use_id: "toolu_1".to_string(),
        content: "Structured output provided successfully".to_string(),
        is_error: false,
    };
    assert_eq!(backend.pending_input(), vec![ack.clone()]);

    // The request as rendered, and as sent.
    let rendered = backend.render(&TurnInput::text("again")).unwrap();
    let expected = json!({"type": "tool_result", "tool_use_id": "toolu_1",
                          "content": "Structured output provided successfully"});
    assert_eq!(opening_block(&rendered), expected);
    let second = backend.turn(TurnInput::text("again")).await.unwrap();
    assert_eq!(opening_block(&provider.sent()[1]), expected);
    assert_eq!(second.tool_results.uses, 1);
    assert!(second.tool_results.tokens > 0, "{:?}", second.tool_results);
    let InputPart::ToolResult { tool_use_id, .. } = &backend.pending_input()[0] else {
        panic!("{:?}", backend.pending_input());
    };
    assert_eq!(tool_use_id, "toolu_2");

    // A compaction closes the open call with the same block, alone in the last message.
    let compaction = backend.render_compaction("summarise").unwrap();
    let last = compaction.messages.last().unwrap();
    let Content::Blocks(blocks) = &last.content else {
        panic!("{last:?}");
    };
    assert_eq!(blocks.len(), 1);
    assert!(
        matches!(&blocks[0], ContentBlock::ToolResult { tool_use_id, .. } if tool_use_id == "toolu_2"),
        "{blocks:?}"
    );
}
