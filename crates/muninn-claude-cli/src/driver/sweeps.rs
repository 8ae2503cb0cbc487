//! [`Sweeps`]: the mark sweeps ([`super::tree::kill_marked`]) a host has under way, run off the
//! async threads and waited for at shutdown.
//!
//! A sweep reads every `/proc/<pid>/environ` and waits for what it stops (tens of milliseconds
//! for a few hundred processes, more to kill many), so it runs on tokio's blocking pool: run
//! inside the `Drop` of a child's [`super::Live`] on an async worker, parking or shutting down
//! many Minds at once stalled every task on that worker. The driver awaits each sweep of its
//! own before it answers a stop or a park; a sweep begun by a drop (a dead child replaced, a
//! driver whose handle was dropped) is awaited by whoever holds the [`Sweeps`]: the host waits
//! for [`Sweeps::settled`] before it exits, so every marked process is dead by then. Both waits
//! are bounded (10 s for a stop, 30 s for the host's exit, a give-up logged at error): a sweep
//! reads `/proc/<pid>/environ`, which waits while a thread stuck in the kernel holds that
//! process's memory map locked. A sweep the blocking pool drops unrun (begun as the runtime
//! shuts down) runs on the dropping thread.
//!
//! A sweep that could not look (no `/proc`, no pidfds) is logged at warn with its cause and
//! counted ([`Sweeps::failed`]), which the host shows in `muninn status` and `/metrics`: any
//! process the child left behind may still run. A kernel without `pidfd_open` is said once in
//! the log, not per child.

