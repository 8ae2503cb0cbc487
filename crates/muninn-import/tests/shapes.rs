//! Line shapes met in real `~/.claude/projects` folders that the hand-made fixtures did not have
//! (issue 12: the unseen public transcripts of docs/validation.md "Validation on data nobody tuned
//! on"). Each test writes a small hand-made file reproducing the shape — never the real data — and
//! pins what the importer does with it.

use super::*;
use pretty_assertions::assert_eq;

/// A user line and the assistant line that answers it, of session `session`, `seconds` after
/// the fixtures' origin, in Claude Code's layout.
fn turn(session: &str, n: u32, seconds: i64, read: u64) -> String {
    let ts = |s: i64| {
        jiff::Timestamp::from_millisecond(at(s))
            .unwrap()
            .to_string()
    };
    format!(
        concat!(
            r#"{{"parentUuid":null,"isSidechain":false,"userType":"external","cwd":"/w","sessionId":"{s}","version":"2.1.87","type":"user","message":{{"role":"user","content":"q{n}"}},"uuid":"u{n}","timestamp":"{t0}"}}"#,
            "\n",
            r#"{{"parentUuid":"u{n}","isSidechain":false,"userType":"external","cwd":"/w","sessionId":"{s}","version":"2.1.87","type":"assistant","message":{{"id":"msg_{n}","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[{{"type":"text","text":"a"}}],"usage":{{"input_tokens":3,"cache_creation_input_tokens":500,"cache_read_input_tokens":{read},"output_tokens":7}}}},"requestId":"req_{n}","uuid":"a{n}","timestamp":"{t1}"}}"#,
            "\n"
        ),
        s = session,
        n = n,
        read = read,
        t0 = ts(seconds),
        t1 = ts(seconds + 2),
    )
}

/// Claude Code 2.1.81's `sdk-ts` entry point sometimes stored an assistant line whose `message`
/// is the raw SSE stream spread into an object of character-index keys (`{"0":"e","1":"v",…}`),
/// with no id and no usage to read. It is reported by line and skipped; the turns around it
/// import.
#[test]
fn an_sse_stream_spread_into_the_message_is_skipped_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spread.jsonl");
    let spread: serde_json::Map<String, serde_json::Value> = "event: message_start\ndata: {}\n"
        .chars()
        .enumerate()
        .map(|(i, c)| (i.to_string(), serde_json::Value::from(c.to_string())))
        .chain([("content".to_string(), serde_json::Value::from("[]"))])
        .collect();
    let odd = serde_json::json!({
        "parentUuid": "request_x", "isSidechain": false, "type": "assistant",
        "uuid": "odd", "timestamp": "2026-02-10T10:00:30.000Z", "userType": "external",
        "entrypoint": "sdk-ts", "cwd": "/w", "sessionId": "sp", "version": "2.1.81",
        "message": spread,
    });
    let text = turn("sp", 1, 0, 0) + &odd.to_string() + "\n" + &turn("sp", 2, 60, 500);
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let requests: Vec<(i64, u64)> = got.traces[0]
        .requests
        .iter()
        .map(|r| (r.at_ms, r.usage.cache_read))
        .collect();
    assert_eq!(requests, vec![(at(2), 0), (at(62), 500)]);
    let warned = warnings_of(&got);
    assert_eq!(
        warned,
        vec![(3, "assistant line without message.id, skipped")]
    );
}

/// A session teleported from the web starts with a `teleported-from` line. Followed by the
/// session it imports as usual; alone (a teleport that never ran a turn) the file holds no
/// request and is skipped with a warning, not an error.
#[test]
fn a_teleported_from_line_starts_a_session_or_stands_alone() {
    let dir = tempfile::tempdir().unwrap();
    let teleported =
        r#"{"type":"teleported-from","remoteSessionId":"session_x","branch":"b","messageCount":0}"#;
    std::fs::write(dir.path().join("alone.jsonl"), format!("{teleported}\n")).unwrap();
    std::fs::write(
        dir.path().join("ran.jsonl"),
        format!("{teleported}\n{}", turn("tp", 1, 0, 0)),
    )
    .unwrap();

    let got = import(&[dir.path().to_path_buf()]);
    let sessions: Vec<(&str, usize)> = got
        .traces
        .iter()
        .map(|t| (t.session.as_str(), t.requests.len()))
        .collect();
    assert_eq!(sessions, vec![("tp", 1)]);
    assert_eq!((got.stats.files, got.stats.files_skipped), (1, 1));
    let warned: Vec<(PathBuf, u64)> = got
        .warnings
        .iter()
        .map(|w| (w.path.clone(), w.line))
        .collect();
    assert_eq!(warned, vec![(dir.path().join("alone.jsonl"), 0)]);
}

