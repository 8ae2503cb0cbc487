//! Format detection's bounds and `--input-format` (review of the importers, 2026-12; each test
//! failed before its fix): detection reads a bounded number of bytes, not only of lines, and a
//! forced format is read as that format whatever detection finds.

use super::*;
use muninn_import::InputFormat;
use pretty_assertions::assert_eq;
use std::os::unix::fs::FileExt;

fn forced(paths: &[PathBuf], format: InputFormat) -> Result<Import, ImportError> {
    let opts = ImportOptions {
        format: Some(format),
        ..ImportOptions::default()
    };
    import_paths(paths, &opts, &mut |_, _| {})
}

/// A file whose opening is three lines of 60 MiB that do not parse (written sparse: no disk is
/// used), then a good transcript line. Detection was bounded in lines only (1,000 of up to
/// 64 MiB each, 64 GB in the worst case) and read all three before it recognised the fourth; it
/// stops at 128 MiB now, and the warning names that bound, not the lines'.
#[test]
fn detection_is_bounded_in_bytes_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let file = std::fs::File::create(&path).unwrap();
    let line = 60u64 << 20;
    for n in 1..=3 {
        file.write_all_at(b"\n", n * line + n - 1).unwrap();
    }
    let good = r#"{"type":"assistant","sessionId":"s","uuid":"a1","timestamp":"2026-02-10T10:00:01.000Z","message":{"model":"claude-opus-4-6","id":"msg_1","content":[],"usage":{"input_tokens":3,"output_tokens":5}}}"#;
    file.write_all_at(format!("{good}\n").as_bytes(), 3 * line + 3)
        .unwrap();
    let err = import_paths(
        std::slice::from_ref(&path),
        &ImportOptions::default(),
        &mut |_, _| {},
    );
    assert!(
        matches!(err, Err(ImportError::NoImportableFile { .. })),
        "{err:?}"
    );
    std::fs::write(
        dir.path().join("good.jsonl"),
        good.replace("msg_1", "msg_2"),
    )
    .unwrap();
    let got = import(&[dir.path().to_path_buf()]);
    assert_eq!((got.stats.requests, got.stats.files_skipped), (1, 1));
    let message = "no recognised format in the first 128 MiB (134217728 bytes), where detection \
                   stops (2 malformed passed over), file skipped";
    assert_eq!(warned(&got), vec![("s.jsonl".into(), 0, message.into())]);
}

/// A Codex rollout opening with more lines of a type detection does not know (a newer Codex's,
/// say) than it tries: detection finds no format, and `--input-format codex` skipped the file
/// as "not in the codex format", so a user could not read it at all. A forced format is read as
/// that format now, its requests imported.
#[test]
fn a_forced_format_reads_a_file_detection_does_not_recognise() {
    let rollout = fixture("codex/sessions/2026/02/10/rollout-2026-02-10T10-00-00-cx1.jsonl");
    let unknown = r#"{"timestamp":"2026-02-10T09:59:59.000Z","type":"git_snapshot","payload":{"commit":"abc"}}"#;
    let text = format!(
        "{}{}",
        format!("{unknown}\n").repeat(20),
        std::fs::read_to_string(&rollout).unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout-cx1.jsonl");
    std::fs::write(&path, text).unwrap();
    let detected = import_paths(
        std::slice::from_ref(&path),
        &ImportOptions::default(),
        &mut |_, _| {},
    );
    assert!(detected.is_err(), "{detected:?}");
    let got = forced(std::slice::from_ref(&path), InputFormat::Codex).unwrap();
    let expected = import(&[rollout]);
    assert_eq!(warned(&got), vec![]);
    assert_eq!(got.stats.requests, expected.stats.requests);
    let usages = |i: &Import| -> Vec<Vec<muninn_core::trace::Usage>> {
        i.traces
            .iter()
            .map(|t| t.requests.iter().map(|r| r.usage).collect())
            .collect()
    };
    assert_eq!(usages(&got), usages(&expected));
}

/// A file that detection recognises as another format, forced: it is read as the format named,
/// its lines' errors are that format's (a TraceLab CSV read as stream-json: each line is not
/// JSON), and one warning says detection found something else. It was skipped with "not in the
/// stream-json format".
#[test]
fn a_forced_format_reads_a_file_of_another_and_says_so() {
    let csv = fixture("tracelab/rounds.csv");
    let got = forced(std::slice::from_ref(&csv), InputFormat::StreamJson).unwrap();
    assert_eq!((got.stats.files, got.stats.requests), (1, 0));
    let warned = warned(&got);
    assert_eq!(
        warned[0],
        (
            "rounds.csv".into(),
            0,
            "read as stream-json as asked, though it looks like tracelab-csv".into()
        )
    );
    let lines = std::fs::read_to_string(&csv).unwrap().lines().count() as u64;
    let by_line: Vec<(u64, bool)> = warned[1..]
        .iter()
        .map(|(_, line, message)| (*line, message.starts_with("malformed line, skipped: ")))
        .collect();
    assert_eq!(by_line, (1..=lines).map(|n| (n, true)).collect::<Vec<_>>());
}

/// A file of one 200 MiB line without a newline (written sparse), given alone: the import
/// failed with `no importable file found in PATH` and no word of why (the warning saying so was
/// dropped with the result). The error says why the file was skipped now; detection reads
/// 128 MiB of it, in a buffer of at most 64 MiB.
#[test]
fn a_lone_file_detection_gives_up_on_says_why_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one-line.jsonl");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(200 << 20)
        .unwrap();
    let err = import_paths(
        std::slice::from_ref(&path),
        &ImportOptions::default(),
        &mut |_, _| {},
    )
    .unwrap_err();
    let shown = path.display();
    assert_eq!(
        err.to_string(),
        format!(
            "no importable file found in {shown} ({shown}: no recognised format in the first \
             128 MiB (134217728 bytes), where detection stops, file skipped)"
        )
    );
}
