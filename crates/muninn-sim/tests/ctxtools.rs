//! The provider's own context tools, the Anthropic backend against the real `muninn-sim`
//! server: keep-warm pings with `max_tokens: 0`, on-demand server compaction billed in
//! `usage.iterations[]`, and tool-result clearing (the `mask` action) priced by
//! `muninn_core::mask` exactly as the simulator bills it.

use crate::support::{T0, client, long_system, message_records, sim, tool_specs, wired};
use muninn_anthropic::backend::{AnthropicBackend, ContextTools};
use muninn_anthropic::client::AnthropicClient;
use muninn_anthropic::context::{apply_edits, kept_tokens};
use muninn_anthropic::prompt::shape;
use muninn_anthropic::wire::{ClearToolUses, EditAmount, MessagesRequest, Usage as WireUsage};
use muninn_backend::clock::{ManualClock, RecordingSleeper};
use muninn_backend::{
    Backend, BackendError, Capability, InputPart, SessionSpec, TurnEvent, TurnInput,
};
use muninn_core::cache::Ttl;
use muninn_core::mask::{MaskedRequest, mask_break_even, masked_usage};
use muninn_core::money::MicroUsd;
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use muninn_sim::SimHandle;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::Arc;

const MODEL: &str = "claude-opus-5-5";

fn spec(tools: usize) -> SessionSpec {
    SessionSpec {
        model: MODEL.to_string(),
        system: vec![long_system("ctxtools", 2)],
        tools: tool_specs(tools),
        output_schema: None,
        system_ttl: Ttl::FiveMinutes,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 512,
    }
}

fn backend_with(h: &SimHandle, tools: ContextTools) -> AnthropicBackend {
    let sleeper = RecordingSleeper::default();
    AnthropicBackend::new(
        client(h, &sleeper, 0),
        Arc::new(ManualClock::new(T0)),
        PriceTable::embedded(),
    )
    .with_context_tools(tools)
}

/// A backend that compacts on the server (`compact-2026-09-04`).
fn compacting_backend(h: &SimHandle) -> AnthropicBackend {
    backend_with(
        h,
        ContextTools {
            server_compaction: true,
            ..ContextTools::default()
        },
    )
}

fn cost(usage: &Usage) -> MicroUsd {
    PriceTable::embedded().model(MODEL).unwrap().cost(usage)
}

/// A ping sends `max_tokens: 0` without streaming and pays the prefix's read and no output;
/// the backend tells the decider so. With the option off, it asks for (and pays) one token.
#[tokio::test]
async fn a_zero_token_ping_pays_the_read_and_no_output() {
    for zero in [true, false] {
        let h = sim().await;
        let mut b = backend_with(
            &h,
            ContextTools {
                ping_max_tokens_zero: zero,
                ..ContextTools::default()
            },
        );
        b.start(spec(0)).await.unwrap();
        b.turn(TurnInput::text("one")).await.unwrap();
        let two = b.turn(TurnInput::text("two")).await.unwrap();
        let ping = b.ping().await.unwrap();
        let sent = h.sim.requests().last().unwrap().body.clone();
        let prefix = two.usage.prompt();
        if zero {
            assert_eq!(sent["max_tokens"], json!(0));
            assert_eq!(sent.get("stream"), None, "{sent}");
            assert_eq!(ping.stop_reason, "max_tokens");
            assert_eq!(ping.text, "");
        } else {
            assert_eq!(sent["max_tokens"], json!(1));
        }
        assert_eq!(ping.usage.output, b.ping_output_tokens(), "zero: {zero}");
        println!(
            "ping max_tokens {}: {:?}, {} µ$",
            u64::from(!zero),
            ping.usage,
            cost(&ping.usage).0
        );
        assert_eq!(ping.usage.output, u64::from(!zero));
        // The ping read the whole prefix the last turn cached, and was predicted exactly.
        assert_eq!(ping.usage.cache_read, prefix);
        assert_eq!(ping.predicted, Some(ping.usage));
        // The session is as it was: the next turn reads what the ping kept warm.
        let three = b.turn(TurnInput::text("three")).await.unwrap();
        assert_eq!(three.usage.cache_read, prefix + ping.usage.written());
    }
}

