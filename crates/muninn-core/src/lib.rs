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
//! - [`mask`] — pricing the `mask` action (the provider's tool-result clearing): the clearing
//!   request's rewrite and the later requests it pays back over.
//! - [`miss`] — one vocabulary of cache-miss causes, mapped to the provider's diagnosis and to
//!   Claude Code's `/usage` causes.
//! - [`records`] — a Mind's records shared by the store, the runtime and the HTTP API: roles,
//!   segments, leases, outbox messages, briefs.
//! - [`decide`] — the pure decider and the online policies.
//! - [`session`] — the session accounting every decision is made from, driven alike by the
//!   live host and by the replay engine.
//! - [`render`] — layers, breakpoints and the append-only rendering of a segment.
//! - [`replay`] — the replay engine that runs a trace under a policy.
//! - [`closed_loop`] — replaying the host's own ledger: every decision and the cost reproduced.
//! - [`optimum`] — the hindsight optimum: an O(n log n) dynamic program, and an exact one over
//!   (segment start, latest clear) where tool results can be cleared.
//! - [`split`] — the fixed split of sessions into a tuning part and a set-aside part.
//! - [`tokenize`] — the deterministic tokenizer the renderer and the simulator share.
//! - [`validate`] — the cache model checked against recorded usage.
//!
//! The generators benches and tests run these on (synthetic traces, the Persona workload) live in
//! `muninn-workload`, outside the core: no production path uses them.
//!
//! ## Invariants
//!
//! - No I/O, no clock, no globals: `decide(state, event, now)` style functions only.
//! - Money is integer micro-dollars; tokens are integers.
//! - For every request the cache model prices: `uncached + written + read == prompt`.

pub mod cache;
pub mod closed_loop;
pub mod decide;
pub mod learn;
pub mod ledger;
pub mod mask;
pub mod miss;
pub mod money;
pub mod optimum;
pub mod price;
pub mod records;
pub mod render;
pub mod replay;
pub mod session;
pub mod split;
pub mod tokenize;
pub mod trace;
pub mod validate;
