//! Fuzzing every importer (`muninn_testkit::fuzz`): Claude Code transcripts, Codex rollouts,
//! ledger exports and muninn's stored traces, each from its own seed corpus in
//! `fuzz/corpus/import-<format>/` (the fixtures here, and a real Claude Code transcript from
//! `../shared/traces/claude-code`).
//!
//! Properties, for every input file: the import returns (traces, or "nothing importable"),
//! never panics; it counts every byte; every warning names a line that exists. And for a
//! truncated file — the input cut inside one of its JSON lines, as a crash mid-write leaves
//! it — the import reports that line and gives exactly the traces of the complete lines before
//! it: nothing before the cut is lost, nothing of the torn line is invented.

use muninn_import::{Import, ImportError, ImportOptions, import_paths};
use muninn_testkit::fuzz::{
    FuzzConfig, FuzzRng, JSON_TOKENS, Verdict, corpus_dir, fnv1a, fuzz, load_corpus,
};
use std::path::Path;

fn import_bytes(path: &Path, bytes: &[u8]) -> Result<Import, ImportError> {
    std::fs::write(path, bytes).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    import_paths(
        &[path.to_owned()],
        &ImportOptions::default(),
        &mut |_, _| {},
    )
}

/// The checks every input gets; `Some(import)` when it imported.
fn check_import(path: &Path, bytes: &[u8]) -> Result<Option<Import>, String> {
    match import_bytes(path, bytes) {
        Ok(got) => {
            let lines = bytes.split(|&b| b == b'\n').count() as u64;
            if let Some(w) = got.warnings.iter().find(|w| w.line > lines) {
                return Err(format!("warning {w} is beyond the file's {lines} lines"));
            }
            if got.stats.bytes != bytes.len() as u64 {
                return Err(format!("read {} of {} bytes", got.stats.bytes, bytes.len()));
            }
            Ok(Some(got))
        }
        Err(ImportError::NoImportableFile { .. }) => Ok(None),
        Err(other) => Err(format!("unexpected error: {other}")),
    }
}

/// Where the truncation property cuts: inside a line that is one whole JSON value (so any
/// proper prefix of it is not JSON), chosen from the input's hash. Returns (the line's start,
/// the cut, its 1-based number).
fn cut_point(bytes: &[u8]) -> Option<(usize, usize, u64)> {
    let mut candidates = Vec::new();
    let mut start = 0;
    for (number, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let content = line.trim_ascii_end().len();
        if content >= 2 && serde_json::from_slice::<serde_json::Value>(line).is_ok() {
            candidates.push((start, content, number as u64 + 1));
        }
        start += line.len() + 1;
    }
    if candidates.is_empty() {
        return None;
    }
    let mut rng = FuzzRng::new(fnv1a(bytes));
    let (start, content, number) = *rng.pick(&candidates);
    // Strictly inside the value: from after its first byte to before its last.
    Some((start, start + 1 + rng.below(content - 1), number))
}

fn check_truncation(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let Some((line_start, cut, number)) = cut_point(bytes) else {
        return Ok(());
    };
    let torn = check_import(path, &bytes[..cut])?;
    let before = check_import(path, &bytes[..line_start])?;
    let torn_traces = torn.as_ref().map(|i| &i.traces);
    if torn_traces != before.as_ref().map(|i| &i.traces) {
        return Err(format!(
            "cut inside line {number} (byte {cut}): the traces differ from those of the \
             {} lines before it",
            number - 1
        ));
    }
    if let Some(torn) = &torn {
        let reported = torn
            .warnings
            .iter()
            .any(|w| w.line == number || (w.line == 0 && w.message.contains("more warnings")));
        if !reported {
            return Err(format!(
                "cut inside line {number}: no warning names it ({:?})",
                torn.warnings
            ));
        }
    }
    Ok(())
}

fn run(format: &str) {
    let target = format!("import-{format}");
    let seeds = load_corpus(&corpus_dir(&target));
    let dir = tempfile::tempdir().expect("a temporary directory");
    // One name for every input: the Claude Code reader reads sub-agent threads from file names.
    let path = dir.path().join("fuzzed-session.jsonl");
    let dictionary: &[&[u8]] = &[
        b"\"type\":\"assistant\"",
        b"\"isSidechain\":true",
        b"\"message\":{\"id\":\"msg_1\"}",
        b"\"model\":\"<synthetic>\"",
        b"\"timestamp\":\"2026-02-30T25:61:61Z\"",
        b"\"timestamp\":\"+275760-09-13T00:00:00Z\"",
        b"\"at_ms\":-9223372036854775808",
        b"\"type\":\"token_count\"",
        b"\"type\":\"trace\"",
        b"\"kind\":\"compaction\"",
        b"\"usage\":{\"input_tokens\":18446744073709551615,\"output_tokens\":18446744073709551615}",
    ];
    let dictionary: Vec<&[u8]> = dictionary.iter().chain(JSON_TOKENS).copied().collect();
    let report = fuzz(
        &target,
        &seeds,
        &dictionary,
        &FuzzConfig::from_env(48 * 1024),
        |bytes| {
            let imported = check_import(&path, bytes)?;
            check_truncation(&path, bytes)?;
            Ok(match imported {
                Some(i) if !i.traces.is_empty() => Verdict::Accepted,
                _ => Verdict::Refused,
            })
        },
    );
    assert!(report.accepted > 0, "{report}");
}

#[test]
fn claude_code_transcripts() {
    run("claude");
}

#[test]
fn codex_rollouts() {
    run("codex");
}

#[test]
fn ledger_exports() {
    run("ledger");
}

#[test]
fn stored_traces() {
    run("stored");
}
