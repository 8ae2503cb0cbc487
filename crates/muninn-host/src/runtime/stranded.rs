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
//! A run its holder left before the brief was sent — the brief's item, unmarked, ends the Self
//! transcript: the host stopped between recording the brief and marking it asked
//! (`attempt.rs`) — is run by the new holder, in a new segment (no session continues a
//! segment that ends unanswered): the model was never shown it, and nothing of the run
//! happened. A brief with no item at all (its append never landed) was never sent either; it
//! is failed, its result saying exactly that (`RunTail::Unrecorded` says why it is not run). A
//! run
//! whose mark ends the transcript may have been sent and recorded nothing since: its request
//! was in flight, or its answer uncommitted, or — a Claude Code run, which records nothing
//! until it ends — its tools may have edited files and run commands; or the mark landed with
//! its answer lost and the brief was never sent, which no reader of the store can tell apart.
//! It is never run again (that would do its work twice): it is failed as interrupted, its
//! result saying that it may have acted and nothing of it was recorded. Only the runner that
//! wrote the mark knows it never saw it confirmed, and so never sent the brief: when it takes
//! a new lease with the brief still running and its mark last — right after the item it
//! recorded, not another holder's mark after an item of its own — it runs the brief again as
//! one never asked (`MindRunner::unsent_brief`); when it shuts down cleanly first, it takes the
//! mark back in the transcript (`attempt.rs`, `UNASKED`), and the next holder runs the brief
//! as never asked. The brief it holds so keeps that knowledge (`HeldBrief::unsent`) until it is
//! recorded afresh, through another lease change or a clean shutdown. A brief this runner holds
//! (its append or mark unconfirmed, `attempt.rs`) is its own to finish, and passed by.
//!
//! A tool loop's run whose last request's commit landed though this runner gave it up under a
//! new lease (the store's answer lost, then the lease changed) is failed as the store's failure
//! stopped it, its last answer saved — what the runner reports when it commits the request
//! again under the same lease — not as a run its host abandoned; only this runner knows.
//!
//! Any other run is not resumed: its requests and tool results up to the crash are in the ledger and
//! the transcript exactly once, and re-running the brief would send work the Mind already paid
//! for; the Persona decides whether to ask again. The report is posted before the brief is
//! finished, under the brief's own source id: a crash between the two posts nothing twice, and
//! the next recovery finishes the brief.

use super::attempt::{ASKED, HeldBrief, MARKS, UNASKED};
use super::self_run::STOPPED_BY_THE_STORE;
use super::{MindRunner, RuntimeError};
use crate::telemetry::health::{ERROR_CHARS, truncate};
use muninn_backend::Backend;
use muninn_store::{Brief, BriefStatus, FencingToken, Role, TranscriptKind};

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
            error: truncate(&error.to_string(), ERROR_CHARS),
        }
    }

    /// What stopped a run whose runner panicked (`panic`, the panic's message), for the
    /// runner that replaces it (`supervise.rs`). Bounded as `/readyz` bounds it: a panic's
    /// message can be any length, and the Persona is told only the report's first
    /// `RESULT_EXCERPT_CHARS` (`self_run.rs`), which must still say what to do.
    pub(super) fn panicked(panic: &str) -> String {
        let panic = truncate(panic, ERROR_CHARS);
        format!("its step panicked ({panic}) and its Mind was restarted")
    }

    /// What the stranded brief's result says stopped it — a failed step (`by`), else the
    /// panic that ended the runner this one replaced (`panicked`, which says so itself), else
    /// its host — and how far its run got (`tail`).
    fn why(by: Option<&StrandedBy>, panicked: Option<&str>, tail: RunTail) -> String {
        let stopped = match (by, panicked) {
            (Some(StrandedBy { store: true, error }), _) => format!("the store failed ({error})"),
            (Some(StrandedBy { error, .. }), _) => format!("its step failed ({error})"),
            // A comma: what follows says when in the run, not when the Mind was restarted.
            (None, Some(panicked)) => format!("{panicked},"),
            (None, None) => "its host stopped (a crash, a kill or a lost lease)".to_string(),
        };
        if tail == RunTail::Unrecorded {
            // Not "in the transcript", nor "not resumed": nothing of it was recorded or sent.
            return format!(
                "{stopped} before the brief was recorded or sent to the model, so nothing of it \
                 ran: ask again if it is still wanted"
            );
        }
        if tail == RunTail::AskedOnly {
            // Not "in the transcript": nothing is. A Claude Code run records nothing until it
            // ends, though its tools may have edited files and run commands by then.
            return format!(
                "{stopped} after the brief was marked as sent and before anything of the run \
                 was recorded; it may have reached the model and acted (a Claude Code run's \
                 tools work before its end is recorded), and it was not run again so that \
                 nothing is done twice: check what it did and ask again if it is still wanted"
            );
        }
        format!(
            "{stopped} before the run finished; what it did until then is in the transcript \
             and the ledger, and it was not resumed: ask again if it is still wanted"
        )
    }
}

