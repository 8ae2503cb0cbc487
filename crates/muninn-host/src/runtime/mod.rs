//! The runtime: each Mind's Persona and Self as persistent, append-only sessions.
//!
//! # A Persona turn, end to end
//!
//! [`MindRunner::step`] takes the next piece of work: a Persona turn when deliveries are
//! pending, else a queued Self brief, else an idle decision. A Persona turn
//! (`persona.rs`) is a short pipeline:
//!
//! 1. **batch** — the mailbox's oldest deliveries sharing a conversation ([`next_batch`]: all
//!    public rooms together, or one DM room alone), with their ids, senders and size;
//! 2. **plan** — the decider (`muninn_core::decide::decide`, the function replay runs) on the
//!    session's accounting: append, or refresh into a new segment (compacting the provider
//!    session in place with `refresh = "compact"`); a first turn or a lost session starts a
//!    segment without asking;
//! 3. **render** — the turn's user message (notices for changed layers, room history shown once
//!    per segment);
//! 4. **record the delivery** — the message goes into the transcript *before* the call;
//! 5. **ask** — the backend's turn, the reply checked against the reply contract (`reply.rs`),
//!    one retry with the reason, then a recorded failure;
//! 6. **build the turn's record** — transcript, outbox rows with request ids `<batch>-<index>`,
//!    the ledger rows, `remember[]` notes, `start_self_run` briefs, the ack through the batch's
//!    max seq — a pure builder;
//! 7. **commit** — one transaction. A crash anywhere before it re-delivers the batch; after it
//!    nothing is left to redo, and request ids make a re-sent reply the same message. A commit
//!    that fails is held on the runner and committed first at the next step (`pending.rs`):
//!    the answer is neither asked for again nor lost.
//!
//! # The Self
//!
//! Briefs (from a Persona's `start_self_run` or the operator) queue for the Mind's one Self
//! session (`self_run.rs`). Each brief is a turn; its start is a task boundary where the decider
//! may refresh (flushing the session's memory first). A run that nears the context ceiling is
//! flushed under the flush protocol ([`muninn_backend::Backend::run`]) and the next brief opens
//! a new segment from that memory. The result reaches the Persona as a delivery from room
//! `self`. With a workspace on a backend that takes muninn's own tools, the host drives the run
//! itself, request by request, as a bounded tool loop over read-only tools confined to the
//! workspace (`tool_loop.rs`, `tools.rs`): each request decided (a `mask` clears old results
//! mid-run) and one ledger row, each call and result recorded once.
//!
//! # Idle
//!
//! With nothing to do, each session's accounting names its next decision point (`idle.rs`):
//! shortly before the tail's TTL runs out the decider may ping (keep it warm), flush (the Self:
//! write memory while the cache is warm), or let it go; then shortly before the head's, a
//! head-only ping or nothing.
//!
//! # One economy
//!
//! Every counter the decider reads is kept by [`muninn_core::session::Accounting`], the type
//! the replay engine drives (`accounting.rs`). Each ledger row carries its decision record and
//! reaches the accounting through the same call a replay of the row makes; a new lease reads
//! the role's ledger back through it. `muninn replay --closed-loop` on the host's ledger export
//! therefore reproduces every decision the host recorded, and its cost.
//!
//! # Resuming after a restart or takeover
//!
//! A segment row keeps its memory layer and a digest of its session spec; after each turn the
//! backend's session handle is stored with it, bound to the segment's transcript (`segment.rs`).
//! A new lease rebuilds the renderer from the start layers and the transcript replayed, and
//! resumes the provider session through the handle (forked unless the previous holder released
//! the lease cleanly), seeded from the rendered transcript if the handle no longer verifies. A
//! spec that changed, a missing handle or an unanswered last turn opens a fresh segment.
//!
//! # One writer per Mind
//!
//! Every write carries the Mind's lease fencing token (`lease.rs`); a host that cannot take the
//! lease does not run the Mind, and a host whose token went stale stops at its next write.
//! A live lease whose holder is provably gone (this data directory's crashed earlier process,
//! or a host whose database session ended) is taken over at once (`takeover.rs`).

mod accounting;
mod attempt;
mod budget;
mod held;
mod host_lease;
mod idle;
mod lease;
mod pending;
mod persona;
mod prompts;
mod reply;
mod retry;
mod segment;
mod self_run;
mod session;
mod stranded;
mod takeover;
mod tool_loop;
pub mod tools;
mod window;

