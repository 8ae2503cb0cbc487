//! `muninn serve`'s logs: on stderr, filtered by `RUST_LOG` (default `info`), as text or JSON
//! lines (`--log-format`), never carrying the API token; stdout keeps only the ready line.

use std::process::{Command, Output};

/// Runs the demo host for a second with `RUST_LOG` and `--log-format` as given.
fn serve(dir: &std::path::Path, rust_log: Option<&str>, format: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--for-s",
            "1",
            "--log-format",
            format,
        ])
        .arg("--data-dir")
        .arg(dir)
        .env_remove("MUNINN_CONFIG")
        .env_remove("MUNINN_LOG_FORMAT")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        command.env("RUST_LOG", filter);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn serve_logs_json_lines_on_stderr_under_rust_log_debug() {
    let tmp = tempfile::tempdir().unwrap();
    let out = serve(tmp.path(), Some("debug"), "json");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout.lines().count(), 1, "only the ready line: {stdout}");
    assert!(stdout.starts_with("muninn serve: 1 Mind(s)"), "{stdout}");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|e| e["fields"]["message"].as_str())
        .collect();
    for wanted in [
        "muninn serve started",
        "runner started",
        "lease taken",
        "lease released",
    ] {
        assert!(messages.contains(&wanted), "no {wanted:?} in {messages:?}");
    }
    // Debug events come through (the filter is RUST_LOG's).
    assert!(events.iter().any(|e| e["level"] == "DEBUG"), "{stderr}");
    let token = std::fs::read_to_string(tmp.path().join("api-token")).unwrap();
    assert!(!stderr.contains(token.trim()), "the token reached the logs");
}

#[test]
fn serve_logs_text_at_info_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let out = serve(tmp.path(), None, "text");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let started = stderr
        .lines()
        .find(|l| l.contains("muninn serve started"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        started.contains(" INFO ") && started.contains("backend=\"the built-in simulator\""),
        "{started}"
    );
    assert!(!stderr.contains("DEBUG"), "{stderr}");
}
