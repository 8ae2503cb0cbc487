//! The [`Store`] trait on a [`FaultyStore`]: every call forwarded to the real store, the
//! calls a test armed refused, answered as lost, held or panicked on first (see the parent
//! module's docs for which).

use super::{FaultyStore, armed, injected};
use async_trait::async_trait;
use muninn_core::ledger::{ATTEMPT_FAILED, LedgerRow};
use muninn_core::money::MicroUsd;
use muninn_store::*;
use std::sync::atomic::Ordering;

#[async_trait]
impl Store for FaultyStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn record_turn(
        &self,
        mind: &str,
        token: FencingToken,
        turn: &TurnRecord,
    ) -> Result<TurnReceipt> {
        if armed(&self.panicking_commits) {
            panic!("injected: a bug while committing {mind}'s turn");
        }
        let cut = (turn.ledger.iter()).any(|row| row.decision == ATTEMPT_FAILED);
        if cut && armed(&self.refusing_cut_rows) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Invalid(
                "injected: a failed attempt's row the store will never take".into(),
            ));
        }
        self.refuse()?;
        let receipt = self.inner.record_turn(mind, token, turn).await?;
        if !armed(&self.passing_lost_commits) && armed(&self.losing_commit_answers) {
            return Err(injected("record_turn: the commit's answer was lost"));
        }
        Ok(receipt)
    }

    async fn append_ledger(
        &self,
        mind: &str,
        token: FencingToken,
        rows: &[LedgerRow],
    ) -> Result<Vec<i64>> {
        self.refuse()?;
        self.inner.append_ledger(mind, token, rows).await
    }

    async fn schema_version(&self) -> Result<i64> {
        self.inner.schema_version().await
    }

    async fn close(&self) {
        self.inner.close().await
    }

    async fn create_mind(&self, mind: &Mind) -> Result<Mind> {
        self.inner.create_mind(mind).await
    }

    async fn mind(&self, id: &str) -> Result<Option<Mind>> {
        self.inner.mind(id).await
    }

    async fn minds(&self) -> Result<Vec<Mind>> {
        self.inner.minds().await
    }

    async fn update_mind(
        &self,
        id: &str,
        display_name: &str,
        config: &serde_json::Value,
    ) -> Result<Mind> {
        self.inner.update_mind(id, display_name, config).await
    }

    async fn settings(&self, mind: &str) -> Result<MindSettings> {
        if !armed(&self.passing_settings_reads) && armed(&self.failing_settings_reads) {
            return Err(injected("the database server closed the connection"));
        }
        self.inner.settings(mind).await
    }

    async fn put_caps(
        &self,
        mind: &str,
        caps: &Caps,
        expected: Option<&Caps>,
        now_ms: i64,
    ) -> Result<CapsWrite> {
        self.inner.put_caps(mind, caps, expected, now_ms).await
    }

    async fn put_brake(&self, mind: &str, brake: bool, now_ms: i64) -> Result<()> {
        self.inner.put_brake(mind, brake, now_ms).await
    }

    async fn acquire_lease(
        &self,
        mind: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>> {
        self.inner.acquire_lease(mind, holder, ttl_ms, now_ms).await
    }

    async fn renew_lease(
        &self,
        mind: &str,
        token: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Lease> {
        self.inner.renew_lease(mind, token, ttl_ms, now_ms).await
    }

    async fn renew_leases(&self, holder: &str, ttl_ms: i64, now_ms: i64) -> Result<Vec<Lease>> {
        self.lease_renewals.fetch_add(1, Ordering::SeqCst);
        if armed(&self.panicking_lease_renewals) {
            panic!("injected: a bug while renewing {holder}'s leases");
        }
        self.inner.renew_leases(holder, ttl_ms, now_ms).await
    }

    async fn release_lease(&self, mind: &str, token: FencingToken) -> Result<()> {
        self.inner.release_lease(mind, token).await
    }

    async fn lease(&self, mind: &str) -> Result<Option<Lease>> {
        self.inner.lease(mind).await
    }

    async fn take_over_lease(
        &self,
        mind: &str,
        holder: &str,
        previous: FencingToken,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Option<Lease>> {
        self.inner
            .take_over_lease(mind, holder, previous, ttl_ms, now_ms)
            .await
    }

    async fn announce_wake(&self, mind: &str, from: &str) -> Result<()> {
        self.inner.announce_wake(mind, from).await
    }

    async fn listen_wakes(&self) -> Result<Option<muninn_store::WakeListener>> {
        self.inner.listen_wakes().await
    }

    async fn hold_presence(&self, holder: &str) -> Result<bool> {
        self.inner.hold_presence(holder).await
    }

    async fn holder_gone(&self, holder: &str) -> Result<Option<bool>> {
        self.inner.holder_gone(holder).await
    }

    async fn await_holder_gone(&self, holder: &str) -> Result<bool> {
        self.inner.await_holder_gone(holder).await
    }

    async fn start_segment(
        &self,
        mind: &str,
        token: FencingToken,
        segment: &NewSegment,
    ) -> Result<Segment> {
        if armed(&self.failing_segment_starts) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(injected("the store refused the segment"));
        }
        self.inner.start_segment(mind, token, segment).await
    }

    async fn set_segment_session(
        &self,
        mind: &str,
        token: FencingToken,
        role: Role,
        number: i64,
        session_id: &str,
    ) -> Result<Segment> {
        self.inner
            .set_segment_session(mind, token, role, number, session_id)
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
        self.inner
            .end_segment(mind, token, role, number, ended_at_ms)
            .await
    }

    async fn current_segment(&self, mind: &str, role: Role) -> Result<Option<Segment>> {
        self.inner.current_segment(mind, role).await
    }

    async fn segments(&self, mind: &str, role: Role) -> Result<Vec<Segment>> {
        self.inner.segments(mind, role).await
    }

    async fn append_transcript(
        &self,
        mind: &str,
        token: FencingToken,
        items: &[NewTranscriptItem],
    ) -> Result<Vec<i64>> {
        if !armed(&self.passing_refused_appends) && armed(&self.refusing_appends) {
            return Err(injected("append_transcript"));
        }
        let seqs = self.inner.append_transcript(mind, token, items).await?;
        if !armed(&self.passing_appends) && armed(&self.losing_append_answers) {
            return Err(injected("append_transcript: the commit's answer was lost"));
        }
        Ok(seqs)
    }

    async fn append_transcript_once(
        &self,
        mind: &str,
        token: FencingToken,
        key: &str,
        item: &NewTranscriptItem,
    ) -> Result<Appended> {
        if !armed(&self.passing_refused_appends) && armed(&self.refusing_appends) {
            return Err(injected("append_transcript_once"));
        }
        let appended = self
            .inner
            .append_transcript_once(mind, token, key, item)
            .await?;
        if !armed(&self.passing_appends) && armed(&self.losing_append_answers) {
            return Err(injected(
                "append_transcript_once: the commit's answer was lost",
            ));
        }
        Ok(appended)
    }

    async fn transcript_range(
        &self,
        mind: &str,
        role: Role,
        from_seq: i64,
        to_seq: Option<i64>,
        limit: i64,
    ) -> Result<Vec<TranscriptItem>> {
        self.inner
            .transcript_range(mind, role, from_seq, to_seq, limit)
            .await
    }

    async fn transcript_tail(
        &self,
        mind: &str,
        role: Role,
        count: i64,
    ) -> Result<Vec<TranscriptItem>> {
        if armed(&self.failing_reads) {
            return Err(injected("the database server closed the connection"));
        }
        self.inner.transcript_tail(mind, role, count).await
    }

    async fn post_delivery(&self, mind: &str, delivery: &NewDelivery) -> Result<Posted> {
        self.inner.post_delivery(mind, delivery).await
    }

    async fn post_batch(&self, mind: &str, batch: &IntakeBatch) -> Result<Vec<Posted>> {
        if !armed(&self.passing_batches) && armed(&self.failing_batches) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(injected("database or disk is full"));
        }
        self.inner.post_batch(mind, batch).await
    }

    async fn cursor(&self, mind: &str, name: &str) -> Result<Option<Cursor>> {
        if armed(&self.panicking_cursor_reads) {
            panic!("injected: a bug while reading {mind}'s {name} cursor");
        }
        let mut hold = self.holding_cursor_reads.subscribe();
        if hold.borrow_and_update().as_deref() == Some(name) {
            self.held_cursor_reads.fetch_add(1, Ordering::SeqCst);
            // The sender lives as long as the store: `wait_for` ends only at the release.
            let _ = hold.wait_for(|held| held.as_deref() != Some(name)).await;
        }
        self.inner.cursor(mind, name).await
    }

    async fn first_cursor(&self, mind: &str, cursor: &NewCursor) -> Result<Cursor> {
        self.inner.first_cursor(mind, cursor).await
    }

    async fn pending_deliveries(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        self.pending_reads.fetch_add(1, Ordering::SeqCst);
        let panic_now = match self.panicking().as_mut() {
            Some((of, n)) if of == mind && *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        };
        // Outside the lock: a panic while holding it would poison it for every other Mind.
        if panic_now {
            panic!("injected: a bug while reading {mind}'s deliveries");
        }
        self.inner.pending_deliveries(mind, after_seq, limit).await
    }

    async fn ack_position(&self, mind: &str) -> Result<i64> {
        if armed(&self.failing_ack_position_reads) {
            return Err(injected("the database server closed the connection"));
        }
        self.inner.ack_position(mind).await
    }

    async fn mailbox(&self, mind: &str) -> Result<Mailbox> {
        let mut hold = self.holding_mailbox_reads.subscribe();
        if *hold.borrow_and_update() {
            self.held_mailbox_reads.fetch_add(1, Ordering::SeqCst);
            // The sender lives as long as the store: `wait_for` ends only at the release.
            let _ = hold.wait_for(|held| !held).await;
        }
        if armed(&self.failing_ack_position_reads) {
            return Err(injected("the database server closed the connection"));
        }
        self.inner.mailbox(mind).await
    }

    async fn ack_through(&self, mind: &str, token: FencingToken, seq: i64) -> Result<i64> {
        self.inner.ack_through(mind, token, seq).await
    }

    async fn enqueue_outbox(
        &self,
        mind: &str,
        token: FencingToken,
        messages: &[NewOutboxMessage],
    ) -> Result<Vec<OutboxMessage>> {
        self.inner.enqueue_outbox(mind, token, messages).await
    }

    async fn unsent_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        self.inner.unsent_outbox(mind, limit).await
    }

    async fn unacked_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        self.inner.unacked_outbox(mind, limit).await
    }

    async fn outbox_after(
        &self,
        mind: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<OutboxMessage>> {
        self.inner.outbox_after(mind, after_seq, limit).await
    }

    async fn mark_outbox_sent(
        &self,
        mind: &str,
        token: FencingToken,
        request_id: &str,
        remote_id: Option<&str>,
        sent_at_ms: i64,
    ) -> Result<OutboxMessage> {
        self.inner
            .mark_outbox_sent(mind, token, request_id, remote_id, sent_at_ms)
            .await
    }

    async fn ack_outbox(
        &self,
        mind: &str,
        request_id: &str,
        remote_id: Option<&str>,
        acked_at_ms: i64,
    ) -> Result<OutboxMessage> {
        if armed(&self.failing_outbox_acks) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(injected("database or disk is full"));
        }
        self.inner
            .ack_outbox(mind, request_id, remote_id, acked_at_ms)
            .await
    }

    async fn fail_outbox(
        &self,
        mind: &str,
        request_id: &str,
        failure: &str,
        failed_at_ms: i64,
    ) -> Result<OutboxMessage> {
        self.inner
            .fail_outbox(mind, request_id, failure, failed_at_ms)
            .await
    }

    async fn failed_outbox(&self, mind: &str, limit: i64) -> Result<Vec<OutboxMessage>> {
        self.inner.failed_outbox(mind, limit).await
    }

    async fn ledger(&self, query: &LedgerQuery) -> Result<Vec<LedgerEntry>> {
        if armed(&self.failing_ledger_reads) {
            return Err(injected("the database server closed the connection"));
        }
        self.inner.ledger(query).await
    }

    async fn spend(&self, mind: &str, from_ms: i64, to_ms: i64) -> Result<MicroUsd> {
        if armed(&self.failing_spend_reads) {
            return Err(injected("the database server closed the connection"));
        }
        self.inner.spend(mind, from_ms, to_ms).await
    }

    async fn add_memory(
        &self,
        mind: &str,
        token: FencingToken,
        notes: &[NewMemoryNote],
    ) -> Result<Vec<i64>> {
        self.inner.add_memory(mind, token, notes).await
    }

    async fn memory_newest(&self, mind: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        self.inner.memory_newest(mind, limit).await
    }

    async fn memory_about(&self, mind: &str, sender: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        self.inner.memory_about(mind, sender, limit).await
    }

    async fn memory_search(&self, mind: &str, needle: &str, limit: i64) -> Result<Vec<MemoryNote>> {
        self.inner.memory_search(mind, needle, limit).await
    }

    async fn enqueue_brief(&self, mind: &str, brief: &NewBrief) -> Result<Brief> {
        self.inner.enqueue_brief(mind, brief).await
    }

    async fn claim_brief(
        &self,
        mind: &str,
        token: FencingToken,
        now_ms: i64,
    ) -> Result<Option<Brief>> {
        self.inner.claim_brief(mind, token, now_ms).await
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
        self.inner
            .finish_brief(mind, token, seq, status, result, now_ms)
            .await
    }

    async fn briefs(
        &self,
        mind: &str,
        status: Option<BriefStatus>,
        limit: i64,
    ) -> Result<Vec<Brief>> {
        self.inner.briefs(mind, status, limit).await
    }
}
