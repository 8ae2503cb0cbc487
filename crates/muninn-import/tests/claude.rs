//! The Claude Code JSONL importer against hand-made transcripts.

use super::*;
use pretty_assertions::assert_eq;

/// The whole fixture project: merge by id, synthetic and duplicate drops, threads per model,
/// sub-agents in both file layouts, a compaction thread, boundary/compacted/blocks flags.
#[test]
fn project_imports_to_these_traces() {
    let got = import(&[fixture("claude")]);
    assert_eq!(got.traces, project_traces());
    assert_eq!(got.warnings, vec![]);
    assert_eq!(got.stats.files, 6);
    assert_eq!(got.stats.requests, 11);
    assert_eq!(got.stats.duplicates_dropped, 1);
    assert_eq!(got.stats.synthetic_dropped, 1);
}

/// The traces of the fixture project, in the importer's order.
fn project_traces() -> Vec<Trace> {
    let p = |name: &str| fixture("claude/project").join(name);
    use ThreadKind::*;
    vec![
        // A model switch mid-session gives a second trace of the main thread.
        trace(
            "s1",
            "main",
            Main,
            HAIKU,
            p("s1.jsonl"),
            vec![request(63, usage(10, 3000, 0, 0, 5), true, false, 3)],
        ),
        trace("s1", "main", Main, OPUS, p("s1.jsonl"), s1_main_on_opus()),
        trace(
            "s1",
            "a1",
            Subagent,
            SONNET,
            p("s1__agent-a1.jsonl"),
            vec![
                request(32, usage(3, 0, 12000, 0, 90), true, false, 1),
                TraceRequest {
                    tool_results: muninn_core::trace::ToolResults {
                        tokens: 194,
                        uses: 1,
                    },
                    // The latest tool-result line's time.
                    tool_results_at_ms: Some(at(34)),
                    ..request(36, usage(1, 0, 800, 12000, 200), false, false, 3)
                },
            ],
        ),
        trace(
            "s1",
            "acompact-c1",
            Compaction,
            OPUS,
            p("s1__agent-acompact-c1.jsonl"),
            vec![request(
                112,
                usage(5, 0, 2000, 140000, 3000),
                true,
                false,
                1,
            )],
        ),
        trace(
            "s2",
            "main",
            Main,
            OPUS,
            p("s2.jsonl"),
            vec![request(1002, usage(3, 7000, 0, 0, 12), true, false, 1)],
        ),
        // Real Claude Code layout: no agentId on the lines, the id comes from the file name.
        trace(
            "s2",
            "b2",
            Subagent,
            HAIKU,
            p("s2/subagents/agent-b2.jsonl"),
            vec![request(1012, usage(4, 5000, 0, 0, 50), true, false, 1)],
        ),
        // The resumed session: s2's copied request dropped, only the new one kept.
        trace(
            "s3",
            "main",
            Main,
            OPUS,
            p("s3.jsonl"),
            vec![request(2002, usage(3, 200, 0, 7000, 9), true, false, 2)],
        ),
    ]
}

/// s1's main thread on Opus: a response merged from its lines, a tool loop, a request after a
/// compaction and one after a user's text and image.
fn s1_main_on_opus() -> Vec<TraceRequest> {
    vec![
        // Four lines of one response: earliest time, last line's usage; its
        // first line is a thinking block.
        TraceRequest {
            reasoning: true,
            ..request(3, usage(3, 0, 9000, 1000, 120), true, false, 1)
        },
        // Tool loop: not a boundary; 4 assistant blocks + 2 tool results since
        // (100 one-letter lines each: as blocks, a letter and an escaped newline
        // `\n` are 2 tokens a line, 203 with the block's keys, less the placeholder
        // block's 9 tokens: 194 each).
        TraceRequest {
            tool_results: muninn_core::trace::ToolResults {
                tokens: 388,
                uses: 2,
            },
            // The latest tool-result line's time.
            tool_results_at_ms: Some(at(6)),
            ..request(8, usage(1, 0, 500, 10000, 30), false, false, 6)
        },
        // After compact_boundary + summary: compacted, summary is not a human turn.
        request(125, usage(3, 0, 4000, 0, 8), false, true, 1),
        // Text + image blocks from the user: a boundary.
        request(203, usage(2, 0, 100, 13000, 4), true, false, 4),
    ]
}

