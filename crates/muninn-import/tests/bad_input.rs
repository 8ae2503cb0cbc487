//! Bad input the fuzzers do not reach: a byte-order mark, numbers past any real request (token
//! counts, times, a turn's duration) in every format that carries them, and what `check-cache`
//! and `replay` then do with the rest. Each case was found by review (2026-12) and failed before
//! its fix: a panic in a debug build (an overflow) or a silently wrapped figure in a release one.

use super::*;
use muninn_core::cache::CacheRules;
use muninn_core::price::PriceTable;
use muninn_core::replay::{Assumptions, Plan, replay_traces};
use muninn_core::validate::{ValidateOptions, validate};
use pretty_assertions::assert_eq;

/// `text` written to `name` in a temporary directory, imported.
fn import_text(name: &str, text: &[u8]) -> Import {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    import(&[path])
}

/// (line, whether the message names the limit) of every warning.
fn limit_warnings(got: &Import) -> Vec<(u64, bool)> {
    got.warnings
        .iter()
        .map(|w| (w.line, w.message.contains("limit")))
        .collect()
}

/// What `check-cache` and `replay` do with an import: every predictor, every plan.
fn check_and_replay(got: &Import) {
    let _ = validate(&got.traces, &ValidateOptions::default());
    let prices = PriceTable::embedded();
    let priced: Vec<_> = got
        .traces
        .iter()
        .filter_map(|t| prices.model(&t.model).ok().map(|p| (t, p)))
        .collect();
    assert!(!priced.is_empty());
    let (assumptions, rules) = (Assumptions::default(), CacheRules::default());
    for plan in Plan::all() {
        let _ = replay_traces(&priced, plan, &assumptions, &rules, &mut |_, _| {});
    }
}

/// A Claude Code assistant line (one block) of response `n` at `seconds`, with this usage.
fn claude_response(n: u32, seconds: i64, usage: &str) -> String {
    format!(
        r#"{{"type":"assistant","sessionId":"s","uuid":"a{n}","timestamp":"2026-02-10T10:00:{seconds:02}.000Z","message":{{"model":"claude-opus-4-6","id":"msg_{n}","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
    )
}

