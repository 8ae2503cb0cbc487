//! Fuzzing the stream-json decoder (`muninn_testkit::fuzz`, seeds in
//! `fuzz/corpus/cli-stream-json/`: stdout lines of the real CLI 2.1.332 from
//! `reference/claude-cli-2.1.332-samples`).
//!
//! Properties, for every line: decoding never panics; a line that is JSON always decodes (an
//! unknown or malformed event is kept as `Unknown`, never fatal) and a line that is not JSON
//! never does; an `Unknown` event holds the line's value verbatim; a `result` line's usage —
//! per turn and per model — parses into numbers the ledger can add up.

use muninn_claude_cli::event::{CliEvent, decode};
use muninn_claude_cli::{parse_model_usage, parse_usage};
use muninn_testkit::fuzz::{FuzzConfig, Verdict, corpus_dir, fuzz, load_corpus};
use serde_json::Value;

fn check_line(line: &str) -> Result<bool, String> {
    let json: Option<Value> = serde_json::from_str(line).ok();
    let event = decode(line);
    match (&json, &event) {
        (None, None) => return Ok(false),
        (Some(_), None) => return Err(format!("a JSON line was dropped: {line:?}")),
        (None, Some(e)) => return Err(format!("a line that is not JSON decoded to {e:?}")),
        (Some(_), Some(_)) => {}
    }
    match event {
        Some(CliEvent::Unknown(value)) if Some(&value) != json.as_ref() => Err(format!(
            "an unknown event changed the line: {value} vs {line:?}"
        )),
        Some(CliEvent::Result(result)) => {
            let _ = result.text();
            for requested_1h in [false, true] {
                let mut turn = parse_usage(&result.usage, requested_1h);
                if let Some(models) = &result.model_usage_since_last_result {
                    let all = parse_model_usage(models, requested_1h);
                    // As the driver does: the turn's usage, plus the compaction's.
                    turn.add(&all);
                }
                let _ = (turn.prompt(), turn.written());
            }
            Ok(true)
        }
        _ => Ok(true),
    }
}

/// Every line of the input, as the driver reads the child's stdout (split at `\n`, a trailing
/// `\r` dropped, invalid UTF-8 replaced).
fn check_stdout(input: &[u8]) -> Result<Verdict, String> {
    let mut decoded = false;
    for line in input.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        decoded |= check_line(&String::from_utf8_lossy(line))?;
    }
    Ok(if decoded {
        Verdict::Accepted
    } else {
        Verdict::Refused
    })
}

#[test]
fn stream_json_decoding_survives_mutated_stdout() {
    let seeds = load_corpus(&corpus_dir("cli-stream-json"));
    let dictionary: &[&[u8]] = &[
        b"\"type\":\"result\"",
        b"\"type\":\"system\",\"subtype\":\"init\"",
        b"\"subtype\":\"api_retry\"",
        b"\"subtype\":\"compact_boundary\"",
        b"\"type\":\"assistant\"",
        b"\"is_error\":true",
        b"\"usage\":{\"input_tokens\":18446744073709551615,\"cache_read_input_tokens\":18446744073709551615}",
        b"\"model_usage_since_last_result\":{\"a\":{\"inputTokens\":18446744073709551615},\"b\":{\"inputTokens\":1}}",
        b"\"cacheCreationEphemeral5mInputTokens\":18446744073709551615",
        b"\"api_error_status\":70000",
    ];
    let report = fuzz(
        "cli-stream-json",
        &seeds,
        dictionary,
        &FuzzConfig::from_env(64 * 1024),
        check_stdout,
    );
    assert!(report.accepted > 0, "{report}");
}
