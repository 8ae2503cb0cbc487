//! What the host tells its operator: one structured log event and one set of counters per thing
//! that happened, fed from a few named points of the runtime and the HTTP layer.
//!
//! # Where it is fed
//!
//! | call | from | logs | counts |
//! |---|---|---|---|
//! | [`Telemetry::answered`] | `runtime/accounting.rs::answered`, which every ledger row passes | one event per request (`turn`, `request`, `ping`, `head ping`, `flush`): Mind, role, decision and reason, tokens by kind, cost, latency; one per backend retry; one per session event | requests, turns, tokens, cost, decisions, misses, retries, session events, turn latency |
//! | [`Telemetry::step_began`] / [`Telemetry::stepped`] | `run_mind`, around each step | a failed step with its error (warn), a recovery, a Mind braked, capped or not led | step failures, backend errors (and the retries an exhausted call made) |
//! | [`Telemetry::lease`] | `runtime/lease.rs` | a lease taken, lost or released | lease held |
//! | [`Telemetry::settings_changed`] | the HTTP API (settings, brake) | the brake, spend cap, window or turn limit changed | |
//! | [`Telemetry::runner_started`] / a [`RunnerGuard`] dropped | `run_mind` | a runner started or stopped | runner up |
//!
//! The logs go wherever the process's `tracing` subscriber sends them (`muninn` installs one
//! writing text or JSON lines to stderr). The counters live here, in memory, and are exposed in
//! the Prometheus text format by [`metrics`]; they start at zero with the process, as Prometheus
//! counters do. They count what the backend *answered* — what the provider bills — which is the
//! ledger unless a turn's commit failed afterwards (that step's failure is logged and counted
//! too). [`health`] answers `/readyz` from the same state.
//!
//! # Invariants
//!
//! - Nothing here carries a message's text, a reply, a credential or the API token: events and
//!   metrics hold ids, counts, tokens, money, decision names and error texts of the backend and
//!   store (which never carry credentials, by their own contracts); metric labels only take
//!   values from fixed sets (enum names), Mind ids and roles.
//! - Feeding telemetry never fails and never blocks on I/O: one short lock per call.

pub mod health;
pub mod metrics;
pub mod store_fault;
mod transport;

