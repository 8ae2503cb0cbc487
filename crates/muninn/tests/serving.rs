//! Starting a real `muninn serve` the way every process test here does: stdout read for the ready
//! line, stderr kept in a file for the failure message.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A spawned `muninn serve` and what its ready line said.
pub(crate) struct Spawned {
    pub child: Child,
    /// The first line on stdout (empty if none came within the wait).
    pub line: String,
    /// The API address the ready line names (`API on http://<addr>`).
    pub addr: Option<String>,
}

/// Spawns `command` with stdin closed and stderr into the file `stderr`, and waits up to 60 s for
/// its first stdout line — the ready line. The line is read on a thread, so a host that never gets
/// ready fails the test instead of hanging it, and stdout is drained afterwards, so the host never
/// blocks on a full pipe.
pub(crate) fn spawn_ready(command: &mut Command, stderr: &Path) -> Spawned {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = tx.send(first);
        for _ in lines {}
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
    let addr = line
        .split("API on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string);
    Spawned { child, line, addr }
}
