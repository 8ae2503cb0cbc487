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
//!
//! ## Layout
//!
//! This file holds the driver's state, its command loop and the child's stopping; `launch`
//! starts a child (arguments, environment, credential) and reseeds a lost session; `turn` runs
//! one exchange with its relaunches; `read` reads one exchange's events; `outcome` turns a
//! `result` into the turn's outcome; `beside` reports what the CLI billed beside a turn (a
//! subagent's requests, a turn it started by itself); `rewind` takes a turn the API refused
//! back out of the session; `stdin` renders what is written to the child; `tree` kills
//! the processes a child started: those below it when the child is killed, and every one
//! still carrying its mark when the child is done with; `sweeps` runs those sweeps by mark off
//! the async threads and lets the host wait for them.

mod beside;
mod launch;
mod outcome;
mod read;
mod rewind;
mod stdin;
pub(crate) mod sweeps;
mod tree;
mod turn;

use crate::event::{CompactMetadata, ResultEvent};
use crate::flush::FlushState;
use crate::lines::{BoundedLines, Line};
use crate::{
    BilledQueue, CliConfig, Command, EventQueue, ParkReport, SessionEvent, TurnDone, TurnReport,
    transcript_path,
};
use muninn_backend::{BackendError, FlushProtocol, FlushStage, SessionSpec, ToolCall};
use muninn_core::trace::Usage;
use serde_json::Value;
use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use stdin::{Exchange, input_text};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

/// Launch-and-write attempts per turn (a dead child, then a lost session, then give up).
const MAX_ATTEMPTS: u32 = 3;
/// stderr lines kept for error messages.
const STDERR_LINES: usize = 64;
/// Longest stderr line kept.
const STDERR_LINE_CHARS: usize = 2_000;
/// The longest a dead child's stderr is waited for to end, for the lines that explain its death.
const STDERR_END_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Longest stderr line read into memory; a longer one is dropped as it comes.
const MAX_STDERR_LINE_BYTES: usize = 64 * 1024;
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
    billed: BilledQueue,
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
        billed,
        notified: false,
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
    /// The stderr drain, which ends when every holder of the pipe has closed it.
    stderr_drained: Option<tokio::task::JoinHandle<()>>,
    pid: Option<u32>,
    /// The mark in the environment of the child and of every process it starts
    /// ([`tree::MARK_VAR`]); taken when its sweep begins.
    mark: Option<String>,
    /// Where the sweep by mark runs and is waited for.
    sweeps: sweeps::Sweeps,
}

impl Drop for Live {
    /// A `Live` dropped without [`Live::finish`] (a dead child replaced, a panic, a cancelled
    /// task): the processes it started go with it all the same, those still below it and those
    /// that left its tree (a Bash call's `cmd &`, adopted by init) alike. The tree is stopped
    /// here, on this thread, because `kill_on_drop` kills and reaps the child right after and
    /// its pid is then no longer its own; the sweep by mark is begun on the blocking pool.
    fn drop(&mut self) {
        let Some(mark) = self.mark.take() else { return };
        let running = matches!(self.child.try_wait(), Ok(None));
        if running {
            tree::kill_descendants(self.pid);
        }
        self.sweeps.start(mark, self.pid.filter(|_| running));
    }
}

