//! The per-wake turn limit: how many Persona turns a wake may take (`turns_per_wake`, or the
//! operator's `turn_limit`), and when a new wake begins.
//!
//! A wake begins when a delivery not seen before is pending, however it arrived: through this
//! host's API (which also wakes the runner, [`MindRunner::woken`](super::MindRunner::woken)) or
//! through another host on the same database, which cannot signal this one. Only a turn that was
//! recorded counts: a failed one is retried on the runner's own backoff until it goes through.
//!
//! A wake cut short by a failed step — deliveries it had seen still pending, turns left — is
//! *owed*: when a new arrival starts a wake meanwhile, the owed wake's turns are granted again
//! once the new wake's are spent, instead of being merged into it. Otherwise a delivery that
//! came while a failed turn backed off would wait for yet another wake once the retried turn
//! used this one's.

/// The turn count of the current wake (pure: the caller reads the mailbox and the limit).
#[derive(Debug, Default)]
pub(super) struct WakeTurns {
    /// Persona turns recorded in this wake.
    taken: u32,
    /// The newest delivery seq seen: a newer one is an arrival, so a new wake.
    newest_seen: i64,
    /// A wake cut short by a failed step whose turns are still owed (see the module docs).
    owed: bool,
}

impl WakeTurns {
    /// A new wake signalled to the runner: the limit starts again.
    pub(super) fn woken(&mut self) {
        self.taken = 0;
    }

    /// A Persona turn was recorded.
    pub(super) fn turn_taken(&mut self) {
        self.taken += 1;
    }

    /// Whether a Persona turn may be taken now, given the seqs of the first and last pending
    /// deliveries (`None`: the mailbox is empty) and the wake's `limit`; counts a new wake when
    /// one began.
    pub(super) fn may_take_turn(&mut self, pending: Option<(i64, i64)>, limit: u32) -> bool {
        let Some((first, newest)) = pending else {
            // Nothing left to answer: no wake is owed anything.
            self.owed = false;
            return false;
        };
        if newest > self.newest_seen {
            // An arrival while a delivery seen before is still pending and turns were left:
            // the wake before this one was cut short.
            self.owed |= first <= self.newest_seen && self.taken < limit;
            self.newest_seen = newest;
            self.taken = 0;
        }
        if self.taken >= limit && std::mem::take(&mut self.owed) {
            // This wake's turns are spent: the owed wake's come now.
            self.taken = 0;
        }
        self.taken < limit
    }
}
