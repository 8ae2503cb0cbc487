//! The decider: one pure function that chooses what a session does next.
//!
//! `decide(policy, view, event, now)` performs no I/O and reads no clock. The live host calls it
//! with what its ledger and cache model say about a session; `muninn replay` calls the very same
//! function with what the replay engine reconstructs. A [`Decision`] names the action, every
//! alternative considered with its priced estimate, and the reason.
//!
//! # Actions
//!
//! | action | what the session does | priced as |
//! |---|---|---|
//! | [`Action::Append`] | sends the next request on the current segment | read P (warm) or write P (cold), plus the new tail |
//! | [`Action::Refresh`] | flushes memory (if not already flushed) and starts a new segment from head + memory | flush (read P + instruction + memory output) + write R |
//! | [`Action::Ping`] | keep-warm request, `max_tokens: 0` (or 1), breakpoint on the cached prefix | read P + a tiny uncached tail + [`Bounds::ping_output_tokens`] (0 or 1) |
//! | [`Action::Flush`] | writes memory now, while the cache is warm, so that a cold wake can restart cheaply; then lets the cache expire | read P + instruction + memory output |
//! | [`Action::LetExpire`] | nothing: the cache is allowed to expire | 0 now |
//! | [`Action::Mask`] | sends the next request with the provider's tool-result clear (`clear_tool_uses_20250919`) | read up to the first cleared block + write the rest of the shorter prompt ([`crate::mask`]) |
//!
//! # Policies
//!
//! - `ski-rental` (default): deterministic break-even rules, each at most 2× the hindsight optimum.
//!   *Idle*: ping while the pings spent this gap plus the next stay within one "buy" — the extra
//!   cost of a cold wake over a warm one; then let the cache expire, flushing first if a restart
//!   from memory will be cheaper than rewriting P at the cold wake. *Growth*: once the read excess
//!   accumulated since the last rehydration, Σ r·(Pₜ − R), reaches the cost of one rebuild (flush +
//!   write R), refresh at the next turn boundary — or, if the session goes idle first, at the gap:
//!   flush as the tail expires and restart at the wake, unless the last answer awaits tool results
//!   (no idle flush then: the wake may not start a segment; [`SessionView::gap_refresh_due`]).
//!   *Learning*: both break-evens are scaled by what the Mind's earlier refreshes and pings paid
//!   back ([`crate::learn`]): a refresh waits for as many rebuilds as one has been worth; a gap's
//!   pings stop early where the Mind's earlier gaps that lasted as long mostly outlasted the
//!   budget. On a 5-minute cache the head's budget counts its share of the tail's pings
//!   ([`SessionView::head_rent`]), and a gap past every gap the Mind has shown stops pinging
//!   ([`GapStats::outlasted`]). *Mask*: at a warm request whose prompt holds clearable tool results
//!   (all but the last [`Bounds::mask_keep_tool_uses`]), clear them when the `r·C` each later
//!   request of the segment saves, times the requests the segment is expected still to have
//!   ([`crate::learn::SegmentLengths::remaining`], the Mind's own history), exceeds the clear's
//!   extra cost now — and exceeds what a refresh would gain over the same horizon when the growth
//!   rule would refresh. A clear that pays still waits until the reads of what it would remove
//!   since the segment's last clear reach its extra cost ([`SessionView::mask_due`]: each clear
//!   pays a rewrite, so clearing at every request that pays would clear in small bites), unless the
//!   growth rule's refresh bounds its horizon. At a cold wake, where the prompt is rewritten
//!   anyway, a clear costs less than appending and goes at once ([`SessionView::price_clear`]),
//!   unless a restart is cheaper still. Masking is not a refresh: it keeps the segment, is allowed
//!   inside a tool loop (the results of the latest tool uses stay), and needs the backend to clear
//!   ([`Capabilities::mask`]).
//! - `predictive`: the same actions, but an idle ping is sent only while its expected saving under
//!   the idle-gap distribution fitted so far exceeds its price; the ski-rental budget stays as a
//!   guard, so it is never worse than ski-rental's 2× bound on pings.
//! - `rebuild`: a fresh segment at every turn boundary (today's Persona).
//! - `never`: append until the context ceiling, then refresh (Claude Code's auto-compaction).
//! - `threshold:F`: refresh at a boundary once the prompt reaches F × the context window.
//! - `ceiling:N`: refresh at a boundary once the prompt reaches N tokens (today's Self: 300,000).
//! - `keepalive:N`: up to N pings per idle gap, otherwise like `never` (Aider).
//!
//! Every policy respects the quality bounds: no refresh before the minimum segment length, none
//! inside a tool loop (only at a boundary; the replay's optimum alone may also start a segment
//! where the recorded client compacted), and a forced refresh when the next request would pass
//! the context ceiling. Only `ski-rental` and `predictive` mask; the baselines never do.