/// Claude Code 2.1.2xx writes a `system` line `bridge_status` when remote control is switched
/// on; the next request of the main thread is sent with a changed tool list (the API labels it
/// `tools_changed`). The flag goes on that request only; a bridge line saying anything else, or
/// a `system` line whose `content` is not text, flags nothing and breaks nothing.
#[test]
fn remote_control_switched_on_flags_the_next_request_as_a_tool_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.jsonl");
    let system = |content: serde_json::Value, seconds: i64| {
        serde_json::json!({
            "parentUuid": null, "isSidechain": false, "type": "system",
            "subtype": "bridge_status", "content": content, "sessionId": "br",
            "uuid": format!("s{seconds}"),
            "timestamp": jiff::Timestamp::from_millisecond(at(seconds)).unwrap().to_string(),
        })
        .to_string()
            + "\n"
    };
    let text = turn("br", 1, 0, 0)
        + &system("/remote-control is active · Continue here".into(), 10)
        + &turn("br", 2, 20, 500)
        + &system("/remote-control reconnecting".into(), 30)
        + &system(serde_json::json!({"state": "odd"}), 31)
        + &turn("br", 3, 40, 1_000);
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let flags: Vec<bool> = got.traces[0]
        .requests
        .iter()
        .map(|r| r.tools_changed)
        .collect();
    assert_eq!(flags, vec![false, true, false]);
}

/// Claude Code's `ToolSearch` answers with `tool_reference` blocks inside a `tool_result`; the
/// tools they name are sent with the next request. The thread's first such result flags the
/// request that sends it (`tools_loaded`), and no later one does: on one model the first load
/// changed the prompt's head and later ones did not (docs/validation.md, "Looked at a fourth
/// time"). A tool result without references flags nothing.
#[test]
fn a_threads_first_tool_load_flags_the_request_that_sends_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolsearch.jsonl");
    let result = |content: serde_json::Value, seconds: i64| {
        serde_json::json!({
            "parentUuid": null, "isSidechain": false, "type": "user", "sessionId": "ts",
            "uuid": format!("r{seconds}"), "version": "2.1.143",
            "timestamp": jiff::Timestamp::from_millisecond(at(seconds)).unwrap().to_string(),
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("toolu_{seconds}"), "content": content}
            ]},
        })
        .to_string()
            + "\n"
    };
    let references = |names: &[&str]| {
        serde_json::Value::Array(
            names
                .iter()
                .map(|n| serde_json::json!({"type": "tool_reference", "tool_name": n}))
                .collect(),
        )
    };
    let answer = |n: u32, seconds: i64| {
        // The turn's answer again, as a tool loop's next request: `turn` writes both lines, so
        // only its assistant line is kept.
        turn("ts", n, seconds - 2, 500)
            .lines()
            .nth(1)
            .map(|l| l.to_string() + "\n")
            .unwrap_or_default()
    };
    let text = turn("ts", 1, 0, 0)
        + &result(serde_json::json!("plain output"), 10)
        + &answer(2, 20)
        + &result(references(&["TaskCreate", "TaskList"]), 30)
        + &answer(3, 40)
        + &result(references(&["ExitPlanMode"]), 50)
        + &answer(4, 60);
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let flags: Vec<bool> = got.traces[0]
        .requests
        .iter()
        .map(|r| r.tools_loaded)
        .collect();
    assert_eq!(flags, vec![false, false, true, false]);
}