pub use host_lease::{HostLeases, renew_host_leases, spawn_renewer};
pub use persona::next_batch;
pub use prompts::*;
pub use reply::*;
pub use retry::{Failing, RETRY_BASE_MS, RETRY_CAP_MS, RetryPolicy};

use crate::config::MindConfig;
use crate::{Activity, Host};
use muninn_backend::{Backend, BackendError};
use muninn_core::decide::Policy;
use muninn_core::price::{ModelPrice, PriceTable};
use muninn_store::{BriefStatus, FencingToken, Lease, MindSettings, Role, StoreError};
use serde_json::Value;
use session::Session;
use std::time::Duration;
use tracing::Instrument;

/// How long a lease lasts by default (`lease_ttl_ms` in the configuration); it is renewed when
/// less than a third is left.
pub const LEASE_TTL_MS: i64 = 30_000;

/// The decider is asked this long before the tail's TTL runs out.
pub const DECIDE_BEFORE_EXPIRY_MS: i64 = 30_000;

/// Pending deliveries read per step: a batch is a prefix of them, so a small page keeps a deep
/// mailbox from being re-read whole on every turn (a longer batch continues next turn).
pub const PENDING_PAGE: i64 = 32;

/// The room a Self run's result reaches the Persona from.
pub const SELF_ROOM: &str = "self";

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store failed; [`StoreError::is_retryable`] says whether to try again.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The store failed between an answer the provider gave and its commit: the answer is held
    /// on the runner and committed first at the next step (`pending.rs`), never asked for
    /// again. A store failure (retried, counted under `cause="store"`) that says so.
    #[error(
        "store: {0} (an answer is held uncommitted: it is committed first at the next attempt)"
    )]
    Held(StoreError),
    /// The backend failed; the batch stays in the mailbox and is re-delivered.
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// The configuration cannot be run (an unknown model, an unreadable doctrine file, …).
    #[error("configuration: {0}")]
    Config(String),
    /// The turn's prompt and reply cannot fit the model's context window (`window.rs`):
    /// nothing was sent, the deliveries stay queued.
    #[error(
        "prompt too large: {prompt} tokens + {max_output} of reply exceed the model's context window of {window}; not sent, the deliveries stay queued"
    )]
    PromptTooLarge {
        /// Tokens the prompt would have.
        prompt: u64,
        /// The reply's bound (`max_output_tokens`).
        max_output: u64,
        /// The model's context window.
        window: u64,
    },
}

/// What one call of [`MindRunner::step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Another host holds this Mind's lease.
    NotLeader,
    /// The operator brake is on: no call, no send.
    Braked,
    /// The spend cap would be crossed: the spend in the window plus the most the next request
    /// can cost (`budget.rs`) is over it. No call, nothing recorded.
    OverBudget,
    /// A Persona turn was recorded (ack position after it).
    PersonaTurn {
        /// The mailbox position acknowledged.
        acked_through: i64,
        /// Whether the reply was valid (otherwise a failure was recorded).
        valid: bool,
    },
    /// A Self brief was run.
    SelfTurn {
        /// The brief's seq.
        brief: i64,
    },
    /// A keep-warm ping was sent.
    Ping,
    /// Nothing to do until the given time (or a wake-up).
    Idle {
        /// When to look again, Unix ms (`None`: only on a wake-up).
        until_ms: Option<i64>,
    },
}

