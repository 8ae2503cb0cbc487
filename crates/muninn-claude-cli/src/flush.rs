//! The flush protocol of a long run (seed A2), as one pure decision over time.
//!
//! A Self run is one CLI turn that may be a long tool loop. Once a request's prompt reaches
//! [`FlushProtocol::trigger_tokens`], the driver writes [`FlushProtocol::message`] as a user
//! line into the running loop (the CLI absorbs a line queued during a tool loop into the next
//! request — that deliberate injection *is* the protocol), then waits
//! [`FlushProtocol::grace`] for the run to end; then it sends the stream-json `interrupt`; if the
//! run still has not ended [`FlushProtocol::escalate_after`] later, SIGTERM; and SIGKILL after
//! [`FlushProtocol::exit_drain`].
//!
//! Every timing decision is [`decide`], a function of what has happened so far ([`FlushState`])
//! and the time now; the driver only observes (the trigger reached, the run ended) and executes
//! the [`FlushAction`]s. Times are offsets from the start of the run, so the function needs no
//! clock and its tests no processes.

use muninn_backend::{FlushProtocol, FlushStage};
use std::time::Duration;

/// What has happened in one run so far, as offsets from the run's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushState {
    /// When a main-thread request's prompt first reached the trigger.
    pub reached_at: Option<Duration>,
    /// When the flush message was written into the run.
    pub asked_at: Option<Duration>,
    /// When the `interrupt` control request was written.
    pub interrupted_at: Option<Duration>,
    /// When SIGTERM was sent.
    pub terminated_at: Option<Duration>,
    /// When SIGKILL was sent.
    pub killed_at: Option<Duration>,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushAction {
    /// Keep reading; decide again when an event arrives or at `until` (`None`: only on an
    /// event).
    Wait {
        /// The next deadline, as an offset from the run's start.
        until: Option<Duration>,
    },
    /// Write the flush message into the run.
    AskFlush,
    /// Write the `interrupt` control request.
    Interrupt,
    /// SIGTERM the child.
    Terminate,
    /// SIGKILL the child.
    Kill,
}

/// The next action at `now` (an offset from the run's start). Each stage follows the one before
/// it once its wait has run out; an action is returned once, because executing it records its
/// time in the state.
pub fn decide(state: &FlushState, protocol: &FlushProtocol, now: Duration) -> FlushAction {
    let step = |since: Duration, wait: Duration, action: FlushAction| {
        let due = since.saturating_add(wait);
        if now >= due {
            action
        } else {
            FlushAction::Wait { until: Some(due) }
        }
    };
    match *state {
        FlushState {
            reached_at: None, ..
        } => FlushAction::Wait { until: None },
        FlushState { asked_at: None, .. } => FlushAction::AskFlush,
        FlushState {
            asked_at: Some(asked),
            interrupted_at: None,
            ..
        } => step(asked, protocol.grace, FlushAction::Interrupt),
        FlushState {
            interrupted_at: Some(interrupted),
            terminated_at: None,
            ..
        } => step(interrupted, protocol.escalate_after, FlushAction::Terminate),
        FlushState {
            terminated_at: Some(terminated),
            killed_at: None,
            ..
        } => step(terminated, protocol.exit_drain, FlushAction::Kill),
        // Killed: only the end of stdout is left to wait for.
        FlushState {
            killed_at: Some(_), ..
        } => FlushAction::Wait { until: None },
    }
}

/// How far the protocol went, for the run's report.
pub fn stage(state: &FlushState) -> FlushStage {
    if state.terminated_at.is_some() {
        FlushStage::Terminated
    } else if state.interrupted_at.is_some() {
        FlushStage::Interrupted
    } else if state.asked_at.is_some() {
        FlushStage::Flushed
    } else {
        FlushStage::NotNeeded
    }
}

