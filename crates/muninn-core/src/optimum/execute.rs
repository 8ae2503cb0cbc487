//! The optimum's executor: the plan's decisions, answering the replay engine's events with
//! hindsight.

use super::{OptimumPlan, touches};
use crate::cache::Ttl;
use crate::decide::{Action, Alternative, Decision, Event, Reason, SessionView};
use crate::money::MicroUsd;
use crate::replay::Hindsight;

impl OptimumPlan {
    /// The plan's decision, answering the engine's events with hindsight: refresh where the plan
    /// starts a segment (flushing at the latest warm moment before it), and keep the cache warm
    /// through a gap exactly when that is cheaper than the cold rewrite it prevents — and when
    /// the session can ping at all ([`SessionView::can`]): without it the plan ends the gap as it
    /// would have after its pings (a flush before a restart, else letting the cache go), as the
    /// program that chose it assumed.
    pub(crate) fn decide(
        &self,
        view: &SessionView,
        event: Event,
        now_ms: i64,
        future: &Hindsight<'_>,
    ) -> Decision {
        let decision = self.decide_with_pings(view, event, now_ms, future);
        let allowed = match event {
            Event::HeadExpiring => view.can.ping_head,
            _ => view.can.ping,
        };
        if decision.action != Action::Ping || allowed {
            return decision;
        }
        let next = future.next;
        let restart = next > 0 && self.starts.get(next).copied().unwrap_or(false);
        let action = if event == Event::Expiring && restart && view.needs_flush() {
            Action::Flush
        } else {
            Action::LetExpire
        };
        single(action, Reason::CannotPing, MicroUsd::ZERO)
    }

    /// What a warm head saves at a refresh at request `next`: the rewrite of the head's tokens
    /// that are still as they were (the layers changed since the segment began are written anyway).
    fn restart_head_saving(&self, view: &SessionView, next: usize) -> MicroUsd {
        let changed = self.head_rewritten.get(next).copied().unwrap_or(0);
        let kept = view.bounds.head_tokens.saturating_sub(changed);
        MicroUsd::of(kept, view.rates.head_write)
            .saturating_sub(MicroUsd::of(kept, view.rates.read))
    }

    /// What a warm head saves at request `next`: at a refresh the rewrite of its unchanged
    /// tokens, else the penalty of rewriting it.
    fn head_saving(&self, view: &SessionView, next: usize, restart: bool) -> MicroUsd {
        if restart {
            self.restart_head_saving(view, next)
        } else {
            view.head_rewrite_penalty()
        }
    }

    fn decide_with_pings(
        &self,
        view: &SessionView,
        event: Event,
        now_ms: i64,
        future: &Hindsight<'_>,
    ) -> Decision {
        let next = future.next;
        let restart = next > 0 && self.starts.get(next).copied().unwrap_or(false);
        // A request sent with a clear rewrites its prompt from the head on: like a refresh, it
        // reads only the head, so the gap before it keeps only the head (no flush).
        let cleared = next > 0 && !restart && self.masks_at(next);
        match event {
            Event::Arrival { .. } => {
                if restart {
                    single(Action::Refresh, Reason::GrowthBreakEven, MicroUsd::ZERO)
                } else if cleared {
                    single(Action::Mask, Reason::MaskPaysBack, MicroUsd::ZERO)
                } else {
                    single(Action::Append, Reason::Warm, MicroUsd::ZERO)
                }
            }
            Event::Expiring => {
                let (Some(expiry), Some(turn)) = (view.warm_until_ms, future.turns.get(next))
                else {
                    return single(Action::LetExpire, Reason::NoKeepWarm, MicroUsd::ZERO);
                };
                let gap = Gap {
                    now_ms,
                    wake_ms: turn.at_ms,
                    expiry,
                    ttl: future.ttl,
                    before_ms: future.before_ms,
                    head_saving: self.head_saving(view, next, restart),
                };
                if restart || cleared {
                    gap.end_segment(view, restart && view.needs_flush())
                } else if expiry > turn.at_ms {
                    single(Action::LetExpire, Reason::Warm, MicroUsd::ZERO)
                } else {
                    gap.cheapest_keep(view)
                }
            }
            Event::HeadExpiring => {
                // Keep the head to the next request with head-only pings when that is cheaper than
                // rewriting it there.
                let Some(turn) = future.turns.get(next) else {
                    return single(Action::LetExpire, Reason::NoKeepWarm, MicroUsd::ZERO);
                };
                if view.head_warm_until_ms.is_some_and(|h| h > turn.at_ms) {
                    return single(Action::LetExpire, Reason::Warm, MicroUsd::ZERO);
                }
                let hstep = view.head_ttl.millis() - future.before_ms;
                let k = touches(turn.at_ms - now_ms, view.head_ttl.millis(), hstep);
                let keep = MicroUsd(view.head_ping_cost().0 * k as i64);
                if keep < self.head_saving(view, next, restart) {
                    single(Action::Ping, Reason::ExpectedSavingExceedsPing, keep)
                } else {
                    single(Action::LetExpire, Reason::RentExhausted, MicroUsd::ZERO)
                }
            }
        }
    }
}

