//! The API as any HTTP client sees it: shapes, usage, errors, count_tokens, the admin routes.

use crate::support::{T0, long_system, recompute, sim};
use muninn_anthropic::sse::SseDecoder;
use muninn_anthropic::wire::StreamEvent;
use muninn_backend::schema;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};

struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    fn new(base: String) -> Http {
        muninn_anthropic::client::install_ring_provider();
        Http {
            client: reqwest::Client::new(),
            base,
        }
    }

    async fn post(
        &self,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut r = self
            .client
            .post(format!("{}{path}", self.base))
            .body(body.to_string());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.text().await.unwrap())
    }

    async fn api(&self, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, String) {
        self.post(
            path,
            &body.to_string(),
            &[
                ("x-api-key", "sk-test"),
                ("anthropic-version", "2023-06-01"),
            ],
        )
        .await
    }
}

fn request(system: &str, turns: &[&str], stream: bool) -> Value {
    let mut messages = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        if i > 0 {
            messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("Reply to turn {i}: '{}'", turns[i - 1])}]}));
        }
        messages.push(json!({"role": "user", "content": t}));
    }
    if let Some(Value::Object(last)) = messages.last_mut() {
        let text = last["content"].as_str().unwrap().to_string();
        last.insert(
            "content".into(),
            json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]),
        );
    }
    json!({"model": "claude-opus-5-5", "max_tokens": 256, "stream": stream,
           "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
           "messages": messages})
}

fn sse_events(body: &str) -> Vec<StreamEvent> {
    let mut d = SseDecoder::new();
    let frames = d.push(body.as_bytes()).unwrap();
    d.finish().unwrap();
    frames
        .iter()
        .map(|f| StreamEvent::parse(&f.data).unwrap())
        .collect()
}

#[tokio::test]
async fn streaming_and_not_report_the_cache_models_usage() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let system = long_system("api-test", 2);
    // Non-streaming first turn: a cold 1h write of the system, a 5m write of the tail.
    let (status, headers, body) = http
        .api("/v1/messages?beta=true", &request(&system, &["one"], false))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.get("request-id").is_some());
    let m: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(m["content"][0]["text"], json!("Reply to turn 1: 'one'"));
    assert_eq!(m["stop_reason"], json!("end_turn"));
    let u = &m["usage"];
    assert_eq!(u["cache_read_input_tokens"], json!(0));
    assert!(
        u["cache_creation"]["ephemeral_1h_input_tokens"]
            .as_u64()
            .unwrap()
            > 1000
    );
    // Streaming second turn: reads the first turn's prefix.
    let (status, headers, body) = http
        .api("/v1/messages", &request(&system, &["one", "two"], true))
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let events = sse_events(&body);
    let names: Vec<&str> = events.iter().map(StreamEvent::name).collect();
    assert_eq!(
        names,
        vec![
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let StreamEvent::MessageDelta { usage, .. } = &events[5] else {
        panic!()
    };
    let reported = usage.to_core();
    assert!(reported.cache_read > 1000);
    let records = h.sim.requests();
    assert_eq!(records.len(), 2);
    assert!(
        records
            .iter()
            .all(|r| r.at_ms == T0 && r.auth == "x-api-key")
    );
    let expected = recompute(&records);
    assert_eq!(
        records.iter().map(|r| r.usage.unwrap()).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(reported, expected[1]);
}

/// How many of the simulator's requests reached the cache model (were answered with a usage).
fn answered(h: &muninn_sim::SimHandle) -> usize {
    h.sim
        .requests()
        .iter()
        .filter(|r| r.usage.is_some())
        .count()
}

/// A missing key or version header, a broken body, an unknown model, a missing field and an
/// unknown path: each refused with its status and the API's error shape, none answered.
#[tokio::test]
async fn errors_have_the_api_shape() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let ok = request("short", &["x"], false).to_string();
    type Case<'a> = (u16, &'a str, &'a str, String, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            401,
            "authentication_error",
            "x-api-key header is required",
            ok.clone(),
            vec![("anthropic-version", "2023-06-01")],
        ),
        (
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
            ok.clone(),
            vec![("authorization", "Bearer tok")],
        ),
        (
            400,
            "invalid_request_error",
            "invalid JSON body",
            "{\"model\":".to_string(),
            vec![("x-api-key", "k"), ("anthropic-version", "2023-06-01")],
        ),
        (
            404,
            "not_found_error",
            "model: claude-nonexistent-9",
            ok.replace("claude-opus-5-5", "claude-nonexistent-9"),
            vec![("x-api-key", "k"), ("anthropic-version", "2023-06-01")],
        ),
        (
            400,
            "invalid_request_error",
            "messages: Field required",
            "{\"model\":\"claude-opus-5-5\",\"max_tokens\":5}".to_string(),
            vec![("x-api-key", "k"), ("anthropic-version", "2023-06-01")],
        ),
    ];
    for (status, kind, message, body, headers) in cases {
        let (s, _, text) = http.post("/v1/messages", &body, &headers).await;
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(s, status, "{text}");
        assert_eq!(e["type"], json!("error"));
        assert_eq!(e["error"]["type"], json!(kind));
        assert!(
            e["error"]["message"].as_str().unwrap().contains(message),
            "{text}"
        );
    }
    let (s, _, text) = http.post("/v1/nothing", "{}", &[]).await;
    assert_eq!(s, 404, "{text}");
    // Refused requests never touched the cache.
    assert_eq!(answered(&h), 0);
}

