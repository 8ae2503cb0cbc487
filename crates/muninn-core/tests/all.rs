//! muninn-core's one integration-test binary (one binary per crate: far less linking on 2 cores).

mod cache;
mod replay;
mod validate;