/// POSTs `body` to the simulator's Messages endpoint, with `beta` as `anthropic-beta`: the status
/// and the JSON answer (or its text when it is not JSON).
pub(crate) async fn post(h: &SimHandle, body: &Value, beta: Option<&str>) -> (u16, Value) {
    // reqwest panics at client build without a TLS provider; installing it here keeps this test
    // from passing only when an earlier test in the binary happened to install it.
    muninn_anthropic::client::install_ring_provider();
    let mut req = reqwest::Client::new()
        .post(format!("{}/v1/messages", h.base_url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap());
    if let Some(beta) = beta {
        req = req.header("anthropic-beta", beta);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `max_tokens: 0` is answered without streaming — empty content, `stop_reason: "max_tokens"`,
/// no output billed — and refused with streaming, as the API refuses it.
#[tokio::test]
async fn max_tokens_zero_is_answered_and_refused_with_streaming() {
    let h = sim().await;
    let body = json!({"model": MODEL, "max_tokens": 0,
        "messages": [{"role": "user", "content": "keep warm"}]});
    let (status, reply) = post(&h, &body, None).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["content"], json!([]));
    assert_eq!(reply["stop_reason"], json!("max_tokens"));
    assert_eq!(reply["usage"]["output_tokens"], json!(0));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, reply) = post(&h, &streamed, None).await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens: 0"),
        "{reply}"
    );
}

