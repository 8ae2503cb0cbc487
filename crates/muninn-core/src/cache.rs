//! The prompt-cache model: for a rendered request and a cache state, what the provider reads,
//! writes and leaves uncached, and why it missed.
//!
//! The rules are those of `shared/reference/anthropic-prompt-caching.md`, each with a test:
//!
//! - **Prefix match up to and including a breakpoint.** An entry is keyed by the fingerprint of the
//!   whole prompt prefix through the block that carried `cache_control` (tools → system → messages
//!   in order, so a change at any level changes every later fingerprint).
//! - **At most 4 breakpoints**; a 5th is [`CacheError::TooManyBreakpoints`], worded like the API's
//!   400.
//! - **Longer TTLs first**: a 1h breakpoint after a 5m one is [`CacheError::TtlOrder`].
//! - **Lookback of 20 blocks**: at each breakpoint the provider checks for an entry ending there
//!   and walks back up to 20 block boundaries for one an earlier request wrote.
//! - **Writes only at breakpoints**: the tokens between the longest read and each later breakpoint
//!   are written, at the TTL of the breakpoint that closes them; tokens after the last breakpoint
//!   are uncached input.
//! - **TTL from the request start, refreshed on a hit**: a hit moves the entry's expiry to
//!   `now + ttl`; a write sets it. An expiry never moves back: a request applied out of order,
//!   at a time before one already applied, leaves the later expiry standing.
//! - **Minimum cacheable size per model**: a breakpoint whose prefix is shorter is neither written
//!   nor read, without error.
//! - **Per-model cache**: entries of one model are invisible to another.
//!
//! Conservation holds for every request: `uncached + written + read == prompt`.
//!
//! A request is described by [`Checkpoint`]s rather than by its blocks' text: a checkpoint is a
//! block boundary with the cumulative token count and prefix fingerprint there. The renderer lists
//! every block; the replay engine lists only the few boundaries that can matter (the head, the
//! previous request's end, the new end), which is what makes replay run at millions of requests per
//! second.
//!
//! This module is pure: time is a parameter, there is no I/O.

use crate::ledger::MissCause;
use crate::money::Tokens;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A cache TTL tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Ttl {
    /// The default 5-minute TTL.
    #[serde(rename = "5m")]
    FiveMinutes,
    /// The extended 1-hour TTL.
    #[serde(rename = "1h")]
    OneHour,
}

impl Ttl {
    /// The TTL in milliseconds.
    pub const fn millis(self) -> i64 {
        match self {
            Ttl::FiveMinutes => 5 * 60 * 1000,
            Ttl::OneHour => 60 * 60 * 1000,
        }
    }

    /// `5m` or `1h`.
    pub const fn label(self) -> &'static str {
        match self {
            Ttl::FiveMinutes => "5m",
            Ttl::OneHour => "1h",
        }
    }
}

impl std::str::FromStr for Ttl {
    type Err = String;
    fn from_str(s: &str) -> Result<Ttl, String> {
        match s {
            "5m" => Ok(Ttl::FiveMinutes),
            "1h" => Ok(Ttl::OneHour),
            other => Err(format!("unknown TTL {other:?}: expected 5m or 1h")),
        }
    }
}

/// The fingerprint of a prompt prefix. Two prefixes with the same fingerprint are taken to be
/// byte-identical.
pub type Fingerprint = u64;

/// A 64-bit hash of bytes: FNV-1a, then a SplitMix64 finaliser so that the low bits are well mixed
/// (the cache's hash map uses the fingerprint itself as the hash). Stable across runs and machines.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hasher = BytesHasher::default();
    hasher.update(bytes);
    hasher.finish()
}

/// [`hash_bytes`] of bytes given a piece at a time: the hash of their concatenation, so that a
/// caller need not hold them all at once (the importer hashes a message's canonical JSON as it
/// writes it, however large).
#[derive(Debug, Clone, Copy)]
pub struct BytesHasher(u64);

