//! Briefs a run left `running`: a host that crashed, was killed or lost its lease in the middle
//! of a Self run never finishes the brief, and nothing else would — the Persona would wait for a
//! report that never comes, a silent stall. A step runs a whole brief, so at the start of a step
//! no brief of this runner is legitimately running; whenever the runner may have abandoned one (a
//! new lease — a restart or a takeover —, or a step that failed), the next step fails every
//! `running` brief of the Mind, loudly, and tells the Persona.
//!
//! A run whose end was committed is not stranded, only unreported: its host stopped between the
//! commit of its result and the report (`report_back`). Its result is in the Self transcript,
//! with how the brief ends, and the recovery reports that — the Persona gets the result once, as
//! if nothing had happened — instead of telling it the run was interrupted and to ask again
//! (which would pay for the work twice).
//!
//! A run its holder left with nothing recorded after its brief — the brief's item ends the Self
//! transcript: the host stopped between recording the brief and asking the model, or while the
//! first request was in flight — is run again by the new holder, in a new segment (no session
//! continues one that ends unanswered): the model was shown it at most once before, and nothing
//! of the run is in the ledger. Like a Persona batch asked again after a kill, a request cut by
//! the kill is billed twice; a brief failed instead would cost a Persona turn and, asked again,
//! the same request. A brief this runner holds (its append unconfirmed, `attempt.rs`) is its
//! own to finish, and passed by.
//!
//! Any other run is not resumed: its requests and tool results up to the crash are in the ledger and
//! the transcript exactly once, and re-running the brief would send work the Mind already paid
//! for; the Persona decides whether to ask again. The report is posted before the brief is
//! finished, under the brief's own source id: a crash between the two posts nothing twice, and
//! the next recovery finishes the brief.

use super::attempt::HeldBrief;
use super::{MindRunner, RuntimeError};
use muninn_backend::Backend;
use muninn_store::{BriefStatus, FencingToken, Role, TranscriptKind};

/// What stopped a run this runner may have left `running`: a step that failed (the runner
/// itself lived on). Without one, the lease is new and its previous holder stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StrandedBy {
    /// Whether the store failed (a commit refused, a read that failed) rather than the backend
    /// or the configuration: the report says which, so nobody looks for a crash that never was.
    store: bool,
    /// The step's error, as the log and status show it.
    error: String,
}

impl StrandedBy {
    /// The failed step's error.
    pub(super) fn of(error: &RuntimeError) -> StrandedBy {
        StrandedBy {
            store: matches!(error, RuntimeError::Store(_) | RuntimeError::Held(_)),
            error: error.to_string(),
        }
    }

    /// What the stranded brief's result says stopped it.
    fn why(by: Option<&StrandedBy>) -> String {
        let stopped = match by {
            None => "its host stopped (a crash, a kill or a lost lease)".to_string(),
            Some(StrandedBy { store: true, error }) => format!("the store failed ({error})"),
            Some(StrandedBy { error, .. }) => format!("its step failed ({error})"),
        };
        format!(
            "{stopped} before the run finished; what it did until then is in the transcript \
             and the ledger, and it was not resumed: ask again if it is still wanted"
        )
    }
}

/// A committed run's end, as its result item records it.
struct CommittedEnd {
    result: String,
    status: BriefStatus,
    verb: String,
}

/// The most stranded briefs one step recovers (a Mind runs one brief at a time, so more than
/// one means several crashes in a row; the rest wait for the next step).
const RECOVER_AT_MOST: i64 = 16;

/// What the Persona and the brief's result say of a run its host abandoned.
pub(super) const INTERRUPTED: &str = "was interrupted";

