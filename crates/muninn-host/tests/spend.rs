//! The brake and the spend cap: calls stop, and a turn whose worst case would cross the cap
//! does not start.

use crate::runtime::*;
use muninn_host::runtime::Step;
use muninn_store::{BriefOrigin, MindSettings, NewBrief};

#[tokio::test]
async fn the_brake_and_the_spend_cap_stop_calls() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let now = w.sim.now_ms();
    w.host
        .store
        .put_settings(
            "vala",
            &MindSettings {
                brake: true,
                ..MindSettings::default()
            },
            now,
        )
        .await
        .unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert_eq!(r.step().await.unwrap(), Step::Braked);
    assert!(w.sim.requests().is_empty());
    w.host
        .store
        .put_settings(
            "vala",
            &MindSettings {
                spend_cap: Some(muninn_core::money::MicroUsd(1)),
                ..MindSettings::default()
            },
            now,
        )
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
