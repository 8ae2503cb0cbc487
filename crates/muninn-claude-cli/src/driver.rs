//! The one task that owns a CLI child: launches it, writes its stdin, reads its stdout, relaunches
//! or reseeds it, and stops it. Everything else talks to it through [`Command`]s.
//!
//! A turn is: make sure a child is alive (launching it with `--session-id` for a new session or
//! `--resume` for a known one), write one validated user line, then read events to that turn's
//! `result` — while also listening for interrupts and a timeout. A child that ends the stream
//! before it began the turn (no `system/init`, and nothing added to the CLI's own transcript of
//! the session — the init line may die in the child's stdout buffer) is relaunched and the line
//! written again, at most [`MAX_ATTEMPTS`] times; once the turn began, a death is an error,
//! because the request may already have reached the API.
//!
//! A run under the flush protocol ([`crate::flush`]) is the same read with a timer beside it:
//! after each event or deadline the driver asks [`crate::flush::decide`] what to do and does it.

use crate::event::{CliEvent, CompactMetadata, ResultEvent, decode};
use crate::flush::{FlushAction, FlushState, decide, prompt_tokens};
use crate::lines::{BoundedLines, Line, MAX_LINE_BYTES};
use crate::{
    CliConfig, Command, CredentialPassing, EventQueue, ParkReport, SessionEvent, TurnDone,
    TurnReport, derive_session_id,
};
use crate::{parse_model_usage, parse_usage, transcript_path};
use command_fds::CommandFdExt;
use muninn_backend::{
    BackendError, FlushProtocol, FlushStage, InputPart, RetryEvent, SessionSpec, ToolCall,
    TtlCheck, TurnInput, TurnOutcome,
};
use muninn_core::cache::Ttl;
use muninn_core::trace::Usage;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

/// Launch-and-write attempts per turn (a dead child, then a lost session, then give up).
const MAX_ATTEMPTS: u32 = 3;
/// stderr lines kept for error messages.
const STDERR_LINES: usize = 64;
/// Longest stderr line kept.
const STDERR_LINE_CHARS: usize = 2_000;
/// The longest credential passed through a pipe. It is written before the child exists, so it
/// must fit the pipe's buffer (at least a page on Linux) or the write would never finish.
const MAX_CREDENTIAL_BYTES: usize = 4_000;

/// Starts the driver task; returns the command and interrupt senders.
///
/// `plan` says which session to continue, or why none may be resumed (see [`crate::binding`]).
pub(crate) fn spawn(
    config: CliConfig,
    spec: SessionSpec,
    plan: StartPlan,
    seed: Arc<Mutex<Option<String>>>,
    queue: EventQueue,
) -> Result<(mpsc::Sender<Command>, mpsc::Sender<()>), BackendError> {
    for dir in [config.config_dir(), config.tmp_dir(), config.work_dir()] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| BackendError::Invalid(format!("cannot create {}: {e}", dir.display())))?;
    }
    // A verified handle vouches that the session exists: if its transcript is gone, `launch`
    // reseeds rather than silently starting an empty session under the old id.
    let established = plan.vouched || transcript_path(&config, &plan.session_id).is_some();
    let (commands, command_rx) = mpsc::channel(8);
    let (interrupts, interrupt_rx) = mpsc::channel(4);
    let mut driver = Driver {
        config,
        spec,
        session_id: plan.session_id,
        established,
        reseeds: 0,
        launches: 0,
        child: None,
        interrupts_sent: 0,
        pending_events: Vec::new(),
        parked: false,
        forking: plan.fork,
        seed,
        log: Vec::new(),
        pending_seed: None,
        queue,
        served: false,
        renewing: false,
    };
    if let Some(reason) = plan.refuse_resume {
        let mut events = Vec::new();
        driver.reseed(&reason, &mut events);
        driver.pending_events = events;
    }
    tokio::spawn(driver.run(command_rx, interrupt_rx));
    Ok((commands, interrupts))
}

/// Which session a driver starts on.
#[derive(Debug)]
pub(crate) struct StartPlan {
    /// The session to continue (resumed when its transcript exists).
    pub session_id: String,
    /// Set when that session must not be resumed (its binding did not verify): a fresh session
    /// is seeded instead, and the reason reported as [`SessionEvent::Reseeded`].
    pub refuse_resume: Option<String>,
    /// A verified handle names this session, so it must have a transcript.
    pub vouched: bool,
    /// Continue a copy of the session (`--fork-session`) instead of the session itself.
    pub fork: bool,
}

/// A live child and its pipes.
struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BoundedLines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    pid: Option<u32>,
}

impl Live {
    fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }
}

struct Driver {
    config: CliConfig,
    spec: SessionSpec,
    /// The session the CLI writes now (changes on a reseed).
    session_id: String,
    /// Whether the session has a transcript the CLI should resume.
    established: bool,
    reseeds: u32,
    /// Children launched so far.
    launches: u32,
    child: Option<Live>,
    interrupts_sent: u64,
    /// Events from outside a turn (at start, at a park), reported with the next turn.
    pending_events: Vec<SessionEvent>,
    /// The child was stopped on purpose ([`Command::Park`]); the next launch is an unpark.
    parked: bool,
    /// Launches `--resume` with `--fork-session` until the CLI reports the copy's id.
    forking: bool,
    /// The host's seed, shared with the backend handle.
    seed: Arc<Mutex<Option<String>>>,
    /// This start's turns, as (input text, reply text): what a reseed rebuilds from.
    log: Vec<(String, String)>,
    /// The seed a reseed rendered, sent ahead of the next turn's input until a turn succeeds in
    /// the new session.
    pending_seed: Option<String>,
    /// Every session event, queued as it happens, for [`muninn_backend::Backend::take_session_events`].
    queue: EventQueue,
    /// The live child has been sent an exchange: its `--max-budget-usd` count (per process)
    /// is no longer whole, so a run under [`CliConfig::run_budget_micro_usd`] relaunches it.
    served: bool,
    /// The next launch is a budget relaunch: planned, so no [`SessionEvent::Relaunched`].
    renewing: bool,
}

/// What a turn-like command writes.
enum Exchange {
    Turn(TurnInput),
    /// `/compact <instructions>`.
    Compact(String),
}

