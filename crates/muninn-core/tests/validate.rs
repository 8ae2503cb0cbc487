//! The validation of the cache model against recorded usage, on synthetic traces.

use muninn_core::cache::Ttl;
use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use muninn_core::validate::{
    Disagreement, ReadClass, ValidateOptions, ValidationReport, classify, naive_read, validate,
};
use proptest::prelude::*;

mod causes;

const MIN: i64 = 60_000;
const H1: u64 = 17_842;
const H2: u64 = 21_460;

/// A request at `at_ms` that read `read` and wrote `write` at 1h (or 5m) with 1 uncached token.
fn req(at_ms: i64, read: u64, write: u64, one_hour: bool) -> TraceRequest {
    TraceRequest {
        at_ms,
        usage: Usage {
            input: 1,
            cache_write_5m: if one_hour { 0 } else { write },
            cache_write_1h: if one_hour { write } else { 0 },
            cache_read: read,
            output: 10,
        },
        boundary: false,
        compacted: false,
        tools_changed: false,
        version_changed: false,
        interrupted_thinking: false,
        reasoning: false,
        blocks_added: 3,
        provider_miss: None,
        tool_results: Default::default(),
        conversation: 0,
        forked_from: None,
        tool_results_at_ms: None,
    }
}

fn trace(
    session: &str,
    thread: &str,
    kind: ThreadKind,
    model: &str,
    requests: Vec<TraceRequest>,
) -> Trace {
    Trace {
        id: format!("{session}/{thread}/{model}"),
        session: session.to_string(),
        thread: thread.to_string(),
        kind,
        model: model.to_string(),
        source: "test".to_string(),
        requests,
    }
}

/// A main thread growing by `step` tokens every `gap` ms, starting with a tools-head read of H1.
fn growing(start: i64, n: usize, gap: i64, one_hour: bool) -> Vec<TraceRequest> {
    let mut out = Vec::new();
    let mut cached = H1;
    for i in 0..n {
        let read = if i == 0 { H1 } else { cached };
        let write = if i == 0 { 8_000 } else { 500 };
        out.push(req(start + i as i64 * gap, read, write, one_hour));
        cached = read + write;
    }
    out
}

fn row<'a>(
    report: &'a ValidationReport,
    trace_id: &str,
    index: usize,
) -> &'a muninn_core::validate::RequestRow {
    let found = report
        .rows
        .iter()
        .find(|r| r.trace == trace_id && r.index == index);
    assert!(found.is_some(), "no row {trace_id} #{index}");
    match found {
        Some(r) => r,
        None => unreachable!(),
    }
}

#[test]
fn classes_follow_the_reference_prefix() {
    assert_eq!(classify(100_000, 100_000, 64), ReadClass::Prefix);
    assert_eq!(classify(99_950, 100_000, 64), ReadClass::Prefix);
    assert_eq!(
        classify(100_103, 100_000, 64),
        ReadClass::Prefix,
        "more than the prefix is still the prefix"
    );
    assert_eq!(classify(21_460, 100_000, 64), ReadClass::Head);
    assert_eq!(classify(0, 100_000, 64), ReadClass::None);
    assert_eq!(
        classify(17_842, 0, 64),
        ReadClass::Head,
        "no reference: anything read is a head"
    );
    assert_eq!(classify(0, 0, 64), ReadClass::None);
}

#[test]
fn naive_rule_hits_within_the_previous_ttl_only() {
    let t = trace(
        "s",
        "main",
        ThreadKind::Main,
        "m",
        vec![
            req(0, 0, 30_000, false),
            req(4 * MIN, 30_000, 100, false),
            req(10 * MIN, 0, 30_101, false),
        ],
    );
    assert_eq!(naive_read(&t, 0, Ttl::FiveMinutes), 0);
    assert_eq!(naive_read(&t, 1, Ttl::FiveMinutes), 30_000);
    assert_eq!(
        naive_read(&t, 2, Ttl::FiveMinutes),
        0,
        "6 minutes after a 5m write"
    );
    let h = trace(
        "s",
        "main",
        ThreadKind::Main,
        "m",
        vec![req(0, 0, 30_000, true), req(50 * MIN, 30_000, 1, true)],
    );
    assert_eq!(
        naive_read(&h, 1, Ttl::FiveMinutes),
        30_000,
        "50 minutes after a 1h write"
    );
}