/// How long `Live::kill` waits for a killed child to be gone.
const KILLED_CHILD_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Live {
    /// Kills the child and every process it started, and waits for the child to be gone —
    /// within `KILLED_CHILD_WAIT`. The tree is stopped on the blocking pool; the child is not
    /// signalled until after, so its pid stays its own.
    ///
    /// Bounded because a child that no SIGKILL ends (a thread stuck in the kernel: a stalled
    /// disk or network filesystem, a frozen cgroup) must not hold its driver, and with it the
    /// Mind's turns, a stop or a park, for ever; it is logged at error, as a process the host
    /// could not end, and reaped when the `Child` drops. The wait matters too: a thread of the
    /// child still in a write could finish it after the caller cut the session file back.
    async fn kill(&mut self) {
        let pid = self.pid;
        let _cancelled = tokio::task::spawn_blocking(move || tree::kill_descendants(pid)).await;
        let _already_gone = self.child.start_kill();
        if tokio::time::timeout(KILLED_CHILD_WAIT, self.child.wait())
            .await
            .is_err()
        {
            tracing::error!(
                pid = ?self.pid,
                "claude-cli: a killed child was not gone after {KILLED_CHILD_WAIT:?}; going on without it (it is reaped if it ever ends)"
            );
        }
    }

    /// Done with the child: kills it (and its tree) if it still runs, then sweeps its mark
    /// (`Live::sweep`), so a stop or a park answers only once nothing the child started is
    /// left.
    async fn finish(mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill().await;
        }
        self.sweep().await;
    }

    /// Kills every process still carrying the child's mark and waits for that — off the async
    /// threads. The child itself is not waited for again: a caller that killed it already
    /// waited as long as `Live::kill` does.
    async fn sweep(mut self) {
        let Some(sweep) = self.mark.take().and_then(|m| self.sweeps.start(m, None)) else {
            return;
        };
        // Bounded (`SWEEP_WAIT`): a sweep stuck on a process's `/proc` entry must not hold
        // the stop; it runs on, counted, and the host's exit waits for it within its own bound.
        if tokio::time::timeout(sweeps::SWEEP_WAIT, sweep)
            .await
            .is_err()
        {
            tracing::error!(
                pid = ?self.pid,
                "claude-cli: the sweep of what a child left behind did not end within {:?}; the stop goes on without it",
                sweeps::SWEEP_WAIT
            );
        }
    }

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
    /// What the CLI billed beside the turns it answered, for
    /// [`muninn_backend::Backend::take_failed_attempts`].
    billed: BilledQueue,
    /// A background task of the main thread told the CLI it ended (`system/task_notification`)
    /// since the CLI last ran a turn of its own: one may follow a turn's `result` (`beside.rs`).
    notified: bool,
    /// The live child has been sent an exchange: its `--max-budget-usd` count (per process)
    /// is no longer whole, so a run under [`CliConfig::run_budget_micro_usd`] relaunches it.
    served: bool,
    /// The next launch is planned (a budget relaunch, or the resume after a refused turn was
    /// taken back out of the session), so no [`SessionEvent::Relaunched`].
    renewing: bool,
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
    /// The CLI echoed the exchange's line (`--replay-user-messages`): it took it, so the
    /// `result` that follows answers it. A `result` after a `system/init` with no echo, once a
    /// background task has notified, ends a turn the CLI started by itself (`beside.rs`).
    echoed: bool,
    /// The main thread's text blocks, each with the id of the API message it came in (the CLI
    /// writes a line per block): see [`Collected::reply_text`].
    text: Vec<(Option<String>, String)>,
    /// The ids of the main thread's model messages since the CLI took the exchange's line,
    /// once each, in order: what a failed turn's session file must hold for the session to
    /// carry on from it (`rewind.rs`).
    model_messages: Vec<Option<String>>,
    /// The main thread's tool calls (a subagent's, in events with a `parent_tool_use_id`, are
    /// left out: the CLI stores them in the subagent's own file, not the session's).
    tool_calls: Vec<ToolCall>,
    /// The main thread's last request id since the CLI took the exchange's line: the turn's
    /// (a subagent's requests are billed beside it).
    request_id: Option<String>,
    /// Usage of the run's results before the last (a run whose flush line became its own turn
    /// has two).
    earlier: Usage,
    /// `system/compact_boundary` events seen, in order.
    boundaries: Vec<CompactMetadata>,
    /// The first non-replay `user` event after a boundary: the summary the session continues
    /// from.
    summary: Option<String>,
    /// Each API message the model began (the main thread's and a subagent's), by id, with the
    /// usage the CLI put on its lines (`message_start`'s: input and cache final, output as far
    /// as reported): what is known of the cost of a turn whose `result` never came.
    started: Vec<(Option<String>, Value)>,
    /// The exchange is a `/compact`: what its `result` bills beyond its `usage` is the
    /// compaction's, not a subagent's.
    compacting: bool,
    /// The text of the CLI's own messages (`<synthetic>`: an API error, a `/compact` that could
    /// not compact), which are no reply of the model's.
    cli_said: Vec<String>,
}