/// A resumed session's file begins with copies of the earlier file's lines: a tool load among
/// the copies was the thread's first, so the resumed session's next load is not flagged, and
/// the flag survives the stored trace format.
#[test]
fn a_tool_load_copied_from_an_earlier_file_was_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let result = |session: &str, seconds: i64| {
        serde_json::json!({
            "parentUuid": null, "isSidechain": false, "type": "user", "sessionId": session,
            "uuid": format!("r{seconds}"), "version": "2.1.143",
            "timestamp": jiff::Timestamp::from_millisecond(at(seconds)).unwrap().to_string(),
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("toolu_{seconds}"), "content": [
                    {"type": "tool_reference", "tool_name": "TaskList"}
                ]}
            ]},
        })
        .to_string()
            + "\n"
    };
    let answer = |session: &str, n: u32, seconds: i64| {
        turn(session, n, seconds - 2, 500)
            .lines()
            .nth(1)
            .map(|l| l.to_string() + "\n")
            .unwrap_or_default()
    };
    let earlier =
        |session: &str| turn(session, 1, 0, 0) + &result(session, 10) + &answer(session, 2, 20);
    let first = dir.path().join("s2.jsonl");
    std::fs::write(&first, earlier("s2")).unwrap();
    let resumed = dir.path().join("s3.jsonl");
    let text = earlier("s3") + &result("s3", 30) + &answer("s3", 3, 40);
    std::fs::write(&resumed, text).unwrap();

    let got = import(&[first, resumed]);
    let flags: Vec<(String, bool)> = got
        .traces
        .iter()
        .flat_map(|t| {
            t.requests
                .iter()
                .map(|r| (t.session.clone(), r.tools_loaded))
        })
        .collect();
    let expected = [("s2", false), ("s2", true), ("s3", false)];
    assert_eq!(flags, expected.map(|(s, f)| (s.to_string(), f)).to_vec());

    let mut stored = Vec::new();
    write_traces(&mut stored, &got.traces).unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, &stored).unwrap();
    assert_eq!(read_trace_file(&path).unwrap().traces, got.traces);
}

/// A Codex rollout marks a request `reasoning` when a `reasoning` item is among its output (the
/// items logged before its `token_count`), and only that request: the OpenAI cache model needs
/// it to know where the next user message's prompt stops matching.
#[test]
fn a_codex_reasoning_item_marks_its_own_request_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout-2026-01-01T00-00-00-rx.jsonl");
    let line = codex_line;
    let item = |seconds: i64, kind: &str| {
        line(
            seconds,
            "response_item",
            serde_json::json!({"type": kind, "call_id": "c"}),
        )
    };
    let count = |seconds: i64, total: u64| {
        let usage = serde_json::json!({"input_tokens": total, "cached_input_tokens": 0, "output_tokens": 10});
        line(
            seconds,
            "event_msg",
            serde_json::json!({"type": "token_count", "info": {"total_token_usage": {"input_tokens": total}, "last_token_usage": usage}}),
        )
    };
    let user = |seconds: i64| {
        line(
            seconds,
            "event_msg",
            serde_json::json!({"type": "user_message", "message": "go"}),
        )
    };
    let text = line(0, "session_meta", serde_json::json!({"id": "rx", "model": "gpt-5.1-codex"}))
        + &user(0)
        + &item(1, "reasoning")
        + &item(2, "function_call")
        + &count(3, 2_000)
        + &item(4, "function_call_output")
        + &item(5, "function_call")
        + &count(6, 3_000)
        // A re-emitted count (same total) is no request.
        + &count(6, 3_000)
        + &item(7, "function_call_output")
        + &user(8)
        + &item(9, "reasoning")
        + &line(10, "response_item", serde_json::json!({"type": "message", "role": "assistant"}))
        + &count(11, 4_000);
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let flags: Vec<(bool, bool)> = got.traces[0]
        .requests
        .iter()
        .map(|r| (r.boundary, r.reasoning))
        .collect();
    assert_eq!(flags, vec![(true, true), (false, false), (true, true)]);
}

