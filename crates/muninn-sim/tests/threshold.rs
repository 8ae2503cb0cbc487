//! The provider's remaining context tools against the real `muninn-sim` server: threshold-mode
//! compaction (`compact_20260112`: nothing below the trigger; above it a signed block first and
//! both passes billed in `usage.iterations[]`, the top level the `message` pass's alone; a pause;
//! the block sent back read from the cache; a ledger row that bills the compaction) and thinking
//! clearing (`clear_thinking_20251015`, billed as the tool-result clear is), and what the API
//! refuses of either.

use crate::support::{T0, client, long_system, sim, sim_with};
use muninn_anthropic::context::kept_tokens;
use muninn_anthropic::prompt::shape;
use muninn_anthropic::wire::{MessagesRequest, Usage as WireUsage};
use muninn_backend::clock::RecordingSleeper;
use muninn_core::cache::Ttl;
use muninn_core::mask::{MaskedRequest, masked_usage};
use muninn_core::trace::Usage;
use muninn_sim::sim::SimConfig;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const MODEL: &str = "claude-opus-5-5";
const BOTH: &str = "compact-2026-01-12,context-management-2025-06-27";

use crate::ctxtools::post;

/// About `n` thousand tokens of user text, unique to `tag`.
fn long_text(tag: &str, n: usize) -> String {
    (0..n * 125).map(|i| format!("{tag}{i} says. ")).collect()
}

/// A conversation of about 60,000 tokens: a cached 2k system prompt, two long user messages,
/// the last one a breakpoint; `edit` is its one context edit.
fn long_talk(edit: Value) -> Value {
    json!({
        "model": MODEL, "max_tokens": 512,
        "system": [{"type": "text", "text": long_system("threshold", 2),
            "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": long_text("first", 52)},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": [{"type": "text", "text": long_text("second", 52),
                "cache_control": {"type": "ephemeral"}}]}
        ],
        "context_management": {"edits": [edit]}
    })
}

fn compact(trigger: u64, pause: bool) -> Value {
    json!({"type": "compact_20260112", "pause_after_compaction": pause,
        "trigger": {"type": "input_tokens", "value": trigger}})
}

fn iteration(usage: &Value, i: usize) -> Usage {
    let it = &usage["iterations"][i];
    Usage {
        input: it["input_tokens"].as_u64().unwrap(),
        cache_write_5m: it["cache_creation_input_tokens"].as_u64().unwrap(),
        cache_write_1h: 0,
        cache_read: it["cache_read_input_tokens"].as_u64().unwrap(),
        output: it["output_tokens"].as_u64().unwrap(),
    }
}

fn cost(usage: &Usage) -> muninn_core::money::MicroUsd {
    muninn_core::price::PriceTable::embedded()
        .model(MODEL)
        .unwrap()
        .cost(usage)
}

fn top_level(usage: &Value) -> Usage {
    serde_json::from_value::<WireUsage>(usage.clone())
        .unwrap()
        .top_level()
}

