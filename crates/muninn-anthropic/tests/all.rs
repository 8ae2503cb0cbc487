//! The integration tests of muninn-anthropic, in one binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod answered;
mod client;
mod context;
mod edits;
mod fuzz;
mod pending;
mod prompt;
mod scripted;
mod sse;
mod wire;
