//! A shared coordinator for CLI sessions under a process budget and a memory budget.
//!
//! A live CLI child holds about 200–300 MiB (`reference/claude-cli-2.1.332-performance.md`); a
//! session whose child is stopped costs nothing but its transcript on disk, and resuming it
//! (`--resume`) costs about 0.8 s on its next turn. [`SharedPool`] keeps sessions live while
//! that trade is worth it. It does **not** own the sessions: each [`ClaudeCliBackend`](crate::ClaudeCliBackend) stays
//! with whoever runs its turns (in the host, one Mind's runner task) and joins the pool with
//! [`ClaudeCliBackend::join_pool`](crate::ClaudeCliBackend::join_pool). The pool keeps, per key, a *weak* clone of the backend's
//! driver command sender (so it can park the session without owning it, and a dropped backend
//! still ends its driver), the session's phase, its child's pid, its last use and its recent
//! inter-turn gaps.
//!
//! - **Budgets.** Before a turn whose child is not live (parked, exited, never started) — and
//!   before [`Backend::start`](muninn_backend::Backend::start) launches one — the backend asks
//!   the pool for room: while the other live children plus this one would exceed
//!   [`PoolConfig::max_processes`], or their memory plus [`PoolConfig::per_process_mib`] would
//!   exceed [`PoolConfig::memory_budget_mib`], the pool parks the least-recently-used *idle*
//!   live session. A child still stopping from a park counts as room being made, not as live:
//!   when the others fit, the pool waits for that stop instead of parking another session.
//!   Memory is the sum of the children's `VmRSS` from `/proc`, each counted at no less than
//!   [`PoolConfig::per_process_mib`] (a child that just launched has not grown yet; without
//!   that floor a burst of starts all fit while each is still small). A turn on a live
//!   child needs no room; it waits only when others are already waiting for room (it queues
//!   behind them, so a session that talks without pause cannot starve them).
//! - **Idleness.** [`SharedPool::sweep`] (the host calls it periodically) parks each idle
//!   session for which [`decide_park`] says holding costs more than resuming — a pure function
//!   of the idle time, the child's memory and the session's own recent inter-turn gaps, so it is
//!   tested without processes or clocks.
//! - **Park** is the driver's `Command::Park`: stdin closed, the child exits (SIGTERM, then
//!   SIGKILL, after a timeout); the next turn resumes it with `--resume`. Every park and resume
//!   is recorded as a [`PoolEvent`], and the driver also reports [`SessionEvent::Parked`] and
//!   [`SessionEvent::Unparked`] with the parked session's own next turn.
//!
//! ## Concurrency
//!
//! - **The registry lock is a plain mutex held only for bookkeeping**, never across an await:
//!   not across a turn, not across a park. A park is *sent* under the lock (`try_send`, which
//!   does not wait) and *awaited* outside it, by a spawned task that books the result and wakes
//!   waiters — so a caller that gives up waiting never leaves a session stuck half-parked.
//! - **Never parked mid-turn.** Only a session in the idle phase is chosen, and a turn moves
//!   its session out of that phase under the same lock before it sends its line. Because the
//!   park is enqueued on the victim's driver under the lock, a turn the owner starts afterwards
//!   queues behind it in the driver (which takes one command at a time) and simply relaunches.
//! - **One room-maker at a time, first come first served.** Sessions that need room wait in a
//!   FIFO queue; only its head parks victims or takes the freed room. Two sessions making room at
//!   once therefore never park for each other's benefit or steal each other's freed slot, and the
//!   head waits only on drivers finishing a park or a turn — drivers never wait on the pool — so
//!   there is no cycle to deadlock on. When every other live session is in a turn, the head
//!   waits for one to end: under a budget of one process, concurrent turns serialise.
//!
//! Time is read through the pool's clock ([`SharedPool::with_clock`]); the decision itself is
//! given `now`, so tests control it.

mod decide;
#[cfg(test)]
mod tests;

pub use decide::{ParkDecision, ParkPolicy, decide_park};

use crate::{Command, ParkReport, SessionEvent, vm_rss_kb};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};

