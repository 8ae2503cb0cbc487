//! The integration tests of muninn-sim, in one binary: the API as a client sees it, the
//! Anthropic backend end to end against it, the backend behaviour suite, and the real peers
//! (the official Python SDK, the real Claude Code CLI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod bounds;
mod ctxtools;
mod diagnostics;
mod e2e;
mod order;
mod peers;
mod suite;
mod support;
mod threshold;
