//! The connector's accounts, one task each, and the restart of an account whose task panicked.
//!
//! A panic under an account (a bug in the ear, the mouth, the client or a store driver) ends
//! that account's task — its `/sync` loop and its sender together — and nothing else. It used
//! to end the account for the life of the process, silently: the `JoinError` was dropped, the
//! health last reported stood (`open`), and the Mind heard nothing more from Matrix and said
//! nothing into it, with `status` and `/readyz` none the wiser. Now the panic is logged with the
//! Mind and its message, reported as the account's health (`Failing` at stage `panic`, which
//! `status` and `/readyz` show), and the account is opened again after a backoff (1 s doubling
//! to 30 s for panics in a row; an account that ran [`STEADY`] starts it again), as a process
//! restart would: it logs in, and its ear reads on from the stored sync position, so nothing
//! committed is lost or delivered twice.

use crate::OnDelivered;
use crate::account::{self, Backoff, Context};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;

/// An account that ran this long before it panicked starts the backoff again.
pub(crate) const STEADY: Duration = Duration::from_secs(60);

/// One account's task, as the supervisor knows it.
struct Supervised {
    context: Context,
    /// When its account began to run (after its restart wait).
    started: Instant,
    backoff: Backoff,
    /// Panics in a row (reset with the backoff). The account reports `opening` and `open` at
    /// each reopen, which ends the host's count of failures in a row, so a loop of panics (a
    /// bug met again at every reopen, say on the same sync answer) showed as its first panic,
    /// every time: the report itself says how many there were.
    panics: u32,
}

/// Runs every account in `contexts` until `stop` turns true, restarting those that panic.
pub(crate) async fn run_accounts(
    contexts: Vec<Context>,
    on_delivered: OnDelivered,
    outbox_changed: watch::Receiver<u64>,
    stop: watch::Receiver<bool>,
) {
    let mut tasks = JoinSet::new();
    let mut by_task: HashMap<Id, Supervised> = HashMap::new();
    let start = |tasks: &mut JoinSet<()>, context: Context, wait: Duration| -> Id {
        let (on_delivered, outbox_changed) = (on_delivered.clone(), outbox_changed.clone());
        let mut stop = stop.clone();
        let run_context = context.clone();
        tasks
            .spawn(async move {
                if !wait.is_zero() && account::pause(&mut stop, wait).await {
                    return;
                }
                account::run(run_context, on_delivered, outbox_changed, stop).await;
            })
            .id()
    };
    for context in contexts {
        let id = start(&mut tasks, context.clone(), Duration::ZERO);
        let backoff = Backoff::default();
        let started = Instant::now();
        by_task.insert(
            id,
            Supervised {
                context,
                started,
                backoff,
                panics: 0,
            },
        );
    }
    while let Some(done) = tasks.join_next_with_id().await {
        let error = match done {
            Ok((id, ())) => {
                by_task.remove(&id);
                continue;
            }
            Err(error) => error,
        };
        let Some(mut gone) = by_task.remove(&error.id()) else {
            tracing::error!(%error, "matrix: a task of no known account ended");
            continue;
        };
        let mind = gone.context.account.mind.clone();
        let why = panic_message(error);
        if *stop.borrow() {
            tracing::error!(%mind, panic = %why, "matrix: an account's task panicked while stopping");
            continue;
        }
        if gone.started.elapsed() >= STEADY {
            gone.backoff.reset();
            gone.panics = 0;
        }
        let wait = gone.backoff.step();
        gone.panics = gone.panics.saturating_add(1);
        let panics = gone.panics;
        tracing::error!(%mind, panic = %why, panics,
            "matrix: an account's task panicked ({panics} in a row); opening it again in {wait:?}");
        gone.context.health(crate::AccountHealth::Failing {
            stage: "panic",
            error: format!(
                "the account's task panicked ({panics} in a row; opened again in {} s): {why}",
                wait.as_secs()
            ),
        });
        let id = start(&mut tasks, gone.context.clone(), wait);
        gone.started = Instant::now() + wait;
        by_task.insert(id, gone);
    }
}

/// What a task's end said: its panic's message when it has one.
fn panic_message(error: JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    muninn_backend::panic::payload_text(&*error.into_panic())
}