/// A decision with its one alternative, itself.
fn single(action: Action, reason: Reason, estimate: MicroUsd) -> Decision {
    Decision {
        action,
        reason,
        alternatives: [Some(Alternative { action, estimate }), None, None],
    }
}

/// The gap before the next request, as an `Expiring` decision prices it.
struct Gap {
    now_ms: i64,
    /// When the next request arrives.
    wake_ms: i64,
    /// When the tail expires.
    expiry: i64,
    /// The session's TTL tier.
    ttl: Ttl,
    /// How long before expiry the host decides.
    before_ms: i64,
    /// What a warm head saves at the wake.
    head_saving: MicroUsd,
}

impl Gap {
    /// The interval between two pings at the session's TTL.
    fn step(&self) -> i64 {
        self.ttl.millis() - self.before_ms
    }

    /// Head-only pings that keep a head expiring at `d` alive to the wake.
    fn head_only_from(&self, view: &SessionView, d: i64) -> MicroUsd {
        let hstep = view.head_ttl.millis() - self.before_ms;
        let kh = touches(
            self.wake_ms - (d - self.before_ms),
            view.head_ttl.millis(),
            hstep,
        );
        MicroUsd(view.head_ping_cost().0 * kh as i64)
    }

    /// The old segment ends here (or the clear will rewrite it). Ending now (flushing before a
    /// refresh, or doing nothing) touches the head for the last time; if the head would then be
    /// cold at the wake and keeping it alive with pings is cheaper than rewriting it, ping
    /// instead.
    fn end_segment(&self, view: &SessionView, flushes: bool) -> Decision {
        let end = if flushes {
            Action::Flush
        } else {
            Action::LetExpire
        };
        let head_deadline = if flushes {
            Some(self.now_ms + view.head_ttl.millis())
        } else {
            view.head_warm_until_ms
        };
        if view.head_warm_until_ms.is_some()
            && head_deadline.is_none_or(|d| d <= self.wake_ms)
            && self.expiry <= self.wake_ms
        {
            let span = self.wake_ms - self.now_ms;
            let k = touches(span, view.head_ttl.millis(), self.step()) - u64::from(flushes);
            let keep = MicroUsd(view.ping_cost().0 * k as i64);
            // Ending now and keeping only the head with head-only pings instead.
            let head_only = head_deadline.map_or(keep, |d| self.head_only_from(view, d));
            if k > 0 && keep < self.head_saving && keep < head_only {
                return single(Action::Ping, Reason::ExpectedSavingExceedsPing, keep);
            }
        }
        single(end, Reason::ColdRestartCheaper, view.flush_cost(true))
    }

    /// Keep the tail warm (W), keep only the head alive (H), or let both go (N): the cheapest
    /// from now to the wake, with hindsight.
    fn cheapest_keep(&self, view: &SessionView) -> Decision {
        let span = self.wake_ms - self.now_ms;
        let ping = view.ping_cost().0;
        let tail = touches(span, self.ttl.millis(), self.step());
        let warm = MicroUsd(ping * tail as i64) + MicroUsd::of(view.prefix_tokens, view.rates.read);
        let rewrite = view.append_cost(false, 0, self.wake_ms);
        let mut best = (warm, Action::Ping);
        if rewrite < best.0 {
            best = (rewrite, Action::LetExpire);
        }
        if let Some(head_expiry) = view.head_warm_until_ms.filter(|h| *h <= self.wake_ms) {
            let k = touches(span, view.head_ttl.millis(), self.step());
            let head_kept = MicroUsd(ping * k as i64) + rewrite.saturating_sub(self.head_saving);
            if head_kept < best.0 {
                best = (head_kept, Action::Ping);
            }
            // Let the tail go now; keep the head with head-only pings from its expiry on.
            let head_only =
                self.head_only_from(view, head_expiry) + rewrite.saturating_sub(self.head_saving);
            if head_only < best.0 {
                best = (head_only, Action::LetExpire);
            }
        }
        single(best.1, Reason::ExpectedSavingExceedsPing, best.0)
    }
}
