//! The request-to-checkpoints mapping: what counts as the same prefix, and the breakpoints.

use muninn_anthropic::prompt::{ShapeError, shape};
use muninn_core::cache::{CacheRules, CacheState, Ttl};
use muninn_core::tokenize::count;
use serde_json::{Value, json};

fn req(messages: Value) -> Value {
    json!({"model": "m", "max_tokens": 10, "system": [{"type":"text","text":"You are X."},{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}], "tools": [{"name":"t","input_schema":{"type":"object"}}], "messages": messages})
}

#[test]
fn blocks_in_order_with_tokens_and_breakpoints() {
    let s = shape(&req(json!([{"role":"user","content":"hello world"}]))).unwrap();
    assert_eq!(s.checkpoints.len(), 4);
    let tool_tokens = count(r#"{"input_schema":{"type":"object"},"name":"t"}"#);
    let tokens: Vec<u64> = s.checkpoints.iter().map(|c| c.tokens).collect();
    assert_eq!(
        tokens,
        vec![
            tool_tokens,
            tool_tokens + count("You are X."),
            tool_tokens + count("You are X.") + count("Be brief."),
            tool_tokens + count("You are X.") + count("Be brief.") + count("hello world")
        ]
    );
    assert_eq!(s.total_tokens, tokens[3]);
    assert_eq!(s.breakpoints(), vec![Ttl::FiveMinutes]);
    assert_eq!(s.prefix_tokens(), tokens[2]);
}

#[test]
fn a_moved_marker_and_string_form_keep_the_prefix() {
    // The Claude Code CLI's one byte-level change between consecutive requests.
    let a = shape(&req(json!([{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]))).unwrap();
    let b = shape(&req(json!([{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yo"}]}]))).unwrap();
    assert_eq!(a.checkpoints[3].fingerprint, b.checkpoints[3].fingerprint);
    // Key order does not matter.
    let c = shape(&req(
        json!([{"content":[{"text":"hi","type":"text"}],"role":"user"}]),
    ))
    .unwrap();
    assert_eq!(a.checkpoints[3].fingerprint, c.checkpoints[3].fingerprint);
    // The role does.
    let d = shape(&req(json!([{"role":"assistant","content":"hi"}]))).unwrap();
    assert_ne!(a.checkpoints[3].fingerprint, d.checkpoints[3].fingerprint);
}

#[test]
fn tool_choice_invalidates_messages_only() {
    let mut a = req(json!([{"role":"user","content":"hi"}]));
    let b = shape(&a).unwrap();
    a["tool_choice"] = json!({"type":"any"});
    let c = shape(&a).unwrap();
    assert_eq!(b.checkpoints[2].fingerprint, c.checkpoints[2].fingerprint);
    assert_ne!(b.checkpoints[3].fingerprint, c.checkpoints[3].fingerprint);
}

/// The reference: `output_config.effort` invalidates the messages' cache (like `thinking`), not
/// the tools' or the system's; a request without it keeps the fingerprints it always had.
#[test]
fn effort_invalidates_messages_only() {
    let mut a = req(json!([{"role":"user","content":"hi"}]));
    let none = shape(&a).unwrap();
    a["output_config"] = json!({"effort":"medium"});
    let medium = shape(&a).unwrap();
    a["output_config"] = json!({"effort":"high"});
    let high = shape(&a).unwrap();
    assert_eq!(
        medium.checkpoints[2].fingerprint,
        high.checkpoints[2].fingerprint
    );
    assert_ne!(
        medium.checkpoints[3].fingerprint,
        high.checkpoints[3].fingerprint
    );
    assert_eq!(
        none.checkpoints[2].fingerprint,
        medium.checkpoints[2].fingerprint
    );
    // Another `output_config` field leaves the prefix as it was.
    a["output_config"] = json!({"effort":"high","format":{"type":"json_schema","schema":{}}});
    let formatted = shape(&a).unwrap();
    assert_eq!(
        high.checkpoints[3].fingerprint,
        formatted.checkpoints[3].fingerprint
    );
}

#[test]
fn automatic_caching_marks_the_last_block() {
    let mut a = req(json!([{"role":"user","content":"hi"}]));
    a["cache_control"] = json!({"type":"ephemeral","ttl":"1h"});
    let s = shape(&a).unwrap();
    assert_eq!(s.checkpoints[3].breakpoint, Some(Ttl::OneHour));
    // 1h after the system's 5m: the cache model refuses it with the API's wording.
    let err = CacheState::new()
        .predict(&s.prompt(), 0, 0, &CacheRules::default())
        .unwrap_err();
    assert!(err.to_string().contains("ttl='1h'"), "{err}");
}

#[test]
fn bad_requests_name_the_field() {
    assert_eq!(shape(&json!([])), Err(ShapeError::NotAnObject));
    assert_eq!(
        shape(&json!({"messages": []})),
        Err(ShapeError::Missing("model"))
    );
    let e = shape(&req(json!([{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"30m"}}]}]))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'"
    );
    let e = shape(&req(json!([{"role":"user","content":5}]))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "messages.0.content: Input should be a string or a list"
    );
}

#[test]
fn divergence_is_named_at_the_first_level_that_differs() {
    use muninn_anthropic::prompt::diverge;
    use muninn_core::miss::Level;
    let before = shape(&req(json!([{"role":"user","content":"hello world"}]))).unwrap();
    assert_eq!((before.tool_blocks, before.system_blocks), (1, 2));
    // Appending (a moved marker included) is no divergence.
    let appended = shape(&req(json!([
        {"role":"user","content":[{"type":"text","text":"hello world"}]},
        {"role":"assistant","content":"hi"},
        {"role":"user","content":[{"type":"text","text":"more","cache_control":{"type":"ephemeral"}}]}
    ])))
    .unwrap();
    assert_eq!(diverge(&before, &appended), None);
    let tool = before.checkpoints[0].tokens;
    let system = before.checkpoints[2].tokens;
    // A rewritten message: the history past the system is missed.
    let rewritten = shape(&req(json!([{"role":"user","content":"hello there"}]))).unwrap();
    assert_eq!(
        diverge(&before, &rewritten),
        Some((Level::Messages, before.total_tokens - system))
    );
    // A changed system block: everything past the tools.
    let mut body = req(json!([{"role":"user","content":"hello world"}]));
    body["system"][0]["text"] = json!("You are Y.");
    let resystemed = shape(&body).unwrap();
    assert_eq!(
        diverge(&before, &resystemed),
        Some((Level::System, before.total_tokens - tool))
    );
    // An added tool, even one appended after the old ones: the tools changed, whatever follows.
    let mut body = req(json!([{"role":"user","content":"hello world"}]));
    body["tools"] = json!([{"name":"t","input_schema":{"type":"object"}}, {"name":"u","input_schema":{"type":"object"}}]);
    assert_eq!(
        diverge(&before, &shape(&body).unwrap()).map(|d| d.0),
        Some(Level::Tools)
    );
    // Another model, first of all.
    let mut body = req(json!([{"role":"user","content":"hello world"}]));
    body["model"] = json!("n");
    body["system"][0]["text"] = json!("You are Y.");
    assert_eq!(
        diverge(&before, &shape(&body).unwrap()),
        Some((Level::Model, before.total_tokens))
    );
}

/// Block indices as `shape` numbers them, named as the API names the fields.
#[test]
fn block_paths_follow_the_shapes_numbering() {
    use muninn_anthropic::prompt::block_path;
    let body = json!({"model": "m", "tools": [{"name": "a"}, {"name": "b"}], "system": "S",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": []},
                     {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]});
    let paths: Vec<Option<String>> = (0..7).map(|i| block_path(&body, i)).collect();
    let expected = [
        Some("tools.0"),
        Some("tools.1"),
        Some("system"),
        Some("messages.0.content"),
        Some("messages.2.content.0"),
        Some("messages.2.content.1"),
        None,
    ];
    assert_eq!(paths, expected.map(|p| p.map(str::to_string)));
    assert_eq!(shape(&body).unwrap().checkpoints.len(), 6);
}

/// The memo a session's backend shapes with gives [`shape`]'s answer for every body — a history
/// that grows with its marker moved, a changed `tool_choice`, role, tool list, system prompt or
/// middle message, a history replaced, automatic caching, a refused body — and maps again only
/// what the last body did not hold.
#[test]
fn the_memo_shapes_as_shape_does_and_maps_only_what_is_new() {
    use muninn_anthropic::prompt::{ShapeMemo, shape_memoized};
    let marked = |text: &str| json!({"role":"user","content":[{"type":"text","text":text,"cache_control":{"type":"ephemeral"}}]});
    let plain =
        |role: &str, text: &str| json!({"role":role,"content":[{"type":"text","text":text}]});
    let first = req(json!([marked("one")]));
    let second = req(json!([
        plain("user", "one"),
        plain("assistant", "two"),
        marked("three")
    ]));
    let mut chose = second.clone();
    chose["tool_choice"] = json!({"type":"any"});
    let mut middle = second.clone();
    middle["messages"][1] = plain("assistant", "TWO");
    let mut role = second.clone();
    role["messages"][1] = plain("user", "two");
    let mut tools = second.clone();
    tools["tools"] = json!([{"name":"u","input_schema":{"type":"object"}}]);
    let mut system = second.clone();
    system["system"] = json!("You are Y.");
    let mut automatic = second.clone();
    automatic["cache_control"] = json!({"type":"ephemeral"});
    let mut no_tools = second.clone();
    no_tools.as_object_mut().unwrap().remove("tools");
    let mut null_tools = second.clone();
    null_tools["tools"] = Value::Null;
    let replaced = req(json!([plain("assistant", "summary"), marked("four")]));
    let refused = req(json!([plain("user", "one"), {"role":"user","content":5}]));
    let bodies = [
        &first,
        &second,
        &second,
        &chose,
        &second,
        &middle,
        &role,
        &tools,
        &system,
        &automatic,
        &no_tools,
        &null_tools,
        &replaced,
        &refused,
        &second,
    ];
    let mut memo = ShapeMemo::default();
    for (i, body) in bodies.into_iter().enumerate() {
        assert_eq!(shape_memoized(body, &mut memo), shape(body), "body {i}");
    }
    // A session's next request: the history as sent (marker moved off) and new messages. The
    // tools, the system prompt (2 blocks) and the unmarked history are reused; the message that
    // lost its marker and the new ones are mapped.
    let mut memo = ShapeMemo::default();
    shape_memoized(&second, &mut memo).unwrap();
    let third = req(json!([
        plain("user", "one"),
        plain("assistant", "two"),
        plain("user", "three"),
        plain("assistant", "four"),
        marked("five")
    ]));
    assert_eq!(shape_memoized(&third, &mut memo), shape(&third));
    assert_eq!(memo.reused_blocks(), 1 + 2 + 2);
}
