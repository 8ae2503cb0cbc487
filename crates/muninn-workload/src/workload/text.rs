//! Word-like text of an exact token count under [`muninn_core::tokenize::count`], from which every
//! generated message, reply and layer is made.

use crate::synth::SplitMix64;
use muninn_core::money::Tokens;
use muninn_core::tokenize::count;

// Words of the generated text, chosen so that English-like text averages under four bytes per
// token (the doctrine must fit its 96 KiB in 25,000 tokens): short words, identifiers with
// underscores, markdown and punctuation.
const WORDS: &[&str] = &[
    "the",
    "a",
    "to",
    "of",
    "and",
    "is",
    "in",
    "it",
    "you",
    "we",
    "on",
    "for",
    "not",
    "be",
    "at",
    "as",
    "or",
    "if",
    "when",
    "that",
    "this",
    "with",
    "room",
    "run",
    "self",
    "mind",
    "note",
    "ask",
    "keep",
    "cost",
    "cache",
    "turn",
    "reply",
    "brief",
    "repo",
    "task",
    "plan",
    "done",
    "open",
    "close",
    "fix",
    "test",
    "build",
    "doctrine",
    "persona",
    "campaign",
    "operator",
    "message",
    "budget",
    "session",
    "context",
    "answer",
    "because",
    "never",
    "always",
    "before",
    "after",
    "start_self_run",
    "persona_put",
    "say[]",
    "remember[]",
    "e.g.",
    "i.e.",
    "(see",
    "below)",
    "-",
    "**",
    "`x`",
    "1.",
    "2.",
    "3.",
    "—",
    ":",
    "12",
    "300",
    "4.5",
];

/// Exactly `tokens` tokens of word-like text (no leading or trailing whitespace).
pub fn words(rng: &mut SplitMix64, tokens: Tokens) -> String {
    let mut out = String::new();
    let mut left = tokens;
    let fill = ["a", "to", "it", "we", "on", "-", ":"];
    while left > 0 {
        let w = WORDS[rng.range(&(0..=WORDS.len() as u64 - 1)) as usize];
        let c = count(w);
        let (w, c) = if c <= left && c > 0 {
            (w, c)
        } else {
            (fill[rng.range(&(0..=fill.len() as u64 - 1)) as usize], 1)
        };
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
        left -= c;
    }
    out
}

pub(super) fn chance(rng: &mut SplitMix64, pct: u64) -> bool {
    rng.range(&(0..=99)) < pct
}