impl<B: Backend> MindRunner<B> {
    /// Fails the Mind's briefs left `running` by a run that was abandoned (see the module docs),
    /// if this runner may have abandoned one since the last check.
    pub(super) async fn recover_stranded_briefs(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        if !self.check_stranded {
            return Ok(());
        }
        let running = self
            .host
            .store
            .briefs(&self.mind.id, Some(BriefStatus::Running), RECOVER_AT_MOST)
            .await?;
        let result = StrandedBy::why(self.stranded_by.as_ref());
        for brief in running {
            if self.held_brief.as_ref().map(|h| h.brief.seq) == Some(brief.seq) {
                continue;
            }
            // Only a previous holder's run (a new lease, or a new runner: its sessions are
            // rebuilt, not the ones a live renderer may have taken the brief into).
            if self.stranded_by.is_none()
                && self.held_brief.is_none()
                && self.never_answered(brief.seq).await?
            {
                tracing::warn!(
                    mind = %self.mind.id,
                    brief = brief.seq,
                    "Self run {} was recorded and never answered before its host stopped; running it again",
                    brief.seq
                );
                self.held_brief = Some(HeldBrief {
                    brief,
                    attempt: None,
                });
                continue;
            }
            if let Some(end) = self.committed_end(brief.seq).await? {
                tracing::warn!(
                    mind = %self.mind.id,
                    brief = brief.seq,
                    "Self run {} was committed but not reported before its host stopped; reporting its result",
                    brief.seq
                );
                self.report_and_finish(token, brief.seq, end.status, &end.verb, &end.result, now)
                    .await?;
                continue;
            }
            tracing::warn!(
                mind = %self.mind.id,
                brief = brief.seq,
                "Self run {} {INTERRUPTED}: {result}",
                brief.seq
            );
            self.fail_brief(token, brief.seq, INTERRUPTED, &result, now)
                .await?;
        }
        self.check_stranded = false;
        self.stranded_by = None;
        Ok(())
    }

    /// The end of brief `seq`'s run, if it was committed: its result item, which follows the
    /// brief's other items (only a flushed run's memory comes after it).
    async fn committed_end(&self, seq: i64) -> Result<Option<CommittedEnd>, RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 4)
            .await?;
        let item = tail
            .into_iter()
            .find(|i| i.kind == TranscriptKind::Result && i.body["brief"].as_i64() == Some(seq));
        Ok(item.map(|item| {
            let body = &item.body;
            // A result written before its body said how the brief ends: it finished.
            CommittedEnd {
                result: body["text"].as_str().unwrap_or_default().to_string(),
                status: body["status"]
                    .as_str()
                    .and_then(|s| BriefStatus::parse(s).ok())
                    .unwrap_or(BriefStatus::Done),
                verb: body["verb"].as_str().unwrap_or("finished").to_string(),
            }
        }))
    }

    /// Whether brief `seq`'s item ends the Self transcript: nothing of its run was recorded.
    async fn never_answered(&self, seq: i64) -> Result<bool, RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 1)
            .await?;
        Ok(tail.last().is_some_and(|i| {
            i.kind == TranscriptKind::Brief && i.body["brief"].as_i64() == Some(seq)
        }))
    }

    /// Fails a running brief with `result` and tells the Persona (`Self run N {verb}: …`).
    pub(super) async fn fail_brief(
        &self,
        token: FencingToken,
        seq: i64,
        verb: &str,
        result: &str,
        now: i64,
    ) -> Result<(), RuntimeError> {
        self.report_and_finish(token, seq, BriefStatus::Failed, verb, result, now)
            .await
    }

    /// Ends a running brief as `status` with `result`, and tells the Persona (`Self run N
    /// {verb}: …`). The report goes first: a crash between the two leaves the brief running for
    /// the recovery above, which posts nothing twice; the other order would lose the report for
    /// good (a finished brief is never looked at again).
    pub(super) async fn report_and_finish(
        &self,
        token: FencingToken,
        seq: i64,
        status: BriefStatus,
        verb: &str,
        result: &str,
        now: i64,
    ) -> Result<(), RuntimeError> {
        self.post_self_report(seq, verb, result, now).await?;
        self.host
            .store
            .finish_brief(&self.mind.id, token, seq, status, result, now)
            .await?;
        Ok(())
    }
}