/// The backend's compaction: the reply is one signed block with `stop_reason: "compaction"`,
/// whose usage the provider reports only in `usage.iterations[]`. The ledger's usage (the
/// outcome's) is the iterations' — a ledger that read the top-level counts would record 0 — and
/// the session goes on from the block, which the simulator accepts back.
#[tokio::test]
async fn a_server_compaction_is_billed_from_its_iterations() {
    let h = sim().await;
    let mut b = compacting_backend(&h);
    b.start(spec(0)).await.unwrap();
    for text in [
        "the mill by the river",
        "and the crows",
        "what of the bridge",
    ] {
        b.turn(TurnInput::text(text)).await.unwrap();
    }
    let compacted = b.compact("Keep the places.").await.unwrap();
    assert_eq!(compacted.stop_reason, "compaction");
    assert!(compacted.text.contains("<summary>"), "{}", compacted.text);
    let raw: WireUsage = serde_json::from_value(compacted.raw_usage.clone()).unwrap();
    let iterations = raw.iterations.clone().unwrap();
    assert_eq!(iterations.len(), 1);
    assert_eq!(iterations[0].kind, "compaction");
    // The top-level counts say nothing; the iterations say everything.
    assert_eq!(cost(&raw.top_level()), MicroUsd::ZERO);
    let priced: MicroUsd = iterations
        .iter()
        .map(|it| {
            cost(&Usage {
                input: it.input_tokens,
                cache_write_5m: it.cache_creation_input_tokens,
                cache_write_1h: 0,
                cache_read: it.cache_read_input_tokens,
                output: it.output_tokens,
            })
        })
        .fold(MicroUsd::ZERO, |a, b| a + b);
    assert!(priced > MicroUsd::ZERO);
    assert_eq!(cost(&compacted.usage), priced);
    println!(
        "compaction: top-level {} µ$, iterations {:?} = {} µ$, ledger {} µ$",
        cost(&raw.top_level()).0,
        compacted.usage,
        priced.0,
        cost(&compacted.usage).0
    );
    assert_eq!(
        h.sim.requests().last().unwrap().usage,
        Some(compacted.usage)
    );
    // The compaction read the session's cached prefix, as predicted.
    assert!(compacted.usage.cache_read > 0);
    assert_eq!(
        compacted.predicted.map(|p| p.cache_read),
        Some(compacted.usage.cache_read)
    );
    let sent = h.sim.requests().last().unwrap().clone();
    assert_eq!(sent.body["compaction"]["type"], json!("summarize"));
    assert!(
        sent.anthropic_beta
            .as_deref()
            .unwrap()
            .contains("compact-2026-09-04")
    );
    // The session continues from the block alone.
    let next = b.turn(TurnInput::text("and now?")).await.unwrap();
    let body = h.sim.requests().last().unwrap().body.clone();
    assert_eq!(
        body["messages"][0]["content"][0]["type"],
        json!("compaction")
    );
    assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(next.stop_reason, "end_turn");
    // Nothing new to summarize right after a compaction is the provider's refusal.
    let mut again = compacting_backend(&h);
    again.start(spec(0)).await.unwrap();
    again.turn(TurnInput::text("one")).await.unwrap();
    again.compact("").await.unwrap();
    match again.compact("").await {
        Err(BackendError::CompactionFailed(m)) => {
            assert!(m.contains("compaction_nothing_to_summarize"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

/// A compaction under 1-hour breakpoints writes the prefix the request marks at 1 hour, and
/// the provider says so in the iteration's own `cache_creation` split. The ledger's usage is
/// what the simulator bills, TTL by TTL (before, an iteration's writes were all priced as
/// 5-minute writes whatever the breakpoints asked).
#[tokio::test]
async fn a_compaction_under_1h_breakpoints_is_billed_at_1h() {
    let h = sim().await;
    let mut b = compacting_backend(&h);
    b.start(SessionSpec {
        system_ttl: Ttl::OneHour,
        conversation_ttl: Ttl::OneHour,
        ..spec(0)
    })
    .await
    .unwrap();
    for text in ["the mill by the river", "and the crows"] {
        b.turn(TurnInput::text(text)).await.unwrap();
    }
    let compacted = b.compact("Keep the places.").await.unwrap();
    let billed = h.sim.requests().last().unwrap().usage.unwrap();
    assert!(billed.cache_write_1h > 0, "{billed:?}");
    assert_eq!(compacted.usage, billed);
    assert_eq!(compacted.predicted, Some(billed));
    assert_eq!(cost(&compacted.usage), cost(&billed));
}

/// A streamed compaction the simulator cuts after its summary's delta, before `message_delta`:
/// the provider bills the prompt and the summary it sent. The backend's failed attempt is that
/// bill, token for token, and its error says the output is counted from what arrived (an
/// estimate). Before, the stream's `message_start` claimed the whole pass's output, and the
/// cut was billed it plus the start's placeholder token.
#[tokio::test]
async fn a_compaction_cut_after_its_summary_is_billed_the_summary_sent() {
    let h = sim().await;
    let mut b = compacting_backend(&h);
    b.start(spec(0)).await.unwrap();
    for text in ["the mill by the river", "and the crows"] {
        b.turn(TurnInput::text(text)).await.unwrap();
    }
    h.sim.push_faults([muninn_sim::sim::Fault {
        kind: muninn_sim::sim::FaultKind::Truncate { after_deltas: 1 },
        times: 1,
    }]);
    b.compact("Keep the places.").await.unwrap_err();
    let failed = b.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let billed = h.sim.requests().last().unwrap().usage.unwrap();
    assert_eq!(failed[0].usage, billed);
    assert!(
        failed[0]
            .error
            .contains("output counted from the content received"),
        "{}",
        failed[0].error
    );
    // The same request answered whole: the same summary, whose tokens the cut one was billed.
    let whole = b.compact("Keep the places.").await.unwrap();
    assert_eq!(failed[0].usage.output, whole.usage.output);
}

/// A provider that cannot compact right now (529 `compaction_unavailable`, retried until the
/// retries run out) is a failed compaction: the session is as it was, and the next turn goes on.
#[tokio::test]
async fn an_unavailable_compaction_fails_and_leaves_the_session() {
    let h = sim().await;
    let mut b = compacting_backend(&h);
    b.start(spec(0)).await.unwrap();
    let one = b.turn(TurnInput::text("one")).await.unwrap();
    h.sim.push_faults([muninn_sim::sim::Fault {
        kind: muninn_sim::sim::FaultKind::CompactionUnavailable,
        times: 1,
    }]);
    match b.compact("").await {
        Err(BackendError::CompactionFailed(m)) => {
            assert!(m.contains("compaction_unavailable"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let two = b.turn(TurnInput::text("two")).await.unwrap();
    assert_eq!(two.usage.cache_read, one.usage.prompt());
}

/// Off by default: a backend not configured for server compaction cannot compact.
#[tokio::test]
async fn server_compaction_is_off_by_default() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend.start(spec(0)).await.unwrap();
    w.backend.turn(TurnInput::text("one")).await.unwrap();
    assert_eq!(
        w.backend.compact("x").await.unwrap_err(),
        BackendError::Unsupported {
            capability: Capability::Compact
        }
    );
}

/// The compaction request without streaming, through the client: the same block and the same
/// billing in `iterations[]` as the stream carries.
#[tokio::test]
async fn a_compaction_without_streaming_reads_alike() {
    let h = sim().await;
    let mut b = compacting_backend(&h);
    b.start(spec(0)).await.unwrap();
    b.turn(TurnInput::text("one")).await.unwrap();
    b.turn(TurnInput::text("two")).await.unwrap();
    let mut request = b.render_compaction("").unwrap();
    request.stream = false;
    let plain: AnthropicClient = client(&h, &RecordingSleeper::default(), 0);
    let done = plain.messages(&request, true).await.unwrap();
    assert_eq!(done.response.stop_reason.as_deref(), Some("compaction"));
    let usage = done.response.usage.to_core();
    assert_eq!(done.response.usage.top_level(), Usage::default());
    assert_eq!(usage.output, {
        let it = &done.response.usage.iterations.as_ref().unwrap()[0];
        it.output_tokens
    });
    assert!(usage.cache_read > 0);
    assert_eq!(done.raw_usage["iterations"][0]["type"], json!("compaction"));
}

/// What the API refuses of a compaction, the simulator refuses: without the beta, with
/// `context_management`, with a tool call open, with nothing new to summarize, and a block sent
/// back misplaced, with a forged signature or with other content than it signed.
#[tokio::test]
async fn what_the_api_refuses_of_a_compaction_the_simulator_refuses() {
    let h = sim().await;
    let beta = Some("compact-2026-09-04,context-management-2025-06-27");
    let talk = json!([{"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"}]);
    let (status, ok) = post(&h, &compaction_request(talk.clone()), beta).await;
    assert_eq!(status, 200, "{ok}");
    let block = ok["content"][0].clone();
    assert_eq!(block["type"], json!("compaction"));
    assert_eq!(ok["stop_reason"], json!("compaction"));
    assert_eq!(ok["usage"]["input_tokens"], json!(0));
    assert_eq!(ok["usage"]["output_tokens"], json!(0));
    assert!(
        ok["usage"]["iterations"][0]["output_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    for (body, beta, expected) in refused_compactions(&talk, &block, beta) {
        let (status, reply) = post(&h, &body, beta).await;
        assert_eq!(status, 400, "{expected}: {reply}");
        let said = format!("{} {}", reply["error"]["type"], reply["error"]["message"]);
        assert!(said.contains(expected), "{expected}: {said}");
    }
    // The block sent back unchanged is accepted, and what came before it is not read.
    let mut long = talk.as_array().unwrap().clone();
    long.extend(sent_back(block).as_array().unwrap().iter().cloned());
    let body = json!({"model": MODEL, "max_tokens": 256, "messages": long});
    let (status, reply) = post(&h, &body, None).await;
    assert_eq!(status, 200, "{reply}");
    let plain = json!({"model": MODEL, "max_tokens": 256,
        "messages": sent_back(ok["content"][0].clone())});
    let (_, alone) = post(&h, &plain, None).await;
    assert_eq!(
        reply["usage"]["input_tokens"],
        alone["usage"]["input_tokens"]
    );
}

/// A streamed compaction, as the API streams it: `content_block_start` carries the block with
/// `"content": null` (and its signature), one `compaction_delta` the summary; put together it
/// is the block the non-streaming reply holds, and the client assembles it.
#[tokio::test]
async fn a_streamed_compaction_starts_empty_and_says_its_summary_in_a_delta() {
    let h = sim().await;
    let beta = Some("compact-2026-09-04");
    let talk = json!([{"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"}]);
    let (_, whole) = post(&h, &compaction_request(talk.clone()), beta).await;
    let block = whole["content"][0].clone();
    let mut streamed = compaction_request(talk);
    streamed["stream"] = json!(true);
    let (status, text) = post(&h, &streamed, beta).await;
    assert_eq!(status, 200, "{text}");
    let text = text.as_str().expect("an event stream");
    let data: Vec<String> = muninn_anthropic::sse::SseDecoder::new()
        .push(text.as_bytes())
        .unwrap()
        .into_iter()
        .map(|f| f.data)
        .collect();
    let events: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let of_block: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("content_block"))
        .collect();
    assert_eq!(
        of_block,
        [
            &json!({"type": "content_block_start", "index": 0, "content_block":
                {"type": "compaction", "content": null, "signature": block["signature"]}}),
            &json!({"type": "content_block_delta", "index": 0, "delta":
                {"type": "compaction_delta", "content": block["content"]}}),
            &json!({"type": "content_block_stop", "index": 0}),
        ]
    );
    let (assembled, _, _) = muninn_anthropic::client::assemble(&data).unwrap();
    assert_eq!(
        serde_json::to_value(&assembled.content).unwrap(),
        json!([block])
    );
}

/// A compaction request over `messages`.
fn compaction_request(messages: Value) -> Value {
    json!({"model": MODEL, "max_tokens": 256, "messages": messages,
        "compaction": {"type": "summarize"}})
}

/// The compaction `block` sent back as an assistant turn, then a user turn.
fn sent_back(block: Value) -> Value {
    json!([{"role": "assistant", "content": [block]},
    {"role": "user", "content": "three"}])
}

/// Compaction requests the API refuses, given a conversation (`talk`) and the `block` its
/// compaction answered: each with the beta header it is sent with and what the refusal says.
fn refused_compactions(
    talk: &Value,
    block: &Value,
    beta: Option<&'static str>,
) -> Vec<(Value, Option<&'static str>, &'static str)> {
    let mut context_managed = compaction_request(talk.clone());
    context_managed["context_management"] = json!({"edits": []});
    let mut forged = block.clone();
    forged["signature"] = json!("not-ours");
    let mut other = block.clone();
    other["content"] = json!("another summary");
    let open = json!([{"role": "user", "content": "one"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]}]);
    vec![
        (
            compaction_request(talk.clone()),
            None,
            "requires the anthropic-beta header",
        ),
        (
            context_managed,
            beta,
            "cannot be combined with context_management",
        ),
        (compaction_request(open), beta, "toolu_1 is still open"),
        (
            compaction_request(json!([{"role": "assistant", "content": [block.clone()]}])),
            beta,
            "compaction_nothing_to_summarize",
        ),
        (
            compaction_request(json!([{"role": "user", "content": [block.clone()]}])),
            beta,
            "compaction_block_misplaced",
        ),
        (
            compaction_request(sent_back(forged)),
            beta,
            "compaction_signature_invalid",
        ),
        (
            compaction_request(sent_back(other)),
            beta,
            "compaction_content_mismatch",
        ),
    ]
}

/// A tool loop of `rounds` tool uses: each a call asked for in text, then its result.
async fn tool_rounds(b: &mut AnthropicBackend, rounds: usize) -> Vec<muninn_backend::TurnOutcome> {
    let mut out = Vec::new();
    for round in 0..rounds {
        let call = b
            .turn(TurnInput::text(format!(
                "please use tool0 for step {round}"
            )))
            .await
            .unwrap();
        let id = call.tool_calls[0].id.clone();
        out.push(call);
        let result = "result line of a long listing. ".repeat(60);
        out.push(
            b.turn(TurnInput {
                parts: vec![InputPart::ToolResult {
                    tool_use_id: id,
                    content: format!("{round}: {result}"),
                    is_error: false,
                }],
                safe_to_repeat: false,
            })
            .await
            .unwrap(),
        );
    }
    out
}

/// Tool-result clearing as the `mask` action: the provider clears all but the last tool use's
/// result; the backend records the applied edit and predicted the cleared prompt's usage
/// exactly; and `muninn_core::mask` prices the clearing request as the simulator billed it —
/// a read up to the clear, a write from it on.
#[tokio::test]
async fn a_tool_result_clear_is_priced_as_the_simulator_bills_it() {
    let h = sim().await;
    let clear = ClearToolUses {
        trigger: Some(EditAmount::tokens(1_000)),
        keep: Some(EditAmount::tool_uses(1)),
        clear_at_least: Some(EditAmount::tokens(200)),
        ..ClearToolUses::default()
    };
    let mut b = backend_with(
        &h,
        ContextTools {
            clear_tool_uses: Some(clear),
            ..ContextTools::default()
        },
    );
    b.start(spec(1)).await.unwrap();
    let outcomes = tool_rounds(&mut b, 3).await;
    let edited: Vec<(usize, &TurnEvent)> = outcomes
        .iter()
        .enumerate()
        .flat_map(|(i, o)| o.events.iter().map(move |e| (i, e)))
        .filter(|(_, e)| matches!(e, TurnEvent::ContextEdited { .. }))
        .collect();
    assert!(!edited.is_empty(), "{outcomes:#?}");
    for o in &outcomes {
        // Predicted from the prompt as the provider read it: no shortfall, exact usage.
        assert_eq!(o.predicted, Some(o.usage), "{:?}", o.events);
    }
    // The first clearing request, priced by the core's mask model.
    let (first, event) = edited[0];
    let TurnEvent::ContextEdited {
        cleared_input_tokens,
        kept_tokens: Some(kept),
        ..
    } = event
    else {
        panic!("{event:?}")
    };
    let records = message_records(&h);
    let sent: MessagesRequest = serde_json::from_value(records[first].body.clone()).unwrap();
    let uncleared = shape(&records[first].body).unwrap();
    let (read, _) = apply_edits(&sent).unwrap();
    let cleared = shape(&serde_json::to_value(&read).unwrap()).unwrap();
    assert_eq!(*kept, kept_tokens(&uncleared, &cleared));
    let cached_before_clear = cached_up_to(&records[..first], *kept);
    let masked = MaskedRequest {
        uncleared_tokens: uncleared.total_tokens,
        kept_tokens: *kept,
        cleared_tokens: *cleared_input_tokens,
        cached_before_clear,
        ttl: Ttl::FiveMinutes,
        output: outcomes[first].usage.output,
    };
    let billed = records[first].usage.unwrap();
    assert_eq!(masked_usage(&masked), billed);
    assert_eq!(cost(&masked_usage(&masked)), cost(&billed));
    // A clear breaks the cache: it wrote more than appending would have.
    let previous = outcomes[first - 1].usage.prompt();
    let price = PriceTable::embedded().model(MODEL).unwrap().clone();
    let n = mask_break_even(&masked, previous, &price).unwrap();
    println!(
        "mask: uncleared {} tokens, kept {kept}, cleared {cleared_input_tokens}, cached before the clear {cached_before_clear}; billed {billed:?} = {} µ$; model {} µ$; pays back after {n} warm requests",
        masked.uncleared_tokens,
        cost(&billed).0,
        cost(&masked_usage(&masked)).0
    );
    assert!(n > 0, "a clear is never free at once here");
}

/// The decider's `mask` on the wire ([`Backend::turn_cleared`]): one turn carries a clear that
/// applies at any size, billed by the simulator exactly as `muninn_core::mask::masked_usage`
/// prices it; the session then goes on from the cleared history — the next turn sends the
/// placeholders itself, carries no edit, and reads the whole prefix the clear wrote.
#[tokio::test]
async fn a_decided_clear_is_one_turn_and_the_session_goes_on_cleared() {
    use muninn_anthropic::context::CLEARED_PLACEHOLDER;
    let h = sim().await;
    let mut b = backend_with(&h, ContextTools::default());
    assert!(b.can_clear_tool_results());
    b.start(spec(1)).await.unwrap();
    let rounds = tool_rounds(&mut b, 3).await;
    assert!(
        rounds
            .iter()
            .flat_map(|o| &o.events)
            .all(|e| !matches!(e, TurnEvent::ContextEdited { .. })),
        "nothing is cleared unless decided"
    );
    let masked = b
        .turn_cleared(TurnInput::text("now summarise the steps"), 1)
        .await
        .unwrap();
    let Some(TurnEvent::ContextEdited {
        cleared_input_tokens,
        cleared_tool_uses,
        kept_tokens: Some(kept),
        ..
    }) = masked
        .events
        .iter()
        .find(|e| matches!(e, TurnEvent::ContextEdited { .. }))
    else {
        panic!("{:?}", masked.events)
    };
    assert_eq!(*cleared_tool_uses, 2, "all but the latest use");
    assert_eq!(masked.predicted, Some(masked.usage));
    let records = message_records(&h);
    let at = records.len() - 1;
    let billed = records[at].usage.unwrap();
    assert_eq!(masked.usage, billed);
    let cached_before_clear = cached_up_to(&records[..at], *kept);
    let request = MaskedRequest {
        uncleared_tokens: shape(&records[at].body).unwrap().total_tokens,
        kept_tokens: *kept,
        cleared_tokens: *cleared_input_tokens,
        cached_before_clear,
        ttl: Ttl::FiveMinutes,
        output: masked.usage.output,
    };
    assert_eq!(masked_usage(&request), billed);

    let next = b.turn(TurnInput::text("thanks")).await.unwrap();
    let body = &h
        .sim
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/v1/messages")
        .unwrap()
        .body;
    assert!(body.get("context_management").is_none(), "{body}");
    assert_eq!(
        body.to_string().matches(CLEARED_PLACEHOLDER).count(),
        2,
        "the cleared results are sent as cleared"
    );
    assert_eq!(next.predicted, Some(next.usage));
    assert_eq!(
        next.usage.cache_read,
        masked.usage.cache_read + masked.usage.written(),
        "the next turn reads everything the clear wrote"
    );
}

/// The longest prefix the `earlier` requests cached (at a breakpoint) that ends at or before
/// `kept` tokens: what a clear that keeps `kept` tokens can still read.
fn cached_up_to(earlier: &[muninn_sim::sim::RecordedRequest], kept: u64) -> u64 {
    earlier
        .iter()
        .flat_map(|r| shape(&r.body).unwrap().checkpoints)
        .filter(|c| c.breakpoint.is_some() && c.tokens <= kept)
        .map(|c| c.tokens)
        .max()
        .unwrap_or(0)
}

/// A tool loop of `rounds` calls after an answer whose text carries `citations` (a field the
/// typed request does not name), with a breakpoint on the user message after it, and a
/// tool-result clear that keeps the last 2 calls.
fn cited_loop(system: &str, rounds: usize) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": "look the release date up"}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "It ships in March.",
            "citations": [{"type": "web_search_result_location", "url": "https://example.com/r",
                           "title": "Release notes", "cited_text": "The release ships in March.",
                           "encrypted_index": "ZW5jcnlwdGVk"}]}]}),
        json!({"role": "user", "content": [{"type": "text", "text": "thanks; now use the tool",
            "cache_control": {"type": "ephemeral"}}]}),
    ];
    for i in 1..=rounds {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "tool0", "input": {"n": i}}]}));
        let result = format!("result {i}: {}", "lorem ipsum dolor ".repeat(200));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": result}]}));
    }
    let last = messages.len() - 1;
    messages[last]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    json!({"model": "claude-opus-5-5", "max_tokens": 50,
           "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
           "tools": [{"name": "tool0", "description": "does thing 0", "input_schema": {"type": "object"}}],
           "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
               "trigger": {"type": "input_tokens", "value": 1000},
               "keep": {"type": "tool_uses", "value": 2}}]},
           "messages": messages})
}