impl Exchange {
    fn line(&self) -> Result<String, BackendError> {
        match self {
            Exchange::Turn(input) => user_line(input, None),
            Exchange::Compact(instructions) => {
                let instructions = instructions.trim();
                let text = if instructions.is_empty() {
                    "/compact".to_string()
                } else {
                    format!("/compact {instructions}")
                };
                validated_line(Value::String(text))
            }
        }
    }
}

/// How reading a turn ended.
enum ReadEnd {
    Result {
        result: Box<ResultEvent>,
        raw: Value,
        read_at: Instant,
    },
    /// stdout closed (the child died or exited).
    Eof,
    TimedOut,
    /// The flush protocol terminated the child (stdout ended after SIGTERM/SIGKILL).
    Terminated,
}

/// The flush protocol's bookkeeping during one run.
struct RunFlush {
    protocol: FlushProtocol,
    started: Instant,
    state: FlushState,
    /// The CLI took the flush line (its `--replay-user-messages` echo was seen): absorbed into
    /// the running loop, or begun as its own turn.
    taken: bool,
}

/// What the turn's events carried besides the `result`.
#[derive(Default)]
struct Collected {
    saw_init: bool,
    text: Vec<String>,
    tool_calls: Vec<ToolCall>,
    request_id: Option<String>,
    /// Usage of the run's results before the last (a run whose flush line became its own turn
    /// has two).
    earlier: Usage,
    /// `system/compact_boundary` events seen, in order.
    boundaries: Vec<CompactMetadata>,
    /// The first non-replay `user` event after a boundary: the summary the session continues
    /// from.
    summary: Option<String>,
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut interrupts: mpsc::Receiver<()>,
    ) {
        // Start the child now: the CLI does most of its ~0.6 s start-up before its first input
        // line, so launching at `start` hides it from the first turn.
        let mut events = std::mem::take(&mut self.pending_events);
        let launched = self.launch(&mut events);
        self.pending_events = events;
        if let Err(e) = launched {
            tracing::warn!(error = %e, "claude-cli: launch at start failed; retrying on the first turn");
        }
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    None => break,
                    Some(Command::Turn { input, flush, reply }) => {
                        let done = self.turn(Exchange::Turn(input), flush, &mut interrupts).await;
                        // The caller may have given up on the turn; the driver has still read
                        // it to its end, so the next turn starts clean.
                        let _ = reply.send(done);
                    }
                    Some(Command::Compact { instructions, reply }) => {
                        let done = self.turn(Exchange::Compact(instructions), None, &mut interrupts).await;
                        // The caller may have given up on the turn; the driver has still read
                        // it to its end, so the next turn starts clean.
                        let _ = reply.send(done);
                    }
                    Some(Command::Pid { reply }) => {
                        let _ = reply.send(self.live_pid());
                    }
                    Some(Command::Park { reply }) => {
                        let _ = reply.send(self.park().await);
                    }
                    Some(Command::Shutdown { reply }) => {
                        let status = self.shutdown().await;
                        let _ = reply.send(status);
                        return;
                    }
                },
                // An interrupt while idle has nothing to stop.
                Some(()) = interrupts.recv() => {}
            }
        }
        // The handle was dropped: `kill_on_drop` ends the child with the `Live`.
    }

    fn live_pid(&mut self) -> Option<u32> {
        let live = self.child.as_mut()?;
        match live.child.try_wait() {
            Ok(None) => live.pid,
            _ => None,
        }
    }

    /// Launches a child for the current session: `--resume` when a transcript exists,
    /// `--session-id` for a new session, a reseed when an established session lost its file.
    fn launch(&mut self, events: &mut Vec<SessionEvent>) -> Result<(), BackendError> {
        let resume = if transcript_path(&self.config, &self.session_id).is_some() {
            true
        } else if self.established {
            self.reseed("the session transcript is missing", events);
            false
        } else {
            false
        };
        let c = &self.config;
        let mut command = tokio::process::Command::new(&c.bin);
        command.args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ]);
        command
            .arg(if resume { "--resume" } else { "--session-id" })
            .arg(&self.session_id);
        if resume && self.forking {
            // The CLI copies the history into a file under a new id it picks (reported by the
            // turn's `system/init`); the original file is not written again.
            command.arg("--fork-session");
        }
        // The echo of each user line as the CLI takes it tells the flush protocol whether its
        // line was absorbed into the running loop or queued as a turn of its own.
        command.arg("--replay-user-messages");
        // The system prompt goes through a file only this user can read: on argv it would be
        // readable by every local user (`/proc/<pid>/cmdline`), and Linux refuses one argument
        // over 128 KiB (a doctrine alone may be 96 KiB).
        let prompt = write_system_prompt(c, &self.spec.system.join("\n\n"))?;
        command.arg("--system-prompt-file").arg(prompt);
        // `--tools` is variadic: the `=` form keeps it from swallowing the next argument.
        command.arg(format!("--tools={}", c.tools.join(",")));
        if let Some(mode) = &c.permission_mode {
            command.arg("--permission-mode").arg(mode);
        }
        if let Some(micros) = c.run_budget_micro_usd.or(c.max_budget_micro_usd) {
            command.arg("--max-budget-usd").arg(format!(
                "{}.{:06}",
                micros / 1_000_000,
                micros % 1_000_000
            ));
        }
        if let Some(n) = c.max_turns {
            command.arg("--max-turns").arg(n.to_string());
        }
        if let Some(schema) = &self.spec.output_schema {
            command.arg("--json-schema").arg(schema.to_string());
        }
        if !self.spec.model.is_empty() {
            command.arg("--model").arg(&self.spec.model);
        }
        let ttl = match self.spec.conversation_ttl {
            Ttl::FiveMinutes => "5m",
            Ttl::OneHour => "1h",
        };
        write_settings(c)?;
        command
            .current_dir(c.work_dir())
            .env_clear()
            .env("PATH", &c.path)
            .env("HOME", c.home_dir())
            .env("CLAUDE_CONFIG_DIR", c.config_dir())
            .env("TMPDIR", c.tmp_dir())
            .env("ANTHROPIC_BASE_URL", &c.base_url)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
            .env("CLAUDE_CODE_PROMPT_CACHE_TTL", ttl)
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1");
        if !c.allow_cli_auto_compaction {
            command.env("DISABLE_AUTO_COMPACT", "1");
        }
        if let Some(n) = c.max_retries {
            command.env("CLAUDE_CODE_MAX_RETRIES", n.to_string());
        }
        match c.credential_passing {
            CredentialPassing::Environment => {
                command.env(c.credential_kind.environment_var(), c.api_key.expose());
            }
            CredentialPassing::FileDescriptor => {
                // The CLI reads `/proc/self/fd/<n>` to its end and keeps the credential in
                // memory. It would copy a credential it read from a descriptor to a "handoff"
                // file (`/home/claude/.claude/remote/.api_key` or `.oauth_token`, "Persisted …
                // for subprocess access") only when `CLAUDE_CODE_REMOTE` is set, which the
                // cleared environment guarantees it is not (checked by a test: no file under
                // the data dir, nor that path, ever holds the key). Nothing else needs the fd
                // afterwards: with `--tools=` the CLI starts no subprocesses, and the pipe is
                // empty once read.
                let fd = credential_pipe(c.api_key.expose())?;
                command.env(
                    c.credential_kind.descriptor_var(),
                    fd.as_raw_fd().to_string(),
                );
                // Clears FD_CLOEXEC on this one descriptor in the child (after the fork, so no
                // other child spawned meanwhile inherits it); every other descriptor of ours
                // keeps CLOEXEC. The parent's copy closes when `command` is dropped below.
                command.preserved_fds(vec![fd]);
            }
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let spawned = command.spawn();
        // Closes the parent's read end of the credential pipe: the child holds the only one.
        drop(command);
        let mut child = spawned.map_err(|e| {
            BackendError::Transport(format!("cannot start {}: {e}", c.bin.display()))
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(BackendError::Transport("the child has no pipes".into()));
        };
        let ring = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        tokio::spawn(drain_stderr(stderr, ring.clone()));
        tracing::debug!(session = %self.session_id, resume, pid = ?child.id(), "claude-cli: launched");
        // A resume after an earlier launch is a relaunch (the first launch may resume a session a
        // previous host run left, which is not news).
        if resume && self.parked {
            emit(
                &self.queue,
                events,
                SessionEvent::Unparked {
                    session_id: self.session_id.clone(),
                },
            );
        } else if resume && self.launches > 0 && !self.renewing {
            emit(
                &self.queue,
                events,
                SessionEvent::Relaunched {
                    session_id: self.session_id.clone(),
                },
            );
        }
        self.parked = false;
        self.renewing = false;
        self.served = false;
        self.launches += 1;
        self.child = Some(Live {
            pid: child.id(),
            child,
            stdin: Some(stdin),
            stdout: BoundedLines::new(BufReader::new(stdout), MAX_LINE_BYTES),
            stderr: ring,
        });
        Ok(())
    }

    /// Replaces a lost session with a fresh id (skipping ids that already have a transcript).
    fn reseed(&mut self, reason: &str, events: &mut Vec<SessionEvent>) {
        let old = self.session_id.clone();
        loop {
            self.reseeds += 1;
            self.session_id = derive_session_id(&self.config.session_id, self.reseeds);
            if transcript_path(&self.config, &self.session_id).is_none() {
                break;
            }
        }
        self.established = false;
        // A fresh session is not a copy of anything.
        self.forking = false;
        let host_seed = self.seed.lock().ok().and_then(|s| s.clone());
        self.pending_seed = render_seed(host_seed.as_deref(), &self.log);
        let seed_tokens = self
            .pending_seed
            .as_deref()
            .map_or(0, muninn_core::tokenize::count);
        tracing::warn!(old = %old, new = %self.session_id, reason, seed_tokens, "claude-cli: session reseeded");
        emit(
            &self.queue,
            events,
            SessionEvent::Reseeded {
                old_session_id: old,
                new_session_id: self.session_id.clone(),
                reason: reason.to_string(),
                seed_tokens,
            },
        );
    }

    /// Records the compactions a turn saw. `usage` is the compaction's own when it could be
    /// told apart; `requested` when the exchange was [`Exchange::Compact`].
    fn note_compactions(
        &self,
        collected: &Collected,
        usage: Option<Usage>,
        requested: bool,
        events: &mut Vec<SessionEvent>,
    ) {
        // One usage figure cannot be split between several boundaries.
        let usage = usage.filter(|_| collected.boundaries.len() == 1);
        for b in &collected.boundaries {
            if !requested {
                tracing::warn!(trigger = %b.trigger, pre_tokens = ?b.pre_tokens,
                    "claude-cli: the CLI compacted the session by itself");
            }
            emit(
                &self.queue,
                events,
                SessionEvent::Compacted {
                    session_id: self.session_id.clone(),
                    trigger: b.trigger.clone(),
                    pre_tokens: b.pre_tokens,
                    post_tokens: b.post_tokens,
                    outside: !requested,
                    usage,
                },
            );
        }
    }

    async fn turn(
        &mut self,
        exchange: Exchange,
        flush: Option<FlushProtocol>,
        interrupts: &mut mpsc::Receiver<()>,
    ) -> TurnDone {
        let mut report = TurnReport {
            session_events: std::mem::take(&mut self.pending_events),
            ..TurnReport::default()
        };
        let mut written_at = None;
        let mut result_read_at = None;
        let mut run_flush = flush.map(|protocol| RunFlush {
            protocol,
            started: Instant::now(),
            state: FlushState::default(),
            taken: false,
        });
        let result = self
            .turn_inner(
                &exchange,
                interrupts,
                &mut run_flush,
                &mut report,
                &mut written_at,
                &mut result_read_at,
            )
            .await;
        if let Ok(outcome) = &result {
            let reply = match &outcome.structured {
                Some(v) if outcome.text.is_empty() => v.to_string(),
                _ => outcome.text.clone(),
            };
            if let Exchange::Turn(input) = &exchange {
                self.log.push((input_text(input), reply));
            }
        }
        report.session_id = self.session_id.clone();
        report.pid = self.live_pid();
        TurnDone {
            result,
            flush: run_flush
                .as_ref()
                .map_or(FlushStage::NotNeeded, |f| crate::flush::stage(&f.state)),
            report,
            result_read_at,
            written_at,
        }
    }

    async fn turn_inner(
        &mut self,
        exchange: &Exchange,
        interrupts: &mut mpsc::Receiver<()>,
        run_flush: &mut Option<RunFlush>,
        report: &mut TurnReport,
        written_at: &mut Option<Instant>,
        result_read_at: &mut Option<Instant>,
    ) -> Result<TurnOutcome, BackendError> {
        // Validated up front, so a bad turn fails before anything is launched.
        exchange.line()?;
        let compacting = matches!(exchange, Exchange::Compact(_));
        // Interrupts sent before this turn began are stale.
        while interrupts.try_recv().is_ok() {}
        if self.config.run_budget_micro_usd.is_some() && self.served && self.live_pid().is_some() {
            // The CLI counts `--max-budget-usd` from its process's start, so a child that
            // served an earlier run has less than this run's budget left. Stopping it the way
            // shutdown does (the CLI writes its `cost-state`, keeping `total_cost_usd` whole)
            // and resuming gives this run the whole budget on the same session.
            self.shutdown().await;
            self.renewing = true;
            report.budget_relaunch = true;
            tracing::debug!(session = %self.session_id, "claude-cli: relaunching for a fresh run budget");
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let alive = match self.child.as_mut() {
                Some(live) => matches!(live.child.try_wait(), Ok(None)),
                None => false,
            };
            if !alive {
                self.launch(&mut report.session_events)?;
            }
            // Built per attempt: a reseed on the way may have rendered a seed to send first.
            let line = match exchange {
                Exchange::Turn(input) => user_line(input, self.pending_seed.as_deref())?,
                // A `/compact` cannot carry a seed (it is a command line, not a message); a seed
                // pending (a reseed at start, or on this exchange's launch) waits for the next
                // turn.
                Exchange::Compact(_) => exchange.line()?,
            };
            // What the CLI has stored of the session before this line: if it grows, the CLI took
            // the line, whether or not its `system/init` reached us before it died.
            let stored_before = self.stored_len();
            let Some(live) = self.child.as_mut() else {
                return Err(BackendError::Transport("no child after launch".into()));
            };
            // A write to a child that just died fails with EPIPE; reading then finds the end of
            // its stdout and the stderr explains it, so the error is not returned here.
            if let Some(stdin) = live.stdin.as_mut()
                && let Err(e) = write_line(stdin, &line).await
            {
                tracing::debug!(error = %e, "claude-cli: stdin write failed");
            }
            *written_at = Some(Instant::now());
            self.served = true;
            let mut collected = Collected::default();
            let end = self
                .read_turn(interrupts, run_flush, report, &mut collected)
                .await;
            if !collected.saw_init
                && matches!(end, ReadEnd::Eof)
                && self.stored_len() > stored_before
            {
                // Killed with its `system/init` still in its stdout buffer: the CLI had stored
                // the line (and may have sent the request), so the turn began.
                collected.saw_init = true;
            }
            if !matches!(end, ReadEnd::Result { .. }) {
                self.note_compactions(&collected, None, compacting, &mut report.session_events);
            }
            if collected.saw_init && !compacting {
                // The turn began, so the CLI has stored the line, seed and all, in the session's
                // transcript (it keeps the user line even when killed mid-request): a turn that
                // then dies or times out must not send the seed again with the next input, and
                // the session now has a transcript to resume (or, if that goes missing, to
                // reseed from the log).
                self.established = true;
                self.pending_seed = None;
            }
            match end {
                ReadEnd::Result {
                    result,
                    raw,
                    read_at,
                } => {
                    *result_read_at = Some(read_at);
                    let lost = result
                        .errors
                        .iter()
                        .find(|e| e.contains("No conversation found"));
                    if let Some(reason) = lost
                        && !collected.saw_init
                    {
                        let reason = reason.clone();
                        self.stop_child().await;
                        self.reseed(&reason, &mut report.session_events);
                        if attempt < MAX_ATTEMPTS {
                            continue;
                        }
                        return Err(BackendError::Transport(format!(
                            "the session could not be started: {reason}"
                        )));
                    }
                    self.established = true;
                    // The seed is in the new session now (even a failed turn's line is kept by
                    // the CLI and merged into the next one) — unless this was a `/compact`,
                    // whose line carried none: clearing it then would start the next turn in
                    // the fresh session without its history.
                    if !compacting {
                        self.pending_seed = None;
                    }
                    report.model_usage_since_last_result =
                        result.model_usage_since_last_result.clone();
                    let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
                    let compaction_usage = result.model_usage_since_last_result.as_ref().map(|m| {
                        let all = parse_model_usage(m, requested_1h);
                        if compacting {
                            all
                        } else {
                            // `usage` is the turn's own requests; the rest was compaction.
                            let turn = parse_usage(&result.usage, requested_1h);
                            Usage {
                                input: all.input.saturating_sub(turn.input),
                                cache_write_5m: all
                                    .cache_write_5m
                                    .saturating_sub(turn.cache_write_5m),
                                cache_write_1h: all
                                    .cache_write_1h
                                    .saturating_sub(turn.cache_write_1h),
                                cache_read: all.cache_read.saturating_sub(turn.cache_read),
                                output: all.output.saturating_sub(turn.output),
                            }
                        }
                    });
                    self.note_compactions(
                        &collected,
                        compaction_usage,
                        compacting,
                        &mut report.session_events,
                    );
                    report.result = Some(raw);
                    if compacting {
                        return self.compaction_outcome(*result, collected, report);
                    }
                    return self.outcome(*result, collected, report);
                }
                ReadEnd::TimedOut => {
                    self.stop_child().await;
                    return Err(BackendError::Transport(format!(
                        "no result within {:?}; the child was killed",
                        self.config.turn_timeout
                    )));
                }
                ReadEnd::Terminated => {
                    // The next turn relaunches with `--resume`, as after any crash.
                    let (status, _) = self.reap().await;
                    tracing::warn!(?status, "claude-cli: the flush protocol terminated the run");
                    return Ok(TurnOutcome {
                        text: collected.text.join(""),
                        tool_calls: collected.tool_calls,
                        structured: None,
                        stop_reason: "terminated".to_string(),
                        usage: collected.earlier,
                        raw_usage: Value::Null,
                        predicted: None,
                        miss: None,
                        ttl: TtlCheck {
                            expected_5m: 0,
                            expected_1h: 0,
                            honoured_5m: 0,
                            honoured_1h: 0,
                        },
                        retries: report.retries.clone(),
                        events: Vec::new(),
                        request_id: collected.request_id,
                        breakpoints: Vec::new(),
                        provider_miss: None,
                    });
                }
                ReadEnd::Eof => {
                    let (status, tail) = self.reap().await;
                    let lost =
                        tail.contains("already in use") || tail.contains("No conversation found");
                    if lost && attempt < MAX_ATTEMPTS {
                        let reason = tail.lines().last().unwrap_or("").to_string();
                        self.reseed(&reason, &mut report.session_events);
                        continue;
                    }
                    if !collected.saw_init && attempt < MAX_ATTEMPTS {
                        // Died before the turn began (killed while idle, or between our
                        // liveness check and the write): the line never ran, so resend it.
                        continue;
                    }
                    return Err(BackendError::Transport(format!(
                        "claude exited during the turn ({status:?}): {tail}"
                    )));
                }
            }
        }
    }

    /// The size of the CLI's own transcript of the session (0 when it has none yet).
    fn stored_len(&self) -> u64 {
        transcript_path(&self.config, &self.session_id)
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len())
    }

    /// Reads events to the turn's `result`, forwarding interrupts as `control_request`s and,
    /// for a run, carrying out the flush protocol's actions.
    async fn read_turn(
        &mut self,
        interrupts: &mut mpsc::Receiver<()>,
        run_flush: &mut Option<RunFlush>,
        report: &mut TurnReport,
        collected: &mut Collected,
    ) -> ReadEnd {
        let deadline = tokio::time::sleep(self.config.turn_timeout);
        tokio::pin!(deadline);
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        let Some(live) = self.child.as_mut() else {
            return ReadEnd::Eof;
        };
        loop {
            // Carry out whatever the flush protocol says is due, then sleep until its next
            // deadline or the next event, whichever comes first.
            let mut wake = None;
            if let Some(f) = run_flush.as_mut() {
                loop {
                    let now = f.started.elapsed();
                    match decide(&f.state, &f.protocol, now) {
                        FlushAction::Wait { until } => {
                            wake = until.map(|u| f.started + u);
                            break;
                        }
                        FlushAction::AskFlush => {
                            f.state.asked_at = Some(now);
                            let line =
                                user_line(&TurnInput::text(f.protocol.message.clone()), None);
                            if let (Some(stdin), Ok(line)) = (live.stdin.as_mut(), line)
                                && let Err(e) = write_line(stdin, &line).await
                            {
                                tracing::debug!(error = %e, "claude-cli: flush write failed");
                            }
                            tracing::info!(session = %self.session_id, "claude-cli: flush asked");
                        }
                        FlushAction::Interrupt => {
                            f.state.interrupted_at = Some(now);
                            self.interrupts_sent += 1;
                            write_interrupt(live, self.interrupts_sent).await;
                            tracing::info!(session = %self.session_id, "claude-cli: flush grace ran out; interrupted");
                        }
                        FlushAction::Terminate => {
                            f.state.terminated_at = Some(now);
                            sigterm(live.pid);
                            tracing::warn!(session = %self.session_id, "claude-cli: the interrupt did not end the run; SIGTERM");
                        }
                        FlushAction::Kill => {
                            f.state.killed_at = Some(now);
                            let _ = live.child.start_kill();
                            tracing::warn!(session = %self.session_id, "claude-cli: SIGTERM did not end the run; SIGKILL");
                        }
                    }
                }
            }
            let flush_timer = async move {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                line = live.stdout.next_line() => {
                    let line = match line {
                        Ok(Some(Line::Text(l))) => l,
                        Ok(Some(Line::Skipped(bytes))) => {
                            tracing::warn!(bytes, limit = MAX_LINE_BYTES, "claude-cli: a stdout line past the limit was skipped");
                            continue;
                        }
                        Ok(None) | Err(_) => {
                            let terminated = run_flush
                                .as_ref()
                                .is_some_and(|f| f.state.terminated_at.is_some());
                            return if terminated { ReadEnd::Terminated } else { ReadEnd::Eof };
                        }
                    };
                    let Some(event) = decode(&line) else {
                        tracing::warn!(line = %truncate(&line, 200), "claude-cli: stdout line is not JSON");
                        continue;
                    };
                    match event {
                        CliEvent::Init { session_id } => {
                            collected.saw_init = true;
                            if self.forking && session_id != self.session_id {
                                tracing::info!(from = %self.session_id, to = %session_id, "claude-cli: session forked");
                                let event = SessionEvent::Forked {
                                    from: std::mem::replace(&mut self.session_id, session_id.clone()),
                                    to: session_id,
                                };
                                // Queued like every other session event: the host records only
                                // what `take_session_events` drains.
                                emit(&self.queue, &mut report.session_events, event);
                                self.forking = false;
                            }
                        }
                        CliEvent::Assistant(a) => {
                            if a.message.model == "<synthetic>" {
                                continue;
                            }
                            if let Some(f) = run_flush.as_mut()
                                && a.parent_tool_use_id.is_none()
                                && f.state.reached_at.is_none()
                                && prompt_tokens(&a.message.usage) >= f.protocol.trigger_tokens()
                            {
                                f.state.reached_at = Some(f.started.elapsed());
                            }
                            collected.request_id = a.request_id.or(collected.request_id.take());
                            for block in a.message.content {
                                match block.get("type").and_then(Value::as_str) {
                                    Some("text") => collected.text.push(
                                        block.get("text").and_then(Value::as_str).unwrap_or("").to_string(),
                                    ),
                                    Some("tool_use") => {
                                        let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                                        if name != "StructuredOutput" {
                                            collected.tool_calls.push(ToolCall {
                                                id: block.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
                                                name: name.to_string(),
                                                input: block.get("input").cloned().unwrap_or(Value::Null),
                                            });
                                        }
                                    }
                                    _ => {}
                                }
                            }
                        }
                        CliEvent::ApiRetry(r) => {
                            // Logged as it happens: during an outage the turn returns only when
                            // the CLI's retries end, and its ledger row only after that.
                            tracing::warn!(session = %self.session_id, attempt = r.attempt,
                                max_retries = r.max_retries, delay_ms = r.retry_delay_ms,
                                status = r.error_status, error = r.error.as_deref(),
                                "claude-cli: the CLI retries a failed API request");
                            report.retries.push(RetryEvent {
                                attempt: r.attempt,
                                delay_ms: r.retry_delay_ms,
                                status: r.error_status,
                                kind: r.error.unwrap_or_else(|| "unknown".to_string()),
                                retry_after_ms: None,
                            })
                        }
                        CliEvent::ControlResponse(v) => {
                            tracing::debug!(response = %v, "claude-cli: control response");
                        }
                        CliEvent::CompactBoundary(b) => {
                            collected.boundaries.push(b.compact_metadata);
                        }
                        CliEvent::Unknown(v)
                            if v.get("type").and_then(Value::as_str) == Some("user")
                                && !collected.boundaries.is_empty()
                                && collected.summary.is_none()
                                && v.get("isReplay").and_then(Value::as_bool) != Some(true) =>
                        {
                            collected.summary = Some(message_text(&v["message"]["content"]));
                        }
                        CliEvent::Result(result) => {
                            // A flush line the CLI has not taken yet was queued behind this
                            // result: it runs as a turn of its own next, and its reply is the
                            // run's answer, so read on.
                            if let Some(f) = run_flush.as_ref()
                                && f.state.asked_at.is_some()
                                && !f.taken
                            {
                                collected.earlier.add(&parse_usage(&result.usage, requested_1h));
                                collected.text.clear();
                                collected.tool_calls.clear();
                                continue;
                            }
                            let raw = serde_json::from_str(&line).unwrap_or(Value::Null);
                            return ReadEnd::Result { result, raw, read_at: Instant::now() };
                        }
                        CliEvent::Unknown(v) => {
                            if let Some(f) = run_flush.as_mut()
                                && f.state.asked_at.is_some()
                                && replayed_text(&v).is_some_and(|t| t == f.protocol.message)
                            {
                                f.taken = true;
                            }
                            tracing::trace!(event = %v, "claude-cli: other event");
                        }
                    }
                }
                Some(()) = interrupts.recv() => {
                    self.interrupts_sent += 1;
                    write_interrupt(live, self.interrupts_sent).await;
                }
                _ = &mut deadline => return ReadEnd::TimedOut,
                _ = flush_timer => {}
            }
        }
    }

    /// Turns a `result` into the turn's outcome or error.
    fn outcome(
        &self,
        result: ResultEvent,
        collected: Collected,
        report: &TurnReport,
    ) -> Result<TurnOutcome, BackendError> {
        let interrupted = result.subtype == "error_during_execution"
            && result
                .terminal_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("aborted"));
        if result.is_error && !interrupted {
            let status = result.api_error_status.unwrap_or(0);
            let mut message = result.text();
            if message.is_empty() {
                message = result.errors.join("; ");
            }
            // The session's own limits: not the API's doing, and no later attempt helps until
            // the limit is raised.
            match result.subtype.as_str() {
                "error_max_budget_usd" if self.config.run_budget_micro_usd.is_some() => {
                    message = format!(
                        "the run's budget (--max-budget-usd, run_budget_micro_usd) is spent: \
                         {message}; the next run gets a fresh one"
                    );
                }
                "error_max_budget_usd" => {
                    message = format!(
                        "the session's budget (--max-budget-usd) is spent: {message}; the CLI \
                         refuses every later turn of this process"
                    );
                }
                "error_max_turns" => {
                    message = format!("the run reached --max-turns: {message}");
                }
                _ => {}
            }
            return Err(BackendError::Api {
                status,
                kind: result
                    .terminal_reason
                    .clone()
                    .unwrap_or_else(|| result.subtype.clone()),
                message,
                retryable: status == 429 || status >= 500,
                retry_after_ms: None,
            });
        }
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        let mut usage = parse_usage(&result.usage, requested_1h);
        usage.add(&collected.earlier);
        let structured = result.structured_output.clone().filter(|v| !v.is_null());
        let mut text = collected.text.join("");
        if text.is_empty() && structured.is_none() {
            text = result.text();
        }
        if self.spec.output_schema.is_some() && structured.is_none() && !interrupted {
            // The CLI ends such a turn as a success (the model answered in text even after its
            // one enforcement nudge); for muninn a schema turn without a value failed.
            return Err(BackendError::Protocol(format!(
                "the session has an output schema but the model gave no structured output; its text: {}",
                truncate(&text, 500)
            )));
        }
        let (ttl, events) = ttl_check(&usage, requested_1h);
        Ok(TurnOutcome {
            text,
            tool_calls: collected.tool_calls,
            structured,
            stop_reason: if interrupted {
                "interrupted".to_string()
            } else {
                result.stop_reason.clone().unwrap_or_default()
            },
            usage,
            raw_usage: result.usage,
            predicted: None,
            miss: None,
            ttl,
            retries: report.retries.clone(),
            events,
            request_id: collected.request_id,
            breakpoints: Vec::new(),
            provider_miss: None,
        })
    }

    /// Turns the `result` of a `/compact` into its outcome: the compaction request's usage (the
    /// `result`'s own `usage` is all zeros for a local command) and the summary.
    fn compaction_outcome(
        &self,
        result: ResultEvent,
        collected: Collected,
        report: &TurnReport,
    ) -> Result<TurnOutcome, BackendError> {
        if result.is_error {
            return self.outcome(result, collected, report);
        }
        if collected.boundaries.is_empty() {
            // The CLI answered in text instead: its summary request failed (the API refused it
            // every time), or the conversation is too short to summarise.
            return Err(BackendError::CompactionFailed(format!(
                "the CLI did not compact the session: {}",
                truncate(&result.text(), 500)
            )));
        }
        let requested_1h = self.spec.conversation_ttl == Ttl::OneHour;
        let raw = result
            .model_usage_since_last_result
            .clone()
            .unwrap_or(Value::Null);
        let usage = parse_model_usage(&raw, requested_1h);
        let (ttl, events) = ttl_check(&usage, requested_1h);
        Ok(TurnOutcome {
            text: collected.summary.unwrap_or_default(),
            tool_calls: Vec::new(),
            structured: None,
            stop_reason: "compacted".to_string(),
            usage,
            raw_usage: raw,
            predicted: None,
            miss: None,
            ttl,
            retries: report.retries.clone(),
            events,
            request_id: collected.request_id,
            breakpoints: Vec::new(),
            provider_miss: None,
        })
    }

    /// Waits for a child whose stdout ended; returns its status and stderr tail.
    async fn reap(&mut self) -> (Option<ExitStatus>, String) {
        let Some(mut live) = self.child.take() else {
            return (None, String::new());
        };
        live.stdin = None;
        let status =
            match tokio::time::timeout(self.config.shutdown_timeout, live.child.wait()).await {
                Ok(Ok(s)) => Some(s),
                _ => {
                    let _ = live.child.kill().await;
                    None
                }
            };
        // The stderr task may still be draining the last lines.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        (status, live.stderr_tail())
    }

    /// Kills the current child (used when its session is abandoned or a turn timed out).
    async fn stop_child(&mut self) {
        if let Some(mut live) = self.child.take() {
            let _ = live.child.kill().await;
        }
    }

    /// Stops the child the way shutdown does but keeps the driver: the next turn resumes the
    /// session with `--resume`. Returns what was parked, or `None` when no child was running.
    async fn park(&mut self) -> Option<ParkReport> {
        let pid = self.live_pid()?;
        let rss_kib = crate::vm_rss_kb(pid);
        let status = self.shutdown().await;
        self.parked = true;
        let event = SessionEvent::Parked {
            session_id: self.session_id.clone(),
            pid,
            rss_kib,
        };
        emit(&self.queue, &mut self.pending_events, event.clone());
        Some(ParkReport { event, status })
    }

    /// Closes stdin and waits; SIGTERM after the timeout; SIGKILL after as long again.
    async fn shutdown(&mut self) -> Option<ExitStatus> {
        let mut live = self.child.take()?;
        live.stdin = None;
        let wait = self.config.shutdown_timeout;
        if let Ok(Ok(s)) = tokio::time::timeout(wait, live.child.wait()).await {
            return Some(s);
        }
        sigterm(live.pid);
        if let Ok(Ok(s)) = tokio::time::timeout(wait, live.child.wait()).await {
            return Some(s);
        }
        let _ = live.child.kill().await;
        live.child.wait().await.ok()
    }
}

