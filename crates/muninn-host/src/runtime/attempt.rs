//! A Persona batch recorded but not yet answered: what a retry re-sends instead of recording
//! the delivery again (the policy is stated in `retry.rs`). A Self brief rendered but whose
//! append is not confirmed is held the same way ([`HeldBrief`]).
//!
//! The delivery (or brief) is recorded under a key
//! ([`muninn_store::Store::append_transcript_once`]) the attempt is created with, before the
//! append is tried. An append whose commit landed but whose answer was lost (a PostgreSQL call
//! past its deadline, a connection dropped after `COMMIT` was sent) fails the step; the attempt
//! stays, and the retry appends under the same key — the store finds it recorded and adds
//! nothing — and sends the message as it was rendered, so neither the transcript nor the model
//! gets the delivery twice, and the renderer does not append the turn a second time.
//!
//! A Self brief's attempt lives only until its append is confirmed: a run that fails after it
//! fails its brief (`self_run.rs`), so there is nothing to re-send. Until then its brief, left
//! `running`, is this runner's to finish, and the stranded-brief recovery passes it by
//! (`stranded.rs`).

use super::persona::Plan;
use super::{MindRunner, RuntimeError};
use crate::crash_points::CrashPoint;
use muninn_backend::Backend;
use muninn_store::{Brief, Delivery, FencingToken, NewTranscriptItem, Role, TranscriptKind};
use serde_json::Value;

/// A batch rendered on the open segment's session and not answered yet: its delivery recorded
/// in that segment's transcript, or its append not yet confirmed (`unrecorded`). For the Self,
/// a brief rendered whose append is not confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attempt {
    /// The session it was rendered on: a Persona batch's delivery, or a Self brief.
    role: Role,
    /// The batch's id (`<mind>-<first seq>-<max seq>`), or the brief's seq.
    batch: String,
    /// The batch's last delivery, or the brief's seq.
    max_seq: i64,
    /// The segment its delivery was recorded in.
    pub(super) segment: i64,
    /// The user message as rendered and recorded: re-sent byte for byte.
    pub(super) text: String,
    /// The distinct failures' texts of this attempt's outage, oldest first, at most
    /// `DISTINCT_ERRORS_KEPT`: each leaves one notice, however often it recurs between others.
    errors_seen: Vec<String>,
    /// The key its delivery is appended under: unique to this attempt.
    key: String,
    /// The delivery's transcript body until the store confirmed it recorded.
    unrecorded: Option<Value>,
    /// The seq its item got, once the store confirmed it recorded.
    recorded: Option<i64>,
    /// A brief whose mark that it is about to be sent ([`MindRunner::mark_asked`]) the store
    /// has not confirmed yet. Always `false` for a Persona batch.
    unmarked: bool,
}

impl Attempt {
    /// A batch (through `max_seq`) rendered in `segment` as `text`, its delivery (`body`) to
    /// be recorded under `key` ([`MindRunner::record_attempt`]).
    pub(super) fn new(
        batch: &str,
        max_seq: i64,
        segment: i64,
        text: &str,
        key: String,
        body: Value,
    ) -> Attempt {
        Attempt {
            role: Role::Persona,
            batch: batch.to_string(),
            max_seq,
            segment,
            text: text.to_string(),
            errors_seen: Vec::new(),
            key,
            unrecorded: Some(body),
            recorded: None,
            unmarked: false,
        }
    }

    /// Brief `seq` rendered in the Self's `segment` as `text`, its item (`body`) to be recorded
    /// under `key` ([`MindRunner::record_once`]).
    pub(super) fn brief(seq: i64, segment: i64, text: &str, key: String, body: Value) -> Attempt {
        Attempt {
            role: Role::SelfRole,
            unmarked: true,
            ..Attempt::new(&seq.to_string(), seq, segment, text, key, body)
        }
    }

