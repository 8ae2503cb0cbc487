//! The provider's cache as a session's ledger implies it: one owner for the closed loop's pricing.
//!
//! A replay of the host's ledger ([`super::verify`]) has no request bodies, only sizes: it rebuilds
//! each request's shape from them — the head and the system under their breakpoints, the
//! segment's earlier cached ends as lookup boundaries, the conversation's end under the tail's
//! breakpoint — and prices it against its own cache state. The host needs the same expectation to
//! say which answers found the cache gone: its backend's cache mirror sees the real bytes but
//! starts empty in every new process, so after a restart it expects nothing to be warm, where a
//! replay of the ledger (and the accounting the host restored from it) expects the entries the
//! last host left. Both drive this one type, row by row — the host as it writes each row and when
//! it reads its ledger back after a new lease, the replay as it walks the rows — so the host's
//! `expired` mark is, by construction, the replay's own verdict on the row.
//!
//! Pure: no I/O, no clock; a row's time is its `at_ms`.

use crate::cache::{CacheRules, CacheState, Checkpoint, Fingerprint, Prompt, extend, hash_bytes};
use crate::decide::Action;
use crate::ledger::{Decided, LedgerRow, RowKind, SegmentStart};
use crate::money::Tokens;
use crate::trace::Usage;

/// The cache a session's ledger implies, fed one row at a time in the ledger's order.
#[derive(Debug, Clone, Default)]
pub struct LedgerCache {
    cache: CacheState,
    /// Segments begun so far (the synthetic system's identity).
    segments: u64,
    /// The current segment's head and system (rehydration) tokens, and their prefixes'
    /// fingerprints (by content digest when the record has one, else by size and segment).
    head: Tokens,
    system: Tokens,
    head_fp: Fingerprint,
    system_fp: Fingerprint,
    /// The current segment's cached ends so far: block, tokens, fingerprint.
    ends: Vec<(u32, Tokens, Fingerprint)>,
    /// Clears (masked requests) so far: each rewrites the prompt after the head and system, so
    /// the ends after it are new prefixes.
    clears: u64,
    /// Set by a failed attempt ([`RowKind::FailedAttempt`]) for the row after it.
    attempted: Option<Attempted>,
}

/// What the last row, a failed attempt, left for the row after it. Its retry re-sends the same
/// prompt: the same end, in the same block, under the same clear, in the segment the attempt
/// began if it was a segment's first request (the retry carries the same start, and continues
/// that segment rather than beginning another). A row after it with another end was decided
/// again (another prompt, with or without a clear): the attempt's clear and end are no prefix
/// of it, and the segment's ends are as they were before the attempt.
#[derive(Debug, Clone, PartialEq)]
struct Attempted {
    start: Option<SegmentStart>,
    end: Tokens,
    block: u32,
    /// The segment's ends and clears before the attempt.
    ends: Vec<(u32, Tokens, Fingerprint)>,
    clears: u64,
}

impl LedgerCache {
    /// A session with no rows yet: nothing cached.
    pub fn new() -> LedgerCache {
        LedgerCache::default()
    }

    /// What the cache model says `row` (decided as `decided`, on a model that caches prefixes of
    /// at least `min_cacheable` tokens) read, wrote and paid for, from the cache the rows before
    /// it left — then counts the row's request, so the next row is
    /// priced after it. Only the row's sizes, time, model and decision record are read (never
    /// its `cache_state`), so the host can price a row before it marks it.
    pub fn price(
        &mut self,
        row: &LedgerRow,
        decided: &Decided,
        min_cacheable: Tokens,
        rules: &CacheRules,
    ) -> Usage {
        let attempted = self.attempted.take();
        let begun = attempted.as_ref().and_then(|a| a.start);
        let end = row.usage.cache_read + row.usage.written();
        let again = attempted.as_ref().filter(|a| a.end == end).map(|a| a.block);
        // The segment's ends and clears before the attempts this row follows, kept for the row
        // after it when this one is a failed attempt too.
        let before = match attempted {
            Some(a) if again.is_some() => Some((a.ends, a.clears)),
            Some(a) => {
                // Decided again after the failed attempt: its lineage is not this row's.
                self.ends = a.ends;
                self.clears = a.clears;
                None
            }
            None => None,
        };
        if let Some(start) = &decided.segment
            && begun != Some(*start)
        {
            self.begin_segment(start);
        }
        let (ends, clears) = before.unwrap_or_else(|| (self.ends.clone(), self.clears));
        let masks = matches!(decided.kind, RowKind::Request | RowKind::FailedAttempt)
            && decided.action == Some(Action::Mask);
        // A retry re-sends the attempt's clear, which the ends already took.
        if masks && again.is_none() {
            // The clear rewrote the prompt from its first cleared block on: no earlier end of
            // the segment is a prefix of it any more (a clear that removed less than the
            // requests since added would otherwise read an earlier end as if unchanged).
            self.clears += 1;
            self.ends.clear();
        }
        let checkpoints = self.shape(decided.kind, &row.usage, decided, rules, again);
        if decided.kind == RowKind::FailedAttempt {
            self.attempted = Some(Attempted {
                start: decided.segment.or(begun),
                end,
                block: checkpoints.last().map_or(0, |c| c.block),
                ends,
                clears,
            });
        }
        let prompt = Prompt {
            model: &row.model,
            checkpoints: &checkpoints,
            total_tokens: row.usage.prompt(),
        };
        match self.cache.apply(&prompt, row.at_ms, min_cacheable, rules) {
            Ok(outcome) => outcome.usage(row.usage.output),
            // A shape the cache model refuses is a bug here; price it uncached, loudly different.
            Err(_) => Usage {
                input: row.usage.prompt(),
                output: row.usage.output,
                ..Usage::default()
            },
        }
    }

