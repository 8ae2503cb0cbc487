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

use muninn_core::cache::IdentityHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// A map keyed by a hash: the keys are hashes already (of uuids and message ids, by
/// [`crate::claude::id_hash`]), not hashed again.
type ByHash<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// How far back a response's links are followed before giving up (a chain through copied
/// history, or a cycle in a corrupt file): the request then continues the thread's latest
/// conversation.
const MAX_LINKS: usize = 100_000;

/// One line's place in the conversation tree.
#[derive(Debug, Clone, Copy)]
struct Link {
    /// The line before it (by hash of its uuid), if any.
    parent: Option<u64>,
    /// The response it is a line of (by hash of its `message.id`), for assistant lines.
    response: Option<u64>,
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
}

/// The conversation tree of one file.
#[derive(Debug, Default)]
pub(crate) struct Conversations {
    links: ByHash<Link>,
    threads: ByHash<Thread>,
}

impl Conversations {
    /// Records a line (`uuid`, `parent`: hashes) and, for an assistant line, its response.
    pub(crate) fn link(&mut self, uuid: u64, parent: Option<u64>, response: Option<u64>) {
        self.links.insert(uuid, Link { parent, response });
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
        (conversation, forked_from)
    }

    /// The nearest response before line `uuid` on its links that is a request of `thread`
    /// (responses of other threads, placeholders and copies are passed over).
    fn previous_request(&self, thread: u64, uuid: u64, response: u64) -> Option<u64> {
        let known = self.threads.get(&thread)?;
        let mut at = self.links.get(&uuid)?.parent;
        for _ in 0..MAX_LINKS {
            let link = self.links.get(&at?)?;
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