use crate::cache::Ttl;
use crate::learn::Learned;
use crate::money::{MicroUsd, Rate, Tokens};
use serde::{Deserialize, Serialize};

mod arrival;
mod gaps;
mod growth;
mod policy;
mod sent;

pub use gaps::{GAP_HOUR_BAND, GapHours, GapStats, MIN_GAPS_EVIDENCE};
pub use policy::Policy;

/// What a session can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Send the request on the current segment.
    Append,
    /// Start a new segment from head + memory (flushing first if needed).
    Refresh,
    /// Keep the cache warm with a one-token request.
    Ping,
    /// Write memory now, while warm, then let the cache expire.
    Flush,
    /// Do nothing; let the cache expire.
    LetExpire,
    /// Send the request with the provider's tool-result clear: old tool results are replaced by
    /// a placeholder, which rewrites the prompt from the first cleared block on.
    Mask,
}

impl Action {
    /// The action's name as it appears in ledgers and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Append => "append",
            Action::Refresh => "refresh",
            Action::Ping => "ping",
            Action::Flush => "flush",
            Action::LetExpire => "let_expire",
            Action::Mask => "mask",
        }
    }
}

/// Why the decider chose what it chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The cache is warm and no refresh rule fired.
    Warm,
    /// The cache is cold and rewriting the prefix is cheaper than restarting.
    ColdAppendCheaper,
    /// The cache is cold, memory is flushed, and restarting from it is cheaper than rewriting.
    ColdRestartCheaper,
    /// The next request would pass the context ceiling.
    Ceiling,
    /// The read excess since the last rehydration reached the cost of one rebuild.
    GrowthBreakEven,
    /// The policy refreshes at every boundary.
    EveryBoundary,
    /// The prompt reached the policy's size threshold.
    SizeThreshold,
    /// Not a turn boundary (inside a tool loop): refreshes wait.
    InsideToolLoop,
    /// The segment is shorter than the minimum the operator set.
    BelowMinimumSegment,
    /// Pinging stays within the ski-rental budget for this gap.
    RentWithinBudget,
    /// Another ping would pass the budget: buy (let it expire).
    RentExhausted,
    /// The fitted gap distribution makes another ping worth its price.
    ExpectedSavingExceedsPing,
    /// The fitted gap distribution says another ping is unlikely to pay (`predictive`: the wake
    /// before the next expiry; the default: any run of pings the budget still allows).
    ExpectedSavingBelowPing,
    /// The policy never pings.
    NoKeepWarm,
    /// The reads above a rehydration reached one rebuild, but the refreshes paid so far did
    /// not pay back: the break-even is raised by their payback ([`crate::learn`]).
    RefreshesDidNotPayBack,
    /// Another ping fits one cold wake, but not the budget the pings' payback so far left. No
    /// longer chosen (the payback no longer shrinks the budget); kept so stored rows still read.
    PingsDidNotPayBack,
    /// The policy's ping allowance for this gap is spent.
    PingAllowanceSpent,
    /// Memory was already flushed this gap; the session will restart.
    AlreadyFlushed,
    /// The session's backend cannot send this kind of keep-warm ping.
    CannotPing,
    /// Clearing the old tool results saves more over the requests the segment is expected still
    /// to have than it costs now, and more than a refresh would.
    MaskPaysBack,
}

/// An alternative the decider priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alternative {
    /// The action.
    pub action: Action,
    /// Its estimated cost from now until the next request is served.
    pub estimate: MicroUsd,
}

