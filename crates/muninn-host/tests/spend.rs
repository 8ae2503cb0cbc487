//! The brake and the spend cap: calls stop, and a turn whose worst case would cross the cap
//! does not start.

use crate::runtime::*;
use muninn_host::runtime::Step;
use muninn_store::{BriefOrigin, Caps, NewBrief};

#[tokio::test]
async fn the_brake_and_the_spend_cap_stop_calls() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let now = w.sim.now_ms();
    w.host.store.put_brake("vala", true, now).await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert_eq!(r.step().await.unwrap(), Step::Braked);
    assert!(w.sim.requests().is_empty());
    w.host.store.put_brake("vala", false, now).await.unwrap();
    let caps = Caps {
        spend_cap: Some(muninn_core::money::MicroUsd(1)),
        ..Caps::default()
    };
    w.host
        .store
        .put_caps("vala", &caps, None, now)
        .await
        .unwrap();
    // A cap below what one request can cost: nothing starts (it used to start, and overshoot).
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    assert!(w.sim.requests().is_empty());
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 0);
}

#[tokio::test]
async fn a_turn_whose_worst_case_would_cross_the_cap_does_not_start() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let first = spent(&w).await;
    assert!(first > 0);
    // Room for a cheap warm turn's prompt, not for 2,048 tokens of output on top of it: the
    // spend is under the cap, and still the turn does not start.
    let cap = first + 1_000;
    set_cap(&w, Some(cap)).await;
    post(&w, "e2", "#swarm", "ari", "more").await;
    r.woken();
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    assert_eq!(w.sim.requests().len(), 1);
    assert!(spent(&w).await <= cap);
    // A queued brief is priced before it is claimed, and stays queued.
    let brief = w
        .host
        .store
        .enqueue_brief(
            "vala",
            &NewBrief {
                text: "tidy the archive".into(),
                origin: BriefOrigin::Operator,
                created_at_ms: w.sim.now_ms(),
            },
        )
        .await
        .unwrap();
    let queued = w
        .host
        .store
        .briefs("vala", Some(muninn_store::BriefStatus::Queued), 10)
        .await
        .unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].seq, brief.seq);
    // With room for the worst case, the turn runs, and the cap holds.
    let cap = first + 1_000_000;
    set_cap(&w, Some(cap)).await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert!(spent(&w).await <= cap);
    set_cap(&w, Some(spent(&w).await + 1_000)).await;
    r.woken();
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    let queued = w
        .host
        .store
        .briefs("vala", Some(muninn_store::BriefStatus::Queued), 10)
        .await
        .unwrap();
    assert_eq!(queued.len(), 1, "the brief was not claimed");
}

/// The host's clock, stepped back by `back_ms` from the simulator's (an NTP correction).
#[derive(Debug)]
struct SteppedBack {
    sim: std::sync::Arc<muninn_sim::sim::Simulator>,
    back_ms: std::sync::atomic::AtomicI64,
}

