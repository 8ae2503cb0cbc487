//! What traffic outside a thread tells the cache model, learned from earlier answers only: heads
//! kept warm by requests the traces do not hold (at session openings and at resumptions) and
//! whether a model's prompt head changes at a thread's first tool load.

use std::collections::{BTreeMap, HashMap};

use super::{H1_BLOCK, ModelReplay, is_main_group};
use crate::cache::{Checkpoint, Fingerprint, Prompt, Ttl};
use crate::money::Tokens;
use crate::trace::{ThreadKind, Trace};
use crate::validate::ValidateOptions;

/// Session openings on one tools head that nothing in the traces had kept warm, by what they
/// read.
///
/// Claude Code's tools head (tools and the static system preamble) is the same text for every
/// session of a client version with the same tools, and the provider can serve it from traffic
/// the traces do not hold: on `dotfiles-universal` and `omarchy-backup` (tuning parts) sessions
/// opened hours or days after the user's last recorded request read exactly the tools head an
/// earlier session had read; on `dotsv2` and `claude_backup` some such openings read it and some
/// read nothing. Nothing in a transcript says which, so the model counts, per tools head
/// (model and size, sizes within [`POOL_PERCENT`] of the smaller pooled: [`pooled`]), the
/// main-thread openings on it while it was dead or never written in the model's cache: read all
/// the same (`warm`) or not (`cold`).
/// While `warm` leads, a session opening on that dead head finds it warm, as if the outside
/// traffic had just refreshed it.
///
/// Per head size, not per model: a tally per model mixes client versions, and on `claude_backup`'s
/// tuning part it took a new version's head (never seen read) for warm. Openings apart from
/// resumptions: in the middle of a session, after a long pause, `claude_backup`'s heads were mostly
/// cold while its openings read them, so a resumption is judged by a tally of its own
/// ([`ModelReplay::open_on_dead_head`]). Causal: the tallies count the answers of earlier requests.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Openings {
    pub(super) warm: u32,
    pub(super) cold: u32,
}

/// Per tally key ([`tally_key`]), per tools-head size: the openings (or the resumptions) on a
/// dead head of that size, by what they read ([`Openings`]).
pub(super) type HeadTallies = HashMap<String, BTreeMap<Tokens, Openings>>;

/// The key a main-thread trace's head is tallied under, beside its size. Only main threads are
/// tallied, so with the tools head shared across sessions (the default) the model is the
/// head's whole key. With it not shared (`share_tools_head: false`) every session has a head of
/// its own, so the evidence is kept per session as well: pooled by model alone, one session's
/// resumptions counted for another session's head of a size within [`POOL_PERCENT`], a head
/// the model says no other session can have kept warm.
pub(super) fn tally_key(trace: &Trace, options: &ValidateOptions) -> String {
    if options.share_tools_head {
        trace.model.clone()
    } else {
        format!("{}\0{}", trace.model, trace.session)
    }
}

/// How far apart, in percent of the smaller, two sizes of a model's tools head may lie for
/// their tallies to be pooled.
///
/// One user's tools head is not one size: on `claude-config`'s tuning part (Sonnet 4.6) the
/// heads its openings read ranged from about 19.9k to 21.8k tokens, session by session (the
/// tools and skills loaded differ), so a tally per exact size never gathered evidence and its
/// openings stayed a coin flip (11 warm, 9 cold). Pooled within 10% — tried 1, 3, 5, 10, 15 and
/// 20 on the tuning parts of ten users — its tuning part gains most; a new client version's
/// head further off still starts unbelieved (docs/validation.md, "Looked at a sixth time").
const POOL_PERCENT: Tokens = 10;

/// The tally of `model`'s heads whose size and `tokens` lie within [`POOL_PERCENT`] of the
/// smaller of the two: a size `s` is pooled with `tokens` when `|s - tokens| * 100 <=
/// POOL_PERCENT * min(s, tokens)`. A relation, not a window around the later size, so whether
/// two sessions' heads share a tally does not depend on which opened first. Each tallied
/// opening sits under one size, so it counts at most once. Integer arithmetic in `u128`: no
/// overflow or rounding drift at the ends of `Tokens`.
fn pooled(tallies: &HeadTallies, model: &str, tokens: Tokens) -> Openings {
    let t = u128::from(tokens);
    let percent = u128::from(POOL_PERCENT);
    // Above: s - t <= P% of t. Below: t - s <= P% of s, so s >= 100 t / (100 + P), rounded up.
    let high = Tokens::try_from(t + t * percent / 100).unwrap_or(Tokens::MAX);
    let low = Tokens::try_from((t * 100).div_ceil(100 + percent)).unwrap_or(Tokens::MAX);
    tallies
        .get(model)
        .map(|sizes| {
            sizes
                .range(low..=high)
                .fold(Openings::default(), |a, (_, o)| Openings {
                    warm: a.warm + o.warm,
                    cold: a.cold + o.cold,
                })
        })
        .unwrap_or_default()
}

