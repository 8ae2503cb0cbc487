//! The backend behaviour suite, run by the Anthropic backend against `sim-api`.

use crate::support::{T0, sim};
use muninn_anthropic::backend::AnthropicBackend;
use muninn_backend::Capability;
use muninn_backend::clock::{ManualClock, RecordingSleeper};
use muninn_core::price::PriceTable;
use muninn_sim::SimHandle;
use muninn_testkit::{SuiteHarness, run_backend_suite};
use std::sync::Arc;

struct Harness {
    sim: SimHandle,
    clock: ManualClock,
}

impl SuiteHarness for Harness {
    type B = AnthropicBackend;

    async fn backend(&self) -> AnthropicBackend {
        let sleeper = RecordingSleeper::default();
        AnthropicBackend::new(
            crate::support::client(&self.sim, &sleeper, 8),
            Arc::new(self.clock.clone()),
            PriceTable::embedded(),
        )
    }

    fn model(&self) -> String {
        "claude-opus-5-5".to_string()
    }

    fn nonce(&self) -> String {
        format!("{}", std::process::id())
    }

    async fn advance_clock(&self, ms: u64) -> bool {
        self.clock.advance(ms as i64);
        self.sim.sim.advance_clock(ms as i64);
        true
    }
}

#[tokio::test]
async fn the_anthropic_backend_passes_the_suite() {
    let h = Harness {
        sim: sim().await,
        clock: ManualClock::new(T0),
    };
    let report = run_backend_suite(&h).await.unwrap();
    assert_eq!(
        report.passed,
        vec![
            "append_reads_grow",
            "tool_round_trip",
            "structured_output",
            "ttl_expiry",
            "capabilities"
        ]
    );
    assert!(report.skipped.is_empty());
    // It pings (the tail and the head) but cannot compact.
    assert_eq!(report.unsupported, vec![Capability::Compact]);
}

struct InProcessHarness {
    sim: Arc<muninn_sim::sim::Simulator>,
    clock: ManualClock,
}

impl SuiteHarness for InProcessHarness {
    type B = muninn_sim::inprocess::SimBackend;

    async fn backend(&self) -> Self::B {
        AnthropicBackend::new(
            muninn_sim::inprocess::InProcess::new(self.sim.clone()),
            Arc::new(self.clock.clone()),
            PriceTable::embedded(),
        )
    }

    fn model(&self) -> String {
        "claude-opus-5-5".to_string()
    }

    fn nonce(&self) -> String {
        format!("in-process-{}", std::process::id())
    }

    async fn advance_clock(&self, ms: u64) -> bool {
        self.clock.advance(ms as i64);
        self.sim.advance_clock(ms as i64);
        true
    }
}

#[tokio::test]
async fn the_in_process_simulator_passes_the_suite() {
    let h = InProcessHarness {
        sim: Arc::new(muninn_sim::sim::Simulator::new(
            muninn_sim::sim::SimConfig {
                frozen_at_ms: Some(T0),
                ..Default::default()
            },
        )),
        clock: ManualClock::new(T0),
    };
    let report = run_backend_suite(&h).await.unwrap();
    assert_eq!(report.passed.len(), 5);
    assert_eq!(report.unsupported, vec![Capability::Compact]);
    // Same requests, same usage as over HTTP: the recorded log agrees with the cache model.
    let records = h.sim.requests();
    assert_eq!(
        crate::support::recompute(&records),
        records.iter().filter_map(|r| r.usage).collect::<Vec<_>>()
    );
}