/// The decider's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// Why.
    pub reason: Reason,
    /// Every alternative considered, with its estimate (unused slots are `None`).
    pub alternatives: [Option<Alternative>; 3],
}

impl Decision {
    fn new(action: Action, reason: Reason, alternatives: &[Alternative]) -> Decision {
        let mut slots = [None; 3];
        for (slot, alt) in slots.iter_mut().zip(alternatives) {
            *slot = Some(*alt);
        }
        Decision {
            action,
            reason,
            alternatives: slots,
        }
    }

    /// The alternatives that were considered.
    pub fn considered(&self) -> impl Iterator<Item = &Alternative> {
        self.alternatives.iter().flatten()
    }
}

/// Prices the decider needs, resolved from the price table for the session's model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    /// Uncached input.
    pub input: Rate,
    /// Output.
    pub output: Rate,
    /// Cache read.
    pub read: Rate,
    /// Cache write at the session's TTL tier.
    pub write: Rate,
    /// Cache write at the head's TTL tier.
    pub head_write: Rate,
}

impl Rates {
    /// The rates of a model for a session writing its tail at `ttl` and its head at `head_ttl`.
    pub fn of(price: &crate::price::ModelPrice, ttl: Ttl, head_ttl: Ttl) -> Rates {
        Rates {
            input: price.input,
            output: price.output,
            read: price.read,
            write: price.write(ttl),
            head_write: price.write(head_ttl),
        }
    }
}

/// Bounds and sizes the decider works with. Every number here is configuration or a measured
/// estimate, never a literal in the logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// Tokens of the static head (tools + system) that every segment starts with.
    pub head_tokens: Tokens,
    /// Tokens of memory (or summary) a refreshed segment is rehydrated with, beyond the head.
    pub rehydrate_tokens: Tokens,
    /// Tokens of the instruction that asks the session to flush its memory.
    pub flush_prompt_tokens: Tokens,
    /// Output tokens the flush writes. With memory written as it happens (a Persona's
    /// `remember[]`) both this and `flush_prompt_tokens` are 0: a refresh needs no flush request.
    pub flush_output_tokens: Tokens,
    /// Uncached tail of a keep-warm ping.
    pub ping_tokens: Tokens,
    /// Output tokens a keep-warm ping pays: 1 for a `max_tokens: 1` ping, 0 for a backend that
    /// pings with `max_tokens: 0` (the Anthropic backend's default). Rows stored before this
    /// field existed priced 1.
    #[serde(default = "one_token")]
    pub ping_output_tokens: Tokens,
    /// Requests a segment must hold before a (voluntary) refresh.
    pub min_segment_requests: u32,
    /// The context ceiling: no request may exceed it.
    pub ceiling_tokens: Tokens,
    /// The model's context window (for `threshold:F`).
    pub context_window: Tokens,
    /// Tool uses whose results a clear keeps (the latest ones): the edit's `keep`. Rows stored
    /// before this field existed had no clears; they read the provider's default, 3.
    #[serde(default = "three_uses")]
    pub mask_keep_tool_uses: u32,
}

fn three_uses() -> u32 {
    3
}

fn one_token() -> Tokens {
    1
}

impl Bounds {
    /// Whether a refresh needs a flush request (it does not when memory is written as it happens).
    pub fn needs_flush(&self) -> bool {
        self.flush_prompt_tokens > 0 || self.flush_output_tokens > 0
    }
}