#[test]
fn main_threads_only_without_subagents() {
    let opts = ImportOptions {
        include_subagents: false,
        ..ImportOptions::default()
    };
    let got = import_paths(&[fixture("claude")], &opts, &mut |_, _| {}).unwrap();
    let threads: Vec<(&str, &str)> = got
        .traces
        .iter()
        .map(|t| (t.session.as_str(), t.thread.as_str()))
        .collect();
    assert_eq!(
        threads,
        vec![
            ("s1", "main"),
            ("s1", "main"),
            ("s2", "main"),
            ("s3", "main")
        ]
    );
}

/// The same file under two names: the second copy contributes nothing.
#[test]
fn duplicates_across_files_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("claude/project/s1.jsonl");
    std::fs::copy(&source, dir.path().join("a.jsonl")).unwrap();
    std::fs::copy(&source, dir.path().join("b.jsonl")).unwrap();
    let got = import(&[dir.path().to_path_buf()]);
    assert_eq!(got.stats.requests, 5);
    assert_eq!(got.stats.duplicates_dropped, 5);
    assert!(got.traces.iter().all(|t| t.source.ends_with("a.jsonl")));
}

/// A sub-agent that begins with a copy of the main conversation (Claude Code's side question,
/// `<session>/subagents/agent-aside_question-*.jsonl`, the same responses marked
/// `isSidechain`): the session's own file wins, so the main thread keeps its requests,
/// although the folder `s1/` sorts before `s1.jsonl`.
#[test]
fn a_sub_agent_copying_the_main_conversation_leaves_it_to_the_main_thread() {
    // Laid out in a folder of its own, in one under a folder that happens to be named
    // `subagents` (found in review: only the file's own folder may say it is a sub-agent's), and
    // with both files named on the command line.
    for (nest, explicit) in [("", false), ("subagents/project", false), ("", true)] {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join(nest);
        let source = fixture("claude/project/s1.jsonl");
        let aside = dir.join("s1/subagents");
        std::fs::create_dir_all(&aside).unwrap();
        std::fs::copy(&source, dir.join("s1.jsonl")).unwrap();
        let copied = std::fs::read_to_string(&source).unwrap().replace(
            "\"isSidechain\":false",
            "\"isSidechain\":true,\"agentId\":\"aside_question-q1\"",
        );
        let agent = aside.join("agent-aside_question-q1.jsonl");
        std::fs::write(&agent, copied).unwrap();
        let got = match explicit {
            true => import(&[agent, dir.join("s1.jsonl")]),
            false => import(&[dir]),
        };
        let threads: Vec<(&str, usize)> = got
            .traces
            .iter()
            .map(|t| (t.thread.as_str(), t.requests.len()))
            .collect();
        assert_eq!(
            threads,
            vec![("main", 1), ("main", 4)],
            "{nest:?} {explicit}"
        );
        assert_eq!(got.stats.duplicates_dropped, 5);
    }
}

/// Malformed, invalid UTF-8, missing id and torn lines are warnings with file:line; the good
/// lines around them still import.
#[test]
fn broken_lines_are_reported_and_skipped() {
    let path = fixture("broken/broken.jsonl");
    let got = import(std::slice::from_ref(&path));
    assert_eq!(
        got.traces,
        vec![trace(
            "br",
            "main",
            ThreadKind::Main,
            OPUS,
            path.clone(),
            vec![
                request(2, usage(1, 100, 0, 0, 1), true, false, 1),
                request(6, usage(2, 0, 0, 100, 1), true, false, 2),
            ]
        )]
    );
    let lines: Vec<(u64, &str)> = got
        .warnings
        .iter()
        .map(|w| {
            assert_eq!(w.path, path);
            (w.line, w.message.split(',').next().unwrap())
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            (3, "malformed line"),
            (4, "malformed line"),
            (5, "assistant line without message.id"),
            (9, "torn last line (no newline at end of file)"),
        ]
    );
    assert_eq!(got.stats.lines, 9);
}