/// The pool's budgets and policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// The most live children.
    pub max_processes: usize,
    /// The most resident memory all live children may hold, in MiB.
    pub memory_budget_mib: u64,
    /// What one child is assumed to hold when `/proc` does not say (and what room a resume
    /// needs).
    pub per_process_mib: u64,
    /// When idle sessions are parked.
    pub policy: ParkPolicy,
}

impl Default for PoolConfig {
    /// Eight children in 4 GiB, 300 MiB assumed each (the top of the measured range).
    fn default() -> PoolConfig {
        PoolConfig {
            max_processes: 8,
            memory_budget_mib: 4096,
            per_process_mib: 300,
            policy: ParkPolicy::default(),
        }
    }
}

/// Why a session was parked.
#[derive(Debug, Clone, PartialEq)]
pub enum ParkReason {
    /// Another session needed a process slot.
    ProcessBudget,
    /// Another session needed memory.
    MemoryBudget,
    /// Idle longer than its memory was worth.
    Idle(ParkDecision),
}

/// A park or a resume, in the order they happened.
#[derive(Debug, Clone, PartialEq)]
pub enum PoolEvent {
    /// A session's child was stopped.
    Parked {
        /// The pool key.
        key: String,
        /// The session, its pid and memory (from the backend).
        event: SessionEvent,
        /// Why.
        reason: ParkReason,
    },
    /// A parked session's child was started again with `--resume` for a turn.
    Resumed {
        /// The pool key.
        key: String,
        /// The session resumed.
        session_id: String,
    },
}

/// How long a session waiting for room sleeps at most before it looks again. Every change that
/// can free room wakes the waiters; this only bounds the cost of a wake-up that could not be
/// delivered (a park that could not be enqueued because the victim's command queue was full).
const RECHECK: Duration = Duration::from_millis(250);

/// The pool's clock (tests and benches may run it faster than the wall clock).
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// A live child as the pool sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSession {
    /// The pool key.
    pub key: String,
    /// The child's pid (`None` while a turn is launching a new one).
    pub pid: Option<u32>,
    /// Its resident memory in MiB (the configured estimate when `/proc` does not say).
    pub rss_mib: f64,
    /// Whether a turn (or a start) is running in it.
    pub in_turn: bool,
}

/// A coordinator that sessions owned elsewhere join (see the module docs). Cheap to clone: all
/// clones are the same pool.
#[derive(Clone)]
pub struct SharedPool {
    inner: Arc<Inner>,
}

struct Inner {
    config: PoolConfig,
    clock: Clock,
    registry: Mutex<Registry>,
    /// Woken whenever room may have been freed or the queue moved.
    changed: Notify,
}

#[derive(Default)]
struct Registry {
    sessions: BTreeMap<String, Entry>,
    events: Vec<PoolEvent>,
    /// Sessions waiting for room, by ticket number, first come first served.
    queue: VecDeque<u64>,
    next_ticket: u64,
}

/// Where a session is, as far as the budgets care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No child: never started, parked, or exited.
    Down,
    /// A child between turns — the only phase a session is parked from.
    Idle,
    /// A turn or a start holds it: its child counts (or is about to launch) and is never parked.
    Busy,
    /// A park was enqueued and has not finished: its child still runs, and the budgets count
    /// it as room being made (see [`Registry::room_for`]).
    Parking,
}

struct Entry {
    /// The backend's driver; weak, so the pool never keeps a dropped backend's driver alive.
    commands: Option<mpsc::WeakSender<Command>>,
    phase: Phase,
    /// The child's pid, when known.
    pid: Option<u32>,
    /// When it last asked for a turn or finished one (least-recently-used order).
    last_used: Instant,
    /// When its last turn ended.
    last_turn_end: Option<Instant>,
    /// Its recent gaps between the end of a turn and the start of the next.
    gaps: VecDeque<Duration>,
}

impl Entry {
    fn new(now: Instant) -> Entry {
        Entry {
            commands: None,
            phase: Phase::Down,
            pid: None,
            last_used: now,
            last_turn_end: None,
            gaps: VecDeque::new(),
        }
    }

    /// Whether its child still runs: `/proc` answers for a known pid (a zombie has no
    /// `VmRSS`); an unknown pid is assumed live while the driver is, and a park finds out.
    fn child_alive(&self) -> bool {
        match self.pid {
            Some(pid) => vm_rss_kb(pid).is_some(),
            None => self
                .commands
                .as_ref()
                .is_some_and(|c| c.upgrade().is_some()),
        }
    }

