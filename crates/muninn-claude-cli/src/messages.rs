//! What the backend handle and the driver task send each other: [`Command`]s in, [`TurnDone`]
//! and [`ParkReport`] back, the [`TurnReport`] of what the driver saw, the session-event queue,
//! and the [`InterruptHandle`] that reaches a running turn.

use crate::SessionEvent;
use muninn_backend::{BackendError, FlushProtocol, FlushStage, RetryEvent, TurnInput, TurnOutcome};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// What the driver saw of one turn, beside the [`TurnOutcome`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnReport {
    /// The session the turn ran in (after any reseed).
    pub session_id: String,
    /// The child's pid when the turn ended.
    pub pid: Option<u32>,
    /// Retries the CLI reported (`system/api_retry`), also when the turn failed.
    pub retries: Vec<RetryEvent>,
    /// The `result` line's `model_usage_since_last_result` (per model, including compaction).
    pub model_usage_since_last_result: Option<Value>,
    /// The `result` line, verbatim.
    pub result: Option<Value>,
    /// Relaunches and reseeds this turn caused.
    pub session_events: Vec<SessionEvent>,
    /// From the `turn()` call to the stdin write completing (includes a relaunch, if any).
    pub to_write: Duration,
    /// From reading the `result` line to `turn()` returning.
    pub from_result: Duration,
    /// The live child was restarted (`--resume`, no session event) before this exchange, to
    /// give it a fresh [`CliConfig::run_budget_micro_usd`](crate::CliConfig::run_budget_micro_usd); the time is in
    /// [`TurnReport::to_write`].
    pub budget_relaunch: bool,
    /// The turn failed with nothing answered — the API refused it, it was given up at its
    /// timeout, or its child died — and the driver took it back out of the CLI's session (its
    /// file cut back to what it held before the turn; the next turn resumes it): the session
    /// holds nothing of the turn, so the same input can be sent again without the CLI merging
    /// a second copy into it. Also set for a turn that failed before it reached the session (a
    /// relaunch that failed, a line the child never took): its file is as it was.
    pub rewound: bool,
    /// The turn failed on the way (a child that died or hung after taking its line) and stays
    /// in the CLI's session as the CLI wrote it — its line, and what the model did with it (a
    /// paid answer, a tool call the CLI ran); the session carries on (the child resumed with `--resume`), and the same input sent again is a
    /// second copy of it there, as it should be in the caller's transcript. `false` with
    /// `rewound` `false` after a failure: the session may be out of step with the caller (a
    /// `result` that failed after the model answered, a session that changed during the turn,
    /// a file that could not be cut back safely) and is best rebuilt.
    pub held: bool,
    /// A failed turn with nothing answered was due to be taken back out of the session and
    /// could not be (the session changed during it, or its file could not be cut back safely),
    /// or a failed turn whose model acted is missing from the session file what the driver
    /// read of it (the CLI writes the file behind a buffer; a killed child may take a message,
    /// a tool call or its result with it). The cause is logged: the session is not known to be
    /// in step.
    pub out_of_step: bool,
}

/// Commands to the driver.
pub(crate) enum Command {
    Turn {
        input: TurnInput,
        /// Run the turn under the flush protocol ([`Backend::run`]).
        flush: Option<FlushProtocol>,
        reply: oneshot::Sender<TurnDone>,
    },
    Compact {
        instructions: String,
        reply: oneshot::Sender<TurnDone>,
    },
    Pid {
        reply: oneshot::Sender<Option<u32>>,
    },
    Park {
        reply: oneshot::Sender<Option<ParkReport>>,
    },
    Shutdown {
        reply: oneshot::Sender<Option<std::process::ExitStatus>>,
    },
}

/// What [`ClaudeCliBackend::park`](crate::ClaudeCliBackend::park) stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkReport {
    /// The [`SessionEvent::Parked`] also reported with the next turn.
    pub event: SessionEvent,
    /// The child's exit status (`None` if it had to be killed and could not be reaped).
    pub status: Option<std::process::ExitStatus>,
}

/// What the driver sends back for a turn.
pub(crate) struct TurnDone {
    pub result: Result<TurnOutcome, BackendError>,
    pub flush: FlushStage,
    pub report: TurnReport,
    pub result_read_at: Option<Instant>,
    pub written_at: Option<Instant>,
}

/// Interrupts the running turn from anywhere (the turn itself holds `&mut` on the backend).
#[derive(Debug, Clone)]
pub struct InterruptHandle {
    pub(crate) tx: Option<mpsc::Sender<()>>,
}

impl InterruptHandle {
    /// Asks the CLI to stop the running turn (`control_request` `interrupt`); the turn then
    /// returns with `stop_reason == "interrupted"` and the partial text, and the process stays
    /// usable. Returns `false` when there is no session. Idle interrupts are ignored.
    pub async fn interrupt(&self) -> bool {
        match &self.tx {
            Some(tx) => tx.send(()).await.is_ok(),
            None => false,
        }
    }
}

/// Where the driver queues [`SessionEvent`]s the moment they happen.
pub(crate) type EventQueue = Arc<Mutex<VecDeque<SessionEvent>>>;

/// Where the driver queues what the CLI billed beside the turns it answered (a subagent's
/// requests, a turn the CLI started by itself), for [`muninn_backend::Backend::take_failed_attempts`].
pub(crate) type BilledQueue = Arc<Mutex<Vec<muninn_backend::FailedAttempt>>>;
