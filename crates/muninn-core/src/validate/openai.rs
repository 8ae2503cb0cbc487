//! The OpenAI cache model's side of the check: automatic prefix caching, as Codex rollouts see it.
//!
//! OpenAI caches every prompt of at least `min_cacheable` tokens on its own, in `cache_step`-token
//! steps, with no breakpoint and no TTL to choose; an unused prefix survives a best-effort
//! `retention` of inactivity. A rollout records, per request, the prompt's size and the cached
//! part (`cached_input_tokens`) — nothing else. The model predicts request k's read from the
//! requests before k and from what the client knew before sending k (its prompt's size, a new
//! turn, a compaction):
//!
//! - **Appending** (the prompt did not shrink): the previous request's prompt *and its output*
//!   are cached (the provider caches the prefix it processed, the generated tokens included), so
//!   k reads `min(Pₖ, Pₖ₋₁ + Oₖ₋₁)` rounded down to the step, less the thread's *tail deficit* —
//!   how far short of that the last such read fell (after a compaction Codex re-sends a tail that
//!   differs on every request, so reads then fall short by a steady amount).
//! - **A new user message after a turn that reasoned**: OpenAI's reasoning models send an earlier
//!   turn's reasoning items back only until the next user message; from then on they are left out
//!   of the prompt, so its bytes change where the last turn's first reasoning item sat — right
//!   after the prompt of the turn's first request that reasoned (`TraceRequest::reasoning`). k
//!   reads that prompt, rounded down. A turn without reasoning leaves the prefix whole. (On the
//!   tuning rows of the 15 unseen rollouts, 44 of the 71 first requests of a later turn read
//!   that prompt to within a step; all 15 that followed a turn without reasoning read the whole
//!   previous prompt.) Less the thread's *turn deficit*, learned as the tail deficit is: how far
//!   short of that prompt the last two new turns' reads fell. On the tuning part of the
//!   localpush rollouts (Codex 0.104) the longest rollout's last 16 new turns each read 12–61
//!   steps short of it (13 of them 12–29), as if something sent before each turn's reasoning
//!   changed at the next; on the 15 unseen rollouts' tuning rows (Codex 0.57–0.77) a new turn's
//!   read stayed within a step or two of it, or fell far (a machine's stale copy).
//! - **A shrunk prompt** (Codex dropped earlier reasoning items, or rewrote the history): the
//!   prefix survives up to the start of the current turn, so k reads the turn's first prompt,
//!   rounded down.
//! - **A compaction, or a gap past the retention**: only the *shared head* survives — the
//!   instructions every session of the model sends first, which the first request of a thread
//!   reveals (its read). Every Codex session of the organisation sends it, so it is taken to be
//!   always warm (on the tuning part of the rollouts it was read after gaps of up to 12 hours);
//!   on a model no thread has opened yet, the size another model's threads read stands in.
//!
//! Classes are measured against the previous request's prompt rounded down to the step. A read is
//! [`super::ReadClass::None`] up to one step (reads are quantised) and [`super::ReadClass::Prefix`]
//! up to [`STALE_STEPS`] steps short of that prompt (but never a read back to the shared head, or
//! of nothing: those found nothing of the conversation), because OpenAI's cache is a machine's, not
//! the organisation's: requests are routed by a hash of the prompt's first ~256 tokens (and the
//! `prompt_cache_key`, which Codex sets per conversation) to a machine that holds the prefixes *it*
//! processed, and a key sending more than about 15 requests a minute — a Codex tool loop does —
//! overflows to other machines. A request served by a machine that missed the thread's last request
//! or two reads the conversation as it stood then: a few hundred tokens short, which is the
//! conversation's cache found, not a head. The same classes apply to the naive rule; the read-token
//! error, which counts every token short, is unchanged by them.

use super::Slack;
use crate::miss::MissCause;
use crate::money::Tokens;
use crate::price::ModelPrice;
use crate::trace::Trace;
use std::collections::HashMap;

