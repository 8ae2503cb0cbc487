//! The backend behaviour suite, run by the Anthropic backend against `sim-api`.

use crate::support::{T0, sim};
use muninn_anthropic::backend::AnthropicBackend;
use muninn_anthropic::clock::{ManualClock, RecordingSleeper};
use muninn_backend::suite::{SuiteHarness, run_backend_suite};
use muninn_core::price::PriceTable;
use muninn_sim::SimHandle;
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
            "ttl_expiry"
        ]
    );
    assert!(report.skipped.is_empty());
}
