//! A store whose commits fail on demand: the real store behind it, and the next N turn commits
//! ([`Store::record_turn`]) and ledger appends ([`Store::append_ledger`]) refused with
//! [`StoreError::Unavailable`] — a full disk, a busy SQLite file, a PostgreSQL server gone — as
//! a test arms it ([`FaultyStore::fail_commits`]); likewise the next N transcript tail reads
//! ([`Store::transcript_tail`], [`FaultyStore::fail_reads`]), the read a Self flush makes
//! between its answer and its commit, the next N ledger reads ([`Store::ledger`],
//! [`FaultyStore::fail_ledger_reads`]), the read a new lease restores its accounting from, and
//! the next N spend reads ([`Store::spend`], [`FaultyStore::fail_spend_reads`]), what the spend
//! cap is checked with before a request.
//! The next N intake batches ([`Store::post_batch`], [`FaultyStore::fail_batches`]: what a
//! transport commits its mail and sync position with) can be refused the same way, and the
//! next N reads of how far behind a Mind is ([`Store::ack_position`], [`Store::mailbox`],
//! [`FaultyStore::fail_ack_position_reads`]: what a transport asks before it reads on) and of
//! outbox acks ([`Store::ack_outbox`], [`FaultyStore::fail_outbox_acks`]: what a transport
//! records a sent message with). The settings reads after the next K can be refused too
//! ([`Store::settings`], [`FaultyStore::fail_settings_reads_after`]: what a Self tool loop reads
//! its spend cap with, between a request's answer and its commit).
//! The next N segment starts ([`Store::start_segment`], [`FaultyStore::fail_segment_starts`]:
//! what a refresh or a rebuilt session opens its new segment with) can be refused too.
//! The next N transcript appends made on their own ([`Store::append_transcript`],
//! [`Store::append_transcript_once`], [`FaultyStore::lose_append_answers`], after K let through
//! [`FaultyStore::lose_append_answers_after`]) can instead land and
//! then answer [`StoreError::Unavailable`]: a commit whose answer was lost; or be refused
//! before they land ([`FaultyStore::refuse_appends`], after K let through
//! [`FaultyStore::refuse_appends_after`]).
//! The next N turn commits can land and then answer [`StoreError::Unavailable`] too
//! ([`FaultyStore::lose_commit_answers`]: the `COMMIT` went through, its answer never came;
//! after K let through [`FaultyStore::lose_commit_answers_after`]), and be followed by refusals ([`FaultyStore::fail_commits_after`]: the store gone when the
//! commit is tried again).
//! The next N commits can instead be refused for good
//! ([`FaultyStore::fail_commits_for_good`]: [`StoreError::Invalid`], which no retry changes),
//! or only those holding a failed attempt's row ([`FaultyStore::refuse_cut_rows_for_good`]).
//! The next N whole-delivery reads of one Mind can panic instead of answering
//! ([`FaultyStore::panic_pending_reads`]: a bug in the code under a runner's step, which takes
//! the Mind's task down with it), and so can the next N renewals of every lease a host holds
//! ([`FaultyStore::panic_lease_renewals`]: a bug under the host's lease renewal, a task beside
//! the Minds; [`Store::renew_leases`] calls are counted, [`FaultyStore::lease_renewals`]), the
//! next N turn commits ([`FaultyStore::panic_commits`]: a bug under a runner's step between a
//! request's answer and its commit), and the next N cursor reads ([`Store::cursor`], [`FaultyStore::panic_cursor_reads`]: a bug under
//! a Matrix account's sync loop).
//! Reads of a Mind's mailbox ([`Store::mailbox`]: what a Matrix account asks right before each
//! `/sync`) can be held until released ([`FaultyStore::hold_mailbox_reads`]), so a test can act
//! at a known point before a sync is asked, without a sleep; and so can the reads of one named
//! cursor ([`FaultyStore::hold_cursor_reads`]: a Matrix account's first answer, read and held
//! before the questions it asks after it).
//! Everything else passes through, so a test can fault exactly the call that follows a
//! backend's answer.
//!
//! A refused call writes nothing (the store's contract for an `Err`), and every call is counted,
//! so a test can tell how often the runner tried; whole-delivery reads
//! ([`Store::pending_deliveries`], [`FaultyStore::pending_reads`]) are counted too.

use muninn_store::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

mod forward;

