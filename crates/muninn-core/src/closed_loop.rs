//! The closed loop: replaying the host's own ledger reproduces the host's decisions and cost.
//!
//! Every ledger row the host writes carries a [`Decided`] record: what the request was, the
//! question the decider was asked and its answer, the segment the row began, and the policy and
//! parameters in force. [`verify`] walks one session's rows in order, in lockstep with what the
//! host did, and for each row
//!
//! 1. asks the decider, exactly as the host does, at every idle decision point the session's
//!    [`Accounting`] schedules before the row (shortly before the tail, then the head, expires),
//!    as of the point's own time (the host's runner may come to it late; it decides as of the
//!    point too, and sends the ping or flush when it gets there): a ping or flush the replay
//!    chooses must be the next recorded row, and a recorded ping or flush must be one the replay
//!    chooses;
//! 2. asks the decider the row's own question (a turn's arrival) and compares the answer with
//!    the recorded action and reason;
//! 3. prices the row itself with the cache model, from its own cache state, on the request's
//!    shape rebuilt from sizes alone — the head and the system under their breakpoints, the
//!    segment's earlier cached ends as lookup boundaries, the conversation's end under the tail's
//!    breakpoint ([`LedgerCache`]) — and feeds that priced usage (not the recorded one) to its
//!    accounting.
//!
//! The replay's state is its own: its accounting is fed only by its own pricing, its cache
//! state only by the requests it priced — with one exception, a row whose answer found the
//! cache expired. The cache model and the host share a clock; the provider does not. A request
//! decided while its entry was warm can reach the provider after the entry expired (a late
//! runner, a slow network) or find it evicted early: its answer writes what the model reads.
//! The host counts what the provider answered (it is what was billed, and what its later
//! decisions see), and its row says so (`cache_state: "expired"`). The replay takes such a
//! row's recorded usage in place of its model's — as `check-cache` reads each answer after its
//! prediction — when the two differ only by that: less of the same prefix read. A shortfall
//! the row does not explain still counts as priced apart. The host marks a row by pricing it on
//! the same [`LedgerCache`], driven by the same rows (restored from its ledger after a restart
//! or a takeover, when its backend's own cache mirror starts empty), so the mark is the
//! replay's verdict on that row — unless the host's mirror, which sees the bytes sent,
//! predicted the short read itself: the request changed its own prefix, and the replay must
//! price that row apart.
//!
//! The host's state is what the host kept while it ran, across restarts and lease takeovers
//! (restored from its ledger). Agreement on every decision and on the cost therefore says the
//! two keep one economy (DESIGN invariant 9): what replay proves about a policy holds for the
//! running host.
//!
//! Against the simulator, whose usage comes from the same cache model, the cost comparison is a
//! consistency check (it catches a host whose requests do not have the shape the replay prices,
//! a state the host forgot to count, a decision point it missed); against the real API it
//! compares the cache model with what the provider billed, apart from the rows found expired
//! (counted in [`ClosedLoop::rows_found_expired`]).

use crate::cache::CacheRules;
use crate::decide::{Action, Decision, Event, Policy, Rates, decide};
use crate::ledger::{Decided, LedgerRow, RowKind};
use crate::money::MicroUsd;
use crate::price::{ModelPrice, PriceTable};
use crate::session::{Accounting, DecisionPoint, Keep, Params};
use crate::trace::Usage;
use serde::Serialize;
use std::collections::BTreeMap;

mod ledger_cache;

pub use ledger_cache::{LedgerCache, read_less_of_the_same_prefix};

/// One place where the replay and the host parted ways.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disagreement {
    /// The Mind.
    pub mind: String,
    /// The role.
    pub role: String,
    /// When (the row's time, or the replay's decision point).
    pub at_ms: i64,
    /// The row's position in the session's rows, when a row is concerned.
    pub row: Option<usize>,
    /// What the host recorded.
    pub recorded: String,
    /// What the replay decided.
    pub replayed: String,
}

