//! muninn-host's one integration-test binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod between_turns;
mod bounds;
mod browser;
mod cli_turn;
mod cli_world;
mod closed_loop;
mod cluster;
mod compact;
mod config;
mod cut_rows;
mod dashboard;
mod exactly_once;
mod exactly_once_self;
mod fuzz;
mod http;
mod limits;
mod lost_answers;
mod pg_faults;
mod reply;
mod resume;
mod retry;
mod round_trips;
mod runtime;
mod scripted;
mod self_flush;
mod spend;
mod supervise;
mod telemetry;
mod tool_loop;
mod uncommitted;
mod wake;
mod window;
