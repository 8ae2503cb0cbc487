//! Bad input the fuzzers do not reach: a byte-order mark, numbers past any real request (token
//! counts, times, a turn's duration) in every format that carries them, and what `check-cache`
//! and `replay` then do with the rest. Each case was found by review (2026-12) and failed before
//! its fix: a panic in a debug build (an overflow) or a silently wrapped figure in a release one.

use super::*;
use pretty_assertions::assert_eq;

/// `text` written to `name` in a temporary directory, imported.
fn import_text(name: &str, text: &[u8]) -> Import {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    import(&[path])
}

/// A Claude Code assistant line (one block) of response `n` at `seconds`, with this usage.
fn claude_response(n: u32, seconds: i64, usage: &str) -> String {
    format!(
        r#"{{"type":"assistant","sessionId":"s","uuid":"a{n}","timestamp":"2026-02-10T10:00:{seconds:02}.000Z","message":{{"model":"claude-opus-4-6","id":"msg_{n}","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
    )
}

/// A file saved by an editor that writes a UTF-8 byte-order mark: the mark is not part of the
/// first line's JSON. The first line was refused as malformed, and with it the request it held.
#[test]
fn a_byte_order_mark_loses_no_line() {
    let plain = claude_response(1, 1, r#"{"input_tokens":3,"output_tokens":5}"#) + "\n";
    let marked = [b"\xef\xbb\xbf".as_slice(), plain.as_bytes()].concat();
    let (plain, marked) = (
        import_text("s.jsonl", plain.as_bytes()),
        import_text("s.jsonl", &marked),
    );
    assert_eq!(marked.warnings, vec![]);
    assert_eq!(marked.stats.requests, 1);
    let at = |i: &Import| i.traces[0].requests.clone();
    assert_eq!(at(&marked), at(&plain));
}
