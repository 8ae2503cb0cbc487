//! What the tests of a file muninn reads put where that file should be: a named pipe, a 100 MB
//! file, and a bound on how long a read of them may take. (`muninn-api`, below this kit, keeps
//! a copy in its unit tests: this kit depends on the store, too heavy for the API's tests.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test kit: a failure is a panic

use std::path::{Path, PathBuf};

/// A named pipe at `dir/name`, with no writer: opening it to read waits for one.
pub fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let made = std::process::Command::new("mkfifo").arg(&path).status();
    assert!(made.unwrap().success(), "mkfifo {}", path.display());
    path
}

/// A 100 MB file at `dir/name` (sparse: zeros, written in no time).
pub fn huge(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    path
}

/// What `read` returns, run on its own thread; a failure when it has not returned within 10 s
/// (the thread, blocked for ever on a pipe, is left behind rather than hanging the suite).
pub fn within_10s<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("still reading after 10 s: waiting on the pipe")
}