/// A file saved by an editor that writes a UTF-8 byte-order mark: the mark is not part of the
/// first line's JSON. The first line was refused as malformed, and with it the request it held.
#[test]
fn a_byte_order_mark_loses_no_line() {
    let plain = claude_response(1, 1, r#"{"input_tokens":3,"output_tokens":5}"#) + "\n";
    let marked = [b"\xef\xbb\xbf".as_slice(), plain.as_bytes()].concat();
    let (plain, marked) = (
        import_text("s.jsonl", plain.as_bytes()),
        import_text("s.jsonl", &marked),
    );
    assert_eq!(marked.warnings, vec![]);
    assert_eq!(marked.stats.requests, 1);
    let at = |i: &Import| i.traces[0].requests.clone();
    assert_eq!(at(&marked), at(&plain));
}

/// A usage field past any real request's (here 2^63: two of them overflow a prompt's sum) is
/// refused with its line, and the requests around it are kept; `check-cache` and `replay` ran
/// into the overflow (`validate::cached_part`, `replay::growth::is_aside`).
#[test]
fn a_token_count_past_the_limit_is_refused_by_line() {
    let ok = r#"{"input_tokens":3,"cache_creation_input_tokens":1000,"output_tokens":5}"#;
    let huge = r#"{"input_tokens":1,"cache_creation_input_tokens":9223372036854775808,"cache_read_input_tokens":9223372036854775808,"output_tokens":1}"#;
    let text = [
        claude_response(1, 1, ok),
        claude_response(2, 2, huge),
        claude_response(3, 3, ok),
    ]
    .join("\n");
    let got = import_text("s.jsonl", text.as_bytes());
    assert_eq!(limit_warnings(&got), vec![(2, true)]);
    assert_eq!(got.stats.requests, 2);
    check_and_replay(&got);
}

/// The same limit on every format with numbers of its own: a Codex count, a TraceLab row, a
/// ledger row and a stored request (whose time, too, is taken as written: `i64::MAX` overflowed
/// every gap the replay takes).
#[test]
fn every_format_refuses_numbers_past_the_limits() {
    let codex = [
        r#"{"timestamp":"2026-02-10T10:00:00.000Z","type":"session_meta","payload":{"id":"cx","model":"gpt-5"}}"#,
        r#"{"timestamp":"2026-02-10T10:00:01.000Z","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":18446744073709551615,"output_tokens":1}}}}"#,
        r#"{"timestamp":"2026-02-10T10:00:02.000Z","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":100,"output_tokens":1}}}}"#,
    ]
    .join("\n");
    let got = import_text("rollout-cx.jsonl", codex.as_bytes());
    assert_eq!(limit_warnings(&got), vec![(2, true)]);
    assert_eq!(got.stats.requests, 1);

    let csv = "session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n\
               a,0,0,100,10,5\n\
               a,1,100,18446744073709551615,10,5\n\
               a,2,100,300,10,5\n";
    let got = import_text("r.csv", csv.as_bytes());
    assert_eq!(limit_warnings(&got), vec![(3, true)]);
    assert_eq!(got.stats.requests, 2);

    let fixture_rows = std::fs::read_to_string(fixture("ledger/ledger.jsonl")).unwrap();
    let mut rows: Vec<String> = fixture_rows.lines().map(str::to_owned).collect();
    rows[1] = rows[1].replace(
        r#""at_ms":1770717605000"#,
        r#""at_ms":-9223372036854775808"#,
    );
    rows[2] = rows[2].replace(
        r#""cache_read":5000"#,
        r#""cache_read":18446744073709551615"#,
    );
    let got = import_text("ledger.jsonl", rows.join("\n").as_bytes());
    assert_eq!(limit_warnings(&got), vec![(2, true), (3, true)]);
    assert_eq!(got.stats.requests, rows.len() as u64 - 2);

    let stored = [
        r#"{"type":"trace","id":"s/main/claude-opus-4-6","session":"s","thread":"main","kind":"main","model":"claude-opus-4-6","source":"x"}"#,
        r#"{"type":"request","at_ms":1770717600000,"usage":{"input":10,"cache_write_5m":3000}}"#,
        r#"{"type":"request","at_ms":9223372036854775807,"usage":{"input":10,"cache_read":3000}}"#,
        r#"{"type":"request","at_ms":1770717660000,"usage":{"input":10,"cache_read":3000,"output":4294967297}}"#,
        r#"{"type":"request","at_ms":1770717720000,"usage":{"input":10,"cache_read":3000}}"#,
    ]
    .join("\n");
    let got = import_text("stored.jsonl", stored.as_bytes());
    assert_eq!(limit_warnings(&got), vec![(3, true), (4, true)]);
    assert_eq!(got.stats.requests, 2);
    check_and_replay(&got);
}

/// A stream-json event of run `session` (a turn's `init`, an `assistant` event of response `id`
/// with this `message_start` usage, a tool result, or a `result`).
fn stream_event(session: &str, kind: &str, id: &str, usage: &str, duration_ms: u64) -> String {
    match kind {
        "init" => format!(r#"{{"type":"system","subtype":"init","session_id":"{session}"}}"#),
        "assistant" => format!(
            r#"{{"type":"assistant","session_id":"{session}","parent_tool_use_id":null,"message":{{"id":"{id}","model":"claude-opus-4-6","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
        ),
        "tool" => format!(
            r#"{{"type":"user","session_id":"{session}","parent_tool_use_id":null,"message":{{"content":[{{"type":"tool_result","tool_use_id":"t","content":"ok"}}]}}}}"#
        ),
        _ => format!(
            r#"{{"type":"result","session_id":"{session}","duration_ms":{duration_ms},"usage":{usage}}}"#
        ),
    }
}

/// A `claude -p` log whose turns claim `duration_ms` of 2^64 − 1 (the reader's synthesized
/// clock overflowed at the fifth): each such duration is warned of and taken as none, and
/// every request is kept, in order.
#[test]
fn stream_json_durations_past_the_time_limit_are_taken_as_none() {
    let placeholder = r#"{"input_tokens":1,"cache_read_input_tokens":100,"output_tokens":1}"#;
    let result = r#"{"input_tokens":3,"cache_read_input_tokens":300,"output_tokens":50}"#;
    let mut lines = Vec::new();
    for turn in 0..5 {
        lines.push(stream_event("run", "init", "", "", 0));
        for k in 0..3 {
            let id = format!("msg_{turn}_{k}");
            lines.push(stream_event("run", "assistant", &id, placeholder, 0));
            lines.push(stream_event("run", "tool", "", "", 0));
        }
        lines.push(stream_event("run", "result", "", result, u64::MAX));
    }
    let got = import_text("run.jsonl", lines.join("\n").as_bytes());
    let results: Vec<(u64, bool)> = (1..=5).map(|turn| (turn * 8, true)).collect();
    assert_eq!(limit_warnings(&got), results);
    let requests = &got.traces[0].requests;
    assert_eq!(requests.len(), 15);
    assert!(requests.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
    // Each turn's last request: the result's output less the two placeholders before it.
    assert_eq!(requests[2].usage.output, 48);
    check_and_replay(&got);
}

/// `message_start` outputs of 2^64 − 1 in a turn of several requests: their sum (reconciled
/// with the result's output) overflowed. They are past the limit on tokens: each such event is
/// refused with its line, and the turn's result still closes it; its usage, which counts the
/// refused ones too, is not the kept request's (it was, whole: review of 2026-12).
#[test]
fn stream_json_outputs_past_the_limit_are_refused_by_line() {
    let huge = format!(r#"{{"input_tokens":1,"output_tokens":{}}}"#, u64::MAX);
    let fine = r#"{"input_tokens":1,"cache_read_input_tokens":100,"output_tokens":1}"#;
    let result = r#"{"input_tokens":3,"cache_read_input_tokens":300,"output_tokens":50}"#;
    let lines = [
        stream_event("run", "init", "", "", 0),
        stream_event("run", "assistant", "msg_1", &huge, 0),
        stream_event("run", "tool", "", "", 0),
        stream_event("run", "assistant", "msg_2", &huge, 0),
        stream_event("run", "tool", "", "", 0),
        stream_event("run", "assistant", "msg_3", fine, 0),
        stream_event("run", "result", "", result, 1_000),
    ];
    let got = import_text("run.jsonl", lines.join("\n").as_bytes());
    assert_eq!(limit_warnings(&got), vec![(2, true), (4, true), (7, true)]);
    assert_eq!(got.traces[0].requests.len(), 1);
    assert_eq!(got.traces[0].requests[0].usage.output, 1);
}

/// TraceLab waits of 2^64 − 1 ms saturated the session's clock: every later round was sent at
/// `i64::MAX`, no time apart. Such a wait is warned of and taken as none.
#[test]
fn tracelab_waits_past_the_time_limit_are_taken_as_none() {
    let mut csv =
        String::from("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n");
    for round in 0..4 {
        let wait = if round == 1 { u64::MAX } else { 1_000 };
        let prefix = round * 100;
        csv += &format!("a,{round},{prefix},{},10,{wait}\n", prefix + 100);
    }
    let opts = ImportOptions {
        model: Some("claude-opus-4-6".into()),
        ..ImportOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.csv");
    std::fs::write(&path, csv).unwrap();
    let got = import_paths(&[path], &opts, &mut |_, _| {}).unwrap();
    assert_eq!(limit_warnings(&got), vec![(3, true)]);
    let times: Vec<i64> = got.traces[0].requests.iter().map(|r| r.at_ms).collect();
    assert_eq!(times, vec![0, 1_000, 1_000, 2_000]);
    check_and_replay(&got);
}

/// A Codex count whose cached (or written) tokens exceed its input — OpenAI counts them inside
/// `input_tokens` — was corrected without a word; it is still read as all of the input, now
/// with a warning naming the line.
#[test]
fn a_codex_count_caching_more_than_its_input_is_warned_of() {
    let count = |seconds: u32, usage: &str| {
        format!(
            r#"{{"timestamp":"2026-02-10T10:00:{seconds:02}.000Z","type":"event_msg","payload":{{"type":"token_count","info":{{"last_token_usage":{usage}}}}}}}"#
        )
    };
    let codex = [
        r#"{"timestamp":"2026-02-10T10:00:00.000Z","type":"session_meta","payload":{"id":"cx","model":"gpt-5"}}"#.to_string(),
        count(1, r#"{"input_tokens":100,"cached_input_tokens":500,"output_tokens":1}"#),
        count(2, r#"{"input_tokens":100,"cached_input_tokens":60,"cache_write_input_tokens":50,"output_tokens":1}"#),
        count(3, r#"{"input_tokens":100,"cached_input_tokens":60,"output_tokens":1}"#),
    ]
    .join("\n");
    let got = import_text("rollout-cx.jsonl", codex.as_bytes());
    let warned: Vec<(u64, &str)> = got
        .warnings
        .iter()
        .map(|w| (w.line, &w.message[..w.message.find(' ').unwrap()]))
        .collect();
    assert_eq!(
        warned,
        vec![(2, "cached_input_tokens"), (3, "cache_write_input_tokens")]
    );
    let usages: Vec<(u64, u64, u64)> = got.traces[0]
        .requests
        .iter()
        .map(|r| (r.usage.input, r.usage.cache_write_5m, r.usage.cache_read))
        .collect();
    assert_eq!(usages, vec![(0, 0, 100), (0, 40, 60), (40, 0, 60)]);
}

/// A file of one line past the length limit (64 MiB; here a file with no newline at all) beside
/// a good one: it was taken for an empty file and skipped without a word. It is named now, and
/// the good file is read.
#[test]
fn a_file_of_one_oversized_line_is_named_when_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let good = claude_response(1, 1, r#"{"input_tokens":3,"output_tokens":5}"#) + "\n";
    std::fs::write(dir.path().join("good.jsonl"), good).unwrap();
    let huge = dir.path().join("huge.jsonl");
    std::fs::write(&huge, vec![b'x'; (64 << 20) + 1]).unwrap();
    let got = import(&[dir.path().to_path_buf()]);
    let warned: Vec<(&Path, u64)> = got
        .warnings
        .iter()
        .map(|w| (w.path.as_path(), w.line))
        .collect();
    assert_eq!(warned, vec![(huge.as_path(), 0)]);
    assert_eq!((got.stats.requests, got.stats.files_skipped), (1, 1));
}

/// A response refused at its first line (a thinking block, with a usage past the limit) that
/// went on to write: its later lines are still what the client sends next. The thread skipped
/// them, so the next request counted one block too few and, after the person's interrupt, was
/// flagged `interrupted_thinking` as if the answer had been stopped while only thinking.
#[test]
fn a_refused_response_still_moves_its_thread_on() {
    let line = |n: u32, seconds: i64, block: &str, usage: &str| {
        format!(
            r#"{{"type":"assistant","sessionId":"s","uuid":"a{n}{seconds}","timestamp":"2026-02-10T10:00:{seconds:02}.000Z","message":{{"model":"claude-opus-4-6","id":"msg_{n}","content":[{block}],"usage":{usage}}}}}"#
        )
    };
    let thinking = r#"{"type":"thinking","thinking":"t","signature":"s"}"#;
    let text = r#"{"type":"text","text":"x"}"#;
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    let huge = format!(r#"{{"input_tokens":3,"output_tokens":{}}}"#, u64::MAX);
    let interrupt = r#"{"type":"user","sessionId":"s","uuid":"u2","timestamp":"2026-02-10T10:00:04.000Z","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}"#;
    let file = |first: &str| {
        [
            claude_response(1, 1, fine),
            line(2, 2, thinking, first),
            line(2, 3, text, fine),
            interrupt.to_owned(),
            line(3, 5, text, fine),
        ]
        .join("\n")
    };
    let (kept, refused) = (
        import_text("s.jsonl", file(fine).as_bytes()),
        import_text("s.jsonl", file(&huge).as_bytes()),
    );
    assert_eq!(limit_warnings(&refused), vec![(2, true)]);
    let last = |got: &Import| got.traces[0].requests.last().cloned().unwrap();
    assert!(!last(&kept).interrupted_thinking);
    assert_eq!(last(&refused), last(&kept));
}

/// A `claude -p` turn whose first request is refused: the result's usage is the sum over all
/// the turn's main-thread requests, so the one request kept was given the refused one's
/// input and cache read (and its output) as its own. It keeps its own, with a warning naming
/// the result's line.
#[test]
fn a_stream_json_turn_with_a_refused_request_keeps_the_others_usage() {
    let huge = format!(r#"{{"input_tokens":1,"output_tokens":{}}}"#, u64::MAX);
    let fine = r#"{"input_tokens":1,"cache_read_input_tokens":100,"output_tokens":1}"#;
    let result = r#"{"input_tokens":2,"cache_read_input_tokens":200,"output_tokens":50}"#;
    let lines = [
        stream_event("run", "init", "", "", 0),
        stream_event("run", "assistant", "msg_1", &huge, 0),
        stream_event("run", "tool", "", "", 0),
        stream_event("run", "assistant", "msg_2", fine, 0),
        stream_event("run", "result", "", result, 1_000),
    ];
    let got = import_text("run.jsonl", lines.join("\n").as_bytes());
    let usage = &got.traces[0].requests[0].usage;
    assert_eq!((usage.input, usage.cache_read, usage.output), (1, 100, 1));
    assert_eq!(limit_warnings(&got), vec![(2, true), (5, true)]);
}

/// The stream-json side of [`a_refused_response_still_moves_its_thread_on`]: a response
/// refused at its first event (a thinking block) goes on to write, and the next request counts
/// every block of it, as when it is kept.
#[test]
fn a_refused_stream_json_response_still_moves_its_thread_on() {
    let event = |block: &str, usage: &str| {
        format!(
            r#"{{"type":"assistant","session_id":"run","parent_tool_use_id":null,"message":{{"id":"msg_1","model":"claude-opus-4-6","content":[{block}],"usage":{usage}}}}}"#
        )
    };
    let fine = r#"{"input_tokens":1,"cache_read_input_tokens":100,"output_tokens":1}"#;
    let huge = format!(r#"{{"input_tokens":1,"output_tokens":{}}}"#, u64::MAX);
    let file = |usage: &str| {
        [
            stream_event("run", "init", "", "", 0),
            event(
                r#"{"type":"thinking","thinking":"t","signature":"s"}"#,
                usage,
            ),
            event(r#"{"type":"text","text":"x"}"#, usage),
            stream_event("run", "tool", "", "", 0),
            stream_event("run", "assistant", "msg_2", fine, 0),
        ]
        .join("\n")
    };
    let (kept, refused) = (
        import_text("run.jsonl", file(fine).as_bytes()),
        import_text("run.jsonl", file(&huge).as_bytes()),
    );
    let blocks = |got: &Import| got.traces[0].requests.last().unwrap().blocks_added;
    assert_eq!(blocks(&refused), blocks(&kept));
}

/// Codex 0.57–0.58 log a request's output items after its count. A count refused past the
/// limits left them to the next request: its `reasoning` flag, and its time (dated by the
/// refused request's first output). They are the refused request's, and go with it.
#[test]
fn a_refused_codex_count_keeps_its_output_items() {
    let line = |seconds: u32, kind: &str, payload: &str| {
        format!(
            r#"{{"timestamp":"2026-02-10T10:00:{seconds:02}.000Z","type":"{kind}","payload":{payload}}}"#
        )
    };
    let count = |seconds: u32, total: u64, input: u64| {
        line(
            seconds,
            "event_msg",
            &format!(
                r#"{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{total}}},"last_token_usage":{{"input_tokens":{input},"cached_input_tokens":0,"output_tokens":10}}}}}}"#
            ),
        )
    };
    let codex = [
        line(0, "session_meta", r#"{"id":"cx","model":"gpt-5-codex"}"#),
        line(0, "event_msg", r#"{"type":"user_message"}"#),
        count(3, 1 << 40, 1 << 40),
        line(3, "response_item", r#"{"type":"reasoning"}"#),
        line(
            3,
            "response_item",
            r#"{"type":"function_call","call_id":"c"}"#,
        ),
        line(
            5,
            "response_item",
            r#"{"type":"function_call_output","call_id":"c"}"#,
        ),
        count(9, (1 << 40) + 3_000, 3_000),
    ]
    .join("\n");
    let got = import_text("rollout-cx.jsonl", codex.as_bytes());
    assert_eq!(limit_warnings(&got), vec![(3, true)]);
    let requests: Vec<(i64, bool)> = got.traces[0]
        .requests
        .iter()
        .map(|r| (r.at_ms, r.reasoning))
        .collect();
    assert_eq!(requests, vec![(1_770_717_609_000, false)]);
}

/// A rewind whose first answer is refused (a usage past the limit): the fork it opened has no
/// request of its own in the trace, so its next request is the fork's first. That one named no
/// origin (`forked_from: None`), and the cache model read the fork as a new thread, cold. It
/// names the conversation the fork left, as the refused request would have.
#[test]
fn a_fork_whose_opening_request_is_refused_still_names_its_origin() {
    let user = |uuid: &str, parent: &str, seconds: i64| {
        format!(
            r#"{{"type":"user","sessionId":"s","uuid":"{uuid}","parentUuid":"{parent}","timestamp":"2026-02-10T10:00:{seconds:02}.000Z","message":{{"role":"user","content":"go on"}}}}"#
        )
    };
    let answer = |n: u32, parent: &str, seconds: i64, usage: &str| {
        format!(
            r#"{{"type":"assistant","sessionId":"s","uuid":"a{n}","parentUuid":"{parent}","timestamp":"2026-02-10T10:00:{seconds:02}.000Z","message":{{"model":"claude-opus-4-6","id":"msg_{n}","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
        )
    };
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    let huge = format!(r#"{{"input_tokens":3,"output_tokens":{}}}"#, u64::MAX);
    // a1, then a2 after it; then the person rewinds to a1: a3 forks, a4 follows a3.
    let file = |fork_usage: &str| {
        [
            user("u1", "none", 1),
            answer(1, "u1", 2, fine),
            user("u2", "a1", 3),
            answer(2, "u2", 4, fine),
            user("u3", "a1", 5),
            answer(3, "u3", 6, fork_usage),
            user("u4", "a3", 7),
            answer(4, "u4", 8, fine),
        ]
        .join("\n")
    };
    let (kept, refused) = (
        import_text("s.jsonl", file(fine).as_bytes()),
        import_text("s.jsonl", file(&huge).as_bytes()),
    );
    assert_eq!(limit_warnings(&refused), vec![(6, true)]);
    let origins = |got: &Import| -> Vec<(u64, Option<u64>)> {
        let requests = &got.traces[0].requests;
        requests
            .iter()
            .map(|r| (r.conversation, r.forked_from))
            .collect()
    };
    let (kept, refused) = (origins(&kept), origins(&refused));
    let fork = kept[2].0;
    assert_eq!(
        kept,
        vec![(0, None), (0, None), (fork, Some(0)), (fork, None)]
    );
    assert_eq!(refused, vec![(0, None), (0, None), (fork, Some(0))]);
}

/// A file that opens with torn writes (here 20 lines cut short), then good lines: detection
/// counted the torn lines among the 16 it looks at, found no format and skipped the whole file
/// ("no importable file"). It passes over lines that do not parse now; they are reported by line
/// in the real pass and the rest is read.
#[test]
fn a_file_opening_with_torn_lines_is_still_recognised() {
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    let torn = claude_response(9, 9, fine)[..40].to_owned();
    let mut lines = vec![torn; 20];
    lines.push(claude_response(1, 1, fine));
    lines.push(claude_response(2, 2, fine));
    let got = import_text("s.jsonl", (lines.join("\n") + "\n").as_bytes());
    assert_eq!(got.stats.requests, 2);
    let warned: Vec<(u64, bool)> = got
        .warnings
        .iter()
        .map(|w| (w.line, w.message.starts_with("malformed line")))
        .collect();
    assert_eq!(warned, (1..=20).map(|n| (n, true)).collect::<Vec<_>>());
}

/// Detection's passing over is bounded: a file whose first 1,000 lines do not parse is skipped,
/// and the warning names the bound, so the reader knows why a good line after it was not read.
#[test]
fn detection_gives_up_after_its_bound_and_says_so() {
    let opening = vec!["not json"; 1_000].join("\n") + "\n";
    skipped_past_the_bound(opening, "1000 malformed passed over");
}

/// A file that opens with `opening` (past detection's bound), then a good line, beside a good
/// file: the good file is imported, this one skipped with a warning naming the bound and `why`.
fn skipped_past_the_bound(opening: String, why: &str) {
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.jsonl"), claude_response(1, 1, fine)).unwrap();
    let skipped = dir.path().join("skipped.jsonl");
    std::fs::write(&skipped, opening + &claude_response(2, 2, fine) + "\n").unwrap();
    let got = import(&[dir.path().to_path_buf()]);
    assert_eq!((got.stats.requests, got.stats.files_skipped), (1, 1));
    let warned: Vec<(&Path, u64, &str)> = got
        .warnings
        .iter()
        .map(|w| (w.path.as_path(), w.line, w.message.as_str()))
        .collect();
    let message = format!(
        "no recognised format in the first 1000 lines, where detection stops ({why}), file skipped"
    );
    assert_eq!(warned, vec![(skipped.as_path(), 0, message.as_str())]);
}

/// A folder holding one file that cannot be read (here a link to `/proc/self/mem`, whose first
/// byte gives an I/O error to any reader, root included), beside good ones, one of them in a
/// folder named like a transcript and one whose name is not UTF-8: the unreadable file aborted
/// the whole import with its error. It is skipped with a warning naming it and the cause, counted,
/// and the rest is imported.
#[test]
fn an_unreadable_file_is_skipped_and_the_rest_imported() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    std::fs::write(dir.path().join("a.jsonl"), claude_response(1, 1, fine)).unwrap();
    let unreadable = dir.path().join("b.jsonl");
    std::os::unix::fs::symlink("/proc/self/mem", &unreadable).unwrap();
    std::fs::create_dir(dir.path().join("c.jsonl")).unwrap();
    std::fs::write(
        dir.path().join("c.jsonl/d.jsonl"),
        claude_response(2, 2, fine),
    )
    .unwrap();
    let not_utf8 = std::ffi::OsStr::from_bytes(b"e\xff.jsonl");
    std::fs::write(dir.path().join(not_utf8), claude_response(3, 3, fine)).unwrap();
    let got = import(&[dir.path().to_path_buf()]);
    assert_eq!(
        (
            got.stats.files,
            got.stats.files_unreadable,
            got.stats.requests
        ),
        (3, 1, 3)
    );
    let warned: Vec<(&Path, u64, &str)> = got
        .warnings
        .iter()
        .map(|w| (w.path.as_path(), w.line, w.message.as_str()))
        .collect();
    let cause = std::io::Error::from_raw_os_error(5); // EIO
    let message = format!("could not be read, skipped: {cause}");
    assert_eq!(warned, vec![(unreadable.as_path(), 0, message.as_str())]);
}

/// When no file can be read at all, the import still fails, with an error that says so and
/// names the first file and the cause (not "no importable file" as if they were only of
/// another format).
#[test]
fn an_import_of_only_unreadable_files_fails_naming_one() {
    let dir = tempfile::tempdir().unwrap();
    let unreadable = dir.path().join("b.jsonl");
    std::os::unix::fs::symlink("/proc/self/mem", &unreadable).unwrap();
    std::os::unix::fs::symlink("/proc/self/mem", dir.path().join("c.jsonl")).unwrap();
    let err = import_paths(
        &[dir.path().to_path_buf()],
        &ImportOptions::default(),
        &mut |_, _| {},
    )
    .unwrap_err();
    let cause = std::io::Error::from_raw_os_error(5);
    assert_eq!(
        err.to_string(),
        format!(
            "no importable file: 2 could not be read, the first {}: {cause}",
            unreadable.display()
        )
    );
}

/// A file that opens with more blank lines than detection reads, then good lines: detection
/// stopped at its bound having seen no non-blank line, and the file was taken for an empty one
/// and skipped without a word (its requests lost silently). It is skipped with a warning that
/// names the bound, as a file of malformed lines is.
#[test]
fn a_file_opening_with_blank_lines_past_the_bound_is_skipped_and_says_so() {
    skipped_past_the_bound("\n".repeat(1_000), "all blank");
}

/// A `.jsonl` link in a folder that goes round a loop (it names itself) cannot be read: it was
/// passed over without a word, as a dangling link is. It is named with the cause and counted;
/// a dangling link is still passed over (the file it named is gone, nothing is lost).
#[test]
fn a_link_loop_in_a_folder_is_named_as_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    std::fs::write(dir.path().join("a.jsonl"), claude_response(1, 1, fine)).unwrap();
    let looped = dir.path().join("loop.jsonl");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("dangling.jsonl")).unwrap();
    let got = import(&[dir.path().to_path_buf()]);
    assert_eq!((got.stats.requests, got.stats.files_unreadable), (1, 1));
    let cause = std::io::Error::from_raw_os_error(40); // ELOOP
    let message = format!("could not be read, skipped: {cause}");
    assert_eq!(warned(&got), vec![("loop.jsonl".into(), 0, message)]);
}

/// A named pipe, in a folder (named like a transcript) or given by name (as `<(zcat …)` gives
/// one): the import must not open it (opening a pipe with no writer blocks for ever) and must
/// not pass over it without a word. The one given by name was ignored silently; each is now
/// named as a file that cannot be read.
#[test]
fn a_named_pipe_is_not_opened_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    std::fs::write(dir.path().join("a.jsonl"), claude_response(1, 1, fine)).unwrap();
    let (walked, given) = (dir.path().join("p.jsonl"), dir.path().join("given"));
    for pipe in [&walked, &given] {
        let made = std::process::Command::new("mkfifo").arg(pipe).status();
        assert!(made.unwrap().success());
    }
    let got = import(&[dir.path().to_path_buf(), given]);
    assert_eq!((got.stats.requests, got.stats.files_unreadable), (1, 2));
    let message = "could not be read, skipped: not a file nor a folder (a pipe, socket or device)";
    assert_eq!(
        warned(&got),
        vec![
            ("p.jsonl".into(), 0, message.to_owned()),
            ("given".into(), 0, message.to_owned())
        ]
    );
}

/// A file that vanishes between the listing and its reading (Claude Code removes old sessions
/// as it runs): it is named with the cause and counted, and the rest is imported.
#[test]
fn a_file_removed_after_the_listing_is_named_as_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let fine = r#"{"input_tokens":3,"output_tokens":5}"#;
    std::fs::write(dir.path().join("a.jsonl"), claude_response(1, 1, fine)).unwrap();
    let removed = dir.path().join("b.jsonl");
    std::fs::write(&removed, claude_response(2, 2, fine)).unwrap();
    // The first progress report comes while `a.jsonl` is read, after the listing.
    let got = import_paths(
        &[dir.path().to_path_buf()],
        &ImportOptions::default(),
        &mut |_, _| {
            let _ = std::fs::remove_file(&removed);
        },
    )
    .unwrap();
    assert_eq!((got.stats.requests, got.stats.files_unreadable), (1, 1));
    let cause = std::io::Error::from_raw_os_error(2); // ENOENT
    let message = format!("could not be read, skipped: {cause}");
    assert_eq!(warned(&got), vec![("b.jsonl".into(), 0, message)]);
}

/// Token counts of every wrong shape (negative, fractional, a string, past 2^64, a boolean, an
/// array): each line is refused with a message naming the value, the good line after them is
/// kept, and `check-cache` and `replay` run on the rest. This held before (review, 2026-12):
/// the test keeps it so.
#[test]
fn token_counts_of_every_wrong_shape_are_refused_by_line() {
    let shapes = [
        "-1",
        "1.5",
        r#""3""#,
        "18446744073709551616",
        "1e30",
        "true",
        "[]",
    ];
    let mut lines: Vec<String> = shapes
        .iter()
        .enumerate()
        .map(|(n, v)| {
            let usage = format!(r#"{{"input_tokens":{v},"output_tokens":5}}"#);
            claude_response(n as u32 + 1, n as i64 + 1, &usage)
        })
        .collect();
    lines.push(claude_response(
        9,
        9,
        r#"{"input_tokens":3,"output_tokens":5}"#,
    ));
    let got = import_text("s.jsonl", (lines.join("\n") + "\n").as_bytes());
    let refused: Vec<(u64, bool)> = got
        .warnings
        .iter()
        .map(|w| {
            (
                w.line,
                w.message.starts_with("malformed line, skipped: invalid"),
            )
        })
        .collect();
    assert_eq!(refused, (1..=7).map(|n| (n, true)).collect::<Vec<_>>());
    assert_eq!(got.stats.requests, 1);
    check_and_replay(&got);
}