/// Five breakpoints, and 1h after 5m: the API's 400 wording, the offending block's field named
/// as the API names it.
#[tokio::test]
async fn breakpoints_the_api_refuses_are_refused_in_its_words() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let five: Vec<Value> = (0..5)
        .map(|i| json!({"type":"text","text":format!("b{i}"),"cache_control":{"type":"ephemeral"}}))
        .collect();
    let (s, _, text) = http.api("/v1/messages", &json!({"model":"claude-opus-5-5","max_tokens":5,"messages":[{"role":"user","content":five}]})).await;
    assert_eq!(s, 400);
    assert!(
        text.contains("A maximum of 4 blocks with cache_control may be provided. Found 5."),
        "{text}"
    );
    let (s, _, text) = http.api("/v1/messages", &json!({"model":"claude-opus-5-5","max_tokens":5,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]})).await;
    assert_eq!(s, 400);
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        e["error"]["message"],
        json!(
            "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."
        )
    );
    // The top-level marker (automatic caching) out of order is named as that field.
    let (s, _, text) = http.api("/v1/messages", &json!({"model":"claude-opus-5-5","max_tokens":5,"cache_control":{"type":"ephemeral","ttl":"1h"},"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"b"}]})).await;
    assert_eq!(s, 400);
    assert!(text.contains(r#""cache_control.ttl: a ttl='1h'"#), "{text}");
    assert_eq!(answered(&h), 0, "refused requests never touched the cache");
}

/// Tool results must answer the previous message's tool calls, and calls must be answered; a
/// call answered is accepted, and only it reaches the cache.
#[tokio::test]
async fn tool_results_must_answer_the_previous_calls() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let call = json!({"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]});
    let (s, _, text) = http.api("/v1/messages", &json!({"model":"claude-opus-5-5","max_tokens":5,"messages":[{"role":"user","content":"go"},call,{"role":"user","content":"no result"}]})).await;
    assert_eq!(s, 400);
    assert!(
        text.contains(
            "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"
        ),
        "{text}"
    );
    let (s, _, text) = http.api("/v1/messages", &json!({"model":"claude-opus-5-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}]})).await;
    assert_eq!(s, 400);
    assert!(
        text.contains("unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"),
        "{text}"
    );
    let (s, _, text) = http.api("/v1/messages", &json!({"model":"claude-opus-5-5","max_tokens":5,"messages":[{"role":"user","content":"go"},call,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]})).await;
    assert_eq!(s, 200, "{text}");
    // Refused requests never touched the cache.
    assert_eq!(answered(&h), 1);
}

#[tokio::test]
async fn count_tokens_is_the_prompt_total() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let body = json!({"model":"claude-opus-5-5","messages":[{"role":"user","content":"Hello, world!"}],"tools":[]});
    let (s, _, text) = http.api("/v1/messages/count_tokens?beta=true", &body).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"input_tokens": 6})
    );
}

/// A provider that ignores the 1h TTL (`--ignore-1h`) caches every breakpoint for 5 minutes,
/// so a 1h breakpoint after a 5m one is no longer out of order: `count_tokens` accepts the
/// prompt `/v1/messages` accepts, and counts what it bills.
#[tokio::test]
async fn count_tokens_ignores_the_1h_ttl_as_messages_does() {
    let h = crate::support::sim_with(muninn_sim::sim::SimConfig {
        frozen_at_ms: Some(T0),
        honour_1h: false,
        ..Default::default()
    })
    .await;
    let http = Http::new(h.base_url());
    let body = json!({"model":"claude-opus-5-5","max_tokens":5,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]});
    let (s, _, text) = http.api("/v1/messages/count_tokens", &body).await;
    assert_eq!(s, 200, "{text}");
    let counted = serde_json::from_str::<Value>(&text).unwrap()["input_tokens"].clone();
    let (s, _, text) = http.api("/v1/messages", &body).await;
    assert_eq!(s, 200, "{text}");
    let billed = h.sim.requests().last().unwrap().usage.unwrap();
    assert_eq!(counted, json!(billed.prompt()));
}

/// A refused count_tokens request is recorded as a refused messages request is: the error's
/// kind and message.
#[tokio::test]
async fn a_refused_count_tokens_is_recorded_with_its_kind() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let unknown = json!({"model":"claude-nonesuch","messages":[{"role":"user","content":"Hi"}]});
    for path in ["/v1/messages/count_tokens", "/v1/messages"] {
        let mut body = unknown.clone();
        body["max_tokens"] = json!(16);
        let (s, _, text) = http.api(path, &body).await;
        assert_eq!(s, 404, "{path}: {text}");
    }
    let errors: Vec<_> = h.sim.requests().into_iter().map(|r| r.error).collect();
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0], errors[1]);
    assert_eq!(
        errors[0].as_deref(),
        Some("not_found_error: model: claude-nonesuch")
    );
}