    /// The child's resident memory in MiB if it still runs (as [`Entry::child_alive`] tells),
    /// from the same one read of `/proc`; the configured estimate when `/proc` cannot say.
    fn resident_mib(&self, config: &PoolConfig) -> Option<f64> {
        match self.pid {
            Some(pid) => vm_rss_kb(pid).map(|kb| kb as f64 / 1024.0),
            None => self.child_alive().then_some(config.per_process_mib as f64),
        }
    }

    /// The child's resident memory in MiB, or the configured estimate when `/proc` does not say.
    fn rss_mib(&self, config: &PoolConfig) -> f64 {
        self.resident_mib(config)
            .unwrap_or(config.per_process_mib as f64)
    }

    /// No child any more: never started, parked, or exited.
    fn set_down(&mut self) {
        self.phase = Phase::Down;
        self.pid = None;
    }
}

/// What the head of the queue may do now.
enum Room {
    Fits,
    Park(String, ParkReason),
    Wait,
}

/// Live children and their memory, as the budgets count them.
#[derive(Default)]
struct Budgeted {
    count: usize,
    memory_mib: f64,
}

impl Budgeted {
    fn add(&mut self, rss_mib: f64, config: &PoolConfig) {
        self.count += 1;
        // A child that just launched has not grown yet (it reaches ~200 MiB after its first
        // turns), so it is counted at no less than the estimate a new child is given.
        self.memory_mib += rss_mib.max(config.per_process_mib as f64);
    }

    /// Which budget one more child would exceed, if any.
    fn over_with_one_more(&self, config: &PoolConfig) -> Option<ParkReason> {
        if self.count + 1 > config.max_processes.max(1) {
            Some(ParkReason::ProcessBudget)
        } else if self.count > 0
            && self.memory_mib + config.per_process_mib as f64 > config.memory_budget_mib as f64
        {
            // With nothing else live the session runs even if the estimate alone is over the
            // budget: waiting would never make room.
            Some(ParkReason::MemoryBudget)
        } else {
            None
        }
    }
}

/// A park enqueued on a driver, to be awaited outside the lock.
struct PendingPark {
    key: String,
    reason: ParkReason,
    reply: oneshot::Receiver<Option<ParkReport>>,
}

impl Registry {
    /// Whether one more child fits beside the live ones other than `key`'s, and if not, which
    /// idle session to park — or whether to wait for the parks already under way.
    ///
    /// A child being parked still runs (stopping one can take seconds), but it is room already
    /// being made, not a reason to make more: the budgets are checked against the other
    /// children, and when those fit, the head waits for the parks to end. (Counting it as live
    /// parked one more idle session at every look — one each [`RECHECK`] — while a stop was
    /// slow, and its user paid a resume for nothing.)
    fn room_for(&mut self, key: &str, config: &PoolConfig) -> Room {
        let mut staying = Budgeted::default();
        let mut parking = Budgeted::default();
        let mut lru: Option<(Instant, &String)> = None;
        for (k, e) in self.sessions.iter_mut() {
            if k == key {
                continue;
            }
            let rss = match e.phase {
                Phase::Down => continue,
                Phase::Idle => match e.resident_mib(config) {
                    Some(rss) => rss,
                    None => {
                        // Exited by itself (or was never launched): it holds nothing.
                        e.set_down();
                        continue;
                    }
                },
                Phase::Busy | Phase::Parking => e.rss_mib(config),
            };
            let held = if e.phase == Phase::Parking {
                &mut parking
            } else {
                &mut staying
            };
            held.add(rss, config);
            if e.phase == Phase::Idle && lru.is_none_or(|(t, _)| e.last_used < t) {
                lru = Some((e.last_used, k));
            }
        }
        if let Some(reason) = staying.over_with_one_more(config) {
            return match lru {
                Some((_, victim)) => Room::Park(victim.clone(), reason),
                // Every other child that stays is in a turn: wait for one to end.
                None => Room::Wait,
            };
        }
        let all = Budgeted {
            count: staying.count + parking.count,
            memory_mib: staying.memory_mib + parking.memory_mib,
        };
        match all.over_with_one_more(config) {
            None => Room::Fits,
            // The parks under way make the room: wait for them to end.
            Some(_) => Room::Wait,
        }
    }

