//! The host's Minds, one task each, and the restart of a Mind whose task panicked.
//!
//! A panic under a runner's step (a bug in the runtime, a backend or a store driver) ends that
//! Mind's task and nothing else: the other Minds and the API run on. It used to end the Mind
//! for the life of the process, with one error line in the log and no cause anywhere else
//! (its lease released by the host's renewal, `status` said `NO HOST`; the API kept the activity
//! the runner last reported, `running` for a panic mid-turn). Now the Mind is
//! restarted with a new runner, as a process restart would restart it: what the panicked runner
//! held in memory (its sessions, an answer not yet committed) is gone with it, as with a
//! `kill -9`, and the new runner recovers from the store — it takes the lease back as a new
//! lease (the segment resumed forked, the accounting read back from the ledger) and answers the
//! batch left unacknowledged. Restarts back off on the failed-step schedule (`retry.rs`: 250 ms
//! doubling to 30 s for panics in a row; a runner that lasted [`STEADY_MS`] starts the count
//! again), so a Mind that panics on every step costs a log line per attempt, not a busy loop.
//! Until the restart the Mind is `RETRYING` with the panic's message in `status` and
//! `GET /v1/minds/{mind}`, `/readyz` names it (its runner is not running, its steps failing),
//! and `muninn_step_failures_total{cause="panic"}` counts it; the new runner's first good step
//! clears it.

use super::retry::RetryPolicy;
use super::{MindRunner, RuntimeError, run_mind};
use crate::backends::BackendFactory;
use crate::config::MindConfig;
use crate::{Activity, Host};
use muninn_core::price::PriceTable;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};

/// A runner that lasted this long before it panicked starts the backoff again (ms).
pub const STEADY_MS: u64 = 60_000;

/// One Mind's task, as the supervisor knows it.
struct Supervised {
    mind: MindConfig,
    /// When this task's runner starts (after its restart delay).
    started: tokio::time::Instant,
    /// Panics in a row before this task (0 for a first start).
    panics: u32,
    /// When the first panic of the run happened, Unix ms.
    since_ms: i64,
}

/// Every configured Mind's task, restarted when it panics (see the module docs).
pub(super) struct Minds {
    host: Host,
    factory: BackendFactory,
    prices: PriceTable,
    holder: String,
    shutdown: watch::Receiver<bool>,
    tasks: JoinSet<Result<(), RuntimeError>>,
    by_task: HashMap<Id, Supervised>,
}

impl Minds {
    /// Nothing running yet.
    pub(super) fn new(
        host: Host,
        factory: BackendFactory,
        prices: PriceTable,
        holder: String,
        shutdown: watch::Receiver<bool>,
    ) -> Minds {
        Minds {
            host,
            factory,
            prices,
            holder,
            shutdown,
            tasks: JoinSet::new(),
            by_task: HashMap::new(),
        }
    }

    /// Starts `mind`'s runner after `delay_ms` (or not at all if shutdown comes first); a
    /// restart is told the panic (`after_panic`) that ended the runner it replaces. The runner
    /// is made here, so a configuration it cannot run fails the caller at once.
    pub(super) fn spawn(
        &mut self,
        mind: MindConfig,
        delay_ms: u64,
        panics: u32,
        since_ms: i64,
        after_panic: Option<String>,
    ) -> Result<(), RuntimeError> {
        let (host, prices) = (&self.host, &self.prices);
        let persona =
            self.factory
                .make(host.clock.clone(), prices, &format!("{}/persona", mind.id));
        let selfs = self
            .factory
            .make(host.clock.clone(), prices, &format!("{}/self", mind.id));
        let mut runner = MindRunner::new(
            host.clone(),
            mind.clone(),
            self.holder.clone(),
            prices,
            persona,
            selfs,
        )?;
        if let Some(panic) = after_panic {
            runner.replaces_a_panicked_runner(&panic);
        }
        let mut shutdown = self.shutdown.clone();
        let task = self.tasks.spawn(async move {
            if delay_ms > 0 {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
                    _ = super::run::stop_requested(&mut shutdown) => {}
                }
            }
            if *shutdown.borrow() {
                return Ok(());
            }
            run_mind(runner, shutdown).await
        });
        let supervised = Supervised {
            mind,
            started: tokio::time::Instant::now() + Duration::from_millis(delay_ms),
            panics,
            since_ms,
        };
        self.by_task.insert(task.id(), supervised);
        Ok(())
    }

    /// Waits for every task to end, restarting those that panic (until shutdown); the first
    /// error a Mind stopped with, if any.
    pub(super) async fn join(&mut self) -> Option<RuntimeError> {
        let mut first_error = None;
        while let Some(done) = self.tasks.join_next_with_id().await {
            match done {
                Ok((id, Ok(()))) => {
                    self.by_task.remove(&id);
                }
                Ok((id, Err(e))) => {
                    self.by_task.remove(&id);
                    tracing::error!(error = %e, "a Mind stopped");
                    first_error.get_or_insert(e);
                }
                Err(e) => self.panicked(e),
            }
        }
        first_error
    }

    /// A task ended without returning: logs why and restarts its Mind on the backoff.
    fn panicked(&mut self, error: JoinError) {
        let Some(gone) = self.by_task.remove(&error.id()) else {
            tracing::error!(%error, "a task of unknown Mind ended");
            return;
        };
        let id = gone.mind.id.clone();
        let why = panic_message(error);
        if *self.shutdown.borrow() {
            tracing::error!(mind = %id, panic = %why, "a Mind's task panicked while stopping");
            return;
        }
        let now = self.host.clock.now_ms();
        let steady = gone.started.elapsed() >= Duration::from_millis(STEADY_MS);
        let (panics, since_ms) = if steady || gone.panics == 0 {
            (1, now)
        } else {
            (gone.panics.saturating_add(1), gone.since_ms)
        };
        let delay_ms = RetryPolicy::default().delay_ms(panics, None);
        // What a run the panic stopped is failed with, by the new runner (`stranded.rs`).
        let panic = why.clone();
        let failure = Err(RuntimeError::Panicked(why));
        let telemetry = &self.host.telemetry;
        telemetry.stepped(&id, None, &failure, now);
        let error = failure.err().map(|e| e.to_string()).unwrap_or_default();
        tracing::error!(mind = %id, panics, delay_ms, %error, "a Mind's task panicked: restarting it");
        let retrying = Activity::Retrying {
            error,
            since_ms,
            attempts: panics,
            next_attempt_ms: now.saturating_add(delay_ms),
        };
        self.host.signals.set_activity(&id, retrying);
        let restart = self.spawn(gone.mind, delay_ms as u64, panics, since_ms, Some(panic));
        if let Err(e) = restart {
            tracing::error!(mind = %id, error = %e, "a panicked Mind could not be restarted");
        }
    }
}

/// What a panic said, when it said it with a string (`panic!` with a message does).
fn panic_message(error: JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    muninn_backend::panic::payload_text(&*error.into_panic())
}
