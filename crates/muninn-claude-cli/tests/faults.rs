//! A child that dies in ways the real CLI cannot be made to: stand-in scripts that speak
//! stream-json, each dying mid-turn as one fault case says.

use super::*;
use pretty_assertions::assert_eq;
use std::sync::{Arc, Mutex};

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

/// A child that dies after its turn began is not taken for a lost session because its stderr
/// happens to say "already in use" (here of a socket address): the session was found, the
/// model answered, and the turn is an error in that session. Before, the driver abandoned the
/// session for a fresh one (`Reseeded`) and sent the turn again there, twice, the model's
/// answer in the old session left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_dies_mid_turn_is_not_a_lost_session_whatever_its_stderr_says() {
    let dir = tempfile::tempdir().unwrap();
    let launches = dir.path().join("launches");
    let assistant = json!({"type": "assistant", "request_id": "req_1",
        "message": {"model": "claude-x", "content": [{"type": "text", "text": "half an answer"}]}});
    let script = format!(
        "echo launched >> '{}'\nread line\necho '{}'\necho '{assistant}'\n\
         echo 'Error: listen EADDRINUSE: address already in use /tmp/cc-socks/1.sock' >&2\n\
         exit 1\n",
        launches.display(),
        init_line()
    );
    let bin = stand_in(dir.path(), &script).await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a82").await;
    r.config.turn_timeout = Duration::from_secs(20);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("in-use")).await.unwrap();
    let err = b.turn(TurnInput::text("u1")).await.unwrap_err();
    assert!(err.to_string().contains("address already in use"), "{err}");
    assert_eq!(session_events_json(&mut b), Vec::<Value>::new());
    assert_eq!(b.session_id(), r.config.session_id);
    // Launched at start, and never again for this turn.
    let launched = std::fs::read_to_string(&launches).unwrap();
    assert_eq!(launched.lines().count(), 1, "{launched}");
}

/// A Ctrl-C at the host's terminal does not reach the child. The terminal sends SIGINT to its
/// whole foreground process group, and the CLI ends a running turn on SIGINT (an
/// `error_during_execution` result, which the driver takes for an interrupted turn, its partial
/// text the answer) and exits, where the host's shutdown lets each Mind finish the step it is
/// in and stops the children itself (stdin closed, SIGTERM, SIGKILL). So the child runs in a
/// process group of its own. Before, it was in the host's, and every signal to that group
/// reached it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_to_the_hosts_process_group_does_not_reach_the_child() {
    use rustix::process::{Pid, getpgid, getpgrp};
    let dir = tempfile::tempdir().unwrap();
    let bin = stand_in(dir.path(), "while read line; do :; done\n").await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a84").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("group")).await.unwrap();
    let pid = b.child_pid().await.unwrap();
    let group = getpgid(Pid::from_raw(pid as i32)).unwrap();
    assert_ne!(group, getpgrp(), "the child is in the host's process group");
    assert_eq!(
        group.as_raw_pid(),
        pid as i32,
        "the child leads its own group"
    );
    b.shutdown().await.unwrap();
}

/// A cgroup-v1 freezer group of this test's own. Dropped — the test passed or panicked — it
/// kills every process in the group, thaws it (a SIGKILL to a frozen process waits for that)
/// and removes it: a frozen process left behind would hold what waits for it for ever.
struct Freezer(std::path::PathBuf);

impl Freezer {
    /// A new group, or `None` after `missing_peer` where none can be made (not root, no v1
    /// freezer hierarchy mounted).
    fn new(name: &str) -> Option<Freezer> {
        let dir = std::path::Path::new("/sys/fs/cgroup/freezer")
            .join(format!("muninn-test-{name}-{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            // A directory made elsewhere than in a freezer hierarchy has no `freezer.state`.
            Ok(()) if dir.join("freezer.state").exists() => Some(Freezer(dir)),
            made => {
                let _ = std::fs::remove_dir(&dir);
                muninn_testkit::peers::missing_peer(&format!(
                    "a cgroup-v1 freezer group at {} ({made:?}; needs root and a v1 freezer hierarchy)",
                    dir.display()
                ));
                None
            }
        }
    }

    /// SIGKILLs every process in the group (a frozen one dies once thawed).
    fn kill_all(&self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        // Killed first: thawed alone, a process the test did not get to kill (a panic before
        // the driver's SIGKILL) ran on in the group, which then could not be removed.
        self.kill_all();
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        // Removable once its processes are gone (a process that forked meanwhile is killed
        // on the next pass).
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            self.kill_all();
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "the freezer group {} could not be removed",
            self.0.display()
        );
    }
}

