//! Time, injected (STYLE 7): everything that reads the wall clock or waits does so through these
//! two traits, so tests run retries without waiting and move a virtual clock past cache TTLs.
//!
//! One trait per job, shared by every crate: the host, its runtime and the backends' cache-model
//! mirrors read a [`Clock`]; the Anthropic client's retries wait on a [`Sleeper`]. The
//! implementations here need nothing but `std`: the system clock, a manual clock and a recording
//! sleeper for tests. Those that need more live beside what they need and implement the same
//! traits: `muninn_anthropic::client::TokioSleeper` (Tokio's timer) and `muninn_sim::SimClock`
//! (the simulator's virtual clock).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Wall-clock time in Unix milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, Unix milliseconds.
    fn now_ms(&self) -> i64;
}

/// Waits.
pub trait Sleeper: Send + Sync + std::fmt::Debug {
    /// Resolves after `duration`.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(start_ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A sleeper that returns at once and records every requested delay (for tests of backoff).
#[derive(Debug, Clone, Default)]
pub struct RecordingSleeper(Arc<Mutex<Vec<Duration>>>);

impl RecordingSleeper {
    /// The delays asked for so far.
    pub fn delays(&self) -> Vec<Duration> {
        self.0.lock().map(|d| d.clone()).unwrap_or_default()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        if let Ok(mut d) = self.0.lock() {
            d.push(duration);
        }
        Box::pin(std::future::ready(()))
    }
}
