//! Clients that drop a finished turn's thinking when the person writes again, or re-send the
//! previous turn from where it began.

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
    assert_append_only(requests, &options);
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

/// A main thread of turns without thinking, each an opening and one tool round; from the third
/// turn on, `restarted[t]` says whether turn t + 2 opened reading only up to where turn t + 1
/// began (the cached end before its opening), as if the client re-sent the previous person's
/// message changed, else it read the whole previous prefix. Returns the requests and, per turn,
/// where it began.
fn restarted_turns(restarted: &[bool]) -> (Vec<TraceRequest>, Vec<u64>) {
    let mut out = Vec::new();
    let mut starts = Vec::new();
    let mut cached = H1;
    let mut at = 0;
    for turn in 0..restarted.len() + 2 {
        let read = match turn {
            0 => H1,
            t if t >= 2 && restarted[t - 2] => starts[t - 1],
            _ => cached,
        };
        starts.push(cached);
        let mut opening = req(at, read, cached + 900 - read, true);
        opening.boundary = true;
        cached += 900;
        out.push(opening);
        at += 10_000;
        out.push(req(at, cached, 700, true));
        cached += 700;
        at += 40_000;
    }
    (out, starts)
}

/// Claude Code 2.0.2 (`bradymholt/dotfiles`' tuning part) opened most turns reading only up to
/// about where the previous turn began. Once such openings lead the model's tally over openings
/// that read the whole prefix, the next opening is predicted there; a client that keeps its
/// turns is predicted append-only throughout.
#[test]
fn a_client_that_resends_the_previous_turn_is_followed_once_restarts_lead() {
    let options = ValidateOptions::default();
    let (requests, starts) = restarted_turns(&[true, true, false, true]);
    let report = validate(
        &[trace("s", "main", ThreadKind::Main, "m", requests)],
        &options,
    );
    // Turn 2 restarts before the model has seen one: it predicts the whole previous prefix.
    let r = row(&report, "s/main/m", 4);
    assert_eq!(r.recorded_read, starts[1]);
    assert!(r.cache_model.read > starts[1], "{r:?}");
    // Turn 3 is predicted where turn 2 began, to the token.
    let r = row(&report, "s/main/m", 6);
    assert_eq!(
        (r.cache_model.read, r.cache_model.class, r.cache_model.agree),
        (starts[2], ReadClass::Head, true)
    );
    // Turn 4 kept its prefix (a miss), but restarts still lead (2 to 1): turn 5 is predicted
    // where turn 4 began.
    assert!(!row(&report, "s/main/m", 8).cache_model.agree);
    let r = row(&report, "s/main/m", 10);
    assert_eq!(
        (r.recorded_read, r.cache_model.read),
        (starts[4], starts[4])
    );

    // A client that keeps its turns is predicted append-only on every request.
    let (requests, _) = restarted_turns(&[false; 4]);
    assert_append_only(requests, &options);
}

/// One session resumed in two terminals (conversations 0 and 7 of one thread, as on
/// `claude_backup`'s tuning part), each turn opening reading its own conversation's tail, then
/// three turns in the second terminal alone. A switch reads the tail its own conversation left,
/// which sits where the thread's turn began before the other terminal wrote: it was counted as
/// a restart, so restarts led, and the lone terminal's next turn opening was predicted at the
/// other conversation's end instead of its own whole prefix.
#[test]
fn two_terminals_switching_are_no_turn_restarts() {
    let mut requests = Vec::new();
    let mut tails = [H1, H1];
    let mut at = 0;
    for (k, terminal) in [0, 1, 0, 1, 0, 1, 1, 1, 1].into_iter().enumerate() {
        let read = if k == 0 { H1 } else { tails[terminal] };
        let mut opening = req(at, read, tails[terminal] + 900 - read, true);
        opening.boundary = true;
        opening.conversation = [0, 7][terminal];
        tails[terminal] += 900;
        requests.push(opening);
        at += 30_000;
    }
    let report = validate(
        &[trace("s", "main", ThreadKind::Main, "m", requests)],
        &ValidateOptions::default(),
    );
    for index in [7, 8] {
        let r = row(&report, "s/main/m", index);
        assert_eq!(r.cache_model.read, r.recorded_read, "{r:?}");
    }
}

/// Every request of `requests` (one main thread) after the first is predicted append-only:
/// reading what was recorded.
fn assert_append_only(requests: Vec<TraceRequest>, options: &ValidateOptions) {
    let report = validate(
        &[trace("k", "main", ThreadKind::Main, "m", requests)],
        options,
    );
    assert!(
        report
            .rows
            .iter()
            .skip(1)
            .all(|r| r.cache_model.read == r.recorded_read)
    );
}
