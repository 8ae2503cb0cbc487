//! `muninn doctor` against Claude Code binaries that do not simply answer `--version` and exit.

use std::process::Command;
use std::time::{Duration, Instant};

/// `muninn doctor`'s output with `claude` the shell script `script`, and its `claude CLI` line;
/// fails if doctor has not ended within 60 s.
fn doctor_with_claude(script: &str) -> (std::process::Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let claude = dir.path().join("claude");
    std::fs::write(&claude, script).unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&claude, executable).unwrap();
    // A refused endpoint answers at once (no DNS, no network).
    let config = format!(
        "data_dir = \"data\"\n\n[backend]\nkind = \"claude-cli\"\nbase_url = \"http://127.0.0.1:1\"\nclaude_bin = \"{}\"\n\n[[mind]]\nid = \"vala\"\ndoctrine_text = \"You are Vala.\"\n",
        claude.display()
    );
    std::fs::write(dir.path().join("muninn.toml"), config).unwrap();
    let mut doctor = Command::new(env!("CARGO_BIN_EXE_muninn"));
    doctor
        .args(["doctor", "--config"])
        .arg(dir.path().join("muninn.toml"))
        .env_remove("MUNINN_CONFIG")
        .env_remove("MUNINN_CLAUDE_BIN")
        .env("CLAUDE_CODE_OAUTH_TOKEN", "not-a-real-token");
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(doctor.output());
    });
    let output = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("muninn doctor still running after 60 s")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let line = stdout
        .lines()
        .find(|l| l.contains("claude CLI"))
        .unwrap_or_else(|| panic!("no claude CLI check: {stdout}"))
        .to_owned();
    (output, line)
}

/// A `claude` that never prints its version (a wrapper script whose own child holds stdout)
/// is a failed check within doctor's wait, not a doctor that never returns. Before, doctor
/// waited for the script for ever.
#[test]
fn a_claude_binary_that_never_answers_is_a_failed_check_not_a_hang() {
    let (output, line) = doctor_with_claude("#!/bin/sh\nsleep 600\n");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(line.starts_with("FAIL"), "{stdout}");
    assert!(line.contains("did not answer within 10 s"), "{stdout}");
}

/// A `claude` that prints its version line and then lingers (a wrapper that left a process
/// holding its output) answered: its version is checked at once and the rest of its group
/// killed. Before, doctor waited for its output to end, gave up after 10 s and failed the
/// check as `did not answer`.
#[test]
fn a_claude_binary_that_answers_and_lingers_passes_the_check() {
    let pinned = muninn_host::backends::PINNED_CLAUDE_CLI;
    let started = Instant::now();
    let (output, line) = doctor_with_claude(&format!(
        "#!/bin/sh\necho '{pinned} (Claude Code)'\nsleep 600\n"
    ));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(line.starts_with("ok"), "{stdout}");
    assert!(
        line.ends_with(&format!("is {pinned} (Claude Code)")),
        "{stdout}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{stdout}");
}