/// A store that refuses its next N commits (see the module docs).
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    /// Commits to let through before refusing any (`failing`).
    passing_commits: AtomicU32,
    /// Commits still to refuse.
    failing: AtomicU32,
    /// Commits still to refuse with an error no retry changes.
    failing_for_good: AtomicU32,
    /// Transcript tail reads still to refuse.
    failing_reads: AtomicU32,
    /// Ledger reads still to refuse.
    failing_ledger_reads: AtomicU32,
    /// Spend reads still to refuse.
    failing_spend_reads: AtomicU32,
    /// Intake batches to let through before refusing any.
    passing_batches: AtomicU32,
    /// Intake batches still to refuse, once those have passed.
    failing_batches: AtomicU32,
    /// Ack position reads still to refuse.
    failing_ack_position_reads: AtomicU32,
    /// Outbox acks still to refuse.
    failing_outbox_acks: AtomicU32,
    /// Transcript appends to let through before losing any answer (`losing_append_answers`).
    passing_appends: AtomicU32,
    /// Transcript appends still to land with their answer lost.
    losing_append_answers: AtomicU32,
    /// Turn commits to let through before losing any answer (`losing_commit_answers`).
    passing_lost_commits: AtomicU32,
    /// Turn commits still to land with their answer lost.
    losing_commit_answers: AtomicU32,
    /// Turn commits holding a failed attempt's row still to refuse for good.
    refusing_cut_rows: AtomicU32,
    /// Transcript appends to let through before refusing any (`refusing_appends`).
    passing_refused_appends: AtomicU32,
    /// Transcript appends still to refuse.
    refusing_appends: AtomicU32,
    /// Segment starts still to refuse.
    failing_segment_starts: AtomicU32,
    /// Settings reads to let through before refusing any.
    passing_settings_reads: AtomicU32,
    /// Settings reads still to refuse, once those have passed.
    failing_settings_reads: AtomicU32,
    /// Commits refused so far.
    refused: AtomicU32,
    /// Commits let through so far.
    committed: AtomicU32,
    /// `pending_deliveries` calls so far.
    pending_reads: AtomicU32,
    /// The Mind whose `pending_deliveries` calls panic, and how many still will.
    panicking_pending_reads: std::sync::Mutex<Option<(String, u32)>>,
    /// `renew_leases` calls so far.
    lease_renewals: AtomicU32,
    /// `renew_leases` calls still to panic.
    panicking_lease_renewals: AtomicU32,
    /// `cursor` calls still to panic.
    panicking_cursor_reads: AtomicU32,
    /// Turn commits still to panic.
    panicking_commits: AtomicU32,
    /// Whether `mailbox` calls wait (until it turns false).
    holding_mailbox_reads: tokio::sync::watch::Sender<bool>,
    /// `mailbox` calls that met the hold so far.
    held_mailbox_reads: AtomicU32,
    /// The cursor whose `cursor` calls wait (until it turns `None`).
    holding_cursor_reads: tokio::sync::watch::Sender<Option<String>>,
    /// `cursor` calls that met the hold so far.
    held_cursor_reads: AtomicU32,
}

impl FaultyStore {
    /// `inner`, faultless until armed.
    pub fn new(inner: Arc<dyn Store>) -> Arc<FaultyStore> {
        Arc::new(FaultyStore {
            inner,
            failing: AtomicU32::new(0),
            failing_for_good: AtomicU32::new(0),
            failing_reads: AtomicU32::new(0),
            passing_commits: AtomicU32::new(0),
            failing_ledger_reads: AtomicU32::new(0),
            failing_spend_reads: AtomicU32::new(0),
            passing_batches: AtomicU32::new(0),
            failing_batches: AtomicU32::new(0),
            failing_ack_position_reads: AtomicU32::new(0),
            failing_outbox_acks: AtomicU32::new(0),
            passing_appends: AtomicU32::new(0),
            losing_append_answers: AtomicU32::new(0),
            passing_lost_commits: AtomicU32::new(0),
            losing_commit_answers: AtomicU32::new(0),
            refusing_cut_rows: AtomicU32::new(0),
            passing_refused_appends: AtomicU32::new(0),
            refusing_appends: AtomicU32::new(0),
            failing_segment_starts: AtomicU32::new(0),
            passing_settings_reads: AtomicU32::new(0),
            failing_settings_reads: AtomicU32::new(0),
            refused: AtomicU32::new(0),
            committed: AtomicU32::new(0),
            pending_reads: AtomicU32::new(0),
            panicking_pending_reads: std::sync::Mutex::new(None),
            lease_renewals: AtomicU32::new(0),
            panicking_lease_renewals: AtomicU32::new(0),
            panicking_cursor_reads: AtomicU32::new(0),
            panicking_commits: AtomicU32::new(0),
            holding_mailbox_reads: tokio::sync::watch::channel(false).0,
            held_mailbox_reads: AtomicU32::new(0),
            holding_cursor_reads: tokio::sync::watch::channel(None).0,
            held_cursor_reads: AtomicU32::new(0),
        })
    }