/// One line of a Codex rollout, `seconds` after the fixtures' origin.
fn codex_line(seconds: i64, kind: &str, payload: serde_json::Value) -> String {
    serde_json::json!({
        "timestamp": jiff::Timestamp::from_millisecond(at(seconds)).unwrap().to_string(),
        "type": kind,
        "payload": payload,
    })
    .to_string()
        + "\n"
}

/// A Codex `response_item` of type `kind` (`role` for a message).
fn codex_item(seconds: i64, kind: &str, role: Option<&str>) -> String {
    let mut payload = serde_json::json!({"type": kind, "call_id": "c"});
    if let Some(role) = role {
        payload["role"] = role.into();
    }
    codex_line(seconds, "response_item", payload)
}

/// A Codex `token_count` whose running total of input is `total` and whose request read
/// `cached` of a `prompt`-token prompt.
fn codex_count(seconds: i64, total: u64, prompt: u64, cached: u64) -> String {
    let last = serde_json::json!({"input_tokens": prompt, "cached_input_tokens": cached, "output_tokens": 10});
    codex_line(
        seconds,
        "event_msg",
        serde_json::json!({"type": "token_count", "info": {"total_token_usage": {"input_tokens": total}, "last_token_usage": last}}),
    )
}

/// A Codex `event_msg` of type `kind`.
fn codex_event(seconds: i64, kind: &str) -> String {
    codex_line(seconds, "event_msg", serde_json::json!({"type": kind}))
}

/// Codex 0.57–0.58 log a request's output items right after its `token_count` (later versions
/// before it; seen on the tuning part of the MoonMind rollouts, where every count is followed by
/// its request's reasoning and call). Those items are the counted request's: its `reasoning`
/// flag, not the next request's, and they do not date the next request — which the importer
/// did, dating a turn's first request by the last turn's final answer (hours early after a
/// long pause, so the cache model saw no gap). Nor does a `ghost_snapshot` (Codex's undo
/// snapshot at a turn's start, before the model is asked).
#[test]
fn codex_output_logged_after_its_count_is_the_counted_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout-2025-11-12T00-00-00-old.jsonl");
    let text = codex_line(0, "session_meta", serde_json::json!({"id": "old", "model": "gpt-5-codex"}))
        + &codex_event(0, "user_message")
        + &codex_event(2, "agent_reasoning")
        + &codex_count(3, 2_000, 2_000, 0)
        + &codex_item(3, "reasoning", None)
        + &codex_item(3, "function_call", None)
        + &codex_item(5, "function_call_output", None)
        + &codex_count(9, 5_000, 3_000, 1_920)
        + &codex_item(9, "function_call", None)
        + &codex_item(11, "function_call_output", None)
        + &codex_count(14, 9_000, 4_000, 2_944)
        + &codex_item(14, "message", Some("assistant"))
        // Three hours later, the next turn.
        + &codex_event(10_800, "user_message")
        // Codex's undo snapshot, taken before the model is asked: no answer, so no date.
        + &codex_item(10_800, "ghost_snapshot", None)
        + &codex_count(10_805, 14_000, 5_000, 3_072)
        + &codex_item(10_805, "reasoning", None)
        + &codex_item(10_805, "message", Some("assistant"));
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let requests: Vec<(i64, bool, bool)> = got.traces[0]
        .requests
        .iter()
        .map(|r| (r.at_ms, r.boundary, r.reasoning))
        .collect();
    assert_eq!(
        requests,
        vec![
            (at(3), true, true),
            (at(9), false, false),
            (at(14), false, false),
            (at(10_805), true, true),
        ]
    );
}