impl Collected {
    /// The reply's text: the blocks of one API message joined as they came, and the messages
    /// (a text before a tool call, the text after its result) apart by a blank line, as the
    /// paragraphs they are — joined bare, one message's last sentence ran into the next's
    /// first ("…tool.Tool result…"). A block with no message id is a message of its own. A
    /// message whose text is whitespace alone (a bare `"\n\n"` block the model writes before a
    /// tool call) is no paragraph: kept, it added blank lines between its neighbours.
    fn reply_text(&self) -> String {
        let mut messages: Vec<String> = Vec::new();
        let mut last: Option<&Option<String>> = None;
        for (id, text) in &self.text {
            match messages.last_mut() {
                Some(message) if last.is_some_and(|l| l.is_some() && l == id) => {
                    message.push_str(text);
                }
                _ => messages.push(text.clone()),
            }
            last = Some(id);
        }
        messages.retain(|m| !m.trim().is_empty());
        messages.join("\n\n")
    }
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
        // The handle was dropped: the child and what it started end here.
        if let Some(live) = self.child.take() {
            live.finish().await;
        }
    }

    fn live_pid(&mut self) -> Option<u32> {
        let live = self.child.as_mut()?;
        match live.child.try_wait() {
            Ok(None) => live.pid,
            _ => None,
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
        // The session as it stood: a failed exchange that left it so never reached it.
        let untouched = (self.session_id.clone(), self.stored_len());
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
        // A transport failure on the way to the turn or out of it (a launch, a child that took
        // no input or died) that nothing above took back out or found out of step holds the
        // session as the CLI left it: resumed, it carries on — unless the session is as it was
        // (the same one, its file the same length: a launch that failed, a line the child never
        // took), which holds nothing of the turn, as after a cut, and the input is sent again
        // as it was. Held, the caller would record it twice against the session's once.
        if let Err(BackendError::Transport(_)) = &result {
            // Not for a `/compact`, which may have compacted the child's session unwritten.
            let unchanged = matches!(exchange, Exchange::Turn(_))
                && (self.session_id.clone(), self.stored_len()) == untouched;
            report.rewound |= !report.out_of_step && unchanged;
            report.held |= !report.rewound && !report.out_of_step;
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

    /// The size of the CLI's own transcript of the session (0 when it has none yet).
    fn stored_len(&self) -> u64 {
        transcript_path(&self.config, &self.session_id)
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len())
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
                    // Bounded: a child that outlives its SIGKILL is left, not waited for.
                    live.kill().await;
                    None
                }
            };
        // The drain may still be reading the last lines, which say why the child died: wait for
        // it to reach the end of stderr, but not for a process the child left holding the pipe.
        if let Some(drained) = live.stderr_drained.take() {
            let _still_open = tokio::time::timeout(STDERR_END_WAIT, drained).await;
        }
        let tail = live.stderr_tail();
        // Exited or killed above: only its mark is left to sweep (`finish` would wait for a
        // child that outlived its SIGKILL a second time).
        live.sweep().await;
        (status, tail)
    }

    /// Kills the current child (used when its session is abandoned or a turn timed out).
    async fn stop_child(&mut self) {
        if let Some(live) = self.child.take() {
            live.finish().await;
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
    ///
    /// The child's stdout is read meanwhile, to its end: no exchange is in flight, so whatever
    /// comes is a turn the CLI started by itself. Closing stdin lets the CLI finish a running
    /// turn, and that turn's `result` — or, when the child is cut short before it, what its
    /// messages said they cost as they began — is billed (`beside.rs`), where it was once lost
    /// with the pipe.
    async fn shutdown(&mut self) -> Option<ExitStatus> {
        let mut live = self.child.take()?;
        live.stdin = None;
        let wait = self.config.shutdown_timeout;
        let requested_1h = self.spec.conversation_ttl == muninn_core::cache::Ttl::OneHour;
        let mut collected = Collected::default();
        let mut report = TurnReport::default();
        let mut status: Option<Option<ExitStatus>> = None;
        let mut stdout_open = true;
        let mut signals_sent = 0;
        let mut escalate_at = tokio::time::Instant::now() + wait;
        let mut exited_at = None;
        while stdout_open || status.is_none() {
            tokio::select! {
                line = live.stdout.next_line(), if stdout_open => match line {
                    Ok(Some(Line::Text(line))) => {
                        self.idle_line(&line, &mut collected, &mut report, requested_1h);
                    }
                    Ok(Some(Line::Skipped(bytes))) => {
                        read::line_skipped(&self.session_id, bytes, "the child's stop");
                    }
                    Ok(None) => stdout_open = false,
                    Err(e) => {
                        read::read_failed(&self.session_id, &e, "the child's stop");
                        stdout_open = false;
                    }
                },
                exit = live.child.wait(), if status.is_none() => {
                    // Reaped: its pid may be reused, so no signal may go to it any more.
                    live.pid = None;
                    status = Some(exit.ok());
                    exited_at = Some(tokio::time::Instant::now());
                }
                () = tokio::time::sleep_until(escalate_at), if status.is_none() => {
                    match signals_sent {
                        0 => sigterm(live.pid),
                        1 => {
                            tree::kill_descendants(live.pid);
                            let _already_gone = live.child.start_kill();
                        }
                        _ => break,
                    }
                    signals_sent += 1;
                    escalate_at = tokio::time::Instant::now() + wait;
                }
                // A process the child started may hold stdout open after the child exited.
                () = read::sleep_until_after(exited_at, read::STDOUT_END_WAIT) => break,
            }
        }
        live.finish().await;
        self.take_unfinished(&collected);
        self.pending_events.append(&mut report.session_events);
        status.flatten()
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

/// Sends SIGTERM to the child `pid`, if known (the CLI then writes its state and exits).
fn sigterm(pid: Option<u32>) {
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