/// A request's prompt as the trigger measures it: input + cache read + cache write of the
/// `message_start` usage an `assistant` stdout event carries.
pub fn prompt_tokens(usage: &serde_json::Value) -> u64 {
    let n = |k: &str| {
        usage
            .get(k)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    n("input_tokens") + n("cache_read_input_tokens") + n("cache_creation_input_tokens")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn protocol() -> FlushProtocol {
        FlushProtocol {
            ceiling_tokens: 1_000,
            headroom_tokens: 200,
            message: "flush".into(),
            grace: Duration::from_secs(10),
            escalate_after: Duration::from_secs(5),
            exit_drain: Duration::from_secs(2),
        }
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn every_stage_follows_its_wait() {
        let p = protocol();
        let mut state = FlushState::default();
        // Below the trigger: nothing to wait for but events.
        assert_eq!(
            decide(&state, &p, s(100)),
            FlushAction::Wait { until: None }
        );
        assert_eq!(stage(&state), FlushStage::NotNeeded);
        // Reached: ask at once.
        state.reached_at = Some(s(3));
        assert_eq!(decide(&state, &p, s(3)), FlushAction::AskFlush);
        state.asked_at = Some(s(3));
        assert_eq!(stage(&state), FlushStage::Flushed);
        // Grace: 10 s.
        assert_eq!(
            decide(&state, &p, s(12)),
            FlushAction::Wait { until: Some(s(13)) }
        );
        assert_eq!(decide(&state, &p, s(13)), FlushAction::Interrupt);
        state.interrupted_at = Some(s(13));
        assert_eq!(stage(&state), FlushStage::Interrupted);
        // Escalation: 5 s after the interrupt.
        assert_eq!(
            decide(&state, &p, s(14)),
            FlushAction::Wait { until: Some(s(18)) }
        );
        assert_eq!(decide(&state, &p, s(19)), FlushAction::Terminate);
        state.terminated_at = Some(s(19));
        assert_eq!(stage(&state), FlushStage::Terminated);
        // Drain: 2 s after SIGTERM, then SIGKILL, then only the end of stdout.
        assert_eq!(
            decide(&state, &p, s(20)),
            FlushAction::Wait { until: Some(s(21)) }
        );
        assert_eq!(decide(&state, &p, s(21)), FlushAction::Kill);
        state.killed_at = Some(s(21));
        assert_eq!(
            decide(&state, &p, s(500)),
            FlushAction::Wait { until: None }
        );
        assert_eq!(stage(&state), FlushStage::Terminated);
    }

    #[test]
    fn a_late_decision_takes_one_step_at_a_time() {
        // Woken long after every deadline, the driver still goes ask → interrupt → terminate →
        // kill, one action per decision, each recorded before the next.
        let p = protocol();
        let mut state = FlushState {
            reached_at: Some(s(0)),
            ..FlushState::default()
        };
        let now = s(1_000);
        let mut actions = Vec::new();
        loop {
            let action = decide(&state, &p, now);
            match action {
                FlushAction::AskFlush => state.asked_at = Some(now),
                FlushAction::Interrupt => state.interrupted_at = Some(now),
                FlushAction::Terminate => state.terminated_at = Some(now),
                FlushAction::Kill => state.killed_at = Some(now),
                FlushAction::Wait { .. } => break,
            }
            actions.push(action);
        }
        // Each later stage waits its own period from the one before, so at `now` only the ask
        // is due; the others follow at now + grace, + escalate_after, + exit_drain.
        assert_eq!(actions, vec![FlushAction::AskFlush]);
        assert_eq!(
            decide(&state, &p, now + s(10)),
            FlushAction::Interrupt,
            "grace runs from the ask, not from the trigger"
        );
    }

    #[test]
    fn zero_waits_escalate_immediately() {
        let p = FlushProtocol {
            grace: Duration::ZERO,
            escalate_after: Duration::ZERO,
            exit_drain: Duration::ZERO,
            ..protocol()
        };
        let state = FlushState {
            reached_at: Some(s(1)),
            asked_at: Some(s(1)),
            ..FlushState::default()
        };
        assert_eq!(decide(&state, &p, s(1)), FlushAction::Interrupt);
        let state = FlushState {
            interrupted_at: Some(s(1)),
            ..state
        };
        assert_eq!(decide(&state, &p, s(1)), FlushAction::Terminate);
    }

    #[test]
    fn the_prompt_counts_input_and_both_cache_sides() {
        let usage = json!({"input_tokens": 3, "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 200, "output_tokens": 1});
        assert_eq!(prompt_tokens(&usage), 1_203);
        assert_eq!(prompt_tokens(&json!({})), 0);
        assert_eq!(protocol().trigger_tokens(), 800);
    }
}