/// What the model remembers of a thread.
#[derive(Debug, Clone, Copy, Default)]
struct Thread {
    prompt: Tokens,
    output: Tokens,
    at_ms: i64,
    /// The prompt of the current turn's first request.
    turn_start: Tokens,
    /// The prompt of the current turn's first request whose response reasoned: where the next
    /// user message's prompt stops matching (see the module docs). `None` while no request of
    /// the turn has reasoned.
    reasoning_from: Option<Tokens>,
    /// How far short of the appended prefix the last two appending reads fell.
    deficits: [Tokens; 2],
    /// How far short of where the last turn began to reason the last two new turns' reads fell.
    turn_deficits: [Tokens; 2],
}

impl Thread {
    /// The tail deficit believed in: the smaller of the last two, so that one short read (a
    /// routing hiccup) does not move the next prediction, while a steady one does.
    fn deficit(&self) -> Tokens {
        self.deficits[0].min(self.deficits[1])
    }

    /// The turn deficit believed in, the same way.
    fn turn_deficit(&self) -> Tokens {
        self.turn_deficits[0].min(self.turn_deficits[1])
    }
}

/// What a prediction expected the request to read, when its shortfall teaches a deficit.
#[derive(Debug, Clone, Copy)]
enum Expected {
    /// Nothing to learn (a first request, a compaction, a gap past the retention, a shrunk
    /// prompt).
    Nothing,
    /// The appended prefix, in full: the shortfall is the tail deficit.
    Tail(Tokens),
    /// The prefix up to where the last turn began to reason: the shortfall is the turn deficit.
    Turn(Tokens),
}

/// Remembers `short` among the last two deficits, unless the read found nothing or fell
/// further short than a steady deficit goes (a divergence, not a deficit).
fn remember(deficits: &mut [Tokens; 2], expected: Tokens, recorded: Tokens) {
    let short = expected.saturating_sub(recorded);
    if recorded > 0 && short <= MAX_DEFICIT {
        *deficits = [deficits[1], short];
    }
}

/// The replay state of the OpenAI cache model.
#[derive(Debug, Default)]
pub(super) struct OpenAiReplay {
    threads: HashMap<String, Thread>,
    /// Per model: the shared head's size, as the latest first request of a thread read it.
    heads: HashMap<String, Tokens>,
    /// The latest head read on any model: the stand-in for a model no thread has opened yet.
    latest_head: Tokens,
}

/// The most a tail deficit is believed to be: beyond it a short read is taken for a
/// divergence, not a steady tail.
const MAX_DEFICIT: Tokens = 8_192;

impl OpenAiReplay {
    /// The shared instructions head of `model` as the model knows it before the next request:
    /// the latest first read of a thread on `model`, or while none has been seen on it, the
    /// latest on any model (0 before any). Codex sends every model nearly the same instructions
    /// and the first request of a thread always found them warm — traffic outside the rollouts
    /// keeps each model's copy — so another model's head size is a better guess than none: on
    /// the 15 unseen rollouts' tuning rows the two threads that opened a model no earlier
    /// thread had used read heads of 3,072 and 3,200 tokens where the head borrowed was 3,072
    /// for both, each a head, where predicting nothing was wrong.
    pub(super) fn head(&self, model: &str) -> Tokens {
        self.heads.get(model).copied().unwrap_or(self.latest_head)
    }

