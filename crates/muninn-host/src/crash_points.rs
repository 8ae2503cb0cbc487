//! The host's crash points: named places in a turn where a test can stop the process dead, to
//! prove that a `kill -9` in the narrowest windows — between two writes, or between a write and
//! the call it guards — loses and repeats nothing. A random kill hits these windows rarely; an
//! armed point hits them every time.
//!
//! Tests only. `muninn serve` arms one point from `MUNINN_FAULT=<name>[:<n>]` (unset: nothing
//! is armed, and passing a point costs one comparison); a name that is neither a host point nor
//! one of the Matrix connector's is refused at start, naming the known ones. The process aborts
//! (`std::process::abort`, as abrupt as `kill -9`: no destructor, no flush, no further write)
//! the `n`th time (default the first) any of its Minds passes the armed point, after one line
//! on stderr naming it, so a test can tell the abort it armed from any other death.

use std::sync::atomic::{AtomicU32, Ordering};

/// A place in the runtime where an armed process aborts (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// A Persona batch's delivery item is committed to the transcript, the model not yet asked:
    /// the restarted host must not show the model the batch twice.
    DeliveryRecorded,
    /// The model answered a Persona turn, its record not yet committed: the answer is lost with
    /// the process and the batch, still unacknowledged, is asked for again (billed twice, the
    /// ledger holding the committed answer only).
    PersonaAnswered,
    /// A Persona turn is committed (replies in the outbox, the batch acknowledged), the
    /// provider session not yet bound to it nor the outbox's readers woken.
    PersonaCommitted,
    /// A Self brief's item is committed to the Self transcript, its ask mark not yet written
    /// nor the model asked: the restarted host runs the brief once (it was never sent), in a
    /// new segment, and the model is shown it once.
    BriefRecorded,
    /// A new segment's row is stored, nothing of it sent or recorded yet (its first item is
    /// the next write).
    SegmentStored,
    /// A Self run's end is committed (its result in the transcript, its ledger row), its
    /// report not yet posted to the Persona nor its brief finished.
    SelfRunCommitted,
    /// The Self answered a memory flush (at a brief's boundary, or idle), its record not yet
    /// committed: the answer is lost with the process (billed, not ledgered), and the brief
    /// that asked for it, left running, is reported interrupted.
    SelfFlushAnswered,
    /// An attempt the provider billed but cut is taken from the backend, counted, and its row
    /// committed on its own (`runtime/failed.rs`), the call that failed not yet tried again:
    /// the restarted host's ledger must hold the row once, as the provider billed it.
    AttemptCut,
    /// A Persona request whose answer its last holder lost (`host-persona-answered`) is
    /// ledgered at its estimate by the next holder (`runtime/lost.rs`), the batch not yet
    /// asked again: the host restarted after this one must not ledger it a second time.
    LostLedgered,
}

impl CrashPoint {
    /// Every point, for error messages and tests.
    pub const ALL: [CrashPoint; 9] = [
        CrashPoint::DeliveryRecorded,
        CrashPoint::PersonaAnswered,
        CrashPoint::PersonaCommitted,
        CrashPoint::BriefRecorded,
        CrashPoint::SegmentStored,
        CrashPoint::SelfRunCommitted,
        CrashPoint::SelfFlushAnswered,
        CrashPoint::AttemptCut,
        CrashPoint::LostLedgered,
    ];

    /// Its name in `MUNINN_FAULT`.
    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::DeliveryRecorded => "host-delivery-recorded",
            CrashPoint::PersonaAnswered => "host-persona-answered",
            CrashPoint::PersonaCommitted => "host-persona-committed",
            CrashPoint::BriefRecorded => "host-brief-recorded",
            CrashPoint::SegmentStored => "host-segment-stored",
            CrashPoint::SelfRunCommitted => "host-self-run-committed",
            CrashPoint::SelfFlushAnswered => "host-self-flush-answered",
            CrashPoint::AttemptCut => "host-attempt-cut",
            CrashPoint::LostLedgered => "host-lost-ledgered",
        }
    }

    /// The point called `name`.
    pub fn parse(name: &str) -> Option<CrashPoint> {
        CrashPoint::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Why a `MUNINN_FAULT` value arms no host point.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArmError {
    /// The name is not a host point's (it may be another part's, e.g. the Matrix connector's).
    #[error("{0} names no host crash point")]
    Unknown(String),
    /// The count after the `:` is not a whole number from 1.
    #[error("{0}: the count after ':' must be a whole number from 1")]
    BadCount(String),
}

/// The point a host is armed at, if any, and how often it was passed.
#[derive(Debug, Default)]
pub struct CrashPoints {
    armed: Option<(CrashPoint, u32)>,
    passed: AtomicU32,
}

impl CrashPoints {
    /// Armed at `point`: the process aborts the `nth` time (from 1) it passes it.
    pub fn armed(point: CrashPoint, nth: u32) -> CrashPoints {
        CrashPoints {
            armed: Some((point, nth.max(1))),
            passed: AtomicU32::new(0),
        }
    }

    /// Parses `<name>[:<n>]` (`MUNINN_FAULT`).
    pub fn parse(spec: &str) -> Result<CrashPoints, ArmError> {
        let (name, nth) = match spec.split_once(':') {
            Some((name, n)) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => (name, n),
                _ => return Err(ArmError::BadCount(spec.to_string())),
            },
            None => (spec, 1),
        };
        let point = CrashPoint::parse(name).ok_or_else(|| ArmError::Unknown(name.to_string()))?;
        Ok(CrashPoints::armed(point, nth))
    }

    /// The armed point, if any.
    pub fn point(&self) -> Option<CrashPoint> {
        self.armed.map(|(point, _)| point)
    }

    /// Called at `at`: aborts the process if `at` is armed and this is its `n`th pass.
    pub fn reached(&self, at: CrashPoint) {
        let Some((point, nth)) = self.armed else {
            return;
        };
        if point != at {
            return;
        }
        let passes = self.passed.fetch_add(1, Ordering::SeqCst) + 1;
        if passes == nth {
            // stderr, not the log: the log's writer may buffer, and nothing runs after this.
            eprintln!(
                "muninn: crash point {} reached (pass {passes}): aborting",
                at.name()
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_a_point_and_an_optional_count() {
        let armed = CrashPoints::parse("host-persona-answered:3").unwrap();
        assert_eq!(armed.armed, Some((CrashPoint::PersonaAnswered, 3)));
        let armed = CrashPoints::parse("host-segment-stored").unwrap();
        assert_eq!(armed.armed, Some((CrashPoint::SegmentStored, 1)));
        assert_eq!(
            CrashPoints::parse("matrix-sent-before-ack").unwrap_err(),
            ArmError::Unknown("matrix-sent-before-ack".into())
        );
        for bad in ["host-segment-stored:0", "host-segment-stored:x"] {
            assert_eq!(
                CrashPoints::parse(bad).unwrap_err(),
                ArmError::BadCount(bad.into())
            );
        }
        for point in CrashPoint::ALL {
            assert_eq!(CrashPoint::parse(point.name()), Some(point));
        }
    }

    #[test]
    fn passing_another_point_or_an_unarmed_host_does_nothing() {
        let armed = CrashPoints::armed(CrashPoint::PersonaCommitted, 2);
        armed.reached(CrashPoint::PersonaAnswered);
        armed.reached(CrashPoint::PersonaCommitted);
        assert_eq!(armed.passed.load(Ordering::SeqCst), 1);
        CrashPoints::default().reached(CrashPoint::PersonaCommitted);
    }
}
