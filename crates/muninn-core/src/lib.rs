//! # muninn-core
//!
//! The pure heart of muninn: everything that decides or prices, and nothing that does I/O or reads
//! a clock. Time, prices and bounds are parameters; the same functions run inside the live host and
//! inside `muninn replay`.
//!
//! ## Layout
//!
//! - [`money`] — integer tokens and micro-dollars.
//! - [`price`] — the editable price table (TOML), validated at load.
//! - [`cache`] — the prompt-cache model: reads, writes 5m/1h, uncached input, miss causes.
//! - [`trace`] — normalised traces, the importers' output and the replay engine's input.
//! - [`ledger`] — the ledger row written for every request.
//!
//! ## Invariants
//!
//! - No I/O, no clock, no globals: `decide(state, event, now)` style functions only.
//! - Money is integer micro-dollars; tokens are integers.
//! - For every request the cache model prices: `uncached + written + read == prompt`.

pub mod cache;
pub mod ledger;
pub mod money;
pub mod price;
pub mod trace;
pub mod validate;
