//! A trace's growth, as the replay reconstructs it from the recorded usage alone: a static head
//! (tools + system) and one [`Turn`] per request, each adding Δⱼ tokens to the logical
//! conversation (see the parent module's docs).

use super::ReplayConfig;
use crate::money::Tokens;
use crate::price::Provider;
use crate::trace::{Trace, Usage};

/// One request of the reconstructed session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// When it is sent.
    pub at_ms: i64,
    /// Tokens it adds to the logical conversation.
    pub delta: Tokens,
    /// Of those, the uncached tail after the last breakpoint (≤ delta).
    pub uncached: Tokens,
    /// Output tokens (as recorded; the same under every policy).
    pub output: Tokens,
    /// Whether it begins a new turn.
    pub boundary: bool,
    /// Whether the trace recorded a compaction just before it: the recorded client rewrote the
    /// prompt here, inside a tool loop or not (see [`Turn::may_refresh`]).
    pub compacted: bool,
    /// Content blocks it adds (2 when unknown: an assistant reply and the next user message).
    pub blocks: u32,
    /// The recorded usage, for the `recorded` plan and for comparisons.
    pub recorded: Usage,
    /// The tool results it adds (their tokens at most `delta`).
    pub tools: crate::trace::ToolResults,
    /// When the last of them was written, where known ([`Trace`]'s
    /// `TraceRequest::tool_results_at_ms`).
    pub tools_at_ms: Option<i64>,
}

impl Turn {
    /// Whether the optimum's plan may start a new segment at this request: at a turn boundary, or
    /// where the recorded client itself rewrote the prompt (a compaction before it). Online
    /// policies keep to boundaries (the decider's rule: no refresh inside a tool loop); opened to
    /// them, the default refreshed at these points and lost (docs/replay.md "Why `config_files`
    /// replayed at 1.067× recorded": the shared traces without masks passed `never` by 2.3% at a
    /// 20k rehydration). Claude Code compacts automatically when the prompt nears its threshold,
    /// often in the middle of a tool loop; that is the recorded plan's own refresh, and a plan that
    /// may not refresh there cannot follow it, so the optimum would be held above what was paid for
    /// the same traffic. What the refresh costs is unchanged: a compaction opens no new run of the
    /// task (the loop goes on from the summary), only a point where rewriting the prompt is known
    /// to be acceptable.
    pub fn may_refresh(&self) -> bool {
        self.boundary || self.compacted
    }
}

/// Reconstructs a trace's growth: the head size and one [`Turn`] per request.
///
/// Within a recorded segment Δⱼ = Pⱼ − Pⱼ₋₁. A prompt that shrank by more than a fifth, or one
/// marked `compacted`, starts a recorded segment: its content beyond the head is counted as new
/// (the counterfactual session did not compact, so it carries on from there). A small shrink (for
/// example thinking blocks cleared by context management) counts as no growth. So does a large
/// shrink that the very next request undoes (see `is_aside`).
pub fn reconstruct(trace: &Trace, head: Option<Tokens>) -> (Tokens, Vec<Turn>) {
    let head = head.unwrap_or_else(|| {
        trace
            .requests
            .iter()
            .map(|r| r.usage.prompt() - r.usage.input.min(r.usage.prompt()))
            .min()
            .unwrap_or(0)
    });
    let mut turns = Vec::with_capacity(trace.requests.len());
    let mut previous: Option<Tokens> = None;
    for (i, r) in trace.requests.iter().enumerate() {
        let prompt = r.usage.prompt().max(head);
        let aside = previous.is_some_and(|p| is_aside(trace, i, p));
        let delta = match previous {
            None => prompt - head,
            Some(p) if prompt >= p => prompt - p,
            Some(_) if aside => 0,
            Some(p) if r.compacted || prompt * 5 < p * 4 => prompt - head,
            Some(_) => 0,
        };
        // The conversation an aside stepped out of is the one the next request continues.
        if !aside {
            previous = Some(prompt);
        }
        turns.push(Turn {
            at_ms: r.at_ms,
            delta,
            uncached: r.usage.input.min(delta),
            output: r.usage.output,
            boundary: r.boundary || i == 0,
            compacted: r.compacted,
            blocks: if r.blocks_added == 0 {
                2
            } else {
                r.blocks_added.min(1_000_000)
            },
            recorded: r.usage,
            tools: crate::trace::ToolResults {
                tokens: r.tool_results.tokens.min(delta),
                uses: r.tool_results.uses,
            },
            tools_at_ms: r.tool_results_at_ms,
        });
    }
    (head, turns)
}

/// Whether request `i`, whose prompt shrank by more than a fifth from `previous` without being
/// marked `compacted`, is an aside: a request on another, shorter context (Codex 0.77 logs such
/// single requests in its main thread, 12,546 tokens between prompts of 50,086 and 53,043) that
/// the very next request leaves again, its prompt back at `previous` or beyond, unmarked too.
/// Read as a compaction, the dip's content and then the whole way back up count as new tokens
/// that every later prompt carries; a real compaction's prompt stays small.
fn is_aside(trace: &Trace, i: usize, previous: Tokens) -> bool {
    let r = &trace.requests[i];
    let shrank = r.usage.prompt() * 5 < previous * 4;
    shrank
        && !r.compacted
        && trace
            .requests
            .get(i + 1)
            .is_some_and(|next| !next.compacted && next.usage.prompt() >= previous)
}

/// [`reconstruct`], then fitted to the provider's cache: on an automatic cache (OpenAI) every
/// request caches its whole prompt, rounded down to the cache step, so only the remainder is
/// left uncached — not what the recorded request happened to miss.
pub(super) fn reconstruct_for(trace: &Trace, config: &ReplayConfig<'_>) -> (Tokens, Vec<Turn>) {
    let (head, mut turns) = reconstruct(trace, config.assumptions.head_tokens);
    let price = config.price;
    if price.provider == Provider::OpenAi {
        for turn in &mut turns {
            let prompt = turn.recorded.prompt();
            turn.uncached = (prompt - price.cacheable(prompt)).min(turn.delta);
        }
    }
    (head, turns)
}