use crate::runtime::{RuntimeError, Step};
use muninn_backend::{BackendError, RetryEvent, SessionEvent};
use muninn_claude_cli::Sweeps;
use muninn_claude_cli::pool::SharedPool;
use muninn_core::decide::Reason;
use muninn_core::ledger::{ForcedStart, LedgerRow, MissCause, RowKind};
use muninn_store::{MindSettings, Role};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// The upper bounds of the turn latency histogram, seconds (a turn on the simulator takes
/// milliseconds; a Self run on a real model, minutes).
pub const LATENCY_BUCKETS_S: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The host's telemetry: counters per Mind and role, each runner's live state, and the
/// claude-cli process pool when there is one. Shared by every part of a host
/// ([`crate::Host::telemetry`]).
#[derive(Default)]
pub struct Telemetry {
    state: Mutex<State>,
    pool: OnceLock<SharedPool>,
    /// The sweeps of what the claude-cli children left behind, whose failures `/metrics` and
    /// `GET /v1/minds` (`muninn status`) report (set once).
    sweeps: OnceLock<Sweeps>,
    /// Connections the API refused over its `max_connections` (counted by its accept loop).
    api_refused: Arc<AtomicU64>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Counters by (Mind, role).
    sessions: BTreeMap<(String, &'static str), SessionCounters>,
    /// Live state by Mind.
    minds: BTreeMap<String, MindLive>,
}

/// The counters of one role's session (see [`metrics`] for what each becomes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionCounters {
    /// Requests answered, by kind (`request`, `ping`, `head_ping`, `flush`, `failed_attempt`).
    pub requests: BTreeMap<&'static str, u64>,
    /// Requests that began a turn.
    pub turns: u64,
    /// Tokens by kind: uncached, written at 5m, written at 1h, read, output.
    pub tokens: [u64; 5],
    /// Cost, micro-dollars.
    pub cost_micro_usd: i64,
    /// Decisions by (action, reason).
    pub decisions: BTreeMap<(&'static str, String), u64>,
    /// Cache misses by cause.
    pub misses: BTreeMap<&'static str, u64>,
    /// Retries the backend made (inside answered calls, and by calls that ran out of them).
    pub retries: u64,
    /// Backend errors that failed a step, by kind.
    pub backend_errors: BTreeMap<&'static str, u64>,
    /// Session events, by type.
    pub session_events: BTreeMap<&'static str, u64>,
    /// Turn latency.
    pub latency: Histogram,
    /// The last request's prefix, tokens.
    pub prefix_tokens: u64,
    /// The context ceiling the decider works under, tokens (0 before a decision record).
    pub ceiling_tokens: u64,
}

/// The token kinds, in the order of [`SessionCounters::tokens`], as metric labels.
pub const TOKEN_KINDS: [&str; 5] = [
    "uncached",
    "cache_write_5m",
    "cache_write_1h",
    "cache_read",
    "output",
];

/// A Prometheus histogram over [`LATENCY_BUCKETS_S`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative; [`metrics`] accumulates).
    pub buckets: [u64; LATENCY_BUCKETS_S.len()],
    /// Every observation.
    pub count: u64,
    /// Their sum, seconds.
    pub sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = LATENCY_BUCKETS_S.iter().position(|b| seconds <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// What a Mind's runner is doing, as the last step said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Activity {
    /// No runner has stepped yet.
    #[default]
    Starting,
    /// In a step (a turn, a Self run, a ping), since then, Unix ms.
    Working {
        /// When the step began.
        since_ms: i64,
    },
    /// Nothing to do until then (or a wake-up).
    Idle {
        /// The next decision time, Unix ms.
        until_ms: Option<i64>,
    },
    /// The operator brake is on.
    Braked,
    /// The spend cap for the window is reached.
    Capped,
    /// Another host holds the Mind's lease.
    NotLeader,
}

impl Activity {
    /// The state's name, as the `muninn_mind_state` gauge labels it.
    pub fn name(&self) -> &'static str {
        match self {
            Activity::Starting => "starting",
            Activity::Working { .. } => "running",
            Activity::Idle { .. } => "idle",
            Activity::Braked => "braked",
            Activity::Capped => "capped",
            Activity::NotLeader => "not_leader",
        }
    }
}

/// Steps failing in a row: since when, how often, and the last error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// When the first of them failed, Unix ms.
    pub since_ms: i64,
    /// How many in a row.
    pub failures: u64,
    /// `store`, `backend` or `config`.
    pub cause: &'static str,
    /// The last error, as displayed.
    pub last_error: String,
}

/// One Mind's live state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MindLive {
    /// Whether its runner task is running.
    pub runner_up: bool,
    /// What the runner is doing.
    pub activity: Activity,
    /// What its last step came to ([`Activity::name`]; empty before the first): a change of it
    /// is logged once, not at every step that finds the Mind still braked.
    pub last_outcome: &'static str,
    /// Set while steps fail (the runner retries with a backoff).
    pub failing: Option<Failing>,
    /// Whether this host holds the Mind's lease.
    pub lease_held: bool,
    /// Failed steps, by cause.
    pub step_failures: BTreeMap<&'static str, u64>,
    /// The transport that brings its mail (the Matrix connector), as it last reported.
    pub transport: Option<muninn_api::wire::TransportStatus>,
    /// Lease changes seen by this host, by [`LeaseChange::name`].
    pub lease_changes: BTreeMap<&'static str, u64>,
}

/// Everything [`Telemetry`] holds, copied out at one instant (for `/metrics` and the dashboard).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Counters by (Mind, role).
    pub sessions: BTreeMap<(String, &'static str), SessionCounters>,
    /// Live state by Mind.
    pub minds: BTreeMap<String, MindLive>,
    /// Each live claude-cli child: (Mind, role, resident bytes).
    pub processes: Vec<(String, String, u64)>,
    /// Connections the API refused over its `max_connections`.
    pub api_refused: u64,
    /// Sweeps of what the claude-cli children left behind that could not look (no `/proc`, no
    /// pidfds) since this host started.
    pub sweeps_failed: u64,
}