    /// Enqueues a park on `key`'s driver without waiting. `None` when there is nothing to park
    /// (the backend or its driver is gone, or its queue is full — then a later look retries).
    fn begin_park(&mut self, key: &str, reason: ParkReason) -> Option<PendingPark> {
        let entry = self.sessions.get_mut(key)?;
        let Some(tx) = entry.commands.as_ref().and_then(mpsc::WeakSender::upgrade) else {
            entry.set_down();
            return None;
        };
        let (reply, rx) = oneshot::channel();
        match tx.try_send(Command::Park { reply }) {
            Ok(()) => {
                entry.phase = Phase::Parking;
                Some(PendingPark {
                    key: key.to_string(),
                    reason,
                    reply: rx,
                })
            }
            Err(mpsc::error::TrySendError::Full(_)) => None,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                entry.set_down();
                None
            }
        }
    }
}

impl std::fmt::Debug for SharedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reg = self.lock();
        f.debug_struct("SharedPool")
            .field("config", &self.inner.config)
            .field("sessions", &reg.sessions.len())
            .field("waiting", &reg.queue.len())
            .finish_non_exhaustive()
    }
}

impl SharedPool {
    /// An empty pool on the wall clock.
    pub fn new(config: PoolConfig) -> SharedPool {
        SharedPool::with_clock(config, Arc::new(Instant::now))
    }

    /// An empty pool reading time from `clock` (a bench runs idle time faster than real time;
    /// the clock must not go backwards).
    pub fn with_clock(config: PoolConfig, clock: Clock) -> SharedPool {
        SharedPool {
            inner: Arc::new(Inner {
                config,
                clock,
                registry: Mutex::new(Registry::default()),
                changed: Notify::new(),
            }),
        }
    }

    /// The budgets and policy.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// The pool's clock now (what to pass to [`SharedPool::sweep`]).
    pub fn now(&self) -> Instant {
        (self.inner.clock)()
    }

    /// Parks every idle live session that [`decide_park`] says is not worth holding at `now`;
    /// returns the parks it made, once their children have exited. Sessions in a turn are never
    /// considered.
    pub async fn sweep(&self, now: Instant) -> Vec<PoolEvent> {
        let config = &self.inner.config;
        let pending: Vec<PendingPark> = {
            let mut reg = self.lock();
            let decisions: Vec<(String, ParkDecision)> = reg
                .sessions
                .iter_mut()
                .filter_map(|(key, e)| {
                    if e.phase != Phase::Idle {
                        return None;
                    }
                    let Some(rss) = e.resident_mib(config) else {
                        e.set_down();
                        return None;
                    };
                    let idle =
                        now.saturating_duration_since(e.last_turn_end.unwrap_or(e.last_used));
                    let decision = decide_park(&config.policy, idle, rss, e.gaps.make_contiguous());
                    decision.park.then(|| (key.clone(), decision))
                })
                .collect();
            decisions
                .into_iter()
                .filter_map(|(key, d)| reg.begin_park(&key, ParkReason::Idle(d)))
                .collect()
        };
        // The parks run on their drivers in parallel; each books itself when done.
        let tasks: Vec<_> = pending
            .into_iter()
            .map(|p| tokio::spawn(self.clone().finish_park(p)))
            .collect();
        let mut events = Vec::new();
        for task in tasks {
            if let Ok(Some(event)) = task.await {
                events.push(event);
            }
        }
        events
    }

    /// Every park and resume since the pool was made (or since [`SharedPool::take_events`]).
    pub fn events(&self) -> Vec<PoolEvent> {
        self.lock().events.clone()
    }

    /// Drains the parks and resumes recorded so far.
    pub fn take_events(&self) -> Vec<PoolEvent> {
        std::mem::take(&mut self.lock().events)
    }

