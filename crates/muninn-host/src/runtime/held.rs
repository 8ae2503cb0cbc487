//! What the runner keeps of the store between consecutive Persona turns: the Mind's settings
//! (brake, caps, turn limit) and its ack position.
//!
//! Reading both at every step would be two of a turn's five store round trips, for values that
//! change only when the operator acts (settings) or when this runner itself records a turn (the
//! ack: only the lease holder moves it, fenced). So the runner holds them while it goes on
//! turning, and reads them again when any of these happens:
//!
//! - **a wake-up** for the Mind on this host ([`crate::Signals::wakes`] moved): a settings
//!   change or brake through the HTTP API wakes the Mind, on this host directly and on the
//!   others through `LISTEN/NOTIFY` (`cluster.rs`), which wakes there locally too;
//! - **a step that was not a Persona turn** (idle, braked, over the cap, not the leader, an
//!   error) or [`MindRunner::woken`];
//! - **a different lease** (the token changed);
//! - **age**: a third of the lease at most, so a change no wake-up reached (two SQLite hosts
//!   on one file cannot signal each other) is seen within that time, as the idle look sees it.
//!
//! Fencing still guards every write, so a held value can make the runner do less (a turn it
//! should have braked is at most the turns of one streak younger than the brake), never write
//! where it no longer may.

use super::MindRunner;
use muninn_backend::Backend;
use muninn_store::{FencingToken, MindSettings, StoreError};
use std::sync::atomic::Ordering;

/// The settings and ack position as last read or written by this runner.
#[derive(Debug, Clone)]
pub(super) struct Held {
    settings: MindSettings,
    ack: i64,
    /// The lease they were read under.
    token: FencingToken,
    /// The Mind's wake-up count when they were read.
    wakes: u64,
    read_at_ms: i64,
}

impl<B: Backend> MindRunner<B> {
    /// The Mind's settings and ack position: held ones if still good (see the module docs),
    /// else read from the store and held.
    pub(super) async fn settings_and_ack(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<(MindSettings, i64), StoreError> {
        // Read before the store is, so a wake-up during the reads forces the next re-read.
        let wakes = self.wakes.load(Ordering::SeqCst);
        let max_age = self.host.config.lease_ttl_ms / 3;
        if let Some(held) = &self.held
            && held.token == token
            && held.wakes == wakes
            && now - held.read_at_ms <= max_age
        {
            self.held_reads_saved += 1;
            return Ok((held.settings.clone(), held.ack));
        }
        let settings = self.host.store.settings(&self.mind.id).await?;
        let ack = self.host.store.ack_position(&self.mind.id).await?;
        self.held = Some(Held {
            settings: settings.clone(),
            ack,
            token,
            wakes,
            read_at_ms: now,
        });
        Ok((settings, ack))
    }

    /// This runner's turn moved the ack position (its own fenced write).
    pub(super) fn ack_moved(&mut self, ack: i64) {
        if let Some(held) = &mut self.held {
            held.ack = ack;
        }
    }

    /// Reads both again at the next step.
    pub(super) fn forget_held(&mut self) {
        self.held = None;
    }

    /// Steps that used the held settings and ack instead of reading them (two reads each).
    pub fn held_reads_saved(&self) -> u64 {
        self.held_reads_saved
    }
}
