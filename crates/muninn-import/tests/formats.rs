//! The formats users have besides transcripts and rollouts: `claude -p` stream-json output,
//! Messages API request/response logs and TraceLab's per-round CSV. The stream-json fixture is
//! the real Claude Code CLI 2.1.332's stdout against `muninn sim-api` (two runs, concatenated);
//! the API log is `muninn sim-api`'s answers to Claude Code-shaped requests with the exact
//! blocks and breakpoints (a sub-agent, a gap past the TTL, a compaction).

use super::*;
use muninn_core::validate::{ReadClass, ValidateOptions, validate};
use muninn_import::InputFormat;
use pretty_assertions::assert_eq;
use std::collections::BTreeSet;

/// `rel` copied into a temporary directory with its last line cut in half (no newline at the
/// end), as a writer killed mid-line leaves it. Returns the directory, the path and the number
/// of the torn line.
fn torn_copy(rel: &str) -> (tempfile::TempDir, PathBuf, u64) {
    let bytes = std::fs::read(fixture(rel)).unwrap();
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let last_start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let cut = last_start + (body.len() - last_start) / 2;
    let lines = body[..last_start].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let dir = tempfile::tempdir().unwrap();
    let name = Path::new(rel).file_name().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, &body[..cut]).unwrap();
    (dir, path, lines)
}

/// (line, message starts with) of every warning.
fn warned(import: &Import) -> Vec<(u64, String)> {
    import
        .warnings
        .iter()
        .map(|w| (w.line, w.message.chars().take(24).collect()))
        .collect()
}

fn with_format(paths: &[PathBuf], format: InputFormat) -> Result<Import, ImportError> {
    let opts = ImportOptions {
        format: Some(format),
        ..ImportOptions::default()
    };
    import_paths(paths, &opts, &mut |_, _| {})
}

const RUN_A: &str = "87e7967b-c948-46a7-b42c-7a801ebf61f0";
const RUN_B: &str = "9111484f-8cda-4497-9984-c8c2e3ae426b";
const CLI_MODEL: &str = "claude-opus-4-6";

/// What the stream-json fixture holds: every turn's usage as its `result` reported it, times
/// synthesized from `duration_ms` (2834, 1230, 3745 ms), one block for each turn's prompt plus
/// the previous response's block.
fn stream_json_traces(source: &Path, last_output: u64) -> Vec<Trace> {
    let request = |at_ms, usage, blocks_added| TraceRequest {
        at_ms,
        usage,
        boundary: true,
        blocks_added,
        ..Default::default()
    };
    vec![
        trace(
            RUN_A,
            "main",
            ThreadKind::Main,
            CLI_MODEL,
            source.to_path_buf(),
            vec![
                request(0, usage(0, 10_886, 0, 0, 74), 1),
                request(2_834, usage(0, 119, 0, 10_886, 53), 2),
            ],
        ),
        trace(
            RUN_B,
            "main",
            ThreadKind::Main,
            CLI_MODEL,
            source.to_path_buf(),
            vec![
                request(4_064, usage(0, 386, 0, 10_503, 74), 1),
                request(7_809, usage(0, 116, 0, 10_889, last_output), 2),
            ],
        ),
    ]
}

#[test]
fn stream_json_runs_become_one_trace_each() {
    let path = fixture("stream-json/runs.jsonl");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(got.warnings, vec![]);
    assert_eq!(got.traces, stream_json_traces(&path, 50));
    // The same file named explicitly as stream-json reads the same.
    let forced = with_format(std::slice::from_ref(&path), InputFormat::StreamJson).unwrap();
    assert_eq!(forced.traces, got.traces);
}

/// A run killed mid-line: the torn line is reported with its number, the turn it cut short is
/// reported, and every request before it is kept (the last with its `message_start` usage).
#[test]
fn torn_stream_json_keeps_what_came_before() {
    let (_dir, path, torn) = torn_copy("stream-json/runs.jsonl");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(
        warned(&got),
        vec![
            (torn, "torn last line (no newli".to_string()),
            (0, "the log ends inside a tu".to_string()),
        ]
    );
    assert_eq!(got.traces, stream_json_traces(&path, 1));
}