/// A ledger row as the backend answered it, with what the row's JSON does not type.
#[derive(Debug, Clone, Copy)]
pub struct Answered<'a> {
    /// The row (its decision record included).
    pub row: &'a LedgerRow,
    /// From the start of the runner's step to the answer.
    pub latency: Duration,
    /// Every retry the backend made for it.
    pub retries: &'a [RetryEvent],
    /// The session events the row carries.
    pub session_events: &'a [SessionEvent],
}

/// A change of a Mind's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseChange {
    /// This host took the lease (`fork`: another holder may still write to the provider
    /// session).
    Taken {
        /// The fencing token.
        token: i64,
        /// Whether the previous holder had not released it.
        fork: bool,
    },
    /// Another host took it over (a fenced renewal).
    Lost,
    /// Released on shutdown.
    Released,
}

impl LeaseChange {
    /// The metric label: `taken` (free or released before), `taken_over` (from a holder that
    /// had not released it: expired, proven gone, or this host's earlier process), `lost`,
    /// `released`.
    pub fn name(&self) -> &'static str {
        match self {
            LeaseChange::Taken { fork: false, .. } => "taken",
            LeaseChange::Taken { fork: true, .. } => "taken_over",
            LeaseChange::Lost => "lost",
            LeaseChange::Released => "released",
        }
    }
}

/// Marks a Mind's runner stopped when dropped: on its return, and when its task panics or is
/// aborted.
#[derive(Debug)]
pub struct RunnerGuard {
    telemetry: Arc<Telemetry>,
    mind: String,
}

impl Drop for RunnerGuard {
    fn drop(&mut self) {
        let mut state = self.telemetry.lock();
        state.minds.entry(self.mind.clone()).or_default().runner_up = false;
        drop(state);
        tracing::info!(mind = %self.mind, "runner stopped");
    }
}

impl Telemetry {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; a poisoned state is still valid.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counter the API's accept loop adds a refused connection to.
    pub fn api_refused_counter(&self) -> Arc<AtomicU64> {
        self.api_refused.clone()
    }

    /// The claude-cli process pool, whose children `/metrics` reports (set once).
    pub fn set_pool(&self, pool: SharedPool) {
        let _ = self.pool.set(pool);
    }

    /// The sweeps of what the claude-cli children leave behind, whose failures are reported
    /// (set once; every session of the host shares them).
    pub fn set_sweeps(&self, sweeps: Sweeps) {
        let _ = self.sweeps.set(sweeps);
    }

    /// How many sweeps of what the claude-cli children left behind could not look since this
    /// host started: processes a child left may still be running (0 without the backend).
    pub fn sweeps_failed(&self) -> u64 {
        self.sweeps.get().map_or(0, Sweeps::failed)
    }

    /// A request the backend answered, as its ledger row records it.
    pub fn answered(&self, answered: &Answered<'_>) {
        let row = answered.row;
        let labels = RowLabels::of(row);
        let seconds = answered.latency.as_secs_f64();
        {
            let mut state = self.lock();
            let counters = state
                .sessions
                .entry((row.mind.clone(), labels.role))
                .or_default();
            *counters.requests.entry(labels.kind).or_default() += 1;
            let u = &row.usage;
            for (total, n) in counters.tokens.iter_mut().zip([
                u.input,
                u.cache_write_5m,
                u.cache_write_1h,
                u.cache_read,
                u.output,
            ]) {
                *total += n;
            }
            counters.cost_micro_usd += row.cost.0;
            *counters
                .decisions
                .entry((labels.action, labels.reason.clone()))
                .or_default() += 1;
            if let Some(cause) = row.miss_cause {
                *counters.misses.entry(miss_name(cause)).or_default() += 1;
            }
            counters.retries += answered.retries.len() as u64;
            for event in answered.session_events {
                *counters
                    .session_events
                    .entry(session_event_name(event))
                    .or_default() += 1;
            }
            if labels.turn {
                counters.turns += 1;
                counters.latency.observe(seconds);
            }
            counters.prefix_tokens = row.prefix_tokens;
            if let Some(decided) = &row.decided {
                counters.ceiling_tokens = decided.bounds.ceiling_tokens;
            }
        }
        log_answered(answered, &labels);
    }

    /// A runner began a step at `now_ms`.
    pub fn step_began(&self, mind: &str, now_ms: i64) {
        self.lock()
            .minds
            .entry(mind.to_owned())
            .or_default()
            .activity = Activity::Working { since_ms: now_ms };
    }

