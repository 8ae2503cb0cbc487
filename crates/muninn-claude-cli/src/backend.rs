//! [`ClaudeCliBackend`]: the [`Backend`] handle — it starts the driver task for a session
//! (fresh, resumed through a verified handle, or forked), sends it turns, runs and compactions,
//! and joins a process pool.

use crate::binding::{Handle, SessionBinding};
use crate::config::fresh_session_id;
use crate::messages::{
    BilledQueue, Command, EventQueue, InterruptHandle, ParkReport, TurnDone, TurnReport,
};
use crate::{CliConfig, SessionEvent, driver, pool, transcript_path};
use muninn_backend::{
    Backend, BackendError, Capability, FailedAttempt, FlushProtocol, FlushStage, RunOutcome,
    SessionSpec, TurnInput, TurnOutcome,
};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// The claude-cli [`Backend`]: a handle to the task that owns one long-lived CLI child.
#[derive(Debug)]
pub struct ClaudeCliBackend {
    config: CliConfig,
    commands: Option<mpsc::Sender<Command>>,
    interrupts: Option<mpsc::Sender<()>>,
    last_report: Option<TurnReport>,
    /// The session spec of the running session (what a handle binds).
    spec: Option<SessionSpec>,
    /// The session the CLI writes now (the configured one until a resume or reseed moves it).
    session_id: String,
    /// A handle, the transcript it is claimed over and whether to fork it, for the next
    /// [`Backend::start`].
    claim: Option<Claim>,
    /// The pool this session shares budgets in, and its key there.
    pool: Option<(pool::SharedPool, String)>,
    /// The host's seed ([`Backend::set_seed`]), shared with the driver, which renders it when a
    /// session has to be reseeded.
    seed: Arc<Mutex<Option<String>>>,
    /// Session events as they happen, shared with every driver this backend starts; drained by
    /// [`Backend::take_session_events`].
    events: EventQueue,
    /// What the CLI billed beside the turns it answered, shared with every driver this backend
    /// starts; drained by [`Backend::take_failed_attempts`].
    billed: BilledQueue,
}

/// A handle claimed for the next start.
#[derive(Debug)]
struct Claim {
    handle: Handle,
    items: Vec<Vec<u8>>,
    fork: bool,
}

impl ClaudeCliBackend {
    /// A backend with no session yet; [`Backend::start`] launches the child.
    pub fn new(config: CliConfig) -> ClaudeCliBackend {
        ClaudeCliBackend {
            session_id: config.session_id.clone(),
            config,
            commands: None,
            interrupts: None,
            last_report: None,
            spec: None,
            claim: None,
            seed: Arc::new(Mutex::new(None)),
            pool: None,
            events: EventQueue::default(),
            billed: BilledQueue::default(),
        }
    }

    /// Joins `pool` under `key` (unique in the pool): from now on a start or a turn that needs a
    /// new child first waits for room in the pool's budgets, and the pool may park this session
    /// between turns (never during one). Works before or after [`Backend::start`].
    pub fn join_pool(&mut self, pool: pool::SharedPool, key: impl Into<String>) {
        let key = key.into();
        pool.register(&key, self.commands.as_ref().map(mpsc::Sender::downgrade));
        self.pool = Some((pool, key));
    }