#[tokio::test]
async fn replies_cover_tools_structured_output_and_compaction() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let schema = json!({"type":"object","properties":{"answer":{"type":"string"},"score":{"type":"integer","maximum":10}},"required":["answer","score"]});
    let body = json!({"model":"claude-opus-5-5","max_tokens":500,"stream":true,
        "tools":[{"name":"StructuredOutput","description":"d","input_schema":schema}],
        "messages":[{"role":"user","content":"give me json"}]});
    let (_, _, text) = http.api("/v1/messages", &body).await;
    let (m, _, _) = muninn_anthropic::client::assemble(
        &SseDecoder::new()
            .push(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|f| f.data)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let muninn_anthropic::wire::ContentBlock::ToolUse { name, input, .. } = &m.content[0] else {
        panic!("{m:?}")
    };
    assert_eq!(name, "StructuredOutput");
    assert_eq!(schema::validate(&schema, input), Ok(()));
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));

    let compact = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n… Your entire response must be plain text: an <analysis> block followed by a <summary> block.";
    let body = json!({"model":"claude-opus-5-5","max_tokens":500,
        "messages":[{"role":"user","content":"fix the bug"},{"role":"assistant","content":"ok"},{"role":"user","content":compact}]});
    let (_, _, text) = http.api("/v1/messages", &body).await;
    let reply: Value = serde_json::from_str(&text).unwrap();
    let t = reply["content"][0]["text"].as_str().unwrap();
    assert!(
        t.starts_with("<analysis>")
            && t.contains("<summary>1. Primary Request and Intent: fix the bug"),
        "{t}"
    );

    // max_tokens cuts the reply.
    let body = json!({"model":"claude-opus-5-5","max_tokens":3,"messages":[{"role":"user","content":"a long question about many things"}]});
    let (_, _, text) = http.api("/v1/messages", &body).await;
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["stop_reason"], json!("max_tokens"));
    assert!(reply["usage"]["output_tokens"].as_u64().unwrap() <= 3);
}