    /// A runner's step ended: its new state, a failure (logged with its cause and counted) or a
    /// recovery. `role` is the session the step worked on, when it got that far.
    pub fn stepped(
        &self,
        mind: &str,
        role: Option<Role>,
        result: &Result<Step, RuntimeError>,
        now_ms: i64,
    ) {
        match result {
            Ok(step) => self.succeeded(mind, step, now_ms),
            Err(error) => self.failed(mind, role, error, now_ms),
        }
    }

    fn failed(&self, mind: &str, role: Option<Role>, error: &RuntimeError, now_ms: i64) {
        let cause = error_cause(error);
        let mut state = self.lock();
        let live = state.minds.entry(mind.to_owned()).or_default();
        *live.step_failures.entry(cause).or_default() += 1;
        let failing = live.failing.get_or_insert(Failing {
            since_ms: now_ms,
            failures: 0,
            cause,
            last_error: String::new(),
        });
        failing.failures += 1;
        failing.cause = cause;
        failing.last_error = match error {
            RuntimeError::Backend(backend) => backend.to_string(),
            other => other.to_string(),
        };
        let (failures, since_ms) = (failing.failures, failing.since_ms);
        if let RuntimeError::Backend(backend) = error {
            let role = role.map_or("unknown", Role::as_str);
            let counters = state.sessions.entry((mind.to_owned(), role)).or_default();
            *counters
                .backend_errors
                .entry(backend_error_kind(backend))
                .or_default() += 1;
            if let BackendError::RetriesExhausted { attempts, .. } = backend {
                counters.retries += u64::from(attempts.saturating_sub(1));
            }
        }
        drop(state);
        tracing::warn!(
            mind,
            role = role.map(Role::as_str),
            cause,
            failures,
            failing_for_ms = now_ms - since_ms,
            error = %error,
            "step failed; retrying"
        );
    }

    fn succeeded(&self, mind: &str, step: &Step, now_ms: i64) {
        let mut state = self.lock();
        let live = state.minds.entry(mind.to_owned()).or_default();
        live.activity = match step {
            Step::NotLeader => Activity::NotLeader,
            Step::Braked => Activity::Braked,
            Step::OverBudget => Activity::Capped,
            Step::Idle { until_ms } => Activity::Idle {
                until_ms: *until_ms,
            },
            Step::PersonaTurn { .. } | Step::SelfTurn { .. } | Step::Ping => {
                Activity::Working { since_ms: now_ms }
            }
        };
        let after = live.activity;
        let before = std::mem::replace(&mut live.last_outcome, after.name());
        let recovered = live.failing.take();
        drop(state);
        if let Some(failing) = recovered {
            tracing::info!(
                mind,
                cause = failing.cause,
                failures = failing.failures,
                failed_for_ms = now_ms - failing.since_ms,
                "recovered"
            );
        }
        if after.name() != before {
            match after {
                Activity::Braked => tracing::info!(mind, "braked: no turns until released"),
                Activity::Capped => {
                    tracing::warn!(mind, "spend cap reached: no turns until the window allows")
                }
                Activity::NotLeader => tracing::info!(mind, "another host holds the lease"),
                _ => {}
            }
        }
    }

    /// A Mind's lease changed.
    pub fn lease(&self, mind: &str, change: LeaseChange) {
        let held = matches!(change, LeaseChange::Taken { .. });
        {
            let mut state = self.lock();
            let live = state.minds.entry(mind.to_owned()).or_default();
            live.lease_held = held;
            *live.lease_changes.entry(change.name()).or_default() += 1;
        }
        match change {
            LeaseChange::Taken { token, fork } => {
                tracing::info!(mind, token, fork, "lease taken")
            }
            LeaseChange::Lost => tracing::warn!(mind, "lease lost: another host took the Mind"),
            LeaseChange::Released => tracing::info!(mind, "lease released"),
        }
    }

    /// The operator changed a Mind's settings (`via`: the route).
    pub fn settings_changed(
        &self,
        mind: &str,
        before: &MindSettings,
        after: &MindSettings,
        via: &str,
    ) {
        if before.brake != after.brake {
            tracing::info!(mind, brake = after.brake, via, "brake changed");
        }
        if before.spend_cap != after.spend_cap || before.spend_window_ms != after.spend_window_ms {
            tracing::info!(
                mind,
                spend_cap_micro_usd = after.spend_cap.map(|c| c.0),
                spend_window_ms = after.spend_window_ms,
                via,
                "spend cap changed"
            );
        }
        if before.turn_limit != after.turn_limit {
            tracing::info!(
                mind,
                turn_limit = after.turn_limit,
                via,
                "turn limit changed"
            );
        }
    }

