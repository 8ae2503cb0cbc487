//! A storage fault while the host runs is loud and recovers without a restart (issue 11): the
//! real `muninn serve` with its data directory on a small filesystem of its own (tmpfs) that
//! fills up. While full, a delivery is refused with a 5xx (never accepted and then silently
//! dropped), `/readyz` answers 503 naming the fault ("the disk is full"), and the host logs
//! the cause; once space is freed the same process answers again. A database whose pages are
//! corrupted under a running host refuses the next delivery with a 5xx and `/readyz` names
//! the corruption; the next start refuses the file.
//!
//! Mounting needs root (as on CI); elsewhere the test fails, or prints SKIP under
//! `MUNINN_SKIP_PEERS=1`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::storage_faults::{client, say_answered, serve_command, start, stop};

/// A tmpfs at `dir`, unmounted when dropped.
struct SmallDisk<'a>(&'a Path);

impl Drop for SmallDisk<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

/// `GET path` on the host: (status code, body).
pub(crate) fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (code, body)
}

/// Polls `/readyz` until `check` holds on (code, body), or panics after 30 s.
fn readyz_until(addr: &str, what: &str, check: impl Fn(u16, &str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = get(addr, "/readyz");
        if check(code, &body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{what}: /readyz {code} {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_full_disk_is_loud_and_the_host_answers_again_once_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&data)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        muninn_testkit::peers::missing_peer("a tmpfs mount (the test runs as root on CI)");
        return;
    }
    let _disk = SmallDisk(&data);
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    say_answered(dir.path(), &serve, 0);
    readyz_until(&serve.addr, "ready at first", |code, _| code == 200);

    // Fill the disk to the last byte.
    let filler = data.join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 8 * 1024 * 1024]);
    let mut refused = None;
    for i in 1..50 {
        let source = format!("full-{i}");
        let out = client(
            dir.path(),
            &serve,
            &["say", "vala", &"x".repeat(4_000), "--source-id", &source],
        );
        if !out.status.success() {
            refused = Some(String::from_utf8_lossy(&out.stderr).into_owned());
            break;
        }
    }
    let refused = refused.expect("a delivery on a full disk is refused, not accepted and dropped");
    assert!(
        refused.contains("500") || refused.contains("503"),
        "{refused}"
    );
    // The Mind is marked with the cause: its next write (a lease renewal or a turn) fails.
    let body = readyz_until(&serve.addr, "503 naming the full disk", |code, body| {
        code == 503 && body.contains("the disk is full")
    });
    eprintln!("while full: /readyz 503 {body}");
    let status = client(dir.path(), &serve, &["status", "--format", "json"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("full"),
        "muninn status shows the cause: {status}"
    );
    let log = std::fs::read_to_string(&serve.stderr).unwrap();
    assert!(
        log.contains("database or disk is full"),
        "the cause is logged: {log}"
    );

    // Room again: the same process answers and is ready, no restart.
    std::fs::remove_file(&filler).unwrap();
    say_answered(dir.path(), &serve, 100);
    readyz_until(&serve.addr, "ready again", |code, _| code == 200);
    stop(serve);
}

#[test]
fn a_database_corrupted_under_a_running_host_is_loud() {
    let dir = tempfile::tempdir().unwrap();
    // A clean first run (its writes checkpointed into muninn.db), then a second host that
    // starts on the intact file (its integrity check passes).
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    say_answered(dir.path(), &serve, 0);
    stop(serve);
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    readyz_until(&serve.addr, "ready at first", |code, _| code == 200);
    // Every page but the first (the schema) scribbled over, under the running host, in place:
    // rewriting the file whole (truncate, then write) would open a window in which the host
    // sees an empty database, which is not what a corrupted disk looks like. (Once on CI, under
    // load, the host then answered no store query for 30 s instead of reading a malformed page;
    // this window is the likeliest cause, not a proven one: it did not happen again in place.)
    let db = dir.path().join("data").join("muninn.db");
    let len = std::fs::metadata(&db).unwrap().len();
    let mut file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    file.seek(SeekFrom::Start(4096)).unwrap();
    file.write_all(&vec![0xA5; len.saturating_sub(4096) as usize])
        .unwrap();
    file.sync_all().unwrap();
    drop(file);
    // A delivery is refused with a 5xx, not accepted and then silently left unanswered ...
    let out = client(
        dir.path(),
        &serve,
        &["say", "vala", "are you there?", "--source-id", "corrupt-1"],
    );
    assert!(
        !out.status.success(),
        "a delivery into a corrupt database was accepted"
    );
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(error.contains("500") || error.contains("503"), "{error}");
    // ... and /readyz names the fault.
    let body = readyz_until(
        &serve.addr,
        "503 naming the corrupt database",
        |code, body| code == 503 && body.contains("the database is corrupt"),
    );
    eprintln!("corrupt under a running host: /readyz 503 {body}");
    let log = std::fs::read_to_string(&serve.stderr).unwrap();
    assert!(log.contains("malformed"), "the cause is logged: {log}");
    stop(serve);
    // The next start refuses the file, naming it.
    let refused = start(dir.path(), serve_command(dir.path(), &[]))
        .err()
        .unwrap();
    assert!(refused.contains(&db.display().to_string()), "{refused}");
}

#[test]
fn a_read_only_data_directory_is_refused_at_start_naming_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    say_answered(dir.path(), &serve, 0);
    stop(serve);
    // The data directory made read-only the way root cannot bypass: a read-only bind mount.
    let data = dir.path().join("data");
    let bound = Command::new("mount")
        .arg("--bind")
        .arg(&data)
        .arg(&data)
        .status()
        .is_ok_and(|s| s.success());
    if !bound {
        muninn_testkit::peers::missing_peer("a bind mount (the test runs as root on CI)");
        return;
    }
    let disk = SmallDisk(&data);
    let read_only = Command::new("mount")
        .args(["-o", "remount,bind,ro"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(read_only.success());
    let refused = start(dir.path(), serve_command(dir.path(), &[]))
        .err()
        .unwrap();
    let db = data.join("muninn.db");
    assert!(refused.contains(&db.display().to_string()), "{refused}");
    assert!(
        refused.contains("unable to open database file"),
        "{refused}"
    );
    // Writable again: the same directory starts and answers.
    drop(disk);
    let serve = start(dir.path(), serve_command(dir.path(), &[])).unwrap();
    say_answered(dir.path(), &serve, 1);
    stop(serve);
}