    /// Notes a failure; whether it is new to this attempt's outage (and so worth a notice in
    /// the transcript: an hour of 401s is one notice, not one per retry). Compared with every
    /// distinct failure of the outage, not only the previous one: two errors that alternate —
    /// a timeout, then a 529, then the timeout again — leave two notices, not one per retry.
    /// Only the newest `DISTINCT_ERRORS_KEPT` are remembered, so an outage whose every
    /// failure differs keeps its memory bounded (and notes each, as before).
    pub(super) fn failed_with(&mut self, error: &str) -> bool {
        if self.errors_seen.iter().any(|seen| seen == error) {
            return false;
        }
        if self.errors_seen.len() == DISTINCT_ERRORS_KEPT {
            self.errors_seen.remove(0);
        }
        self.errors_seen.push(error.to_string());
        true
    }
}

impl<B: Backend> MindRunner<B> {
    /// The deliveries a turn over `pending` (a [`super::next_batch`]) takes: while an attempt is
    /// unanswered, its own batch and no more. Mail that came while it backed off joins the
    /// conversation after it: the provider took nothing of the failed attempt, and what that
    /// attempt rendered — room history, layer notices — the renderer counts as shown, so it
    /// reaches the provider only if the recorded message is re-sent as it is.
    pub(super) fn attempted(&self, mut pending: Vec<Delivery>) -> Vec<Delivery> {
        if let Some(attempt) = &self.attempt
            && pending.first().is_some_and(|d| d.seq <= attempt.max_seq)
        {
            pending.retain(|d| d.seq <= attempt.max_seq);
        }
        pending
    }

    /// Whether `batch` is the unanswered attempt's (its delivery recorded, to be re-sent as it
    /// is).
    pub(super) fn is_attempt(&self, batch: &str) -> bool {
        self.attempt.as_ref().is_some_and(|a| a.batch == batch)
    }

    /// A key no other append of this Mind has used: what it records (`delivery <batch>`,
    /// `brief <seq>`) and the segment for a reader, and a nonce drawn when the runner was made
    /// with a count of the keys it made since — a host restarted under the same holder name
    /// renews the same lease token, so the token alone would not tell its appends from those of
    /// the process before it.
    pub(super) fn append_key(&mut self, kind: TranscriptKind, id: &str, segment: i64) -> String {
        self.appends += 1;
        format!(
            "{} {id} segment {segment} runner {:016x}-{}",
            kind.as_str(),
            self.nonce,
            self.appends
        )
    }

    /// Records the Persona attempt's delivery, if the store has not confirmed it yet
    /// ([`Self::record_once`]).
    pub(super) async fn record_attempt(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let Some(mut attempt) = self.attempt.take() else {
            return Ok(());
        };
        let recorded = self.record_once(&mut attempt, token, now).await;
        self.attempt = Some(attempt);
        recorded
    }

    /// Records an attempt's item (a Persona delivery, a Self brief), if the store has not
    /// confirmed it yet: under its key, so an append that landed though its answer was lost is
    /// found, not made again.
    pub(super) async fn record_once(
        &self,
        attempt: &mut Attempt,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let Some(body) = attempt.unrecorded.clone() else {
            return Ok(());
        };
        let (kind, recorded) = match attempt.role {
            Role::Persona => (TranscriptKind::Delivery, CrashPoint::DeliveryRecorded),
            Role::SelfRole => (TranscriptKind::Brief, CrashPoint::BriefRecorded),
        };
        let item = NewTranscriptItem {
            role: attempt.role,
            segment: attempt.segment,
            kind: kind.clone(),
            body,
            created_at_ms: now,
        };
        let appended = self
            .host
            .store
            .append_transcript_once(&self.mind.id, token, &attempt.key, &item)
            .await?;
        if !appended.created {
            tracing::info!(
                mind = %self.mind.id,
                key = %attempt.key,
                seq = appended.seq,
                "the {} was recorded already (its commit's answer was lost): not again",
                kind.as_str()
            );
        }
        attempt.unrecorded = None;
        attempt.recorded = Some(appended.seq);
        self.host.crash_points.reached(recorded);
        Ok(())
    }