/// What the decider knows about a session at the moment of deciding.
///
/// It borrows what the Mind learned (`'a`) from the accounting that made it: the decider is
/// asked at every arrival and idle point, and [`Learned`] (its gap statistics by hour alone are
/// 2.3 KB) was copied into each view; the view itself stays `Copy` and the decider pure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionView<'a> {
    /// The cached prefix of the last request (tokens up to its last breakpoint).
    pub prefix_tokens: Tokens,
    /// When the cached prefix expires, as the cache model believes (None: nothing cached).
    pub warm_until_ms: Option<i64>,
    /// The head's TTL tier.
    pub head_ttl: Ttl,
    /// When the head (tools + system, under its own breakpoint) expires. With a longer head TTL it
    /// outlives the conversation tail, which makes a refresh cheap exactly when the tail is cold.
    pub head_warm_until_ms: Option<i64>,
    /// When the last request (or ping) of the session was sent.
    pub last_request_ms: i64,
    /// The session's TTL tier.
    pub ttl: Ttl,
    /// Requests in the current segment.
    pub segment_requests: u32,
    /// Σ r·(Pₜ − R) over the warm requests of this segment (growth rule).
    pub read_excess: MicroUsd,
    /// Pings sent in the current idle gap.
    pub gap_pings: u32,
    /// What those pings cost.
    pub gap_ping_spend: MicroUsd,
    /// What head-only pings cost in the current idle gap (after the tail was let go).
    pub gap_head_ping_spend: MicroUsd,
    /// Whether memory was flushed in this gap (a restart needs no further flush).
    pub flushed: bool,
    /// Prices.
    pub rates: Rates,
    /// Sizes and quality bounds.
    pub bounds: Bounds,
    /// Idle gaps seen so far.
    pub gaps: GapStats,
    /// What the session's backend can do: an action it cannot take is never chosen.
    pub can: Capabilities,
    /// What the Mind learned from the refreshes and pings it paid for ([`crate::learn`]).
    pub learned: &'a Learned,
    /// Tool-result tokens a clear would remove now (C): those of the prompt's tool results but
    /// the latest [`Bounds::mask_keep_tool_uses`]. 0 when none are known.
    pub clearable_tokens: Tokens,
    /// Where the first of them begins (F: the tokens a clear leaves as they were).
    pub clear_from_tokens: Tokens,
    /// Σ r·C over the warm requests since the segment's last clear (or its start): what the
    /// tool results a clear could have removed were read for since. A clear waits until it
    /// reaches the clear's extra cost ([`SessionView::mask_due`]).
    pub clear_rent: MicroUsd,
    /// Requests the segment is expected still to have after the next one
    /// ([`crate::learn::SegmentLengths::remaining`]).
    pub remaining_requests: u64,
    /// Whether the last answer asked for tools whose results have not been sent yet: the next
    /// request continues its run, and no refresh may start there. An idle flush would then be
    /// paid for nothing ([`SessionView::gap_refresh_due`]). The host's idle decisions come
    /// between runs (its tools run within the turn): false there. The replay reads it from the
    /// request that ends the gap: it carries `tool_result` blocks exactly when the answer before
    /// the gap asked for tools (the API takes no unanswered use and no result without its use),
    /// and they are awaited until written (`TraceRequest::tool_results_at_ms`), not until sent.
    pub awaiting_tool_results: bool,
}

/// What a session's backend can do besides answering turns. The replay engine assumes a backend
/// that can do everything; the host says what its backend and role allow, so the decider never
/// chooses an action that would not happen (and replaying the host's ledger sees the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Keep-warm pings through the whole prefix.
    pub ping: bool,
    /// Head-only keep-warm pings.
    pub ping_head: bool,
    /// A memory flush while idle, before the cache expires (a refresh at a turn boundary may
    /// still flush).
    pub idle_flush: bool,
    /// The provider's tool-result clearing, decided per request (the `mask` action). Rows
    /// stored before this field existed come from hosts that could not.
    #[serde(default)]
    pub mask: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            ping: true,
            ping_head: true,
            idle_flush: true,
            mask: true,
        }
    }
}

/// What the decider is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A request is ready to go (a batch of deliveries, a brief, a user turn, a tool step).
    Arrival {
        /// Whether it begins a new turn (refreshes only happen at boundaries).
        boundary: bool,
        /// Tokens the request adds to the prompt.
        delta: Tokens,
    },
    /// The cached prefix is about to expire (the host asks shortly before `warm_until_ms`).
    Expiring,
    /// The tail has expired (or was let go) and the head, under its own breakpoint, is about to:
    /// a head-only ping (a request carrying just the head's breakpoint) keeps it for another TTL
    /// at the price of reading the head alone.
    HeadExpiring,
}

