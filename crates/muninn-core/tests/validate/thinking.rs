//! Clients that drop a finished turn's thinking when the person writes again.

use super::{H1, req, row, trace};
use muninn_core::trace::{ThreadKind, TraceRequest};
use muninn_core::validate::{ReadClass, ValidateOptions, validate};

/// A main thread of turns, each a thinking first answer and one tool round; `dropped[t]` says
/// whether turn t + 1 opened without the thinking of turn t (reading only up to the end of the
/// request whose answer thought), else it read the whole previous prefix. Returns the requests
/// and, per turn after the first, the prefix the client dropped back to.
pub(super) fn thinking_turns(dropped: &[bool]) -> (Vec<TraceRequest>, Vec<u64>) {
    let mut out = Vec::new();
    let mut points = Vec::new();
    let mut cached = H1;
    let mut at = 0;
    let mut first_thought = None;
    for turn in 0..=dropped.len() {
        // The turn's first request: a person's message, an answer that thinks.
        let read = match (turn, first_thought) {
            (0, _) => H1,
            (t, Some(point)) if dropped[t - 1] => {
                points.push(point);
                point
            }
            (_, point) => {
                points.extend(point);
                cached
            }
        };
        let mut opening = req(at, read, cached + 900 - read, true);
        opening.boundary = true;
        opening.reasoning = true;
        cached += 900;
        first_thought = Some(cached);
        out.push(opening);
        // A tool round, no thinking; the turn ends.
        at += 10_000;
        out.push(req(at, cached, 700, true));
        cached += 700;
        at += 40_000;
    }
    (out, points)
}

/// Stretches of some Claude Code sessions drop a finished turn's thinking when the person
/// writes again: the turn's first request then reads only up to the end of the previous turn's
/// first thinking answer. Two such reads in a row and the model predicts the next one there;
/// a turn that kept its thinking switches it off again, and one drop alone (an interrupt reads
/// the same way) is not enough.
#[test]
fn a_client_that_drops_the_last_turns_thinking_is_followed_after_two_drops() {
    let options = ValidateOptions::default();
    let (requests, points) = thinking_turns(&[true, true, true, false, true, false]);
    let report = validate(
        &[trace("s", "main", ThreadKind::Main, "m", requests.clone())],
        &options,
    );
    // Turns 1 and 2 open with a drop the model has not learned yet: it predicts the whole
    // previous prefix.
    for (turn, index) in [(1, 2), (2, 4)] {
        let r = row(&report, "s/main/m", index);
        assert_eq!(r.recorded_read, points[turn - 1]);
        assert!(r.cache_model.read > points[turn - 1], "turn {turn}: {r:?}");
    }
    // Turn 3 is predicted at the dropped point, to the token.
    let r = row(&report, "s/main/m", 6);
    assert_eq!(
        (r.cache_model.read, r.cache_model.class, r.cache_model.agree),
        (points[2], ReadClass::Head, true)
    );
    // Turn 4 kept its thinking (a miss for the model), which switches the drop off: turn 5,
    // one drop, is predicted as kept, and turn 6 (kept) agrees.
    assert!(!row(&report, "s/main/m", 8).cache_model.agree);
    let r = row(&report, "s/main/m", 10);
    assert_eq!(r.recorded_read, points[4]);
    assert!(r.cache_model.read > points[4]);
    let r = row(&report, "s/main/m", 12);
    assert_eq!(
        (r.recorded_read, r.cache_model.read),
        (requests[12].usage.cache_read, requests[12].usage.cache_read)
    );

    // A client that keeps its thinking throughout is predicted append-only on every turn.
    let (requests, _) = thinking_turns(&[false; 5]);
    let report = validate(
        &[trace("k", "main", ThreadKind::Main, "m", requests)],
        &options,
    );
    assert!(
        report
            .rows
            .iter()
            .skip(1)
            .all(|r| r.cache_model.read == r.recorded_read)
    );
}

/// A read that stopped at a dropped thinking block is a prefix of the conversation, not the
/// system head: it must not be learned as a head size. Otherwise a later compaction, which
/// reads only the tools head, is predicted to read back to the dropped point (an entry the
/// mistaken head kept warm).
#[test]
fn a_read_at_a_dropped_thinking_point_teaches_no_head_size() {
    let (mut requests, _) = thinking_turns(&[true, true, true]);
    let last = requests.last().map_or(0, |r| r.at_ms);
    let prompt = requests.last().map_or(0, |r| r.usage.prompt());
    let mut compacted = req(last + 20_000, H1, prompt / 2, true);
    compacted.compacted = true;
    compacted.boundary = true;
    requests.push(compacted);
    let index = requests.len() - 1;
    let report = validate(
        &[trace("s", "main", ThreadKind::Main, "m", requests)],
        &ValidateOptions::default(),
    );
    let r = row(&report, "s/main/m", index);
    assert_eq!((r.recorded_read, r.cache_model.read), (H1, H1));
}
