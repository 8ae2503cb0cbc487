//! A child that dies in ways the real CLI cannot be made to: stand-in scripts that speak
//! stream-json, each dying mid-turn as one fault case says.

use super::*;
use pretty_assertions::assert_eq;

/// Writes an executable stand-in for the CLI at `dir/claude` running `script` (sh).
async fn stand_in(dir: &std::path::Path, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("claude");
    std::fs::write(&bin, format!("#!/bin/sh\n{script}")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    bin
}

fn init_line() -> String {
    json!({"type": "system", "subtype": "init", "session_id": "s"}).to_string()
}

/// A child that dies mid-turn while a process it started still holds its stdout open ends the
/// turn at its death, as a child that died, not at the turn's timeout: the stand-in takes the
/// line, begins the turn, leaves a `sleep` behind holding its stdout and exits. Before, the
/// driver read on until the end of stdout that never came, and the turn failed only at its
/// timeout (10 minutes by default), as a hung child ("no result within").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_dies_while_its_stdout_is_held_open_ends_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    // A duration no other test uses: the leftover is found by its command line.
    let leftover = "sleep 41.3173";
    let script = format!("read line\necho '{}'\n{leftover} &\nexit 3\n", init_line());
    let bin = stand_in(dir.path(), &script).await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a81").await;
    r.config.turn_timeout = Duration::from_secs(25);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("held")).await.unwrap();
    let started = std::time::Instant::now();
    let err = b.turn(TurnInput::text("h1")).await.unwrap_err();
    let took = started.elapsed();
    if let Some(pid) = turns::pid_running(leftover) {
        sigkill(pid);
    }
    assert!(
        err.to_string().contains("claude exited during the turn"),
        "{err}"
    );
    assert!(took < Duration::from_secs(12), "{took:?}: {err}");
    // Nothing of the turn was answered: it is not in the session.
    assert!(b.last_report().unwrap().rewound, "{:?}", b.last_report());
}
