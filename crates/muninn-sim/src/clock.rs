//! The simulator's virtual clock as the one injected [`Clock`] ([`muninn_backend::clock`]).
//!
//! Handing [`SimClock`] to the host, the backend's cache-model mirror and anything else that reads
//! the time makes them all read the simulator's clock: advancing it in a test moves every part
//! with it.

use crate::sim::Simulator;
use muninn_backend::clock::Clock;
use std::sync::Arc;

/// The simulator's virtual clock as a [`Clock`].
#[derive(Debug, Clone)]
pub struct SimClock(pub Arc<Simulator>);

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }
}