use super::tree::{self, SweepError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The longest a stop or a park waits for its child's sweep. A sweep reads each process's
/// environment from `/proc`, and such a read waits while that process's memory map is locked
/// by a thread stuck in the kernel (why `ps` hangs on a stalled NFS mount): waited for without
/// a bound, one stuck process held the stop, and with it the Mind, for ever. The sweep goes on
/// on its blocking thread; only the wait for it ends.
pub(crate) const SWEEP_WAIT: Duration = Duration::from_secs(10);

/// The longest `Sweeps::settled` waits for the sweeps under way at a host's exit.
pub(crate) const SETTLE_WAIT: Duration = Duration::from_secs(30);

/// The mark sweeps under way, shared by every backend of a host (a clone is another handle on
/// the same set). See the module docs.
#[derive(Debug, Clone)]
pub struct Sweeps {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Where the processes are listed (`/proc`).
    proc_root: PathBuf,
    /// Sweeps begun and not yet ended.
    running: watch::Sender<usize>,
    /// Sweeps that could not look.
    failed: AtomicU64,
    /// A kernel without `pidfd_open` has been reported.
    told_no_pidfd: AtomicBool,
}

impl Default for Sweeps {
    /// Sweeps that list the processes in `/proc`.
    fn default() -> Sweeps {
        Sweeps::looking_in(tree::PROC)
    }
}

/// One sweep, counted as running until it has run. A blocking task the runtime drops unstarted
/// at its shutdown (a driver task dropped with the runtime begins its child's sweep then) drops
/// this unrun: it runs here instead, on the dropping thread, or what carries the mark outlived
/// the host.
struct Pending {
    sweeps: Sweeps,
    mark: Option<String>,
    child: Option<u32>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mark) = self.mark.take() {
            let sweeps = self.sweeps.clone();
            sweeps.sweep(&sweeps.inner.proc_root, &mark, self.child);
        }
        self.sweeps
            .inner
            .running
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Sweeps {
    /// Sweeps that list the processes in `proc_root` instead of `/proc`: the process table is
    /// the environment a sweep reads, given like any other (a host's is `/proc`; a test's may
    /// be a directory that cannot be read, as on a host without `/proc` mounted).
    pub fn looking_in(proc_root: impl Into<PathBuf>) -> Sweeps {
        Sweeps {
            inner: Arc::new(Inner {
                proc_root: proc_root.into(),
                running: watch::Sender::new(0),
                failed: AtomicU64::new(0),
                told_no_pidfd: AtomicBool::new(false),
            }),
        }
    }

    /// Waits until no sweep is under way (those begun while it waits included) — for at most
    /// 30 s: a sweep that has not ended by then is stuck on a process's `/proc` entry, and a
    /// host must not hang at its exit for it. Giving up is logged at error, with how many are
    /// left.
    pub async fn settled(&self) {
        let mut running = self.inner.running.subscribe();
        // The sender is held by `self`: the wait ends only with the count at zero.
        let settled = running.wait_for(|n| *n == 0);
        if tokio::time::timeout(SETTLE_WAIT, settled).await.is_err() {
            let left = *self.inner.running.borrow();
            tracing::error!(
                left,
                "claude-cli: sweeps of what the children left behind did not end within {SETTLE_WAIT:?}; going on without them (what they were to kill may still run)"
            );
        }
    }

    /// How many sweeps could not look for the processes to kill (see `SweepError`).
    pub fn failed(&self) -> u64 {
        self.inner.failed.load(Ordering::Relaxed)
    }

    /// Begins the sweep of `mark` (`child`: the child's pid, when it was still running) on the
    /// blocking pool, or at once on this thread outside a runtime; returns it to await.
    pub(super) fn start(
        &self,
        mark: String,
        child: Option<u32>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        self.inner.running.send_modify(|n| *n += 1);
        let pending = Pending {
            sweeps: self.clone(),
            mark: Some(mark),
            child,
        };
        // The sweep is run by dropping it (see `Pending`).
        let job = move || drop(pending);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Some(runtime.spawn_blocking(job)),
            Err(_) => {
                job();
                None
            }
        }
    }

    /// One sweep, its failure logged and counted.
    fn sweep(&self, proc_root: &Path, mark: &str, child: Option<u32>) {
        let Err(e) = tree::kill_marked(proc_root, mark, child) else {
            return;
        };
        self.inner.failed.fetch_add(1, Ordering::Relaxed);
        let no_pidfd = matches!(e, SweepError::Pidfd(rustix::io::Errno::NOSYS));
        if !no_pidfd || !self.inner.told_no_pidfd.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "claude-cli: the processes a child left behind could not be looked for; any still running are not killed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three processes that carry `mark` and would outlive the test by a minute.
    fn marked_sleeps(mark: &str) -> Vec<std::process::Child> {
        (0..3)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("60")
                    .env(tree::MARK_VAR, mark)
                    .spawn()
                    .unwrap()
            })
            .collect()
    }

    /// A sweep begun where no one awaits it (a drop) is waited for by [`Sweeps::settled`]:
    /// once it returns, every process carrying the mark is dead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settled_waits_for_a_sweep_begun_by_a_drop() {
        let mark = tree::new_mark().unwrap();
        let mut sleeps = marked_sleeps(&mark);
        let sweeps = Sweeps::default();
        drop(sweeps.start(mark, None));
        sweeps.settled().await;
        let running: Vec<u32> = sleeps
            .iter_mut()
            .filter_map(|s| matches!(s.try_wait(), Ok(None)).then(|| s.id()))
            .collect();
        for sleep in &mut sleeps {
            let _ = sleep.kill();
            let _ = sleep.wait();
        }
        assert_eq!(running, Vec::<u32>::new(), "still running after settled");
    }

    /// A sweep begun as the runtime shuts down (a driver task dropped with it: its child's
    /// `Live` dropped unfinished) still kills what carries the mark: the blocking pool takes
    /// no more work then, and the sweep queued there never ran.
    #[test]
    fn a_sweep_begun_as_the_runtime_shuts_down_still_runs() {
        struct Dropped(Sweeps, Option<String>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(mark) = self.1.take() {
                    self.0.start(mark, None);
                }
            }
        }
        let mark = tree::new_mark().unwrap();
        let mut sleeps = marked_sleeps(&mark);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let held = Dropped(Sweeps::default(), Some(mark));
        runtime.spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        drop(runtime);
        // SIGTERM to each: one the sweep killed ended by SIGKILL, one it missed by SIGTERM.
        let missed: Vec<u32> = sleeps
            .iter_mut()
            .filter_map(|s| {
                use std::os::unix::process::ExitStatusExt;
                let pid = rustix::process::Pid::from_child(s);
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                (s.wait().unwrap().signal() != Some(9)).then(|| s.id())
            })
            .collect();
        assert_eq!(
            missed,
            Vec::<u32>::new(),
            "still running after the runtime ended"
        );
    }

    /// A sweep that could not look is counted, for `status`.
    #[test]
    fn a_sweep_that_could_not_look_is_counted() {
        let sweeps = Sweeps::default();
        let missing = tempfile::tempdir().unwrap().path().join("proc");
        sweeps.sweep(&missing, "0f", None);
        assert_eq!(sweeps.failed(), 1);
    }
}