/// A stream-json answer that thought (a `thinking` or `redacted_thinking` event among its
/// blocks) marks its request `reasoning`, as the transcript reader does — the cache model's
/// thinking-drop rule reads that flag — and its every block joins the next request.
#[test]
fn stream_json_marks_the_answers_that_thought() {
    let path = fixture("stream-json/thinking.jsonl");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(got.warnings, vec![]);
    let flags: Vec<(bool, bool, u32)> = got
        .traces
        .iter()
        .flat_map(|t| &t.requests)
        .map(|r| (r.boundary, r.reasoning, r.blocks_added))
        .collect();
    assert_eq!(
        flags,
        vec![(true, true, 1), (true, false, 3), (true, true, 2)]
    );
}

const API_SESSION: &str = "user_fixture_account__session_5e55a0f1-0000-4000-8000-000000000001";

/// Threads come from the heads, compactions and blocks from the exact messages.
#[test]
fn api_log_reads_threads_and_blocks_from_the_exact_messages() {
    let path = fixture("api-log/proxy.jsonl");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(got.warnings, vec![]);
    let shape = |t: &Trace| -> Vec<(bool, bool, u32)> {
        t.requests
            .iter()
            .map(|r| (r.boundary, r.compacted, r.blocks_added))
            .collect()
    };
    let ids: Vec<(&str, &str, ThreadKind)> = got
        .traces
        .iter()
        .map(|t| (t.session.as_str(), t.model.as_str(), t.kind))
        .collect();
    assert_eq!(
        ids,
        vec![
            (API_SESSION, "claude-opus-5-5", ThreadKind::Main),
            (API_SESSION, "claude-opus-5-5", ThreadKind::Subagent),
        ]
    );
    let (main, agent) = (&got.traces[0], &got.traces[1]);
    assert_eq!(main.thread, "main");
    assert_eq!(
        shape(main),
        vec![
            (true, false, 1),
            (true, false, 2),
            (true, false, 2),
            (true, false, 2),
            (true, false, 2),
            // The summary replaced the conversation: a rewrite, all of its blocks new.
            (true, true, 1),
            (true, false, 2),
        ]
    );
    assert_eq!(shape(agent), vec![(true, false, 1), (true, false, 2)]);
    assert_eq!(
        main.requests[0].usage,
        usage(0, 2_004, 0, 0, 66),
        "the first request's usage as the response said"
    );
    // Nine minutes between the third and fourth main requests: the TTL gap is in the times.
    let gap = main.requests[3].at_ms - main.requests[2].at_ms;
    assert!((540_000..541_000).contains(&gap), "{gap} ms");
}

/// An API log's tool results are counted as the Claude Code reader counts a transcript's (the
/// same exchange as `claude-tools/t1.jsonl`), so `mask` is priced on API logs too: the
/// `tool_result` blocks of the messages a request added — each block as the cache model counts
/// it less the same block holding the placeholder, its `cache_control` marker aside — and for
/// a rewrite of the conversation, those of all its messages. Hand-written fixture.
#[test]
fn api_log_tool_results_are_sized() {
    use muninn_core::trace::ToolResults;
    let got = import(&[fixture("api-log/tools.jsonl")]);
    assert_eq!(got.warnings, vec![]);
    let requests: Vec<(bool, bool, ToolResults)> = got
        .traces
        .iter()
        .flat_map(|t| &t.requests)
        .map(|r| (r.boundary, r.compacted, r.tool_results))
        .collect();
    assert_eq!(
        requests,
        vec![
            (true, false, ToolResults::default()),
            // "Hello, world!" in quotes is 8 tokens, the placeholder's 9: a clear would remove
            // nothing, but the use counts.
            (false, false, ToolResults { tokens: 0, uses: 1 }),
            // `[{"text":"abcd efgh","type":"text"}]` is 20 tokens, 11 more than the placeholder;
            // "x" (3) less than it. The first result, sent again, is not counted again.
            (
                false,
                false,
                ToolResults {
                    tokens: 11,
                    uses: 2
                }
            ),
            (true, false, ToolResults::default()),
            // The summary replaced the conversation: its tool result is new.
            (
                false,
                true,
                ToolResults {
                    tokens: 11,
                    uses: 1
                }
            ),
        ]
    );
}