/// A committed run's end, as its result item records it.
pub(super) struct CommittedEnd {
    result: String,
    status: BriefStatus,
    verb: String,
}

/// How far a running brief's run got, by the Self transcript's last item (`attempt.rs` marks a
/// brief as asked before it is sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunTail {
    /// The brief's item, unmarked: the brief was never sent.
    NeverAsked,
    /// Its mark: perhaps sent, and nothing of the run recorded since (it may have acted).
    AskedOnly,
    /// No item of the brief at all: its append never landed (refused, or its host stopped
    /// first), so it was never sent. Failed all the same, saying so: a report of it may have
    /// been posted already (a failure reported, its brief's end not committed), and a brief run
    /// after the Persona was told to ask again could run twice.
    Unrecorded,
    /// Anything else: the run recorded some of its work, the brief was recorded by a host
    /// that did not mark its asks, or its items lie further back than the recovery reads.
    Other,
}

/// How many of the Self transcript's last items the recovery reads to place a stranded brief:
/// a run's tool loop may have recorded many since its brief, and then it is not re-run anyway.
const LOOK_BACK: i64 = 64;

/// The most stranded briefs one step recovers (a Mind runs one brief at a time, so more than
/// one means several crashes in a row; the rest wait for the next step).
const RECOVER_AT_MOST: i64 = 16;

/// What the Persona and the brief's result say of a run its host abandoned.
pub(super) const INTERRUPTED: &str = "was interrupted";