#[test]
fn steady_thread_agrees_for_both_predictors() {
    let t = trace(
        "s",
        "main",
        ThreadKind::Main,
        "m",
        growing(0, 20, 10_000, true),
    );
    let report = validate(&[t], &ValidateOptions::default());
    assert_eq!(report.rows.len(), 20);
    // Only the first request, which found a tools head nothing in the traces wrote, disagrees.
    assert_eq!(report.model.all.agree, 19);
    assert_eq!(report.naive.all.agree, 19);
    assert_eq!(
        report
            .model
            .all
            .disagreements
            .get(&Disagreement::ExternalWarmHead),
        Some(&1)
    );
    assert_eq!(report.model_errors, 0);
}

#[test]
fn ttl_expiry_is_a_miss_for_5m_and_a_hit_for_1h() {
    // Two models: on one model the 1h session would keep the shared tools head warm for the other.
    let mut five = growing(0, 3, 10_000, false);
    // 10 minutes later: everything (heads included) expired.
    five.push(req(20_000 + 10 * MIN, 0, 27_345, false));
    let mut hour = growing(0, 3, 10_000, true);
    hour.push(req(20_000 + 10 * MIN, 26_842, 500, true));
    let traces = [
        trace("a", "main", ThreadKind::Main, "m5", five),
        trace("b", "main", ThreadKind::Main, "m", hour),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    let r = row(&report, "a/main/m5", 3);
    assert_eq!(
        (r.cache_model.read, r.cache_model.class),
        (0, ReadClass::None)
    );
    assert!(r.cache_model.agree && r.naive.agree);
    let r = row(&report, "b/main/m", 3);
    assert_eq!(
        (r.cache_model.read, r.cache_model.class),
        (26_842, ReadClass::Prefix)
    );
    assert!(r.cache_model.agree && r.naive.agree);
}

/// The main thread: a head-only read after a rewrite teaches H2; a later compaction inside the TTL
/// reads H2 and the compaction agent reads the main thread's prefix.
#[test]
fn compaction_inside_the_ttl_reads_the_head_and_the_agent_reads_the_prefix() {
    let mut main = growing(0, 10, 10_000, true);
    let last = main
        .last()
        .map_or(0, |r| r.usage.cache_read + r.usage.written());
    // Request 10: the client rewrote the conversation; only the system head was read.
    main.push(req(100_000, H2, last + 10 - H2, true));
    let after_rewrite = last + 10;
    main.push(req(110_000, after_rewrite, 400, true));
    let before_compaction = after_rewrite + 400;
    // Request 12: the first request after a compaction.
    let mut compacted = req(200_000, H2, 9_000, true);
    compacted.compacted = true;
    main.push(compacted);
    let agent = vec![req(150_000, before_compaction, 2_500, true)];
    let traces = [
        trace("s", "main", ThreadKind::Main, "opus", main),
        trace(
            "s",
            "agent-acompact-1",
            ThreadKind::Compaction,
            "opus",
            agent,
        ),
    ];
    let report = validate(&traces, &ValidateOptions::default());

    let rewrite = row(&report, "s/main/opus", 10);
    assert_eq!(
        rewrite.cache_model.disagreement,
        Some(Disagreement::PrefixRewrite)
    );

    let fork = row(&report, "s/agent-acompact-1/opus", 0);
    assert_eq!(fork.reference, before_compaction);
    assert_eq!(fork.cache_model.read, before_compaction);
    assert!(fork.cache_model.agree);
    assert_eq!(fork.naive.disagreement, Some(Disagreement::ForkedPrefix));

    let c = row(&report, "s/main/opus", 12);
    assert_eq!(
        (c.cache_model.read, c.cache_model.class),
        (H2, ReadClass::Head)
    );
    assert!(c.cache_model.agree);
    assert_eq!(c.naive.class, ReadClass::Prefix);
    assert_eq!(c.naive.disagreement, Some(Disagreement::CompactionOrSwitch));
}

/// A model switch: the main thread leaves the model for longer than its 5m TTL; a compaction agent
/// on the old model rewrites the head shortly before the thread comes back. The head is warm while
/// the conversation tail expired.
#[test]
fn head_stays_warm_through_another_thread_while_the_tail_expires() {
    // Session "early" teaches the H2 size of the model's main group.
    let mut early = growing(0, 3, 10_000, false);
    let c = early
        .last()
        .map_or(0, |r| r.usage.cache_read + r.usage.written());
    early.push(req(30_000, H2, c + 10 - H2, false));
    let t0 = 2 * 60 * MIN;
    let opus_main = vec![
        req(t0, H1, 8_000, false),
        req(t0 + 10_000, H1 + 8_000, 6_000, false),
        {
            let mut r = req(t0 + 40 * MIN, H2, 20_000, false);
            r.compacted = true;
            r
        },
    ];
    let haiku_main = vec![
        req(t0 + 20_000, 0, 40_000, false),
        req(t0 + 30_000, 40_000, 500, false),
    ];
    let agent = vec![req(t0 + 38 * MIN, H1, 60_000, false)];
    let traces = [
        trace("early", "main", ThreadKind::Main, "opus", early),
        trace("s", "main", ThreadKind::Main, "opus", opus_main),
        trace("s", "main", ThreadKind::Main, "haiku", haiku_main),
        trace(
            "s",
            "agent-acompact-1",
            ThreadKind::Compaction,
            "opus",
            agent,
        ),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    // The haiku cache is cold: its first request reads nothing, as recorded.
    let h = row(&report, "s/main/haiku", 0);
    assert_eq!((h.cache_model.read, h.recorded_class), (0, ReadClass::None));
    assert!(h.cache_model.agree);
    // The agent found only the tools head, kept warm outside the traces.
    let a = row(&report, "s/agent-acompact-1/opus", 0);
    assert_eq!(
        a.cache_model.disagreement,
        Some(Disagreement::ExternalWarmHead)
    );
    // Back on opus 40 minutes later: the agent's head write is 2 minutes old.
    let back = row(&report, "s/main/opus", 2);
    assert_eq!(
        (back.cache_model.read, back.cache_model.class),
        (H2, ReadClass::Head)
    );
    assert!(back.cache_model.agree);
    assert_eq!(back.naive.read, 0);
    assert!(!back.naive.agree);
}

#[test]
fn a_turn_adding_more_blocks_than_the_lookback_reads_only_the_head() {
    let mut main = growing(0, 3, 10_000, true);
    let c = main
        .last()
        .map_or(0, |r| r.usage.cache_read + r.usage.written());
    // A rewrite teaches H2 first.
    main.push(req(30_000, H2, c + 10 - H2, true));
    let c = c + 10;
    main.push(req(40_000, c, 300, true));
    let mut wide = req(50_000, H2, c + 300 + 5_000 - H2, true);
    wide.blocks_added = 30;
    main.push(wide);
    let report = validate(
        &[trace("s", "main", ThreadKind::Main, "m", main)],
        &ValidateOptions::default(),
    );
    let r = row(&report, "s/main/m", 5);
    assert_eq!(
        (r.cache_model.read, r.cache_model.class),
        (H2, ReadClass::Head)
    );
    assert!(r.cache_model.agree);
    assert!(!r.naive.agree);
}

#[test]
fn the_tools_head_is_shared_across_sessions_when_asked() {
    let a = trace(
        "a",
        "main",
        ThreadKind::Main,
        "m",
        growing(0, 3, 10_000, true),
    );
    let b = trace(
        "b",
        "main",
        ThreadKind::Main,
        "m",
        growing(5 * MIN, 3, 10_000, true),
    );
    let shared = validate(&[a.clone(), b.clone()], &ValidateOptions::default());
    let r = row(&shared, "b/main/m", 0);
    assert_eq!((r.cache_model.read, r.cache_model.agree), (H1, true));
    let options = ValidateOptions {
        share_tools_head: false,
        ..ValidateOptions::default()
    };
    let apart = validate(&[a, b], &options);
    let r = row(&apart, "b/main/m", 0);
    assert_eq!(r.cache_model.read, 0);
    assert_eq!(
        r.cache_model.disagreement,
        Some(Disagreement::ExternalWarmHead)
    );
}

/// A session on model "m" opening `days` days in: its first request reads `opening` (the tools
/// head H1 or nothing) and writes the rest of a 30k prompt at 1h, its second (10 s later) reads
/// that prompt, and its third, a day later, reads nothing (and writes the tools head again: the
/// next opening must come more than an hour after it to find that head dead).
fn opening(session: &str, days: i64, opening: u64) -> Trace {
    let at = days * 24 * 60 * MIN;
    trace(
        session,
        "main",
        ThreadKind::Main,
        "m",
        vec![
            req(at, opening, 30_000 - opening, true),
            req(at + 10_000, 30_000, 500, true),
            req(at + 24 * 60 * MIN, 0, 31_000, true),
        ],
    )
}

/// Outside traffic (another machine's sessions, other users of the client version) keeps a
/// tools head warm that the traces let die days ago: once openings on that dead head were read
/// more often than not, the next opening on it is predicted to read it. The tally is per head
/// and counts openings only; a pause in the middle of a session is still a miss (seen on two
/// public users' sessions, README "Validation on data nobody tuned on").
#[test]
fn a_tools_head_kept_warm_outside_the_traces_is_read_at_session_openings() {
    // a teaches the head; b opens on it dead and reads it; so c is predicted to read it.
    let warm = [
        opening("a", 0, H1),
        opening("b", 2, H1),
        opening("c", 4, H1),
    ];
    let report = validate(&warm, &ValidateOptions::default());
    let b = row(&report, "b/main/m", 0);
    assert_eq!((b.cache_model.read, b.cache_model.agree), (0, false));
    let c = row(&report, "c/main/m", 0);
    assert_eq!((c.cache_model.read, c.cache_model.agree), (H1, true));
    // Only openings: c's request after a day's pause reads nothing, as predicted.
    let paused = row(&report, "c/main/m", 2);
    assert_eq!(
        (paused.cache_model.read, paused.cache_model.agree),
        (0, true)
    );

    // One opening read it, one did not: no longer believed.
    let mixed = [
        opening("a", 0, H1),
        opening("b", 2, H1),
        opening("x", 4, 0),
        opening("c", 6, H1),
    ];
    let report = validate(&mixed, &ValidateOptions::default());
    assert_eq!(row(&report, "x/main/m", 0).cache_model.read, H1);
    assert_eq!(row(&report, "c/main/m", 0).cache_model.read, 0);

    // Per head: a head of another size (another client version) starts unbelieved.
    let other = H1 + 1_000;
    let versions = [
        opening("a", 0, H1),
        opening("b", 2, H1),
        opening("v", 4, other),
        opening("w", 6, other),
    ];
    let report = validate(&versions, &ValidateOptions::default());
    assert_eq!(row(&report, "w/main/m", 0).cache_model.read, 0);
}

/// A head size learned in one session — there from a read a little short of its prefix, which
/// the classes call a head — is borrowed by another session that has seen no head of its own. It
/// must not hide that session's cached tail when the borrowed size falls between the tail and
/// the new end: a head is a prefix of the conversation, never longer than the tail (seen on a
/// public user's sessions, README "Validation on data nobody tuned on").
#[test]
fn a_borrowed_head_longer_than_the_cached_tail_does_not_hide_it() {
    let mut a = growing(0, 5, 10_000, true);
    let reference = a[4].usage.cache_read + a[4].usage.cache_write_1h;
    a.push(req(50_000, reference - 1_200, 1_500, true));
    let a = trace("a", "main", ThreadKind::Main, "m", a);
    let b = trace(
        "b",
        "main",
        ThreadKind::Main,
        "m",
        growing(5 * MIN, 4, 10_000, true),
    );
    let report = validate(&[a, b], &ValidateOptions::default());
    assert_eq!(
        row(&report, "a/main/m", 5).recorded_class,
        ReadClass::Head,
        "the short read is taken for a head"
    );
    // b's second request: its previous tail (H1 + 8,500) lies below a's head (H1 + 8,800), its
    // own end (H1 + 9,000) above.
    let r = row(&report, "b/main/m", 2);
    assert_eq!(r.recorded_read, H1 + 8_500);
    assert_eq!(
        (r.cache_model.read, r.cache_model.agree),
        (H1 + 8_500, true)
    );
}

/// A tool list the client changed before sending (Claude Code switching remote control on)
/// invalidates everything cached, tools head included: the request reads nothing and names a
/// tools change (the provider's `tools_changed`), and the thread goes on from what it wrote. The
/// same flag on a thread's first request says nothing: another session may have warmed the head.
#[test]
fn a_tool_change_the_client_recorded_reads_nothing_and_names_tools() {
    use muninn_core::miss::{MissCause, ProviderMiss, ProviderMissReason};
    let mut a = growing(0, 4, 10_000, true);
    let prefix = a[3].usage.cache_read + a[3].usage.cache_write_1h;
    let mut changed = req(40_000, 0, prefix + 300, true);
    changed.tools_changed = true;
    changed.provider_miss = Some(ProviderMiss {
        reason: ProviderMissReason::ToolsChanged,
        missed_tokens: Some(prefix),
    });
    a.push(changed);
    a.push(req(50_000, prefix + 300, 400, true));
    // b starts later with the flag on its first request: it still reads the shared tools head.
    let mut b = growing(60_000, 2, 10_000, true);
    b[0].tools_changed = true;
    let traces = [
        trace("a", "main", ThreadKind::Main, "m", a),
        trace("b", "main", ThreadKind::Main, "m", b),
    ];
    let options = ValidateOptions {
        share_tools_head: true,
        ..ValidateOptions::default()
    };
    let report = validate(&traces, &options);
    let r = row(&report, "a/main/m", 4);
    assert_eq!(
        (r.cache_model.read, r.cache_model.class, r.cache_model.agree),
        (0, ReadClass::None, true)
    );
    assert_eq!(r.cause, Some(MissCause::ToolsChange));
    assert_eq!(r.cause_agrees, Some(true));
    let r = row(&report, "a/main/m", 5);
    assert_eq!(
        (r.cache_model.read, r.cache_model.agree),
        (prefix + 300, true)
    );
    let r = row(&report, "b/main/m", 0);
    assert_eq!((r.cache_model.read, r.cache_model.agree), (H1, true));
    assert_eq!(r.cause, None);
}

/// A main thread of turns, each a thinking first answer and one tool round; `dropped[t]` says
/// whether turn t + 1 opened without the thinking of turn t (reading only up to the end of the
/// request whose answer thought), else it read the whole previous prefix. Returns the requests
/// and, per turn after the first, the prefix the client dropped back to.
fn thinking_turns(dropped: &[bool]) -> (Vec<TraceRequest>, Vec<u64>) {
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

#[test]
fn aggregates_and_json() {
    let t = trace(
        "s",
        "main",
        ThreadKind::Main,
        "m",
        growing(0, 5, 10_000, true),
    );
    let sub = trace(
        "s",
        "agent-x",
        ThreadKind::Subagent,
        "h",
        vec![req(1_000, 0, 12_000, true), req(2_000, 12_000, 10, true)],
    );
    let report = validate(&[t, sub], &ValidateOptions::default());
    assert_eq!(report.model.main.requests, 5);
    assert_eq!(report.model.all.requests, 7);
    let recorded: u64 = report.rows.iter().map(|r| r.recorded_read).sum();
    assert_eq!(report.model.all.recorded_read, recorded);
    let err: u64 = report
        .rows
        .iter()
        .map(|r| r.cache_model.read.abs_diff(r.recorded_read))
        .sum();
    assert_eq!(report.model.all.abs_error, err);
    assert!((report.model.all.read_error - err as f64 / recorded as f64).abs() < 1e-12);
    let json = serde_json::to_string(&report);
    assert!(json.is_ok_and(
        |j| j.contains("\"recorded_class\":\"head\"") && j.contains("external_warm_head")
    ));
    let empty = validate(&[], &ValidateOptions::default());
    assert_eq!(empty.model.all.agreement, 1.0);
}

/// One generated request: gap since the previous request of its trace, growth of the cached
/// part, the share of it the provider said it read, tier, a compaction before it, blocks added,
/// whether it opens a person's turn, whether its answer thought.
type GenRequest = (i64, u64, u8, bool, bool, u32, bool, bool);

fn gen_trace() -> impl Strategy<Value = Vec<GenRequest>> {
    prop::collection::vec(
        (
            prop_oneof![1_000i64..60_000, 60_000i64..600_000, 600_000i64..5_000_000],
            0u64..30_000,
            // Often a full read (nothing written, so a tier must be assumed), often a 5m write.
            prop_oneof![Just(100u8), 0u8..=100],
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.05),
            0u32..30,
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.5),
        ),
        1..25,
    )
}

/// Builds a trace from generated requests, starting at `start` with a first prompt of `first`.
fn build(start: i64, first: u64, generated: &[GenRequest]) -> Vec<TraceRequest> {
    let mut at = start;
    let mut cached = first;
    let mut out = Vec::new();
    for &(gap, growth, read_pct, one_hour, compacted, blocks, boundary, thinking) in generated {
        at += gap;
        cached += growth;
        let read = cached * read_pct as u64 / 100;
        let mut r = req(at, read, cached - read, one_hour);
        r.compacted = compacted;
        r.blocks_added = blocks;
        r.boundary = boundary;
        r.reasoning = thinking;
        out.push(r);
    }
    out
}

/// The predictions of every row, in replay order: read and class of both predictors.
fn predictions(report: &ValidationReport) -> Vec<(String, usize, u64, ReadClass, u64, ReadClass)> {
    report
        .rows
        .iter()
        .map(|r| {
            (
                r.trace.clone(),
                r.index,
                r.cache_model.read,
                r.cache_model.class,
                r.naive.read,
                r.naive.class,
            )
        })
        .collect()
}

/// Generated traces: two sessions on one model, a main thread each, the first with a
/// compaction agent and a sub-agent on another model.
fn traces_of(parts: &[Vec<GenRequest>; 4]) -> Vec<Trace> {
    vec![
        trace(
            "a",
            "main",
            ThreadKind::Main,
            "opus",
            build(0, 20_000, &parts[0]),
        ),
        trace(
            "b",
            "main",
            ThreadKind::Main,
            "opus",
            build(7_000, 25_000, &parts[1]),
        ),
        trace(
            "a",
            "agent-acompact-1",
            ThreadKind::Compaction,
            "opus",
            build(300_000, 40_000, &parts[2]),
        ),
        trace(
            "a",
            "agent-x",
            ThreadKind::Subagent,
            "haiku",
            build(3_000, 9_000, &parts[3]),
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Strict causality: perturbing the provider's answer to request k — any split of its
    /// cached part into read, 5m and 1h writes, any output, whether it thought — moves no
    /// prediction at or before k.
    /// Perturbing its whole usage (the prompt's size included) moves none before k.
    #[test]
    fn no_prediction_looks_ahead(
        parts in [gen_trace(), gen_trace(), gen_trace(), gen_trace()],
        which in any::<prop::sample::Index>(),
        read_pct in 0u8..=100,
        five_pct in 0u8..=100,
        output in 0u64..5_000,
        input in 0u64..5_000,
        extra in 0u64..50_000,
    ) {
        let traces = traces_of(&parts);
        let before = validate(&traces, &ValidateOptions::default());
        let k = which.index(before.rows.len());
        let (t_id, index) = (before.rows[k].trace.clone(), before.rows[k].index);
        let t = traces.iter().position(|t| t.id == t_id).unwrap();

        // The answer perturbed: same prompt, same uncached tail.
        let mut answered = traces.clone();
        let u = &mut answered[t].requests[index].usage;
        let cached = u.cache_read + u.written();
        let read = cached * read_pct as u64 / 100;
        let five = (cached - read) * five_pct as u64 / 100;
        u.cache_read = read;
        u.cache_write_5m = five;
        u.cache_write_1h = cached - read - five;
        u.output = output;
        let thought = &mut answered[t].requests[index].reasoning;
        *thought = !*thought;
        let after = validate(&answered, &ValidateOptions::default());
        prop_assert_eq!(&predictions(&before)[..=k], &predictions(&after)[..=k]);

        // The whole usage perturbed, the prompt's size included.
        let mut rewritten = answered;
        let u = &mut rewritten[t].requests[index].usage;
        u.input = input;
        u.cache_write_1h += extra;
        let after = validate(&rewritten, &ValidateOptions::default());
        prop_assert_eq!(&predictions(&before)[..k], &predictions(&after)[..k]);
    }
}

/// A Codex-like request: a prompt of `prompt` tokens of which `cached` were read, `output` out.
fn codex(at_ms: i64, prompt: u64, cached: u64, output: u64, boundary: bool) -> TraceRequest {
    TraceRequest {
        at_ms,
        usage: Usage {
            input: prompt - cached,
            cache_read: cached,
            output,
            ..Usage::default()
        },
        boundary,
        ..TraceRequest::default()
    }
}

/// OpenAI's automatic cache: the previous prompt and its output are read back in 128-token
/// steps; past the retention only the shared head (the first request's read) survives; a prompt
/// that shrank reads back to the start of its turn.
#[test]
fn codex_rollouts_are_predicted_by_the_automatic_cache_model() {
    let requests = vec![
        codex(0, 17_091, 3_456, 463, true),
        codex(7_000, 19_268, 17_536, 239, false),
        codex(13_000, 21_312, 19_456, 304, false),
        // Twenty minutes idle: past the 600 s retention.
        codex(13_000 + 20 * MIN, 22_000, 3_456, 100, true),
        codex(13_000 + 20 * MIN + 5_000, 30_000, 22_016, 100, false),
        // A new turn whose prompt shrank (earlier reasoning dropped): back to the turn start.
        codex(13_000 + 21 * MIN, 29_000, 21_888, 100, true),
    ];
    let t = trace("cx", "main", ThreadKind::Main, "gpt-5-codex", requests);
    let report = validate(&[t], &ValidateOptions::default());
    let reads = model_reads(&report);
    assert_eq!(
        reads,
        vec![
            (0, ReadClass::None),
            // floor128(min(19_268, 17_091 + 463)) = 17_536.
            (17_536, ReadClass::Prefix),
            (19_456, ReadClass::Prefix),
            (3_456, ReadClass::Head),
            (22_016, ReadClass::Prefix),
            // The turn began at 22_000 tokens: 21_888 once rounded down.
            (21_888, ReadClass::Head),
        ]
    );
    assert_eq!(
        report.rows[0].cache_model.disagreement,
        Some(Disagreement::ExternalWarmHead)
    );
    assert_eq!(report.model.all.agree, 5);
    // The reference is the previous prompt rounded down to the step.
    assert_eq!(report.rows[1].reference, 17_024);
    // The naive rule reads the previous prompt within the retention, nothing past it.
    assert_eq!(report.rows[1].naive.read, 17_024);
    assert_eq!(report.rows[3].naive.read, 0);
}

/// What the cache model predicted each request reads, and of which kind.
fn model_reads(report: &ValidationReport) -> Vec<(u64, ReadClass)> {
    report
        .rows
        .iter()
        .map(|r| (r.cache_model.read, r.cache_model.class))
        .collect()
}

/// A Codex-like request whose answer did (or did not) carry reasoning items.
fn codex_reasoned(
    at_ms: i64,
    prompt: u64,
    cached: u64,
    boundary: bool,
    reasoning: bool,
) -> TraceRequest {
    TraceRequest {
        reasoning,
        ..codex(at_ms, prompt, cached, 200, boundary)
    }
}

/// OpenAI's reasoning models leave an earlier turn's reasoning out of the prompt once a new user
/// message comes: the first request of the next turn reads only up to where that turn's first
/// reasoning began (the prompt of its first request that reasoned); after a turn that did not
/// reason the whole previous prompt is read, as before.
#[test]
fn a_new_turn_reads_up_to_where_the_last_turn_began_to_reason() {
    let requests = vec![
        // Turn 1: its first request answers without reasoning, the second reasons.
        codex_reasoned(0, 12_000, 3_072, true, false),
        codex_reasoned(5_000, 14_100, 12_032, false, true),
        codex_reasoned(10_000, 16_500, 14_208, false, true),
        // Turn 2: the prompt grew, but turn 1's reasoning (from 14_100 on) is gone.
        codex_reasoned(60_000, 18_000, 14_080, true, false),
        codex_reasoned(65_000, 19_000, 18_176, false, false),
        // Turn 3: turn 2 did not reason, so its whole prefix stays.
        codex_reasoned(120_000, 20_000, 19_072, true, true),
    ];
    let t = trace("cx", "main", ThreadKind::Main, "gpt-5.1-codex", requests);
    let report = validate(&[t], &ValidateOptions::default());
    let reads = model_reads(&report);
    assert_eq!(
        reads,
        vec![
            (0, ReadClass::None),
            (12_160, ReadClass::Prefix),
            (14_208, ReadClass::Prefix),
            // floor128(14_100): where turn 1's first reasoning began.
            (14_080, ReadClass::Head),
            (18_176, ReadClass::Prefix),
            // floor128(min(20_000, 19_000 + 200)).
            (19_200, ReadClass::Prefix),
        ]
    );
    // Every request after the first agrees with what was recorded.
    assert_eq!(report.model.all.agree, 5);
    assert_eq!(
        report.rows[3].cause,
        Some(muninn_core::miss::MissCause::MessagesChange)
    );
}

/// One generated Codex request: gap, prompt growth (may be negative: reasoning dropped), the share
/// of the prompt read, output, a new user message, reasoning in the answer, a compaction.
type GenCodex = (i64, i64, u8, u64, bool, bool, bool);

fn gen_codex() -> impl Strategy<Value = Vec<GenCodex>> {
    prop::collection::vec(
        (
            prop_oneof![1_000i64..30_000, 30_000i64..900_000],
            -3_000i64..20_000,
            0u8..=100,
            0u64..4_000,
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.6),
            prop::bool::weighted(0.05),
        ),
        1..30,
    )
}

fn build_codex(start: i64, generated: &[GenCodex]) -> Vec<TraceRequest> {
    let (mut at, mut prompt) = (start, 4_000i64);
    generated
        .iter()
        .map(
            |&(gap, growth, read_pct, output, boundary, reasoning, compacted)| {
                at += gap;
                prompt = (prompt + growth).max(1);
                let p = prompt as u64;
                let mut r = codex_reasoned(at, p, p * read_pct as u64 / 100, boundary, reasoning);
                r.compacted = compacted;
                r.usage.output = output;
                r
            },
        )
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Strict causality of the OpenAI cache model: perturbing the provider's answer to request k
    /// — how much of its prompt was read, its output, whether it reasoned — moves no prediction
    /// at or before k; perturbing its prompt's size moves none before k.
    #[test]
    fn no_openai_prediction_looks_ahead(
        a in gen_codex(),
        b in gen_codex(),
        which in any::<prop::sample::Index>(),
        read_pct in 0u8..=100,
        output in 0u64..5_000,
        reasoning in any::<bool>(),
        prompt in 1u64..200_000,
    ) {
        let traces = vec![
            trace("a", "main", ThreadKind::Main, "gpt-5.1-codex", build_codex(0, &a)),
            trace("b", "main", ThreadKind::Main, "gpt-5.1-codex", build_codex(2_500, &b)),
        ];
        let before = validate(&traces, &ValidateOptions::default());
        let k = which.index(before.rows.len());
        let (t_id, index) = (before.rows[k].trace.clone(), before.rows[k].index);
        let t = traces.iter().position(|t| t.id == t_id).unwrap();

        let mut answered = traces.clone();
        let r = &mut answered[t].requests[index];
        let whole = r.usage.prompt();
        r.usage.cache_read = whole * read_pct as u64 / 100;
        r.usage.input = whole - r.usage.cache_read;
        r.usage.output = output;
        r.reasoning = reasoning;
        let after = validate(&answered, &ValidateOptions::default());
        prop_assert_eq!(&predictions(&before)[..=k], &predictions(&after)[..=k]);

        let mut rewritten = answered;
        let r = &mut rewritten[t].requests[index];
        r.usage.input = prompt - r.usage.cache_read.min(prompt);
        r.usage.cache_read = r.usage.cache_read.min(prompt);
        let after = validate(&rewritten, &ValidateOptions::default());
        prop_assert_eq!(&predictions(&before)[..k], &predictions(&after)[..k]);
    }
}
