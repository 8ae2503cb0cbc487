//! # muninn-testkit
//!
//! What muninn's tests share, written once and kept out of every production crate (STYLE 9, 15):
//! crates take it as a dev-dependency only (`publish = false`).
//!
//! ## Layout
//!
//! - [`store_conformance`] — [`run_conformance`]: the behaviour every `muninn_store::Store`
//!   backend must show, run by the store's tests against SQLite and PostgreSQL.
//! - [`backend_suite`] — [`run_backend_suite`]: the behaviour every `muninn_backend::Backend`
//!   passes, run by the simulator's and the Claude Code CLI driver's tests.
//! - [`peers`] — finding the real peers (the Claude Code CLI, the Python SDK, PostgreSQL,
//!   headless Chromium with its chromedriver, Synapse) and `MUNINN_SKIP_PEERS`: a missing
//!   peer fails the test, or is a `SKIP` when skipping is asked for.
//! - [`private_postgres`] — a private PostgreSQL cluster per test (`initdb` in a temporary
//!   directory, its own port) that a test may stop and restart under load.
//! - [`synapse`] — a real Synapse per test binary or per test, and a person's Matrix client.
//! - [`hostile_files`] — a named pipe or a 100 MB file where a file should be, and a read of
//!   it bounded in time.
//! - [`fuzz`] — a coverage-free mutation fuzzer for stable Rust: seed corpora under
//!   `fuzz/corpus/<target>/`, run as ordinary tests (`MUNINN_FUZZ_SECS` for a long run).
//! - [`silent_proxy`] — [`SilentProxy`]: a TCP proxy that falls silent on command, keeping
//!   its sockets open (a database server that stops answering without closing the connection).
//! - [`faulty_store`] — [`FaultyStore`]: a real store that refuses its next N commits, for
//!   the host's tests of an answer whose commit failed.
//! - [`crash`] — the crash harness's checker: every delivery answered exactly once, the
//!   transcript replaying to the store's state, the ledger agreeing with the transcript.
//!
//! ## Invariants
//!
//! - Nothing here is linked into a binary muninn ships.
//! - The suites panic (naming the case) or return a failure naming the case; they never skip
//!   silently.

pub mod backend_suite;
pub mod crash;
pub mod faulty_store;
pub mod fuzz;
pub mod hostile_files;
pub mod peers;
pub mod private_postgres;
pub mod silent_proxy;
pub mod store_conformance;
pub mod synapse;
pub mod transcript;
pub mod wire;

pub use backend_suite::{SuiteHarness, run_backend_suite};
pub use faulty_store::FaultyStore;
pub use silent_proxy::SilentProxy;
pub use store_conformance::{StoreFactory, run_conformance};