    fn begin_segment(&mut self, start: &SegmentStart) {
        self.segments += 1;
        self.head = start.head;
        self.system = start.rehydration.max(start.head);
        self.head_fp = extend(hash_bytes(b"head"), start.head_digest.unwrap_or(self.head));
        self.system_fp = match start.system_digest {
            Some(digest) => extend(extend(hash_bytes(b"system"), digest), self.system),
            None => extend(extend(hash_bytes(b"segment"), self.segments), self.system),
        };
        self.ends.clear();
    }

    /// The request's shape from sizes: the head and the system under their breakpoints, the
    /// segment's earlier cached ends (lookup boundaries), and its own cached end under the
    /// tail's breakpoint. A request grows its segment by two blocks (a reply and a message), a
    /// ping by one (the reply it caches); a retry of a failed attempt (`again`, the same end)
    /// none — it is the same prompt.
    fn shape(
        &mut self,
        kind: RowKind,
        usage: &Usage,
        decided: &Decided,
        rules: &CacheRules,
        again: Option<u32>,
    ) -> Vec<Checkpoint> {
        let mut checkpoints = Vec::with_capacity(4 + self.ends.len());
        if self.head > 0 {
            checkpoints.push(Checkpoint {
                block: 0,
                tokens: self.head,
                fingerprint: self.head_fp,
                breakpoint: Some(decided.head_ttl),
            });
        }
        if self.system > self.head {
            checkpoints.push(Checkpoint {
                block: 1,
                tokens: self.system,
                fingerprint: self.system_fp,
                breakpoint: Some(decided.head_ttl),
            });
        }
        if kind == RowKind::HeadPing {
            return checkpoints;
        }
        let end = usage.cache_read + usage.written();
        let last_block = self.ends.last().map_or(1, |e| e.0);
        let block = match again {
            Some(block) => block,
            None => last_block + if kind == RowKind::Ping { 1 } else { 2 },
        };
        let lowest = block.saturating_sub(rules.lookback_blocks);
        for &(b, tokens, fp) in &self.ends {
            let above = checkpoints.last().map_or(0, |c| c.tokens);
            if b >= lowest && tokens > above && tokens <= end {
                checkpoints.push(Checkpoint {
                    block: b,
                    tokens,
                    fingerprint: fp,
                    breakpoint: None,
                });
            }
        }
        if end > self.system && checkpoints.last().is_none_or(|c| c.tokens < end) {
            let fp = extend(
                extend(extend(hash_bytes(b"end"), self.segments), self.clears),
                end,
            );
            checkpoints.push(Checkpoint {
                block,
                tokens: end,
                fingerprint: fp,
                breakpoint: Some(decided.ttl),
            });
            self.ends.push((block, end, fp));
        } else if let Some(last) = checkpoints.last_mut()
            && last.tokens == end
            && last.breakpoint.is_none()
        {
            // The same end as an earlier request (a retry that added nothing): its breakpoint.
            last.breakpoint = Some(decided.ttl);
        }
        // Keep the boundaries the lookback can still reach.
        self.ends.retain(|e| e.0 >= lowest);
        checkpoints
    }
}

/// Whether an answer whose usage is `recorded` read less of the same prefix than the ledger's
/// cache held (`priced`, from [`LedgerCache::price`]): the provider had lost an entry the ledger
/// says was warm — it expired on the way (a late runner, a slow network), or was evicted early.
/// The prompt, prefix and output sizes agree by construction (the row is priced from its own), so
/// the read and write split is all a lost entry can change.
pub fn read_less_of_the_same_prefix(recorded: &Usage, priced: &Usage) -> bool {
    recorded.cache_read < priced.cache_read
        && recorded.cache_read + recorded.written() == priced.cache_read + priced.written()
}
