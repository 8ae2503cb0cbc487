//! The spend cap, never overshot: a request starts only if the most it can cost still fits.
//!
//! The most a turn's request can cost is its prompt at the cache state the decider expects —
//! reading the cached prefix and writing the new tail when warm, rewriting it when cold, a flush
//! and a fresh segment when the plan refreshes, the clear's rewrite when it masks — plus
//! `max_output_tokens` of output at the model's output rate. The prompt is priced with the same
//! [`SessionView`] methods the decider prices its alternatives with. When the spend already in the
//! window plus that worst case would cross the cap, the turn does not start
//! ([`Step::OverBudget`](super::Step::OverBudget)): nothing is recorded, the deliveries stay in the
//! mailbox, and the turn runs once the window has room (or the operator raises the cap). An invalid
//! reply's one retry is priced the same way before it is sent.
//!
//! The spend in the window is the ledger's, plus the money of answers this runner abandoned
//! uncommitted ([`Abandoned`]): the provider billed them, but they have no ledger row — the
//! ledger is what replay reads, and a row there would be a request the host's session no longer
//! holds — plus the rows the provider billed that wait in the roles' queues to be committed
//! (`pending.rs`: a cut attempt's retry is refused when the cut attempt's own cost brought the
//! window to the cap).

use super::persona::{Plan, counted};
use super::{MindRunner, RuntimeError};
use muninn_backend::Backend;
use muninn_core::decide::{Event, SessionView};
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::tokenize::count;
use muninn_store::{MindSettings, Role};

/// The most abandoned answers a runner remembers (they are rare: each is an error in the log).
const ABANDONED_KEPT: usize = 1_024;

/// Money this runner spent on answers it abandoned uncommitted (`pending.rs`: after a takeover,
/// or a refusal no retry can change), when each was answered. Counted against the spend cap
/// beside the ledger's spend; kept in memory only — a runner that cannot write could not record
/// it anywhere — so a restart, or the host that took the Mind over, does not see it.
#[derive(Debug, Default)]
pub(super) struct Abandoned {
    spent: std::collections::VecDeque<(i64, MicroUsd)>,
}

impl Abandoned {
    /// `cost`, answered at `at_ms`.
    pub(super) fn add(&mut self, at_ms: i64, cost: MicroUsd) {
        if cost.0 <= 0 {
            return;
        }
        if self.spent.len() == ABANDONED_KEPT {
            self.spent.pop_front();
        }
        self.spent.push_back((at_ms, cost));
    }

    /// What was spent in `[from_ms, to_ms)`.
    fn within(&self, from_ms: i64, to_ms: i64) -> MicroUsd {
        MicroUsd(
            self.spent
                .iter()
                .filter(|(at, _)| (from_ms..to_ms).contains(at))
                .map(|(_, cost)| cost.0)
                .sum(),
        )
    }
}

impl<B: Backend> MindRunner<B> {
    /// The most the request `plan` leads to can cost for `role` at `now` (see the module docs).
    pub(super) fn worst_case(&self, role: Role, plan: &Plan, now: i64) -> MicroUsd {
        // At an arrival, the view a clear sent with the request is priced on (its own tool
        // results kept among the newest).
        let acc = &self.session(role).acc;
        let (mut view, delta) = match plan.event {
            Event::Arrival { boundary, delta } => {
                (acc.arrival_view(boundary, plan.tool_uses), delta)
            }
            Event::Expiring | Event::HeadExpiring => (acc.view(), 0),
        };
        let warm = view.warm(now);
        let prompt = if plan.starts() {
            // A session never started (or lost) knows no head yet: the layers it will start
            // from stand in for it.
            view.bounds.head_tokens = view.bounds.head_tokens.max(self.layer_tokens());
            let flush = match plan.decision {
                Some(_) => view.flush_cost(warm),
                None => MicroUsd::ZERO,
            };
            flush + view.restart_write(delta, now)
        } else if plan.masks() {
            // A clear rewrites the prompt from its first cleared result on; should the provider
            // not apply it, the request is billed as the append. Whichever costs more.
            view.append_cost(warm, delta, now)
                .max(view.mask_cost(delta, now))
        } else {
            view.append_cost(warm, delta, now)
        };
        prompt + self.output_worst_case(&view)
    }

    /// The most a follow-up request in the live session can cost (the invalid reply's retry):
    /// appending `delta` — and what the backend adds to it, as a plan counts it — to the prefix
    /// as it stands, plus the output bound.
    pub(super) fn follow_up_worst_case(&self, role: Role, delta: Tokens, now: i64) -> MicroUsd {
        let session = self.session(role);
        let (carried, _) = counted(&session.backend.pending_input());
        let view = session.acc.view();
        view.append_cost(view.warm(now), delta + carried, now) + self.output_worst_case(&view)
    }

    /// `max_output_tokens` of output at the model's rate.
    fn output_worst_case(&self, view: &SessionView) -> MicroUsd {
        MicroUsd::of(self.mind.max_output_tokens, view.rates.output)
    }

    /// Tokens of the Mind's system layers as they read now (doctrine, persona, campaigns).
    pub(super) fn layer_tokens(&self) -> Tokens {
        self.layers(String::new()).map_or(0, |l| {
            count(&l.doctrine) + count(&l.persona) + count(&l.campaigns)
        })
    }

    /// Whether spending `worst` more now would cross the cap in force (the operator's setting,
    /// else the configuration's) over the spend window ending now.
    pub(super) async fn would_cross_cap(
        &self,
        now: i64,
        settings: &MindSettings,
        worst: MicroUsd,
    ) -> Result<bool, RuntimeError> {
        let cap = settings
            .spend_cap
            .or(self.mind.spend_cap_micro_usd.map(MicroUsd));
        let Some(cap) = cap else { return Ok(false) };
        let window = settings
            .spend_window_ms
            .unwrap_or(self.mind.spend_window_s as i64 * 1000);
        // The window runs from `now - window` with no end: a row stamped after now was spent
        // all the same, under a wall clock since stepped back (an NTP correction). Cut at now,
        // that spend left the window and the next turn started over a cap already reached.
        let from = now.saturating_sub(window);
        let ledgered = self.host.store.spend(&self.mind.id, from, i64::MAX).await?;
        let abandoned = self.abandoned.within(from, i64::MAX);
        // Rows the provider billed that wait to be committed (`pending.rs`).
        let unledgered = self.waiting_spend(from);
        let spent = MicroUsd(
            ledgered
                .0
                .saturating_add(abandoned.0)
                .saturating_add(unledgered),
        );
        let crosses = spent.0.saturating_add(worst.0) > cap.0;
        if crosses {
            tracing::info!(
                mind = %self.mind.id,
                spent = spent.0,
                abandoned = abandoned.0,
                unledgered,
                worst_case = worst.0,
                cap = cap.0,
                "spend cap: the next request could cross it; not starting"
            );
        }
        Ok(crosses)
    }
}
