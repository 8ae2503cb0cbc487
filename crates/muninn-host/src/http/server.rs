//! The accept loop: HTTP/1.1 connections served by hyper under the `[api]` bounds.
//!
//! `axum::serve` holds every connection a client opens for as long as the client likes; a few
//! thousand slow clients then exhaust the process's file descriptors and the API stops
//! answering. Here:
//!
//! - at most `max_connections` connections are served at once (a semaphore permit each); one
//!   over the cap is accepted and closed at once — accepting keeps the kernel's backlog from
//!   filling with clients that would otherwise wait, and closing returns the descriptor — and
//!   the refusals are logged (at most once a second, with the count);
//! - hyper closes a connection whose request headers have not all arrived within
//!   `header_read_timeout_s` of it opening or of its previous response (so an idle keep-alive
//!   connection goes too), and caps the header buffer at [`MAX_HEADER_BYTES`];
//! - the body bounds (time and size) are the [`body`](super::body) middleware's;
//! - on shutdown, connections finish the request they are in and close; the loop waits for
//!   them at most [`SHUTDOWN_GRACE`].

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Closing, closed};
use crate::config::ApiConfig;

/// The largest request head (request line and headers), bytes; hyper answers a larger one with
/// `431` and closes. Our routes need a bearer token and a few short headers.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// How long shutdown waits for open connections to finish their request.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// The pause after `accept` fails (out of descriptors, say) before trying again, so the loop
/// does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Counts connections refused over the cap (the count is `/metrics`'
/// `muninn_api_connections_refused_total`) and logs them at most once a second.
#[derive(Debug)]
struct Refusals {
    total: Arc<AtomicU64>,
    logged_at: std::sync::Mutex<Option<Instant>>,
}

impl Refusals {
    fn refused(&self, limit: u32) {
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let Ok(mut logged_at) = self.logged_at.lock() else {
            return;
        };
        if logged_at.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            *logged_at = Some(now);
            tracing::warn!(
                limit,
                refused_total = total,
                "connection refused: the API already serves its [api] max_connections"
            );
        }
    }
}

/// Accepts and serves connections on `listener` with `router` until `closing` turns `true`.
pub(super) async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: &ApiConfig,
    refused: Arc<AtomicU64>,
    closing: Closing,
) -> std::io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max as usize));
    let refusals = Refusals {
        total: refused,
        logged_at: std::sync::Mutex::new(None),
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(limits.header_read_timeout_s))
        .max_buf_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = closed(&closing) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed; retrying");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refusals.refused(max);
            drop(stream);
            continue;
        };
        let connection = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let closing = closing.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = closed(&closing) => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                // A timed-out or vanished client: routine, and the client's doing.
                tracing::debug!(%error, "connection ended");
            }
        });
    }
    // Every permit back means every connection is done.
    let all = tokio::time::timeout(SHUTDOWN_GRACE, permits.acquire_many(max)).await;
    if all.is_err() {
        tracing::warn!(
            open = max as usize - permits.available_permits(),
            "shutdown: connections still open after the grace period; leaving them"
        );
    }
    Ok(())
}