    /// Asks the next [`Backend::start`] to resume `handle`'s session, if `handle` verifies over
    /// the session spec given to `start` and `items` (the caller's transcript now, each item in
    /// the bytes it was minted over). If it does not, a fresh session is seeded instead and the
    /// first turn's report carries [`SessionEvent::Reseeded`] saying why.
    pub fn resume_with<I, B>(&mut self, handle: Handle, items: I)
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        self.claim_handle(handle, items, false);
    }

    /// As [`ClaudeCliBackend::resume_with`], but the session is continued as a copy under a new
    /// id (`--resume <id> --fork-session`) when the handle verifies: for a session another
    /// writer may still hold. The first turn reports [`SessionEvent::Forked`].
    pub fn fork_with<I, B>(&mut self, handle: Handle, items: I)
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        self.claim_handle(handle, items, true);
    }

    fn claim_handle<I, B>(&mut self, handle: Handle, items: I, fork: bool)
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let items = items.into_iter().map(|i| i.as_ref().to_vec()).collect();
        self.claim = Some(Claim {
            handle,
            items,
            fork,
        });
    }

    /// Mints the handle of the current session over `items` (the caller's transcript including
    /// the turn just taken). `None` without a [`CliConfig::binding_key`] or a started session.
    pub fn mint_handle<I, B>(&self, items: I) -> Option<Handle>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let key = self.config.binding_key.as_ref()?;
        let spec = self.spec.as_ref()?;
        let instructions = spec.system.join("\n\n");
        Some(binding_of(spec, &instructions, &self.session_id).mint(key, items))
    }

    /// The session the CLI writes now.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Decides which session `start` continues: the claimed one when its handle verifies, the
    /// configured one when there is no key (or nothing on disk), else a fresh one.
    fn start_plan(&mut self, spec: &SessionSpec) -> driver::StartPlan {
        let configured = self.config.session_id.clone();
        let Some(key) = &self.config.binding_key else {
            return driver::StartPlan {
                session_id: configured,
                refuse_resume: None,
                vouched: false,
                fork: false,
            };
        };
        let instructions = spec.system.join("\n\n");
        match self.claim.take() {
            Some(Claim {
                handle,
                items,
                fork,
            }) => {
                if binding_of(spec, &instructions, &handle.session_id).verify(key, &handle, &items)
                {
                    driver::StartPlan {
                        session_id: handle.session_id,
                        refuse_resume: None,
                        vouched: true,
                        fork,
                    }
                } else {
                    driver::StartPlan {
                        session_id: handle.session_id,
                        refuse_resume: Some(
                            "the session binding did not verify: the transcript, instructions, \
                             model or tools changed since the handle was minted"
                                .to_string(),
                        ),
                        vouched: false,
                        fork: false,
                    }
                }
            }
            // No claim is a fresh session by the caller's choice (a new segment): the next
            // unused derived id, never the one on disk (which no handle vouches for), and no
            // reseed event — nothing was lost.
            None if transcript_path(&self.config, &configured).is_some() => driver::StartPlan {
                session_id: fresh_session_id(&self.config),
                refuse_resume: None,
                vouched: false,
                fork: false,
            },
            None => driver::StartPlan {
                session_id: configured,
                refuse_resume: None,
                vouched: false,
                fork: false,
            },
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CliConfig {
        &self.config
    }

    /// A handle that interrupts this backend's running turn.
    pub fn interrupter(&self) -> InterruptHandle {
        InterruptHandle {
            tx: self.interrupts.clone(),
        }
    }

    /// What the driver saw of the last turn (retries also of a failed turn, session events,
    /// the raw `result`, the driver's own overhead).
    pub fn last_report(&self) -> Option<&TurnReport> {
        self.last_report.as_ref()
    }

    /// The live child's pid, if one is running.
    pub async fn child_pid(&self) -> Option<u32> {
        let tx = self.commands.as_ref()?;
        let (reply, rx) = oneshot::channel();
        tx.send(Command::Pid { reply }).await.ok()?;
        rx.await.ok().flatten()
    }

    /// Parks the session: stops the child as [`ClaudeCliBackend::shutdown`] does (stdin closed,
    /// then SIGTERM, then SIGKILL) but keeps the session, so the next turn relaunches it with
    /// `--resume` (about 0.8 s) and reports [`SessionEvent::Unparked`]. `None` when no child was
    /// running.
    pub async fn park(&mut self) -> Option<ParkReport> {
        let tx = self.commands.as_ref()?;
        let (reply, rx) = oneshot::channel();
        tx.send(Command::Park { reply }).await.ok()?;
        rx.await.ok().flatten()
    }

    /// Closes the child's stdin and waits for it to exit (the CLI finishes a running turn
    /// first), then SIGTERM after [`CliConfig::shutdown_timeout`], then SIGKILL. Returns the
    /// exit status when there was a child.
    pub async fn shutdown(&mut self) -> Option<std::process::ExitStatus> {
        self.interrupts = None;
        let tx = self.commands.take()?;
        let (reply, rx) = oneshot::channel();
        let sent = tx.send(Command::Shutdown { reply }).await;
        let status = match sent {
            Ok(()) => rx.await.ok().flatten(),
            Err(_) => None,
        };
        if let Some((pool, key)) = &self.pool {
            pool.mark_down(key);
        }
        status
    }
}

impl Backend for ClaudeCliBackend {
    fn name(&self) -> &str {
        "claude-cli"
    }

    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        if !spec.tools.is_empty() {
            // Only the CLI's built-in ones, `CliConfig::tools`: muninn's would need an MCP bridge.
            return Err(BackendError::Unsupported {
                capability: Capability::CustomTools,
            });
        }
        if self.config.max_budget_micro_usd.is_some() && self.config.run_budget_micro_usd.is_some()
        {
            return Err(BackendError::Invalid(
                "max_budget_micro_usd (per process) and run_budget_micro_usd (per run) cannot \
                 both be set: the CLI takes one --max-budget-usd"
                    .into(),
            ));
        }
        if let Some(schema) = &spec.output_schema
            && !schema.is_object()
        {
            return Err(BackendError::Invalid(
                "the output schema must be a JSON object".into(),
            ));
        }
        self.shutdown().await;
        let plan = self.start_plan(&spec);
        // The driver may still move off this id (a refused resume, a lost session); reports
        // carry the id it really used.
        self.session_id = plan.session_id.clone();
        // The driver launches the child at once, so a pooled session needs room first.
        let ticket = match &self.pool {
            Some((pool, key)) => Some(pool.acquire(key).await),
            None => None,
        };
        let (commands, interrupts) = driver::spawn(
            self.config.clone(),
            spec.clone(),
            plan,
            self.seed.clone(),
            self.events.clone(),
            self.billed.clone(),
        )?;
        let weak = commands.downgrade();
        self.commands = Some(commands);
        if let Some(ticket) = ticket {
            ticket.started(weak, self.child_pid().await);
        }
        self.interrupts = Some(interrupts);
        self.spec = Some(spec);
        Ok(())
    }

    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        self.send_turn(input, None).await.0
    }

    async fn compact(&mut self, instructions: &str) -> Result<TurnOutcome, BackendError> {
        let instructions = instructions.to_string();
        self.exchange(|reply| Command::Compact {
            instructions,
            reply,
        })
        .await
        .0
    }

    /// What the CLI billed beside the turns it answered: a subagent's requests (in the
    /// `result`'s `model_usage_since_last_result`, not in its `usage`) and the turns it started
    /// by itself (`driver/beside.rs`).
    fn take_failed_attempts(&mut self) -> Vec<FailedAttempt> {
        match self.billed.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        match self.events.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    async fn close(&mut self) {
        self.shutdown().await;
    }

    fn binds_sessions(&self) -> bool {
        self.config.binding_key.is_some()
    }

    fn failure_left_session(&self) -> bool {
        self.last_report.as_ref().is_some_and(|r| r.rewound)
    }

    fn failure_kept_turn(&self) -> bool {
        self.last_report.as_ref().is_some_and(|r| r.held)
    }

    fn session_handle(&self, items: &[Vec<u8>]) -> Option<String> {
        self.mint_handle(items).map(|h| h.encode())
    }

    fn resume_session(&mut self, handle: &str, items: &[Vec<u8>], fork: bool) -> bool {
        match Handle::decode(handle) {
            Ok(handle) => {
                self.claim_handle(handle, items, fork);
                true
            }
            // An unreadable handle vouches for nothing: `start` then treats a session on disk
            // as unvouched and seeds a fresh one.
            Err(_) => false,
        }
    }

    fn set_seed(&mut self, seed: Option<String>) {
        if let Ok(mut slot) = self.seed.lock() {
            *slot = seed;
        }
    }

    async fn run(
        &mut self,
        input: TurnInput,
        protocol: &FlushProtocol,
    ) -> Result<RunOutcome, BackendError> {
        let (result, flush) = self.send_turn(input, Some(protocol.clone())).await;
        Ok(RunOutcome {
            outcome: result?,
            flush,
        })
    }
}