    /// The sessions whose child is live (or being launched for a turn), by key.
    pub fn live(&self) -> Vec<LiveSession> {
        let config = &self.inner.config;
        let mut reg = self.lock();
        let mut out = Vec::new();
        for (key, e) in reg.sessions.iter_mut() {
            let rss_mib = match e.phase {
                Phase::Down => continue,
                Phase::Idle => match e.resident_mib(config) {
                    Some(rss) => rss,
                    None => continue,
                },
                Phase::Busy | Phase::Parking => e.rss_mib(config),
            };
            out.push(LiveSession {
                key: key.clone(),
                pid: e.pid,
                rss_mib,
                in_turn: e.phase == Phase::Busy,
            });
        }
        out
    }

    /// Registers `key`'s driver (`None` before the backend is started). Joining again under
    /// the same key replaces the earlier backend's registration.
    pub(crate) fn register(&self, key: &str, commands: Option<mpsc::WeakSender<Command>>) {
        let now = self.now();
        let mut reg = self.lock();
        let entry = reg
            .sessions
            .entry(key.to_string())
            .or_insert_with(|| Entry::new(now));
        // A started backend launched its child at start; its pid is learnt at the next turn.
        entry.phase = if commands.is_some() {
            Phase::Idle
        } else {
            Phase::Down
        };
        entry.pid = None;
        entry.commands = commands;
        drop(reg);
        self.inner.changed.notify_waiters();
    }

    /// `key`'s child was shut down by its owner.
    pub(crate) fn mark_down(&self, key: &str) {
        let mut reg = self.lock();
        if let Some(e) = reg.sessions.get_mut(key)
            && e.phase != Phase::Parking
        {
            e.set_down();
            e.commands = None;
        }
        drop(reg);
        self.inner.changed.notify_waiters();
    }

    /// Takes `key`'s session into a turn (or a start): at once if its child is live and nobody
    /// waits for room, otherwise after waiting in line for room, parking least-recently-used idle sessions to make it.
    /// The [`Ticket`] keeps the session from being parked until it is closed or dropped.
    pub(crate) async fn acquire(&self, key: &str) -> Ticket {
        let ticket_no = {
            let now = self.now();
            let window = self.inner.config.policy.gap_window.max(1);
            let mut reg = self.lock();
            let nobody_waits = reg.queue.is_empty();
            let entry = reg
                .sessions
                .entry(key.to_string())
                .or_insert_with(|| Entry::new(now));
            if let Some(end) = entry.last_turn_end.take() {
                if entry.gaps.len() >= window {
                    entry.gaps.pop_front();
                }
                entry.gaps.push_back(now.saturating_duration_since(end));
            }
            entry.last_used = now;
            // A live session goes straight to its turn — unless others wait for room: then it
            // queues behind them, so a session that talks without pause cannot starve them.
            if entry.phase == Phase::Idle && entry.child_alive() && nobody_waits {
                entry.phase = Phase::Busy;
                return Ticket::new(self, key);
            }
            let n = reg.next_ticket;
            reg.next_ticket += 1;
            reg.queue.push_back(n);
            n
        };
        let mut in_line = InLine {
            pool: self,
            ticket_no,
        };
        loop {
            // Registered before looking, so a change made after the look still wakes us.
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let pending = {
                let mut reg = self.lock();
                if reg.queue.front() == Some(&ticket_no) {
                    // Still live (it queued only for fairness): it needs no new room.
                    let live = reg
                        .sessions
                        .get(key)
                        .is_some_and(|e| e.phase == Phase::Idle && e.child_alive());
                    let room = if live {
                        Room::Fits
                    } else {
                        reg.room_for(key, &self.inner.config)
                    };
                    match room {
                        Room::Fits => {
                            reg.queue.pop_front();
                            if let Some(e) = reg.sessions.get_mut(key) {
                                e.phase = Phase::Busy;
                                if !live {
                                    // A new child will launch; its pid comes with the turn's end.
                                    e.pid = None;
                                }
                            }
                            drop(reg);
                            in_line.ticket_no = u64::MAX;
                            // The next in line may look now.
                            self.inner.changed.notify_waiters();
                            return Ticket::new(self, key);
                        }
                        Room::Park(victim, reason) => reg.begin_park(&victim, reason),
                        Room::Wait => None,
                    }
                } else {
                    None
                }
            };
            if let Some(p) = pending {
                // Awaited by its own task: a caller that stops waiting never strands a park.
                tokio::spawn(self.clone().finish_park(p));
            }
            let _ = tokio::time::timeout(RECHECK, notified).await;
        }
    }