/// Below its trigger the edit does nothing; above it the reply starts with the signed summary,
/// the compaction pass (the whole prompt, the summary's output) and the message pass (the
/// system and the block, the answer's output) are both in `iterations[]`, the top level is the
/// message pass's alone, and the simulator bills both. Sending the block back continues from
/// the summary and reads the cache the message pass wrote.
#[tokio::test]
async fn a_threshold_compaction_summarises_answers_and_bills_both_passes() {
    let h = sim().await;
    let below = long_talk(compact(100_000, false));
    let prompt = shape(&below).unwrap().total_tokens;
    assert!((50_000..100_000).contains(&prompt), "{prompt}");
    let (status, quiet) = post(&h, &below, Some(BOTH)).await;
    assert_eq!(status, 200, "{quiet}");
    assert_eq!(quiet["content"][0]["type"], json!("text"), "{quiet}");
    assert_eq!(quiet["usage"].get("iterations"), None);
    assert_eq!(
        h.sim.requests().last().unwrap().usage,
        Some(top_level(&quiet["usage"]))
    );

    let above = long_talk(compact(50_000, false));
    let (status, reply) = post(&h, &above, Some("compact-2026-01-12")).await;
    assert_eq!(status, 200, "{reply}");
    let block = reply["content"][0].clone();
    assert_eq!(block["type"], json!("compaction"), "{reply}");
    assert!(block["content"].as_str().unwrap().contains("<summary>"));
    assert_eq!(reply["content"][1]["type"], json!("text"));
    assert_eq!(reply["stop_reason"], json!("end_turn"));
    let usage = &reply["usage"];
    assert_eq!(usage["iterations"][0]["type"], json!("compaction"));
    assert_eq!(usage["iterations"][1]["type"], json!("message"));
    let (compaction, message) = (iteration(usage, 0), iteration(usage, 1));
    // The compaction pass read the whole prompt the first request cached, and output the
    // summary.
    assert_eq!(compaction.cache_read, prompt);
    assert_eq!(compaction.prompt(), prompt);
    let summary = serde_json::from_value(block.clone()).unwrap();
    assert_eq!(
        compaction.output,
        muninn_sim::reply::output_tokens(&[summary])
    );
    // The message pass read the system and the block, the conversation's breakpoint moved to
    // the block.
    let mut compacted_block = block.clone();
    compacted_block["cache_control"] = json!({"type": "ephemeral"});
    let mut compacted = above.clone();
    compacted["messages"] = json!([{"role": "assistant", "content": [compacted_block]}]);
    let compacted = shape(&compacted).unwrap();
    assert_eq!(message.prompt(), compacted.total_tokens);
    assert_eq!(message.cache_read, compacted.checkpoints[0].tokens);
    assert_eq!(message.input, 0);
    // The top level is the message pass's alone; the bill is both.
    assert_eq!(top_level(usage), message);
    let mut billed = message;
    billed.add(&compaction);
    assert_eq!(h.sim.requests().last().unwrap().usage, Some(billed));
    println!(
        "threshold compaction of {prompt} tokens: compaction {compaction:?}, message {message:?}; top level {} µ$, billed {} µ$",
        cost(&message).0,
        cost(&billed).0
    );

    // The block sent back: what came before is not read, the compacted prefix is.
    let mut next = above.clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": reply["content"].clone()}));
    messages.push(
        json!({"role": "user", "content": [{"type": "text", "text": "and then?",
        "cache_control": {"type": "ephemeral"}}]}),
    );
    let (status, then) = post(&h, &next, Some("compact-2026-01-12")).await;
    assert_eq!(status, 200, "{then}");
    assert_eq!(
        then["content"][0]["type"],
        json!("text"),
        "below the trigger now"
    );
    assert_eq!(then["usage"].get("iterations"), None);
    assert_eq!(
        top_level(&then["usage"]).cache_read,
        message.cache_read + message.written()
    );
}

/// `pause_after_compaction`: the reply is the block alone with `stop_reason: "compaction"`,
/// billed as an on-demand compaction (top level 0, one `compaction` entry); the block sent back
/// alone continues from the summary.
#[tokio::test]
async fn a_paused_threshold_compaction_stops_at_the_block() {
    let h = sim().await;
    let body = long_talk(compact(50_000, true));
    let (status, reply) = post(&h, &body, Some("compact-2026-01-12")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["stop_reason"], json!("compaction"));
    let content = reply["content"].as_array().unwrap();
    assert_eq!(content.len(), 1);
    assert_eq!(content[0]["type"], json!("compaction"));
    assert_eq!(top_level(&reply["usage"]), Usage::default());
    assert_eq!(reply["usage"]["iterations"].as_array().unwrap().len(), 1);
    let compaction = iteration(&reply["usage"], 0);
    assert_eq!(compaction.prompt(), shape(&body).unwrap().total_tokens);
    assert_eq!(h.sim.requests().last().unwrap().usage, Some(compaction));

    let mut next = body.clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content.clone()}));
    messages.push(json!({"role": "user", "content": "go on"}));
    let (status, then) = post(&h, &next, Some("compact-2026-01-12")).await;
    assert_eq!(status, 200, "{then}");
    assert_eq!(then["stop_reason"], json!("end_turn"));
    assert_eq!(then["usage"].get("iterations"), None);
    // Only the system was cached before the block (the paused request never read the block).
    let system = shape(&body).unwrap().checkpoints[0].tokens;
    assert_eq!(top_level(&then["usage"]).cache_read, system);
}

/// Every `cache_control` of `body` with `ttl: "1h"`.
fn one_hour(mut body: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(fields) => {
                if let Some(Value::Object(cc)) = fields.get_mut("cache_control") {
                    cc.insert("ttl".to_string(), json!("1h"));
                }
                fields.values_mut().for_each(walk);
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut body);
    body
}

