//! Ceilings on the configuration's numbers, checked at load beside the floors in
//! [`Config::validate`](super::Config::validate).
//!
//! A number far past anything meaningful is a typo or an overflow waiting to happen: seconds
//! multiplied into milliseconds, tokens summed into a prompt, a `u64` handed to an `i64` column.
//! Each ceiling here is generous for real use and small enough that the arithmetic done with
//! the value downstream cannot wrap; over it, the load fails naming the field and the ceiling.

use super::{Config, MindConfig, SelfSessionConfig};
use muninn_api::limits::{MAX_SPEND_CAP_MICRO_USD, MAX_SPEND_WINDOW_MS, MAX_TURNS_PER_WAKE};
use std::path::Path;

/// The largest token count anywhere in the configuration (ceilings, memory, headroom): ten
/// times the largest context window on sale.
pub const MAX_TOKENS: u64 = 10_000_000;
/// The largest reply, tokens.
pub const MAX_OUTPUT_TOKENS: u64 = 1_000_000;
/// The longest lease, ms: a dead host's Minds wait this long for another host.
pub const MAX_LEASE_TTL_MS: i64 = 3_600_000;
/// The longest of the flush's and the pool's waits, seconds (a day).
pub const MAX_WAIT_S: u64 = 86_400;
/// The most turns a segment holds before a voluntary refresh.
pub const MAX_MIN_SEGMENT: u32 = 100_000;
/// The most requests one brief's tool loop may be allowed (`self_session.max_requests`).
pub const MAX_RUN_REQUESTS: u32 = 10_000;
/// The most live CLI children.
pub const MAX_PROCESSES: u32 = 1_024;
/// The largest memory figure, MiB (1 TiB).
pub const MAX_MIB: u64 = 1 << 20;

/// The largest file the configuration is read from or names: `muninn.toml`, a doctrine file,
/// a persona state file, the price table (1 MiB). A doctrine that size is some 250,000 tokens,
/// more than a context window holds.
pub const CONFIG_FILE_MAX_BYTES: u64 = 1 << 20;

/// The text of `path`, a file of the configuration, read up to [`CONFIG_FILE_MAX_BYTES`] (one
/// byte more says it is larger). A path pointing at a log, a dump or a device used to be read
/// whole into memory — at load, and a doctrine and a persona state again at every turn —
/// and the doctrine then went into every request; now it is an error naming the file and
/// the limit (at load, the field; at a turn, the Mind `retrying` with it). Only a regular
/// file is read, opened without blocking ([`muninn_fs::open_regular`]): a named pipe there
/// was waited on for a writer, for ever, hanging the load or the turn.
pub fn read_config_file(path: &Path) -> std::io::Result<String> {
    muninn_fs::read_text_limited(path, CONFIG_FILE_MAX_BYTES, "a configuration file")
}

fn over(bad: &mut impl FnMut(String, String), field: String, value: u64, limit: u64) {
    if value > limit {
        bad(field, format!("{value} is over the ceiling of {limit}"));
    }
}

/// Reports every number above its ceiling through `bad(field, message)`.
pub(super) fn check(config: &Config, bad: &mut impl FnMut(String, String)) {
    over(
        bad,
        "lease_ttl_ms".into(),
        config.lease_ttl_ms.unsigned_abs(),
        MAX_LEASE_TTL_MS.unsigned_abs(),
    );
    check_self_session(&config.backend.self_session, "backend.self_session", bad);
    let pool = &config.backend.pool;
    let at = |f: &str| format!("backend.pool.{f}");
    over(
        bad,
        at("max_processes"),
        pool.max_processes.into(),
        MAX_PROCESSES.into(),
    );
    over(
        bad,
        at("memory_budget_mib"),
        pool.memory_budget_mib,
        MAX_MIB,
    );
    over(bad, at("per_process_mib"), pool.per_process_mib, MAX_MIB);
    over(bad, at("park_min_idle_s"), pool.park_min_idle_s, MAX_WAIT_S);
    if let Some(s) = config.backend.attempt_timeout_s {
        over(bad, "backend.attempt_timeout_s".into(), s, MAX_WAIT_S);
    }
    over(bad, at("park_horizon_s"), pool.park_horizon_s, MAX_WAIT_S);
    for (i, mind) in config.minds.iter().enumerate() {
        check_mind(mind, &format!("mind[{i}]"), bad);
    }
}

fn check_mind(mind: &MindConfig, at: &str, bad: &mut impl FnMut(String, String)) {
    let field = |f: &str| format!("{at}.{f}");
    over(
        bad,
        field("min_segment"),
        mind.min_segment.into(),
        MAX_MIN_SEGMENT.into(),
    );
    if let Some(ceiling) = mind.ceiling_tokens {
        over(bad, field("ceiling_tokens"), ceiling, MAX_TOKENS);
    }
    over(bad, field("memory_tokens"), mind.memory_tokens, MAX_TOKENS);
    if let Some(cap) = mind.spend_cap_micro_usd {
        over(
            bad,
            field("spend_cap_micro_usd"),
            cap.unsigned_abs(),
            MAX_SPEND_CAP_MICRO_USD.unsigned_abs(),
        );
    }
    over(
        bad,
        field("spend_window_s"),
        mind.spend_window_s,
        MAX_SPEND_WINDOW_MS.unsigned_abs() / 1000,
    );
    over(
        bad,
        field("turns_per_wake"),
        mind.turns_per_wake.into(),
        MAX_TURNS_PER_WAKE.unsigned_abs(),
    );
    over(
        bad,
        field("max_output_tokens"),
        mind.max_output_tokens,
        MAX_OUTPUT_TOKENS,
    );
    check_self_session(&mind.self_session, &field("self_session"), bad);
}

fn check_self_session(s: &SelfSessionConfig, at: &str, bad: &mut impl FnMut(String, String)) {
    let field = |f: &str| format!("{at}.{f}");
    if let Some(budget) = s.brief_budget_micro_usd {
        over(
            bad,
            field("brief_budget_micro_usd"),
            budget.unsigned_abs(),
            MAX_SPEND_CAP_MICRO_USD.unsigned_abs(),
        );
    }
    if let Some(requests) = s.max_requests {
        over(
            bad,
            field("max_requests"),
            requests.into(),
            MAX_RUN_REQUESTS.into(),
        );
    }
    let waits = [
        ("flush_headroom_tokens", s.flush_headroom_tokens, MAX_TOKENS),
        ("flush_grace_s", s.flush_grace_s, MAX_WAIT_S),
        (
            "flush_escalate_after_s",
            s.flush_escalate_after_s,
            MAX_WAIT_S,
        ),
        (
            "flush_exit_drain_ms",
            s.flush_exit_drain_ms,
            MAX_WAIT_S * 1000,
        ),
    ];
    for (name, value, limit) in waits {
        if let Some(value) = value {
            over(bad, field(name), value, limit);
        }
    }
}