impl Default for BytesHasher {
    fn default() -> BytesHasher {
        BytesHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl BytesHasher {
    /// Adds `bytes` to what was given so far.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The [`hash_bytes`] of all that was given.
    pub fn finish(self) -> u64 {
        mix(self.0)
    }
}

impl std::io::Write for BytesHasher {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The fingerprint of a prefix extended by one block whose content hashes to `block`.
pub fn extend(prefix: Fingerprint, block: u64) -> Fingerprint {
    mix(prefix ^ block.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A block boundary of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Index (0-based, over the whole prompt: tools, system, messages) of the block this boundary
    /// ends. Strictly increasing along a prompt's checkpoints.
    pub block: u32,
    /// Prompt tokens from the start through this block.
    pub tokens: Tokens,
    /// Fingerprint of the prefix through this block.
    pub fingerprint: Fingerprint,
    /// The `cache_control` on this block, if any.
    pub breakpoint: Option<Ttl>,
}

/// A request as the cache model sees it.
#[derive(Debug, Clone, Copy)]
pub struct Prompt<'a> {
    /// The model the request goes to (the cache is per model).
    pub model: &'a str,
    /// Block boundaries in order; every breakpoint must be one of them.
    pub checkpoints: &'a [Checkpoint],
    /// All prompt tokens, including those after the last checkpoint.
    pub total_tokens: Tokens,
}

/// Parameters of the provider's cache, injected (never literals in logic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRules {
    /// Breakpoints allowed per request (4).
    pub max_breakpoints: usize,
    /// Block boundaries walked back from a breakpoint looking for an entry (20).
    pub lookback_blocks: u32,
    /// Entries kept per model before expired ones are pruned.
    pub max_entries_per_model: usize,
    /// An automatic cache's retention: every entry lives this long after its last use, whatever
    /// the tier of the breakpoint that wrote it (OpenAI's best-effort retention). `None`: the
    /// tier decides (Anthropic).
    pub lifetime_ms: Option<i64>,
}

impl CacheRules {
    /// How long an entry written or refreshed at `ttl` lives.
    pub fn lifetime(&self, ttl: Ttl) -> i64 {
        self.lifetime_ms.unwrap_or_else(|| ttl.millis())
    }
}

impl Default for CacheRules {
    fn default() -> Self {
        CacheRules {
            max_breakpoints: 4,
            lookback_blocks: 20,
            max_entries_per_model: 4096,
            lifetime_ms: None,
        }
    }
}

/// A request the provider would refuse. The messages follow the API's 400 wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// More breakpoints than allowed.
    #[error("A maximum of {max} blocks with cache_control may be provided. Found {found}.")]
    TooManyBreakpoints {
        /// The limit (4).
        max: usize,
        /// How many the request had.
        found: usize,
    },
    /// A 1h breakpoint after a 5m one. The API prefixes its message with the offending field
    /// (`system.1.cache_control.ttl: …`), which only the request body can name: the simulator
    /// adds it.
    #[error(
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."
    )]
    TtlOrder {
        /// The offending 1h block's index.
        block: u32,
    },
    /// Checkpoints out of order, or tokens beyond the prompt's total: a bug in the caller.
    #[error("malformed prompt: {0}")]
    Malformed(&'static str),
}

/// One cached prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Prompt tokens in the prefix.
    pub tokens: Tokens,
    /// The TTL it was written with.
    pub ttl: Ttl,
    /// When it expires (Unix ms); an entry with `expires_at_ms <= now` is dead but remembered, so
    /// that a later miss can be attributed to TTL expiry.
    pub expires_at_ms: i64,
}

/// A hasher for keys that are hashes already (fingerprints here, uuid hashes in the importer):
/// it passes a `u64` through, since hashing a hash again only costs time on every lookup.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type EntryMap = HashMap<Fingerprint, Entry, BuildHasherDefault<IdentityHasher>>;

/// The cache of one model.
#[derive(Debug, Clone, Default)]
pub struct ModelCache {
    entries: EntryMap,
}

impl ModelCache {
    /// The entry for a fingerprint, live or dead.
    pub fn get(&self, fingerprint: Fingerprint) -> Option<&Entry> {
        self.entries.get(&fingerprint)
    }