impl SessionView<'_> {
    /// Whether the cached prefix is alive at `now_ms`.
    pub fn warm(&self, now_ms: i64) -> bool {
        self.warm_until_ms.is_some_and(|t| t > now_ms)
    }

    /// The rehydration size R = head + memory.
    pub fn rehydrated(&self) -> Tokens {
        self.bounds.head_tokens + self.bounds.rehydrate_tokens
    }

    /// The price of a ping on the current prefix.
    pub fn ping_cost(&self) -> MicroUsd {
        MicroUsd::of(self.prefix_tokens, self.rates.read)
            + MicroUsd::of(self.bounds.ping_tokens, self.rates.input)
            + MicroUsd::of(self.bounds.ping_output_tokens, self.rates.output)
    }

    /// Whether the head is alive at `now_ms`.
    pub fn head_warm(&self, now_ms: i64) -> bool {
        self.head_warm_until_ms.is_some_and(|t| t > now_ms)
    }

    /// Whether a refresh needs a flush request (it does not when memory is written as it happens).
    pub fn needs_flush(&self) -> bool {
        self.bounds.needs_flush()
    }

    /// The price of a head-only ping.
    pub fn head_ping_cost(&self) -> MicroUsd {
        MicroUsd::of(self.bounds.head_tokens, self.rates.read)
            + MicroUsd::of(self.bounds.ping_tokens, self.rates.input)
            + MicroUsd::of(self.bounds.ping_output_tokens, self.rates.output)
    }

    /// What this idle gap has paid to keep the head: its head-only pings and, on a 5-minute
    /// cache whose head shares the tail's TTL, the head's share of each tail ping too.
    ///
    /// Head and tail are two ski-rental problems with the same ratio of rent (a read) to buy (a
    /// rewrite less a read), and each tail ping kept the head as well. Where the head outlives
    /// the tail (its own, longer TTL) a head-only ping is a cheaper rent, and its budget starts
    /// where the tail was let go. Where both share a TTL, a budget counted from there is a
    /// second one for the same bet — 3× the optimum, not 2×, on a gap just past it. On a
    /// 1-hour cache that second budget pays: a Mind's nights end just past the first one
    /// (`claude_backup`'s 19-hour nights, 4 of 4 head-only gaps woken warm); on a 5-minute
    /// cache no head-only gap of the tuning parts woke warm (docs/replay.md "The idle
    /// decisions against the optimum", "Head-only pings on a 5-minute cache").
    pub fn head_rent(&self) -> MicroUsd {
        let shares_ttl = self.head_ttl == self.ttl && self.ttl == Ttl::FiveMinutes;
        if !shares_ttl {
            return self.gap_head_ping_spend;
        }
        let share = self
            .head_ping_cost()
            .0
            .saturating_mul(i64::from(self.gap_pings));
        self.gap_head_ping_spend + MicroUsd(share)
    }

    /// What losing the head costs at the wake: rewriting it instead of reading it.
    pub fn head_rewrite_penalty(&self) -> MicroUsd {
        MicroUsd::of(self.bounds.head_tokens, self.rates.head_write)
            .saturating_sub(MicroUsd::of(self.bounds.head_tokens, self.rates.read))
    }

    /// The price of a flush: warm, it reads P; cold, it sends P uncached (cheaper than writing it
    /// back, since nothing of this segment will be read again). Zero without a flush request.
    pub fn flush_cost(&self, warm: bool) -> MicroUsd {
        if !self.needs_flush() {
            return MicroUsd::ZERO;
        }
        let prefix = if warm {
            MicroUsd::of(self.prefix_tokens, self.rates.read)
        } else {
            MicroUsd::of(self.prefix_tokens, self.rates.input)
        };
        prefix
            + MicroUsd::of(self.bounds.flush_prompt_tokens, self.rates.input)
            + MicroUsd::of(self.bounds.flush_output_tokens, self.rates.output)
    }

    /// Writing `tokens` of prompt that start with the head: the head is read if still warm.
    pub(crate) fn write_from_head(&self, tokens: Tokens, now_ms: i64) -> MicroUsd {
        let head = self.bounds.head_tokens.min(tokens);
        let head_cost = if self.head_warm(now_ms) {
            MicroUsd::of(head, self.rates.read)
        } else {
            MicroUsd::of(head, self.rates.head_write)
        };
        head_cost + MicroUsd::of(tokens - head, self.rates.write)
    }

    /// The cost of starting a segment from R plus `delta` at `now_ms`.
    pub fn restart_write(&self, delta: Tokens, now_ms: i64) -> MicroUsd {
        self.write_from_head(self.rehydrated() + delta, now_ms)
    }

    /// The cost of appending `delta` now: read or rewrite the prefix, write the tail.
    pub fn append_cost(&self, warm: bool, delta: Tokens, now_ms: i64) -> MicroUsd {
        if warm {
            MicroUsd::of(self.prefix_tokens, self.rates.read)
                + MicroUsd::of(delta, self.rates.write)
        } else {
            self.write_from_head(self.prefix_tokens + delta, now_ms)
        }
    }

    /// What a cold wake costs over a warm one, choosing the cheaper of rewriting P and restarting
    /// from a flush made while warm: the "buy" of the ski-rental problem. The wake is assumed to
    /// find the head warm only if the head outlives the tail (its own, longer TTL).
    pub fn cold_wake_penalty(&self) -> MicroUsd {
        let warm = MicroUsd::of(self.prefix_tokens, self.rates.read);
        let wake = match (self.warm_until_ms, self.head_warm_until_ms) {
            // Just after the tail expires: the head is warm then if it outlives the tail.
            (Some(tail), Some(head)) if head > tail => tail,
            _ => i64::MAX,
        };
        let rewrite = self.write_from_head(self.prefix_tokens, wake);
        let restart = self.flush_cost(true) + self.restart_write(0, wake);
        rewrite.min(restart).saturating_sub(warm)
    }

    /// What the growth rule weighs a refresh against: flushing warm and writing the
    /// rehydration at `now_ms`.
    pub fn growth_rebuild(&self, now_ms: i64) -> MicroUsd {
        self.flush_cost(true) + self.restart_write(0, now_ms)
    }

    fn refresh_allowed(&self, boundary: bool) -> Result<(), Reason> {
        if !boundary {
            Err(Reason::InsideToolLoop)
        } else if self.segment_requests < self.bounds.min_segment_requests {
            Err(Reason::BelowMinimumSegment)
        } else {
            Ok(())
        }
    }
}

