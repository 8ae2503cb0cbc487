//! Format detection's bounds and `--input-format` (review of the importers, 2026-12; each test
//! failed before its fix): detection reads a bounded number of bytes, not only of lines, and a
//! forced format is read as that format whatever detection finds.

use super::*;
use pretty_assertions::assert_eq;
use std::os::unix::fs::FileExt;

/// (file name, line, message) of every warning.
fn warned(got: &Import) -> Vec<(String, u64, String)> {
    got.warnings
        .iter()
        .map(|w| {
            let name = w.path.file_name().unwrap().to_string_lossy().into_owned();
            (name, w.line, w.message.clone())
        })
        .collect()
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