/// Records a session event: in `events` (the report it comes with) and, at once, in the queue
/// [`muninn_backend::Backend::take_session_events`] drains — each event exactly once. A function
/// of the queue alone, not of the driver, so it can be called while the live child is borrowed.
fn emit(queue: &EventQueue, events: &mut Vec<SessionEvent>, event: SessionEvent) {
    if let Ok(mut q) = queue.lock() {
        q.push_back(event.clone());
    }
    events.push(event);
}

/// The stdin line for a user turn, validated: one object, one line, parseable — one bad line
/// kills the CLI. A `seed` goes first, as its own text block.
fn user_line(input: &TurnInput, seed: Option<&str>) -> Result<String, BackendError> {
    if input.parts.is_empty() {
        return Err(BackendError::Invalid(
            "a turn needs at least one part".into(),
        ));
    }
    let content = match (seed, input.parts.as_slice()) {
        (None, [InputPart::Text { text }]) => Value::String(text.clone()),
        (seed, parts) => Value::Array(
            seed.map(|s| json!({"type": "text", "text": s}))
                .into_iter()
                .chain(parts.iter().map(|p| match p {
                    InputPart::Text { text } => json!({"type": "text", "text": text}),
                    InputPart::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => json!({"type": "tool_result", "tool_use_id": tool_use_id,
                                "content": content, "is_error": is_error}),
                }))
                .collect(),
        ),
    };
    validated_line(content)
}