/// The provider reads a cleared request as it was sent but for what the clear changed. The
/// simulator used to re-serialise its typed reading of the request whenever an edit applied,
/// which drops the fields it does not name (a text block's `citations`): every block from the
/// cited answer on was new to the cache, so the clear read only the system instead of up to the
/// breakpoint before the first cleared result.
#[tokio::test]
async fn a_clear_bills_the_request_as_sent_but_for_the_cleared_results() {
    let h = sim().await;
    let betas = Some(muninn_anthropic::wire::CONTEXT_MANAGEMENT_BETA);
    let system = long_system("cited", 2);
    // Two calls: nothing to clear, the request is read as sent and cached to its breakpoints.
    let before = cited_loop(&system, 2);
    let first = h.sim.messages(&before, betas, 1, T0).unwrap();
    assert_eq!(first.context_management, None);
    // A third call clears the first call's result.
    let cleared = cited_loop(&system, 3);
    let answer = h.sim.messages(&cleared, betas, 2, T0).unwrap();
    assert!(answer.context_management.is_some());
    let mut expected = cleared.clone();
    expected["messages"][4]["content"][0]["content"] =
        json!(muninn_anthropic::context::CLEARED_PLACEHOLDER);
    let breakpoints: Vec<u64> = shape(&before)
        .unwrap()
        .checkpoints
        .iter()
        .filter(|c| c.breakpoint.is_some())
        .map(|c| c.tokens)
        .collect();
    assert_eq!(
        (answer.usage.prompt(), answer.usage.cache_read),
        (shape(&expected).unwrap().total_tokens, breakpoints[1]),
        "the prompt as sent, cleared; read up to the breakpoint after the cited answer"
    );
}