/// A provider that ignores `ttl: "1h"` caches both passes of a threshold compaction for 5
/// minutes: the message pass (whose block carries the conversation's 1h breakpoint) writes
/// nothing at 1h, and the whole request is billed as the same request with 5m breakpoints is
/// by a provider that honours 1h.
#[tokio::test]
async fn an_ignored_1h_ttl_is_ignored_in_both_passes_of_a_threshold_compaction() {
    let body = long_talk(compact(50_000, false));
    let hour = one_hour(body.clone());
    assert!(hour.to_string().contains(r#""ttl":"1h""#));
    let ignoring = sim_with(SimConfig {
        frozen_at_ms: Some(T0),
        honour_1h: false,
        ..Default::default()
    })
    .await;
    let (status, reply) = post(&ignoring, &hour, Some("compact-2026-01-12")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["usage"]["iterations"][1]["type"], json!("message"));
    let billed = ignoring.sim.requests().last().unwrap().usage.unwrap();
    assert_eq!(billed.cache_write_1h, 0, "{billed:?}");

    let honouring = sim().await;
    let (status, five) = post(&honouring, &body, Some("compact-2026-01-12")).await;
    assert_eq!(status, 200, "{five}");
    assert_eq!(honouring.sim.requests().last().unwrap().usage, Some(billed));
    assert!(
        billed.cache_write_5m > 0 && billed.cache_read > 0,
        "{billed:?}"
    );
}

/// The crate's own client, streaming: the ledger row of a threshold-compacted request (what
/// `Usage::to_core` records) is what the simulator billed, compaction included — the top level
/// alone would under-count it by the compaction pass.
#[tokio::test]
async fn a_ledger_row_of_a_threshold_compaction_bills_the_compaction() {
    let h = sim().await;
    let mut body = long_talk(compact(50_000, false));
    body["stream"] = json!(true);
    let request: MessagesRequest = serde_json::from_value(body).unwrap();
    let done = client(&h, &RecordingSleeper::default(), 0)
        .messages(&request, true)
        .await
        .unwrap();
    let sent = h.sim.requests().last().unwrap().clone();
    assert!(
        sent.anthropic_beta
            .as_deref()
            .is_some_and(|b| b.contains("compact-2026-01-12"))
    );
    assert!(matches!(
        done.response.content[0],
        muninn_anthropic::wire::ContentBlock::Compaction { .. }
    ));
    let row = done.response.usage.to_core();
    let top = done.response.usage.top_level();
    assert_eq!(Some(row), sent.usage);
    assert!(row.prompt() > top.prompt() + 50_000, "{row:?} vs {top:?}");
    assert_eq!(done.raw_usage["iterations"][1]["type"], json!("message"));
}

/// Three assistant turns with thinking, the last user message a breakpoint.
fn thinking_talk(edit: Option<Value>) -> Value {
    let turn = |n: usize| {
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": long_text(&format!("thought{n}-"), 1),
                "signature": format!("sig{n}")},
            {"type": "text", "text": format!("answer {n}")}
        ]})
    };
    let mut body = json!({
        "model": MODEL, "max_tokens": 512,
        "thinking": {"type": "enabled", "budget_tokens": 256},
        "system": [{"type": "text", "text": long_system("thinker", 2),
            "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "one"}, turn(1),
            {"role": "user", "content": "two"}, turn(2),
            {"role": "user", "content": "three"}, turn(3),
            {"role": "user", "content": [{"type": "text", "text": "four",
                "cache_control": {"type": "ephemeral"}}]}
        ]
    });
    if let Some(edit) = edit {
        body["context_management"] = json!({"edits": [edit]});
    }
    body
}

