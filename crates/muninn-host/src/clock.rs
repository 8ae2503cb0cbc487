//! The injected clock. Nothing in the host reads the system time except through a [`Clock`].
//!
//! The trait is the Anthropic client's, so one clock serves the host, the backend's cache-model
//! mirror and, with the simulator, the simulator itself ([`SimClock`]): advancing the simulator's
//! virtual clock in a test moves every part of the host with it.

pub use muninn_anthropic::clock::{Clock, ManualClock, SystemClock};
use std::sync::Arc;

/// The simulator's virtual clock as a [`Clock`].
#[derive(Debug, Clone)]
pub struct SimClock(pub Arc<muninn_sim::sim::Simulator>);

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }
}