/// The result of replaying a ledger in closed loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClosedLoop {
    /// Sessions (Mind and role) replayed.
    pub sessions: usize,
    /// Rows replayed.
    pub rows: usize,
    /// Rows left out: no decision record (written before the record existed), or a model the
    /// price table does not know.
    pub rows_unchecked: usize,
    /// Decisions compared: every recorded decision, and every idle decision point the replay
    /// reached.
    pub decisions: usize,
    /// Of those, the ones the replay took exactly as the host did.
    pub agreed: usize,
    /// Every difference, in order.
    pub disagreements: Vec<Disagreement>,
    /// What the host recorded, over the rows replayed.
    pub recorded_cost: MicroUsd,
    /// What the replay priced the same rows at.
    pub replayed_cost: MicroUsd,
    /// Rows the replay priced differently from what was recorded.
    pub rows_priced_apart: usize,
    /// Rows whose answer found the cache expired where the model still held it (the row says
    /// `cache_state: "expired"`, and its usage is the model's with less read): taken as
    /// recorded, for the cost and the accounting (see the module documentation).
    pub rows_found_expired: usize,
    /// The rows priced furthest apart, largest difference first (at most
    /// [`LARGEST_SHOWN`]), to say where a cost difference comes from.
    pub largest: Vec<RowPricedApart>,
}

/// How many of the rows priced furthest apart a [`ClosedLoop`] keeps.
pub const LARGEST_SHOWN: usize = 5;

/// A row the replay priced differently from what was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowPricedApart {
    /// The Mind.
    pub mind: String,
    /// The role.
    pub role: String,
    /// The row's position in its session's rows.
    pub row: usize,
    /// When it was sent.
    pub at_ms: i64,
    /// The usage recorded.
    pub recorded: Usage,
    /// The usage the replay priced.
    pub replayed: Usage,
    /// Replayed cost minus recorded cost.
    pub difference: MicroUsd,
}

impl ClosedLoop {
    /// `(replayed − recorded) / recorded`.
    pub fn cost_difference(&self) -> f64 {
        if self.recorded_cost.0 == 0 {
            return if self.replayed_cost.0 == 0 { 0.0 } else { 1.0 };
        }
        // In i128: the difference of two i64 totals may not fit one.
        (i128::from(self.replayed_cost.0) - i128::from(self.recorded_cost.0)) as f64
            / self.recorded_cost.0 as f64
    }

    fn note_priced_apart(&mut self, row: RowPricedApart) {
        self.rows_priced_apart += 1;
        self.largest.push(row);
        self.largest
            .sort_by_key(|r| std::cmp::Reverse(r.difference.0.unsigned_abs()));
        self.largest.truncate(LARGEST_SHOWN);
    }

    /// Whether every decision agreed and the cost is within `tolerance` (a fraction).
    pub fn holds(&self, tolerance: f64) -> bool {
        self.disagreements.is_empty() && self.cost_difference().abs() <= tolerance
    }
}

/// Replays ledger rows in closed loop: one lockstep replay per (Mind, role), rows in the order
/// given (the ledger's own order). Rows without a decision record, or of a model `prices` does
/// not know, are counted as unchecked.
pub fn verify(rows: &[LedgerRow], prices: &PriceTable, rules: &CacheRules) -> ClosedLoop {
    let mut sessions: BTreeMap<(&str, &str), Vec<&LedgerRow>> = BTreeMap::new();
    for row in rows {
        sessions
            .entry((row.mind.as_str(), row.role.as_str()))
            .or_default()
            .push(row);
    }
    let mut report = ClosedLoop {
        sessions: sessions.len(),
        ..ClosedLoop::default()
    };
    for rows in sessions.values() {
        Lockstep::new(prices, rules).run(rows, &mut report);
    }
    report
}

/// How a row's decision is shown in a disagreement.
fn shown(action: Option<Action>, reason: Option<crate::decide::Reason>) -> String {
    match (action, reason) {
        (Some(a), Some(r)) => format!("{}:{r:?}", a.as_str()),
        (Some(a), None) => a.as_str().to_string(),
        _ => "no decision".to_string(),
    }
}

/// One session's lockstep replay.
struct Lockstep<'a> {
    prices: &'a PriceTable,
    rules: &'a CacheRules,
    acc: Option<Accounting>,
    /// The cache the rows so far imply: what each row is priced against.
    cache: LedgerCache,
    /// When the host lost its session, if the next row says so.
    lost_at_ms: Option<i64>,
    /// The arrival decided on the row before (a refresh's flush), carried to the turn's request.
    pending_arrival: Option<(i64, Event)>,
}