/// The TTL the session asked for against the split the CLI reported, and the mismatch event
/// when they differ (the CLI puts one TTL on every marker, so all writes should be under it).
fn ttl_check(usage: &Usage, requested_1h: bool) -> (TtlCheck, Vec<muninn_backend::TurnEvent>) {
    let written = usage.written();
    let ttl = TtlCheck {
        expected_5m: if requested_1h { 0 } else { written },
        expected_1h: if requested_1h { written } else { 0 },
        honoured_5m: usage.cache_write_5m,
        honoured_1h: usage.cache_write_1h,
    };
    let events = if ttl.mismatch() {
        vec![muninn_backend::TurnEvent::TtlMismatch { check: ttl }]
    } else {
        Vec::new()
    };
    (ttl, events)
}

/// A stdin user line with `content`, checked to be one JSON object on one line.
fn validated_line(content: Value) -> Result<String, BackendError> {
    let line = json!({"type": "user", "message": {"role": "user", "content": content}}).to_string();
    let valid = !line.contains('\n')
        && serde_json::from_str::<Value>(&line).is_ok_and(|v| v["type"] == "user");
    if !valid {
        return Err(BackendError::Invalid(
            "the turn did not serialise to one JSON line".into(),
        ));
    }
    Ok(line)
}

/// A turn's input as plain text, for the driver's log: text parts as they are, tool results
/// marked as such.
fn input_text(input: &TurnInput) -> String {
    input
        .parts
        .iter()
        .map(|p| match p {
            InputPart::Text { text } => text.clone(),
            InputPart::ToolResult {
                content, is_error, ..
            } => format!(
                "[tool {}: {content}]",
                if *is_error { "error" } else { "result" }
            ),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The seed a reseeded session starts from: the host's rendering of what preceded this start,
/// then this start's turns, under a preamble that says what it is. `None` when there is nothing
/// to seed.
fn render_seed(host: Option<&str>, log: &[(String, String)]) -> Option<String> {
    let host = host.filter(|h| !h.trim().is_empty());
    if host.is_none() && log.is_empty() {
        return None;
    }
    let mut seed = String::from(
        "[muninn] The session that held this conversation was lost. It continues here from \
         muninn's own transcript. The conversation so far:\n",
    );
    if let Some(host) = host {
        seed.push('\n');
        seed.push_str(host);
        seed.push('\n');
    }
    for (user, assistant) in log {
        seed.push_str(&format!("\nUser: {user}\n\nAssistant: {assistant}\n"));
    }
    seed.push_str("\n[muninn] End of the conversation so far. The new message follows.");
    Some(seed)
}

/// The text of a `--replay-user-messages` echo (`user` with `isReplay: true`), if `event` is one.
fn replayed_text(event: &Value) -> Option<String> {
    if event.get("type").and_then(Value::as_str) != Some("user")
        || event.get("isReplay").and_then(Value::as_bool) != Some(true)
    {
        return None;
    }
    let content = event.get("message")?.get("content")?;
    (content.is_string() || content.is_array()).then(|| message_text(content))
}

/// Sends SIGTERM to the child `pid`, if known (the CLI then writes its state and exits).
fn sigterm(pid: Option<u32>) {
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// Writes the stream-json `interrupt` control request (SIGINT would end the process).
async fn write_interrupt(live: &mut Live, n: u64) {
    let request = json!({
        "type": "control_request",
        "request_id": format!("muninn-interrupt-{n}"),
        "request": {"subtype": "interrupt"},
    });
    if let Some(stdin) = live.stdin.as_mut()
        && let Err(e) = write_line(stdin, &request.to_string()).await
    {
        tracing::debug!(error = %e, "claude-cli: interrupt write failed");
    }
}

/// The text of a message's `content` (a string, or its text blocks joined).
fn message_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A pipe holding `secret`, its write end already closed: the child reads it to the end.
fn credential_pipe(secret: &str) -> Result<OwnedFd, BackendError> {
    if secret.len() > MAX_CREDENTIAL_BYTES {
        return Err(BackendError::Invalid(
            "the credential is too long to pass through a pipe".into(),
        ));
    }
    // Both ends are created close-on-exec; only the child's copy of the read end loses it.
    let (reader, mut writer) = std::io::pipe()
        .map_err(|e| BackendError::Transport(format!("cannot create the credential pipe: {e}")))?;
    writer
        .write_all(secret.as_bytes())
        .map_err(|e| BackendError::Transport(format!("cannot fill the credential pipe: {e}")))?;
    drop(writer);
    Ok(reader.into())
}

/// Writes the child's `settings.json` (the config dir is muninn's own, so it is overwritten):
/// auto-compaction and idle compaction off, unless a test asks to leave auto-compaction on.
fn write_settings(c: &CliConfig) -> Result<(), BackendError> {
    let settings = json!({
        "autoCompactEnabled": c.allow_cli_auto_compaction,
        "idleCompaction": false,
    });
    let path = c.config_dir().join("settings.json");
    std::fs::write(&path, format!("{settings:#}\n"))
        .map_err(|e| BackendError::Invalid(format!("cannot write {}: {e}", path.display())))
}

/// Writes the session's system prompt to `system-prompt.md` in the child's working directory,
/// readable by this user only, replacing it whole (a new file renamed over the old one, so a
/// child launching at the same moment never reads half of it). Returns its path.
fn write_system_prompt(c: &CliConfig, text: &str) -> Result<std::path::PathBuf, BackendError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = c.work_dir();
    let path = dir.join("system-prompt.md");
    let partial = dir.join(".system-prompt.md.partial");
    let failed =
        |e: std::io::Error| BackendError::Invalid(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&partial, &path).map_err(failed)?;
    Ok(path)
}

async fn write_line(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    stdin.write_all(&bytes).await?;
    stdin.flush().await
}

/// Keeps the child's last stderr lines; draining also keeps a full pipe from stalling it.
async fn drain_stderr(stderr: tokio::process::ChildStderr, ring: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(line = %truncate(&line, 300), "claude-cli stderr");
        if let Ok(mut ring) = ring.lock() {
            if ring.len() == STDERR_LINES {
                ring.pop_front();
            }
            ring.push_back(truncate(&line, STDERR_LINE_CHARS));
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_lines_carry_the_instructions() {
        let line = Exchange::Compact("  keep \"the\"\nravens ".into())
            .line()
            .unwrap();
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["message"]["content"],
            json!("/compact keep \"the\"\nravens")
        );
        let bare = Exchange::Compact(String::new()).line().unwrap();
        let v: Value = serde_json::from_str(&bare).unwrap();
        assert_eq!(v["message"]["content"], json!("/compact"));
    }

    #[test]
    fn user_lines_are_one_valid_json_line() {
        let line = user_line(&TurnInput::text("two\nlines \"quoted\""), None).unwrap();
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["message"]["content"], json!("two\nlines \"quoted\""));
        let multi = TurnInput {
            parts: vec![
                InputPart::Text { text: "a".into() },
                InputPart::Text { text: "b".into() },
            ],
            safe_to_repeat: false,
        };
        let v: Value = serde_json::from_str(&user_line(&multi, None).unwrap()).unwrap();
        assert_eq!(
            v["message"]["content"][1],
            json!({"type":"text","text":"b"})
        );
        assert!(
            user_line(
                &TurnInput {
                    parts: vec![],
                    safe_to_repeat: true
                },
                None
            )
            .is_err()
        );
        // A seed goes first, as its own block.
        let v: Value =
            serde_json::from_str(&user_line(&TurnInput::text("now"), Some("so far")).unwrap())
                .unwrap();
        assert_eq!(
            v["message"]["content"],
            json!([{"type":"text","text":"so far"},{"type":"text","text":"now"}])
        );
    }

    #[test]
    fn a_seed_renders_the_host_seed_then_the_log() {
        assert_eq!(render_seed(None, &[]), None);
        assert_eq!(render_seed(Some("  "), &[]), None);
        let seed = render_seed(
            Some("HOST TRANSCRIPT"),
            &[("q1".into(), "a1".into()), ("q2".into(), "a2".into())],
        )
        .unwrap();
        let at = |s: &str| seed.find(s).unwrap();
        assert!(seed.starts_with("[muninn] The session that held this conversation was lost."));
        assert!(at("HOST TRANSCRIPT") < at("User: q1") && at("User: q1") < at("Assistant: a1"));
        assert!(at("Assistant: a1") < at("User: q2") && at("User: q2") < at("Assistant: a2"));
    }

    #[test]
    fn replay_echoes_are_recognised() {
        let echo =
            json!({"type":"user","message":{"role":"user","content":"flush now"},"isReplay":true});
        assert_eq!(replayed_text(&echo).as_deref(), Some("flush now"));
        let blocks = json!({"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"}]},"isReplay":true});
        assert_eq!(replayed_text(&blocks).as_deref(), Some("a"));
        // A tool result the CLI reports is not an echo.
        let tool = json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"x"}]}});
        assert_eq!(replayed_text(&tool), None);
    }
}