    /// Waits for a park to finish, books it and wakes the waiters.
    async fn finish_park(self, p: PendingPark) -> Option<PoolEvent> {
        let report = p.reply.await.ok().flatten();
        let event = {
            let mut reg = self.lock();
            if let Some(e) = reg.sessions.get_mut(&p.key)
                && e.phase == Phase::Parking
            {
                // (A turn the owner started meanwhile is Busy and relaunches after the park.)
                e.set_down();
            }
            let event = report.map(|r| PoolEvent::Parked {
                key: p.key.clone(),
                event: r.event,
                reason: p.reason,
            });
            if let Some(e) = &event {
                tracing::info!(key = %p.key, event = ?e, "claude-cli pool: parked");
                reg.events.push(e.clone());
            }
            event
        };
        self.inner.changed.notify_waiters();
        event
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // The registry stays consistent between statements, so a panic elsewhere while it was
        // held leaves nothing half-done worth refusing to go on with.
        self.inner
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A place in the room queue; leaving it (also by dropping a waiting call) lets the next look.
struct InLine<'a> {
    pool: &'a SharedPool,
    /// `u64::MAX` once served.
    ticket_no: u64,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        if self.ticket_no == u64::MAX {
            return;
        }
        let mut reg = self.pool.lock();
        reg.queue.retain(|n| *n != self.ticket_no);
        drop(reg);
        self.pool.inner.changed.notify_waiters();
    }
}

/// A session held out of parking for a turn or a start. Close it with [`Ticket::started`] or
/// [`Ticket::turn_ended`]; dropped unclosed (the caller gave up on the turn, which the driver
/// still finishes), the session becomes idle with its child unknown.
pub(crate) struct Ticket {
    pool: SharedPool,
    key: String,
    closed: bool,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("key", &self.key).finish()
    }
}

impl Ticket {
    fn new(pool: &SharedPool, key: &str) -> Ticket {
        Ticket {
            pool: pool.clone(),
            key: key.to_string(),
            closed: false,
        }
    }

    /// The backend started: its driver and the child it launched (`None`: none is running).
    pub(crate) fn started(mut self, commands: mpsc::WeakSender<Command>, pid: Option<u32>) {
        self.close(Some(commands), pid, None);
    }

    /// The turn ended; `pid` is the child live after it, `events` the turn's session events
    /// (an [`SessionEvent::Unparked`] among them is recorded as a resume).
    pub(crate) fn turn_ended(mut self, pid: Option<u32>, events: &[SessionEvent]) {
        self.close(None, pid, Some(events));
    }

    fn close(
        &mut self,
        commands: Option<mpsc::WeakSender<Command>>,
        pid: Option<u32>,
        turn_events: Option<&[SessionEvent]>,
    ) {
        self.closed = true;
        let now = self.pool.now();
        let mut reg = self.pool.lock();
        let Registry {
            sessions, events, ..
        } = &mut *reg;
        if let Some(e) = sessions.get_mut(&self.key) {
            if commands.is_some() {
                e.commands = commands;
            }
            e.phase = if pid.is_some() {
                Phase::Idle
            } else {
                Phase::Down
            };
            e.pid = pid;
            e.last_used = now;
            if let Some(turn_events) = turn_events {
                e.last_turn_end = Some(now);
                for ev in turn_events {
                    if let SessionEvent::Unparked { session_id } = ev {
                        tracing::info!(key = %self.key, "claude-cli pool: resumed");
                        events.push(PoolEvent::Resumed {
                            key: self.key.clone(),
                            session_id: session_id.clone(),
                        });
                    }
                }
            }
        }
        drop(reg);
        self.pool.inner.changed.notify_waiters();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let mut reg = self.pool.lock();
        if let Some(e) = reg.sessions.get_mut(&self.key)
            && e.phase == Phase::Busy
        {
            e.phase = Phase::Idle;
            e.pid = None;
        }
        drop(reg);
        self.pool.inner.changed.notify_waiters();
    }
}
