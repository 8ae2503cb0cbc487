//! Killing a child together with every process it started.
//!
//! The CLI runs each Bash tool call in a shell of its own process group (node's `detached`), so
//! SIGKILL of the CLI, or of its process group, does not reach them: a `tail -f` or a build a
//! Self run started would run on, orphaned, after every timed-out or killed run. So before the
//! driver kills a child it stops the whole tree, then kills it; the caller then kills the child
//! itself. A graceful stop (stdin closed, SIGTERM) leaves the tree to the CLI's own clean-up;
//! what outlives the CLI is found by its mark (below).
//!
//! The tree is stopped from the top, level by level, each level seen stopped before its
//! children are listed from `/proc`. A stopped process forks nothing, so a listing taken after
//! it stopped holds all its children; and it reaps nothing, so a child's pid cannot be freed
//! and given to an unrelated process before the signal reaches it. Listing the running tree
//! once and then killing it lost whatever a descendant forked between the two (a build forks
//! all the time), and could signal a pid reused meanwhile.
//!
//! A process can leave the tree while the child lives: a Bash call's `cmd &` runs on after its
//! shell exits, adopted by init. No walk from the child finds it, and a graceful stop, whose
//! child exits by itself, left it running after the Mind was gone. So every child is launched
//! with a mark of its own in its environment ([`MARK_VAR`]), which whatever it starts inherits,
//! and when a child is done with — stopped, killed or dead — every process still carrying its
//! mark is stopped and killed ([`kill_marked`]). Each is opened as a pidfd before its
//! environment is read and signalled through it, so a pid reused meanwhile is never signalled.
//! A process that rewrites its own environment (`env -i`) escapes the mark. The sweep runs on
//! the blocking pool (`sweeps.rs`); one that cannot look (no `/proc`, no pidfds) returns why.

use rustix::process::{Pid, PidfdFlags, Signal, kill_process, pidfd_open, pidfd_send_signal};
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the processes are listed.
pub(super) const PROC: &str = "/proc";

/// The longest the tree's levels are waited for to stop, all together (a process in
/// uninterruptible sleep stops only when it wakes); past it each listing is taken at once. The
/// driver's task is blocked meanwhile, so this is short.
const STOP_WAIT: Duration = Duration::from_millis(100);
/// The most levels stopped: a tree deeper than this, or a process that ignores SIGSTOP (not
/// ours to signal) forking for ever, cannot hold the driver.
const MAX_LEVELS: usize = 64;

/// Stops `root` and kills every process descended from it (not `root` itself, which the caller
/// kills and reaps through its `Child`). Returns how many descendants were signalled.
pub(super) fn kill_descendants(root: Option<u32>) -> usize {
    let Some(root) = root else { return 0 };
    let found = stop_tree(root);
    for pid in &found {
        signal(*pid, Signal::KILL);
    }
    if !found.is_empty() {
        tracing::warn!(pid = root, killed = ?found, "claude-cli: killed the processes the child started");
    }
    found.len()
}

/// The environment variable that carries a child's mark to every process it starts.
pub(super) const MARK_VAR: &str = "MUNINN_CHILD_MARK";