impl<'a> Lockstep<'a> {
    fn new(prices: &'a PriceTable, rules: &'a CacheRules) -> Lockstep<'a> {
        Lockstep {
            prices,
            rules,
            acc: None,
            cache: LedgerCache::new(),
            lost_at_ms: None,
            pending_arrival: None,
        }
    }

    fn run(&mut self, rows: &[&LedgerRow], report: &mut ClosedLoop) {
        for (index, row) in rows.iter().enumerate() {
            let (Some(decided), Ok(price)) = (&row.decided, self.prices.model(&row.model)) else {
                report.rows_unchecked += 1;
                continue;
            };
            let Ok(policy) = decided.policy.parse::<Policy>() else {
                report.rows_unchecked += 1;
                continue;
            };
            let params = params_of(decided, price);
            let acc = self.acc.get_or_insert_with(|| Accounting::new(params));
            acc.set_params(params);
            self.lost_at_ms = decided.lost_at_ms;
            let cx = Cx {
                row,
                index,
                decided,
                policy,
            };
            let matched = self.idle_before(&cx, report);
            if !matched && idle_kind(decided).is_some() {
                report.decisions += 1;
                report.disagreements.push(cx.disagreement(
                    row.at_ms,
                    shown(decided.action, decided.reason),
                    "no idle decision due".to_string(),
                ));
            }
            self.arrival(&cx, report);
            self.price(&cx, price, report);
        }
    }

    /// The idle decision points before the row, decided as the replay would. Returns whether the
    /// row itself is the idle step of one of them.
    fn idle_before(&mut self, cx: &Cx<'_>, report: &mut ClosedLoop) -> bool {
        let Some(acc) = self.acc.as_mut() else {
            return false;
        };
        // Bounded: each ping moves the decision point on by nearly a TTL.
        for _ in 0..10_000 {
            let Some(point) = acc.next_decision() else {
                return false;
            };
            let is_row = cx.is_step_of(&point);
            if !is_row && point.at_ms >= cx.row.at_ms {
                return false;
            }
            if !is_row && self.lost_at_ms.is_some_and(|lost| point.at_ms >= lost) {
                // No host asked this point when it came (none held the session, or the runner
                // was retrying a failed step, busy or braked, and came to it late): it is not a
                // decision to compare, and the entry is let go as the host let it go — too late
                // to keep, or decided later than its time (a late answer that acted is the row
                // itself, compared above). A later point may still be the row's (a head ping).
                acc.let_go(point.keep);
                continue;
            }
            // The host decides a point as of its own time however late it comes to it (the
            // row's time is when the ping or flush was sent, and is priced there).
            let at = point.at_ms;
            let view = acc.view();
            let decision = decide(cx.policy, &view, point.keep.event(), at);
            let acts = match (point.keep, decision.action) {
                (_, Action::Ping) => true,
                (Keep::Tail, Action::Flush) => !view.flushed && view.needs_flush(),
                _ => false,
            };
            report.decisions += 1;
            if is_row {
                if acts && same(&decision, cx.decided) {
                    report.agreed += 1;
                } else {
                    report.disagreements.push(cx.disagreement(
                        at,
                        shown(cx.decided.action, cx.decided.reason),
                        shown(Some(decision.action), Some(decision.reason)),
                    ));
                }
                return true;
            }
            if acts {
                // The replay would act here, but the row is not that step.
                report.disagreements.push(Disagreement {
                    row: None,
                    ..cx.disagreement(
                        point.at_ms,
                        format!("nothing until row {}", cx.index),
                        shown(Some(decision.action), Some(decision.reason)),
                    )
                });
            } else {
                report.agreed += 1;
            }
            acc.let_go(point.keep);
        }
        false
    }

    /// A turn's arrival: the decider's answer against the recorded one. A refresh's flush row
    /// carries the arrival it was decided at; the turn's request after it is not asked again.
    fn arrival(&mut self, cx: &Cx<'_>, report: &mut ClosedLoop) {
        let Some(event @ Event::Arrival { boundary, .. }) = cx.decided.event else {
            return;
        };
        if cx.decided.kind == RowKind::Request
            && self.pending_arrival.take() == Some((cx.row.at_ms, event))
        {
            return;
        }
        if cx.decided.kind == RowKind::Flush {
            self.pending_arrival = Some((cx.row.at_ms, event));
        }
        let Some(acc) = self.acc.as_ref() else { return };
        // The request's own tool results count in a clear's keep (a flush row's arrival is a
        // boundary's, which carries none).
        let uses = match cx.decided.kind {
            RowKind::Request => crate::session::arriving_uses(&cx.decided.tool_results),
            _ => 0,
        };
        let view = acc.arrival_view(boundary, uses);
        let decision = decide(cx.policy, &view, event, cx.row.at_ms);
        report.decisions += 1;
        if same(&decision, cx.decided) {
            report.agreed += 1;
        } else {
            report.disagreements.push(cx.disagreement(
                cx.row.at_ms,
                shown(cx.decided.action, cx.decided.reason),
                shown(Some(decision.action), Some(decision.reason)),
            ));
        }
    }

    /// Prices the row from the replay's own cache state and feeds the result to its accounting.
    fn price(&mut self, cx: &Cx<'_>, price: &ModelPrice, report: &mut ClosedLoop) {
        let row = cx.row;
        let priced = self
            .cache
            .price(row, cx.decided, price.min_cacheable, self.rules);
        // The provider had lost what the model still holds: what it answered is what the host
        // paid and counted, so the replay goes on from it too.
        let priced = if found_expired(row, &priced) {
            report.rows_found_expired += 1;
            row.usage
        } else {
            priced
        };
        let cost = price.cost(&priced);
        if priced != row.usage {
            report.note_priced_apart(RowPricedApart {
                mind: row.mind.clone(),
                role: row.role.clone(),
                row: cx.index,
                at_ms: row.at_ms,
                recorded: row.usage,
                replayed: priced,
                difference: cost - row.cost,
            });
        }
        report.rows += 1;
        report.recorded_cost += row.cost;
        report.replayed_cost += cost;
        if let Some(acc) = self.acc.as_mut() {
            // As the host's accounting did: a clear drops what it cleared, the row's tool
            // results join the segment.
            acc.record_decided(cx.decided, row.at_ms, &priced, cost);
        }
    }
}