    /// A Mind's runner started; the guard marks it stopped when dropped.
    pub fn runner_started(self: &Arc<Self>, mind: &str) -> RunnerGuard {
        self.lock()
            .minds
            .entry(mind.to_owned())
            .or_default()
            .runner_up = true;
        tracing::info!(mind, "runner started");
        RunnerGuard {
            telemetry: self.clone(),
            mind: mind.to_owned(),
        }
    }

    /// One Mind's live state (the default when nothing was heard of it).
    pub fn mind(&self, mind: &str) -> MindLive {
        self.lock().minds.get(mind).cloned().unwrap_or_default()
    }

    /// Everything, copied out.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.lock();
        let mut snapshot = Snapshot {
            sessions: state.sessions.clone(),
            minds: state.minds.clone(),
            processes: Vec::new(),
            api_refused: self.api_refused.load(Ordering::Relaxed),
            sweeps_failed: self.sweeps_failed(),
        };
        drop(state);
        if let Some(pool) = self.pool.get() {
            for live in pool.live() {
                let (mind, role) = live.key.rsplit_once('/').unwrap_or((&live.key, ""));
                let bytes = (live.rss_mib * 1024.0 * 1024.0).max(0.0) as u64;
                snapshot
                    .processes
                    .push((mind.to_owned(), role.to_owned(), bytes));
            }
        }
        snapshot
    }
}

/// What a ledger row is labelled with, in the logs, the metrics and the dashboard.
#[derive(Debug, Clone)]
pub(crate) struct RowLabels {
    /// `persona` or `self`.
    pub(crate) role: &'static str,
    /// `request`, `ping`, `head_ping`, `flush` or `failed_attempt`.
    pub(crate) kind: &'static str,
    /// The decider's action; `start` for a segment begun without asking; `none` for no decision.
    pub(crate) action: &'static str,
    /// The decider's reason, the forced start's cause, or the ledger's decision text.
    pub(crate) reason: String,
    /// A request that began a turn (a Persona turn or a Self run).
    pub(crate) turn: bool,
}

impl RowLabels {
    /// The labels of `row`.
    pub(crate) fn of(row: &LedgerRow) -> RowLabels {
        let kind = row
            .decided
            .as_ref()
            .map_or_else(|| RowKind::of_decision(&row.decision), |d| d.kind);
        let role = match row.role.as_str() {
            "persona" => "persona",
            "self" => "self",
            _ => "unknown",
        };
        // A failed attempt's record may say it was sent with a clear, or in a segment's first
        // request: the request's decision, labelled on the request's own row.
        let decided = (row.decided.as_ref()).filter(|d| d.kind != RowKind::FailedAttempt);
        let (action, reason) = match (
            decided.and_then(|d| d.action),
            decided.and_then(|d| d.segment).and_then(|s| s.forced),
        ) {
            (Some(action), _) => (
                action.as_str(),
                decided
                    .and_then(|d| d.reason)
                    .map_or_else(|| "none".to_string(), reason_name),
            ),
            (None, Some(forced)) => ("start", forced_name(forced).to_string()),
            // No decision behind the row (a retry inside a turn, a run the flush protocol
            // ended): the ledger's decision text names it, up to its detail.
            (None, None) => (
                "none",
                row.decision
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            ),
        };
        RowLabels {
            role,
            kind: kind_name(kind),
            action,
            reason,
            turn: kind == RowKind::Request && row.boundary,
        }
    }
}

