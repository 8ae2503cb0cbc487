//! An account's mouth: sends the Mind's outbox, oldest first, each message exactly once.
//!
//! A message is `PUT …/send/m.room.message/{request id}` from the account's fixed device, then
//! acknowledged in the outbox with the event id. A crash between the two sends it again after
//! the restart, and the homeserver answers the repeated transaction id with the same event, so
//! the room shows it once. A rate limit is waited out for the homeserver's `retry_after_ms`, a
//! transient failure retried with backoff — in both cases the message keeps its place, so the
//! room sees the Mind's messages in the order it said them. A refusal that no retry changes
//! (a room the account may not post in, a message too large) is recorded on the message with
//! the homeserver's reason ([`Store::fail_outbox`](muninn_store::Store::fail_outbox)) and the
//! next message goes.
//!
//! While the operator brake is on, nothing is sent (as the HTTP outbox hands nothing out).

use crate::Stats;
use crate::account::{Backoff, Context, Opened, lock, pause};
use crate::client::MatrixClient;
use crate::config::{FaultPoint, crash_if_armed};
use crate::error::MatrixError;
use crate::rooms::Directory;
use crate::session::Session;
use muninn_store::OutboxMessage;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Outbox messages read per page.
const PAGE: i64 = 50;

/// An account's outbox sender.
pub(crate) struct Mouth {
    context: Context,
    session: Arc<Session>,
    client: MatrixClient,
    directory: Arc<Mutex<Directory>>,
    outbox_changed: watch::Receiver<u64>,
}

/// Why a send round stopped early: wait, then start over from the oldest unsent message.
struct Wait(std::time::Duration);

impl Mouth {
    pub(crate) fn new(
        context: Context,
        opened: &Opened,
        outbox_changed: watch::Receiver<u64>,
    ) -> Mouth {
        Mouth {
            session: opened.session.clone(),
            client: opened.client.clone(),
            directory: opened.directory.clone(),
            outbox_changed,
            context,
        }
    }

    fn mind(&self) -> &str {
        &self.context.account.mind
    }

    /// Sends until `stop`: a round whenever the outbox may have changed (or every couple of
    /// seconds), a wait after a failure.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut backoff = Backoff::default();
        loop {
            // Marked seen before the round reads the outbox: a change during the round wakes
            // the next wait at once.
            self.outbox_changed.borrow_and_update();
            let wait = match self.round(&mut backoff).await {
                Ok(()) => {
                    backoff.reset();
                    None
                }
                Err(Wait(wait)) => Some(wait),
            };
            if let Some(wait) = wait {
                if pause(&mut stop, wait).await {
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = self.outbox_changed.changed() => {}
                _ = tokio::time::sleep(crate::OUTBOX_POLL) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }

    /// Sends every message waiting, oldest first.
    async fn round(&mut self, backoff: &mut Backoff) -> Result<(), Wait> {
        let store = self.context.store.clone();
        match store.settings(self.mind()).await {
            Ok(settings) if settings.brake => return Ok(()),
            Ok(_) => {}
            Err(error) => return Err(self.store_failed(error, "read the settings", backoff)),
        }
        let mut after = 0;
        loop {
            let page = match store.outbox_after(self.mind(), after, PAGE).await {
                Ok(page) => page,
                Err(error) => return Err(self.store_failed(error, "read the outbox", backoff)),
            };
            let Some(last) = page.last().map(|m| m.seq) else {
                return Ok(());
            };
            for message in &page {
                self.send(message, backoff).await?;
            }
            after = last;
        }
    }

    /// Sends one message and acknowledges it, or records it as failed for good.
    async fn send(&self, message: &OutboxMessage, backoff: &mut Backoff) -> Result<(), Wait> {
        let Some(room_id) = lock(&self.directory).resolve(&message.room) else {
            let failure = format!(
                "{} is not a room of this Mind's Matrix account (nor one of its direct chats)",
                message.room
            );
            return self.fail(message, &failure, backoff).await;
        };
        let generation = self.client.token_generation();
        match self
            .client
            .send_text(&room_id, &message.request_id, &message.text)
            .await
        {
            Ok(event_id) => {
                crash_if_armed(self.context.config.fault, FaultPoint::SentBeforeAck);
                let now = self.context.clock.now_ms();
                let acked = self
                    .context
                    .store
                    .ack_outbox(self.mind(), &message.request_id, Some(&event_id), now)
                    .await;
                if let Err(error) = acked {
                    // Sent but not acked: the next round sends it again, as the same event.
                    let what = format!("record {} as sent", message.request_id);
                    return Err(self.store_failed(error, &what, backoff));
                }
                Stats::add(&self.context.stats.sent, 1);
                Ok(())
            }
            Err(error) if error.is_rate_limited() => {
                Stats::add(&self.context.stats.rate_limited, 1);
                let wait = backoff.after(&error);
                tracing::info!(mind = %self.mind(), request = %message.request_id,
                    "matrix: rate limited; sending again in {wait:?}");
                Err(Wait(wait))
            }
            Err(error) if error.is_unauthorized() => {
                // The token was refused, not the message: it keeps its place, and goes again
                // after a new login on the same device (the same transaction id, so at most one
                // event), else after a wait (the ear reports the failure).
                match self.session.renew(generation, &error).await {
                    Ok(()) => Err(Wait(backoff.step())),
                    Err(renewal) => {
                        let wait = backoff.after(&renewal);
                        tracing::warn!(mind = %self.mind(), request = %message.request_id,
                            error = %renewal, "matrix: cannot send; retrying in {wait:?}");
                        Err(Wait(wait))
                    }
                }
            }
            Err(error) if error.retry_after().is_some() => {
                // Transient: the message is not at fault, so it keeps its place and waits.
                let wait = backoff.after(&error);
                tracing::warn!(mind = %self.mind(), request = %message.request_id, %error,
                    "matrix: send failed; retrying in {wait:?}");
                Err(Wait(wait))
            }
            Err(error) => self.fail(message, &error.to_string(), backoff).await,
        }
    }

    /// Records a message as failed for good.
    async fn fail(
        &self,
        message: &OutboxMessage,
        failure: &str,
        backoff: &mut Backoff,
    ) -> Result<(), Wait> {
        tracing::error!(mind = %self.mind(), request = %message.request_id, room = %message.room,
            %failure, "matrix: send failed for good; recorded on the outbox message");
        let now = self.context.clock.now_ms();
        match self
            .context
            .store
            .fail_outbox(self.mind(), &message.request_id, failure, now)
            .await
        {
            Ok(_) => {
                Stats::add(&self.context.stats.failed, 1);
                Ok(())
            }
            Err(error) => {
                let what = format!("record {} as failed", message.request_id);
                Err(self.store_failed(error, &what, backoff))
            }
        }
    }

    /// A store call that failed: logged with its cause (a sender that cannot read or record
    /// its outbox stalls, and must not do so silently), then waited out with backoff.
    fn store_failed(
        &self,
        error: muninn_store::StoreError,
        what: &str,
        backoff: &mut Backoff,
    ) -> Wait {
        let error = MatrixError::from(error);
        let wait = backoff.after(&error);
        tracing::warn!(mind = %self.mind(), %error,
            "matrix: the sender cannot {what}; retrying in {wait:?}");
        Wait(wait)
    }
}