/// Requests of one model that sent a thread's first tool load (`TraceRequest::tools_loaded`)
/// within five minutes of the thread's previous request, by whether they read the whole prefix
/// the previous request cached (`kept`) or less (`broke`).
///
/// Claude Code loads deferred tools (`ToolSearch` answers with `tool_reference` blocks) and
/// sends their definitions with the next request. On the tuning parts every model but one kept
/// the prefix at a thread's first load (Sonnet 4.6, Opus 4.6, Opus 4.8, Opus 5: 32 of 33), and
/// Opus 4.7 (`personal-git`, client 2.1.114 and 2.1.143) broke it at 13 of 13 — read nothing
/// (8) or only a tools head (5) — while its later loads in the same threads kept it (10 of 11):
/// the first load changes the head of that model's prompt. Nothing in a transcript line says
/// which a model does, so it is learned per model (and thread group kind) from the loads
/// already seen; while breaks lead, a first load is predicted as a tool change. Causal: the
/// tally counts earlier answers, and the flag is written before the request.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FirstLoads {
    pub(super) kept: u32,
    pub(super) broke: u32,
}

/// How soon after the thread's previous request a first load must come to be counted: within
/// the shortest TTL (an entry is dead at its expiry, so strictly less), so a miss says the
/// prompt changed, not that the entry expired.
const LOAD_WITHIN_MS: i64 = 5 * 60 * 1000;

impl ModelReplay {
    /// Tallies what request `index` read where the tools head `head` was dead: an opening's or a
    /// resumption's, warm when it read something.
    pub(super) fn tally_dead_head(
        &mut self,
        trace: &Trace,
        index: usize,
        head: Checkpoint,
        recorded: Tokens,
        options: &ValidateOptions,
    ) {
        let tallies = if self.opens_session(trace, index) {
            &mut self.openings
        } else {
            &mut self.resumptions
        };
        let tally = tallies
            .entry(tally_key(trace, options))
            .or_default()
            .entry(head.tokens)
            .or_default();
        if recorded > options.tolerance {
            tally.warm += 1;
        } else {
            tally.cold += 1;
        }
    }

    /// Whether request `index` of `trace` opens its thread: the trace's first request, and no
    /// earlier request of the same session and thread on another model. A model switch starts a
    /// new trace at index 0, but a thread that already had requests is no session opening: its
    /// first request on the new model is judged (and tallied) with the resumptions.
    pub(super) fn opens_session(&self, trace: &Trace, index: usize) -> bool {
        index == 0
            && !self
                .started
                .contains(&(trace.session.clone(), trace.thread.clone()))
    }

    /// Whether request `index` of `trace` is a thread's first tool load that the model's earlier
    /// first loads say changes the prompt's head ([`FirstLoads`]).
    pub(super) fn load_breaks(&self, trace: &Trace, index: usize) -> bool {
        let loads = index > 0
            && trace.kind != ThreadKind::Compaction
            && trace.requests.get(index).is_some_and(|r| r.tools_loaded);
        loads
            && self
                .first_loads
                .get(&(trace.model.clone(), is_main_group(trace)))
                .is_some_and(|t| t.broke > t.kept)
    }

    /// Counts a thread's first tool load, once its answer is known, where nothing else explains
    /// a shorter read: soon after the previous request, no compaction, no other tool change.
    pub(super) fn count_load(
        &mut self,
        trace: &Trace,
        index: usize,
        reference: Tokens,
        options: &ValidateOptions,
    ) {
        let Some((previous, req)) = index
            .checked_sub(1)
            .and_then(|p| trace.requests.get(p))
            .zip(trace.requests.get(index))
        else {
            return;
        };
        if !req.tools_loaded
            || trace.kind == ThreadKind::Compaction
            || req.compacted
            || req.tools_changed
            || req.at_ms - previous.at_ms >= LOAD_WITHIN_MS
        {
            return;
        }
        let tally = self
            .first_loads
            .entry((trace.model.clone(), is_main_group(trace)))
            .or_default();
        if req.usage.cache_read + options.tolerance >= reference {
            tally.kept += 1;
        } else {
            tally.broke += 1;
        }
    }

    /// Whether `model`'s entry for `fingerprint` is live at `at_ms`.
    fn live(&self, model: &str, fingerprint: Fingerprint, at_ms: i64) -> bool {
        self.cache
            .expiry(model, fingerprint)
            .is_some_and(|e| e > at_ms)
    }