/// The row being replayed, with what it says.
struct Cx<'a> {
    row: &'a LedgerRow,
    index: usize,
    decided: &'a Decided,
    policy: Policy,
}

impl Cx<'_> {
    /// Whether the row is the idle step (ping, head ping or flush) of this decision point.
    fn is_step_of(&self, point: &DecisionPoint) -> bool {
        idle_kind(self.decided) == Some(point.keep)
            && self.row.at_ms >= point.at_ms
            && self.row.at_ms < point.expires_at_ms
    }

    fn disagreement(&self, at_ms: i64, recorded: String, replayed: String) -> Disagreement {
        Disagreement {
            mind: self.row.mind.clone(),
            role: self.row.role.clone(),
            at_ms,
            row: Some(self.index),
            recorded,
            replayed,
        }
    }
}

/// Whether `row` found the cache expired where the model priced a read: it says so
/// (`cache_state: "expired"`, which the host writes by the same test on the same
/// [`LedgerCache`] when its own mirror does not explain the shortfall), and its answer read less
/// of the same prefix than the model.
fn found_expired(row: &LedgerRow, priced: &Usage) -> bool {
    row.cache_state == EXPIRED && read_less_of_the_same_prefix(&row.usage, priced)
}

/// A row's `cache_state` when its answer read less of the same prefix than the cache its
/// session's ledger implies ([`LedgerCache`]): the entry expired on the way to the provider, or
/// the provider evicted it early.
pub const EXPIRED: &str = "expired";

/// Which entry an idle row keeps, when the row is an idle step (a ping, a head ping, or a flush
/// decided at an expiry): the row answers that entry's decision point.
pub fn idle_kind(decided: &Decided) -> Option<Keep> {
    match (decided.kind, decided.event) {
        (RowKind::Ping, _) => Some(Keep::Tail),
        (RowKind::HeadPing, _) => Some(Keep::Head),
        (RowKind::Flush, Some(Event::Expiring)) => Some(Keep::Tail),
        _ => None,
    }
}

fn same(decision: &Decision, decided: &Decided) -> bool {
    decided.action == Some(decision.action) && decided.reason == Some(decision.reason)
}

/// The accounting parameters a row was decided under.
pub fn params_of(decided: &Decided, price: &ModelPrice) -> Params {
    Params {
        ttl: decided.ttl,
        head_ttl: decided.head_ttl,
        rates: Rates::of(price, decided.ttl, decided.head_ttl),
        bounds: decided.bounds,
        min_cacheable: price.min_cacheable,
        decide_before_expiry_ms: decided.decide_before_expiry_ms,
        can: decided.can,
        lifetime_ms: None,
    }
}
