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
//!    that fails waits in the role's queue and is committed first at the next step (`pending.rs`):
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
mod failed;
mod held;
mod host_lease;
mod idle;
mod lease;
mod lost;
mod pending;
mod persona;
mod prompts;
mod reply;
mod retry;
mod run;
mod segment;
mod self_run;
mod session;
mod stranded;
mod supervise;
mod takeover;
mod tool_loop;
pub mod tools;
mod wake;
mod window;

pub use host_lease::{HostLeases, renew_host_leases, spawn_renewer};
pub use persona::next_batch;
pub use prompts::*;
pub use reply::*;
pub use retry::{Failing, RETRY_AFTER_CAP_MS, RETRY_BASE_MS, RETRY_CAP_MS, RetryPolicy};
pub use run::{run_mind, run_minds};
pub use supervise::STEADY_MS;

use crate::config::MindConfig;
use crate::{Activity, Host};
use muninn_backend::{Backend, BackendError};
use muninn_core::decide::Policy;
use muninn_core::price::{ModelPrice, PriceTable};
use muninn_store::{BriefStatus, FencingToken, Lease, MindSettings, Role, StoreError};
use serde_json::Value;
use session::Session;

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
    /// The store failed between an answer the provider gave and its commit: the answer waits
    /// in its role's queue and is committed first at the next step (`pending.rs`), never asked
    /// for again. A store failure (retried, counted under `cause="store"`) that says so.
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
    /// The Mind's task panicked (a bug under its step): the Mind is restarted with a new
    /// runner, which recovers from the store (`supervise.rs`).
    #[error("the Mind's task panicked: {0} (restarted with a new runner, from the store)")]
    Panicked(String),
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
    /// The Persona's reply schema (`reply_schema` of `mind`), derived once: `mind` does not
    /// change for the runner's life, and deriving it through `schemars` for every reply's
    /// validation was a fixed share of each turn's CPU.
    persona_schema: Value,
    holder: String,
    price: ModelPrice,
    policy: Policy,
    lease: Option<Lease>,
    persona: Session<B>,
    selfs: Session<B>,
    /// The Persona turns of the current wake, against the per-wake limit (`wake.rs`).
    wake: wake::WakeTurns,
    /// When the current step began (a request's latency is measured from it).
    step_started: tokio::time::Instant,
    /// The session the current step works on, once it is known (a failed step's backend error
    /// is counted against it).
    working: Option<Role>,
    /// The Persona batch rendered on this session whose delivery this segment holds (or whose
    /// append is unconfirmed) but no attempt has answered yet (`attempt.rs`): a retry re-sends
    /// it instead of rendering and recording it again. A new lease forgets it (`lease.rs`).
    attempt: Option<attempt::Attempt>,
    /// A claimed Self brief this runner runs at its next step: its append unconfirmed, or found
    /// recorded and never answered (`attempt.rs`). A new lease forgets it (`lease.rs`).
    held_brief: Option<attempt::HeldBrief>,
    /// A held brief this runner let go at a new lease, its ask mark unconfirmed: never sent by
    /// this runner, whatever its mark says, so the recovery under the new lease runs it rather
    /// than fail it as a run that may have acted — if that mark is still the last item, not
    /// another holder's after it (`stranded.rs`).
    unsent_brief: Option<attempt::Unsent>,
    /// A tool loop's request whose commit landed though it was given up under a new lease
    /// (`pending.rs`): its brief, and the result that says the store's failure stopped the run,
    /// for the recovery to report rather than a run its host abandoned (`stranded.rs`).
    request_landed: Option<(i64, String)>,
    /// Drawn at random when the runner is made, and the keyed appends it made since: what
    /// makes each append key its own (`attempt.rs`).
    nonce: u64,
    appends: u64,
    /// The provider refused a batch as too long (`window.rs`): the next batch from the same
    /// delivery takes at most half as many.
    window_cut: Option<window::Cut>,
    /// The settings and ack position held between consecutive Persona turns (`held.rs`).
    held: Option<held::Held>,
    /// The Mind's wake-up count on this host ([`crate::Signals::wakes`]).
    wakes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Steps that used `held` instead of reading the store.
    held_reads_saved: u64,
    /// This runner may have abandoned a Self run (it is new, took a new lease, or a step
    /// failed): the next step looks for briefs left `running` (`stranded.rs`).
    check_stranded: bool,
    /// The runner took a new lease (or is new): the next step ledgers a Persona request whose
    /// answer its last holder lost (`lost.rs`).
    check_lost: bool,
    /// What the stranded brief's report says stopped it (`stranded.rs`): the first step that
    /// failed since the last check, unless a new lease came first (`None`: its holder stopped).
    stranded_by: Option<stranded::StrandedBy>,
    /// The panic that ended the runner this one replaced (`supervise.rs`), until the first
    /// check for stranded briefs: what stopped a run it finds, not its host (which ran on).
    panicked: Option<String>,
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
        let nonce = getrandom::u64()
            .map_err(|e| RuntimeError::Config(format!("no randomness for append keys: {e}")))?;
        host.leases.runner_started(&holder, &mind.id);
        Ok(MindRunner {
            host,
            persona_schema: reply_schema(&mind),
            mind,
            holder,
            price,
            policy,
            lease: None,
            persona,
            selfs,
            wake: wake::WakeTurns::default(),
            step_started: tokio::time::Instant::now(),
            working: None,
            attempt: None,
            held_brief: None,
            unsent_brief: None,
            request_landed: None,
            nonce,
            appends: 0,
            window_cut: None,
            held: None,
            wakes,
            held_reads_saved: 0,
            check_stranded: true,
            check_lost: true,
            stranded_by: None,
            panicked: None,
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
        self.wake.woken();
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
        // A write refused by the fence: the lease is another's now (`lease.rs`).
        if let Err(RuntimeError::Store(StoreError::Fenced { presented, .. })) = &result
            && self.lease.as_ref().is_some_and(|l| l.token.0 == *presented)
        {
            self.lost_lease(now);
        }
        // The attempts the provider billed and cut are ledgered; a failed step's are committed
        // now (`failed.rs`).
        self.ledger_after_step(token, result.is_err()).await;
        // A failed step may have left its brief running. What stranded a brief is the first
        // cause since the last check (a new lease, or this failure): a step that fails before
        // the check runs only delays it.
        if let Err(e) = &result {
            if !self.check_stranded {
                self.stranded_by = Some(stranded::StrandedBy::of(e));
            }
            self.check_stranded = true;
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
        // What waits to be committed goes first: no decision is taken on an accounting that
        // counts an answer the ledger lacks, and a cut row whose commit landed unanswered is
        // counted twice by the spend cap while it waits (`pending.rs`).
        if let Some(step) = self.settle_waiting(token).await? {
            return Ok(step);
        }
        // A request sent under the last lease whose answer was lost with its host is ledgered
        // at its estimate before the accounting is read back from the ledger (`lost.rs`).
        if self.check_lost {
            self.ledger_lost_answer(token).await?;
            self.check_lost = false;
        }
        for role in [Role::Persona, Role::SelfRole] {
            if let Some(why) = self.session(role).restore {
                self.restore(role, token, why).await?;
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
        // Clamped, not cast: a stored value out of the API's bounds still means "many", never
        // "none" (4294967296 cast to u32 is 0, which would stop the Mind).
        let limit = settings.turn_limit.map_or(self.mind.turns_per_wake, |l| {
            u32::try_from(l.clamp(1, muninn_api::limits::MAX_TURNS_PER_WAKE)).unwrap_or(1)
        });
        let seqs = pending
            .first()
            .zip(pending.last())
            .map(|(f, l)| (f.seq, l.seq));
        if self.wake.may_take_turn(seqs, limit) {
            self.report_running(Role::Persona, now);
            self.working = Some(Role::Persona);
            // Only a recorded turn counts (`wake.rs`): not a failed one (`?`), nor one the cap
            // refused.
            let step = self
                .persona_turn(token, now, next_batch(&pending).to_vec(), &settings)
                .await?;
            if step != Step::OverBudget {
                self.wake.turn_taken();
            }
            return Ok(step);
        }
        // Briefs are looked at only when no Persona turn is due (one query less per turn).
        if let Some(step) = self.next_brief(token, now, &settings).await? {
            return Ok(step);
        }
        self.idle(token, now).await
    }

    /// The brief this runner holds, else the oldest queued Self brief, priced against the cap,
    /// claimed and run: `None` when no brief is queued or the claim found none.
    async fn next_brief(
        &mut self,
        token: FencingToken,
        now: i64,
        settings: &MindSettings,
    ) -> Result<Option<Step>, RuntimeError> {
        // Claimed already: it goes first, as the one brief running, priced again — it is sent
        // now, and a brief run again after a crash may cost what it cost before.
        if let Some(held) = self.held_brief.take() {
            // Still held when this fails (the spend read, a resume): only the runner knows the
            // brief was never sent, and a brief let go here would be failed by the recovery as
            // one that may have acted (`stranded.rs`).
            let over = match self.held_over_cap(&held, now, settings).await {
                Ok(over) => over,
                Err(e) => {
                    self.held_brief = Some(held);
                    return Err(e);
                }
            };
            if over {
                self.held_brief = Some(held);
                return Ok(Some(Step::OverBudget));
            }
            self.report_running(Role::SelfRole, now);
            self.working = Some(Role::SelfRole);
            return self.run_held_brief(token, now, held).await.map(Some);
        }
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

    /// Whether the held brief, priced as it will run, could cross the spend cap (its session
    /// resumed first under a new lease).
    async fn held_over_cap(
        &mut self,
        held: &attempt::HeldBrief,
        now: i64,
        settings: &MindSettings,
    ) -> Result<bool, RuntimeError> {
        self.resume_on_new_lease(Role::SelfRole, now).await?;
        let plan = match &held.attempt {
            Some((_, plan)) => *plan,
            None => self.plan_self(&held.brief, now),
        };
        let worst = self.worst_case(Role::SelfRole, &plan, now);
        self.would_cross_cap(now, settings, worst).await
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
