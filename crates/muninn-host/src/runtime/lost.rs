//! A Persona request sent whose answer was lost with its host: ledgered at its estimate.
//!
//! A `kill -9` (or any death of the process) after the provider answered a Persona turn and
//! before the turn's commit loses the answer: the commit is the first write that could hold
//! it, and the Messages API keeps no copy (`pending.rs`). The batch is answered again by the
//! next holder, and the provider billed both. Before, the first one's cost was counted nowhere:
//! no ledger row, so neither the spend cap, `muninn status`, nor a replay of the ledger saw it.
//!
//! # What is recorded before sending
//!
//! The delivery's transcript item, which the host writes before it sends the turn (`attempt.rs`:
//! what the model is shown is durable before it is asked), carries the cache model's
//! prediction for the request under `SENT` (`SentEstimate`): its time, its place in the
//! segment, the tokens it reads, writes and sends uncached, and their price at that time. No
//! text: the numbers only, some 200 bytes, in the write the turn already made — a normal turn
//! pays nothing more.
//!
//! # What a new lease writes
//!
//! When a runner takes the Mind's lease (a restart after a crash, a takeover), before it reads
//! the Persona's accounting back from the ledger, it looks at the Persona transcript's last
//! item. A delivery with an estimate there was recorded and neither answered (its reply would
//! follow it) nor failed (a failure notice would, and a cut attempt's row is in the ledger at
//! the send's time, committed before the notice): it may have been sent, and its answer lost.
//! It becomes one ledger row (`lost_row`): decision [`ATTEMPT_LOST`], of the kind of an
//! attempt the provider billed but did not answer whole ([`RowKind::FailedAttempt`],
//! `attempted: request`), the usage and cost the estimate said, output 0 — the cache model
//! predicts no output, and a guess would be as likely too high (an invented bill) as too low —
//! and an event saying it is an estimate that may not have been billed at all (a kill between
//! the delivery's write and the send, the crash point `host-delivery-recorded`, sent nothing).
//! It is written only when the ledger holds no Persona row at or after the send, read under
//! the lease the row is then committed under: a second restart, a commit that landed though its
//! answer was lost, or hosts on PostgreSQL racing to take the Mind over find the row there, and
//! a holder whose lease another took since its read meets the fence. So it is written once
//! (`lost_answers::hosts_racing_for_the_mind_on_postgres_ledger_a_lost_answer_once`). The turn
//! key made from the item's seq is a backstop no test reaches — for a read that missed the row
//! behind more than `LOOK_AHEAD` rows — where
//! [`muninn_store::StoreError::TurnAlreadyRecorded`] counts as written.
//!
//! Being a failed attempt's row, it prices what the request read and wrote of the cache and is
//! no request of the segment: the accounting (`accounting.rs` `restore`, which runs right
//! after) and `muninn replay --closed-loop` count it as such, and the conversation does not
//! grow by it — the batch is asked again in a fresh segment, whose first row is the next.
//!
//! Not covered: the Self's requests (a brief's ask mark says it may have been sent, but carries
//! no estimate), a retry sent after a failure notice (the notice ends the transcript), an
//! invalid reply's retry (the turn's second request: the row counts the first), pings, flushes
//! and compactions.
//!
//! A kill after the delivery's write and before the send leaves the same trace, and so the same
//! row, for a request never made. Nothing cheap tells the two apart: the next holder's request
//! for the batch is billed either way and rendered in a fresh segment (what it reads of the
//! cache says nothing reliable of another prompt's fate), and a mark written before the send
//! would only narrow the window, at a second write per turn. So the row says it is an estimate
//! that may not have been billed, and `muninn ledger`'s table says so too.

use super::persona::Plan;
use super::{MindRunner, RuntimeError};
use crate::crash_points::CrashPoint;
use muninn_backend::Backend;
use muninn_core::decide::Event;
use muninn_core::ledger::{ATTEMPT_LOST, Decided, LedgerRow, RowKind, SegmentStart};
use muninn_core::money::MicroUsd;
use muninn_core::trace::Usage;
use muninn_store::{
    FencingToken, LedgerQuery, Role, StoreError, TranscriptItem, TranscriptKind, TurnRecord,
};
use serde::{Deserialize, Serialize};