    /// Number of entries held (live and remembered dead ones).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was ever cached (or everything was pruned).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The provider's cache as the model believes it to be: entries per model.
#[derive(Debug, Clone, Default)]
pub struct CacheState {
    models: HashMap<String, ModelCache>,
}

/// What the provider does with one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheOutcome {
    /// Prompt tokens neither read nor written.
    pub uncached: Tokens,
    /// Tokens written with the 5-minute TTL.
    pub write_5m: Tokens,
    /// Tokens written with the 1-hour TTL.
    pub write_1h: Tokens,
    /// Tokens read from the cache.
    pub read: Tokens,
    /// Why the request read less than it could have, if it did.
    pub miss: Option<MissCause>,
}

impl CacheOutcome {
    /// As a [`crate::trace::Usage`] with `output` output tokens.
    pub fn usage(&self, output: Tokens) -> crate::trace::Usage {
        crate::trace::Usage {
            input: self.uncached,
            cache_write_5m: self.write_5m,
            cache_write_1h: self.write_1h,
            cache_read: self.read,
            output,
        }
    }

    /// All tokens written.
    pub fn written(&self) -> Tokens {
        self.write_5m + self.write_1h
    }
}

/// What [`CacheState::apply`] will change: computed by [`CacheState::predict`] without touching
/// the state.
#[derive(Debug, Clone, Default)]
pub struct Prediction {
    /// The outcome.
    pub outcome: CacheOutcome,
    /// Entries to refresh or create, with their new expiry.
    updates: Vec<(Fingerprint, Entry)>,
}

impl CacheState {
    /// An empty cache.
    pub fn new() -> CacheState {
        CacheState::default()
    }

    /// One model's cache, if anything was ever cached for it.
    pub fn model(&self, model: &str) -> Option<&ModelCache> {
        self.models.get(model)
    }

    /// The outcome of sending `prompt` at `now_ms`, without changing the state.
    pub fn predict(
        &self,
        prompt: &Prompt<'_>,
        now_ms: i64,
        min_cacheable: Tokens,
        rules: &CacheRules,
    ) -> Result<Prediction, CacheError> {
        let mut prediction = Prediction::default();
        self.predict_into(prompt, now_ms, min_cacheable, rules, &mut prediction)?;
        Ok(prediction)
    }

    /// [`CacheState::predict`] into a reused buffer (the replay engine's hot path).
    pub fn predict_into(
        &self,
        prompt: &Prompt<'_>,
        now_ms: i64,
        min_cacheable: Tokens,
        rules: &CacheRules,
        out: &mut Prediction,
    ) -> Result<(), CacheError> {
        out.updates.clear();
        out.outcome = CacheOutcome::default();
        validate(prompt, rules)?;
        let cache = self.models.get(prompt.model);
        let at = Moment {
            now_ms,
            min_cacheable,
            rules,
        };
        let read = read_point(cache, prompt.checkpoints, &at, &mut out.updates);
        let covered = write_beyond(cache, prompt.checkpoints, &at, &read, out);
        out.outcome.read = read.tokens;
        out.outcome.uncached = prompt.total_tokens - covered;
        out.outcome.miss = if read.tokens < read.best_any {
            Some(MissCause::TtlExpiry)
        } else if read.tokens == 0 && out.outcome.written() > 0 {
            match cache {
                Some(c) if !c.is_empty() => Some(MissCause::PrefixChange),
                _ => Some(MissCause::ColdStart),
            }
        } else {
            None
        };
        Ok(())
    }