/// A `/review` in Codex 0.77 runs as a conversation of its own inside the rollout (seen on the
/// tuning part of the voice-assistant rollouts): between `entered_review_mode` and
/// `exited_review_mode` the counts start new running totals, and after it Codex re-emits the
/// main thread's last count. The review's requests are its own rollout's (a session of its own,
/// `source: {"subagent": "review"}`, with the review's output items), which the main rollout
/// only echoes: they are imported once, from there. The re-emitted count is no request — the
/// importer had put both into the main thread, a 3,113-token prompt in a 94k-token conversation
/// and the same request twice; then the echoes into a `review` thread of the main session, each
/// review request twice over.
#[test]
fn a_codex_review_is_a_thread_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout-2025-12-25T00-00-00-rv.jsonl");
    let text = codex_line(0, "session_meta", serde_json::json!({"id": "rv", "model": "gpt-5.2-codex"}))
        + &codex_event(0, "user_message")
        + &codex_item(1, "function_call", None)
        + &codex_count(2, 90_000, 90_000, 3_200)
        + &codex_item(3, "function_call_output", None)
        + &codex_item(4, "message", Some("assistant"))
        + &codex_count(5, 184_337, 94_337, 89_984)
        + &codex_event(100, "entered_review_mode")
        + &codex_event(100, "user_message")
        + &codex_count(104, 3_113, 3_113, 2_048)
        + &codex_count(104, 3_113, 3_113, 2_048)
        + &codex_count(120, 19_089, 15_976, 2_048)
        + &codex_event(144, "exited_review_mode")
        + &codex_event(170, "user_message")
        // The main thread's last count again, then its next request.
        + &codex_count(171, 184_337, 94_337, 89_984)
        + &codex_item(175, "function_call", None)
        + &codex_count(176, 279_394, 95_057, 93_184);
    std::fs::write(&path, text).unwrap();
    // The review's own rollout, as Codex 0.77 writes it beside the main one.
    let review = dir
        .path()
        .join("rollout-2025-12-25T00-01-40-rv-review.jsonl");
    let meta = serde_json::json!({"id": "rv-review", "model": "gpt-5.2-codex", "source": {"subagent": "review"}});
    let text = codex_line(100, "session_meta", meta)
        + &codex_event(100, "user_message")
        + &codex_count(104, 3_113, 3_113, 2_048)
        + &codex_item(104, "function_call_output", None)
        + &codex_count(104, 3_113, 3_113, 2_048)
        + &codex_item(119, "reasoning", None)
        + &codex_count(120, 19_089, 15_976, 2_048);
    std::fs::write(&review, text).unwrap();

    let got = import(&[path, review]);
    let threads: Vec<(&str, &str, ThreadKind, Vec<u64>)> = got
        .traces
        .iter()
        .map(|t| {
            (
                t.session.as_str(),
                t.thread.as_str(),
                t.kind,
                t.requests.iter().map(|r| r.usage.prompt()).collect(),
            )
        })
        .collect();
    assert_eq!(
        threads,
        vec![
            ("rv", "main", ThreadKind::Main, vec![90_000, 94_337, 95_057]),
            ("rv-review", "main", ThreadKind::Main, vec![3_113, 15_976]),
        ]
    );
}

/// Claude Code writes a response one content block per line, a `thinking` (or
/// `redacted_thinking`) block usually on the first. The request is marked as having thought
/// whichever of its lines carries the block: the cache model reads it for the turns that follow
/// (some clients drop a finished turn's thinking when the person writes again).
#[test]
fn an_answer_that_thought_is_marked_whichever_line_carries_the_thinking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("thinking.jsonl");
    let line = |id: &str, uuid: &str, block: serde_json::Value, seconds: i64| {
        serde_json::json!({
            "parentUuid": null, "isSidechain": false, "type": "assistant", "sessionId": "th",
            "uuid": uuid,
            "timestamp": jiff::Timestamp::from_millisecond(at(seconds)).unwrap().to_string(),
            "message": {
                "id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
                "content": [block],
                "usage": {"input_tokens": 3, "cache_creation_input_tokens": 500,
                          "cache_read_input_tokens": 1_000, "output_tokens": 7},
            },
        })
        .to_string()
            + "\n"
    };
    let thinking = serde_json::json!({"type": "thinking", "thinking": "t", "signature": "s"});
    let redacted = serde_json::json!({"type": "redacted_thinking", "data": "d"});
    let text = serde_json::json!({"type": "text", "text": "a"});
    let tool = serde_json::json!({"type": "tool_use", "id": "t1", "name": "Read", "input": {}});
    let content = turn("th", 1, 0, 0)
        // Thinking first, then text: one request, marked.
        + &line("msg_a", "a1", thinking, 10)
        + &line("msg_a", "a2", text.clone(), 11)
        // Text first, redacted thinking on a later line of the same answer: marked.
        + &line("msg_b", "b1", text.clone(), 20)
        + &line("msg_b", "b2", redacted, 21)
        // No thinking at all: not marked.
        + &line("msg_c", "c1", text, 30)
        + &line("msg_c", "c2", tool, 31);
    std::fs::write(&path, content).unwrap();

    let got = import(std::slice::from_ref(&path));
    let marks: Vec<bool> = got.traces[0].requests.iter().map(|r| r.reasoning).collect();
    assert_eq!(marks, vec![false, true, true, false]);
}

