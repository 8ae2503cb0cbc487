//! The one integration-test binary of `muninn-import`: every format against hand-made fixtures
//! in `tests/fixtures/` (modelled on real files, small enough to check by hand), a property test
//! that damaged input never panics, and a sanity check against the real Claude Code transcripts
//! in `../shared/traces/claude-code` when that folder is present.

#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed unwrap is a failed test.

mod bad_input;
mod detection;
mod fuzz;
mod large_lines;
mod live_files;

use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use muninn_import::{
    Import, ImportError, ImportOptions, import_paths, read_trace_file, write_traces,
};
use std::path::{Path, PathBuf};

/// 2026-02-10T10:00:00Z, the fixtures' time origin.
const T0: i64 = 1_770_717_600_000;

fn at(seconds: i64) -> i64 {
    T0 + seconds * 1000
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The warnings of an import: (file name, line, message).
fn warned(got: &Import) -> Vec<(String, u64, String)> {
    got.warnings
        .iter()
        .map(|w| {
            let name = w.path.file_name().unwrap().to_string_lossy().into_owned();
            (name, w.line, w.message.clone())
        })
        .collect()
}

fn import(paths: &[PathBuf]) -> Import {
    import_paths(paths, &ImportOptions::default(), &mut |_, _| {}).unwrap()
}

fn usage(input: u64, w5m: u64, w1h: u64, read: u64, output: u64) -> Usage {
    Usage {
        input,
        cache_write_5m: w5m,
        cache_write_1h: w1h,
        cache_read: read,
        output,
    }
}

fn request(
    seconds: i64,
    usage: Usage,
    boundary: bool,
    compacted: bool,
    blocks: u32,
) -> TraceRequest {
    TraceRequest {
        at_ms: at(seconds),
        usage,
        boundary,
        compacted,
        blocks_added: blocks,
        ..Default::default()
    }
}

fn trace(
    session: &str,
    thread: &str,
    kind: ThreadKind,
    model: &str,
    source: PathBuf,
    requests: Vec<TraceRequest>,
) -> Trace {
    Trace {
        id: format!("{session}/{thread}/{model}"),
        session: session.into(),
        thread: thread.into(),
        kind,
        model: model.into(),
        source: source.display().to_string(),
        requests,
    }
}

mod formats;
mod shapes;

const OPUS: &str = "claude-opus-4-6";
const HAIKU: &str = "claude-haiku-4-5-20251001";
const SONNET: &str = "claude-sonnet-4-5-20250929";

mod claude;

mod codex {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn rollout_imports_one_request_per_new_token_count() {
        let path = fixture("codex");
        let got = import(std::slice::from_ref(&path));
        let file = fixture("codex/sessions/2026/02/10/rollout-2026-02-10T10-00-00-cx1.jsonl");
        use ThreadKind::Main;
        assert_eq!(
            got.traces,
            vec![
                // After `compacted` and a model switch.
                trace(
                    "cx1",
                    "main",
                    Main,
                    "gpt-5",
                    file.clone(),
                    vec![request(63, usage(300, 0, 0, 0, 5), true, true, 0,)]
                ),
                trace(
                    "cx1",
                    "main",
                    Main,
                    "gpt-5-codex",
                    file,
                    vec![
                        // at = first output item; cached split out; reasoning already inside
                        // output; a `reasoning` item among the output marks the request.
                        TraceRequest {
                            reasoning: true,
                            ..request(3, usage(800, 0, 0, 200, 50), true, false, 0)
                        },
                        // A tool loop step; total_tokens shows reasoning was counted separately.
                        request(8, usage(500, 0, 0, 1000, 40), false, false, 0),
                    ]
                ),
            ]
        );
        assert_eq!(got.warnings, vec![]);
    }
}

mod ledger {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn export_imports_one_trace_per_mind_role_model() {
        let path = fixture("ledger/ledger.jsonl");
        let got = import(std::slice::from_ref(&path));
        use ThreadKind::Mind;
        assert_eq!(
            got.traces,
            vec![
                trace(
                    "huginn",
                    "persona",
                    Mind,
                    OPUS,
                    path.clone(),
                    vec![
                        request(0, usage(3, 0, 5000, 0, 100), true, false, 0),
                        request(30, usage(2, 0, 300, 5000, 80), false, false, 0),
                        // A new segment is a rewrite of the conversation.
                        request(4000, usage(3, 0, 6000, 0, 90), true, true, 0),
                    ]
                ),
                trace(
                    "huginn",
                    "self",
                    Mind,
                    SONNET,
                    path,
                    vec![request(5, usage(4, 2000, 0, 0, 10), true, false, 0,)]
                ),
            ]
        );
    }
}

mod ledger_compaction;

mod stored {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Everything the other formats produce survives the stored format unchanged.
    #[test]
    fn round_trip() {
        let original = import(&[fixture("claude"), fixture("codex"), fixture("ledger")]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traces.jsonl");
        let mut out = Vec::new();
        write_traces(&mut out, &original.traces).unwrap();
        std::fs::write(&path, &out).unwrap();

        let read = read_trace_file(&path).unwrap();
        assert_eq!(read.traces, original.traces);
        assert_eq!(read.warnings, vec![]);
        // Detected as the stored format by the general entry point too.
        assert_eq!(import(&[path]).traces, original.traces);
    }

    #[test]
    fn header_format_is_as_documented() {
        let t = trace(
            "s",
            "main",
            ThreadKind::Main,
            OPUS,
            PathBuf::from("x.jsonl"),
            vec![request(0, usage(3, 0, 13835, 11515, 13), true, false, 0)],
        );
        let mut out = Vec::new();
        muninn_import::write_trace(&mut out, &t).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                r#"{"type":"trace","id":"s/main/claude-opus-4-6","session":"s","thread":"main","kind":"main","model":"claude-opus-4-6","source":"x.jsonl"}"#,
                "\n",
                r#"{"type":"request","at_ms":1770717600000,"usage":{"input":3,"cache_write_5m":0,"cache_write_1h":13835,"cache_read":11515,"output":13},"boundary":true}"#,
                "\n"
            )
        );
    }

    #[test]
    fn other_formats_are_not_read_as_stored() {
        let got = read_trace_file(&fixture("ledger/ledger.jsonl")).unwrap();
        assert_eq!(got.traces, vec![]);
        assert_eq!(got.warnings.len(), 1);
    }
}

