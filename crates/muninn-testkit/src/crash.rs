//! The crash harness's checker: after hosts were killed and restarted under load, is every
//! delivery answered exactly once, does the transcript replay to the state the store holds,
//! and does the ledger agree with the transcript?
//!
//! It reads only the store, the way an operator's audit would:
//!
//! - **mailbox** — each source id the load generator posted (and saw accepted) is in the
//!   mailbox exactly once (missing: lost; twice: duplicated);
//! - **outbox** — the request ids `<mind>-<first>-<last>-<index>` are unique and their batches
//!   cover every seq the mailbox holds exactly once (a seq in no batch is lost, in two was
//!   answered twice; seqs a crash skipped are in no delivery and count for nothing); the ack
//!   position is the last seq;
//! - **transcript** — replaying the Persona transcript (a batch is answered when its delivery
//!   item is followed by a reply or a recorded failure before the next delivery) gives exactly
//!   the outbox's batches, each once;
//! - **ledger** — one Persona request row per answered batch (pings, flushes and an invalid
//!   reply's retry aside).
//!
//! Also a small seeded generator ([`SplitMix64`]) so a run's random kill points can be replayed
//! from the seed it prints.

use muninn_core::ledger::RowKind;
use muninn_store::{LedgerQuery, Role, Store, TranscriptKind};
use std::collections::{BTreeMap, BTreeSet};

/// Rows read at most per query (far above what a long run posts to one Mind).
const READ_LIMIT: i64 = 1_000_000;

/// What the checker found for one Mind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MindCheck {
    /// Deliveries the load generator saw accepted.
    pub posted: usize,
    /// Posted, but not in the mailbox or in no answered batch.
    pub lost: usize,
    /// In the mailbox twice, or answered by more than one batch (or one request id twice).
    pub duplicated: usize,
    /// Batches answered (outbox).
    pub batches: usize,
    /// What did not agree, in words (empty: all agreed).
    pub problems: Vec<String>,
}

/// Checks `mind` against the source ids posted to it.
pub async fn check_mind(
    store: &dyn Store,
    mind: &str,
    posted: &BTreeSet<String>,
) -> Result<MindCheck, muninn_store::StoreError> {
    let mut check = MindCheck {
        posted: posted.len(),
        ..MindCheck::default()
    };
    let mailbox = store.pending_deliveries(mind, 0, READ_LIMIT).await?;
    let mut by_source: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &mailbox {
        *by_source.entry(d.source_id.as_str()).or_default() += 1;
    }
    for id in posted {
        match by_source.get(id.as_str()) {
            None => check.lost += 1,
            Some(1) => {}
            Some(n) => check.duplicated += n - 1,
        }
    }
    let last_seq = mailbox.last().map_or(0, |d| d.seq);
    let outbox = outbox_batches(store, mind, &mut check).await?;
    check.batches = outbox.len();
    // Counted per seq the mailbox holds, not per number up to the last: after a crash the store
    // skips the rest of a reserved block of ids rather than risk issuing one twice, so the seqs
    // may have gaps that no delivery ever had.
    let mut answers: BTreeMap<i64, u32> = mailbox.iter().map(|d| (d.seq, 0)).collect();
    for (first, last) in &outbox {
        for (_, n) in answers.range_mut(*first..=*last) {
            *n += 1;
        }
    }
    for n in answers.values() {
        match n {
            0 => check.lost += 1,
            1 => {}
            n => check.duplicated += (*n - 1) as usize,
        }
    }
    let ack = store.ack_position(mind).await?;
    if ack != last_seq {
        check
            .problems
            .push(format!("{mind}: acknowledged through {ack} of {last_seq}"));
    }
    let replayed = transcript_batches(store, mind).await?;
    let expected: Vec<String> = outbox
        .iter()
        .map(|(first, last)| format!("{mind}-{first}-{last}"))
        .collect();
    if replayed != expected {
        check.problems.push(format!(
            "{mind}: the transcript replays to batches {replayed:?}, the outbox holds {expected:?}"
        ));
    }
    let turns = persona_turn_rows(store, mind).await?;
    if turns != replayed.len() {
        check.problems.push(format!(
            "{mind}: {turns} Persona turn rows in the ledger, {} answered turns in the transcript",
            replayed.len()
        ));
    }
    Ok(check)
}

/// The outbox's batches `(first, last)`, sorted; a repeated request id or a malformed one is
/// counted in `check`.
async fn outbox_batches(
    store: &dyn Store,
    mind: &str,
    check: &mut MindCheck,
) -> Result<Vec<(i64, i64)>, muninn_store::StoreError> {
    let outbox = store.unacked_outbox(mind, READ_LIMIT).await?;
    let mut ids = BTreeSet::new();
    let mut batches = BTreeSet::new();
    for m in &outbox {
        if !ids.insert(m.request_id.clone()) {
            check.duplicated += 1;
        }
        // `<mind>-<first>-<last>-<index>`; the Mind's id may itself hold dashes.
        let parts: Vec<&str> = m.request_id.rsplitn(4, '-').collect();
        match (parts.get(2), parts.get(1)) {
            (Some(first), Some(last)) => match (first.parse(), last.parse()) {
                (Ok(first), Ok(last)) => {
                    batches.insert((first, last));
                }
                _ => check
                    .problems
                    .push(format!("{mind}: malformed request id {}", m.request_id)),
            },
            _ => check
                .problems
                .push(format!("{mind}: malformed request id {}", m.request_id)),
        }
    }
    Ok(batches.into_iter().collect())
}

/// The batches the Persona transcript shows answered, in order: a delivery item names its
/// batch; a reply (or a recorded failure) answers the last one shown.
async fn transcript_batches(
    store: &dyn Store,
    mind: &str,
) -> Result<Vec<String>, muninn_store::StoreError> {
    let items = store
        .transcript_tail(mind, Role::Persona, READ_LIMIT)
        .await?;
    let mut answered = Vec::new();
    let mut shown: Option<String> = None;
    for item in &items {
        match item.kind {
            TranscriptKind::Delivery => {
                shown = item.body["batch"].as_str().map(str::to_string);
            }
            TranscriptKind::Reply => answered.extend(shown.take()),
            TranscriptKind::Notice if item.body.get("failure").is_some() => {
                answered.extend(shown.take());
            }
            _ => {}
        }
    }
    // Sorted as the outbox's batches are (by first seq): answered in mailbox order anyway.
    answered.sort_by_key(|b| first_seq(b));
    Ok(answered)
}

fn first_seq(batch: &str) -> i64 {
    // `<mind>-<first>-<last>`: the second field from the right.
    let mut fields = batch.rsplit('-');
    fields.next();
    fields.next().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Persona request rows in the ledger: one per answered turn.
async fn persona_turn_rows(
    store: &dyn Store,
    mind: &str,
) -> Result<usize, muninn_store::StoreError> {
    let rows = store
        .ledger(&LedgerQuery {
            mind: Some(mind.to_string()),
            ..LedgerQuery::default()
        })
        .await?;
    Ok(rows
        .iter()
        .filter(|e| {
            e.row.role == "persona"
                && e.row
                    .decided
                    .as_ref()
                    .map_or_else(|| RowKind::of_decision(&e.row.decision), |d| d.kind)
                    == RowKind::Request
                && e.row.decision != "retry_invalid_reply"
        })
        .count())
}

/// A small seeded pseudo-random generator (SplitMix64): the harness prints its seed, so a
/// failing run's kill points can be replayed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..high` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }
}
