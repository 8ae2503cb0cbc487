//! # muninn-host
//!
//! `muninn serve`: the host that runs Minds as persistent, append-only sessions.
//!
//! ## Layout
//!
//! - [`config`] — `muninn.toml`: Minds, their doctrine, persona state, rooms, backend, policy and
//!   bounds; validated at load, with a checked-in JSON Schema.
//! - [`backends`] — the simulator or the Anthropic API behind the sessions.
//! - [`runtime`] — the Persona and Self loops, a file per job: mailbox → batch → decider →
//!   render → backend → ledger → validated reply → outbox → ack, one writer per Mind under a
//!   lease, every decision taken from the core's session accounting.
//! - [`http`] — the HTTP API's server (axum, loopback, bearer token). Its wire types, token and
//!   client are in `muninn-api`, which clients use without linking the server.
//!
//! ## Invariants
//!
//! - The transcript is the truth: everything shown to or said by a Mind is recorded durably before
//!   it is acted on; a backend session is a cache of it.
//! - Exactly-once effects: a batch is acknowledged only in the same transaction that records its
//!   replies in the outbox, with idempotent request ids `<batch>-<index>`.
//! - One writer per Mind: every write carries the Mind's lease fencing token.
//! - One economy: the decider's counters are `muninn_core::session::Accounting`, fed by each
//!   ledger row as it is written (and read back from the ledger after a new lease), so replaying
//!   the ledger (`muninn replay --closed-loop`) reproduces every decision the host took.

pub mod backends;
pub mod config;
pub mod http;
pub mod runtime;

use std::sync::Arc;

/// Wake-ups between the HTTP layer and the runtime.
#[derive(Debug, Default)]
pub struct Signals {
    /// Something arrived for the runtime: a delivery, a brief, a settings change.
    pub inbox: tokio::sync::Notify,
    /// The runtime recorded outbox messages or transcript items: long-polls re-read.
    pub outbox: tokio::sync::Notify,
}

/// What every part of a running host shares.
#[derive(Clone)]
pub struct Host {
    /// The durable state.
    pub store: Arc<dyn muninn_store::Store>,
    /// The validated configuration.
    pub config: Arc<config::Config>,
    /// The clock.
    pub clock: Arc<dyn muninn_backend::clock::Clock>,
    /// Wake-ups.
    pub signals: Arc<Signals>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