mod api {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn missing_path_is_an_io_error_naming_it() {
        let missing = fixture("no/such/dir");
        let err = import_paths(
            std::slice::from_ref(&missing),
            &ImportOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
        assert!(
            matches!(&err, ImportError::Io { path, .. } if *path == missing),
            "{err}"
        );
    }

    #[test]
    fn nothing_importable_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.jsonl"), "{\"hello\":1}\nnot json\n").unwrap();
        std::fs::write(dir.path().join("empty.jsonl"), "").unwrap();
        std::fs::write(dir.path().join("other.txt"), "{\"type\":\"user\"}\n").unwrap();
        let err = import_paths(
            &[dir.path().to_path_buf()],
            &ImportOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
        assert!(matches!(err, ImportError::NoImportableFile { .. }), "{err}");
    }

    /// Empty files are skipped quietly; files of another shape are skipped with a warning.
    #[test]
    fn skipped_files_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty.jsonl"), "\n\n").unwrap();
        std::fs::write(dir.path().join("notes.jsonl"), "{\"hello\":1}\n").unwrap();
        std::fs::copy(
            fixture("ledger/ledger.jsonl"),
            dir.path().join("ledger.jsonl"),
        )
        .unwrap();
        let got = import(&[dir.path().to_path_buf()]);
        assert_eq!((got.stats.files, got.stats.files_skipped), (1, 2));
        let warned: Vec<(PathBuf, u64)> = got
            .warnings
            .iter()
            .map(|w| (w.path.clone(), w.line))
            .collect();
        assert_eq!(warned, vec![(dir.path().join("notes.jsonl"), 0)]);
    }

    #[test]
    fn progress_ends_at_the_total() {
        let mut last = (0, 0);
        let got = import_paths(
            &[fixture("claude")],
            &ImportOptions::default(),
            &mut |done, total| {
                assert!(done <= total);
                last = (done, total);
            },
        )
        .unwrap();
        assert_eq!(last, (got.stats.bytes, got.stats.bytes));
    }
}