    /// Applies a prediction made on this state (refreshes and writes), pruning dead entries when a
    /// model holds more than the rules allow.
    pub fn commit(
        &mut self,
        model: &str,
        prediction: &Prediction,
        now_ms: i64,
        rules: &CacheRules,
    ) {
        if prediction.updates.is_empty() {
            return;
        }
        let cache = match self.models.get_mut(model) {
            Some(c) => c,
            None => self.models.entry(model.to_string()).or_default(),
        };
        for (fingerprint, entry) in &prediction.updates {
            // Never shorten an entry's life. In time order a refresh or a write always expires
            // later than what it replaces (a write replaces only a dead entry); a request applied
            // at a time before one already applied (requests that arrived together) reads what
            // that one wrote, and must not cut short the expiry it set.
            let kept = cache.entries.entry(*fingerprint).or_insert(*entry);
            if entry.expires_at_ms > kept.expires_at_ms {
                *kept = *entry;
            }
        }
        if cache.entries.len() > rules.max_entries_per_model {
            // Forget the entries that died first; keep at most half the budget of dead ones so
            // miss attribution still sees recent expiries.
            let mut dead: Vec<(i64, Fingerprint)> = cache
                .entries
                .iter()
                .filter(|(_, e)| e.expires_at_ms <= now_ms)
                .map(|(f, e)| (e.expires_at_ms, *f))
                .collect();
            dead.sort_unstable();
            let excess = cache
                .entries
                .len()
                .saturating_sub(rules.max_entries_per_model / 2);
            for (_, f) in dead.into_iter().take(excess) {
                cache.entries.remove(&f);
            }
        }
    }

    /// Predicts and commits in one step.
    pub fn apply(
        &mut self,
        prompt: &Prompt<'_>,
        now_ms: i64,
        min_cacheable: Tokens,
        rules: &CacheRules,
    ) -> Result<CacheOutcome, CacheError> {
        let prediction = self.predict(prompt, now_ms, min_cacheable, rules)?;
        self.commit(prompt.model, &prediction, now_ms, rules);
        Ok(prediction.outcome)
    }

    /// The expiry of `model`'s entry for exactly the prefix `fingerprint`, live or dead: a dead
    /// entry is remembered (until pruned) and reports its past expiry, so callers asking whether
    /// the prefix is warm must compare the result with their `now` (live iff `now < expiry`).
    pub fn expiry(&self, model: &str, fingerprint: Fingerprint) -> Option<i64> {
        self.models
            .get(model)
            .and_then(|c| c.entries.get(&fingerprint))
            .map(|e| e.expires_at_ms)
    }
}

/// When and under which rules a prompt is predicted.
struct Moment<'a> {
    now_ms: i64,
    min_cacheable: Tokens,
    rules: &'a CacheRules,
}

/// What a request reads: the longest live prefix, the TTL of the entry it came from, and the
/// longest prefix found dead or alive (to name a miss).
struct ReadPoint {
    tokens: Tokens,
    ttl: Option<Ttl>,
    best_any: Tokens,
}

/// Reads: for each eligible breakpoint, the nearest boundary at or before it (within the lookback)
/// that holds a live entry. The request reads the longest such prefix. Every live entry found is
/// refreshed (pushed to `updates`). The longest dead-or-alive match is kept to name a miss.
fn read_point(
    cache: Option<&ModelCache>,
    cps: &[Checkpoint],
    at: &Moment<'_>,
    updates: &mut Vec<(Fingerprint, Entry)>,
) -> ReadPoint {
    let mut read = ReadPoint {
        tokens: 0,
        ttl: None,
        best_any: 0,
    };
    let Some(cache) = cache else { return read };
    for (bi, bp) in cps.iter().enumerate() {
        if bp.breakpoint.is_none() || bp.tokens < at.min_cacheable {
            continue;
        }
        let lowest_block = bp.block.saturating_sub(at.rules.lookback_blocks);
        for cp in cps[..=bi].iter().rev() {
            if cp.block < lowest_block {
                break;
            }
            if let Some(entry) = cache.entries.get(&cp.fingerprint) {
                read.best_any = read.best_any.max(cp.tokens);
                if entry.expires_at_ms > at.now_ms {
                    // The prompt's own count: a fingerprint match means the same prefix, and
                    // conservation then holds by construction.
                    if cp.tokens > read.tokens {
                        read.tokens = cp.tokens;
                        read.ttl = Some(entry.ttl);
                    }
                    updates.push((
                        cp.fingerprint,
                        Entry {
                            expires_at_ms: at.now_ms + at.rules.lifetime(entry.ttl),
                            ..*entry
                        },
                    ));
                    break;
                }
            }
        }
    }
    read
}

