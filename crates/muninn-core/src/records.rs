//! A Mind's records that more than one crate shares: the store keeps them, the runtime writes
//! them and the HTTP API (`muninn-api`) shows them as they are. They live here, below both, so
//! that the API's wire types need nothing of the store and every consumer shares one definition.
//!
//! Plain data: times are Unix milliseconds, seqs are assigned by the store. The serde shapes are
//! part of the HTTP API; the stored spellings (`as_str`/`parse`) are part of the store's schema.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A spelling this build does not know, met while reading a stored or sent value (a row written
/// by a newer muninn, or a corrupt one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownName {
    /// What was being read: `role`, `brief origin`, `brief status`.
    pub what: &'static str,
    /// The spelling met.
    pub value: String,
}

impl UnknownName {
    fn new(what: &'static str, value: &str) -> UnknownName {
        UnknownName {
            what,
            value: value.to_owned(),
        }
    }
}

/// A lease's fencing token. Strictly increases each time the lease changes hands (or is taken
/// again after it expired or was released); every fenced write presents it, and the store refuses
/// it (`StoreError::Fenced`) once a newer one exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub i64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which of a Mind's two sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The voice in rooms and DMs.
    Persona,
    /// The hands: tool-using, works on briefs.
    #[serde(rename = "self")]
    SelfRole,
}

impl Role {
    /// The stored spelling: `persona` or `self`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Persona => "persona",
            Role::SelfRole => "self",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Result<Role, UnknownName> {
        match text {
            "persona" => Ok(Role::Persona),
            "self" => Ok(Role::SelfRole),
            other => Err(UnknownName::new("role", other)),
        }
    }
}

/// A segment of one role's session: the span between two rehydrations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The Mind.
    pub mind: String,
    /// Persona or Self.
    pub role: Role,
    /// 0-based, consecutive per (mind, role); matches `LedgerRow::segment`.
    pub number: i64,
    /// When the segment started, Unix ms.
    pub started_at_ms: i64,
    /// Tokens the segment was rehydrated with.
    pub rehydration_tokens: i64,
    /// Why the segment started (the decider's reason).
    pub reason: String,
    /// The provider's session id or handle, opaque; set when the provider reports it.
    pub session_id: Option<String>,
    /// When the segment ended, Unix ms; `None` for the open segment.
    pub ended_at_ms: Option<i64>,
    /// The memory layer the segment was rehydrated with, kept so a restarted host can rebuild
    /// the segment's requests byte for byte; `None` for segments stored before migration 4.
    pub memory: Option<String>,
    /// A digest of the segment's session spec (opaque to the store): a restarted host resumes
    /// the segment only while the spec it would send now has the same digest.
    pub spec_digest: Option<String>,
}

/// An outbound message as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxMessage {
    /// The Mind.
    pub mind: String,
    /// The idempotent request id.
    pub request_id: String,
    /// Store-assigned order of recording, per Mind.
    pub seq: i64,
    /// Where it goes.
    pub room: String,
    /// What it says.
    pub text: String,
    /// When it was recorded, Unix ms.
    pub created_at_ms: i64,
    /// When the transport accepted it, Unix ms.
    pub sent_at_ms: Option<i64>,
    /// The transport's id for it (e.g. the Matrix event id), if it gave one.
    pub remote_id: Option<String>,
    /// When the peer confirmed it, Unix ms.
    pub acked_at_ms: Option<i64>,
    /// When the transport gave up on it for good (a refusal no retry can change, e.g. a room
    /// the Mind's account may not post in), Unix ms; such a message is offered to no transport
    /// again. Absent from the JSON while it has not failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_ms: Option<i64>,
    /// Why it failed, as the transport reported it (never a credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// Who asked for a brief.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BriefOrigin {
    /// The Mind's own Persona (`start_self_run`).
    Persona,
    /// The operator.
    Operator,
}

impl BriefOrigin {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BriefOrigin::Persona => "persona",
            BriefOrigin::Operator => "operator",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Result<BriefOrigin, UnknownName> {
        match text {
            "persona" => Ok(BriefOrigin::Persona),
            "operator" => Ok(BriefOrigin::Operator),
            other => Err(UnknownName::new("brief origin", other)),
        }
    }
}

/// Where a brief is in its life: `queued → running → done | failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BriefStatus {
    /// Waiting for the Self.
    Queued,
    /// Claimed by the Self.
    Running,
    /// Finished with a result.
    Done,
    /// Finished without one.
    Failed,
}

impl BriefStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BriefStatus::Queued => "queued",
            BriefStatus::Running => "running",
            BriefStatus::Done => "done",
            BriefStatus::Failed => "failed",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Result<BriefStatus, UnknownName> {
        match text {
            "queued" => Ok(BriefStatus::Queued),
            "running" => Ok(BriefStatus::Running),
            "done" => Ok(BriefStatus::Done),
            "failed" => Ok(BriefStatus::Failed),
            other => Err(UnknownName::new("brief status", other)),
        }
    }
}

/// A brief in the Self queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Brief {
    /// The Mind.
    pub mind: String,
    /// Store-assigned, 1-based, gap-free per Mind; the queue order.
    pub seq: i64,
    /// What to do.
    pub text: String,
    /// Who asked.
    pub origin: BriefOrigin,
    /// Where it is.
    pub status: BriefStatus,
    /// The result (or failure reason) once finished.
    pub result: Option<String>,
    /// When it was queued, Unix ms.
    pub created_at_ms: i64,
    /// When it was claimed, Unix ms.
    pub started_at_ms: Option<i64>,
    /// When it finished, Unix ms.
    pub finished_at_ms: Option<i64>,
}

/// A held lease on a Mind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The Mind.
    pub mind: String,
    /// Who holds it (host id, process id).
    pub holder: String,
    /// The fencing token every fenced write presents.
    pub token: FencingToken,
    /// When it lapses unless renewed, Unix ms.
    pub expires_at_ms: i64,
}
