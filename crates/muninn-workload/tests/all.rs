//! muninn-workload's one integration-test binary (one binary per crate: far less linking on 2
//! cores).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod optimum;
mod workload;