/// Two shapes that rewrite the prompt before a request, seen on the tuning part of one public
/// user's 2.1.2xx sessions: an answer the person stopped while it was only thinking (a thinking
/// line, then "[Request interrupted by user]"), and a session going on under a new client
/// `version`. The first flags the next request `interrupted_thinking` — an answer stopped after
/// it began to write does not — and the second flags the first request of the new version
/// `version_changed`, and only it.
#[test]
fn an_interrupted_thought_and_a_new_client_version_are_flagged() {
    let import = import(&[fixture("claude-rewrites")]);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let t = &import.traces[0];
    let flags: Vec<(bool, bool)> = t
        .requests
        .iter()
        .map(|r| (r.interrupted_thinking, r.version_changed))
        .collect();
    assert_eq!(
        flags,
        vec![
            (false, false),
            (false, false),
            (true, false),
            (false, false),
            (false, true),
            (false, false),
        ]
    );
    // The stored trace format keeps them.
    let mut stored = Vec::new();
    write_traces(&mut stored, [t]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, &stored).unwrap();
    assert_eq!(
        read_trace_file(&path).unwrap().traces[0].requests,
        t.requests
    );
}

/// A user line answering the response `parent` (its assistant line's uuid `a<parent>`, none for
/// the first) and the assistant line that answers it, linked by `parentUuid` as Claude Code
/// writes them.
fn linked(session: &str, n: u32, parent: Option<u32>, seconds: i64, read: u64) -> String {
    let ts = |s: i64| {
        jiff::Timestamp::from_millisecond(at(s))
            .unwrap()
            .to_string()
    };
    let user = serde_json::json!({
        "parentUuid": parent.map(|p| format!("a{p}")), "isSidechain": false, "type": "user",
        "sessionId": session, "uuid": format!("u{n}"), "timestamp": ts(seconds),
        "message": {"role": "user", "content": format!("q{n}")},
    });
    let assistant = serde_json::json!({
        "parentUuid": format!("u{n}"), "isSidechain": false, "type": "assistant",
        "sessionId": session, "uuid": format!("a{n}"), "timestamp": ts(seconds + 2),
        "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "content": [{"type": "text", "text": "a"}],
            "usage": {"input_tokens": 3, "cache_creation_input_tokens": 500,
                "cache_read_input_tokens": read, "output_tokens": 7}},
    });
    format!("{user}\n{assistant}\n")
}

/// Claude Code does not lock a session: resumed in two terminals, it appends two conversations
/// to one file, their turns alternating. Each request's `parentUuid` links lead back to the
/// response it follows, so the importer tells them apart (`TraceRequest::conversation`): 0 for
/// the thread's first, one other id for the conversation that forked from it — also when the
/// fork is a rewind (a person going back), which the replay then keeps in line.
#[test]
fn two_conversations_in_one_session_file_are_told_apart_by_their_links() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.jsonl");
    let text = linked("two", 1, None, 0, 0)
        + &linked("two", 2, Some(1), 10, 500)
        + &linked("two", 3, Some(2), 20, 1_000)
        // A second terminal resumes after request 2; the first goes on after request 3.
        + &linked("two", 4, Some(2), 30, 1_000)
        + &linked("two", 5, Some(3), 40, 1_500)
        + &linked("two", 6, Some(4), 50, 1_500)
        // A rewind of the second conversation to request 4: a fork of it.
        + &linked("two", 7, Some(4), 60, 1_500);
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let ids: Vec<u64> = got.traces[0]
        .requests
        .iter()
        .map(|r| r.conversation)
        .collect();
    let (second, rewound) = (ids[3], ids[6]);
    assert!(second != 0 && rewound != 0 && rewound != second, "{ids:?}");
    assert_eq!(ids, vec![0, 0, 0, second, 0, second, rewound]);
    // Each fork names the conversation it left: the second terminal the first, the rewind the
    // second (though the first answered just before it, in time).
    let forked: Vec<Option<u64>> = got.traces[0]
        .requests
        .iter()
        .map(|r| r.forked_from)
        .collect();
    assert_eq!(
        forked,
        vec![None, None, None, Some(0), None, None, Some(second)]
    );
}

