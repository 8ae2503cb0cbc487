//! The request-to-checkpoints mapping: what counts as the same prefix, and the breakpoints.

use muninn_anthropic::prompt::{ShapeError, shape};
use muninn_core::cache::{CacheRules, CacheState, Ttl};
use muninn_core::tokenize::count;
use proptest::prelude::*;
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
    // `0.0` and `-0.0` are equal as `Value`s but written, so counted and hashed, differently.
    let call = |x: f64| json!({"role":"assistant","content":[{"type":"tool_use","id":"c","name":"t","input":{"x":x}}]});
    let zero = req(json!([plain("user", "one"), call(0.0), marked("two")]));
    let negative_zero = req(json!([plain("user", "one"), call(-0.0), marked("two")]));
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
        &zero,
        &negative_zero,
        &zero,
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

/// An edit between two requests of a session, as [`memo_edit`] applies it; the indices are taken
/// modulo what the body holds.
#[derive(Debug, Clone)]
enum Edit {
    /// The next request: a new message, the marker moved to its last block (as the backend does).
    Append {
        role: bool,
        number: usize,
        tool: bool,
    },
    /// The same request again (a retry after a failure).
    Repeat,
    /// One block's marker put on or taken off: the same block with and without `cache_control`.
    ToggleMarker(usize),
    /// A message's role flipped: the same content in another section.
    FlipRole(usize),
    /// A message in the middle rewritten.
    Rewrite(usize, usize),
    /// A compaction: the messages up to one replaced by a summary.
    Compact(usize),
    /// A clear: each tool result's content replaced by a placeholder.
    Clear,
    /// Two messages swapped: the same JSON at other positions.
    Swap(usize, usize),
    /// A message's content written as a string or as one text block.
    StringForm(usize),
    /// The system prompt changed (string, list, or none).
    System(usize),
    /// The tool list changed (none, empty, one, two).
    Tools(usize),
    /// `tool_choice`, `thinking` or the effort set or removed.
    Salt(usize),
    /// Automatic caching (the top-level `cache_control`) on or off.
    Automatic,
    /// A fresh session: one new message.
    Fresh(usize),
    /// A body the mapping refuses, sent once.
    Refused(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let i = || 0usize..8;
    prop_oneof![
        4 => (any::<bool>(), 0usize..6, any::<bool>())
            .prop_map(|(role, number, tool)| Edit::Append { role, number, tool }),
        1 => Just(Edit::Repeat),
        2 => i().prop_map(Edit::ToggleMarker),
        1 => i().prop_map(Edit::FlipRole),
        1 => (i(), 0usize..6).prop_map(|(a, b)| Edit::Rewrite(a, b)),
        1 => i().prop_map(Edit::Compact),
        1 => Just(Edit::Clear),
        1 => (i(), i()).prop_map(|(a, b)| Edit::Swap(a, b)),
        1 => i().prop_map(Edit::StringForm),
        1 => i().prop_map(Edit::System),
        1 => i().prop_map(Edit::Tools),
        1 => i().prop_map(Edit::Salt),
        1 => Just(Edit::Automatic),
        1 => i().prop_map(Edit::Fresh),
        1 => i().prop_map(Edit::Refused),
    ]
}

/// Numbers whose JSON values compare equal but are written differently (`0`, `0.0`, `-0.0`),
/// so that a message rewritten with one of them looks, as a `Value`, like the one before.
const NUMBERS: [f64; 6] = [0.0, -0.0, 1.0, 1.5, -1.0, 1e300];

fn number(n: usize) -> Value {
    match n % (NUMBERS.len() + 1) {
        0 => json!(0),
        k => json!(NUMBERS[k - 1]),
    }
}

fn message(user: bool, n: usize, tool: bool) -> Value {
    let role = if user { "user" } else { "assistant" };
    let block = match (tool, user) {
        (true, false) => {
            json!({"type":"tool_use","id":"call","name":"t","input":{"x":number(n)}})
        }
        (true, true) => {
            json!({"type":"tool_result","tool_use_id":"call","content":[{"type":"text","text":format!("out {}", number(n))}]})
        }
        (false, _) => json!({"type":"text","text":format!("text {n}")}),
    };
    json!({"role":role,"content":[block]})
}

/// Every block of the messages, for an edit that picks one.
fn message_blocks(body: &mut Value) -> Vec<&mut Value> {
    body["messages"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|m| m.get_mut("content").and_then(Value::as_array_mut))
        .flatten()
        .collect()
}

/// `body` after `edit`; `Refused` gives the body to send once, the session's body unchanged.
fn memo_edit(body: &mut Value, edit: &Edit) -> Option<Value> {
    let len = body["messages"].as_array().map_or(0, Vec::len);
    let messages = |body: &mut Value| body["messages"].as_array_mut().unwrap().clone();
    match *edit {
        Edit::Append { role, number, tool } => {
            for block in message_blocks(body) {
                block.as_object_mut().unwrap().remove("cache_control");
            }
            body["messages"]
                .as_array_mut()
                .unwrap()
                .push(message(role, number, tool));
            if let Some(last) = message_blocks(body).pop() {
                last["cache_control"] = json!({"type":"ephemeral"});
            }
        }
        Edit::Repeat => {}
        Edit::ToggleMarker(i) => {
            let mut blocks = message_blocks(body);
            let n = blocks.len();
            if n > 0 {
                let block = blocks[i % n].as_object_mut().unwrap();
                if block.remove("cache_control").is_none() {
                    block.insert("cache_control".into(), json!({"type":"ephemeral"}));
                }
            }
        }
        Edit::FlipRole(i) if len > 0 => {
            let m = &mut body["messages"][i % len];
            m["role"] = json!(if m["role"] == "user" {
                "assistant"
            } else {
                "user"
            });
        }
        Edit::Rewrite(i, n) if len > 0 => {
            let user = body["messages"][i % len]["role"] == "user";
            body["messages"][i % len] = message(user, n, n % 2 == 0);
        }
        Edit::Compact(i) if len > 0 => {
            let mut kept = messages(body).split_off(i % len);
            kept.insert(
                0,
                json!({"role":"assistant","content":[{"type":"text","text":"summary"}]}),
            );
            body["messages"] = json!(kept);
        }
        Edit::Clear => {
            for block in message_blocks(body) {
                if block["type"] == "tool_result" {
                    block["content"] = json!("[cleared]");
                }
            }
        }
        Edit::Swap(a, b) if len > 0 => body["messages"]
            .as_array_mut()
            .unwrap()
            .swap(a % len, b % len),
        Edit::StringForm(i) if len > 0 => {
            let content = &mut body["messages"][i % len]["content"];
            *content = match content.take() {
                Value::String(text) => json!([{"type":"text","text":text}]),
                Value::Array(blocks) => match blocks.as_slice() {
                    [only] if only["type"] == "text" => only["text"].clone(),
                    _ => Value::Array(blocks),
                },
                other => other,
            };
        }
        Edit::System(i) => {
            let system = [
                Value::Null,
                json!("You are X."),
                json!("You are Y."),
                json!([{"type":"text","text":"You are X.","cache_control":{"type":"ephemeral"}}]),
            ];
            match &system[i % system.len()] {
                Value::Null => drop(body.as_object_mut().unwrap().remove("system")),
                s => body["system"] = s.clone(),
            }
        }
        Edit::Tools(i) => {
            let tool = |name: &str| json!({"name":name,"input_schema":{"type":"object"}});
            let tools = [
                Value::Null,
                json!([]),
                json!([tool("t")]),
                json!([tool("t"), tool("u")]),
            ];
            match &tools[i % tools.len()] {
                Value::Null => drop(body.as_object_mut().unwrap().remove("tools")),
                t => body["tools"] = t.clone(),
            }
        }
        Edit::Salt(i) => {
            let (key, value) = [
                ("tool_choice", json!({"type":"auto"})),
                ("tool_choice", json!({"type":"any"})),
                ("thinking", json!({"type":"enabled","budget_tokens":1024})),
                ("output_config", json!({"effort":"low"})),
            ][i % 4]
                .clone();
            let body = body.as_object_mut().unwrap();
            if body.remove(key).is_none() {
                body.insert(key.into(), value);
            }
        }
        Edit::Automatic => {
            let body = body.as_object_mut().unwrap();
            if body.remove("cache_control").is_none() {
                body.insert("cache_control".into(), json!({"type":"ephemeral"}));
            }
        }
        Edit::Fresh(n) => body["messages"] = json!([message(true, n, false)]),
        Edit::Refused(i) => {
            let mut refused = body.clone();
            let bad = [
                json!(5),
                json!([5]),
                json!([{"type":"text","text":"x","cache_control":{"type":"lasting"}}]),
            ];
            refused["messages"]
                .as_array_mut()
                .unwrap()
                .push(json!({"role":"user","content":bad[i % bad.len()]}));
            return Some(refused);
        }
        _ => {}
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Whatever a session's requests do between them — grow, retry, move or toggle a marker,
    /// flip a role, rewrite, compact, clear, swap or re-form messages, change the system prompt,
    /// the tools, the salt or automatic caching, start afresh, or send a refused body — the memo
    /// shapes every request as [`shape`] does.
    #[test]
    fn the_memo_shapes_every_request_of_any_session_as_shape_does(
        edits in proptest::collection::vec(edit(), 1..40)
    ) {
        use muninn_anthropic::prompt::{ShapeMemo, shape_memoized};
        let mut body = req(json!([message(true, 0, false)]));
        let mut memo = ShapeMemo::default();
        for (step, edit) in edits.iter().enumerate() {
            let sent = memo_edit(&mut body, edit).unwrap_or_else(|| body.clone());
            prop_assert_eq!(
                shape_memoized(&sent, &mut memo),
                shape(&sent),
                "step {} ({:?}): {}",
                step,
                edit,
                sent
            );
        }
    }
}