    /// The tools head a main-thread request (`cps`, not yet sent) carries while nothing in the
    /// traces keeps it warm, for [`Openings`] to count once the answer is known: a session's
    /// opening in the openings' tally, a later request (a session resumed after its entries
    /// expired) in the resumptions'. Where that tally's requests read the head more often than
    /// not, it is written just before the request, as the outside traffic that keeps it warm
    /// would have. `fallback_ttl` is the tier of the trace's latest write before the request.
    ///
    /// Two tallies, because the habit differs by user and by kind: on the tuning parts, of the
    /// later main-thread requests that read a head or nothing where the model predicted
    /// nothing, `bradymholt-dotfiles` (5-minute writes only) read a head at 15 of 15,
    /// `home-projects` and `dotfiles-universal` 5 of 5, `claude_backup` 3 of 31; and
    /// `claude_backup`'s openings, mostly read, said nothing of its resumptions (one tally for
    /// both was tried and dropped: docs/validation.md, variant (a)). Only after the thread's
    /// previous write expired: a head dead because the model learned another size for it
    /// (the conversation still live) is no resumption, and counted as one it taught warm heads
    /// that `personal-git`'s resumptions then missed.
    pub(super) fn open_on_dead_head(
        &mut self,
        trace: &Trace,
        index: usize,
        cps: &[Checkpoint],
        fallback_ttl: Ttl,
        options: &ValidateOptions,
    ) -> Option<Checkpoint> {
        let at_ms = trace.requests.get(index)?.at_ms;
        // A resumption comes after the thread's previous write expired: a head that is dead
        // only because the model learned another size for it says nothing of outside traffic.
        // An entry is live while its expiry is ahead, so one TTL after the write it is dead.
        // A previous request that wrote nothing refreshed its entries at the tier of the
        // thread's latest write (`fallback_ttl`), and they live as the rules say.
        let expired = index
            .checked_sub(1)
            .and_then(|p| trace.requests.get(p))
            .is_none_or(|p| {
                let ttl = p.write_ttl().unwrap_or(fallback_ttl);
                at_ms - p.at_ms >= options.rules.lifetime(ttl)
            });
        let head = cps
            .first()
            .filter(|c| c.block == H1_BLOCK && trace.kind == ThreadKind::Main && expired)
            .filter(|c| !self.live(&trace.model, c.fingerprint, at_ms))
            .copied()?;
        let tallies = if self.opens_session(trace, index) {
            &self.openings
        } else {
            &self.resumptions
        };
        let seen = pooled(tallies, &tally_key(trace, options), head.tokens);
        if seen.warm <= seen.cold {
            return Some(head);
        }
        let outside = [Checkpoint {
            breakpoint: Some(Ttl::FiveMinutes),
            ..head
        }];
        let prompt = Prompt {
            model: &trace.model,
            checkpoints: &outside,
            total_tokens: head.tokens,
        };
        if self
            .cache
            .apply(&prompt, at_ms - 1, options.min_cacheable, &options.rules)
            .is_err()
        {
            self.errors += 1;
        }
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tally holding one warm opening on `model`'s head of `tokens`.
    fn warm_at(model: &str, tokens: Tokens) -> HeadTallies {
        let mut tallies = HeadTallies::new();
        tallies
            .entry(model.to_string())
            .or_default()
            .insert(tokens, Openings { warm: 1, cold: 0 });
        tallies
    }

    /// Pooling is a relation between two sizes, not a window around the later one: whether
    /// 20,000 and 22,200 (11% of the smaller, 9.9% of the larger) share a tally must not
    /// depend on which of the two was seen first. Within 10% of the smaller: 22,000 is pooled
    /// with 20,000, 22,001 is not.
    #[test]
    fn pooling_is_symmetric() {
        for (a, b) in [
            (20_000, 22_200),
            (20_000, 22_001),
            (20_000, 22_222),
            (100, 111),
        ] {
            let forth = pooled(&warm_at("m", a), "m", b).warm;
            let back = pooled(&warm_at("m", b), "m", a).warm;
            assert_eq!(forth, back, "{a} and {b}");
        }
        assert_eq!(pooled(&warm_at("m", 20_000), "m", 22_000).warm, 1);
        assert_eq!(pooled(&warm_at("m", 22_000), "m", 20_000).warm, 1);
        assert_eq!(pooled(&warm_at("m", 20_000), "m", 22_001).warm, 0);
        assert_eq!(pooled(&warm_at("m", 22_001), "m", 20_000).warm, 0);
    }

    /// The window's arithmetic neither overflows nor wraps at the ends of `Tokens`.
    #[test]
    fn pooling_at_the_extremes_of_the_size() {
        for tokens in [0, 1, u64::MAX / 10 + 1, u64::MAX - 1, u64::MAX] {
            assert_eq!(
                pooled(&warm_at("m", tokens), "m", tokens).warm,
                1,
                "{tokens}"
            );
        }
        assert_eq!(pooled(&warm_at("m", u64::MAX), "m", u64::MAX / 2).warm, 0);
        assert_eq!(pooled(&warm_at("m", 0), "m", 1).warm, 0);
    }

    /// A model's tally says nothing of another model's heads.
    #[test]
    fn pooling_stays_within_the_model() {
        assert_eq!(pooled(&warm_at("m", 20_000), "n", 20_000).warm, 0);
    }
}