    /// Refuses the next `n` commits (`record_turn`, `append_ledger`).
    pub fn fail_commits(&self, n: u32) {
        self.passing_commits.store(0, Ordering::SeqCst);
        self.failing.store(n, Ordering::SeqCst);
    }

    /// Lets the next `pass` commits through (a lost answer, [`Self::lose_commit_answers`],
    /// still applies to them), then refuses `n` as [`fail_commits`](Self::fail_commits) does:
    /// a commit that lands unanswered, and the store gone when it is tried again.
    pub fn fail_commits_after(&self, pass: u32, n: u32) {
        self.passing_commits.store(pass, Ordering::SeqCst);
        self.failing.store(n, Ordering::SeqCst);
    }

    /// Lets the next `n` transcript appends made on their own (`append_transcript`,
    /// `append_transcript_once`) commit, then answers each with [`StoreError::Unavailable`]
    /// as if the commit's answer were lost (a deadline passed after `COMMIT` was sent).
    pub fn lose_append_answers(&self, n: u32) {
        self.passing_appends.store(0, Ordering::SeqCst);
        self.losing_append_answers.store(n, Ordering::SeqCst);
    }

    /// Lets the next `pass` transcript appends made on their own through, then loses the
    /// answers of `n` as [`lose_append_answers`](Self::lose_append_answers) does: a brief's
    /// append answered, and its ask mark's answer lost.
    pub fn lose_append_answers_after(&self, pass: u32, n: u32) {
        self.passing_appends.store(pass, Ordering::SeqCst);
        self.losing_append_answers.store(n, Ordering::SeqCst);
    }

    /// Lets the next `n` turn commits (`record_turn`) land, then answers each with
    /// [`StoreError::Unavailable`] as if the commit's answer were lost.
    pub fn lose_commit_answers(&self, n: u32) {
        self.passing_lost_commits.store(0, Ordering::SeqCst);
        self.losing_commit_answers.store(n, Ordering::SeqCst);
    }

