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

/// A 16 MiB line of short blocks: decoded into a `serde_json::Value` tree and its blocks copied
/// (to take the `cache_control` markers off), it took 10.7 times its size (170 MiB). One block
/// at a time, it takes less than twice.
#[test]
fn an_api_log_line_is_decoded_in_proportion_to_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.jsonl");
    let line = api_log_line(16 << 20);
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