/// The decision for `event` under `policy`, given what is known of the session at `now_ms`.
pub fn decide(policy: Policy, view: &SessionView, event: Event, now_ms: i64) -> Decision {
    match event {
        Event::Arrival { boundary, delta } => {
            arrival::decide_arrival(policy, view, boundary, delta, now_ms)
        }
        Event::Expiring => decide_expiring(policy, view, now_ms),
        Event::HeadExpiring => decide_head_expiring(policy, view, now_ms),
    }
}

/// The ski-rental rule one level down: keep the head alive with head-only pings while their spend
/// in this gap stays within one rewrite of the head. `predictive` also needs the fitted gap
/// distribution to make the next ping likely to pay.
fn decide_head_expiring(policy: Policy, view: &SessionView, now_ms: i64) -> Decision {
    let ping = Alternative {
        action: Action::Ping,
        estimate: view.head_ping_cost(),
    };
    let expire = Alternative {
        action: Action::LetExpire,
        estimate: MicroUsd::ZERO,
    };
    let alts = [ping, expire];
    let go = |action, reason| Decision::new(action, reason, &alts);
    match policy {
        Policy::SkiRental | Policy::Predictive if !view.can.ping_head => {
            go(Action::LetExpire, Reason::CannotPing)
        }
        Policy::SkiRental | Policy::Predictive => {
            let budget = view.head_rewrite_penalty();
            if view.head_rent() + ping.estimate > budget {
                return go(Action::LetExpire, Reason::RentExhausted);
            }
            if view.gap_head_ping_spend + ping.estimate > view.learned.ping_budget(budget) {
                return go(Action::LetExpire, Reason::PingsDidNotPayBack);
            }
            if policy == Policy::Predictive {
                let elapsed = now_ms - view.last_request_ms;
                let horizon = elapsed + view.head_ttl.millis();
                let p = view.gaps.p_end_by(elapsed, horizon);
                if p * (budget.0 as f64) <= ping.estimate.0 as f64 {
                    return go(Action::LetExpire, Reason::ExpectedSavingBelowPing);
                }
                return go(Action::Ping, Reason::ExpectedSavingExceedsPing);
            }
            go(Action::Ping, Reason::RentWithinBudget)
        }
        _ => go(Action::LetExpire, Reason::NoKeepWarm),
    }
}