    /// Marks a recorded brief as about to be sent: an item after the brief's (a `notice` whose
    /// body is `{"asked": <seq>}`, which no renderer shows), appended under the attempt's key
    /// (`<key> asked`) so a retry after a lost answer adds nothing. What it proves is its
    /// absence: a brief whose item still ends the Self transcript was never sent, and the next
    /// holder may run it (`stranded.rs`); a brief followed by its mark may have been — a Claude
    /// Code run records nothing until it ends, though its tools may have edited files — and is
    /// never run again. A no-op for a Persona batch, and once the store confirmed the mark.
    pub(super) async fn mark_asked(
        &self,
        attempt: &mut Attempt,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        if !attempt.unmarked {
            return Ok(());
        }
        let item = NewTranscriptItem {
            role: attempt.role,
            segment: attempt.segment,
            kind: TranscriptKind::Notice,
            body: serde_json::json!({ "asked": attempt.max_seq }),
            created_at_ms: now,
        };
        let key = format!("{} {ASKED}", attempt.key);
        self.host
            .store
            .append_transcript_once(&self.mind.id, token, &key, &item)
            .await?;
        attempt.unmarked = false;
        Ok(())
    }

    /// Before a clean shutdown lets the lease go: a held brief whose ask mark may have landed
    /// unconfirmed was never sent ([`HeldBrief::unsent_behind_its_mark`]), which only this
    /// runner knows. A notice after its mark (`{"unasked": <seq>}`, under the brief's key plus
    /// ` unasked`) says so, and the next holder runs the brief as one never asked, rather than
    /// fail it as a run that may have acted (`stranded.rs`). A failure is logged, saying both
    /// outcomes: a notice refused leaves the mark last, and the next holder fails the brief as
    /// interrupted, as it would without the notice; one that landed though its answer was lost
    /// is found last, and the next holder runs the brief.
    pub(super) async fn take_mark_back(&self, now: i64) {
        let Some(token) = self.lease.as_ref().map(|l| l.token) else {
            return;
        };
        let Some(held) = &self.held_brief else {
            return;
        };
        let Some(unsent) = held.unsent_behind_its_mark() else {
            return;
        };
        let seq = unsent.brief;
        let item = NewTranscriptItem {
            role: Role::SelfRole,
            segment: unsent.segment,
            kind: TranscriptKind::Notice,
            body: serde_json::json!({ UNASKED: seq }),
            created_at_ms: now,
        };
        let key = format!("{} {UNASKED}", unsent.key);
        let store = &self.host.store;
        if let Err(e) = store
            .append_transcript_once(&self.mind.id, token, &key, &item)
            .await
        {
            tracing::warn!(mind = %self.mind.id, brief = seq, error = %e, "a brief never sent could not be confirmed marked so: if the notice landed (its answer lost), the next holder runs the brief as never asked; if it did not, the next holder fails the brief as interrupted");
        }
    }

    /// The message to re-send for `batch`, when the open segment already holds its delivery (or
    /// its append is unconfirmed: [`Self::record_attempt`] finishes it) and the session is as
    /// it was when it failed (live, and not about to be refreshed). `None`: render and record
    /// it afresh — the attempt is dropped, and an unconfirmed append that did land stays in its
    /// segment unanswered, which the session is leaving (a refresh or a rebuild), as a recorded
    /// attempt's delivery does.
    pub(super) fn resend(&mut self, batch: &str, refreshes: bool) -> Option<String> {
        let attempt = self.attempt.take()?;
        let same = attempt.batch == batch
            && Some(attempt.segment) == self.persona.segment
            && self.persona.live()
            && !refreshes;
        if !same {
            return None;
        }
        let text = attempt.text.clone();
        self.attempt = Some(attempt);
        Some(text)
    }
}

