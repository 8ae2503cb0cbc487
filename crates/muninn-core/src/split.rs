//! The fixed split of sessions into a part the models are tuned on and a part set aside.
//!
//! A figure measured on the data a model was tuned on says how well it was fitted, not how well
//! it predicts. So every session is assigned, by a rule fixed before tuning and never changed,
//! to one of two [`Part`]s, and `muninn check-cache` reports both side by side: agreement on the
//! set-aside part is the one that says something about data nobody looked at while tuning.
//!
//! # The rule
//!
//! A session is set aside when the lowest bit of [`crate::cache::hash_bytes`] of its id is 0,
//! else it belongs to the tuning part. The unit is the session, not the request or the thread:
//! a session's main thread, sub-agents and compaction agent share cache entries, so splitting
//! them would leak one part's cache state into the other's predictions.
//!
//! The rule was written down (and committed) before the cache models were tuned against the
//! part it names *tuning*. It is a hash, not a list, so it splits any trace set the same way
//! (another user's `~/.claude/projects`, a folder of Codex rollouts) without a file to keep.
//! On `../shared/traces/claude-code` the cache model had already been tuned on every session
//! before the rule existed, so there the set-aside part is set aside only from the tuning done
//! since; on Codex rollouts it is set aside from all of it.
//!
//! This module is pure.

use crate::cache::hash_bytes;
use serde::{Deserialize, Serialize};

/// Which part of the data a session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The sessions the cache models may be tuned on.
    Tuning,
    /// The sessions set aside: looked at only to report the figures.
    SetAside,
}

impl Part {
    /// `tuning` or `set aside`.
    pub const fn label(self) -> &'static str {
        match self {
            Part::Tuning => "tuning",
            Part::SetAside => "set aside",
        }
    }
}

/// The part `session` (a session id as the trace carries it) belongs to.
pub fn part_of(session: &str) -> Part {
    if hash_bytes(session.as_bytes()) & 1 == 1 {
        Part::Tuning
    } else {
        Part::SetAside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the rule on the sessions of `../shared/traces/claude-code` and of the six public
    /// Codex rollouts docs/validation.md measures: a change to the hash or the rule would
    /// silently move sessions between the parts.
    #[test]
    fn the_measured_sessions_split_as_recorded() {
        let tuning = [
            "019c8a53-a0dd-7130-bcd7-95445d84846a",
            "019c8a59-e9dd-71f0-9ae3-4079fe9726a9",
            "019c8bfe-ec25-79e0-97d7-bda6a9c575ff",
            "4d5611e5-241a-462a-8d15-5122611a9569",
            "8463c716-a2ea-4c14-9efa-87158ebd9f20",
            "ae4a77f8-aedd-4bc1-888f-c94edc91af04",
            "491e126e-1e71-469c-ade2-fcc8af567c74",
            "d6e0bada-1959-4eec-a9d2-0bfade768d8f",
        ];
        let set_aside = [
            "019c8a4c-ed82-79a1-aa28-7738fc5ab61a",
            "019c8a4d-8f45-7010-8b5d-7fad920aa6f9",
            "019c8a70-dda7-7f33-98ea-f30553347322",
            "258c7280-ae70-4798-800f-63464d01a85d",
            "6c2214d7-b87e-4432-8e41-22ba294ea584",
            "fa812bfe-b295-4cca-9c2f-fdf01028cb46",
            "55604662-cf2a-4331-851a-ec234028f8ca",
        ];
        for s in tuning {
            assert_eq!(part_of(s), Part::Tuning, "{s}");
        }
        for s in set_aside {
            assert_eq!(part_of(s), Part::SetAside, "{s}");
        }
    }
}