#[tokio::test]
async fn admin_moves_the_clock_and_queues_faults() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let (s, _, text) = http
        .post("/admin/clock", "{\"advance_ms\":360000}", &[])
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"now_ms": T0 + 360_000})
    );
    let (s, _, _) = http.post("/admin/clock", "{\"advance_ms\":-5}", &[]).await;
    assert_eq!(s, 400);
    let (s, _, text) = http
        .post(
            "/admin/faults",
            "[{\"kind\":\"rate_limit\",\"retry_after_s\":2,\"times\":2},{\"kind\":\"overloaded\"}]",
            &[],
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let (s, headers, text) = http.api("/v1/messages", &request("x", &["y"], false)).await;
    assert_eq!((s, headers["retry-after"].to_str().unwrap()), (429, "2"));
    assert!(text.contains("rate_limit_error"));
    http.api("/v1/messages", &request("x", &["y"], false)).await;
    let (s, _, text) = http.api("/v1/messages", &request("x", &["y"], false)).await;
    assert_eq!(s, 529, "{text}");
    let (s, _, _) = http.api("/v1/messages", &request("x", &["y"], false)).await;
    assert_eq!(s, 200);
    let (s, _, _) = http
        .post("/admin/faults", "{\"kind\":\"nonsense\"}", &[])
        .await;
    assert_eq!(s, 400);
}

#[tokio::test]
async fn an_inflate_usage_fault_inflates_only_the_reported_cache_read() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let system = long_system("inflate", 2);
    let (s, _, text) = http
        .post(
            "/admin/faults",
            "{\"kind\":\"inflate_usage\",\"cache_read_tokens\":970000}",
            &[],
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let (s, _, body) = http
        .api("/v1/messages", &request(&system, &["one"], true))
        .await;
    assert_eq!(s, 200, "{body}");
    let StreamEvent::MessageDelta { usage, .. } = sse_events(&body)
        .into_iter()
        .find(|e| e.name() == "message_delta")
        .unwrap()
    else {
        panic!()
    };
    // The next request is reported as computed: the fault hit one request, and the cache
    // model's state is the real one (the second request reads what the first wrote).
    let (_, _, body) = http
        .api("/v1/messages", &request(&system, &["one", "two"], false))
        .await;
    let second: Value = serde_json::from_str(&body).unwrap();
    let records = h.sim.requests();
    let expected = recompute(&records);
    let mut inflated = expected[0];
    inflated.cache_read += 970_000;
    assert_eq!(usage.to_core(), inflated);
    assert_eq!(records[0].usage, Some(inflated));
    assert_eq!(
        second["usage"]["cache_read_input_tokens"].as_u64(),
        Some(expected[1].cache_read)
    );
    assert!(expected[1].cache_read > 1000);
}

/// A real streamed tool-use reply, decoded and assembled from arbitrary chunk boundaries, is
/// always the same message.
#[test]
fn a_sim_stream_assembles_the_same_from_any_chunks() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = rt.block_on(async {
        let h = sim().await;
        let http = Http::new(h.base_url());
        let req = json!({"model":"claude-opus-5-5","max_tokens":500,"stream":true,
            "tools":[{"name":"lookup","input_schema":{"type":"object","properties":{"word":{"type":"string","minLength":70},"tags":{"type":"array","items":{"enum":["a","ü"]},"minItems":3}}}}],
            "messages":[{"role":"user","content":"Please use lookup — ünïcode ✓"}]});
        http.api("/v1/messages", &req).await.2
    });
    let assemble = |chunks: &[&[u8]]| {
        let mut d = SseDecoder::new();
        let mut data = Vec::new();
        for c in chunks {
            data.extend(d.push(c).unwrap().into_iter().map(|f| f.data));
        }
        d.finish().unwrap();
        muninn_anthropic::client::assemble(&data).unwrap()
    };
    let bytes = body.as_bytes();
    let whole = assemble(&[bytes]);
    assert_eq!(whole.0.stop_reason.as_deref(), Some("tool_use"));
    proptest!(|(cuts in proptest::collection::vec(0usize..4096, 0..64))| {
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut last = 0;
        for p in points {
            chunks.push(&bytes[last..p]);
            last = p;
        }
        chunks.push(&bytes[last..]);
        prop_assert_eq!(assemble(&chunks), whole.clone());
    });
}

