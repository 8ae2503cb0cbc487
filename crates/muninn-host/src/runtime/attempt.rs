//! A Persona batch recorded but not yet answered: what a retry re-sends instead of recording
//! the delivery again (the policy is stated in `retry.rs`).

use super::MindRunner;
use muninn_backend::Backend;
use muninn_store::Delivery;

/// The batch whose delivery the open segment's transcript holds, unanswered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attempt {
    /// The batch's id (`<mind>-<first seq>-<max seq>`).
    batch: String,
    /// The batch's last delivery.
    max_seq: i64,
    /// The segment its delivery was recorded in.
    segment: i64,
    /// The user message as rendered and recorded: re-sent byte for byte.
    text: String,
    /// The last failure's text, so a run of identical failures leaves one notice.
    last_error: Option<String>,
}

impl Attempt {
    /// A batch (through `max_seq`) just recorded in `segment` as `text`.
    pub(super) fn new(batch: &str, max_seq: i64, segment: i64, text: &str) -> Attempt {
        Attempt {
            batch: batch.to_string(),
            max_seq,
            segment,
            text: text.to_string(),
            last_error: None,
        }
    }

    /// Notes a failure; whether it differs from the previous one (and so is worth a notice in
    /// the transcript: an hour of 401s is one notice, not one per retry).
    pub(super) fn failed_with(&mut self, error: &str) -> bool {
        let new = self.last_error.as_deref() != Some(error);
        self.last_error = Some(error.to_string());
        new
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

    /// The message to re-send for `batch`, when the open segment already holds its delivery and
    /// the session is as it was when it failed (live, and not about to be refreshed). `None`:
    /// render and record it afresh.
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