/// A mark no other child shares (random: two backends of one session in one host, or a host
/// restarted under the same pid, must not kill each other's processes).
pub(super) fn new_mark() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Stops and kills every process under `proc_root` (`/proc`) whose environment carries `mark`
/// (see the module docs), `child` — the child itself, when it was still running — apart from
/// those it left behind. Found in rounds: each round's processes are stopped and seen stopped
/// before they are killed and the next listing is taken, so a process forking meanwhile has its
/// children found by the next round, and none is left when a round finds no new one.
///
/// At most [`MAX_OPEN_PIDFDS`] pidfds are open at once: a round that finds more is stopped and
/// killed in batches, each batch's pidfds closed before the next is opened (held for the whole
/// sweep, a few thousand leftovers ran the host out of file descriptors). A process killed is
/// not looked at again: it may still show its environment while it exits.
///
/// An error means the sweep could not look (no `/proc`, no pidfds): whatever it had stopped by
/// then is killed, and the rest may still be running.
pub(super) fn kill_marked(
    proc_root: &Path,
    mark: &str,
    child: Option<u32>,
) -> Result<Swept, SweepError> {
    let entry = format!("{MARK_VAR}={mark}").into_bytes();
    let own = std::process::id();
    let mut swept = Swept::default();
    let mut killed = HashSet::new();
    let give_up_at = Instant::now() + STOP_WAIT;
    for _ in 0..MAX_LEVELS {
        let before = killed.len();
        let mut batch = Vec::new();
        for pid in all_pids(proc_root)? {
            if pid == own || killed.contains(&pid) {
                continue;
            }
            let fd = match carrying(proc_root, pid, &entry) {
                Ok(Some(fd)) => fd,
                Ok(None) => continue,
                Err(e) => {
                    kill_batch(proc_root, &mut batch, give_up_at, &mut killed, &mut swept);
                    swept.report(child);
                    return Err(e);
                }
            };
            // Gone since it was read: nothing to stop.
            let _gone = pidfd_send_signal(&fd, Signal::STOP);
            batch.push((pid, fd));
            if batch.len() >= MAX_OPEN_PIDFDS {
                kill_batch(proc_root, &mut batch, give_up_at, &mut killed, &mut swept);
            }
        }
        kill_batch(proc_root, &mut batch, give_up_at, &mut killed, &mut swept);
        if killed.len() == before {
            break;
        }
    }
    swept.report(child);
    Ok(swept)
}

/// The most pidfds a sweep holds open at once.
pub(super) const MAX_OPEN_PIDFDS: usize = 64;

/// What a sweep by mark killed.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Swept {
    /// Whether the child itself was among them (it was still running when done with).
    pub child: bool,
    /// The processes other than the child: those it left behind.
    pub left_behind: Vec<u32>,
    /// The most pidfds held open at once.
    pub most_open: usize,
    /// Every pid killed, the child included.
    killed: Vec<u32>,
}

impl Swept {
    /// Splits the child from what it left behind, and logs both.
    fn report(&mut self, child: Option<u32>) {
        self.child = child.is_some_and(|c| self.killed.contains(&c));
        self.left_behind = self
            .killed
            .iter()
            .copied()
            .filter(|pid| Some(*pid) != child)
            .collect();
        if self.child {
            tracing::warn!(pid = ?child, "claude-cli: killed the child, still running when it was done with");
        }
        if !self.left_behind.is_empty() {
            tracing::warn!(killed = ?self.left_behind, "claude-cli: killed the processes the child left behind");
        }
    }
}

/// Waits for `batch` to stop, kills it through its pidfds and closes them.
fn kill_batch(
    proc_root: &Path,
    batch: &mut Vec<(u32, OwnedFd)>,
    give_up_at: Instant,
    killed: &mut HashSet<u32>,
    swept: &mut Swept,
) {
    if batch.is_empty() {
        return;
    }
    swept.most_open = swept.most_open.max(batch.len());
    let pids: Vec<u32> = batch.iter().map(|(pid, _)| *pid).collect();
    wait_stopped(proc_root, &pids, give_up_at);
    for (pid, fd) in batch.drain(..) {
        let _gone = pidfd_send_signal(&fd, Signal::KILL);
        killed.insert(pid);
        swept.killed.push(pid);
    }
}

/// Why a sweep by mark could not look for what carries the mark.
#[derive(Debug, thiserror::Error)]
pub(super) enum SweepError {
    /// The process list could not be read (no `/proc` mounted, or not readable).
    #[error("cannot list the processes in {}: {source}", root.display())]
    ProcUnreadable {
        root: PathBuf,
        source: std::io::Error,
    },
    /// A pidfd could not be opened: without one no process is signalled (its pid may be
    /// another's by then). `ENOSYS`: the kernel has no `pidfd_open` (before Linux 5.3).
    #[error("cannot open a pidfd: {0}")]
    Pidfd(rustix::io::Errno),
}