/// One Mind's runner: owns its two sessions and is the only task that writes for it.
pub struct MindRunner<B: Backend> {
    host: Host,
    mind: MindConfig,
    holder: String,
    price: ModelPrice,
    policy: Policy,
    lease: Option<Lease>,
    persona: Session<B>,
    selfs: Session<B>,
    turns_this_wake: u32,
    /// The newest delivery seq seen: a newer one is an arrival, so a new wake.
    newest_seen: i64,
    /// A wake cut short by a failed step whose turns a later wake still owes (see `work`).
    wake_owed: bool,
    /// When the current step began (a request's latency is measured from it).
    step_started: tokio::time::Instant,
    /// The session the current step works on, once it is known (a failed step's backend error
    /// is counted against it).
    working: Option<Role>,
    /// The Persona batch whose delivery this segment holds but no attempt has answered yet
    /// (`attempt.rs`): a retry re-sends it instead of recording it again.
    attempt: Option<attempt::Attempt>,
    /// The settings and ack position held between consecutive Persona turns (`held.rs`).
    held: Option<held::Held>,
    /// An answer whose commit failed, committed first at the next step (`pending.rs`).
    uncommitted: Option<pending::Uncommitted>,
    /// The Mind's wake-up count on this host ([`crate::Signals::wakes`]).
    wakes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Steps that used `held` instead of reading the store.
    held_reads_saved: u64,
    /// This runner may have abandoned a Self run (it is new, took a new lease, or a step
    /// failed): the next step looks for briefs left `running` (`stranded.rs`).
    check_stranded: bool,
    /// The failed step that may have left a brief running, when one did (not a new lease):
    /// what the stranded brief's report says stopped it (`stranded.rs`).
    stranded_by: Option<stranded::StrandedBy>,
    /// Money spent on answers abandoned uncommitted, kept for the spend cap (`budget.rs`).
    abandoned: budget::Abandoned,
}

impl<B: Backend> std::fmt::Debug for MindRunner<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MindRunner")
            .field("mind", &self.mind.id)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Drop for MindRunner<B> {
    fn drop(&mut self) {
        // The host's lease renewal keeps only Minds that have a runner here (`host_lease.rs`).
        self.host.leases.runner_stopped(&self.holder, &self.mind.id);
    }
}

impl<B: Backend> MindRunner<B> {
    /// A runner for `mind`, holding leases as `holder`, with one backend per role.
    pub fn new(
        host: Host,
        mind: MindConfig,
        holder: String,
        prices: &PriceTable,
        persona_backend: B,
        self_backend: B,
    ) -> Result<MindRunner<B>, RuntimeError> {
        let price = prices
            .model(&mind.model)
            .map_err(|e| RuntimeError::Config(e.to_string()))?
            .clone();
        let policy = mind
            .policy
            .parse::<Policy>()
            .map_err(|e| RuntimeError::Config(format!("mind {}: {e}", mind.id)))?;
        let params = |role, backend: &B| {
            accounting::session_params(&mind, &price, role, accounting::pinging(backend))
        };
        let persona = Session::new(
            Role::Persona,
            params(Role::Persona, &persona_backend),
            persona_backend,
        );
        let selfs = Session::new(
            Role::SelfRole,
            params(Role::SelfRole, &self_backend),
            self_backend,
        );
        let wakes = host.signals.wakes(&mind.id);
        host.leases.runner_started(&holder, &mind.id);
        Ok(MindRunner {
            host,
            mind,
            holder,
            price,
            policy,
            lease: None,
            persona,
            selfs,
            turns_this_wake: 0,
            newest_seen: 0,
            wake_owed: false,
            step_started: tokio::time::Instant::now(),
            working: None,
            attempt: None,
            held: None,
            uncommitted: None,
            wakes,
            held_reads_saved: 0,
            check_stranded: true,
            stranded_by: None,
            abandoned: budget::Abandoned::default(),
        })
    }

    /// A role's session.
    fn session(&self, role: Role) -> &Session<B> {
        match role {
            Role::Persona => &self.persona,
            Role::SelfRole => &self.selfs,
        }
    }

    /// A role's session, to change.
    fn session_mut(&mut self, role: Role) -> &mut Session<B> {
        match role {
            Role::Persona => &mut self.persona,
            Role::SelfRole => &mut self.selfs,
        }
    }

    /// The Mind's id.
    pub fn id(&self) -> &str {
        &self.mind.id
    }

    /// Registers the Mind in the store (idempotent).
    pub async fn register(&self) -> Result<(), RuntimeError> {
        let now = self.host.clock.now_ms();
        let config = serde_json::to_value(&self.mind).unwrap_or(Value::Null);
        self.host
            .store
            .create_mind(&muninn_store::Mind {
                id: self.mind.id.clone(),
                display_name: self
                    .mind
                    .name
                    .clone()
                    .unwrap_or_else(|| self.mind.id.clone()),
                config,
                created_at_ms: now,
            })
            .await?;
        Ok(())
    }

    /// A new wake (a delivery, brief or settings change arrived): the per-wake turn limit
    /// starts again, and the settings and ack position are read again (`held.rs`).
    pub fn woken(&mut self) {
        self.turns_this_wake = 0;
        self.forget_held();
    }

