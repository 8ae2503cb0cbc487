//! Which conversation of a thread each Claude Code request continues, from the transcript's
//! `parentUuid` links.
//!
//! Every line of a transcript carries a `uuid` and the `parentUuid` of the line before it in its
//! conversation (`logicalParentUuid` across a compaction boundary, whose `parentUuid` is null).
//! Claude Code does not lock a session, so a session resumed in two terminals appends two
//! conversations to one file; a rewind (a person going back to an earlier message) forks one
//! too. Following a response's links back to the previous response of its thread says which
//! conversation it extends: the one whose latest request that is, or — when that request was
//! followed already — a new one forked from it ([`muninn_core::trace::TraceRequest::conversation`]).
//!
//! State is per file, as the links are: a conversation continued in a later file (a resumed
//! session) starts there from the thread's first conversation, as before this existed.
//!
//! A corrupt file can link lines in a cycle. A walk back stops at the first line it passes
//! twice — each line remembers the last walk that passed it — rather than going round the cycle
//! up to [`MAX_LINKS`] times for every request that reaches it; the request then continues the
//! thread's latest conversation, as one that found no earlier request does, and the file gets
//! one warning ([`Conversations::new_cycle`]).

use muninn_core::cache::IdentityHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// A map keyed by a hash: the keys are hashes already (of uuids and message ids, by
/// [`crate::claude::id_hash`]), not hashed again.
type ByHash<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// How far back a response's links are followed before giving up (a chain through copied
/// history): the request then continues the thread's latest conversation.
const MAX_LINKS: usize = 100_000;

/// One line's place in the conversation tree.
#[derive(Debug, Clone, Copy)]
struct Link {
    /// The line before it (by hash of its uuid), if any.
    parent: Option<u64>,
    /// The response it is a line of (by hash of its `message.id`), for assistant lines.
    response: Option<u64>,
    /// The last walk back that passed this line (0: none): met again in the same walk, the
    /// walk has gone round a cycle.
    walk: u64,
}

/// The conversations of one thread so far.
#[derive(Debug, Default)]
struct Thread {
    /// Each request's conversation, by hash of its response's id.
    of: ByHash<u64>,
    /// Each conversation's latest request.
    tip: ByHash<u64>,
    /// The conversation of the thread's latest request.
    latest: u64,
    /// Forks whose opening request was refused (past the limits), by conversation: the
    /// conversation each forked from, for the fork's next request to carry instead.
    unclaimed_forks: ByHash<u64>,
}

/// The conversation tree of one file.
#[derive(Debug, Default)]
pub(crate) struct Conversations {
    links: ByHash<Link>,
    threads: ByHash<Thread>,
    /// The number of the latest walk back (the first is 1).
    walks: u64,
    /// A walk back has met a cycle of links.
    cycle_met: bool,
    /// [`Conversations::new_cycle`] has said so.
    cycle_reported: bool,
}

impl Conversations {
    /// Records a line (`uuid`, `parent`: hashes) and, for an assistant line, its response.
    pub(crate) fn link(&mut self, uuid: u64, parent: Option<u64>, response: Option<u64>) {
        self.links.insert(
            uuid,
            Link {
                parent,
                response,
                walk: 0,
            },
        );
    }

    /// Whether a walk back has met a cycle of links that was not reported yet: true once per
    /// file, for its one warning.
    pub(crate) fn new_cycle(&mut self) -> bool {
        let new = self.cycle_met && !self.cycle_reported;
        self.cycle_reported |= new;
        new
    }

    /// The conversation of a new request of `thread` (by its thread hash): its response
    /// (`response`, the hash of its id) is the line `uuid`. 0 is the thread's first. With it,
    /// for a fork's first request, the conversation it forked from.
    pub(crate) fn request(
        &mut self,
        thread: u64,
        uuid: Option<u64>,
        response: u64,
    ) -> (u64, Option<u64>) {
        let previous = uuid.and_then(|u| self.previous_request(thread, u, response));
        let state = self.threads.entry(thread).or_default();
        let (conversation, forked_from) =
            match previous.and_then(|p| state.of.get(&p).map(|&c| (p, c))) {
                Some((p, c)) if state.tip.get(&c) == Some(&p) => (c, None),
                // Its previous request was followed already: a fork, named by its first
                // response (never 0, which is the thread's first conversation).
                Some((_, c)) => (response.max(1), Some(c)),
                // No earlier request of this thread on its links (its first, or one whose links
                // lead into history this file copied): the thread's latest conversation.
                None => (state.latest, None),
            };
        state.of.insert(response, conversation);
        // A response without a uuid is placed by a guess and no later line can link to it: it
        // does not become its conversation's tip, or the next request that follows the tip it
        // hid would read as a fork.
        if uuid.is_some() {
            state.tip.insert(conversation, response);
        }
        state.latest = conversation;
        // A fork whose opening request was refused: its next request is the first the trace
        // holds, so it names the origin, or the cache model would read the fork as a new thread.
        let forked_from = forked_from.or_else(|| state.unclaimed_forks.remove(&conversation));
        (conversation, forked_from)
    }

    /// The request of `thread` that [`Conversations::request`] placed in `conversation`, with
    /// `forked_from`, was refused: the fork it opened, if it opened one, passes to the next
    /// request of the conversation.
    pub(crate) fn refused(&mut self, thread: u64, conversation: u64, forked_from: Option<u64>) {
        if let (Some(origin), Some(state)) = (forked_from, self.threads.get_mut(&thread)) {
            state.unclaimed_forks.insert(conversation, origin);
        }
    }

    /// The nearest response before line `uuid` on its links that is a request of `thread`
    /// (responses of other threads, placeholders and copies are passed over). `None` also where
    /// the links go round a cycle before reaching one (noted for [`Conversations::new_cycle`]).
    fn previous_request(&mut self, thread: u64, uuid: u64, response: u64) -> Option<u64> {
        let known = self.threads.get(&thread)?;
        // One walk per request: a u64 count does not wrap.
        self.walks += 1;
        let walk = self.walks;
        let start = self.links.get_mut(&uuid)?;
        start.walk = walk;
        let mut at = start.parent;
        for _ in 0..MAX_LINKS {
            let link = self.links.get_mut(&at?)?;
            if link.walk == walk {
                self.cycle_met = true;
                return None;
            }
            link.walk = walk;
            if let Some(r) = link.response
                && r != response
                && known.of.contains_key(&r)
            {
                return Some(r);
            }
            at = link.parent;
        }
        None
    }
}