fn log_answered(answered: &Answered<'_>, labels: &RowLabels) {
    let row = answered.row;
    let u = &row.usage;
    let message = match (labels.kind, labels.turn) {
        ("request", true) => "turn",
        ("request", false) => "request",
        ("ping", _) => "ping",
        ("head_ping", _) => "head ping",
        _ => "flush",
    };
    tracing::info!(
        mind = %row.mind,
        role = labels.role,
        kind = labels.kind,
        segment = row.segment,
        turn = row.turn,
        decision = %row.decision,
        action = labels.action,
        reason = %labels.reason,
        cache_state = %row.cache_state,
        miss_cause = row.miss_cause.map(miss_name),
        tokens_uncached = u.input,
        tokens_write_5m = u.cache_write_5m,
        tokens_write_1h = u.cache_write_1h,
        tokens_read = u.cache_read,
        tokens_output = u.output,
        prefix_tokens = row.prefix_tokens,
        cost_usd = row.cost.0 as f64 / 1e6,
        cost_micro_usd = row.cost.0,
        latency_ms = answered.latency.as_millis() as u64,
        retries = answered.retries.len(),
        "{message}"
    );
    for retry in answered.retries {
        tracing::warn!(
            mind = %row.mind,
            role = labels.role,
            attempt = retry.attempt,
            delay_ms = retry.delay_ms,
            status = retry.status,
            error_kind = %retry.kind,
            retry_after_ms = retry.retry_after_ms,
            request_id = retry.request_id.as_deref(),
            "backend retried"
        );
    }
    for event in answered.session_events {
        let kind = session_event_name(event);
        match event {
            SessionEvent::Reseeded {
                reason,
                seed_tokens,
                ..
            } => tracing::warn!(
                mind = %row.mind, role = labels.role, event = kind, reason = %reason, seed_tokens,
                "session event"
            ),
            SessionEvent::CompactFailed { error } => tracing::warn!(
                mind = %row.mind, role = labels.role, event = kind, error = %error, "session event"
            ),
            other => tracing::info!(
                mind = %row.mind, role = labels.role, event = kind, detail = ?other, "session event"
            ),
        }
    }
}

/// A request kind's name, as the ledger's decision record spells it.
pub fn kind_name(kind: RowKind) -> &'static str {
    match kind {
        RowKind::Request => "request",
        RowKind::Ping => "ping",
        RowKind::HeadPing => "head_ping",
        RowKind::Flush => "flush",
        RowKind::FailedAttempt => "failed_attempt",
    }
}

/// A miss cause's name, as the ledger spells it.
pub fn miss_name(cause: MissCause) -> &'static str {
    cause.as_str()
}

/// A decision reason's name, as the ledger's decision record spells it (`growth_break_even`).
pub fn reason_name(reason: Reason) -> String {
    match serde_json::to_value(reason) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{reason:?}"),
    }
}

fn forced_name(forced: ForcedStart) -> &'static str {
    match forced {
        ForcedStart::First => "first",
        ForcedStart::Rebuilt => "rebuilt",
        ForcedStart::Flushed => "flushed",
    }
}

/// A session event's type, as the ledger's `events` spell it.
pub fn session_event_name(event: &SessionEvent) -> &'static str {
    match event {
        SessionEvent::Relaunched { .. } => "relaunched",
        SessionEvent::Parked { .. } => "parked",
        SessionEvent::Unparked { .. } => "unparked",
        SessionEvent::Reseeded { .. } => "reseeded",
        SessionEvent::Forked { .. } => "forked",
        SessionEvent::Compacted { .. } => "compacted",
        SessionEvent::ResumedSegment { .. } => "resumed_segment",
        SessionEvent::CompactFailed { .. } => "compact_failed",
    }
}

fn error_cause(error: &RuntimeError) -> &'static str {
    match error {
        RuntimeError::Store(_) | RuntimeError::Held(_) => "store",
        RuntimeError::Backend(_) => "backend",
        RuntimeError::Config(_) => "config",
        RuntimeError::PromptTooLarge { .. } => "prompt_too_large",
        RuntimeError::Panicked(_) => "panic",
    }
}

/// A backend error's kind, as `muninn_backend_errors_total` labels it.
pub fn backend_error_kind(error: &BackendError) -> &'static str {
    match error {
        BackendError::Api { .. } => "api",
        BackendError::RetriesExhausted { .. } => "retries_exhausted",
        BackendError::BrokenAfterContent(_) => "broken_after_content",
        BackendError::Transport(_) => "transport",
        BackendError::Protocol(_) => "protocol",
        BackendError::Invalid(_) => "invalid",
        BackendError::Unsupported { .. } => "unsupported",
        BackendError::CompactionFailed(_) => "compaction_failed",
    }
}