/// `clear_thinking_20251015` keeping one turn: the two older turns' thinking is dropped, the
/// applied edit says so with the tokens freed, and the bill is the tool-result clear's — a read
/// up to the first dropped block, a write from it on (`muninn_core::mask::masked_usage`).
/// `keep: "all"` clears nothing and reads the whole cached prompt.
#[tokio::test]
async fn a_thinking_clear_reports_its_turns_and_is_billed_as_a_rewrite() {
    let h = sim().await;
    let plain = thinking_talk(None);
    let (status, first) = post(&h, &plain, None).await;
    assert_eq!(status, 200, "{first}");
    let uncleared = shape(&plain).unwrap();
    let edit = json!({"type": "clear_thinking_20251015",
        "keep": {"type": "thinking_turns", "value": 1}});
    let (status, reply) = post(
        &h,
        &thinking_talk(Some(edit)),
        Some("context-management-2025-06-27"),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    // The prompt as the provider read it, cleared by hand.
    let mut by_hand = plain.clone();
    for i in [1, 3] {
        by_hand["messages"][i]["content"]
            .as_array_mut()
            .unwrap()
            .remove(0);
    }
    let cleared = shape(&by_hand).unwrap();
    let freed = uncleared.total_tokens - cleared.total_tokens;
    assert!(freed > 1_000, "{freed}");
    assert_eq!(
        reply["context_management"]["applied_edits"],
        json!([{"type": "clear_thinking_20251015", "cleared_thinking_turns": 2,
            "cleared_input_tokens": freed}])
    );
    let kept = kept_tokens(&uncleared, &cleared);
    let system = uncleared.checkpoints[0].tokens;
    assert!(kept >= system, "the clear starts after the system prompt");
    let billed = top_level(&reply["usage"]);
    let masked = MaskedRequest {
        uncleared_tokens: uncleared.total_tokens,
        kept_tokens: kept,
        cleared_tokens: freed,
        cached_before_clear: system,
        ttl: Ttl::FiveMinutes,
        output: billed.output,
    };
    assert_eq!(masked_usage(&masked), billed);
    assert_eq!(billed.cache_read, system);
    assert_eq!(h.sim.requests().last().unwrap().usage, Some(billed));
    println!(
        "thinking clear: freed {freed} of {} tokens (kept {kept}), billed {billed:?} = {} µ$",
        uncleared.total_tokens,
        cost(&billed).0
    );

    // Keeping all of it clears nothing: the first request's cache is read whole.
    let all = json!({"type": "clear_thinking_20251015", "keep": "all"});
    let (status, kept_all) = post(
        &h,
        &thinking_talk(Some(all)),
        Some("context-management-2025-06-27"),
    )
    .await;
    assert_eq!(status, 200, "{kept_all}");
    assert_eq!(kept_all.get("context_management"), None);
    assert_eq!(
        top_level(&kept_all["usage"]).cache_read,
        uncleared.total_tokens
    );
}

/// What the API refuses of these edits, the simulator refuses, naming the field: each edit
/// without its beta, a trigger below 50,000 or not in input tokens, thinking clearing not
/// listed first or with another `keep`, and a top-level compaction with a threshold one. A
/// threshold compaction needs its own beta only.
#[tokio::test]
async fn what_the_api_refuses_of_these_edits_the_simulator_refuses() {
    let h = sim().await;
    let talk = json!([{"role": "user", "content": "one"}]);
    let with = |edits: Value| {
        json!({"model": MODEL, "max_tokens": 64, "messages": talk,
            "context_management": {"edits": edits}})
    };
    let thinking = json!({"type": "clear_thinking_20251015"});
    let tools = json!({"type": "clear_tool_uses_20250919"});
    let mut on_demand = with(json!([compact(60_000, false)]));
    on_demand["compaction"] = json!({"type": "summarize"});
    let cases: Vec<(Value, Option<&str>, &str)> = vec![
        (
            with(json!([compact(60_000, false)])),
            Some("context-management-2025-06-27"),
            "context_management.edits.0: requires the anthropic-beta header compact-2026-01-12",
        ),
        (
            with(json!([thinking.clone()])),
            Some("compact-2026-01-12"),
            "context_management.edits.0: requires the anthropic-beta header context-management-2025-06-27",
        ),
        (
            with(json!([compact(49_999, false)])),
            Some(BOTH),
            "context_management.edits.0.trigger.value: must be an integer of at least 50000",
        ),
        (
            with(json!([{"type": "compact_20260112",
                "trigger": {"type": "tool_uses", "value": 60_000}}])),
            Some(BOTH),
            "context_management.edits.0.trigger.type: Input should be 'input_tokens'",
        ),
        (
            with(json!([tools, thinking.clone()])),
            Some(BOTH),
            "context_management.edits.1: clear_thinking_20251015 must be the first edit",
        ),
        (
            with(json!([{"type": "clear_thinking_20251015", "keep": "some"}])),
            Some(BOTH),
            "context_management.edits.0.keep: Input should be 'all'",
        ),
        (
            with(json!([{"type": "clear_thinking_20251015",
                "keep": {"type": "tool_uses", "value": 1}}])),
            Some(BOTH),
            "context_management.edits.0.keep: Input should be 'all'",
        ),
        (
            on_demand,
            Some("compact-2026-09-04,compact-2026-01-12"),
            "cannot be combined with context_management",
        ),
    ];
    for (body, beta, expected) in cases {
        for stream in [false, true] {
            let mut body = body.clone();
            body["stream"] = json!(stream);
            let (status, reply) = post(&h, &body, beta).await;
            assert_eq!(status, 400, "{expected}: {reply}");
            let said = format!("{} {}", reply["error"]["type"], reply["error"]["message"]);
            assert!(said.contains(expected), "{expected}: {said}");
        }
    }
    // Accepted: a threshold compaction with its own beta alone, and thinking clearing first
    // with a tool-result clear after it.
    for (body, beta) in [
        (with(json!([compact(60_000, false)])), "compact-2026-01-12"),
        (
            with(json!([thinking, {"type": "clear_tool_uses_20250919"},
                compact(50_000, true)])),
            BOTH,
        ),
    ] {
        let (status, reply) = post(&h, &body, Some(beta)).await;
        assert_eq!(status, 200, "{body}: {reply}");
    }
}
