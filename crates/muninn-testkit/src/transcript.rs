//! Writing transcript fixtures: what the tests and benchmarks that build Claude Code session
//! files and Messages API logs need in common.

/// Unix ms as Claude Code's `timestamp` (`YYYY-MM-DDTHH:MM:SS.mmmZ`), by Howard Hinnant's
/// civil-from-days (no date crate needed for a fixture).
pub fn timestamp(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// One Messages API log line (`{timestamp, request, response}`, no newline) of about
/// `target` bytes: a long tool-using conversation of short blocks (a text and a `tool_use` per
/// answer, a 200-byte `tool_result` per turn), the shape whose decoding costs most per byte,
/// answered once.
pub fn api_log_line(target: usize) -> String {
    let result = "x".repeat(200);
    let mut messages = String::from(r#"{"role":"user","content":"Please fix the failing test."}"#);
    let mut i = 0u64;
    while messages.len() < target {
        messages.push_str(&format!(
            r#",{{"role":"assistant","content":[{{"type":"text","text":"Step {i}: running the check."}},{{"type":"tool_use","id":"toolu_{i}","name":"Bash","input":{{"command":"cargo test {i}","timeout":120}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{i}","content":[{{"type":"text","text":"{result}"}}]}}]}}"#
        ));
        i += 1;
    }
    format!(
        r#"{{"timestamp":"2026-02-10T10:00:00Z","request":{{"model":"claude-sonnet-4-5","max_tokens":8000,"system":[{{"type":"text","text":"You are a coding agent.","cache_control":{{"type":"ephemeral"}}}}],"tools":[{{"name":"Bash","description":"Run a command","input_schema":{{"type":"object"}}}}],"messages":[{messages}],"metadata":{{"user_id":"session-1"}}}},"response":{{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"done"}}],"usage":{{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":5}}}}}}"#
    )
}