/// The conversation of each request of the one-thread transcript `text`, and the whole import
/// (its warnings).
fn conversations_of(text: &str) -> (Vec<u64>, Import) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("links.jsonl");
    std::fs::write(&path, text).unwrap();
    let got = import(std::slice::from_ref(&path));
    let ids = got.traces[0]
        .requests
        .iter()
        .map(|r| r.conversation)
        .collect();
    (ids, got)
}

/// A compaction boundary has no `parentUuid`: its `logicalParentUuid` is the link to the
/// conversation it compacted. Two conversations alive at once, the second compacts while the
/// first was the latest to answer: the second's next request still continues the second.
#[test]
fn a_compaction_boundary_links_through_its_logical_parent() {
    let boundary = serde_json::json!({
        "parentUuid": null, "logicalParentUuid": "a4", "type": "system",
        "subtype": "compact_boundary", "sessionId": "two", "uuid": "c1",
        "timestamp": jiff::Timestamp::from_millisecond(at(45)).unwrap().to_string(),
    });
    // Request 6 answers a user line whose parent is the boundary, not request 4's line.
    let after = linked("two", 6, Some(4), 50, 0).replacen(
        r#""parentUuid":"a4""#,
        r#""parentUuid":"c1""#,
        1,
    );
    assert!(after.contains(r#""parentUuid":"c1""#), "{after}");
    let text = linked("two", 1, None, 0, 0)
        + &linked("two", 2, Some(1), 10, 500)
        + &linked("two", 3, Some(2), 20, 1_000)
        + &linked("two", 4, Some(2), 30, 1_000)
        + &linked("two", 5, Some(3), 40, 1_500)
        + &format!("{boundary}\n")
        + &after;
    let (ids, _) = conversations_of(&text);
    let second = ids[3];
    assert!(second != 0, "{ids:?}");
    assert_eq!(ids, vec![0, 0, 0, second, 0, second]);
}

/// A corrupt file whose links go round a cycle (two progress lines each other's parent): a
/// request whose links lead into it continues the thread's latest conversation, as one whose
/// links find no earlier request does, and the file is warned about once — at the first
/// request that met the cycle, not again at the second. Before, each such request walked
/// round the cycle 100,000 links and nothing was said.
#[test]
fn a_cycle_of_links_is_reported_once_and_continues_the_latest_conversation() {
    let progress = |uuid: &str, parent: &str| {
        let line = serde_json::json!({
            "parentUuid": parent, "isSidechain": false, "type": "progress",
            "sessionId": "cyc", "uuid": uuid,
            "timestamp": jiff::Timestamp::from_millisecond(at(25)).unwrap().to_string(),
        });
        format!("{line}\n")
    };
    let into = |n: u32, seconds: i64, cycle_line: &str| {
        let text = linked("cyc", n, Some(1), seconds, 500);
        let linked_into = text.replacen(
            r#""parentUuid":"a1""#,
            &format!(r#""parentUuid":"{cycle_line}""#),
            1,
        );
        assert_ne!(text, linked_into);
        linked_into
    };
    // Requests 1 and 2 are one conversation; 3 forks from 1 and is the latest; lines 7 and 8
    // are the cycle; requests 4 (lines 9–10) and 5 (11–12) answer user lines linked into it.
    let text = linked("cyc", 1, None, 0, 0)
        + &linked("cyc", 2, Some(1), 10, 500)
        + &linked("cyc", 3, Some(1), 20, 500)
        + &progress("x1", "x2")
        + &progress("x2", "x1")
        + &into(4, 30, "x1")
        + &into(5, 40, "x2");
    let (ids, got) = conversations_of(&text);
    let fork = ids[2];
    assert!(fork != 0, "{ids:?}");
    assert_eq!(ids, vec![0, 0, fork, fork, fork]);
    let warned = warnings_of(&got);
    assert_eq!(
        warned,
        vec![(
            10,
            "parentUuid links go round a cycle (a corrupt file): a request whose links meet it \
             continues the thread's latest conversation"
        )]
    );
}

/// A response whose line has no uuid cannot be placed by its links: it continues the thread's
/// latest conversation, and the request after it, linked past it, still finds its own.
#[test]
fn a_response_without_a_uuid_continues_the_latest_conversation() {
    let text = linked("two", 1, None, 0, 0)
        + &linked("two", 2, Some(1), 10, 500)
        + &linked("two", 3, Some(1), 20, 500)
        + &linked("two", 4, Some(2), 30, 1_000).replacen(r#","uuid":"a4""#, "", 1)
        + &linked("two", 5, Some(3), 40, 1_000);
    assert!(!text.contains(r#""uuid":"a4""#));
    let (ids, _) = conversations_of(&text);
    let fork = ids[2];
    assert!(fork != 0, "{ids:?}");
    // Request 4 (no uuid) goes with the latest, the fork; request 5 continues the fork.
    assert_eq!(ids, vec![0, 0, fork, fork, fork]);
}

/// An answer asks for a tool, its result is written 5 s later, and the request sending it is
/// refused by a usage limit (Claude Code writes a `<synthetic>` answer, dropped); hours later a
/// person types, and that request carries the result. It records when the result was written,
/// so the replay knows nothing was awaited through the gap; a request whose results come with
/// no timestamp, or carrying none, records none.
#[test]
fn when_tool_results_were_written_goes_with_the_request_carrying_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limit.jsonl");
    let line = |kind: &str, message: serde_json::Value, seconds: i64| {
        serde_json::json!({
            "parentUuid": null, "isSidechain": false, "type": kind, "sessionId": "lim",
            "cwd": "/w", "version": "2.1.87", "message": message,
            "uuid": format!("{kind}{seconds}"),
            "timestamp": jiff::Timestamp::from_millisecond(at(seconds)).unwrap().to_string(),
        })
        .to_string()
            + "\n"
    };
    let usage = serde_json::json!({"input_tokens": 3, "cache_creation_input_tokens": 500,
        "cache_read_input_tokens": 0, "output_tokens": 7});
    let text = line(
        "user",
        serde_json::json!({"role": "user", "content": "start it"}),
        0,
    ) + &line(
        "assistant",
        serde_json::json!({"id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-6",
                "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
                "usage": usage}),
        2,
    ) + &line(
        "user",
        serde_json::json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "failed"}]}),
        7,
    ) + &line(
        "assistant",
        serde_json::json!({"id": "msg_limit", "role": "assistant", "model": "<synthetic>",
                "content": [{"type": "text", "text": "You've hit your limit"}],
                "usage": usage}),
        8,
    ) + &line(
        "user",
        serde_json::json!({"role": "user", "content": "go on"}),
        70_000,
    ) + &line(
        "assistant",
        serde_json::json!({"id": "msg_2", "role": "assistant", "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "ok"}], "usage": usage}),
        70_004,
    );
    std::fs::write(&path, text).unwrap();

    let got = import(std::slice::from_ref(&path));
    let requests: Vec<(u32, bool, Option<i64>)> = got.traces[0]
        .requests
        .iter()
        .map(|r| (r.tool_results.uses, r.boundary, r.tool_results_at_ms))
        .collect();
    assert_eq!(requests, vec![(0, true, None), (1, true, Some(at(7)))]);
}

/// An import's warnings as (line, message) pairs.
fn warnings_of(got: &Import) -> Vec<(u64, &str)> {
    got.warnings
        .iter()
        .map(|w| (w.line, w.message.as_str()))
        .collect()
}
