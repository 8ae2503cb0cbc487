//! The SSE decoder: framing rules, and the same events whatever the chunk boundaries.

use muninn_anthropic::sse::{SseDecoder, SseError, SseFrame};
use proptest::prelude::*;

fn frame(event: &str, data: &str) -> SseFrame {
    SseFrame {
        event: Some(event.to_string()),
        data: data.to_string(),
    }
}

fn decode_all(chunks: &[&[u8]]) -> Result<Vec<SseFrame>, SseError> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        out.extend(d.push(c)?);
    }
    d.finish()?;
    Ok(out)
}

#[test]
fn framing_follows_the_rules() {
    let stream = b": comment\nevent: a\ndata: one\ndata:two\n\nevent: b\r\ndata: x\r\n\r\ndata: y\rid: 7\r\r";
    assert_eq!(
        decode_all(&[stream]).unwrap(),
        vec![
            frame("a", "one\ntwo"),
            frame("b", "x"),
            SseFrame {
                event: None,
                data: "y".to_string()
            }
        ]
    );
}

#[test]
fn a_cut_stream_is_an_error() {
    assert_eq!(
        decode_all(&[b"event: a\ndata: {\"type\""]),
        Err(SseError::Truncated { pending: 14 })
    );
    assert!(matches!(
        decode_all(&[b"data: \xff\xfe\n\n"]),
        Err(SseError::NotUtf8 { line: 1 })
    ));
}

fn sample_stream() -> Vec<u8> {
    let mut s = String::new();
    s.push_str("event: message_start\r\ndata: {\"type\":\"message_start\",\"text\":\"héllo — ünïcode ✓\"}\r\n\r\n");
    s.push_str(": keep-alive\n\n");
    for i in 0..5 {
        s.push_str(&format!(
            "event: content_block_delta\ndata: {{\"i\":{i},\"t\":\"ça va? 🐦\"}}\n\n"
        ));
    }
    s.push_str("event: multi\rdata: a\rdata: b\r\r");
    s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

proptest! {
    #[test]
    fn chunk_boundaries_do_not_matter(cuts in proptest::collection::vec(0usize..400, 0..40)) {
        let stream = sample_stream();
        let whole = decode_all(&[&stream]).unwrap();
        prop_assert_eq!(whole.len(), 8);
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut last = 0;
        for p in points {
            chunks.push(&stream[last..p]);
            last = p;
        }
        chunks.push(&stream[last..]);
        prop_assert_eq!(decode_all(&chunks).unwrap(), whole);
    }

    #[test]
    fn byte_at_a_time_equals_whole(extra in "[a-z ]{0,40}") {
        let text = format!("event: e\ndata: {extra}\n\n");
        let bytes = text.as_bytes();
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(decode_all(&singles).unwrap(), decode_all(&[bytes]).unwrap());
    }
}

/// A stream that never ends its line (or piles up data lines without a blank line) is refused
/// once the event passes the limit, instead of being buffered without end; a large but bounded
/// event still decodes.
#[test]
fn an_event_past_the_limit_is_refused() {
    use muninn_anthropic::sse::{MAX_EVENT_BYTES, SseDecoder, SseError};
    let mut d = SseDecoder::new();
    let chunk = vec![b'x'; 1024 * 1024];
    let mut refused = None;
    for i in 0..=(MAX_EVENT_BYTES / chunk.len()) + 1 {
        if let Err(e) = d.push(if i == 0 { b"data: " } else { &chunk }) {
            refused = Some(e);
            break;
        }
    }
    assert_eq!(
        refused,
        Some(SseError::TooLarge {
            limit: MAX_EVENT_BYTES
        })
    );
    // Data lines adding up past the limit, each short.
    let mut d = SseDecoder::new();
    let line = format!("data: {}\n", "y".repeat(64 * 1024));
    let refused = (0..(MAX_EVENT_BYTES / line.len()) + 2)
        .map(|_| d.push(line.as_bytes()))
        .find_map(Result::err);
    assert!(
        matches!(refused, Some(SseError::TooLarge { .. })),
        "{refused:?}"
    );
    // Bounded: 4 MiB of data in one event decodes.
    let big = format!("event: e\ndata: {}\n\n", "z".repeat(4 * 1024 * 1024));
    let frames = SseDecoder::new().push(big.as_bytes()).unwrap();
    assert_eq!(frames[0].data.len(), 4 * 1024 * 1024);
}