/// A short request changed by `patch`.
fn base_with(patch: &dyn Fn(&mut Value)) -> Value {
    let mut v = request("short", &["x"], false);
    patch(&mut v);
    v
}

/// The simulator refuses what the API refuses, in the API's shape: unknown top-level fields,
/// `max_tokens` past any model's output, sampling values out of range, a `system` role in
/// `messages` without the beta that allows it, an empty text block, a prompt past the model's
/// context window (and a body past 32 MB, below).
#[tokio::test]
async fn what_the_api_refuses_the_simulator_refuses() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let cases: Vec<(Value, &str)> = vec![
        (
            base_with(&|v| v["surprise"] = json!(1)),
            "surprise: Extra inputs are not permitted",
        ),
        (
            base_with(&|v| v["max_tokens"] = json!(1_000_000_000_000u64)),
            "max_tokens: 1000000000000 > 128000",
        ),
        (
            base_with(&|v| v["temperature"] = json!(5)),
            "temperature: Input should be less than or equal to 1",
        ),
        (
            base_with(&|v| v["top_p"] = json!(-0.5)),
            "top_p: Input should be less than or equal to 1",
        ),
        (
            base_with(&|v| {
                v["messages"]
                    .as_array_mut()
                    .unwrap()
                    .insert(0, json!({"role": "system", "content": "be brief"}))
            }),
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (
            base_with(&|v| {
                v["messages"][0]["content"] =
                    json!([{"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}])
            }),
            "messages.0: text content blocks must be non-empty",
        ),
        (
            base_with(&|v| {
                v["messages"][0]["content"] =
                    json!([{"type": "text", "text": "word ".repeat(1_100_000)}])
            }),
            "prompt is too long",
        ),
    ];
    for (body, message) in cases {
        let (status, _, text) = http.api("/v1/messages", &body).await;
        assert_eq!(status, 400, "{message}: {}", &text[..text.len().min(300)]);
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["type"], json!("invalid_request_error"));
        let got = e["error"]["message"].as_str().unwrap();
        assert!(got.contains(message), "{got} (wanted {message})");
    }
}

/// Within range everything is answered, and `system` messages are fine under their beta.
#[tokio::test]
async fn within_range_the_simulator_answers_and_system_turns_under_their_beta() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let fine = base_with(&|v| {
        v["temperature"] = json!(0.7);
        v["metadata"] = json!({"user_id": "u"});
    });
    assert_eq!(http.api("/v1/messages", &fine).await.0, 200);
    let system_turn = base_with(&|v| {
        v["messages"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"role": "system", "content": "be brief"}))
    });
    let (status, _, text) = http
        .post(
            "/v1/messages",
            &system_turn.to_string(),
            &[
                ("x-api-key", "sk-test"),
                ("anthropic-version", "2023-06-01"),
                (
                    "anthropic-beta",
                    "claude-code-20250219,per-turn-control-2026-07-01",
                ),
            ],
        )
        .await;
    assert_eq!(status, 200, "{text}");
}

/// A body past the API's 32 MB: 413, as JSON (not plain text).
#[tokio::test]
async fn a_body_past_32_mb_is_a_json_413() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(33 * 1024 * 1024));
    let (status, _, text) = http
        .post(
            "/v1/messages",
            &huge,
            &[
                ("x-api-key", "sk-test"),
                ("anthropic-version", "2023-06-01"),
            ],
        )
        .await;
    assert_eq!(status, 413);
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["type"], json!("request_too_large"));
}

/// `request` opted into cache diagnostics with `previous` as the message to compare with.
fn diagnosed(mut body: Value, previous: Option<&str>) -> Value {
    body["diagnostics"] = json!({ "previous_message_id": previous });
    body
}

