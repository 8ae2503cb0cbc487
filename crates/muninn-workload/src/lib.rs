//! # muninn-workload
//!
//! Generators for benchmarks and large tests: pure, seeded and deterministic (the same seed and
//! parameters give the same output on every platform), with nothing live depending on them. They
//! sit beside [`muninn_core`] rather than inside it because no production path uses them; benches
//! and tests take this crate as a dev-dependency.
//!
//! ## Layout
//!
//! - [`synth`] — seeded synthetic Claude-Code-like traces (and [`synth::SplitMix64`], the PRNG
//!   every generator here draws from).
//! - [`workload`] — the seeded Persona workload (`shared/workloads/persona.md`): rooms, deliveries,
//!   `next_batch`, turns and the Mind's layers.
//! - [`persona`] — the Persona designs (today's rebuild, muninn's session under every plan) priced
//!   on one generated stream with the core's cache model and replay engine.
//!
//! ## Invariants
//!
//! - No I/O, no clock, no globals; no dependency but [`muninn_core`].
//! - Generated token counts are exact under [`muninn_core::tokenize::count`].

pub mod persona;
pub mod synth;
pub mod workload;
