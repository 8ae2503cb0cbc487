//! Starting a real `muninn serve` the way every process test here does: stdout read for the ready
//! line, stderr kept in a file for the failure message.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
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

/// `muninn serve` on an ephemeral loopback port with this configuration, data directory and
/// database, logging at `rust_log`, and none of the caller's environment that would point it
/// elsewhere (a host address or token file, a real API key).
pub(crate) fn serve_command(
    config: &Path,
    data_dir: &Path,
    database: &str,
    rust_log: &str,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--database", database])
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("MUNINN_ADDR")
        .env_remove("MUNINN_TOKEN_FILE")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env("RUST_LOG", rust_log);
    command
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

/// Writes `<dir>/muninn.toml`: one Mind `mind` in `#swarm` on the simulator, with this lease TTL
/// (the several-host tests and the cross-host bench run the same host).
pub(crate) fn sim_config(dir: &Path, mind: &str, lease_ttl_ms: u64) -> PathBuf {
    let path = dir.join("muninn.toml");
    std::fs::write(
        &path,
        format!(
            "lease_ttl_ms = {lease_ttl_ms}\n[backend]\nkind = 'sim'\n\n[[mind]]\nid = '{mind}'\n\
             rooms = ['#swarm']\ndoctrine_text = 'You are Vala. Answer briefly.'\n"
        ),
    )
    .expect("write muninn.toml");
    path
}

/// Public message `i` in `#swarm` to the Mind, its source id tagged `<tag>-<i>`: what the
/// several-host tests and the cross-host bench post and time.
pub(crate) fn question(tag: &str, i: usize) -> muninn_api::wire::PostDeliveryRequest {
    muninn_api::wire::PostDeliveryRequest {
        room: "#swarm".into(),
        sender: "@user:example.org".into(),
        is_direct: false,
        to_you: true,
        text: format!("message {i}: what do you remember?"),
        source_id: format!("{tag}-{i}"),
        context: Vec::new(),
    }
}
