//! The storage contract of `muninn serve`.
//!
//! One trait, [`Store`], implemented by every backend and checked by one suite,
//! `muninn_testkit::run_conformance` (in the dev-only test kit). The host holds an
//! `Arc<dyn Store>` and never knows which database is behind it.
//!
//! ## Contract
//!
//! - **Durable on return.** A mutator that returns `Ok` has committed; a crash after it loses
//!   nothing. A mutator that returns `Err` wrote nothing (every mutator is one transaction).
//! - **Fenced writes.** Methods taking a [`FencingToken`] are the ones the host calls while it
//!   runs a Mind. Each checks, inside its own transaction, that the token is the Mind's current
//!   lease token and fails with [`StoreError::Fenced`](crate::StoreError::Fenced) otherwise, so a
//!   host that lost its lease cannot write even one row after the new holder's first.
//!   Methods without a token are intake, transport or operator actions (deliveries, outbox
//!   acks, operator briefs, settings) that any host may perform.
//! - **Append-only.** Transcript, deliveries and the ledger have no update or delete method;
//!   their seqs (and ledger ids) only grow. Transcript, delivery and brief seqs are 1-based and
//!   gap-free per Mind (per role for the transcript), including under concurrent writers.
//! - **Idempotent intake and output.** A delivery's `source_id` and an outbox message's
//!   `request_id` are unique per Mind; repeating one returns the existing row and adds nothing.
//! - **A transport's position moves with its intake.** [`Store::post_batch`] writes a batch of
//!   deliveries and the transport's cursor (a Matrix sync token) in one transaction, so a
//!   position is never stored past a delivery that is not.
//! - **Monotonic ack.** The mailbox ack position never moves backwards.
//! - **No clock.** Every time is a Unix-ms argument.
//! - **Text without NUL.** A U+0000 in any text the store writes or looks up (a delivery, a
//!   reply, a key) is dropped, on every backend alike: PostgreSQL cannot keep one in text.

use async_trait::async_trait;
use muninn_core::ledger::LedgerRow;
use muninn_core::money::MicroUsd;

use crate::error::Result;
use crate::types::*;

