//! The [`Store`] trait for every [`Backend`]: each method is one call into the aggregate
//! module that holds its SQL, so this file is the index from the contract to the code.

use muninn_core::ledger::LedgerRow;
use muninn_core::money::MicroUsd;

use super::engine::Backend;
use super::{briefs, leases, ledger, mailbox, memory, migrations, minds, outbox, segments};
use super::{transcript, turn};
use crate::error::{Result, StoreError};
use crate::hosts::HostSignals;
use crate::store::Store;
use crate::types::*;

/// Runs one store call within the backend's deadline ([`Backend::call_timeout`]): past it the
/// call is dropped where it waits and reported as [`StoreError::Unavailable`], which the host
/// retries and shows. Dropping it is safe: a write transaction cut short never committed and
/// its connection is closed (`crate::write`), a read's connection cut mid-statement is closed
/// too (`crate::read`); the server rolls back what the closed session left open.
async fn bounded<B: Backend, T>(
    store: &B,
    call: &'static str,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let Some(deadline) = store.call_timeout() else {
        return work.await;
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(answer) => answer,
        Err(_) => {
            tracing::warn!(
                call,
                ?deadline,
                "store call unanswered: the database is silent"
            );
            Err(StoreError::Unavailable(format!(
                "{call}: no answer from the database within {} ms",
                deadline.as_millis()
            )))
        }
    }
}

