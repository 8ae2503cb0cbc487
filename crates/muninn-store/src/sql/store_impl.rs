//! The [`Store`] trait for every [`Backend`]: each method is one call into the aggregate
//! module that holds its SQL, so this file is the index from the contract to the code.

use muninn_core::ledger::LedgerRow;
use muninn_core::money::MicroUsd;

use super::engine::Backend;
use super::{briefs, leases, ledger, mailbox, memory, migrations, minds, outbox, segments};
use super::{transcript, turn};
use crate::error::Result;
use crate::hosts::HostSignals;
use crate::store::Store;
use crate::types::*;

#[async_trait::async_trait]
impl<B: Backend> Store for B {
    fn backend(&self) -> &'static str {
        B::NAME
    }

    async fn schema_version(&self) -> Result<i64> {
        migrations::schema_version(self).await
    }

    async fn close(&self) {
        Backend::shut_down(self).await
    }

    // Minds and settings.

    async fn create_mind(&self, mind: &Mind) -> Result<Mind> {
        minds::create(self, mind).await
    }

    async fn mind(&self, id: &str) -> Result<Option<Mind>> {
        minds::get(self, id).await
    }

    async fn minds(&self) -> Result<Vec<Mind>> {
        minds::list(self).await
    }

    async fn update_mind(
        &self,
        id: &str,
        display_name: &str,
        config: &serde_json::Value,
    ) -> Result<Mind> {
        minds::update(self, id, display_name, config).await
    }

    async fn settings(&self, mind: &str) -> Result<MindSettings> {
        minds::settings(self, mind).await
    }

    async fn put_settings(&self, mind: &str, settings: &MindSettings, now_ms: i64) -> Result<()> {
        minds::put_settings(self, mind, settings, now_ms).await
    }

    // Leases.

    async fn acquire_lease(
        &self,
        mind: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>> {
        leases::acquire(self, mind, holder, ttl_ms, now_ms).await
    }

    async fn renew_lease(
        &self,
        mind: &str,
        token: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Lease> {
        leases::renew(self, mind, token, ttl_ms, now_ms).await
    }

    async fn renew_leases(&self, holder: &str, ttl_ms: i64, now_ms: i64) -> Result<Vec<Lease>> {
        leases::renew_all(self, holder, ttl_ms, now_ms).await
    }

    async fn release_lease(&self, mind: &str, token: FencingToken) -> Result<()> {
        leases::release(self, mind, token).await
    }

    async fn lease(&self, mind: &str) -> Result<Option<Lease>> {
        leases::get(self, mind).await
    }

    async fn take_over_lease(
        &self,
        mind: &str,
        holder: &str,
        previous: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>> {
        leases::take_over(self, mind, holder, previous, ttl_ms, now_ms).await
    }

    // Hosts sharing a database (see `crate::hosts`).

    async fn announce_wake(&self, mind: &str, from: &str) -> Result<()> {
        HostSignals::announce_wake(self, mind, from).await
    }

    async fn listen_wakes(&self) -> Result<Option<crate::WakeListener>> {
        HostSignals::listen_wakes(self).await
    }

    async fn hold_presence(&self, holder: &str) -> Result<bool> {
        HostSignals::hold_presence(self, holder).await
    }

    async fn holder_gone(&self, holder: &str) -> Result<Option<bool>> {
        HostSignals::holder_gone(self, holder).await
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
        segments::start(self, mind, token, segment).await
    }

    async fn set_segment_session(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        session_id: &str,
    ) -> Result<Segment> {
        segments::set_session(self, mind, token, role, number, session_id).await
    }

    async fn end_segment(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        ended_at_ms: i64,
    ) -> Result<Segment> {
        segments::end(self, mind, token, role, number, ended_at_ms).await
    }

    async fn current_segment(&self, mind: &str, role: Role) -> Result<Option<Segment>> {
        segments::current(self, mind, role).await
    }

    async fn segments(&self, mind: &str, role: Role) -> Result<Vec<Segment>> {
        segments::list(self, mind, role).await
    }

    async fn append_transcript(
        &self,
        mind: &str,
        token: FencingToken,
        items: &[NewTranscriptItem],
    ) -> Result<Vec<i64>> {
        transcript::append(self, mind, token, items).await
    }

    async fn transcript_range(
        &self,
        mind: &str,
        role: Role,
        from_seq: i64,
        to_seq: Option<i64>,
        limit: i64,
    ) -> Result<Vec<TranscriptItem>> {
        transcript::range(self, mind, role, from_seq, to_seq, limit).await
    }

    async fn transcript_tail(
        &self,
        mind: &str,
        role: Role,
        count: i64,
    ) -> Result<Vec<TranscriptItem>> {
        transcript::tail(self, mind, role, count).await
    }

    // The mailbox.

    async fn post_delivery(&self, mind: &str, delivery: &NewDelivery) -> Result<Posted> {
        mailbox::post(self, mind, delivery).await
    }

    async fn post_batch(&self, mind: &str, batch: &IntakeBatch) -> Result<Vec<Posted>> {
        mailbox::post_batch(self, mind, batch).await
    }

    async fn cursor(&self, mind: &str, name: &str) -> Result<Option<Cursor>> {
        mailbox::cursor(self, mind, name).await
    }

    async fn pending_deliveries(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        mailbox::pending(self, mind, after_seq, limit).await
    }

    async fn ack_position(&self, mind: &str) -> Result<i64> {
        mailbox::ack_position(self, mind).await
    }

    async fn mailbox(&self, mind: &str) -> Result<Mailbox> {
        mailbox::summary(self, mind).await
    }

    async fn ack_through(&self, mind: &str, token: FencingToken, seq: i64) -> Result<i64> {
        mailbox::ack_through(self, mind, token, seq).await
    }

    // The outbox.

    async fn enqueue_outbox(
        &self,
        mind: &str,
        token: FencingToken,
        messages: &[NewOutboxMessage],
    ) -> Result<Vec<OutboxMessage>> {
        outbox::enqueue(self, mind, token, messages).await
    }

    async fn unsent_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        outbox::unsent(self, mind, limit).await
    }

    async fn unacked_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        outbox::unacked(self, mind, limit).await
    }

    async fn outbox_after(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<OutboxMessage>> {
        outbox::after(self, mind, after_seq, limit).await
    }

    async fn mark_outbox_sent(
        &self,
        mind: &str,
        token: FencingToken,
        request_id: &str,
        remote_id: Option<&str>,
        sent_at_ms: i64,
    ) -> Result<OutboxMessage> {
        outbox::mark_sent(self, mind, token, request_id, remote_id, sent_at_ms).await
    }

    async fn ack_outbox(
        &self,
        mind: &str,
        request_id: &str,
        remote_id: Option<&str>,
        acked_at_ms: i64,
    ) -> Result<OutboxMessage> {
        outbox::ack(self, mind, request_id, remote_id, acked_at_ms).await
    }

    async fn fail_outbox(
        &self,
        mind: &str,
        request_id: &str,
        failure: &str,
        failed_at_ms: i64,
    ) -> Result<OutboxMessage> {
        outbox::fail(self, mind, request_id, failure, failed_at_ms).await
    }

    async fn failed_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        outbox::failed(self, mind, limit).await
    }

    // A whole turn, and the ledger.

    async fn record_turn(
        &self,
        mind: &str,
        token: FencingToken,
        turn: &TurnRecord,
    ) -> Result<TurnReceipt> {
        turn::record(self, mind, token, turn).await
    }

    async fn append_ledger(
        &self,
        mind: &str,
        token: FencingToken,
        rows: &[LedgerRow],
    ) -> Result<Vec<i64>> {
        ledger::append(self, mind, token, rows).await
    }

    async fn ledger(&self, query: &LedgerQuery) -> Result<Vec<LedgerEntry>> {
        ledger::find(self, query).await
    }

    async fn spend(&self, mind: &str, from_ms: i64, to_ms: i64) -> Result<MicroUsd> {
        ledger::spend(self, mind, from_ms, to_ms).await
    }

    // Memory.

    async fn add_memory(
        &self,
        mind: &str,
        token: FencingToken,
        notes: &[NewMemoryNote],
    ) -> Result<Vec<i64>> {
        memory::add(self, mind, token, notes).await
    }

    async fn memory_newest(&self, mind: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        memory::newest(self, mind, limit).await
    }

    async fn memory_about(&self, mind: &str, sender: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        memory::about(self, mind, sender, limit).await
    }

    async fn memory_search(&self, mind: &str, needle: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        memory::matching(self, mind, needle, limit).await
    }

    // Briefs.

    async fn enqueue_brief(&self, mind: &str, brief: &NewBrief) -> Result<Brief> {
        briefs::enqueue(self, mind, brief).await
    }

    async fn claim_brief(
        &self,
        mind: &str,
        token: FencingToken,
        now_ms: i64,
    ) -> Result<Option<Brief>> {
        briefs::claim(self, mind, token, now_ms).await
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
        briefs::finish(self, mind, token, seq, status, result, now_ms).await
    }

    async fn briefs(
        &self,
        mind: &str,
        status: Option<BriefStatus>,
        limit: i64,
    ) -> Result<Vec<Brief>> {
        briefs::list(self, mind, status, limit).await
    }
}