/// The body key of a Persona delivery's `SentEstimate`.
pub(super) const SENT: &str = "sent";

/// The Mind's rows read after a send, looking for the Persona's: the Self's few in between.
const LOOK_AHEAD: i64 = 64;

/// What the row's event says of it.
pub(super) const LOST: &str = "sent, its answer lost with its host (a crash or a kill before \
     the answer's commit): counted at the cache model's prediction, output 0 (an estimate; it \
     may not have been billed, if the host died before sending)";

/// The cache model's prediction for a request about to be sent, recorded with its delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SentEstimate {
    /// When it was sent, Unix ms.
    pub(super) at_ms: i64,
    /// Its turn in the segment (0: the segment's first).
    pub(super) turn: u64,
    /// Milliseconds since the session's previous request.
    pub(super) idle_gap_ms: i64,
    /// `warm` or `cold`, as the decider saw the cache.
    pub(super) state: String,
    /// Whether it began a turn.
    pub(super) boundary: bool,
    /// The prompt's tokens as predicted; output 0.
    pub(super) usage: Usage,
    /// Their price at the time.
    pub(super) cost: MicroUsd,
    /// The segment it opens, as estimated when it was opened, if it is the segment's first
    /// request: the row carries it (as a cut attempt at a segment's first request does), so a
    /// replay prices it in that segment, on its head and system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) segment_start: Option<SegmentStart>,
}

impl<B: Backend> MindRunner<B> {
    /// The estimate of a Persona request planned as `plan`, sent at `now`: the prediction the
    /// spend cap's worst case is made of (`budget.rs`), without its output bound.
    pub(super) fn sent_estimate(&self, plan: &Plan, now: i64) -> SentEstimate {
        let session = self.session(Role::Persona);
        let acc = &session.acc;
        let (mut view, delta, boundary) = match plan.event {
            Event::Arrival { boundary, delta } => {
                (acc.arrival_view(boundary, plan.tool_uses), delta, boundary)
            }
            Event::Expiring | Event::HeadExpiring => (acc.view(), 0, false),
        };
        let starts = plan.starts();
        // The tools head the prompt, before the system layers: the reply schema the backend
        // sends as a tool. A segment's record estimated from its layers leaves them out (the
        // first request's measure, which replaces it, counts them), and so did this estimate:
        // a head of 2,400 tokens where the provider billed 2,941.
        let tools = session.backend.tool_tokens(&[], Some(&self.persona_schema));
        let segment_start =
            session
                .starting
                .filter(|_| starts)
                .map(|starting| match starting.measured {
                    true => starting.start,
                    false => SegmentStart {
                        head: starting.start.head + tools,
                        rehydration: starting.start.rehydration + tools,
                        ..starting.start
                    },
                });
        if let Some(start) = &segment_start {
            // The segment it opens, as its record says: the head and system a replay shapes it on.
            view.bounds.head_tokens = start.head;
            view.bounds.rehydrate_tokens = start.rehydration.saturating_sub(start.head);
        } else if starts {
            // As the worst case: a session never started knows no head yet.
            view.bounds.head_tokens = view.bounds.head_tokens.max(self.layer_tokens() + tools);
        }
        let usage = view.predicted_usage(starts, delta, now);
        SentEstimate {
            at_ms: now,
            turn: if starts {
                0
            } else {
                u64::from(acc.segment_requests())
            },
            idle_gap_ms: acc.last_request_ms().map_or(0, |last| now - last),
            state: plan.state.to_string(),
            boundary,
            usage,
            cost: self.price.cost(&usage),
            segment_start,
        }
    }

