//! Storage faults against the real `muninn serve` (issue 11): a data directory whose database
//! is missing or empty is refused at start with a message naming the file and the way out;
//! `--fresh-store` continues with request ids never seen before; a host killed with SIGKILL
//! whose WAL is then deleted (answered messages rolled back) restarts without reissuing a seq
//! or an outbox request id; a file-size limit (`ulimit -f`) makes writes fail loudly instead of
//! killing the host, which writes again once the limit is lifted.
//!
//! Each host is the built-in demo (one Mind, `vala`, on the simulator) in its own temporary
//! data directory, listening on an ephemeral loopback port read from its ready line.

use crate::serving::{Spawned, spawn_ready};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// One running `muninn serve`, killed when dropped.
pub(crate) struct Serve {
    pub(crate) child: Child,
    pub(crate) addr: String,
    pub(crate) stderr: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `muninn serve` command for the demo in `dir` (`extra` flags after).
pub(crate) fn serve_command(dir: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .args(extra)
        .current_dir(dir)
        .env("MUNINN_STATE_DIR", dir.join("state"))
        .env("RUST_LOG", "warn")
        .env_remove("MUNINN_CONFIG")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN");
    command
}

/// Starts `command` and waits for its ready line; `Err(stderr)` if it exits instead.
pub(crate) fn start(dir: &Path, mut command: Command) -> Result<Serve, String> {
    let stderr = unique(dir.join("serve"));
    let Spawned { child, addr, .. } = spawn_ready(&mut command, &stderr);
    let serve = Serve {
        child,
        addr: addr.unwrap_or_default(),
        stderr,
    };
    if serve.addr.is_empty() {
        let mut serve = serve;
        let _ = serve.child.wait();
        return Err(std::fs::read_to_string(&serve.stderr).unwrap_or_default());
    }
    Ok(serve)
}

/// A path not yet used (stderr files of successive hosts in one directory).
fn unique(path: PathBuf) -> PathBuf {
    let mut n = 0;
    loop {
        let candidate = path.with_extension(format!("{n}.stderr"));
        if !candidate.exists() {
            return candidate;
        }
        n += 1;
    }
}

/// `muninn <args>` against `serve`.
pub(crate) fn client(dir: &Path, serve: &Serve, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(args)
        .args(["--addr", &serve.addr])
        .arg("--token-file")
        .arg(dir.join("data").join("api-token"))
        .env_remove("MUNINN_CONFIG")
        .output()
        .unwrap()
}

/// Says message `i` and waits for the answer: (delivery seq, the reply's request ids).
pub(crate) fn say_answered(dir: &Path, serve: &Serve, i: usize) -> (i64, Vec<String>) {
    let text = format!("message {i}: what do you remember?");
    let source = format!("storage-{i}");
    let out = client(
        dir,
        serve,
        &[
            "say",
            "vala",
            &text,
            "--source-id",
            &source,
            "--wait",
            "--timeout",
            "60s",
        ],
    );
    assert!(
        out.status.success(),
        "say {i}: {}\nhost stderr:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&serve.stderr).unwrap_or_default()
    );
    let json = client(dir, serve, &["tail", "vala", "--format", "json", "-n", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let seq: i64 = text
        .split("seq ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no seq in {text:?}"));
    let ids = String::from_utf8_lossy(&json.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["outbox"]["request_id"].as_str().map(str::to_string))
        .collect();
    (seq, ids)
}

/// Stops `serve` with SIGTERM (a clean stop) and waits for it.
pub(crate) fn stop(mut serve: Serve) {
    let _ = Command::new("kill")
        .args(["-TERM", &serve.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every request id in the outbox so far (unacknowledged ones are all of them here).
pub(crate) fn request_ids(dir: &Path, serve: &Serve) -> BTreeSet<String> {
    let out = client(dir, serve, &["tail", "vala", "--format", "json", "-n", "1"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["outbox"]["request_id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_missing_or_empty_database_is_refused_and_fresh_store_never_reuses_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    for i in 0..3 {
        say_answered(dir.path(), &serve, i);
    }
    let before = request_ids(dir.path(), &serve);
    assert!(!before.is_empty());
    stop(serve);
    let db = dir.path().join("data").join("muninn.db");

    // Zero-length, then missing: refused, naming the file and the way out; nothing started.
    std::fs::File::create(&db).unwrap();
    let refused = start(dir.path(), serve_command(dir.path(), &[]))
        .err()
        .unwrap();
    assert!(refused.contains(&db.display().to_string()), "{refused}");
    assert!(refused.contains("empty (0 bytes)"), "{refused}");
    assert!(refused.contains("--fresh-store"), "{refused}");
    std::fs::remove_file(&db).unwrap();
    let refused = start(dir.path(), serve_command(dir.path(), &[]))
        .err()
        .unwrap();
    assert!(
        refused.contains("the database file is missing"),
        "{refused}"
    );
    assert!(!db.exists(), "a refused start creates no database");

    // Asked for explicitly: a fresh store, whose ids continue above the old one's.
    let serve = start(dir.path(), serve_command(dir.path(), &["--fresh-store"])).unwrap();
    let (seq, _) = say_answered(dir.path(), &serve, 100);
    assert!(seq > 3, "the fresh store reissued delivery seq {seq}");
    let after = request_ids(dir.path(), &serve);
    assert!(!after.is_empty());
    assert!(
        after.is_disjoint(&before),
        "request ids reissued: {:?}",
        after.intersection(&before).collect::<Vec<_>>()
    );
    stop(serve);
}

#[test]
fn a_deleted_wal_after_a_kill_never_reissues_a_seq_or_request_id() {
    let dir = tempfile::tempdir().unwrap();
    // A first run, stopped cleanly: its writes are checkpointed into muninn.db itself.
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    say_answered(dir.path(), &serve, 0);
    stop(serve);
    // A second run answers more, and is killed: those commits live only in the WAL ...
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    let mut issued = request_ids(dir.path(), &serve);
    let mut last_seq = 0;
    for i in 1..4 {
        last_seq = say_answered(dir.path(), &serve, i).0;
    }
    issued.extend(request_ids(dir.path(), &serve));
    drop(serve); // SIGKILL
    // ... which is then lost.
    let data = dir.path().join("data");
    let wal = data.join("muninn.db-wal");
    assert!(wal.exists(), "the killed host left its WAL");
    std::fs::remove_file(&wal).unwrap();
    let _ = std::fs::remove_file(data.join("muninn.db-shm"));

    // The restart continues (a crash cannot be told from a crash that lost its WAL), with
    // every counter above every id reserved before the kill.
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    let kept = request_ids(dir.path(), &serve);
    assert!(
        kept.len() < issued.len(),
        "the deleted WAL rolled answered messages back (kept {kept:?} of {issued:?})"
    );
    for i in 4..7 {
        let (seq, _) = say_answered(dir.path(), &serve, i);
        assert!(
            seq > last_seq,
            "delivery seq {seq} reissued (was at {last_seq})"
        );
    }
    let now = request_ids(dir.path(), &serve);
    let new: BTreeSet<&String> = now.difference(&kept).collect();
    assert!(!new.is_empty());
    for id in &new {
        assert!(
            !issued.contains(*id),
            "request id {id} was issued before the kill"
        );
    }
    let log = std::fs::read_to_string(&serve.stderr).unwrap();
    assert!(
        log.contains("raising counters"),
        "the skip is logged: {log}"
    );
    stop(serve);
}

#[test]
fn a_file_size_limit_fails_writes_loudly_and_the_host_survives_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    // Start without a limit (migrations, the Mind registered, one answer), stop cleanly, then
    // run under `ulimit -f`.
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    say_answered(dir.path(), &serve, 0);
    stop(serve);
    let db_len = std::fs::metadata(dir.path().join("data").join("muninn.db"))
        .unwrap()
        .len();
    // bash's `ulimit -f` counts KiB; room for the database and a little WAL. The soft limit only,
    // so it can be lifted again on the running process (raising a hard limit needs privilege).
    let limit_kib = db_len / 1024 + 64;
    let command = serve_command(dir.path(), &[]);
    let mut args: Vec<String> = vec![env!("CARGO_BIN_EXE_muninn").to_string()];
    args.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    let mut limited = Command::new("bash");
    limited
        .arg("-c")
        .arg(format!("ulimit -S -f {limit_kib} && exec \"$@\""))
        .arg("bash")
        .args(&args)
        .current_dir(dir.path());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => limited.env(key, value),
            None => limited.env_remove(key),
        };
    }
    let serve = start(dir.path(), limited).unwrap();
    let big = "a long message to grow the write-ahead log ".repeat(400);
    let mut failed = None;
    for i in 0..200 {
        let source = format!("big-{i}");
        let out = client(
            dir.path(),
            &serve,
            &["say", "vala", &big, "--source-id", &source],
        );
        if !out.status.success() {
            failed = Some((i, String::from_utf8_lossy(&out.stderr).into_owned()));
            break;
        }
    }
    let (at, error) = failed.expect("a write past the file-size limit fails");
    eprintln!("delivery {at} failed: {error}");
    assert!(
        serve_alive(&serve),
        "SIGXFSZ killed the host: {}",
        std::fs::read_to_string(&serve.stderr).unwrap_or_default()
    );
    let log = std::fs::read_to_string(&serve.stderr).unwrap();
    assert!(log.contains("file-size limit"), "{log}");
    // Limit lifted on the running process: it writes again, no restart.
    let lifted = Command::new("prlimit")
        .args(["--fsize=unlimited", "--pid", &serve.child.id().to_string()])
        .status()
        .unwrap();
    assert!(lifted.success());
    let source = format!("big-{at}");
    let out = client(
        dir.path(),
        &serve,
        &["say", "vala", &big, "--source-id", &source],
    );
    assert!(
        out.status.success(),
        "after the limit was lifted: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&serve.stderr).unwrap_or_default()
    );
    stop(serve);
}

pub(crate) fn serve_alive(serve: &Serve) -> bool {
    Path::new(&format!("/proc/{}", serve.child.id())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", serve.child.id()))
            .unwrap_or_default()
            .contains(") Z ")
}
