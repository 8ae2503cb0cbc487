//! muninn-core's one integration-test binary (one binary per crate: far less linking on 2 cores).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod growth;
mod learn;
mod mask;
mod optimum_mask;
mod price;
mod render;
mod replay;
mod validate;

use muninn_core::money::Tokens;
use muninn_core::trace::Usage;

/// A request of a `prompt`-token prompt that read `read` from cache and wrote the rest at 5m, all
/// but 3 uncached tokens, with 200 output: the warm append the test traces are built of.
fn appended(prompt: Tokens, read: Tokens) -> Usage {
    Usage {
        input: 3,
        cache_write_5m: prompt - read - 3,
        cache_read: read,
        output: 200,
        ..Usage::default()
    }
}