mod damaged {
    use super::*;
    use proptest::prelude::*;

    /// An edit to the bytes of a file.
    #[derive(Debug, Clone)]
    enum Edit {
        /// Split a line.
        Newline(usize),
        /// Overwrite a byte (possibly with invalid UTF-8).
        Byte(usize, u8),
        /// Remove a range.
        Cut(usize, usize),
    }

    fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
        let len = bytes.len().max(1);
        match *edit {
            Edit::Newline(i) => bytes.insert(i % (bytes.len() + 1), b'\n'),
            Edit::Byte(i, b) if !bytes.is_empty() => bytes[i % len] = b,
            Edit::Cut(i, n) if !bytes.is_empty() => {
                let start = i % len;
                let end = (start + n % 200).min(bytes.len());
                bytes.drain(start..end);
            }
            _ => {}
        }
    }

    fn edits() -> impl Strategy<Value = Vec<Edit>> {
        prop::collection::vec(
            prop_oneof![
                any::<usize>().prop_map(Edit::Newline),
                (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Byte(i, b)),
                (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Edit::Cut(i, n)),
            ],
            0..12,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// Whatever is done to a file of any format, the import returns (an import or "nothing
        /// importable"), and every warning points at a line that exists.
        #[test]
        fn damaged_files_never_panic(
            which in 0usize..7,
            edits in edits(),
            truncate in any::<Option<usize>>(),
        ) {
            let source = [
                "claude/project/s1.jsonl",
                "codex/sessions/2026/02/10/rollout-2026-02-10T10-00-00-cx1.jsonl",
                "ledger/ledger.jsonl",
                "broken/broken.jsonl",
                "stream-json/runs.jsonl",
                "api-log/proxy.jsonl",
                "tracelab/rounds.csv",
            ][which];
            let mut bytes = std::fs::read(fixture(source)).unwrap();
            for edit in &edits {
                apply(&mut bytes, edit);
            }
            if let Some(n) = truncate {
                bytes.truncate(n % (bytes.len() + 1));
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("damaged.jsonl");
            std::fs::write(&path, &bytes).unwrap();
            match import_paths(&[path], &ImportOptions::default(), &mut |_, _| {}) {
                Ok(got) => {
                    let lines = bytes.split(|&b| b == b'\n').count() as u64;
                    for w in &got.warnings {
                        prop_assert!(w.line <= lines, "{w} beyond {lines} lines");
                    }
                    prop_assert_eq!(got.stats.bytes, bytes.len() as u64);
                }
                Err(ImportError::NoImportableFile { .. }) => {}
                Err(other) => prop_assert!(false, "unexpected error {other}"),
            }
        }
    }
}

mod real {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::collections::{BTreeMap, BTreeSet};

    /// The real transcripts in `/work/shared/traces/claude-code`, if present: sane totals, no
    /// warnings, every kind of thread.
    #[test]
    fn real_claude_code_folder() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/claude-code");
        if !dir.is_dir() {
            eprintln!("skipped: {} not found", dir.display());
            return;
        }
        let got = import(&[dir]);
        let requests = got.stats.requests;
        assert!((850..=950).contains(&requests), "{requests} requests");
        assert!(got.traces.len() >= 15, "{} traces", got.traces.len());
        assert_eq!(got.warnings, vec![]);
        let kinds: BTreeSet<ThreadKind> = got.traces.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            BTreeSet::from([
                ThreadKind::Main,
                ThreadKind::Subagent,
                ThreadKind::Compaction
            ])
        );
        // The first request of each thread (over all its models) is a boundary. The first of a
        // later model need not be: in one session the switch to Haiku happens mid tool loop.
        let mut first_of_thread: BTreeMap<(&str, &str), &TraceRequest> = BTreeMap::new();
        for t in &got.traces {
            assert!(
                t.requests.windows(2).all(|w| w[0].at_ms <= w[1].at_ms),
                "{} unsorted",
                t.id
            );
            assert!(
                t.requests.iter().all(|r| r.usage.prompt() > 0),
                "{} has an empty prompt",
                t.id
            );
            let first = first_of_thread
                .entry((&t.session, &t.thread))
                .or_insert(&t.requests[0]);
            if t.requests[0].at_ms < first.at_ms {
                *first = &t.requests[0];
            }
        }
        for ((session, thread), first) in first_of_thread {
            assert!(first.boundary, "{session}/{thread} starts mid-turn");
        }
    }
}