    /// Predicts request `index` of `trace` and the cache's miss cause, then learns from what the
    /// provider answered.
    pub(super) fn step(
        &mut self,
        trace: &Trace,
        index: usize,
        price: &ModelPrice,
    ) -> (Tokens, Option<MissCause>) {
        let Some(req) = trace.requests.get(index) else {
            return (0, None);
        };
        let prompt = req.usage.prompt();
        let at = req.at_ms;
        let head = self.head(&trace.model);
        let thread = self.threads.get(&trace.id).copied();
        let (predicted, expected, miss) = match thread {
            None if head > 0 => (head, Expected::Nothing, None),
            None => (0, Expected::Nothing, Some(MissCause::ColdStart)),
            Some(t) if at - t.at_ms > price.retention_ms => {
                (head, Expected::Nothing, Some(MissCause::TtlExpiry))
            }
            Some(_) if req.compacted => (head, Expected::Nothing, Some(MissCause::MessagesChange)),
            Some(
                t @ Thread {
                    reasoning_from: Some(from),
                    ..
                },
            ) if req.boundary => {
                let from = price.cacheable(from.min(prompt));
                (
                    from.saturating_sub(t.turn_deficit()),
                    Expected::Turn(from),
                    Some(MissCause::MessagesChange),
                )
            }
            Some(t) if prompt < t.prompt => (
                price.cacheable(t.turn_start.min(prompt)),
                Expected::Nothing,
                Some(MissCause::MessagesChange),
            ),
            Some(t) => {
                let full = price.cacheable(prompt.min(t.prompt + t.output));
                (full.saturating_sub(t.deficit()), Expected::Tail(full), None)
            }
        };
        let read = predicted.min(price.cacheable(prompt));
        let read = if read < price.min_cacheable { 0 } else { read };

        // Learn from the answer, for the requests that follow.
        let recorded = req.usage.cache_read;
        let mut next = thread.unwrap_or_default();
        match expected {
            Expected::Tail(full) => remember(&mut next.deficits, full, recorded),
            Expected::Turn(from) => remember(&mut next.turn_deficits, from, recorded),
            Expected::Nothing => {}
        }
        if thread.is_none() || req.boundary {
            next.turn_start = prompt;
            next.reasoning_from = None;
        }
        // Whether this request's answer reasoned is read only now, for the requests after it.
        if req.reasoning && next.reasoning_from.is_none() {
            next.reasoning_from = Some(prompt);
        }
        if thread.is_none() && recorded > 0 {
            self.heads.insert(trace.model.clone(), recorded);
            self.latest_head = recorded;
        }
        next.prompt = prompt;
        next.output = req.usage.output;
        next.at_ms = at;
        self.threads.insert(trace.id.clone(), next);
        (read, miss)
    }
}

/// How many cache steps short of the previous prompt a read may fall and still be classed the
/// conversation's prefix: a machine a request or two behind (see the module docs). On the
/// tuning parts of the three unseen Codex sources, reads within a turn that fell more than one
/// step short fell 2–8 steps short 150 times, 9–16 steps 11 times and more 58 times (most of
/// those back to an older request's prefix or the instructions head): eight steps is where the
/// few-hundred-token shortfalls end.
pub(super) const STALE_STEPS: Tokens = 8;

/// The slack of an OpenAI trace's classes (see [`super::classify_within`]): a read up to
/// [`STALE_STEPS`] cache steps short of `reference` is the prefix, but never a read that reaches
/// no further than the shared instructions `head` (learned from earlier threads' first reads,
/// 0 while unknown), which found nothing of the conversation (found in review: early in a
/// conversation the head lies within eight steps of the reference); a read of at most one step
/// (or the tolerance) is none.
pub(super) fn slack(
    price: &ModelPrice,
    reference: Tokens,
    head: Tokens,
    tolerance: Tokens,
) -> Slack {
    let stale = price.cache_step.saturating_mul(STALE_STEPS).max(tolerance);
    let prefix = match head {
        0 => stale,
        head => stale.min(reference.saturating_sub(head + price.cache_step)),
    };
    Slack {
        prefix,
        none: tolerance.max(price.cache_step),
    }
}

/// The reference prefix of request `index`: the previous request's prompt, rounded down to the
/// cache step.
pub(super) fn reference(trace: &Trace, index: usize, price: &ModelPrice) -> Tokens {
    index
        .checked_sub(1)
        .and_then(|i| trace.requests.get(i))
        .map_or(0, |prev| price.cacheable(prev.usage.prompt()))
}

/// The naive rule on an automatic cache: the previous request's prompt (rounded down) if the gap
/// is within the retention, else nothing.
pub(super) fn naive_read(trace: &Trace, index: usize, price: &ModelPrice) -> Tokens {
    let (Some(prev), Some(cur)) = (
        index.checked_sub(1).and_then(|i| trace.requests.get(i)),
        trace.requests.get(index),
    ) else {
        return 0;
    };
    if cur.at_ms - prev.at_ms <= price.retention_ms {
        price
            .cacheable(prev.usage.prompt())
            .min(price.cacheable(cur.usage.prompt()))
    } else {
        0
    }
}
