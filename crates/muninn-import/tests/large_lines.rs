//! Memory against large lines: a Messages API log line is decoded in proportion to its size.
//! Peak memory is a process's, so the import runs in a process of its own: this binary re-run
//! on one test, [`api_log_line_import_child`], with the file to import in [`CHILD`].

use super::*;
use muninn_testkit::transcript::api_log_line;
use std::process::Command;

/// Names the file the child imports; unset, the child test does nothing.
const CHILD: &str = "MUNINN_IMPORT_TEST_CHILD";

/// The most memory an API log line's import may take beyond the process's peak before it, per
/// byte of the line (what `cargo bench -p muninn-import --bench import` holds it to, too).
const PEAK_PER_BYTE: u64 = 4;

/// The process's peak resident memory so far (`VmHWM`), in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The child's half of [`an_api_log_line_is_decoded_in_proportion_to_its_size`]: imports the
/// file named in [`CHILD`] and prints how far the peak grew. Ignored, so that only the parent
/// runs it, in a process of its own.
#[test]
#[ignore = "run by an_api_log_line_is_decoded_in_proportion_to_its_size in a process of its own"]
fn api_log_line_import_child() {
    let Some(path) = std::env::var_os(CHILD) else {
        return;
    };
    let before = peak_kib();
    let got = import(&[PathBuf::from(path)]);
    let grown = peak_kib() - before;
    println!("grown_kib={grown} requests={}", got.stats.requests);
}

/// How far importing `line` (alone in a file) raised the peak memory of a process of its own,
/// asserted to be at most [`PEAK_PER_BYTE`] times the line.
fn assert_imported_in_proportion(line: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.jsonl");
    std::fs::write(&path, format!("{line}\n")).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["large_lines::api_log_line_import_child", "--exact"])
        .args(["--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    let figures = stdout
        .lines()
        .find_map(|l| l.split_once("grown_kib=").map(|(_, figures)| figures))
        .unwrap_or_else(|| panic!("no figures from the child: {stdout}"));
    let (grown_kib, requests) = figures.split_once(" requests=").unwrap();
    let grown = grown_kib.parse::<u64>().unwrap() * 1024;
    assert_eq!(requests.trim(), "1");
    let line = line.len() as u64;
    assert!(
        grown <= PEAK_PER_BYTE * line,
        "importing a {line}-byte line took {grown} bytes ({:.1} times the line; at most {PEAK_PER_BYTE})",
        grown as f64 / line as f64
    );
}

/// A 16 MiB line of short blocks: decoded into a `serde_json::Value` tree and its blocks copied
/// (to take the `cache_control` markers off), it took 10.7 times its size (170 MiB). One block
/// at a time, it takes less than twice.
#[test]
fn an_api_log_line_is_decoded_in_proportion_to_its_size() {
    assert_imported_in_proportion(&api_log_line(16 << 20));
}

/// A 16 MiB line that is one message of one block (a tool's whole output): besides the line and
/// the block, the message's canonical JSON was buffered whole to be hashed, and the line took
/// 4.2 times its size. It is hashed as it is written now.
#[test]
fn an_api_log_line_of_one_large_block_is_decoded_in_proportion_to_its_size() {
    let output = "y".repeat(16 << 20);
    let line = format!(
        r#"{{"timestamp":"2026-02-10T10:00:00Z","request":{{"model":"claude-sonnet-4-5","messages":[{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":"{output}"}}]}}]}},"response":{{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"done"}}],"usage":{{"input_tokens":10,"output_tokens":5}}}}}}"#
    );
    assert_imported_in_proportion(&line);
}
