//! A pool of CLI sessions under a process budget and a memory budget.
//!
//! A live CLI child holds about 200–300 MiB (`reference/claude-cli-2.1.332-performance.md`); a
//! session whose child is stopped costs nothing but its transcript on disk, and resuming it
//! (`--resume`) costs about 0.8 s on its next turn. [`ProcessPool`] keeps sessions live while
//! that trade is worth it:
//!
//! - **Budgets.** Before a parked session's turn (and when a session is inserted) the pool
//!   makes room: while the live count would exceed [`PoolConfig::max_processes`], or the live
//!   children's memory plus one more would exceed [`PoolConfig::memory_budget_mib`], it parks
//!   the least-recently-used live session. Memory is the sum of the children's `VmRSS` from
//!   `/proc`, or [`PoolConfig::per_process_mib`] for a child `/proc` does not answer for.
//! - **Idleness.** [`ProcessPool::sweep`] parks each idle session for which
//!   [`decide_park`] says holding costs more than resuming — a pure function of the idle time,
//!   the child's memory and the session's own recent inter-turn gaps, so it is tested without
//!   processes or clocks.
//! - **Park** is [`ClaudeCliBackend::park`]: stdin closed, the child exits (SIGTERM, then
//!   SIGKILL, after a timeout). The next turn resumes it. Every park and resume is recorded as a
//!   [`PoolEvent`].
//!
//! Time is passed in (`now`), never read inside the decision, so tests control it.

use crate::{ClaudeCliBackend, SessionEvent, vm_rss_kb};
use muninn_backend::{Backend, BackendError, TurnInput, TurnOutcome};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// What parking is worth: prices in one arbitrary cost unit, so only their ratio matters.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkPolicy {
    /// The cost of holding one MiB resident for one second.
    pub mib_second_price: f64,
    /// The cost of one second of added turn latency.
    pub latency_second_price: f64,
    /// What a resume adds to the next turn (measured: about 0.8 s).
    pub resume_latency: Duration,
    /// The window a decision looks ahead: "a turn soon" is a turn within it; the pool decides
    /// again after it.
    pub horizon: Duration,
    /// Never park a session idle for less than this (a reply is often followed at once).
    pub min_idle: Duration,
    /// How many recent inter-turn gaps a session keeps for its estimate.
    pub gap_window: usize,
}

impl Default for ParkPolicy {
    /// Prices that break even at about a minute for a 250 MiB child: holding 250 MiB for 64 s
    /// at 5e-5 per MiB-second equals the 0.8 s resume at 1 per second.
    fn default() -> ParkPolicy {
        ParkPolicy {
            mib_second_price: 5e-5,
            latency_second_price: 1.0,
            resume_latency: Duration::from_millis(800),
            horizon: Duration::from_secs(300),
            min_idle: Duration::from_secs(10),
            gap_window: 16,
        }
    }
}

/// The reasoning behind one park-or-keep decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkDecision {
    /// Whether to park now.
    pub park: bool,
    /// The chance of a turn within the horizon, given the idle time so far.
    pub p_turn_soon: f64,
    /// The expected seconds the memory would be held within the horizon if kept.
    pub expected_hold_s: f64,
    /// Keeping: MiB × expected hold × the MiB-second price.
    pub hold_cost: f64,
    /// Parking: resume latency × its price × the chance of a turn soon.
    pub resume_cost: f64,
}

/// Decides whether a session idle for `idle`, whose child holds `rss_mib`, should be parked.
///
/// Over the next [`ParkPolicy::horizon`]: keeping costs the memory for as long as it stays idle
/// within the horizon, `rss × E[min(gap − idle, horizon) | gap longer than idle] × price`;
/// parking costs the resume latency if a turn comes within it, `resume × price ×
/// P(gap − idle ≤ horizon | gap longer than idle)`. Both are estimated from the session's own
/// recent `gaps` that are longer than the idle time so far: a session idle longer than every
/// recent gap is taken to have gone quiet. With no gaps yet (fewer than two turns) the estimate
/// is a coin flip over a full horizon — at the default prices that parks a 250 MiB child once
/// [`ParkPolicy::min_idle`] has passed, since a full horizon of its memory outweighs half a
/// resume.
pub fn decide_park(
    policy: &ParkPolicy,
    idle: Duration,
    rss_mib: f64,
    gaps: &[Duration],
) -> ParkDecision {
    let horizon = policy.horizon.as_secs_f64();
    let idle_s = idle.as_secs_f64();
    let longer: Vec<f64> = gaps
        .iter()
        .map(Duration::as_secs_f64)
        .filter(|g| *g > idle_s)
        .collect();
    let (p_turn_soon, expected_hold_s) = if gaps.is_empty() {
        (0.5, horizon)
    } else if longer.is_empty() {
        (0.0, horizon)
    } else {
        let n = longer.len() as f64;
        let soon = longer.iter().filter(|g| *g - idle_s <= horizon).count() as f64;
        let hold = longer
            .iter()
            .map(|g| (g - idle_s).min(horizon))
            .sum::<f64>()
            / n;
        (soon / n, hold)
    };
    let hold_cost = rss_mib * expected_hold_s * policy.mib_second_price;
    let resume_cost =
        policy.resume_latency.as_secs_f64() * policy.latency_second_price * p_turn_soon;
    ParkDecision {
        park: idle >= policy.min_idle && hold_cost > resume_cost,
        p_turn_soon,
        expected_hold_s,
        hold_cost,
        resume_cost,
    }
}

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

