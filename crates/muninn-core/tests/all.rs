//! muninn-core's one integration-test binary (one binary per crate: far less linking on 2 cores).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod growth;
mod learn;
mod mask;
mod optimum_mask;
mod render;
mod replay;
mod validate;