    /// The session the last step worked on, once it got that far (for telemetry).
    pub fn working_role(&self) -> Option<Role> {
        self.working
    }

    /// Does the next piece of work, if any, keeping the lease renewed while it runs (however
    /// long the backend takes: see `lease.rs`).
    pub async fn step(&mut self) -> Result<Step, RuntimeError> {
        let now = self.host.clock.now_ms();
        self.step_started = tokio::time::Instant::now();
        self.working = None;
        let Some(token) = self.token(now).await? else {
            return Ok(Step::NotLeader);
        };
        let keeper = self.lease_keeper();
        let result = {
            let work = self.work(token, now);
            tokio::pin!(work);
            tokio::select! {
                biased;
                result = &mut work => result,
                never = keeper.run() => match never {},
            }
        };
        self.adopt_renewed(&keeper);
        // A failed step may have left its brief running.
        if let Err(e) = &result {
            self.check_stranded = true;
            self.stranded_by = Some(stranded::StrandedBy::of(e));
        }
        // Only a streak of Persona turns keeps what it read (`held.rs`).
        match &result {
            Ok(Step::PersonaTurn { acked_through, .. }) => self.ack_moved(*acked_through),
            _ => self.forget_held(),
        }
        result
    }

    /// The step's work under a lease taken at `now`.
    async fn work(&mut self, token: FencingToken, now: i64) -> Result<Step, RuntimeError> {
        // An answer whose commit failed goes first: no decision is taken on an accounting that
        // counts a row the ledger lacks (`pending.rs`).
        if let Some(step) = self.settle_held(token).await? {
            return Ok(step);
        }
        for role in [Role::Persona, Role::SelfRole] {
            if self.session(role).restore {
                self.restore(role).await?;
            }
        }
        self.recover_stranded_briefs(token, now).await?;
        let (settings, ack) = self.settings_and_ack(token, now).await?;
        if settings.brake {
            return Ok(Step::Braked);
        }
        let pending = self
            .host
            .store
            .pending_deliveries(&self.mind.id, ack, PENDING_PAGE)
            .await?;
        // Clamped, not cast: a stored value from before the API bounded it (4294967296 once
        // wrapped to 0 and stopped the Mind) still means "many", never "none".
        let limit = settings.turn_limit.map_or(self.mind.turns_per_wake, |l| {
            u32::try_from(l.clamp(1, muninn_api::limits::MAX_TURNS_PER_WAKE)).unwrap_or(1)
        });
        // A delivery not seen before is a new wake however it arrived: through this host's API
        // (which also wakes this runner) or through another host on the same database, which
        // cannot signal this one.
        if let Some(newest) = pending.last().map(|d| d.seq)
            && newest > self.newest_seen
        {
            // The wake before this one was cut short (a failed step: its deliveries are still
            // pending, its turns unspent). Its turns are owed, not merged into this one's: a
            // delivery that came while a failed turn backed off would otherwise wait for yet
            // another wake once the retried turn used this one's.
            let cut_short = pending.first().is_some_and(|d| d.seq <= self.newest_seen)
                && self.turns_this_wake < limit;
            self.wake_owed |= cut_short;
            self.newest_seen = newest;
            // A new wake for the turn limit; the settings just read stay good.
            self.turns_this_wake = 0;
        }
        if pending.is_empty() {
            self.wake_owed = false;
        } else if self.turns_this_wake >= limit && std::mem::take(&mut self.wake_owed) {
            self.turns_this_wake = 0;
        }
        let has_work = !pending.is_empty() && self.turns_this_wake < limit;
        if has_work {
            self.report_running(Role::Persona, now);
            self.working = Some(Role::Persona);
            // Only a turn that was recorded counts against the wake's limit: a failed one (`?`)
            // is retried on the runner's own backoff until it goes through, not left for the
            // next delivery to wake it.
            let step = self
                .persona_turn(token, now, next_batch(&pending).to_vec(), &settings)
                .await?;
            if step != Step::OverBudget {
                self.turns_this_wake += 1;
            }
            return Ok(step);
        }
        // Briefs are looked at only when no Persona turn is due (one query less per turn).
        if let Some(step) = self.next_brief(token, now, &settings).await? {
            return Ok(step);
        }
        self.idle(token, now).await
    }