/// Claude Code (2.1.140 on) stores the API's cache diagnosis on assistant lines: each becomes its
/// request's label; a line without one labels nothing.
#[test]
fn claude_code_diagnostics_become_provider_labels() {
    use muninn_core::miss::{ProviderMiss, ProviderMissReason as R};
    let import = import(&[fixture("claude-diagnostics")]);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let labels = |id: &str| -> Vec<Option<ProviderMiss>> {
        let t = import.traces.iter().find(|t| t.id == id).unwrap();
        t.requests.iter().map(|r| r.provider_miss).collect()
    };
    let miss = |reason, missed_tokens| {
        Some(ProviderMiss {
            reason,
            missed_tokens,
        })
    };
    assert_eq!(
        labels("d1/main/claude-opus-4-6"),
        vec![
            None,
            None,
            miss(R::ToolsChanged, Some(20_500)),
            None,
            miss(R::MessagesChanged, Some(21_000)),
        ]
    );
    assert_eq!(
        labels("d1/main/claude-sonnet-4-6"),
        vec![
            miss(R::ModelChanged, Some(9_000)),
            miss(R::Pending, None),
            miss(R::Other, None),
        ]
    );
}

/// Newer Codex versions log `cache_write_input_tokens` for models that bill a write premium:
/// it becomes the request's cache write, out of the uncached input.
#[test]
fn codex_cache_writes_are_read_where_logged() {
    let import = import(&[fixture("codex-writes")]);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let t = &import.traces[0];
    assert_eq!(t.model, "gpt-5.6");
    let usages: Vec<Usage> = t.requests.iter().map(|r| r.usage).collect();
    assert_eq!(
        usages,
        vec![usage(80, 12_800, 0, 0, 328), usage(52, 512, 0, 13_056, 100)]
    );
}

/// Claude Code transcripts carry the `tool_result` blocks each request added: the importer
/// records their count and the tokens a later tool-result clear (the `mask` action) would remove
/// — each block as the cache model counts it less the same block holding the placeholder —
/// string and array content alike; a human turn adds none.
#[test]
fn claude_code_tool_results_are_sized() {
    use muninn_core::trace::ToolResults;
    let import = import(&[fixture("claude-tools")]);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let t = import
        .traces
        .iter()
        .find(|t| t.id == "t1/main/claude-sonnet-4-5")
        .unwrap();
    let sizes: Vec<ToolResults> = t.requests.iter().map(|r| r.tool_results).collect();
    assert_eq!(
        sizes,
        vec![
            ToolResults::default(),
            // "Hello, world!" in quotes is 8 tokens (`"` `Hell|o` `,` `worl|d` `!` `"`), the
            // placeholder's 9: a clear would remove nothing, but the use counts.
            ToolResults { tokens: 0, uses: 1 },
            // `[{"text":"abcd efgh","type":"text"}]` is 20 tokens, 11 more than the placeholder;
            // "x" (3) less than it.
            ToolResults {
                tokens: 11,
                uses: 2
            },
            ToolResults::default(),
        ]
    );
    let boundaries: Vec<bool> = t.requests.iter().map(|r| r.boundary).collect();
    assert_eq!(boundaries, vec![true, false, false, true]);
    // The stored trace format keeps them (and omits them where there are none).
    let mut stored = Vec::new();
    write_traces(&mut stored, [t]).unwrap();
    let text = String::from_utf8(stored.clone()).unwrap();
    assert_eq!(text.matches("\"tool_results\"").count(), 2, "{text}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, &stored).unwrap();
    let back = read_trace_file(&path).unwrap();
    assert_eq!(back.traces[0].requests, t.requests);
}