impl muninn_backend::clock::Clock for SteppedBack {
    fn now_ms(&self) -> i64 {
        self.sim.now_ms() - self.back_ms.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A wall clock stepped back ten minutes after a costly turn: that turn's row is stamped after
/// the new now, and the cap still counts it. It used to sum the window only up to now, so the
/// spend vanished from the window and the next turn started over a cap already reached.
#[tokio::test]
async fn a_clock_stepped_back_does_not_hide_spend_from_the_cap() {
    use muninn_core::price::PriceTable;
    use muninn_host::Host;
    use muninn_host::runtime::MindRunner;
    use muninn_sim::inprocess::{InProcess, SimBackend};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    let w = world().await;
    let clock = Arc::new(SteppedBack {
        sim: w.sim.clone(),
        back_ms: 0.into(),
    });
    let host = Host::new(
        w.host.store.clone(),
        (*w.host.config).clone(),
        clock.clone(),
    );
    let backend = || {
        SimBackend::new(
            InProcess::new(w.sim.clone()),
            host.clock.clone(),
            PriceTable::embedded(),
        )
    };
    let prices = PriceTable::embedded();
    let mut r = MindRunner::new(
        host.clone(),
        mind(""),
        "host-a".into(),
        &prices,
        backend(),
        backend(),
    )
    .unwrap();
    r.register().await.unwrap();
    // A cold turn on ~30k tokens: more than a short turn's worst case (2,048 tokens of output).
    let long = "the quick brown fox jumps over the lazy dog ".repeat(3_000);
    post(&w, "e1", "#swarm", "ari", &long).await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let total = || async {
        let all = w.host.store.spend("vala", 0, i64::MAX).await.unwrap();
        all.0
    };
    let first = total().await;
    // The window is full: the cap is what was spent.
    set_cap(&w, Some(first)).await;
    clock.back_ms.store(600_000, Ordering::SeqCst);
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "more").await;
    r.woken();
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    assert_eq!(w.sim.requests().len(), 1);
    assert_eq!(total().await, first);
}

/// What the provider billed for each request so far, as the simulator logged it (cut
/// attempts included), priced on the embedded table.
fn billed_each(w: &World) -> Vec<i64> {
    let prices = muninn_core::price::PriceTable::embedded();
    let price = prices.model(&mind("").model).unwrap();
    w.sim
        .requests()
        .iter()
        .filter_map(|r| r.usage)
        .map(|u| price.cost(&u).0)
        .collect()
}

fn billed(w: &World) -> i64 {
    billed_each(w).iter().sum()
}

/// A fresh world whose Persona answered one delivery, and was sent a second, `e2`, whose
/// first attempt `refuse` makes fail (a cut after `message_start`, or a refusal before it).
async fn second_turn_failed(refuse: muninn_sim::sim::FaultKind) -> (World, MindRunnerOf) {
    let w = world().await;
    let mut r = runner(&w, mind("turns_per_wake = 5"), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello there").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "e2", "#swarm", "ari", "and what of the ledger?").await;
    w.sim.push_faults([muninn_sim::sim::Fault {
        kind: refuse,
        times: 1,
    }]);
    r.woken();
    assert!(r.step().await.is_err());
    w.sim.advance_clock(1_000);
    (w, r)
}

type MindRunnerOf = muninn_host::runtime::MindRunner<muninn_sim::inprocess::SimBackend>;

fn cut() -> muninn_sim::sim::FaultKind {
    muninn_sim::sim::FaultKind::Truncate { after_deltas: 1 }
}

/// The lowest spend cap under which the retry of `e2` ([`second_turn_failed`]) is not refused
/// as over budget.
async fn lowest_cap_for_the_retry(refuse: fn() -> muninn_sim::sim::FaultKind) -> i64 {
    let (mut low, mut high) = (0i64, 10_000_000i64);
    while low < high {
        let cap = low + (high - low) / 2;
        let (w, mut r) = second_turn_failed(refuse()).await;
        set_cap(&w, Some(cap)).await;
        match r.step().await.unwrap() {
            Step::OverBudget => low = cap + 1,
            _ => high = cap,
        }
    }
    low
}

/// A turn whose first attempt was cut after `message_start` (the provider billed its input,
/// its cache write and the output it sent): the cut attempt's cost counts against the spend
/// cap before its retry is sent. Under the lowest cap a retry after a refusal the provider did
/// not bill passes, the retry after the cut does not start — the cut attempt's cost took the
/// window over; with room for that cost it runs. The ledger holds what the provider billed, to
/// the micro-dollar: the cut attempt's row (committed as the failed step ended), then the
/// retry's. Before, the host only
/// logged the cut attempt: the retry started under the same cap, and the ledger (so the cap,
/// and `muninn status`) fell short of the bill by the cut attempt's cost.
#[tokio::test]
async fn a_cut_attempts_cost_counts_against_the_cap_before_its_retry() {
    let unbilled = lowest_cap_for_the_retry(|| muninn_sim::sim::FaultKind::Unauthorized).await;
    let (w, mut r) = second_turn_failed(cut()).await;
    // The failed step committed the cut attempt's row as it ended.
    let rows = ledger(&w).await;
    let decisions: Vec<&str> = rows.iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[1], "attempt_failed");
    assert_eq!(spent(&w).await, billed(&w));
    set_cap(&w, Some(unbilled)).await;
    assert_eq!(r.step().await.unwrap(), Step::OverBudget);
    let each = billed_each(&w);
    assert_eq!(each.len(), 2, "the first turn, and the cut attempt");
    let cut_cost = each[1];
    assert!(cut_cost > 0, "the cut attempt was billed");
    set_cap(&w, Some(unbilled + cut_cost + 1_000_000)).await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let rows = ledger(&w).await;
    let decisions: Vec<&str> = rows.iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert_eq!(decisions[1], "attempt_failed");
    assert_eq!(rows[1].cost.0, cut_cost);
    assert_eq!(spent(&w).await, billed(&w));
}