/// Distinct failures an attempt remembers (`Attempt::failed_with`): more than an outage's
/// alternating errors ever are, few enough that comparing with them all is nothing.
const DISTINCT_ERRORS_KEPT: usize = 16;

/// The body key of the notice that marks a brief as about to be sent ([`MindRunner::mark_asked`]).
pub(super) const ASKED: &str = "asked";

/// The body key of the notice that takes a brief's ask mark back: the brief was never sent
/// ([`MindRunner::take_mark_back`]).
pub(super) const UNASKED: &str = "unasked";

/// The body key of a brief's item recorded by a host that marks its asks (`true`): only such
/// an item, unmarked, proves its brief was never sent (`stranded.rs`).
pub(super) const MARKS: &str = "marks_asked";

/// A claimed Self brief this runner runs at its next step, rather than leaving it to the
/// stranded-brief recovery to fail (`stranded.rs`).
#[derive(Debug, Clone)]
pub(super) struct HeldBrief {
    pub(super) brief: Brief,
    /// Its rendering and plan, when its append is unconfirmed on the session it was rendered
    /// on: the retry finishes that append and runs the brief as planned. `None`: the brief's
    /// item ends the Self transcript, never answered, on a session since given up (the step
    /// after a crash or a takeover found it): it is planned, rendered and recorded afresh.
    pub(super) attempt: Option<(Attempt, Plan)>,
    /// An earlier item of the brief this runner recorded and never sent, its ask mark
    /// unconfirmed: kept until an item of the brief is confirmed recorded afresh. Without it a
    /// brief the recovery held under a new lease (`attempt: None`) would forget, at the next
    /// lease change or a clean shutdown, that the mark ending the Self transcript is its own,
    /// and the brief would be failed as one that may have acted (`stranded.rs`).
    pub(super) unsent: Option<Unsent>,
}

/// A brief this runner recorded and never sent, its ask mark unconfirmed
/// ([`HeldBrief::unsent_behind_its_mark`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unsent {
    /// The brief's seq.
    pub(super) brief: i64,
    /// The Self transcript seq of the brief's item this runner recorded: its mark, if it
    /// landed, is the item right after it. A mark anywhere else is another holder's, written
    /// when it ran the brief afresh (a new item, then its mark), and may have been followed by
    /// the brief's sending (`stranded.rs`).
    pub(super) item: i64,
    /// The key that item was appended under: the notice taking its mark back is appended under
    /// it plus ` unasked` ([`MindRunner::take_mark_back`]), once.
    pub(super) key: String,
    /// The segment the notice goes in: the one the brief was last rendered in.
    pub(super) segment: i64,
}

impl HeldBrief {
    /// The brief, when this runner recorded an item of it and its ask mark is unconfirmed: the
    /// mark may have landed (its answer lost), yet this runner never sent the brief — it is
    /// sent only once its mark is confirmed. A mark ending the Self transcript tells any other
    /// reader that the brief may have been sent; this runner knows better of its own mark
    /// (`stranded.rs`). The item is the last one confirmed: the attempt's, else the one
    /// carried from before ([`HeldBrief::unsent`]) — a new item whose append is unconfirmed
    /// either did not land (that mark is still last) or did (it is last, never asked).
    pub(super) fn unsent_behind_its_mark(&self) -> Option<Unsent> {
        let Some((attempt, _)) = &self.attempt else {
            return self.unsent.clone();
        };
        match attempt.recorded {
            Some(item) => attempt.unmarked.then(|| Unsent {
                brief: self.brief.seq,
                item,
                key: attempt.key.clone(),
                segment: attempt.segment,
            }),
            None => self.unsent.clone().map(|unsent| Unsent {
                segment: attempt.segment,
                ..unsent
            }),
        }
    }
}
