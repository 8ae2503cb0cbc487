//! How a client rewrites a person's new turn, learned from the reads of the turns before it:
//! some drop the finished turn's thinking ([`ThinkingDrop`]), some re-send the turn from where
//! the previous one began ([`TurnRestarts`]). Both are followed by the parent module's
//! `conversation`, which continues such a turn from the point in a new segment.

use crate::money::Tokens;

/// Drops seen in a row before the next turn is predicted with the thinking dropped. One is not
/// enough: on the tuning part of `claude_backup` a single request read exactly such a point
/// because the person had interrupted the previous answer (which Claude Code then drops), and the
/// turns after it kept their thinking.
pub(super) const DROPS_BEFORE_PREDICTING: u32 = 2;

/// A client that drops a finished turn's thinking when the person writes again.
///
/// Some Claude Code sessions (the desktop app and the VS Code extension on `LAF-US/IDAHO-VAULT`,
/// 2.1.86 and 2.1.92, seen on the tuning part only) send a new turn's first request without the
/// thinking blocks of the turn before it, for stretches of a session: the prompt then diverges at
/// the previous turn's first thinking block, and the request reads exactly the cached end of the
/// request whose answer held it. Other stretches of the same sessions, and other users, keep the
/// thinking (the prompt grows append-only). Nothing in a transcript line says which is in force, so
/// the group learns it from what it has seen: turn-opening requests that read exactly that point
/// ([`DROPS_BEFORE_PREDICTING`] in a row) switch the drop on for the turns that follow; one that
/// read the whole previous prefix switches it off. Strictly causal: the flag and the point come
/// from earlier answers only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ThinkingDrop {
    /// The request's read says the client dropped the thinking.
    Dropped,
    /// The request's read says the client kept it.
    Kept,
}

impl ThinkingDrop {
    /// What a turn-opening request's recorded read says, given where the previous turn's thinking
    /// began (`at`) and where the previous request's prompt ended (`previous`).
    pub(super) fn observed(
        recorded: Tokens,
        at: Tokens,
        previous: Tokens,
        tolerance: Tokens,
    ) -> Option<Self> {
        if recorded.abs_diff(at) <= tolerance {
            Some(ThinkingDrop::Dropped)
        } else if recorded + tolerance >= previous {
            Some(ThinkingDrop::Kept)
        } else {
            None
        }
    }
}

/// How far from where the previous turn began a turn opening may read and still count as a
/// restart ([`TurnRestarts`]): a person's message and the answer before it are a few hundred
/// tokens, and on `bradymholt/dotfiles`' tuning part such reads fell 690 tokens before to 618
/// after that point.
const RESTART_BAND: Tokens = 1024;

/// Clients that send a new turn with the previous turn's opening rewritten, learned per model.
///
/// On `bradymholt/dotfiles`' tuning part (Claude Code 2.0.2; Sonnet 4.5, Opus 4.1, Opus 4.5),
/// 13 of 18 turn openings inside the TTL where the model expected the whole prefix read less,
/// 11 of them within `RESTART_BAND` of where the previous turn began (the cached end of the
/// request before the previous turn's first one): the prompt was the same up to about there and
/// new after it, as if the client re-sent the previous person's message changed (many carried
/// `<ide_opened_file>` or `<ide_selection>` blocks). On the nine other users' tuning parts such
/// reads are rare (3 on `IDAHO-VAULT`, none elsewhere, against hundreds of openings that read
/// the whole prefix). Nothing in a line says which a client does, so the model counts, per model
/// and thread group kind, the turn openings that read back to where the previous turn began and
/// those that read the whole prefix; while the first lead, and the model's cache still holds
/// that point live, the next opening continues from it (a new segment after it). Causal: the
/// counts come from earlier answers only (docs/validation.md, "Looked at an eighth time").
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TurnRestarts {
    restarted: u32,
    kept: u32,
}

impl TurnRestarts {
    pub(super) fn lead(&self) -> bool {
        self.restarted > self.kept
    }

    /// What a turn opening's recorded read says, given where the previous turn began (`at`)
    /// and where the previous request's prompt ended (`previous`).
    pub(super) fn observe(
        &mut self,
        recorded: Tokens,
        at: Tokens,
        previous: Tokens,
        tolerance: Tokens,
    ) {
        if recorded + tolerance >= previous {
            self.kept = self.kept.saturating_add(1);
        } else if recorded.abs_diff(at) <= RESTART_BAND {
            self.restarted = self.restarted.saturating_add(1);
        }
    }
}