#[async_trait::async_trait]
impl<B: Backend> Store for B {
    fn backend(&self) -> &'static str {
        B::NAME
    }

    async fn schema_version(&self) -> Result<i64> {
        bounded(self, "schema_version", migrations::schema_version(self)).await
    }

    /// Bounded by the call deadline too: the pool's close waits for every connection, and one
    /// being handed back when the network fell silent waits in sqlx's own ping, without a
    /// deadline, as long as TCP does. Past the deadline such connections are left to the
    /// process's end (the pool is closed already: nothing new is served), said in the log.
    async fn close(&self) {
        let Some(deadline) = self.call_timeout() else {
            return Backend::shut_down(self).await;
        };
        if tokio::time::timeout(deadline, Backend::shut_down(self))
            .await
            .is_err()
        {
            tracing::warn!(
                ?deadline,
                "closing the store: connections still waiting on a silent database were left open"
            );
        }
    }

    // Minds and settings.

    async fn create_mind(&self, mind: &Mind) -> Result<Mind> {
        bounded(self, "create_mind", minds::create(self, mind)).await
    }

    async fn mind(&self, id: &str) -> Result<Option<Mind>> {
        bounded(self, "mind", minds::get(self, id)).await
    }

    async fn minds(&self) -> Result<Vec<Mind>> {
        bounded(self, "minds", minds::list(self)).await
    }

    async fn update_mind(
        &self,
        id: &str,
        display_name: &str,
        config: &serde_json::Value,
    ) -> Result<Mind> {
        bounded(
            self,
            "update_mind",
            minds::update(self, id, display_name, config),
        )
        .await
    }

    async fn settings(&self, mind: &str) -> Result<MindSettings> {
        bounded(self, "settings", minds::settings(self, mind)).await
    }

    async fn put_caps(
        &self,
        mind: &str,
        caps: &Caps,
        expected: Option<&Caps>,
        now_ms: i64,
    ) -> Result<CapsWrite> {
        bounded(
            self,
            "put_caps",
            minds::put_caps(self, mind, caps, expected, now_ms),
        )
        .await
    }

    async fn put_brake(&self, mind: &str, brake: bool, now_ms: i64) -> Result<()> {
        bounded(
            self,
            "put_brake",
            minds::put_brake(self, mind, brake, now_ms),
        )
        .await
    }

    // Leases.

    async fn acquire_lease(
        &self,
        mind: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>> {
        bounded(
            self,
            "acquire_lease",
            leases::acquire(self, mind, holder, ttl_ms, now_ms),
        )
        .await
    }

    async fn renew_lease(
        &self,
        mind: &str,
        token: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Lease> {
        bounded(
            self,
            "renew_lease",
            leases::renew(self, mind, token, ttl_ms, now_ms),
        )
        .await
    }

    async fn renew_leases(&self, holder: &str, ttl_ms: i64, now_ms: i64) -> Result<Vec<Lease>> {
        bounded(
            self,
            "renew_leases",
            leases::renew_all(self, holder, ttl_ms, now_ms),
        )
        .await
    }

    async fn release_lease(&self, mind: &str, token: FencingToken) -> Result<()> {
        bounded(self, "release_lease", leases::release(self, mind, token)).await
    }

    async fn lease(&self, mind: &str) -> Result<Option<Lease>> {
        bounded(self, "lease", leases::get(self, mind)).await
    }

    async fn take_over_lease(
        &self,
        mind: &str,
        holder: &str,
        previous: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>> {
        bounded(
            self,
            "take_over_lease",
            leases::take_over(self, mind, holder, previous, ttl_ms, now_ms),
        )
        .await
    }

    // Hosts sharing a database (see `crate::hosts`).

    async fn announce_wake(&self, mind: &str, from: &str) -> Result<()> {
        bounded(
            self,
            "announce_wake",
            HostSignals::announce_wake(self, mind, from),
        )
        .await
    }

    async fn listen_wakes(&self) -> Result<Option<crate::WakeListener>> {
        bounded(self, "listen_wakes", HostSignals::listen_wakes(self)).await
    }

    async fn hold_presence(&self, holder: &str) -> Result<bool> {
        bounded(
            self,
            "hold_presence",
            HostSignals::hold_presence(self, holder),
        )
        .await
    }

    async fn holder_gone(&self, holder: &str) -> Result<Option<bool>> {
        bounded(self, "holder_gone", HostSignals::holder_gone(self, holder)).await
    }

    async fn await_holder_gone(&self, holder: &str) -> Result<bool> {
        HostSignals::await_holder_gone(self, holder).await
    }

    // Segments and the transcript.

    async fn start_segment(
        &self,
        mind: &str,
        token: FencingToken,
        segment: &NewSegment,
    ) -> Result<Segment> {
        bounded(
            self,
            "start_segment",
            segments::start(self, mind, token, segment),
        )
        .await
    }

    async fn set_segment_session(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        session_id: &str,
    ) -> Result<Segment> {
        bounded(
            self,
            "set_segment_session",
            segments::set_session(self, mind, token, role, number, session_id),
        )
        .await
    }

    async fn end_segment(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        ended_at_ms: i64,
    ) -> Result<Segment> {
        bounded(
            self,
            "end_segment",
            segments::end(self, mind, token, role, number, ended_at_ms),
        )
        .await
    }

    async fn current_segment(&self, mind: &str, role: Role) -> Result<Option<Segment>> {
        bounded(self, "current_segment", segments::current(self, mind, role)).await
    }

    async fn newest_segments(
        &self,
        mind: &str,
        role: Role,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Segment>> {
        bounded(
            self,
            "newest_segments",
            segments::newest(self, mind, role, before, limit),
        )
        .await
    }

    async fn segments(&self, mind: &str, role: Role) -> Result<Vec<Segment>> {
        bounded(self, "segments", segments::list(self, mind, role)).await
    }

    async fn append_transcript(
        &self,
        mind: &str,
        token: FencingToken,
        items: &[NewTranscriptItem],
    ) -> Result<Vec<i64>> {
        bounded(
            self,
            "append_transcript",
            transcript::append(self, mind, token, items),
        )
        .await
    }

    async fn append_transcript_once(
        &self,
        mind: &str,
        token: FencingToken,
        key: &str,
        item: &NewTranscriptItem,
    ) -> Result<Appended> {
        bounded(
            self,
            "append_transcript_once",
            transcript::append_once(self, mind, token, key, item),
        )
        .await
    }

    async fn transcript_range(
        &self,
        mind: &str,
        role: Role,
        from_seq: i64,
        to_seq: Option<i64>,
        limit: i64,
    ) -> Result<Vec<TranscriptItem>> {
        bounded(
            self,
            "transcript_range",
            transcript::range(self, mind, role, from_seq, to_seq, limit),
        )
        .await
    }

    async fn transcript_tail(
        &self,
        mind: &str,
        role: Role,
        count: i64,
    ) -> Result<Vec<TranscriptItem>> {
        bounded(
            self,
            "transcript_tail",
            transcript::tail(self, mind, role, count),
        )
        .await
    }

    // The mailbox.

    async fn post_delivery(&self, mind: &str, delivery: &NewDelivery) -> Result<Posted> {
        bounded(self, "post_delivery", mailbox::post(self, mind, delivery)).await
    }

    async fn post_batch(&self, mind: &str, batch: &IntakeBatch) -> Result<Vec<Posted>> {
        bounded(self, "post_batch", mailbox::post_batch(self, mind, batch)).await
    }

    async fn cursor(&self, mind: &str, name: &str) -> Result<Option<Cursor>> {
        bounded(self, "cursor", mailbox::cursor(self, mind, name)).await
    }

    async fn first_cursor(&self, mind: &str, cursor: &NewCursor) -> Result<Cursor> {
        bounded(
            self,
            "first_cursor",
            mailbox::first_cursor(self, mind, cursor),
        )
        .await
    }

    async fn pending_deliveries(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        bounded(
            self,
            "pending_deliveries",
            mailbox::pending(self, mind, after_seq, limit),
        )
        .await
    }

    async fn ack_position(&self, mind: &str) -> Result<i64> {
        bounded(self, "ack_position", mailbox::ack_position(self, mind)).await
    }

    async fn mailbox(&self, mind: &str) -> Result<Mailbox> {
        bounded(self, "mailbox", mailbox::summary(self, mind)).await
    }

    async fn ack_through(&self, mind: &str, token: FencingToken, seq: i64) -> Result<i64> {
        bounded(
            self,
            "ack_through",
            mailbox::ack_through(self, mind, token, seq),
        )
        .await
    }

    // The outbox.

    async fn enqueue_outbox(
        &self,
        mind: &str,
        token: FencingToken,
        messages: &[NewOutboxMessage],
    ) -> Result<Vec<OutboxMessage>> {
        bounded(
            self,
            "enqueue_outbox",
            outbox::enqueue(self, mind, token, messages),
        )
        .await
    }

    async fn unsent_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        bounded(self, "unsent_outbox", outbox::unsent(self, mind, limit)).await
    }

    async fn unacked_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        bounded(self, "unacked_outbox", outbox::unacked(self, mind, limit)).await
    }

    async fn outbox_after(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<OutboxMessage>> {
        bounded(
            self,
            "outbox_after",
            outbox::after(self, mind, after_seq, limit),
        )
        .await
    }

    async fn mark_outbox_sent(
        &self,
        mind: &str,
        token: FencingToken,
        request_id: &str,
        remote_id: Option<&str>,
        sent_at_ms: i64,
    ) -> Result<OutboxMessage> {
        bounded(
            self,
            "mark_outbox_sent",
            outbox::mark_sent(self, mind, token, request_id, remote_id, sent_at_ms),
        )
        .await
    }

    async fn ack_outbox(
        &self,
        mind: &str,
        request_id: &str,
        remote_id: Option<&str>,
        acked_at_ms: i64,
    ) -> Result<OutboxMessage> {
        bounded(
            self,
            "ack_outbox",
            outbox::ack(self, mind, request_id, remote_id, acked_at_ms),
        )
        .await
    }

    async fn fail_outbox(
        &self,
        mind: &str,
        request_id: &str,
        failure: &str,
        failed_at_ms: i64,
    ) -> Result<OutboxMessage> {
        bounded(
            self,
            "fail_outbox",
            outbox::fail(self, mind, request_id, failure, failed_at_ms),
        )
        .await
    }

    async fn failed_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        bounded(self, "failed_outbox", outbox::failed(self, mind, limit)).await
    }

    // A whole turn, and the ledger.

    async fn record_turn(
        &self,
        mind: &str,
        token: FencingToken,
        turn: &TurnRecord,
    ) -> Result<TurnReceipt> {
        bounded(self, "record_turn", turn::record(self, mind, token, turn)).await
    }

    async fn append_ledger(
        &self,
        mind: &str,
        token: FencingToken,
        rows: &[LedgerRow],
    ) -> Result<Vec<i64>> {
        bounded(
            self,
            "append_ledger",
            ledger::append(self, mind, token, rows),
        )
        .await
    }

    async fn ledger(&self, query: &LedgerQuery) -> Result<Vec<LedgerEntry>> {
        bounded(self, "ledger", ledger::find(self, query)).await
    }

    async fn spend(&self, mind: &str, from_ms: i64, to_ms: i64) -> Result<MicroUsd> {
        bounded(self, "spend", ledger::spend(self, mind, from_ms, to_ms)).await
    }

    // Memory.

    async fn add_memory(
        &self,
        mind: &str,
        token: FencingToken,
        notes: &[NewMemoryNote],
    ) -> Result<Vec<i64>> {
        bounded(self, "add_memory", memory::add(self, mind, token, notes)).await
    }

    async fn memory_newest(&self, mind: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        bounded(self, "memory_newest", memory::newest(self, mind, limit)).await
    }

    async fn memory_about(&self, mind: &str, sender: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        bounded(
            self,
            "memory_about",
            memory::about(self, mind, sender, limit),
        )
        .await
    }

    async fn memory_search(&self, mind: &str, needle: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        bounded(
            self,
            "memory_search",
            memory::matching(self, mind, needle, limit),
        )
        .await
    }

    // Briefs.

    async fn enqueue_brief(&self, mind: &str, brief: &NewBrief) -> Result<Brief> {
        bounded(self, "enqueue_brief", briefs::enqueue(self, mind, brief)).await
    }

    async fn claim_brief(
        &self,
        mind: &str,
        token: FencingToken,
        now_ms: i64,
    ) -> Result<Option<Brief>> {
        bounded(
            self,
            "claim_brief",
            briefs::claim(self, mind, token, now_ms),
        )
        .await
    }

    async fn finish_brief(
        &self,
        mind: &str,
        token: FencingToken,
        seq: i64,
        status: BriefStatus,
        result: &str,
        now_ms: i64,
    ) -> Result<Brief> {
        bounded(
            self,
            "finish_brief",
            briefs::finish(self, mind, token, seq, status, result, now_ms),
        )
        .await
    }

    async fn briefs(
        &self,
        mind: &str,
        status: Option<BriefStatus>,
        limit: i64,
    ) -> Result<Vec<Brief>> {
        bounded(self, "briefs", briefs::list(self, mind, status, limit)).await
    }
}