/// Writes: every eligible breakpoint beyond the read point writes the span since the previous
/// written boundary (or the read point) at its own TTL, into `out`'s outcome and updates.
/// Breakpoints inside the read prefix cost nothing; a live entry there is used, so it is
/// refreshed. A missing or dead one is stamped for free, but only with the lifetime of the entry
/// that was actually read — the content is cached exactly that long — so a 1h breakpoint added on
/// a warm 5m prefix does not become a free 1h entry. Returns the tokens covered (read or written).
fn write_beyond(
    cache: Option<&ModelCache>,
    cps: &[Checkpoint],
    at: &Moment<'_>,
    read: &ReadPoint,
    out: &mut Prediction,
) -> Tokens {
    let mut covered = read.tokens;
    for bp in cps {
        let Some(ttl) = bp.breakpoint else { continue };
        if bp.tokens < at.min_cacheable {
            continue;
        }
        if bp.tokens > covered {
            let span = bp.tokens - covered;
            match ttl {
                Ttl::FiveMinutes => out.outcome.write_5m += span,
                Ttl::OneHour => out.outcome.write_1h += span,
            }
            covered = bp.tokens;
            let entry = Entry {
                tokens: bp.tokens,
                ttl,
                expires_at_ms: at.now_ms + at.rules.lifetime(ttl),
            };
            out.updates.push((bp.fingerprint, entry));
        } else if !out.updates.iter().any(|(f, _)| *f == bp.fingerprint) {
            let live = cache
                .and_then(|c| c.entries.get(&bp.fingerprint))
                .filter(|e| e.expires_at_ms > at.now_ms);
            let stamped = match live {
                Some(e) => Some(Entry {
                    expires_at_ms: at.now_ms + at.rules.lifetime(e.ttl),
                    ..*e
                }),
                None => read.ttl.map(|ttl| Entry {
                    tokens: bp.tokens,
                    ttl,
                    expires_at_ms: at.now_ms + at.rules.lifetime(ttl),
                }),
            };
            if let Some(entry) = stamped {
                out.updates.push((bp.fingerprint, entry));
            }
        }
    }
    covered
}

fn validate(prompt: &Prompt<'_>, rules: &CacheRules) -> Result<(), CacheError> {
    let mut breakpoints = 0;
    let mut seen_5m = false;
    let mut previous: Option<&Checkpoint> = None;
    for cp in prompt.checkpoints {
        if let Some(p) = previous {
            if cp.block <= p.block {
                return Err(CacheError::Malformed("checkpoint blocks must increase"));
            }
            if cp.tokens < p.tokens {
                return Err(CacheError::Malformed("checkpoint tokens must not decrease"));
            }
        }
        if let Some(ttl) = cp.breakpoint {
            breakpoints += 1;
            match ttl {
                Ttl::FiveMinutes => seen_5m = true,
                Ttl::OneHour if seen_5m => return Err(CacheError::TtlOrder { block: cp.block }),
                Ttl::OneHour => {}
            }
        }
        previous = Some(cp);
    }
    if breakpoints > rules.max_breakpoints {
        return Err(CacheError::TooManyBreakpoints {
            max: rules.max_breakpoints,
            found: breakpoints,
        });
    }
    if previous.is_some_and(|p| p.tokens > prompt.total_tokens) {
        return Err(CacheError::Malformed("checkpoint tokens exceed the prompt"));
    }
    Ok(())
}

/// Builds checkpoints from a list of blocks `(tokens, content hash, breakpoint)`, fingerprinting
/// the prefix through each block. The renderer and the simulator use this; the model name is not
/// part of the fingerprint because the state is already per model.
pub fn checkpoints_from_blocks(blocks: &[(Tokens, u64, Option<Ttl>)]) -> (Vec<Checkpoint>, Tokens) {
    let mut out = Vec::with_capacity(blocks.len());
    let mut tokens = 0;
    let mut fingerprint: Fingerprint = 0;
    for (i, &(t, hash, breakpoint)) in blocks.iter().enumerate() {
        tokens += t;
        fingerprint = extend(fingerprint, hash);
        out.push(Checkpoint {
            block: i as u32,
            tokens,
            fingerprint,
            breakpoint,
        });
    }
    (out, tokens)
}