fn decide_expiring(policy: Policy, view: &SessionView, now_ms: i64) -> Decision {
    let ping = Alternative {
        action: Action::Ping,
        estimate: view.ping_cost(),
    };
    let expire = Alternative {
        action: Action::LetExpire,
        estimate: MicroUsd::ZERO,
    };
    let flush = Alternative {
        action: Action::Flush,
        estimate: view.flush_cost(true),
    };
    let alts = [ping, expire, flush];
    let go = |action, reason| Decision::new(action, reason, &alts);
    if view.flushed {
        return go(Action::LetExpire, Reason::AlreadyFlushed);
    }
    match policy {
        Policy::Never | Policy::Rebuild | Policy::Threshold(_) | Policy::Ceiling(_) => {
            go(Action::LetExpire, Reason::NoKeepWarm)
        }
        Policy::Keepalive(_) if !view.can.ping => go(Action::LetExpire, Reason::CannotPing),
        Policy::Keepalive(n) => {
            if view.gap_pings < n {
                go(Action::Ping, Reason::RentWithinBudget)
            } else {
                go(Action::LetExpire, Reason::PingAllowanceSpent)
            }
        }
        Policy::SkiRental | Policy::Predictive if view.gap_refresh_due(now_ms) => {
            // The growth rule would refresh at the wake: pinging the old prefix until then
            // pays for reads of what the refresh drops. Flush now and keep the head only.
            if view.needs_flush() {
                go(Action::Flush, Reason::GrowthBreakEven)
            } else {
                go(Action::LetExpire, Reason::GrowthBreakEven)
            }
        }
        Policy::SkiRental | Policy::Predictive => keep_warm(policy, view, now_ms, &alts),
    }
}

/// The keep-warm rule as the tail is about to expire (ski rental, or its predictive variant):
/// ping while the gap's pings stay within the cold-wake penalty and the gaps say one is worth
/// it; else let it expire, flushing first where a restart from memory will beat a rewrite.
fn keep_warm(policy: Policy, view: &SessionView, now_ms: i64, alts: &[Alternative; 3]) -> Decision {
    let [ping, _, flush] = *alts;
    let go = |action, reason| Decision::new(action, reason, alts);
    let penalty = view.cold_wake_penalty();
    let within = view.gap_ping_spend + ping.estimate <= penalty;
    let elapsed = now_ms - view.last_request_ms;
    let worth = if policy == Policy::Predictive {
        // Expected saving of one more ping: it matters only if the wake comes before the
        // next expiry, when it saves the cold-wake penalty.
        let horizon = elapsed + view.ttl.millis();
        let p = view.gaps.p_end_by(elapsed, horizon);
        (p * penalty.0 as f64) > ping.estimate.0 as f64
    } else {
        let left = penalty.saturating_sub(view.gap_ping_spend);
        gaps::gaps_say_ping(view, elapsed, view.ttl, ping.estimate, penalty, left)
    };
    if within && worth && view.can.ping {
        let reason = if policy == Policy::Predictive {
            Reason::ExpectedSavingExceedsPing
        } else {
            Reason::RentWithinBudget
        };
        return go(Action::Ping, reason);
    }
    let reason = if !view.can.ping {
        Reason::CannotPing
    } else if !within {
        Reason::RentExhausted
    } else {
        Reason::ExpectedSavingBelowPing
    };
    // Letting it expire: flush first if restarting from memory at the wake will beat
    // rewriting the prefix (and a refresh would be allowed by then: the minimum
    // segment reached, and a wake that is a boundary, not the awaited tool results).
    let restart = flush.estimate + view.restart_write(0, now_ms);
    let rewrite = view.append_cost(false, 0, now_ms);
    if view.needs_flush()
        && view.can.idle_flush
        && !view.awaiting_tool_results
        && restart < rewrite
        && view.segment_requests >= view.bounds.min_segment_requests
    {
        go(Action::Flush, reason)
    } else {
        go(Action::LetExpire, reason)
    }
}