/// The durable state of the host. See the [module docs](self) for the contract.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Which backend this is (`sqlite`, `postgres`), for logs and status.
    fn backend(&self) -> &'static str;

    /// The schema version the database is at (the newest applied migration).
    async fn schema_version(&self) -> Result<i64>;

    /// Closes the connection pool; later calls fail with `Unavailable`.
    async fn close(&self);

    // ----- Minds -----

    /// Creates a Mind. If the id exists, returns the stored Mind unchanged (idempotent).
    async fn create_mind(&self, mind: &Mind) -> Result<Mind>;
    /// The Mind with this id.
    async fn mind(&self, id: &str) -> Result<Option<Mind>>;
    /// All Minds, by id in byte order (the same on every backend, whatever the database's
    /// collation).
    async fn minds(&self) -> Result<Vec<Mind>>;
    /// Replaces a Mind's display name and config (operator action). `NotFound` if unknown.
    async fn update_mind(
        &self,
        id: &str,
        display_name: &str,
        config: &serde_json::Value,
    ) -> Result<Mind>;

    // ----- Settings -----

    /// The Mind's settings (defaults if never set). `NotFound` if the Mind is unknown.
    async fn settings(&self, mind: &str) -> Result<MindSettings>;
    /// Sets the Mind's caps and leaves its brake as it is, in one statement (operator action;
    /// not fenced): a caps edit racing the brake can neither release nor set it. With
    /// `expected`, a compare-and-set: the caps are written only if they are still `expected`
    /// ([`CapsWrite::Changed`] otherwise, nothing written), checked and written in one
    /// transaction that holds the Mind's caps against every other `put_caps` — of two concurrent
    /// writes expecting the same caps, one is written and the other sees them changed.
    async fn put_caps(
        &self,
        mind: &str,
        caps: &Caps,
        expected: Option<&Caps>,
        now_ms: i64,
    ) -> Result<CapsWrite>;
    /// Sets the Mind's brake and leaves its caps as they are, in one statement (operator
    /// action; not fenced).
    async fn put_brake(&self, mind: &str, brake: bool, now_ms: i64) -> Result<()>;

    // ----- Leases -----

    /// Takes the Mind's lease for `ttl_ms` if it is free, released or expired at `now_ms`
    /// (a new, strictly greater token), or renews it if `holder` already holds it (same
    /// token). `None` if another holder's lease is live. `NotFound` if the Mind is unknown.
    async fn acquire_lease(
        &self,
        mind: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>>;
    /// Extends the lease to `now_ms + ttl_ms`; `Fenced` unless `token` is current.
    async fn renew_lease(
        &self,
        mind: &str,
        token: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Lease>;
    /// Extends every lease `holder` holds to `now_ms + ttl_ms` in one statement — the host's
    /// renewal, one per host instead of one per Mind — and returns them, by Mind. A lease another
    /// holder took over (or that was released) is not `holder`'s and is left alone, so this
    /// cannot revive a fenced token; an expired lease still held is renewed, as
    /// [`renew_lease`](Store::renew_lease) does (nobody acquired it in between). `Invalid` for a
    /// ttl ≤ 0.
    async fn renew_leases(&self, holder: &str, ttl_ms: i64, now_ms: i64) -> Result<Vec<Lease>>;
    /// Gives the lease up; the next acquire gets a newer token. `Fenced` unless current.
    async fn release_lease(&self, mind: &str, token: FencingToken) -> Result<()>;
    /// The Mind's held lease (possibly expired), if any.
    async fn lease(&self, mind: &str) -> Result<Option<Lease>>;
    /// Takes the Mind's lease from a holder the caller has *proven gone* (its presence lock is
    /// free, or it was this host's own previous process), live or not: a new, strictly greater
    /// token, if and only if the current token is still `previous` (compare-and-set, so two
    /// hosts taking over at once get one lease between them). `None` if the lease moved on.
    /// The old holder's writes are fenced from then on. `NotFound` if the Mind is unknown.
    async fn take_over_lease(
        &self,
        mind: &str,
        holder: &str,
        previous: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>>;

    // ----- Hosts on one database (see `crate::hosts`) -----

    /// Tells every host on the database that something arrived for `mind` (PostgreSQL
    /// `NOTIFY`; nothing on SQLite). `from` is the sender's holder name.
    async fn announce_wake(&self, mind: &str, from: &str) -> Result<()>;
    /// A listener for [`Store::announce_wake`]s on a connection of its own; `None` where the
    /// backend has none (SQLite).
    async fn listen_wakes(&self) -> Result<Option<crate::WakeListener>>;
    /// Holds (or re-checks and re-takes) the presence lock for `holder` on a dedicated session
    /// until [`Store::close`]; call it again periodically to repair a broken session. `false`
    /// where the backend has no presence (SQLite). `Busy` if another session holds it.
    async fn hold_presence(&self, holder: &str) -> Result<bool>;
    /// Whether `holder`'s presence lock is free now (`Some(true)`: its host is gone), or `None`
    /// where the backend cannot tell (SQLite).
    async fn holder_gone(&self, holder: &str) -> Result<Option<bool>>;
    /// Completes once `holder`'s presence lock is free (at once if it is), blocking on a
    /// dedicated session: `true`. `false` at once where the backend cannot tell (SQLite).
    async fn await_holder_gone(&self, holder: &str) -> Result<bool>;

    // ----- Segments -----

    /// Opens the role's next segment (number = previous + 1, from 0), ending the open one at
    /// `started_at_ms`. Fenced.
    async fn start_segment(
        &self,
        mind: &str,
        token: FencingToken,
        segment: &NewSegment,
    ) -> Result<Segment>;
    /// Records the provider session id of a segment once it is known. Fenced.
    async fn set_segment_session(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        session_id: &str,
    ) -> Result<Segment>;
    /// Ends a segment (idempotent: an ended segment keeps its first end time). Fenced.
    async fn end_segment(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        ended_at_ms: i64,
    ) -> Result<Segment>;
    /// The role's newest segment, open or not.
    async fn current_segment(&self, mind: &str, role: Role) -> Result<Option<Segment>>;
    /// The role's segments, oldest first.
    async fn segments(&self, mind: &str, role: Role) -> Result<Vec<Segment>>;
    /// The role's newest `limit` segments numbered below `before` (all of them without it),
    /// oldest first: the page a caller that shows them reads (a Mind that has lived long has
    /// thousands, each with its memory layer), and with `before` = the oldest number of a page,
    /// the page before it. This default reads every segment; the SQL backends read only the
    /// page.
    async fn newest_segments(
        &self,
        mind: &str,
        role: Role,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Segment>> {
        let mut segments = self.segments(mind, role).await?;
        segments.retain(|s| before.is_none_or(|before| s.number < before));
        let keep = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        segments.drain(..segments.len().saturating_sub(keep));
        Ok(segments)
    }

    // ----- Transcript -----

    /// Appends items in order and returns their seqs. Fenced.
    async fn append_transcript(
        &self,
        mind: &str,
        token: FencingToken,
        items: &[NewTranscriptItem],
    ) -> Result<Vec<i64>>;
    /// Appends one item under `key`, once: a key the Mind's transcript already recorded for the
    /// item's role adds nothing and answers the seq it got then, with `created: false`. Keys are
    /// per role: the same key used by the other role is another item (the Persona's retry never
    /// answers the Self's seq, nor the reverse). The key and the item
    /// commit together, so a retry after a commit whose answer was lost (the call's deadline
    /// passed, the connection dropped after `COMMIT` was sent) cannot append the item twice.
    /// The key names the item: the first append under it wins. Fenced.
    async fn append_transcript_once(
        &self,
        mind: &str,
        token: FencingToken,
        key: &str,
        item: &NewTranscriptItem,
    ) -> Result<Appended>;
    /// Items of (mind, role) with `from_seq <= seq < to_seq`, ascending, at most `limit`.
    async fn transcript_range(
        &self,
        mind: &str,
        role: Role,
        from_seq: i64,
        to_seq: Option<i64>,
        limit: i64,
    ) -> Result<Vec<TranscriptItem>>;
    /// The last `count` items of (mind, role), ascending.
    async fn transcript_tail(
        &self,
        mind: &str,
        role: Role,
        count: i64,
    ) -> Result<Vec<TranscriptItem>>;

    // ----- Mailbox -----

    /// Puts a delivery in the Mind's mailbox; the same `source_id` again returns the existing
    /// seq with `created: false`. Not fenced (intake). `NotFound` if the Mind is unknown.
    async fn post_delivery(&self, mind: &str, delivery: &NewDelivery) -> Result<Posted>;
    /// Posts a transport's batch of deliveries and moves its named cursor, in one transaction:
    /// both or neither. Each delivery is intake as by [`post_delivery`](Store::post_delivery)
    /// (a known source id, in the mailbox or earlier in the batch, adds nothing and answers
    /// `created: false`), in order; the cursor is written last, so a crash or an error at any
    /// point leaves the mailbox and the cursor as they were, and the transport re-reads the
    /// same batch. Returns one [`Posted`] per delivery. Not fenced (intake). `NotFound` if the
    /// Mind is unknown; `Invalid` for an empty cursor name or a value over
    /// [`CURSOR_MAX_BYTES`].
    async fn post_batch(&self, mind: &str, batch: &IntakeBatch) -> Result<Vec<Posted>>;
    /// The Mind's cursor called `name`, if one was ever written.
    async fn cursor(&self, mind: &str, name: &str) -> Result<Option<Cursor>>;
    /// Writes `cursor` unless the Mind already has one by its name, and returns the one stored
    /// (the earlier, if there was one): a position that must never move once written (the
    /// Matrix first start's), written by whichever of two hosts comes first. Not fenced
    /// (intake). `NotFound` if the Mind is unknown; `Invalid` as for
    /// [`post_batch`](Store::post_batch)'s cursor.
    async fn first_cursor(&self, mind: &str, cursor: &NewCursor) -> Result<Cursor>;
    /// Deliveries with `seq > after_seq`, ascending, at most `limit`.
    async fn pending_deliveries(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<Delivery>>;
    /// The mailbox ack position (0 before any ack).
    async fn ack_position(&self, mind: &str) -> Result<i64>;
    /// How much mail waits past the ack position: one count and the oldest arrival, for
    /// metrics and status (a Mind that is not there has an empty mailbox).
    async fn mailbox(&self, mind: &str) -> Result<Mailbox>;
    /// Moves the ack position to `max(position, seq)` and returns it; `Invalid` if `seq` is
    /// beyond the last delivered seq. Fenced.
    async fn ack_through(&self, mind: &str, token: FencingToken, seq: i64) -> Result<i64>;

    // ----- Outbox -----

    /// Records outbound messages; an existing request id returns its row unchanged. Fenced.
    async fn enqueue_outbox(
        &self,
        mind: &str,
        token: FencingToken,
        messages: &[NewOutboxMessage],
    ) -> Result<Vec<OutboxMessage>>;
    /// Messages not yet sent (nor failed), in recording order, at most `limit`.
    async fn unsent_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>>;
    /// Messages not yet acknowledged (sent or not) nor failed, in recording order, at most
    /// `limit`.
    async fn unacked_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>>;
    /// Messages not yet acknowledged nor failed with `seq > after_seq`, in seq (recording)
    /// order, at most `limit`: a transport's or API client's next page, read from the
    /// `(mind, seq)` index.
    async fn outbox_after(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<OutboxMessage>>;
    /// Marks a message sent (idempotent: the first send time and remote id stay). Fenced.
    async fn mark_outbox_sent(
        &self,
        mind: &str,
        token: FencingToken,
        request_id: &str,
        remote_id: Option<&str>,
        sent_at_ms: i64,
    ) -> Result<OutboxMessage>;
    /// Marks a message acknowledged by the peer, with the peer's id for it if it gave one (the
    /// Matrix event id) (idempotent: the first ack time and remote id stay; implies sent). Not
    /// fenced: the acknowledgement comes from the transport (the Matrix connector), not from the
    /// Mind's writer, and must land even while no host holds the lease or the lease is changing
    /// hands. `NotFound` if the message is unknown.
    async fn ack_outbox(
        &self,
        mind: &str,
        request_id: &str,
        remote_id: Option<&str>,
        acked_at_ms: i64,
    ) -> Result<OutboxMessage>;
    /// Records that the transport gave up on a message for good (a refusal no retry can
    /// change), with why: it is offered to no transport again and is listed by
    /// [`failed_outbox`](Store::failed_outbox) — never silently dropped. Idempotent: the first
    /// failure stays; a message already acknowledged stays acknowledged and gets no failure.
    /// Not fenced (the transport's word, as [`ack_outbox`](Store::ack_outbox)). `NotFound` if
    /// the message is unknown.
    async fn fail_outbox(
        &self,
        mind: &str,
        request_id: &str,
        failure: &str,
        failed_at_ms: i64,
    ) -> Result<OutboxMessage>;
    /// Messages a transport gave up on, the newest failure first, at most `limit`.
    async fn failed_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>>;

    // ----- Turns -----

    /// Commits everything one turn produced — transcript items, outbox rows, ledger rows,
    /// memory notes, briefs and the mailbox ack — in one transaction: all or nothing, fenced.
    /// This is what makes effects exactly-once (design §3.6): the ack moves only together with
    /// the durable record of the replies it answers. With a `turn_key`, a second call for the
    /// same turn is refused with `TurnAlreadyRecorded` and writes nothing, so retrying after a
    /// lost commit acknowledgment cannot duplicate the turn.
    async fn record_turn(
        &self,
        mind: &str,
        token: FencingToken,
        turn: &TurnRecord,
    ) -> Result<TurnReceipt>;

    // ----- Ledger -----

    /// Appends ledger rows (each row's `mind` must be `mind`); returns their ids. Fenced.
    async fn append_ledger(
        &self,
        mind: &str,
        token: FencingToken,
        rows: &[LedgerRow],
    ) -> Result<Vec<i64>>;
    /// Ledger rows matching the query, in id (append) order.
    async fn ledger(&self, query: &LedgerQuery) -> Result<Vec<LedgerEntry>>;
    /// The Mind's cost over `from_ms <= at_ms < to_ms`.
    async fn spend(&self, mind: &str, from_ms: i64, to_ms: i64) -> Result<MicroUsd>;

    // ----- Memory -----

    /// Writes memory notes (each at most 1000 bytes); returns their ids. Fenced.
    async fn add_memory(
        &self,
        mind: &str,
        token: FencingToken,
        notes: &[NewMemoryNote],
    ) -> Result<Vec<i64>>;
    /// The newest notes first, at most `limit`.
    async fn memory_newest(&self, mind: &str, limit: i64) -> Result<Vec<MemoryNote>>;
    /// Notes about `sender`, newest first, at most `limit`.
    async fn memory_about(&self, mind: &str, sender: &str, limit: i64) -> Result<Vec<MemoryNote>>;
    /// Notes whose text contains `needle` (ASCII case-insensitive), newest first.
    async fn memory_search(&self, mind: &str, needle: &str, limit: i64) -> Result<Vec<MemoryNote>>;

    // ----- Briefs -----

    /// Queues a brief (operator action; not fenced). `NotFound` if the Mind is unknown.
    async fn enqueue_brief(&self, mind: &str, brief: &NewBrief) -> Result<Brief>;
    /// Atomically moves the oldest queued brief to running. Fenced.
    async fn claim_brief(
        &self,
        mind: &str,
        token: FencingToken,
        now_ms: i64,
    ) -> Result<Option<Brief>>;
    /// Finishes a running brief as done or failed with its result; `Invalid` unless running
    /// and `status` is `Done` or `Failed`. Fenced.
    async fn finish_brief(
        &self,
        mind: &str,
        token: FencingToken,
        seq: i64,
        status: BriefStatus,
        result: &str,
        now_ms: i64,
    ) -> Result<Brief>;
    /// Briefs in queue order, optionally of one status, at most `limit`.
    async fn briefs(
        &self,
        mind: &str,
        status: Option<BriefStatus>,
        limit: i64,
    ) -> Result<Vec<Brief>>;
}