/// A pidfd for `pid` when its environment holds `entry` whole. The pidfd is opened first: a
/// pid reused before the open is read as the process it now is, and one reused after it leaves
/// the pidfd naming the process that ended, which no signal then reaches.
fn carrying(proc_root: &Path, pid: u32, entry: &[u8]) -> Result<Option<OwnedFd>, SweepError> {
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Ok(None);
    };
    let fd = match pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => fd,
        // Ended since the listing.
        Err(rustix::io::Errno::SRCH) => return Ok(None),
        Err(e) => return Err(SweepError::Pidfd(e)),
    };
    // Another user's process is not readable, and not ours to signal.
    let Ok(environment) = std::fs::read(proc_root.join(pid.to_string()).join("environ")) else {
        return Ok(None);
    };
    Ok(environment
        .split(|b| *b == 0)
        .any(|e| e == entry)
        .then_some(fd))
}

/// Every pid listed in `proc_root`.
fn all_pids(proc_root: &Path) -> Result<Vec<u32>, SweepError> {
    let entries = std::fs::read_dir(proc_root).map_err(|source| SweepError::ProcUnreadable {
        root: proc_root.to_owned(),
        source,
    })?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

/// Stops `root`, then every process below it, level by level; returns the descendants stopped,
/// parents before their children.
fn stop_tree(root: u32) -> Vec<u32> {
    signal(root, Signal::STOP);
    let mut seen = HashSet::from([root]);
    let mut found = Vec::new();
    let mut level = vec![root];
    let give_up_at = Instant::now() + STOP_WAIT;
    for _ in 0..MAX_LEVELS {
        wait_stopped(Path::new(PROC), &level, give_up_at);
        let children = children_by_parent();
        // The children of every process stopped so far, not only the last level's: one not
        // yet stopped when its children were listed (the wait gave up) may have forked since.
        let next: Vec<u32> = std::iter::once(&root)
            .chain(&found)
            .filter_map(|pid| children.get(pid))
            .flatten()
            .copied()
            .filter(|pid| seen.insert(*pid))
            .collect();
        if next.is_empty() {
            break;
        }
        for pid in &next {
            signal(*pid, Signal::STOP);
        }
        found.extend(&next);
        level = next;
    }
    found
}

/// Waits, until `give_up_at` at the latest, for every process in `pids` to be stopped or gone:
/// a signal is delivered when its target next runs, and until then it may still fork.
fn wait_stopped(proc_root: &Path, pids: &[u32], give_up_at: Instant) {
    while !pids.iter().all(|pid| stopped_or_gone(proc_root, *pid)) {
        if Instant::now() >= give_up_at {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether every thread of `pid` is stopped (or the process is gone): a group stop reaches each
/// thread in turn, and one still running (node's are several) may fork.
fn stopped_or_gone(proc_root: &Path, pid: u32) -> bool {
    let Ok(threads) = std::fs::read_dir(proc_root.join(pid.to_string()).join("task")) else {
        return true;
    };
    threads.flatten().all(|thread| {
        std::fs::read_to_string(thread.path().join("stat")).map_or(true, |stat| {
            matches!(state_of(&stat), None | Some('T' | 't' | 'Z' | 'X' | 'x'))
        })
    })
}

/// Each process's children, from every `/proc/<pid>/stat`.
fn children_by_parent() -> HashMap<u32, Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    // Unreadable, it holds no children: the caller kills the child alone, as before the tree.
    for pid in all_pids(Path::new(PROC)).unwrap_or_default() {
        // A process that ended since the listing has no `stat`: it needs no killing.
        if let Some(ppid) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parent_of(&stat))
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
}

/// The fields of a `/proc/<pid>/stat` line after the command, which is in parentheses and may
/// itself hold spaces and parentheses.
fn after_command(stat: &str) -> Option<&str> {
    Some(&stat[stat.rfind(')')? + 1..])
}

/// The state letter in a `/proc/<pid>/stat` line (`T`: stopped).
fn state_of(stat: &str) -> Option<char> {
    after_command(stat)?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The parent pid in a `/proc/<pid>/stat` line: the second field after the command.
fn parent_of(stat: &str) -> Option<u32> {
    after_command(stat)?.split_whitespace().nth(1)?.parse().ok()
}

fn signal(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // A process gone since the listing is what killing it would have made it.
        let _gone = kill_process(pid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_command_with_spaces_and_parentheses() {
        assert_eq!(parent_of("42 (tail) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_of("42 (a b) (c)) R 9 1 1"), Some(9));
        assert_eq!(parent_of("42 (truncated"), None);
        assert_eq!(state_of("42 (a b) (c)) T 9 1 1"), Some('T'));
    }

    /// The pids of the running processes whose command line is exactly `cmdline`.
    fn running(cmdline: &[u8]) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                let zombie = state_of(&stat) == Some('Z');
                (!zombie && std::fs::read(entry.path().join("cmdline")).ok()? == cmdline)
                    .then_some(pid)
            })
            .collect()
    }

    /// A descendant that forks while the tree is walked leaves nothing behind: shells forking
    /// `sleep`s as fast as they can, each replacing the last, are killed with all of them, three
    /// times over. Listing the tree once and then killing it lost the `sleep`s forked between
    /// the listing and a shell's death: they ran on, orphaned (most rounds left one).
    #[test]
    fn a_descendant_forking_during_the_kill_leaves_no_process() {
        let cmdline = b"sleep\x0060.7919\x00";
        let fork = "sh -c 'while :; do sleep 60.7919 & kill $p 2>/dev/null; p=$!; done' &";
        for _ in 0..3 {
            let mut root = std::process::Command::new("sh")
                .args(["-c", &format!("{fork} {fork} {fork} wait")])
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(300));
            kill_descendants(Some(root.id()));
            let _ = root.kill();
            let _ = root.wait();
            // A killed orphan is gone once whoever adopted it reaps it.
            let mut left = running(cmdline);
            for _ in 0..50 {
                if left.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
                left = running(cmdline);
            }
            for pid in &left {
                signal(*pid, Signal::KILL);
            }
            assert_eq!(left, Vec::<u32>::new(), "left running");
        }
    }

    /// `count` `sleep`s carrying a fresh mark, and the mark.
    fn marked_sleeps(count: usize) -> (String, Vec<std::process::Child>) {
        let mark = new_mark().unwrap();
        let children = (0..count)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("60")
                    .env(MARK_VAR, &mark)
                    .spawn()
                    .unwrap()
            })
            .collect();
        (mark, children)
    }

    /// Whether `child` ended by SIGKILL (reaping it).
    fn killed(child: &mut std::process::Child) -> bool {
        use std::os::unix::process::ExitStatusExt;
        child.wait().unwrap().signal() == Some(9)
    }

    /// A sweep that cannot list the processes says so: it found nothing to kill because it
    /// could not look, not because nothing was left. It returned nothing and logged nothing.
    #[test]
    fn a_sweep_that_cannot_list_the_processes_fails() {
        let missing = tempfile::tempdir().unwrap().path().join("proc");
        let swept = kill_marked(&missing, "0f", None);
        assert!(
            matches!(&swept, Err(SweepError::ProcUnreadable { root, .. }) if *root == missing),
            "{swept:?}"
        );
    }

    /// Hundreds of leftovers are killed with never more than [`MAX_OPEN_PIDFDS`] pidfds open
    /// (held for the whole sweep, a few thousand ran the host out of descriptors), and the
    /// child itself, still running, is told apart from what it left behind.
    #[test]
    fn many_leftovers_are_killed_in_batches_and_the_child_is_not_one_of_them() {
        let (mark, mut children) = marked_sleeps(200);
        let child = children[0].id();
        let swept = kill_marked(Path::new(PROC), &mark, Some(child)).unwrap();
        let all_killed = children.iter_mut().all(killed);
        assert!(swept.child, "the child was killed");
        assert_eq!(swept.left_behind.len(), 199);
        assert!(
            !swept.left_behind.contains(&child),
            "the child is not left behind"
        );
        assert!(
            swept.most_open <= MAX_OPEN_PIDFDS,
            "{} pidfds open",
            swept.most_open
        );
        assert!(all_killed);
    }
}