impl ClaudeCliBackend {
    /// Sends one turn (under the flush protocol when given) and records its report.
    async fn send_turn(
        &mut self,
        input: TurnInput,
        flush: Option<FlushProtocol>,
    ) -> (Result<TurnOutcome, BackendError>, FlushStage) {
        self.exchange(|reply| Command::Turn {
            input,
            flush,
            reply,
        })
        .await
    }

    /// Sends one command that ends in a `result` (a turn, a run, a compaction) and waits for it.
    async fn exchange(
        &mut self,
        command: impl FnOnce(oneshot::Sender<TurnDone>) -> Command,
    ) -> (Result<TurnOutcome, BackendError>, FlushStage) {
        let stopped = || {
            (
                Err(BackendError::Transport(
                    "the claude-cli driver has stopped".into(),
                )),
                FlushStage::NotNeeded,
            )
        };
        let called_at = Instant::now();
        // A command that never reaches the driver leaves no report: none of an earlier one
        // may answer for it ([`Backend::failure_left_session`] reads it).
        self.last_report = None;
        let Some(tx) = &self.commands else {
            return (
                Err(BackendError::Invalid("no session started".into())),
                FlushStage::NotNeeded,
            );
        };
        // Held until the command ends, so the pool never parks this session mid-turn (a long
        // flush-protocol run and a compaction included).
        let ticket = match &self.pool {
            Some((pool, key)) => Some(pool.acquire(key).await),
            None => None,
        };
        let (reply, rx) = oneshot::channel();
        if tx.send(command(reply)).await.is_err() {
            return stopped();
        }
        let Ok(done) = rx.await else {
            return stopped();
        };
        let mut report = done.report;
        if let Some(w) = done.written_at {
            report.to_write = w.saturating_duration_since(called_at);
        }
        if let Some(r) = done.result_read_at {
            report.from_result = r.elapsed();
        }
        if !report.session_id.is_empty() {
            self.session_id = report.session_id.clone();
        }
        if let Some(ticket) = ticket {
            ticket.turn_ended(report.pid, &report.session_events);
        }
        self.last_report = Some(report);
        (done.result, done.flush)
    }
}

/// What a handle of `session_id` binds under `spec` (`instructions` is the joined system prompt,
/// exactly as the CLI receives it).
fn binding_of<'a>(
    spec: &'a SessionSpec,
    instructions: &'a str,
    session_id: &'a str,
) -> SessionBinding<'a> {
    SessionBinding {
        session_id,
        instructions,
        model: &spec.model,
        tools: &spec.tools,
    }
}
