//! The Mind's task: a loop of steps that sleeps when there is nothing to do and backs off when
//! a step fails, and the host task that runs every configured Mind beside the host's chores
//! (the lease renewal, the process pool's sweep).

use super::retry::{self, Failing, RetryPolicy};
use super::supervise::Minds;
use super::{MindRunner, RuntimeError, Step, spawn_renewer};
use crate::Activity;
use crate::Host;
use futures_util::FutureExt;
use muninn_backend::Backend;
use muninn_core::price::PriceTable;
use std::time::Duration;
use tracing::Instrument;

/// Runs a Mind until `shutdown` turns true (a sender dropped first never stops it:
/// `stop_requested`): steps while there is work, sleeps until the next
/// decision time or a wake-up otherwise. A failed step is tried again on the Mind's own
/// schedule (`retry.rs`: exponential backoff with a cap, never before the provider's
/// `retry-after`), whether or not new mail arrives; a fenced write stops the work until the
/// lease is taken again.
///
/// The wake-up is the Mind's own ([`crate::Signals::waiter`]), taken before the first step: a
/// delivery, brief or settings change for this Mind wakes this task and no other, and one sent
/// while it steps (or before it started) is kept and ends its next sleep at once — except a
/// retry's wait, which only its due time (or shutdown) ends.
pub async fn run_mind<B: Backend>(
    mut runner: MindRunner<B>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RuntimeError> {
    let wake = runner.host.signals.waiter(runner.id());
    let clock = runner.host.clock.clone();
    let telemetry = runner.host.telemetry.clone();
    // Up (for `/readyz`) once registered: until then readiness names the failing cause.
    if !register_until_done(&mut runner, &mut shutdown).await {
        return Ok(());
    }
    let _up = telemetry.runner_started(runner.id());
    // Every event of a step — the backend's own retries included — names the Mind.
    let span = tracing::info_span!("mind", mind = %runner.id());
    let retry = RetryPolicy::default();
    let mut failing: Option<Failing> = None;
    // An idle holder steps at least every third of the lease: it renews the lease before it runs
    // out (or another host would take the Mind over and rebuild its session) and sees deliveries
    // posted through other hosts on the same database whose wake-up did not reach it (SQLite
    // hosts cannot signal each other; a PostgreSQL notification can be lost with a connection).
    let lease_third = (runner.host.config.lease_ttl_ms / 3).max(10) as u64;
    loop {
        if *shutdown.borrow() {
            break;
        }
        telemetry.step_began(runner.id(), clock.now_ms());
        let step = runner.step().instrument(span.clone()).await;
        telemetry.stepped(runner.id(), runner.working_role(), &step, clock.now_ms());
        let now = clock.now_ms();
        let Some((activity, wait_ms)) = after_step(&step, &mut failing, &retry, now, lease_third)
        else {
            continue;
        };
        runner.host.signals.set_activity(runner.id(), activity);
        let retrying = failing.is_some();
        wait_for(&mut runner, &wake, &mut shutdown, wait_ms, retrying).await;
    }
    runner.close().await;
    runner.release().await
}

/// What a runner does after a step: nothing but step again (`None`: it did work), or report
/// this activity and wait this long (ms) — to its next decision time (at least 10 ms, at most a
/// minute or a third of the lease), or, after a failed step, to the next attempt of `failing`,
/// which it updates (a step that succeeded ends the run of failures).
fn after_step(
    step: &Result<Step, RuntimeError>,
    failing: &mut Option<Failing>,
    retry: &RetryPolicy,
    now: i64,
    lease_third: u64,
) -> Option<(Activity, u64)> {
    if step.is_ok() {
        *failing = None;
    }
    Some(match step {
        Ok(Step::PersonaTurn { .. } | Step::SelfTurn { .. } | Step::Ping) => return None,
        Ok(Step::Idle { until_ms }) => (
            Activity::Idle {
                until_ms: *until_ms,
            },
            until_ms.map_or(lease_third, |t| {
                ((t - now).clamp(10, 60_000) as u64).min(lease_third)
            }),
        ),
        Ok(Step::NotLeader) => (Activity::NotLeader, lease_third),
        Ok(Step::Braked) => (Activity::Braked, 5_000),
        Ok(Step::OverBudget) => (Activity::Capped, 5_000),
        Err(e) => {
            // Logged and counted by `telemetry.stepped`.
            let hint = match e {
                RuntimeError::Backend(b) => retry::retry_after_ms(b),
                _ => None,
            };
            let next = Failing::after(failing.as_ref(), retry, hint, now);
            let wait = (next.next_attempt_ms - now).max(0) as u64;
            let retrying = Activity::Retrying {
                error: e.to_string(),
                since_ms: next.since_ms,
                attempts: next.attempts,
                next_attempt_ms: next.next_attempt_ms,
            };
            *failing = Some(next);
            (retrying, wait)
        }
    })
}

/// Sleeps `wait_ms`, or until shutdown; a wake-up for the Mind ends the sleep at once unless
/// it is a retry's wait (only its due time ends that), and is kept for the next step either way.
async fn wait_for<B: Backend>(
    runner: &mut MindRunner<B>,
    wake: &tokio::sync::Notify,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
    wait_ms: u64,
    retrying: bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    loop {
        tokio::select! {
            _ = wake.notified() => {
                runner.woken();
                if !retrying {
                    break;
                }
            }
            _ = tokio::time::sleep_until(deadline) => break,
            _ = stop_requested(shutdown) => break,
        }
    }
}

/// Registers the Mind, retrying with backoff while the store refuses (a read-only data
/// directory, a full disk, a database server that is down): the Mind is marked failing with the
/// cause meanwhile (status, `/readyz`, metrics, a warning per attempt), and runs once the fault
/// clears (giving up here would run no Mind and say nothing). False if stopped first.
async fn register_until_done<B: Backend>(
    runner: &mut MindRunner<B>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let clock = runner.host.clock.clone();
    let mut backoff_ms = 250u64;
    let mut attempts = 0u32;
    let since_ms = clock.now_ms();
    loop {
        if *shutdown.borrow() {
            return false;
        }
        let Err(error) = runner.register().await else {
            return true;
        };
        let failed: Result<Step, RuntimeError> = Err(error);
        runner
            .host
            .telemetry
            .stepped(runner.id(), None, &failed, clock.now_ms());
        attempts += 1;
        let error = failed.err().map(|e| e.to_string()).unwrap_or_default();
        backoff_ms = (backoff_ms * 2).min(30_000);
        runner.host.signals.set_activity(
            runner.id(),
            Activity::Retrying {
                error,
                since_ms,
                attempts,
                next_attempt_ms: clock.now_ms() + backoff_ms as i64,
            },
        );
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(backoff_ms)) => {}
            _ = stop_requested(shutdown) => {}
        }
    }
}

