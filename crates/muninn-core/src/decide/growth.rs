//! The growth rule at an idle gap: refresh where the wake rewrites nothing it would keep.
//!
//! The growth rule refreshes at a task boundary once the reads paid above a rehydration,
//! Σ r·(Pₜ − R), have bought a rebuild (as many as the Mind's refreshes have been worth,
//! [`crate::learn::Learned::refresh_break_even`]). When that bar is reached inside a run (its
//! tool loop goes on, no refresh may start) and the session then goes idle, the keep-warm rule
//! used to ping the whole old prefix through the gap and the growth rule refreshed at the wake:
//! the pings read again the very tokens the refresh was about to drop. Flushing as the tail
//! expires costs the same flush, the head stays warm on its own cheaper pings, and the wake
//! restarts from the rehydration (a flushed cold wake restarts when that is cheaper than a
//! rewrite, [`crate::decide`]).
//!
//! It is a bet that the wake is a task boundary. A wake that continues a tool loop (a tool
//! result after a permission prompt left overnight) may not start a segment: the flush is paid
//! for nothing and the prefix is rewritten cold. So neither this flush nor the keep-warm
//! rule's flush before letting the tail go is sent while the last answer awaits its tool
//! results ([`SessionView::awaiting_tool_results`]).

use super::{Reason, SessionView};
use crate::money::MicroUsd;

impl SessionView<'_> {
    /// The growth rule's bar, one test for the arrival and the gap: `Ok` once the reads paid
    /// above a rehydration have bought `rebuild` — or as many rebuilds as the Mind's refreshes
    /// say one is worth — on a prompt longer than the rehydration; else why it waits.
    pub(super) fn growth_bar(&self, rebuild: MicroUsd) -> Result<(), Reason> {
        if self.read_excess < rebuild || self.prefix_tokens <= self.rehydrated() {
            Err(Reason::Warm)
        } else if self.read_excess < self.learned.refresh_break_even(rebuild) {
            Err(Reason::RefreshesDidNotPayBack)
        } else {
            Ok(())
        }
    }

    /// Whether, as the tail is about to expire, the growth rule's refresh is due and the gap
    /// should begin it: the last answer awaits no tool results (the wake will be a boundary),
    /// the minimum segment is reached, the backend can flush while idle (if a refresh needs a
    /// flush), and the growth rule's bar is reached (`SessionView::growth_bar`).
    pub fn gap_refresh_due(&self, now_ms: i64) -> bool {
        !self.awaiting_tool_results
            && self.segment_requests >= self.bounds.min_segment_requests
            && (self.can.idle_flush || !self.needs_flush())
            && self.growth_bar(self.growth_rebuild(now_ms)).is_ok()
    }
}