/// Errors of [`ProcessPool`].
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No session under that key (a caller bug; not retryable).
    #[error("no session {0:?} in the pool")]
    UnknownSession(String),
    /// The backend failed the turn (retry as its error says).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// One pooled session.
#[derive(Debug)]
struct Pooled {
    backend: ClaudeCliBackend,
    /// When it last took a turn or was inserted (for least-recently-used).
    last_used: Instant,
    /// When its last turn ended.
    last_turn_end: Option<Instant>,
    /// Its recent gaps between the end of a turn and the start of the next.
    gaps: VecDeque<Duration>,
}

/// Started sessions under a process and a memory budget (see the module docs).
#[derive(Debug)]
pub struct ProcessPool {
    config: PoolConfig,
    sessions: BTreeMap<String, Pooled>,
    events: Vec<PoolEvent>,
}

impl ProcessPool {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> ProcessPool {
        ProcessPool {
            config,
            sessions: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    /// Adds a started session (whose child is live) under `key`, parking least-recently-used
    /// others if it does not fit.
    pub async fn insert(
        &mut self,
        key: impl Into<String>,
        backend: ClaudeCliBackend,
        now: Instant,
    ) {
        let key = key.into();
        // The new child is live but not yet in the map, so it counts as the one extra.
        self.make_room(&key, 1).await;
        self.sessions.insert(
            key,
            Pooled {
                backend,
                last_used: now,
                last_turn_end: None,
                gaps: VecDeque::new(),
            },
        );
    }

    /// Runs a turn in `key`'s session, making room first if its child is parked.
    pub async fn turn(
        &mut self,
        key: &str,
        input: TurnInput,
        now: Instant,
    ) -> Result<TurnOutcome, PoolError> {
        let live = match self.sessions.get(key) {
            Some(p) => p.backend.child_pid().await.is_some(),
            None => return Err(PoolError::UnknownSession(key.to_string())),
        };
        if !live {
            self.make_room(key, 1).await;
        }
        let window = self.config.policy.gap_window.max(1);
        let pooled = self
            .sessions
            .get_mut(key)
            .ok_or_else(|| PoolError::UnknownSession(key.to_string()))?;
        if let Some(end) = pooled.last_turn_end {
            if pooled.gaps.len() == window {
                pooled.gaps.pop_front();
            }
            pooled.gaps.push_back(now.saturating_duration_since(end));
        }
        pooled.last_used = now;
        // The turn's own duration is measured, then added to the caller's `now`, so gaps stay
        // on the caller's clock.
        let started = Instant::now();
        let result = pooled.backend.turn(input).await;
        pooled.last_turn_end = Some(now + started.elapsed());
        let resumed = pooled.backend.last_report().into_iter().flat_map(|r| {
            r.session_events.iter().filter_map(|e| match e {
                SessionEvent::Unparked { session_id } => Some(PoolEvent::Resumed {
                    key: key.to_string(),
                    session_id: session_id.clone(),
                }),
                _ => None,
            })
        });
        self.events.extend(resumed);
        Ok(result?)
    }

    /// Parks every live session that [`decide_park`] says is idle longer than it is worth.
    pub async fn sweep(&mut self, now: Instant) {
        let mut to_park = Vec::new();
        for (key, p) in &self.sessions {
            let Some(pid) = p.backend.child_pid().await else {
                continue;
            };
            let idle = now.saturating_duration_since(p.last_turn_end.unwrap_or(p.last_used));
            let gaps: Vec<Duration> = p.gaps.iter().copied().collect();
            let decision = decide_park(&self.config.policy, idle, self.rss_mib(pid), &gaps);
            if decision.park {
                to_park.push((key.clone(), decision));
            }
        }
        for (key, decision) in to_park {
            self.park(&key, ParkReason::Idle(decision)).await;
        }
    }

    /// The backend under `key`.
    pub fn backend(&self, key: &str) -> Option<&ClaudeCliBackend> {
        self.sessions.get(key).map(|p| &p.backend)
    }

    /// Every park and resume so far.
    pub fn events(&self) -> &[PoolEvent] {
        &self.events
    }

    /// The live children and their resident memory in MiB.
    pub async fn live(&self) -> Vec<(String, u32, f64)> {
        let mut out = Vec::new();
        for (key, p) in &self.sessions {
            if let Some(pid) = p.backend.child_pid().await {
                out.push((key.clone(), pid, self.rss_mib(pid)));
            }
        }
        out
    }

    /// Shuts every session down.
    pub async fn shutdown(&mut self) {
        for p in self.sessions.values_mut() {
            p.backend.shutdown().await;
        }
    }

    /// Parks least-recently-used live sessions other than `key` until `extra` more children
    /// fit both budgets.
    async fn make_room(&mut self, key: &str, extra: usize) {
        loop {
            let live: Vec<_> = self
                .live()
                .await
                .into_iter()
                .filter(|(k, _, _)| k != key)
                .collect();
            let memory: f64 = live.iter().map(|(_, _, mib)| mib).sum();
            let needed = memory + (extra as f64) * self.config.per_process_mib as f64;
            let reason = if live.len() + extra > self.config.max_processes {
                ParkReason::ProcessBudget
            } else if needed > self.config.memory_budget_mib as f64 {
                ParkReason::MemoryBudget
            } else {
                return;
            };
            let lru = live
                .iter()
                .filter_map(|(k, _, _)| self.sessions.get(k).map(|p| (p.last_used, k.clone())))
                .min();
            let Some((_, victim)) = lru else { return };
            if !self.park(&victim, reason).await {
                // It died by itself meanwhile; the next round recounts.
                continue;
            }
        }
    }

    /// Parks `key`; whether a live child was stopped.
    async fn park(&mut self, key: &str, reason: ParkReason) -> bool {
        let Some(p) = self.sessions.get_mut(key) else {
            return false;
        };
        match p.backend.park().await {
            Some(report) => {
                tracing::info!(key, ?reason, "claude-cli pool: parked");
                self.events.push(PoolEvent::Parked {
                    key: key.to_string(),
                    event: report.event,
                    reason,
                });
                true
            }
            None => false,
        }
    }

    /// A child's resident memory in MiB, or the configured estimate.
    fn rss_mib(&self, pid: u32) -> f64 {
        vm_rss_kb(pid).map_or(self.config.per_process_mib as f64, |kb| kb as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn a_busy_session_is_kept_and_a_quiet_one_parked() {
        let policy = ParkPolicy::default();
        // Turns every ~20 s: 12 s after the last one a turn is due within seconds, so keep;
        // idle 30 s is longer than every recent gap, so the session went quiet: park.
        let chatty = [s(15), s(20), s(25), s(20)];
        let d = decide_park(&policy, s(12), 250.0, &chatty);
        assert!(!d.park, "{d:?}");
        assert_eq!(d.p_turn_soon, 1.0);
        let d = decide_park(&policy, s(30), 250.0, &chatty);
        assert!(d.park && d.p_turn_soon == 0.0, "{d:?}");
        // Never before the minimum idle time, however cheap parking looks.
        assert!(!decide_park(&policy, s(5), 250.0, &[s(3600)]).park);
    }

    #[test]
    fn the_break_even_moves_with_the_prices_and_the_memory() {
        let policy = ParkPolicy::default();
        // A turn within 20 s is certain: holding 250 MiB for 20 s (0.25) is cheaper than the
        // 0.8 s resume; holding 2 GiB for it (2.05) is not.
        let gaps = [s(30), s(30)];
        let d = decide_park(&policy, s(10), 250.0, &gaps);
        assert!(!d.park, "{d:?}");
        assert!((d.hold_cost - 0.25).abs() < 1e-9 && (d.resume_cost - 0.8).abs() < 1e-9);
        assert!(decide_park(&policy, s(10), 2048.0, &gaps).park);
        // Latency that costs ten times as much keeps even the large child.
        let dear = ParkPolicy {
            latency_second_price: 10.0,
            ..policy.clone()
        };
        assert!(!decide_park(&dear, s(10), 2048.0, &gaps).park);
    }

    #[test]
    fn the_chance_of_a_turn_soon_comes_from_the_longer_gaps() {
        let policy = ParkPolicy {
            horizon: s(60),
            ..ParkPolicy::default()
        };
        // Idle 20 s; of the gaps longer than that, one is within the horizon and one far past.
        let d = decide_park(&policy, s(20), 250.0, &[s(5), s(50), s(3600)]);
        assert_eq!(d.p_turn_soon, 0.5);
        assert!((d.expected_hold_s - (30.0 + 60.0) / 2.0).abs() < 1e-9);
        // No history: a coin flip over the whole horizon.
        let d = decide_park(&policy, s(20), 250.0, &[]);
        assert_eq!((d.p_turn_soon, d.expected_hold_s), (0.5, 60.0));
        assert!(
            d.park,
            "250 MiB for a minute outweighs half a resume: {d:?}"
        );
    }
}
