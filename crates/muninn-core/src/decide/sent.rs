//! What the cache model predicts a request will be billed for its prompt, as a usage: the
//! same arithmetic as the decider's prices ([`SessionView::append_cost`],
//! [`SessionView::restart_write`]), split into the tokens read, written at each TTL and sent
//! uncached. The host records it before it sends a request, so that a request whose answer is
//! lost with the process (a `kill -9` between the answer and its commit) can still be ledgered
//! at what it was expected to cost.

use super::SessionView;
use crate::cache::Ttl;
use crate::money::Tokens;
use crate::trace::Usage;

impl SessionView<'_> {
    /// The prompt's usage the cache model predicts for a request adding `delta` tokens at
    /// `now_ms`: a segment's first request (`starts`) writes the rehydration and `delta` from
    /// the head on; an append reads the prefix while it is warm, else rewrites it from the head
    /// on, and writes `delta`. The head is read while it is warm. No output: the cache model
    /// does not predict it.
    pub fn predicted_usage(&self, starts: bool, delta: Tokens, now_ms: i64) -> Usage {
        let mut usage = Usage::default();
        if starts {
            self.write_from_head_into(&mut usage, self.rehydrated() + delta, now_ms);
        } else if self.warm(now_ms) {
            usage.cache_read = self.prefix_tokens;
            add_write(&mut usage, self.ttl, delta);
        } else {
            self.write_from_head_into(&mut usage, self.prefix_tokens + delta, now_ms);
        }
        usage
    }

    /// `SessionView::write_from_head`'s tokens: the head read if warm (else written at its
    /// own TTL), the rest written at the tail's.
    fn write_from_head_into(&self, usage: &mut Usage, tokens: Tokens, now_ms: i64) {
        let head = self.bounds.head_tokens.min(tokens);
        if self.head_warm(now_ms) {
            usage.cache_read += head;
        } else {
            add_write(usage, self.head_ttl, head);
        }
        add_write(usage, self.ttl, tokens - head);
    }
}

fn add_write(usage: &mut Usage, ttl: Ttl, tokens: Tokens) {
    match ttl {
        Ttl::FiveMinutes => usage.cache_write_5m += tokens,
        Ttl::OneHour => usage.cache_write_1h += tokens,
    }
}