/// Runs every configured Mind, one task each, until `shutdown` turns true; each task releases
/// its lease on the way out.
pub async fn run_minds(
    host: Host,
    factory: crate::backends::BackendFactory,
    prices: PriceTable,
    holder: String,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RuntimeError> {
    // Each Mind in its own task: a panic in one stops no other, and restarts it (`supervise.rs`).
    let mut minds = Minds::new(
        host.clone(),
        factory.clone(),
        prices,
        holder.clone(),
        shutdown.clone(),
    );
    for mind in host.config.minds.iter().cloned() {
        minds.spawn(mind, 0, 0, 0, None)?;
    }
    // One renewal for every lease this host holds, instead of one per Mind (`host_lease.rs`).
    let renewer = spawn_renewer(host.clone(), holder.clone(), shutdown.clone());
    // The claude-cli sessions share one process pool: a sweeper parks the children idle longer
    // than they are worth. It runs beside the Minds and stops with them.
    if let Some(pool) = factory.process_pool() {
        host.telemetry.set_pool(pool.clone());
    }
    // A sweep of what a child left behind that could not look is the host's to show.
    if let Some(sweeps) = factory.sweeps() {
        host.telemetry.set_sweeps(sweeps.clone());
    }
    let sweeper = factory.process_pool().cloned().map(|pool| {
        let every = pool.config().policy.min_idle.clamp(
            Duration::from_millis(500),
            Duration::from_secs(POOL_SWEEP_EVERY_S),
        );
        spawn_every(
            "claude-cli pool sweep",
            every,
            shutdown.clone(),
            move || {
                let pool = pool.clone();
                async move {
                    for event in pool.sweep(pool.now()).await {
                        tracing::info!(?event, "claude-cli pool");
                    }
                }
            },
        )
    });
    let first_error = minds.join().await;
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    // Every Mind closed its sessions, each waiting for its own child's sweep; a sweep begun by
    // a drop (a session's dead child replaced, a runner that panicked) may still be running.
    factory.sweeps_settled().await;
    renewer.abort();
    first_error.map_or(Ok(()), Err)
}

/// Resolves once `shutdown` turns true, and never if its sender is dropped first: nobody can
/// stop the host then, so it runs on, on its schedule. (`changed()` answers a closed channel at
/// once, every time it is asked: every wait on it ended at once, and each Mind stepped, and the
/// lease renewal renewed, in a hot loop.)
pub(super) async fn stop_requested(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How often, at most, the claude-cli process pool is swept for idle children (more often when
/// the pool's `park_min_idle_s` is shorter).
const POOL_SWEEP_EVERY_S: u64 = 15;

/// Runs `tick` every `every` until `shutdown` turns true: the host's periodic chores (the
/// lease renewal, the process pool's sweep), each stopping with the Minds.
///
/// A tick that panics (a bug under the renewal or the sweep, a store driver's) is logged as an
/// error naming the chore and the panic, and the chore runs again at its next tick. Uncaught,
/// the panic ended the chore's task for the life of the process with nothing in the log: the
/// host stopped renewing its leases together (each runner renewing its own instead) and
/// releasing those no runner here serves, or stopped parking idle CLI children.
pub(super) fn spawn_every<F, Fut>(
    chore: &'static str,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut tick: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop_requested(&mut shutdown) => {}
            }
            if *shutdown.borrow() {
                break;
            }
            // Unwind safety: a tick owns clones of what it uses and keeps nothing between ticks
            // but what its next run reads afresh (the store, the pool's registry).
            if let Err(payload) = std::panic::AssertUnwindSafe(tick()).catch_unwind().await {
                let panic = muninn_backend::panic::payload_text(&*payload);
                tracing::error!(chore, %panic, "a host chore panicked; it runs again at its next tick");
            }
        }
    })
}