    /// Under a new lease, before the Persona's accounting is read back: ledgers the request of
    /// a delivery that ends the Persona transcript with an estimate and has no Persona row at
    /// or after its send, once (see the module docs). A store failure that may pass fails the
    /// step (it is tried again at the next); any other is logged and the request left
    /// unledgered, as before.
    pub(super) async fn ledger_lost_answer(&self, token: FencingToken) -> Result<(), RuntimeError> {
        let store = &self.host.store;
        let tail = store
            .transcript_tail(&self.mind.id, Role::Persona, 1)
            .await?;
        let Some((item, sent)) = tail
            .last()
            .and_then(|item| unanswered(item).map(|s| (item, s)))
        else {
            return Ok(());
        };
        // A row of the Persona's at or after the send accounts for it already: the row of an
        // attempt the provider cut, committed before the failure's notice (`failed.rs`).
        let since = LedgerQuery {
            mind: Some(self.mind.id.clone()),
            from_ms: Some(sent.at_ms),
            limit: Some(LOOK_AHEAD),
            ..LedgerQuery::default()
        };
        let rows = store.ledger(&since).await?;
        if rows.iter().any(|e| e.row.role == Role::Persona.as_str()) {
            return Ok(());
        }
        let decided = self.lost_decided(&sent);
        let row = lost_row(&self.mind.id, &self.mind.model, item, &sent, decided);
        let record = TurnRecord {
            turn_key: Some(format!("lost answer persona item {}", item.seq)),
            ledger: vec![row],
            ..TurnRecord::default()
        };
        match store.record_turn(&self.mind.id, token, &record).await {
            Ok(_) => {
                tracing::warn!(
                    mind = %self.mind.id,
                    item = item.seq,
                    batch = item.body["batch"].as_str().unwrap_or(""),
                    cost_micro_usd = sent.cost.0,
                    "a Persona request sent before its host stopped has no answer (lost before \
                     its commit): ledgered at its estimate, once; its batch is asked again"
                );
                self.host.crash_points.reached(CrashPoint::LostLedgered);
            }
            Err(StoreError::TurnAlreadyRecorded { .. }) => {}
            Err(e) if e.is_retryable() => return Err(e.into()),
            Err(e) => tracing::error!(
                mind = %self.mind.id,
                item = item.seq,
                cost_micro_usd = sent.cost.0,
                error = %e,
                "a Persona request whose answer was lost could not be ledgered at its estimate"
            ),
        }
        Ok(())
    }

    /// The decision record of a lost request's row: no question (it was asked on no row that
    /// survived), the Persona's parameters now.
    fn lost_decided(&self, sent: &SentEstimate) -> Decided {
        let session = self.session(Role::Persona);
        let params = self.params(Role::Persona, super::accounting::pinging(&session.backend));
        Decided {
            kind: RowKind::FailedAttempt,
            event: None,
            action: None,
            reason: None,
            segment: sent.segment_start,
            lost_at_ms: None,
            policy: self.policy.to_string(),
            ttl: params.ttl,
            head_ttl: params.head_ttl,
            bounds: params.bounds,
            decide_before_expiry_ms: params.decide_before_expiry_ms,
            can: params.can,
            tool_results: Default::default(),
            attempted: Some(RowKind::Request),
        }
    }
}

/// The estimate of `item`, when it is a delivery recorded with one: the last item of the
/// Persona transcript, so neither answered nor failed.
fn unanswered(item: &TranscriptItem) -> Option<SentEstimate> {
    if item.kind != TranscriptKind::Delivery {
        return None;
    }
    serde_json::from_value(item.body.get(SENT)?.clone()).ok()
}

/// The ledger row of the request of `item` (a delivery of `mind`'s Persona, sent to `model`)
/// whose answer was lost: its estimate, labelled as one (`LOST`, the item's seq).
pub(super) fn lost_row(
    mind: &str,
    model: &str,
    item: &TranscriptItem,
    sent: &SentEstimate,
    decided: Decided,
) -> LedgerRow {
    let usage = sent.usage;
    LedgerRow {
        mind: mind.to_string(),
        role: Role::Persona.as_str().to_string(),
        segment: item.segment.max(0) as u64,
        turn: sent.turn,
        at_ms: sent.at_ms,
        idle_gap_ms: sent.idle_gap_ms,
        model: model.to_string(),
        prefix_tokens: usage.cache_read + usage.written(),
        rehydration_tokens: sent.segment_start.map_or(0, |s| s.rehydration),
        usage,
        raw_usage: None,
        cost: sent.cost,
        predicted_read: usage.cache_read,
        predicted_write: usage.written(),
        cache_state: sent.state.clone(),
        miss_cause: None,
        provider_miss: None,
        decision: ATTEMPT_LOST.to_string(),
        boundary: sent.boundary,
        events: vec![serde_json::json!({
            "attempt_failed": LOST,
            "request_id": null,
            "lost_with_host": item.seq,
        })],
        decided: Some(decided),
    }
}
