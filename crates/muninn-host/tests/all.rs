//! muninn-host's one integration-test binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bounds;
mod browser;
mod closed_loop;
mod cluster;
mod compact;
mod config;
mod dashboard;
mod fuzz;
mod http;
mod limits;
mod reply;
mod resume;
mod retry;
mod round_trips;
mod runtime;
mod scripted;
mod self_flush;
mod telemetry;
mod tool_loop;
mod wake;
mod window;