#[tokio::test]
async fn cache_diagnostics_name_the_first_divergence_streaming_and_not() {
    let h = sim().await;
    let http = Http::new(h.base_url());
    let system = long_system("diagnosed", 2);
    let id2 = two_turns_that_do_not_diverge(&http, &system).await;
    let other_system = long_system("rewritten", 2);
    a_streamed_divergence_is_named_on_message_start(&http, &other_system, &id2).await;
    each_divergence_is_named(&http, &system, &id2).await;
    // Not opted in: no diagnostics, whatever changed.
    let plain = message(&post_diagnosing(&http, request(&other_system, &["x"], false)).await);
    assert_eq!(plain.get("diagnostics"), None);

    // The log records each diagnosis beside the simulator's own cause.
    let recorded: Vec<Option<&str>> = h
        .sim
        .requests()
        .iter()
        .map(|r| r.provider_miss.map(|p| p.reason.as_str()))
        .collect();
    assert_eq!(
        recorded,
        vec![
            None,
            Some("no_divergence"),
            Some("system_changed"),
            Some("tools_changed"),
            Some("messages_changed"),
            Some("model_changed"),
            Some("previous_message_not_found"),
            None,
        ]
    );
}

/// Posts `body` with the cache diagnosis beta; the reply's text, once it is a 200.
async fn post_diagnosing(http: &Http, body: Value) -> String {
    let beta = [
        ("x-api-key", "sk-test"),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "cache-diagnosis-2026-04-07"),
    ];
    let (status, _, text) = http.post("/v1/messages", &body.to_string(), &beta).await;
    assert_eq!(status, 200, "{text}");
    text
}

fn message(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// A first turn opts in with no previous message: nothing to compare, no diagnostics; the
/// second appends to it: no divergence, no diagnostics. Returns the second's id.
async fn two_turns_that_do_not_diverge(http: &Http, system: &str) -> String {
    let first =
        message(&post_diagnosing(http, diagnosed(request(system, &["one"], false), None)).await);
    assert_eq!(first.get("diagnostics"), None);
    let id1 = first["id"].as_str().unwrap().to_string();
    let second = message(
        &post_diagnosing(
            http,
            diagnosed(request(system, &["one", "two"], false), Some(&id1)),
        )
        .await,
    );
    assert_eq!(second.get("diagnostics"), None, "{second}");
    second["id"].as_str().unwrap().to_string()
}

/// Streaming, the diagnosis comes on `message_start`: a rewritten system prompt, with the
/// tokens it cost.
async fn a_streamed_divergence_is_named_on_message_start(
    http: &Http,
    other_system: &str,
    id2: &str,
) {
    let streamed = post_diagnosing(
        http,
        diagnosed(
            request(other_system, &["one", "two", "three"], true),
            Some(id2),
        ),
    )
    .await;
    let StreamEvent::MessageStart { message: start } = &sse_events(&streamed)[0] else {
        panic!("{streamed}")
    };
    let reason = start
        .diagnostics
        .as_ref()
        .unwrap()
        .cache_miss_reason
        .as_ref();
    assert_eq!(reason.map(|r| r.kind.as_str()), Some("system_changed"));
    assert!(reason.unwrap().cache_missed_input_tokens.unwrap() > 1_000);
}

/// Every other level, compared with the second turn: tools, messages, model, and a previous
/// message the API does not know.
async fn each_divergence_is_named(http: &Http, system: &str, id2: &str) {
    let mut with_tools = request(system, &["one", "two", "three"], false);
    with_tools["tools"] =
        json!([{"name": "look", "description": "d", "input_schema": {"type": "object"}}]);
    let mut other_model = request(system, &["one", "two", "three"], false);
    other_model["model"] = json!("claude-sonnet-4-5");
    let cases = [
        (with_tools, Some(id2), "tools_changed"),
        (
            request(system, &["uno", "two", "three"], false),
            Some(id2),
            "messages_changed",
        ),
        (other_model, Some(id2), "model_changed"),
        (
            request(system, &["one", "two", "three"], false),
            Some("msg_unknown"),
            "previous_message_not_found",
        ),
    ];
    for (body, previous, expected) in cases {
        let m = message(&post_diagnosing(http, diagnosed(body, previous)).await);
        assert_eq!(
            m["diagnostics"]["cache_miss_reason"]["type"],
            json!(expected),
            "{m}"
        );
    }
}