impl<B: Backend> MindRunner<B> {
    /// This runner replaces one of the same host whose task panicked with `panic` (what
    /// [`run_minds`](super::run_minds) does: `supervise.rs`): a run its first check finds
    /// stranded under the lease that runner held is reported as stopped by that panic, not by
    /// its host, which ran on. A lease taken from another holder forgets it (`lease.rs`).
    pub fn replaces_a_panicked_runner(&mut self, panic: &str) {
        self.panicked = Some(StrandedBy::panicked(panic));
    }

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
        for brief in running {
            // A brief this runner holds is its own to finish.
            if self.held_brief.as_ref().map(|h| h.brief.seq) != Some(brief.seq) {
                self.recover_stranded(token, now, brief).await?;
            }
        }
        self.check_stranded = false;
        self.stranded_by = None;
        self.panicked = None;
        self.unsent_brief = None;
        self.request_landed = None;
        Ok(())
    }

    /// One brief a previous holder left running (a new lease, or a new runner: its sessions are
    /// rebuilt, not the ones a live renderer may have taken the brief into): held to run again
    /// if it was never sent, reported if its end was committed, else failed with what stopped it.
    async fn recover_stranded(
        &mut self,
        token: FencingToken,
        now: i64,
        brief: Brief,
    ) -> Result<(), RuntimeError> {
        let tail = self.run_tail(brief.seq).await?;
        // A mark this runner wrote and never saw confirmed: it never sent the brief.
        let unsent_marked = tail == RunTail::AskedOnly && self.own_mark_last(brief.seq).await?;
        if self.stranded_by.is_none()
            && self.held_brief.is_none()
            && (tail == RunTail::NeverAsked || unsent_marked)
        {
            self.run_again(brief, unsent_marked);
            return Ok(());
        }
        let seq = brief.seq;
        if let Some(end) = self.committed_end(seq).await? {
            tracing::warn!(
                mind = %self.mind.id,
                brief = seq,
                "Self run {seq} was committed but not reported before its host stopped; reporting its result"
            );
            return (self.report_and_finish(token, seq, end.status, &end.verb, &end.result, now))
                .await;
        }
        if let Some((_, result)) = self.request_landed.take_if(|(landed, _)| *landed == seq) {
            tracing::warn!(
                mind = %self.mind.id,
                brief = seq,
                "Self run {seq} {STOPPED_BY_THE_STORE}: {result}"
            );
            return (self.fail_brief(token, seq, STOPPED_BY_THE_STORE, &result, now)).await;
        }
        let panicked = self.panicked.as_deref();
        let result = StrandedBy::why(self.stranded_by.as_ref(), panicked, tail);
        tracing::warn!(
            mind = %self.mind.id,
            brief = seq,
            "Self run {seq} {INTERRUPTED}: {result}"
        );
        self.fail_brief(token, seq, INTERRUPTED, &result, now).await
    }

    /// A stranded brief that was never sent, held to be run again at this step (the model never
    /// saw it, and nothing of its run happened).
    fn run_again(&mut self, brief: Brief, unsent_marked: bool) {
        tracing::warn!(
            mind = %self.mind.id,
            brief = brief.seq,
            "Self run {} was recorded and never sent before its lease was lost or its host stopped; running it again",
            brief.seq
        );
        // What it knows of its own mark goes with the brief: held, it may be let go again — a
        // lease change, a clean shutdown — before it is recorded afresh.
        let unsent = self.unsent_brief.clone().filter(|_| unsent_marked);
        self.held_brief = Some(HeldBrief {
            brief,
            attempt: None,
            unsent,
        });
    }

    /// Whether the mark that ends the Self transcript (brief `seq`'s, [`RunTail::AskedOnly`])
    /// is the one this runner wrote and never saw confirmed ([`MindRunner::unsent_brief`]):
    /// right after the brief's item it recorded. Another holder that found that item last ran
    /// the brief afresh — a new item, then its own mark — and may have sent it before it died;
    /// taking that mark for this runner's would run the brief twice
    /// (`exactly_once_self::lease_changes::a_mark_another_holder_wrote_is_not_taken_for_the_runners_own_unconfirmed_one`).
    async fn own_mark_last(&self, seq: i64) -> Result<bool, RuntimeError> {
        let Some(unsent) = self.unsent_brief.as_ref().filter(|u| u.brief == seq) else {
            return Ok(false);
        };
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 1)
            .await?;
        Ok(tail.last().is_some_and(|i| i.seq == unsent.item + 1))
    }

    /// The end of brief `seq`'s run, if it was committed: its result item, which follows the
    /// brief's other items (only a flushed run's memory comes after it).
    pub(super) async fn committed_end(
        &self,
        seq: i64,
    ) -> Result<Option<CommittedEnd>, RuntimeError> {
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

    /// How far brief `seq`'s run got, by what ends the Self transcript.
    async fn run_tail(&self, seq: i64) -> Result<RunTail, RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, LOOK_BACK)
            .await?;
        let is = |kind: TranscriptKind, key: &str| {
            tail.last()
                .is_some_and(|i| i.kind == kind && i.body[key].as_i64() == Some(seq))
        };
        // A brief recorded by a host that did not mark its asks may have been sent.
        let marks = tail.last().is_some_and(|i| i.body[MARKS] == true);
        if is(TranscriptKind::Brief, "brief") && marks {
            return Ok(RunTail::NeverAsked);
        }
        if is(TranscriptKind::Notice, ASKED) {
            return Ok(RunTail::AskedOnly);
        }
        // Its runner took the mark back before it let the lease go: never sent.
        if is(TranscriptKind::Notice, UNASKED) {
            return Ok(RunTail::NeverAsked);
        }
        // Briefs run oldest first, one at a time, so a brief's items follow every item of the
        // briefs before it: met going back before any of its own, one of theirs (its brief,
        // ask mark or result) proves it has none — its append never landed. So does the whole
        // Self transcript read without one.
        for item in tail.iter().rev() {
            let of = item.body["brief"]
                .as_i64()
                .or_else(|| item.body[ASKED].as_i64())
                .or_else(|| item.body[UNASKED].as_i64());
            match of {
                Some(s) if s < seq => return Ok(RunTail::Unrecorded),
                Some(_) => return Ok(RunTail::Other),
                None => {}
            }
        }
        Ok(if (tail.len() as i64) < LOOK_BACK {
            RunTail::Unrecorded
        } else {
            RunTail::Other
        })
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

#[cfg(test)]
mod tests {
    use super::super::self_run::RESULT_EXCERPT_CHARS;
    use super::{RunTail, StrandedBy};

    /// A panic's message or a step's error can be any length (an `unwrap` of an error that
    /// carries a whole response, say): the Persona's report, the result's first
    /// [`RESULT_EXCERPT_CHARS`], still says how far the run got and what to do about it.
    #[test]
    fn a_long_panic_or_error_leaves_the_report_its_advice() {
        let long = "x".repeat(5_000);
        let panicked = StrandedBy::panicked(&long);
        let failed = StrandedBy::of(&super::RuntimeError::Panicked(long.clone()));
        for (by, panicked) in [(None, Some(panicked.as_str())), (Some(&failed), None)] {
            let result = StrandedBy::why(by, panicked, RunTail::AskedOnly);
            let excerpt: String = result.chars().take(RESULT_EXCERPT_CHARS).collect();
            let end: Vec<char> = excerpt.chars().rev().take(80).collect();
            let end: String = end.into_iter().rev().collect();
            assert!(
                excerpt.ends_with("ask again if it is still wanted"),
                "the report ends: {end:?}"
            );
        }
    }
}
