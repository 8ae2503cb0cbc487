//! # muninn-sim
//!
//! `muninn sim-api`: an Anthropic-compatible Messages API whose replies are deterministic and
//! whose usage is exactly what muninn's cache model computes for the request as sent. It is the
//! peer the Anthropic backend, the official Python SDK and the real Claude Code CLI are tested
//! against, and the embedded default model when no credentials are configured.
//!
//! ## Layout
//!
//! - [`reply`] — the pure reply function (text, tool calls, `StructuredOutput`, compaction).
//! - [`sim`] — [`sim::Simulator`]: the shared cache, virtual clock, faults and request log, and
//!   the transport-free request handling.
//! - [`clock`] — [`SimClock`]: the virtual clock as the injected [`muninn_backend::clock::Clock`].
//! - [`server`] — the axum router: the API routes and the admin routes.
//! - [`context`] — the provider's own context tools: on-demand and threshold compaction
//!   (signed blocks, billed in `usage.iterations[]`), tool-result and thinking clearing.
//! - [`strict`] — what the API refuses and the simulator refuses alike (unknown fields, out of
//!   range values, a prompt past the context window, a body past 32 MB, unpaired tool calls).
//! - [`inprocess`] — the simulator as a transport of the Anthropic backend, without HTTP
//!   ([`inprocess::SimBackend`]).
//! - this module — [`spawn`] (an in-process server on an ephemeral port, for tests) and
//!   [`serve`] (the CLI's long-running server).
//!
//! ## Invariants
//!
//! - For every answered request: `input + cache writes + cache read == prompt tokens` of
//!   [`muninn_anthropic::prompt::shape`] on the prompt as the provider reads it (from the last
//!   compaction block sent back, after the context edits — the request as sent otherwise), and
//!   the numbers are those of
//!   [`muninn_core::cache::CacheState::apply`] at the virtual time of arrival.
//! - The same request body always gets the same reply content.
//! - Credentials are never recorded.

pub mod clock;
pub mod context;
pub mod inprocess;
pub mod reply;
pub mod server;
pub mod sim;
pub mod strict;

pub use clock::SimClock;
use sim::{SimConfig, Simulator};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A running simulator. Dropping it stops the server.
#[derive(Debug)]
pub struct SimHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The simulator itself, for direct control in tests.
    pub sim: Arc<Simulator>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl SimHandle {
    /// `http://<addr>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _already_stopped = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _already_stopped = tx.send(());
        }
    }
}

/// Starts a simulator on `addr` (use port 0 for an ephemeral one) in the current runtime.
pub async fn spawn(addr: SocketAddr, config: SimConfig) -> std::io::Result<SimHandle> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let sim = Arc::new(Simulator::new(config));
    let (tx, rx) = oneshot::channel::<()>();
    let app = server::router(sim.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    });
    Ok(SimHandle {
        addr,
        sim,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// Serves on `addr` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: SimConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sim = Arc::new(Simulator::new(config));
    axum::serve(listener, server::router(sim))
        .with_graceful_shutdown(shutdown)
        .await
}
