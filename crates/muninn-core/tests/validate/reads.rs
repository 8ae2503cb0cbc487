//! What the cache model (and the naive rule) reads on hand-written Anthropic threads: the read
//! classes, TTL expiry, compactions, a head kept warm by another thread; and the report's
//! aggregates.

use super::{H1, H2, MIN, growing, req, row, trace};
use muninn_core::cache::Ttl;
use muninn_core::trace::ThreadKind;
use muninn_core::validate::{
    Disagreement, ReadClass, ValidateOptions, classify, naive_read, validate,
};

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

/// One session resumed in two terminals: two conversations in one thread, their requests
/// alternating. Each terminal sends its own conversation, so each request reads its own
/// conversation's last prefix, not the other terminal's (`claude_backup`'s tuning part).
#[test]
fn a_thread_of_two_conversations_reads_each_ones_own_prefix() {
    let mut requests = vec![
        req(0, H1, 8_000, true),
        req(10_000, H1 + 8_000, 500, true),
        // The second terminal's first request: a fork of the first conversation.
        req(20_000, H1 + 8_000, 700, true),
        // The first terminal again, then the second.
        req(30_000, H1 + 8_500, 400, true),
        req(40_000, H1 + 8_700, 300, true),
    ];
    requests[2].conversation = 7;
    requests[2].forked_from = Some(0);
    requests[4].conversation = 7;
    let t = trace("s", "main", ThreadKind::Main, "m", requests);
    let report = validate(&[t], &ValidateOptions::default());
    for index in [3, 4] {
        let r = row(&report, "s/main/m", index);
        assert_eq!(
            (r.cache_model.read, r.cache_model.agree),
            (r.recorded_read, true),
            "request {index} reads its own conversation's prefix"
        );
    }
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

/// The names `check-cache` prints for read classes and disagreement classes are the names the
/// JSON report stores, every one of them: a class read off the table is found in the JSON.
#[test]
fn printed_class_names_are_the_stored_ones() {
    let stored = |v: serde_json::Result<serde_json::Value>| {
        v.ok().and_then(|v| v.as_str().map(str::to_owned))
    };
    for class in ReadClass::ALL {
        assert_eq!(
            stored(serde_json::to_value(class)).as_deref(),
            Some(class.as_str())
        );
        assert_eq!(class.to_string(), class.as_str());
    }
    let mut names: Vec<&str> = Vec::new();
    for class in Disagreement::ALL {
        assert_eq!(
            stored(serde_json::to_value(class)).as_deref(),
            Some(class.as_str())
        );
        assert_eq!(class.to_string(), class.as_str());
        names.push(class.as_str());
    }
    // `ALL` is every class once, in their order (the table sorts by it).
    let mut sorted = Disagreement::ALL;
    sorted.sort();
    assert_eq!(sorted, Disagreement::ALL);
    names.dedup();
    assert_eq!(names.len(), Disagreement::ALL.len());
}