    /// Lets the next `pass` turn commits through answered, then loses the answers of `n` as
    /// [`lose_commit_answers`](Self::lose_commit_answers) does: a tool loop's request
    /// committed, and its run's end landing unanswered.
    pub fn lose_commit_answers_after(&self, pass: u32, n: u32) {
        self.passing_lost_commits.store(pass, Ordering::SeqCst);
        self.losing_commit_answers.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` transcript appends made on their own (`append_transcript`,
    /// `append_transcript_once`) with [`StoreError::Unavailable`], writing nothing.
    pub fn refuse_appends(&self, n: u32) {
        self.passing_refused_appends.store(0, Ordering::SeqCst);
        self.refusing_appends.store(n, Ordering::SeqCst);
    }

    /// Lets the next `pass` transcript appends made on their own through, then refuses `n` as
    /// [`refuse_appends`](Self::refuse_appends) does: a brief's append answered, and its ask
    /// mark refused before it landed.
    pub fn refuse_appends_after(&self, pass: u32, n: u32) {
        self.passing_refused_appends.store(pass, Ordering::SeqCst);
        self.refusing_appends.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` turn commits (`record_turn`) that hold a failed attempt's row
    /// (decision `attempt_failed`) with [`StoreError::Invalid`], writing nothing; other
    /// commits pass. A row the store will never take, met again at every retry.
    pub fn refuse_cut_rows_for_good(&self, n: u32) {
        self.refusing_cut_rows.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` commits with [`StoreError::Invalid`]: a refusal no retry can
    /// change, so the runner abandons what it was committing.
    pub fn fail_commits_for_good(&self, n: u32) {
        self.failing_for_good.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` transcript tail reads (`transcript_tail`); they are not counted
    /// as commits.
    pub fn fail_reads(&self, n: u32) {
        self.failing_reads.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` ledger reads (`ledger`: what a new lease restores a session's
    /// accounting from); they are not counted as commits.
    pub fn fail_ledger_reads(&self, n: u32) {
        self.failing_ledger_reads.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` spend reads (`spend`: what the spend cap is checked with before a
    /// request); they are not counted as commits.
    pub fn fail_spend_reads(&self, n: u32) {
        self.failing_spend_reads.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` intake batches (`post_batch`) with [`StoreError::Unavailable`];
    /// they count as refused commits. `0` disarms.
    pub fn fail_batches(&self, n: u32) {
        self.failing_batches.store(n, Ordering::SeqCst);
    }

    /// Lets the next `pass` intake batches through, then refuses `n` as
    /// [`fail_batches`](Self::fail_batches) does: a commit that lands, and the one after it
    /// that does not (a crash between two answers).
    pub fn fail_batches_after(&self, pass: u32, n: u32) {
        self.passing_batches.store(pass, Ordering::SeqCst);
        self.failing_batches.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` reads of how far behind the Mind is (`ack_position`, `mailbox`);
    /// they are not counted as commits. `0` disarms.
    pub fn fail_ack_position_reads(&self, n: u32) {
        self.failing_ack_position_reads.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` outbox acks (`ack_outbox`) with [`StoreError::Unavailable`]; they
    /// count as refused commits. `0` disarms.
    pub fn fail_outbox_acks(&self, n: u32) {
        self.failing_outbox_acks.store(n, Ordering::SeqCst);
    }

    /// Lets the next `pass` settings reads (`settings`) through, then refuses `n` with
    /// [`StoreError::Unavailable`]; they are not counted as commits.
    pub fn fail_settings_reads_after(&self, pass: u32, n: u32) {
        self.passing_settings_reads.store(pass, Ordering::SeqCst);
        self.failing_settings_reads.store(n, Ordering::SeqCst);
    }

    /// Refuses the next `n` segment starts (`start_segment`) with [`StoreError::Unavailable`],
    /// writing nothing; they count as refused commits.
    pub fn fail_segment_starts(&self, n: u32) {
        self.failing_segment_starts.store(n, Ordering::SeqCst);
    }

    /// Commits refused so far.
    pub fn refused(&self) -> u32 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Commits let through so far.
    pub fn committed(&self) -> u32 {
        self.committed.load(Ordering::SeqCst)
    }

    /// Makes the next `n` `pending_deliveries` calls for `mind` panic (every other Mind's pass
    /// through): what a bug under a runner's step does to the Mind's task. `0` disarms.
    pub fn panic_pending_reads(&self, mind: &str, n: u32) {
        *self.panicking() = Some((mind.to_owned(), n));
    }

    /// Makes the next `n` `renew_leases` calls (the host's renewal of all its leases) panic.
    /// `0` disarms.
    pub fn panic_lease_renewals(&self, n: u32) {
        self.panicking_lease_renewals.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` turn commits (`record_turn`) panic before they reach the store: a bug
    /// under a runner's step between a request's answer and its commit. `0` disarms.
    pub fn panic_commits(&self, n: u32) {
        self.panicking_commits.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` `cursor` calls panic: a bug under a transport's sync loop (the
    /// Matrix ear reads its sync position first), which takes the account's task down.
    pub fn panic_cursor_reads(&self, n: u32) {
        self.panicking_cursor_reads.store(n, Ordering::SeqCst);
    }

    /// Makes every `mailbox` call wait until [`release_mailbox_reads`](Self::release_mailbox_reads):
    /// a Matrix account held just before it asks its next `/sync`.
    pub fn hold_mailbox_reads(&self) {
        self.holding_mailbox_reads.send_replace(true);
    }

    /// Lets the held `mailbox` calls (and every later one) through.
    pub fn release_mailbox_reads(&self) {
        self.holding_mailbox_reads.send_replace(false);
    }

    /// `mailbox` calls that met the hold so far (waiting or since let through).
    pub fn held_mailbox_reads(&self) -> u32 {
        self.held_mailbox_reads.load(Ordering::SeqCst)
    }

    /// Makes every read of the cursor `name` wait until
    /// [`release_cursor_reads`](Self::release_cursor_reads).
    pub fn hold_cursor_reads(&self, name: &str) {
        self.holding_cursor_reads
            .send_replace(Some(name.to_owned()));
    }

    /// Lets the held cursor reads (and every later one) through.
    pub fn release_cursor_reads(&self) {
        self.holding_cursor_reads.send_replace(None);
    }

    /// Cursor reads that met the hold so far (waiting or since let through).
    pub fn held_cursor_reads(&self) -> u32 {
        self.held_cursor_reads.load(Ordering::SeqCst)
    }

    /// `renew_leases` calls so far, the ones that panicked included.
    pub fn lease_renewals(&self) -> u32 {
        self.lease_renewals.load(Ordering::SeqCst)
    }

    fn panicking(&self) -> std::sync::MutexGuard<'_, Option<(String, u32)>> {
        self.panicking_pending_reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `pending_deliveries` calls (whole deliveries read) so far.
    pub fn pending_reads(&self) -> u32 {
        self.pending_reads.load(Ordering::SeqCst)
    }

    /// Whether this commit is refused (and counts it either way).
    fn refuse(&self) -> Result<()> {
        if armed(&self.failing_for_good) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Invalid(
                "injected: a row the store will never take".into(),
            ));
        }
        if !armed(&self.passing_commits) && armed(&self.failing) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(injected("database or disk is full"));
        }
        self.committed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Whether `failing` still counts down (and counts this call off).
fn armed(failing: &AtomicU32) -> bool {
    failing
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// The error a refused call returns: what a store that went away returns.
fn injected(what: &str) -> StoreError {
    StoreError::Unavailable(format!("injected: {what}"))
}
