//! The cache through the simulator: reads that grow turn by turn as the cache model says, an
//! idle gap past the TTL read as a TTL expiry on the virtual clock, a 1h system layer outliving
//! the 5m tail, and a 1h TTL the provider ignored flagged.

use super::spec;
use crate::support::{T0, recompute, sim, sim_with, wired};
use muninn_backend::{Backend, TurnEvent, TurnInput};
use muninn_core::cache::Ttl;
use muninn_core::ledger::MissCause;
use muninn_sim::sim::SimConfig;
use pretty_assertions::assert_eq;

#[tokio::test]
async fn cache_reads_grow_turn_by_turn_and_match_the_model() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("grow", Ttl::FiveMinutes))
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    for turn in 1..=6 {
        w.clock.advance(20_000);
        h.sim.advance_clock(20_000);
        let o = w
            .backend
            .turn(TurnInput::text(format!("turn {turn}, tell me more")))
            .await
            .unwrap();
        assert_eq!(Some(o.usage), o.predicted, "turn {turn}");
        assert!(o.retries.is_empty() && o.events.is_empty());
        outcomes.push(o);
    }
    assert_eq!(outcomes[0].miss, Some(MissCause::ColdStart));
    assert_eq!(outcomes[0].usage.cache_read, 0);
    for pair in outcomes.windows(2) {
        assert!(pair[1].usage.cache_read > pair[0].usage.cache_read);
        // Append-only: each turn reads everything the previous one wrote or read.
        assert_eq!(
            pair[1].usage.cache_read,
            pair[0].usage.prompt() - pair[0].usage.input
        );
    }
    let records = h.sim.requests();
    let reported: Vec<_> = outcomes.iter().map(|o| o.usage).collect();
    assert_eq!(recompute(&records), reported);
    assert!(
        records
            .iter()
            .all(|r| r.body["stream"] == serde_json::json!(true))
    );
}

#[tokio::test]
async fn an_idle_gap_past_the_ttl_is_a_ttl_expiry_miss() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("idle", Ttl::FiveMinutes))
        .await
        .unwrap();
    w.backend.turn(TurnInput::text("one")).await.unwrap();
    let warm = w.backend.turn(TurnInput::text("two")).await.unwrap();
    assert!(warm.usage.cache_read > 0);
    w.clock.advance(6 * 60_000);
    h.sim.advance_clock(6 * 60_000);
    let cold = w.backend.turn(TurnInput::text("three")).await.unwrap();
    assert_eq!(cold.usage.cache_read, 0);
    assert_eq!(cold.miss, Some(MissCause::TtlExpiry));
    assert_eq!(h.sim.requests()[2].miss, Some(MissCause::TtlExpiry));
    assert_eq!(Some(cold.usage), cold.predicted);
}

#[tokio::test]
async fn a_1h_system_layer_survives_a_gap_the_5m_tail_does_not() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend.start(spec("layers", Ttl::OneHour)).await.unwrap();
    let first = w.backend.turn(TurnInput::text("one")).await.unwrap();
    assert!(first.usage.cache_write_1h > 1000 && first.usage.cache_write_5m > 0);
    assert_eq!(first.ttl.honoured(), Some(Ttl::OneHour));
    w.backend.turn(TurnInput::text("two")).await.unwrap();
    w.clock.advance(10 * 60_000);
    h.sim.advance_clock(10 * 60_000);
    let third = w.backend.turn(TurnInput::text("three")).await.unwrap();
    assert_eq!(third.usage.cache_read, first.usage.cache_write_1h);
    assert_eq!(third.miss, Some(MissCause::TtlExpiry));
}

#[tokio::test]
async fn an_ignored_1h_ttl_is_flagged() {
    let h = sim_with(SimConfig {
        frozen_at_ms: Some(T0),
        honour_1h: false,
        ..Default::default()
    })
    .await;
    let mut w = wired(&h);
    w.backend
        .start(spec("ignored-1h", Ttl::OneHour))
        .await
        .unwrap();
    let o = w.backend.turn(TurnInput::text("one")).await.unwrap();
    assert_eq!(o.usage.cache_write_1h, 0);
    assert_eq!(o.ttl.honoured(), Some(Ttl::FiveMinutes));
    assert!(o.ttl.expected_1h > 0);
    assert!(
        matches!(o.events.as_slice(), [TurnEvent::TtlMismatch { .. }]),
        "{:?}",
        o.events
    );
}
