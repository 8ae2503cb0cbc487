//! Conversations interleaved in one thread, told apart by what the source records of them.
//!
//! The replay engine models a thread as one conversation that grows request by request. A
//! thread can hold two at once: Claude Code does not lock a session (`reference/prior-art.md`),
//! so a session resumed in two terminals writes two conversations into one file, under one
//! session id and thread, their requests alternating in time. Read as one, each switch from the
//! shorter conversation to the longer one looks like tens of thousands of new tokens, which the
//! replay writes and then carries in every later prompt — under every plan alike, `never` and the
//! optimum included. On the tuning part of `claude_backup` one such session (versions 2.1.225 and
//! 2.1.226 side by side) replayed under `never` at 1.63× what it was billed.
//!
//! The source says which conversation each request continues
//! ([`crate::trace::TraceRequest::conversation`]: the Claude Code importer follows the
//! transcript's `parentUuid` links). A conversation that forked from another is kept apart only
//! if the one it left goes on after the fork began — two conversations alive at once. A fork
//! whose origin never continues is one conversation that went back (a rewind) and stays in line
//! as before: the replay's shrink rule ([`super::reconstruct`]) prices it as it always did.
//!
//! Pure.

use crate::trace::Trace;
use std::collections::HashMap;

/// The request indices of each conversation alive at once in `trace`, each in time order; one
/// branch holding every request when nothing shows two at once (none for an empty trace).
///
/// Linear in the requests (and the merges below in the branches), however many conversations a
/// long session forks: a rewind or a retried answer forks one each time.
pub fn branches(trace: &Trace) -> Vec<Vec<usize>> {
    let mut branches: Vec<Vec<usize>> = Vec::new();
    // Per conversation id, its branch; per branch, the branch it forked from: the one the
    // source names, else the one active when it began.
    let mut of: HashMap<u64, usize> = HashMap::new();
    let mut left: Vec<Option<usize>> = Vec::new();
    let mut previous: Option<usize> = None;
    for (j, r) in trace.requests.iter().enumerate() {
        let origin = r.forked_from.and_then(|c| of.get(&c).copied()).or(previous);
        let b = *of.entry(r.conversation).or_insert_with(|| {
            left.push(origin);
            branches.push(Vec::new());
            branches.len() - 1
        });
        branches[b].push(j);
        previous = Some(b);
    }
    merge_rewinds(branches, &left)
}

/// Folds back each fork whose origin branch has no request after the fork began: one
/// conversation that went back, not two alive at once. Latest forks first, so that a chain of
/// rewinds folds into the branch it started from (a fork's origin began before it, so it has
/// not been folded away when the fork is judged). Every branch stays in time order: whether
/// the origin goes on is its last request's index, and a fork it does not outlive follows it.
fn merge_rewinds(mut branches: Vec<Vec<usize>>, left: &[Option<usize>]) -> Vec<Vec<usize>> {
    for b in (0..branches.len()).rev() {
        let Some(origin) = left[b] else { continue };
        let start = branches[b].first().copied().unwrap_or(0);
        let alive_after = branches[origin].last().is_some_and(|&k| k > start);
        if !alive_after {
            let moved = std::mem::take(&mut branches[b]);
            branches[origin].extend(moved);
        }
    }
    branches.retain(|b| !b.is_empty());
    branches
}
