//! Resuming a session: only through a handle that verifies, a forked copy, a refused resume
//! seeded from the host's seed; a turn that failed taken back out of the session or kept, as
//! the session file shows.
//!
//! `handles`: which session a start continues; `taken_back`: a refused or timed-out turn put
//! back out of the session, one whose model acted kept; `killed`: a child that died mid-turn;
//! `file_checks`: the session file read under a bound, a fork's checked at its end.

use super::*;

mod file_checks;
mod handles;
mod killed;
mod taken_back;

/// The user lines of the CLI's own session file that carry `text`.
fn stored_user_lines_with(config: &CliConfig, session: &str, text: &str) -> usize {
    let Some(path) = transcript_path(config, session) else {
        return 0;
    };
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == json!("user") && v["message"].to_string().contains(text))
        .count()
}

/// A fault that lets one request through as usual: queued ahead of another, it makes that one
/// hit the request after (a tool loop's second).
fn pass_one() -> Fault {
    Fault {
        kind: FaultKind::InflateUsage {
            cache_read_tokens: 0,
        },
        times: 1,
    }
}

/// A request held on the API for a minute (the kill comes first).
fn hung() -> Fault {
    Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 60_000,
            event_ms: 0,
        },
        times: 1,
    }
}