/// A child that no SIGKILL ends does not hold the turn for ever: the stand-in takes the line,
/// closes its stdout and freezes itself (a cgroup freezer: the process stays in the kernel,
/// where SIGKILL waits until it is thawed, as a thread stuck on a stalled disk would). The turn
/// ends as a child that died, the kill given up after its bound. Before, the driver's reap
/// waited for the killed child without a bound: the turn never returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_outlives_its_sigkill_does_not_hold_the_turn() {
    let Some(freezer) = Freezer::new("unkillable") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let group = freezer.0.display();
    let script = format!(
        "read line\necho '{}'\necho $$ > '{group}/cgroup.procs'\nexec >&-\n\
         echo FROZEN > '{group}/freezer.state'\nsleep 600\n",
        init_line()
    );
    let bin = stand_in(dir.path(), &script).await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a93").await;
    r.config.shutdown_timeout = Duration::from_secs(1);
    r.config.turn_timeout = Duration::from_secs(60);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("unkillable")).await.unwrap();
    let started = std::time::Instant::now();
    let turn = tokio::time::timeout(Duration::from_secs(40), b.turn(TurnInput::text("f1"))).await;
    let took = started.elapsed();
    let err = turn
        .unwrap_or_else(|_| panic!("the turn did not end within {took:?}"))
        .unwrap_err();
    assert!(
        err.to_string().contains("claude exited during the turn"),
        "{err}"
    );
    // The reap's wait (1 s), the kill's bound (5 s), the stderr's (2 s), the sweep's.
    assert!(took < Duration::from_secs(20), "{took:?}");
    drop(freezer);
    drop(b);
}

/// Neither a stop nor a host's exit waits for ever for a sweep that is stuck: a process table
/// (injected: `Sweeps::looking_in`) whose one entry's `environ` no read ever ends, as
/// `/proc/<pid>/environ` of a process whose memory map a thread stuck in the kernel holds
/// locked (why `ps` hangs). The shutdown answers once the stop's bound (10 s) is out, and
/// `settled` — what the host waits for at its exit — gives up after its own (30 s). Before,
/// each waited as long as the sweep did: for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_sweep_does_not_hold_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let bin = stand_in(dir.path(), "while read line; do :; done\n").await;
    let mut sleep = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let table = dir.path().join("proc");
    let entry = table.join(sleep.id().to_string());
    std::fs::create_dir_all(&entry).unwrap();
    let fifo = entry.join("environ");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a97").await;
    let sweeps = muninn_claude_cli::Sweeps::looking_in(&table);
    r.config.sweeps = sweeps.clone();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("stuck-sweep")).await.unwrap();
    let started = std::time::Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(40), b.shutdown()).await;
    let took = started.elapsed();
    let settled = tokio::time::timeout(Duration::from_secs(60), sweeps.settled()).await;
    // The sweep's read ends, empty, once a writer has come and gone.
    std::thread::spawn(move || drop(std::fs::OpenOptions::new().write(true).open(fifo)));
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert!(stopped.is_ok(), "the stop did not end within {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(settled.is_ok(), "settled still waiting after 60 s");
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures this thread's warnings while the returned guards live (a test on one thread:
    /// the driver's task runs on it).
    fn capture() -> (Logs, (tracing::Dispatch, tracing::subscriber::DefaultGuard)) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish();
        // Tracing caches each callsite's interest process-wide; a second, inert dispatcher kept
        // alive makes registration ask this thread's subscriber too.
        let anchor = tracing::Dispatch::new(tracing_subscriber::registry());
        let guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        (logs, (anchor, guard))
    }

    /// The lines logged so far that hold `what`.
    fn lines_with(&self, what: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(what))
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A stdout line past the limit (64 MiB) that the child writes as it is stopped is logged, as
/// one during a turn is: the event it held (the `result` of a turn the CLI started by itself,
/// which the stop bills) is lost with it. Before, the stop passed over it without a word.
#[tokio::test]
async fn a_line_past_the_limit_as_the_child_stops_is_logged() {
    let (logs, _capture) = Logs::capture();
    let dir = tempfile::tempdir().unwrap();
    // `lines::MAX_LINE_BYTES` (64 MiB) and one more.
    let script = "while read line; do :; done\nhead -c 67108865 /dev/zero | tr '\\0' x\necho\n";
    let bin = stand_in(dir.path(), script).await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a98").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("too-long")).await.unwrap();
    b.shutdown().await.unwrap();
    let skipped = logs.lines_with("a stdout line past the limit was skipped");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].contains("bytes=67108865"), "{skipped:?}");
}
