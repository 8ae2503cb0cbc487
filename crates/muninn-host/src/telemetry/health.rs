//! `GET /healthz` and `GET /readyz`.
//!
//! `/healthz` answers while the process serves HTTP. `/readyz` answers 200 only when the host
//! can do its work: the store answers a real query (its schema version) within
//! [`STORE_TIMEOUT`], every configured Mind's runner task runs in this host, no runner's steps
//! are failing (a backend outage, a store that refuses writes, a Mind that cannot run) and no
//! Mind's transport (its Matrix account) is failing, and the host holds its presence lock on a
//! shared database (see [`crate::cluster`]); otherwise 503 with every reason. A Mind whose lease another host holds is ready: that host
//! runs it.
//!
//! Neither needs a token (orchestrators and load balancers probe them). Their answers name
//! Minds, counts and the backend's last error — the provider's message, which never carries a
//! credential — but not the store's errors, which may name database hosts (those are logged).

use crate::Host;
use serde::Serialize;
use std::time::Duration;

/// How long `/readyz` waits for the store's answer.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest backend error text `/readyz` repeats (and a transcript note of a failed
/// request keeps).
pub(crate) const ERROR_CHARS: usize = 300;

/// The answer of `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Whether every check passed.
    pub ready: bool,
    /// What is not ready, one sentence each (empty when ready).
    pub reasons: Vec<String>,
}

/// `": <kind>"` naming the storage fault a store error shows on the host's backend
/// ([`super::store_fault::store_fault`]), or nothing when it is not one we know: both of
/// `/readyz`'s store reasons end their first clause with it.
fn fault_suffix(host: &Host, error: &str) -> String {
    super::store_fault::store_fault(error, host.store.backend())
        .map_or_else(String::new, |kind| format!(": {kind}"))
}

/// Runs every readiness check.
pub async fn readiness(host: &Host) -> Readiness {
    let mut reasons = Vec::new();
    match tokio::time::timeout(STORE_TIMEOUT, host.store.schema_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(%error, "readiness: the store did not answer");
            let kind = fault_suffix(host, &error.to_string());
            reasons.push(format!(
                "store: the query failed{kind} (the error is in the host's log)"
            ));
        }
        Err(_) => reasons.push(format!(
            "store: no answer within {} s",
            STORE_TIMEOUT.as_secs()
        )),
    }
    if host.cluster.presence_failure().is_some() {
        reasons.push(
            "presence: this host's presence lock on the database is not held, so other hosts may \
             take its Minds over (the error is in the host's log; retrying)"
                .to_string(),
        );
    }
    for mind in &host.config.minds {
        let live = host.telemetry.mind(&mind.id);
        if !live.runner_up {
            reasons.push(format!("mind {}: its runner is not running", mind.id));
        }
        if let Some(failing) = live.failing {
            let what = match failing.cause {
                "backend" => format!(
                    "the backend is failing: {}",
                    truncate(&failing.last_error, ERROR_CHARS)
                ),
                "store" => format!(
                    "the store refuses its steps{} (the error is in the host's log)",
                    fault_suffix(host, &failing.last_error)
                ),
                _ => format!(
                    "it cannot run: {}",
                    truncate(&failing.last_error, ERROR_CHARS)
                ),
            };
            reasons.push(format!(
                "mind {}: {what} ({} steps failed in a row, retrying)",
                mind.id, failing.failures
            ));
        }
        if let Some(muninn_api::wire::TransportStatus {
            transport,
            state:
                muninn_api::wire::TransportState::Failing {
                    stage,
                    error,
                    failures,
                },
            ..
        }) = live.transport
        {
            reasons.push(format!(
                "mind {}: {transport} is failing to {}: {} ({failures} failures in a row, retrying)",
                mind.id,
                match stage.as_str() {
                    "login" => "open the account",
                    "sync" => "read its rooms",
                    "panic" => "run the account (its task panicked; opened again)",
                    _ => "keep its position",
                },
                truncate(&error, ERROR_CHARS)
            ));
        }
    }
    Readiness {
        ready: reasons.is_empty(),
        reasons,
    }
}

/// `text` cut to its first `chars` characters, marked with `…` when cut.
pub(crate) fn truncate(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}