    /// The oldest queued Self brief, priced against the cap, claimed and run: `None` when no
    /// brief is queued or the claim found none.
    async fn next_brief(
        &mut self,
        token: FencingToken,
        now: i64,
        settings: &MindSettings,
    ) -> Result<Option<Step>, RuntimeError> {
        let queued = self
            .host
            .store
            .briefs(&self.mind.id, Some(BriefStatus::Queued), 1)
            .await?;
        if let Some(next) = queued.first() {
            // Priced before the brief is claimed: a brief refused for the cap stays queued.
            self.resume_on_new_lease(Role::SelfRole, now).await?;
            let plan = self.plan_self(next, now);
            let worst = self.worst_case(Role::SelfRole, &plan, now);
            if self.would_cross_cap(now, settings, worst).await? {
                return Ok(Some(Step::OverBudget));
            }
            if let Some(brief) = self
                .host
                .store
                .claim_brief(&self.mind.id, token, now)
                .await?
            {
                self.report_running(Role::SelfRole, now);
                self.working = Some(Role::SelfRole);
                // The plan priced is the plan run. The claim takes the oldest queued brief,
                // the one priced, as only the lease holder claims; should it ever take another,
                // that one is planned afresh rather than run on another brief's plan.
                let plan = if brief.seq == next.seq {
                    plan
                } else {
                    self.plan_self(&brief, now)
                };
                return self.self_turn(token, now, brief, plan).await.map(Some);
            }
        }
        Ok(None)
    }
}

impl<B: Backend> MindRunner<B> {
    fn report_running(&self, role: Role, now: i64) {
        let running = Activity::Running {
            role,
            since_ms: now,
        };
        self.host.signals.set_activity(&self.mind.id, running);
    }
}

/// Runs a Mind until `shutdown` turns true: steps while there is work, sleeps until the next
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
            _ = shutdown.changed() => break,
        }
    }
}

/// Registers the Mind, retrying with backoff while the store refuses (a read-only data
/// directory, a full disk, a database server that is down): the Mind is marked failing with the
/// cause meanwhile (status, `/readyz`, metrics, a warning per attempt), and runs once the fault
/// clears — a host that gave up here ran no Mind and said nothing. False if stopped first.
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
            _ = shutdown.changed() => {}
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
    let mut tasks = tokio::task::JoinSet::new();
    for mind in host.config.minds.iter().cloned() {
        let persona = factory.make(host.clock.clone(), &prices, &format!("{}/persona", mind.id));
        let selfs = factory.make(host.clock.clone(), &prices, &format!("{}/self", mind.id));
        let runner = MindRunner::new(host.clone(), mind, holder.clone(), &prices, persona, selfs)?;
        tasks.spawn(run_mind(runner, shutdown.clone()));
    }
    // One renewal for every lease this host holds, instead of one per Mind (`host_lease.rs`).
    let renewer = spawn_renewer(host.clone(), holder.clone(), shutdown.clone());
    // The claude-cli sessions share one process pool: a sweeper parks the children idle longer
    // than they are worth. It runs beside the Minds and stops with them.
    if let Some(pool) = factory.process_pool() {
        host.telemetry.set_pool(pool.clone());
    }
    let sweeper = factory.process_pool().cloned().map(|pool| {
        let every = pool.config().policy.min_idle.clamp(
            Duration::from_millis(500),
            Duration::from_secs(POOL_SWEEP_EVERY_S),
        );
        spawn_every(every, shutdown.clone(), move || {
            let pool = pool.clone();
            async move {
                for event in pool.sweep(pool.now()).await {
                    tracing::info!(?event, "claude-cli pool");
                }
            }
        })
    });
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "a Mind stopped");
                first_error.get_or_insert(e);
            }
            Err(e) => {
                tracing::error!(error = %e, "a Mind's task panicked");
            }
        }
    }
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    renewer.abort();
    first_error.map_or(Ok(()), Err)
}

/// How often, at most, the claude-cli process pool is swept for idle children (more often when
/// the pool's `park_min_idle_s` is shorter).
const POOL_SWEEP_EVERY_S: u64 = 15;

/// Runs `tick` every `every` until `shutdown` turns true: the host's periodic chores (the
/// lease renewal, the process pool's sweep), each stopping with the Minds.
fn spawn_every<F, Fut>(
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
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                break;
            }
            tick().await;
        }
    })
}