/// An API-log response with a `thinking` or `redacted_thinking` block marks its request
/// `reasoning` (the cache model's thinking-drop rule reads it), as the transcript reader does.
#[test]
fn an_api_log_answer_that_thought_is_marked() {
    let line = |n: u32, ts: &str, answer: &str| {
        format!(
            r#"{{"timestamp":"{ts}","session_id":"s","request":{{"model":"claude-opus-4-6","max_tokens":64,"messages":[{{"role":"user","content":"q{n}"}}]}},"response":{{"type":"message","id":"msg_api_think_{n}","model":"claude-opus-4-6","content":{answer},"usage":{{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5}}}}}}"#
        )
    };
    let lines = [
        line(
            1,
            "2026-12-01T10:00:00Z",
            r#"[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a"}]"#,
        ),
        line(2, "2026-12-01T10:00:10Z", r#"[{"type":"text","text":"b"}]"#),
        line(
            3,
            "2026-12-01T10:00:20Z",
            r#"[{"type":"redacted_thinking","data":"x"},{"type":"text","text":"c"}]"#,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let got = with_format(std::slice::from_ref(&path), InputFormat::ApiLog).unwrap();
    assert_eq!(got.warnings, vec![]);
    let reasoning: Vec<bool> = got
        .traces
        .iter()
        .flat_map(|t| &t.requests)
        .map(|r| r.reasoning)
        .collect();
    assert_eq!(reasoning, vec![true, false, true]);
}

/// The cache model, given what the API log carries, against the simulator's answers: a cold
/// start, warm appends, a sub-agent reading only the shared tools head, a gap past the TTL, and a
/// compaction reading the system head. Every read but two is predicted; the two are each head's
/// first sighting — `check-cache` learns a head's size only from an earlier read of it (the
/// normalised trace keeps no breakpoint positions), and it is strictly causal.
#[test]
fn check_cache_agrees_with_api_log_usage() {
    use muninn_core::validate::Disagreement;
    let got = import(&[fixture("api-log/proxy.jsonl")]);
    let report = validate(&got.traces, &ValidateOptions::default());
    assert_eq!(report.rows.len(), 9);
    let classes: BTreeSet<ReadClass> = report.rows.iter().map(|r| r.recorded_class).collect();
    assert_eq!(
        classes,
        BTreeSet::from([ReadClass::Prefix, ReadClass::Head, ReadClass::None])
    );
    let mut wrong: Vec<(ThreadKind, usize, Option<Disagreement>)> = report
        .rows
        .iter()
        .filter(|r| !r.cache_model.agree)
        .map(|r| (r.kind, r.index, r.cache_model.disagreement))
        .collect();
    wrong.sort();
    assert_eq!(
        wrong,
        vec![
            (ThreadKind::Main, 5, Some(Disagreement::HeadUnknown)),
            (
                ThreadKind::Subagent,
                0,
                Some(Disagreement::ExternalWarmHead)
            ),
        ]
    );
    // Every other request's read is predicted to the token.
    for r in report.rows.iter().filter(|r| r.cache_model.agree) {
        assert_eq!(
            r.cache_model.read, r.recorded_read,
            "{} #{}",
            r.trace, r.index
        );
    }
}

#[test]
fn torn_api_log_keeps_what_came_before() {
    let (_dir, path, torn) = torn_copy("api-log/proxy.jsonl");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(
        warned(&got),
        vec![(torn, "torn last line (no newli".to_string())]
    );
    assert_eq!(got.stats.requests, 8);
    let whole = import(&[fixture("api-log/proxy.jsonl")]);
    let main = |i: &Import| i.traces[0].requests.clone();
    assert_eq!(main(&got), main(&whole)[..6].to_vec());
}

fn tracelab_traces(source: &Path, model: &str) -> Vec<Trace> {
    let round = |at_ms, read, written, output, boundary, compacted| TraceRequest {
        at_ms,
        usage: usage(0, written, 0, read, output),
        boundary,
        compacted,
        blocks_added: 0,
        ..Default::default()
    };
    vec![
        trace(
            "agent-7",
            "main",
            ThreadKind::Main,
            model,
            source.to_path_buf(),
            vec![
                round(0, 0, 6_200, 310, true, false),
                round(1_800, 6_510, 890, 120, false, false),
                round(43_800, 7_520, 580, 405, false, false),
                // Its prefix (3,000) is shorter than the previous prompt: a rewrite.
                round(43_800, 3_000, 1_200, 200, false, true),
            ],
        ),
        trace(
            "web,1",
            "main",
            ThreadKind::Main,
            model,
            source.to_path_buf(),
            vec![
                round(0, 0, 5_100, 90, true, false),
                round(0, 5_190, 410, 60, false, false),
            ],
        ),
    ]
}

#[test]
fn tracelab_rounds_become_requests() {
    let path = fixture("tracelab/rounds.csv");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(got.warnings, vec![]);
    assert_eq!(got.traces, tracelab_traces(&path, "unknown"));
    let opts = ImportOptions {
        model: Some("claude-sonnet-4-6".into()),
        ..ImportOptions::default()
    };
    let named = import_paths(std::slice::from_ref(&path), &opts, &mut |_, _| {}).unwrap();
    assert_eq!(named.traces, tracelab_traces(&path, "claude-sonnet-4-6"));
}

/// A malformed row in the middle and a torn last row are each reported at their line; every
/// other round is kept.
#[test]
fn damaged_tracelab_rows_are_skipped_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rounds.csv");
    let text = std::fs::read_to_string(fixture("tracelab/rounds.csv")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(3, "agent-7,9,lots,100,1,0");
    let mut damaged = lines.join("\n");
    damaged.truncate(damaged.len() - 6); // "agent-7,3,3000,4200" (no output, no wait, no newline)
    std::fs::write(&path, &damaged).unwrap();
    let got = import(std::slice::from_ref(&path));
    assert_eq!(
        warned(&got),
        vec![
            (4, "malformed row, skipped: ".to_string()),
            (8, "malformed row (torn last".to_string()),
        ]
    );
    let mut expected = tracelab_traces(&path, "unknown");
    expected[0].requests.pop();
    assert_eq!(got.traces, expected);
}

/// `--input-format` reads a file as the format named, a file of another format too (as that
/// format: here no request, see `detection::`), and each format's name parses back.
#[test]
fn a_forced_format_reads_every_file_as_it() {
    let csv = fixture("tracelab/rounds.csv");
    let got = with_format(std::slice::from_ref(&csv), InputFormat::TraceLab).unwrap();
    assert_eq!(got.stats.requests, 6);
    let other = with_format(&[csv], InputFormat::StreamJson).unwrap();
    assert_eq!((other.stats.files, other.stats.requests), (1, 0));
    let names: Vec<InputFormat> = InputFormat::ALL
        .iter()
        .map(|f| f.name().parse().unwrap())
        .collect();
    assert_eq!(names, InputFormat::ALL.to_vec());
    assert!("csv".parse::<InputFormat>().is_err());
}

/// A `claude -p` stream-json log sizes the tool results between two requests the way the
/// transcript reader does: the request after a `user` event of `tool_result` blocks carries
/// their count and tokens, and is a tool-loop step, not a boundary.
#[test]
fn stream_json_tool_results_are_sized() {
    let usage = |w: u64, r: u64| {
        format!(
            r#"{{"input_tokens":0,"cache_creation_input_tokens":{w},"cache_read_input_tokens":{r},"cache_creation":{{"ephemeral_5m_input_tokens":{w},"ephemeral_1h_input_tokens":0}},"output_tokens":5}}"#
        )
    };
    let sid = "5e55a0f1-0000-4000-8000-00000000aaaa";
    let lines = [
        format!(
            r#"{{"type":"system","subtype":"init","session_id":"{sid}","model":"claude-opus-4-6","tools":["Bash"]}}"#
        ),
        format!(
            r#"{{"type":"assistant","message":{{"id":"msg_t_1","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{{"type":"tool_use","id":"toolu_1","name":"Bash","input":{{}}}}],"usage":{}}},"parent_tool_use_id":null,"session_id":"{sid}"}}"#,
            usage(9000, 0)
        ),
        format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_1","type":"tool_result","content":"Hello, world!"}}]}},"parent_tool_use_id":null,"session_id":"{sid}"}}"#
        ),
        format!(
            r#"{{"type":"assistant","message":{{"id":"msg_t_2","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{{"type":"text","text":"done"}}],"usage":{}}},"parent_tool_use_id":null,"session_id":"{sid}"}}"#,
            usage(40, 9000)
        ),
        format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"duration_ms":2000,"session_id":"{sid}","usage":{}}}"#,
            usage(9040, 9000)
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let got = with_format(std::slice::from_ref(&path), InputFormat::StreamJson).unwrap();
    assert_eq!(got.warnings, vec![]);
    let requests: Vec<_> = got.traces.iter().flat_map(|t| &t.requests).collect();
    assert_eq!(requests.len(), 2, "{:?}", got.traces);
    assert_eq!(
        requests
            .iter()
            .map(|r| (r.boundary, r.tool_results))
            .collect::<Vec<_>>(),
        vec![
            (true, muninn_core::trace::ToolResults::default()),
            (
                false,
                // "Hello, world!" is no larger than the placeholder (see
                // `claude_code_tool_results_are_sized`): nothing to clear, one use.
                muninn_core::trace::ToolResults { tokens: 0, uses: 1 }
            ),
        ]
    );
}
