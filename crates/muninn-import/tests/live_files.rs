//! Files that change, or are not files, while an import runs (review of the importers, 2026-12;
//! each test failed before its fix unless it says otherwise): a path swapped for a named pipe or
//! a device between the listing and the open, a file appended to or truncated while it is read.

use super::*;
use pretty_assertions::assert_eq;
use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

/// A Claude Code response line (one block) of response `n`, `n` milliseconds after T0.
fn response(n: u64) -> String {
    let (minutes, seconds, ms) = (n / 60_000, n / 1000 % 60, n % 1000);
    format!(
        r#"{{"type":"assistant","sessionId":"s","uuid":"a{n}","timestamp":"2026-02-10T10:{minutes:02}:{seconds:02}.{ms:03}Z","message":{{"model":"claude-opus-4-6","id":"msg_{n}","content":[{{"type":"text","text":"x"}}],"usage":{{"input_tokens":3,"output_tokens":5}}}}}}"#
    ) + "\n"
}

/// Responses `from..to`, one a line.
fn responses(from: u64, to: u64) -> String {
    (from..to).map(response).collect()
}

/// Imports `paths` on a thread, calling `on_progress` at each progress report; fails the test if
/// the import has not ended within 30 seconds (a blocked open, an endless read).
fn import_within_bound(
    paths: Vec<PathBuf>,
    mut on_progress: impl FnMut() + Send + 'static,
) -> Result<Import, ImportError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let got = import_paths(&paths, &ImportOptions::default(), &mut |_, _| on_progress());
        let _ = tx.send(got);
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the import did not end: blocked on an open or reading for ever")
}

const NOT_A_FILE: &str =
    "could not be read, skipped: not a file nor a folder (a pipe, socket or device)";

/// A file listed as a file, then replaced before it is opened by a named pipe (whose open
/// blocked for ever, with no writer) and another by a link to `/dev/zero` (read for ever): each
/// is opened without blocking and refused by the opened file's own metadata, named with the
/// cause, and the rest is imported.
#[test]
fn a_file_swapped_for_a_pipe_or_a_device_after_the_listing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), response(1)).unwrap();
    let (pipe, device) = (dir.path().join("b.jsonl"), dir.path().join("c.jsonl"));
    std::fs::write(&pipe, response(2)).unwrap();
    std::fs::write(&device, response(3)).unwrap();
    let mut swapped = false;
    // The first report comes at the end of `a.jsonl`, after the listing.
    let got = import_within_bound(vec![dir.path().to_path_buf()], move || {
        if !std::mem::replace(&mut swapped, true) {
            std::fs::remove_file(&pipe).unwrap();
            let made = std::process::Command::new("mkfifo").arg(&pipe).status();
            assert!(made.unwrap().success());
            std::fs::remove_file(&device).unwrap();
            std::os::unix::fs::symlink("/dev/zero", &device).unwrap();
        }
    })
    .unwrap();
    assert_eq!((got.stats.requests, got.stats.files_unreadable), (1, 2));
    assert_eq!(
        warned(&got),
        vec![
            ("b.jsonl".into(), 0, NOT_A_FILE.into()),
            ("c.jsonl".into(), 0, NOT_A_FILE.into())
        ]
    );
}

/// Devices given by name are refused at once with a clear error (this held before: they are
/// refused by their metadata before any open; the test keeps it so).
#[test]
fn devices_given_by_name_are_refused_at_once() {
    let err =
        import_within_bound(vec!["/dev/zero".into(), "/dev/urandom".into()], || {}).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no importable file: 2 could not be read, the first /dev/zero: not a file nor a folder \
         (a pipe, socket or device)"
    );
}

/// A live session appended to while it is read, by a writer that keeps ahead of the reader
/// (here 5,000 lines at each progress report, which comes every MiB): the import read on as
/// long as the writer wrote. It reads the file as it was when opened now: every request of
/// then, none of what came after, and no warning.
#[test]
fn a_file_appended_to_while_read_is_read_as_it_was_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.jsonl");
    std::fs::write(&path, responses(0, 10_000)).unwrap();
    let (appended_to, mut next) = (path.clone(), 10_000);
    let got = import_within_bound(vec![path], move || {
        if next < 110_000 {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&appended_to)
                .unwrap();
            file.write_all(responses(next, next + 5_000).as_bytes())
                .unwrap();
            next += 5_000;
        }
    })
    .unwrap();
    assert_eq!(warned(&got), vec![]);
    assert_eq!(got.stats.requests, 10_000);
}

/// A file truncated while it is read (at a line's end, so no line is torn): what was read is
/// kept, and a warning says the file shrank and how much of it was read; the import said
/// nothing, as if the file had been read whole.
#[test]
fn a_file_truncated_while_read_is_said_to_have_shrunk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.jsonl");
    let text = responses(0, 10_000);
    std::fs::write(&path, &text).unwrap();
    let cut = responses(0, 7_500).len() as u64;
    let truncated = path.clone();
    // The first report comes after 1 MiB is read (and at most 256 KiB more buffered), before
    // the cut at line 7,500 (about 1.9 MB).
    let got = import_within_bound(vec![path], move || {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&truncated)
            .unwrap();
        if file.metadata().unwrap().len() > cut {
            file.set_len(cut).unwrap();
        }
    })
    .unwrap();
    assert_eq!(got.stats.requests, 7_500);
    let message = format!(
        "the file shrank while it was read: {cut} of the {} bytes it had when opened were read",
        text.len()
    );
    assert_eq!(warned(&got), vec![("cut.jsonl".into(), 0, message)]);
}

/// A folder holding links to itself and to its parent (named like a folder and like a
/// transcript): the walk does not follow them, ends, and reads each file once (this held
/// before: links below the top are not followed into folders).
#[test]
fn links_to_a_parent_folder_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("project");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(inner.join("a.jsonl"), response(1)).unwrap();
    std::fs::write(dir.path().join("b.jsonl"), response(2)).unwrap();
    for (target, name) in [("..", "up"), ("..", "up.jsonl"), (".", "here")] {
        std::os::unix::fs::symlink(target, inner.join(name)).unwrap();
    }
    let got = import_within_bound(vec![dir.path().to_path_buf()], || {}).unwrap();
    assert_eq!((got.stats.files, got.stats.requests), (2, 2));
    assert_eq!(warned(&got), vec![]);
}
