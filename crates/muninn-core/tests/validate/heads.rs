//! Tools and system heads: a turn past the lookback, the tools head shared across sessions, heads
//! kept warm outside the traces, head sizes borrowed from another session, a tool list changed.

use super::{H1, H2, MIN, growing, read_agree, req, row, trace};
use muninn_core::trace::{ThreadKind, Trace};
use muninn_core::validate::{Disagreement, ReadClass, ValidateOptions, validate};

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
    assert_eq!(read_agree(&shared, "b/main/m", 0), (H1, true));
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

/// A session on model "m" `days` days in: its first request reads `opening` (the tools head H1
/// or nothing) and writes the rest of a 30k prompt at 1h, its second (10 s later) reads that
/// prompt, and its third, a day later, is resumed reading `resumed` (the tools head or nothing)
/// and writes the rest of a 31k prompt (so the next session must come more than an hour after it
/// to find that head dead).
fn session_of_three(session: &str, days: i64, opening: u64, resumed: u64) -> Trace {
    three_requests(session, days, opening, resumed, 24 * 60 * MIN)
}

/// [`session_of_three`] with its third request `third_after` ms after its first.
fn three_requests(session: &str, days: i64, opening: u64, resumed: u64, third_after: i64) -> Trace {
    let at = days * 24 * 60 * MIN;
    trace(
        session,
        "main",
        ThreadKind::Main,
        "m",
        vec![
            req(at, opening, 30_000 - opening, true),
            req(at + 10_000, 30_000, 500, true),
            req(at + third_after, resumed, 31_000 - resumed, true),
        ],
    )
}

/// [`session_of_three`] opening on `opening`, resumed reading nothing.
fn opening(session: &str, days: i64, opening: u64) -> Trace {
    session_of_three(session, days, opening, 0)
}

/// Outside traffic (another machine's sessions, other users of the client version) keeps a tools
/// head warm that the traces let die days ago: once openings on that dead head were read more often
/// than not, the next opening on it is predicted to read it. The tally is per head (sizes within
/// 10% pooled) and counts openings only; a pause in the middle of a session is still a miss (seen
/// on two public users' sessions, docs/validation.md "Validation on data nobody tuned on").
#[test]
fn a_tools_head_kept_warm_outside_the_traces_is_read_at_session_openings() {
    // a teaches the head; b opens on it dead and reads it; so c is predicted to read it.
    let warm = [
        opening("a", 0, H1),
        opening("b", 2, H1),
        opening("c", 4, H1),
    ];
    let report = validate(&warm, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "b/main/m", 0), (0, false));
    assert_eq!(read_agree(&report, "c/main/m", 0), (H1, true));
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

    // Per head size: a head more than 10% larger (another client version) starts unbelieved.
    let other = H1 + H1 / 5;
    let versions = [
        opening("a", 0, H1),
        opening("b", 2, H1),
        opening("v", 4, other),
        opening("w", 6, other),
    ];
    let report = validate(&versions, &ValidateOptions::default());
    assert_eq!(row(&report, "w/main/m", 0).cache_model.read, 0);
}

/// One user's tools head varies a few percent from session to session (the tools and skills
/// loaded differ: 19.9k to 21.8k tokens on `claude-config`'s tuning part), so the openings'
/// tally pools head sizes within 10% of each other: an opening that read a head 5% larger than
/// the one the model expected counts for the next opening on that larger head, which a tally
/// per exact size would start afresh (docs/validation.md, "Looked at a sixth time").
#[test]
fn openings_on_heads_a_few_percent_apart_share_a_tally() {
    let near = H1 + H1 / 20;
    // b opens on a's dead head (size H1) and reads its own, 5% larger; c opens on that one.
    let drift = [
        opening("a", 0, H1),
        opening("b", 2, near),
        opening("c", 4, near),
    ];
    let report = validate(&drift, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "b/main/m", 0), (0, false));
    assert_eq!(read_agree(&report, "c/main/m", 0), (near, true));
}

/// A head size learned in one session — there from a read a little short of its prefix, which
/// the classes call a head — is borrowed by another session that has seen no head of its own. It
/// must not hide that session's cached tail when the borrowed size falls between the tail and
/// the new end: a head is a prefix of the conversation, never longer than the tail (seen on a
/// public user's sessions, docs/validation.md "Validation on data nobody tuned on").
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

/// [`session_of_three`] opening on the tools head, resumed reading `resumed`.
fn resumed(session: &str, days: i64, resumed: u64) -> Trace {
    session_of_three(session, days, H1, resumed)
}

/// A session resumed after its entries expired finds the tools head warm where earlier
/// resumptions on that dead head were read more often than not — a tally of its own, apart
/// from the openings': a user whose resumptions read the head (on the tuning parts
/// `bradymholt-dotfiles`, `home-projects`, `dotfiles-universal`) is learned from them, and one
/// whose openings read it but resumptions do not (`claude_backup`) keeps predicting a miss
/// there (docs/validation.md, "Looked at a fourth time").
#[test]
fn a_tools_head_kept_warm_outside_the_traces_is_read_at_resumptions_tallied_apart() {
    // a's resumption teaches the tally; b's is then predicted to read the head.
    let warm = [resumed("a", 0, H1), resumed("b", 2, H1)];
    let report = validate(&warm, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "a/main/m", 2), (0, false));
    assert_eq!(read_agree(&report, "b/main/m", 2), (H1, true));

    // Openings read the head, resumptions not: the openings' tally says nothing of resumptions.
    let cold = [resumed("a", 0, 0), resumed("b", 2, 0), resumed("c", 4, 0)];
    let report = validate(&cold, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "c/main/m", 0), (H1, true));
    assert_eq!(read_agree(&report, "c/main/m", 2), (0, true));
}

/// A thread's first tool load (`tools_loaded`: the tools a `ToolSearch` named join the next
/// request) that broke the prefix on a model teaches that model: its next first load is
/// predicted as a tool change (nothing read, the cause a tools change), while a model whose
/// first loads kept the prefix goes on reading it (on the tuning parts Opus 4.7 broke it at
/// 13 of 13 first loads, the other models kept it; docs/validation.md, "Looked at a fourth
/// time").
#[test]
fn a_models_first_tool_loads_that_broke_the_prefix_are_learned() {
    use muninn_core::miss::MissCause;
    let thread = |start: i64, breaks: bool| {
        let mut t = growing(start, 4, 10_000, true);
        let prefix = t[3].usage.cache_read + t[3].usage.cache_write_1h;
        let read = if breaks { 0 } else { prefix };
        let mut load = req(start + 40_000, read, prefix + 300 - read, true);
        load.tools_loaded = true;
        t.push(load);
        t.push(req(start + 50_000, prefix + 300, 400, true));
        t
    };
    let traces = [
        trace("a", "main", ThreadKind::Main, "m", thread(0, true)),
        trace("b", "main", ThreadKind::Main, "m", thread(MIN, true)),
        trace("c", "main", ThreadKind::Main, "k", thread(0, false)),
        trace("d", "main", ThreadKind::Main, "k", thread(MIN, false)),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    let a = row(&report, "a/main/m", 4);
    assert_eq!(
        (a.cache_model.class, a.cache_model.agree),
        (ReadClass::Prefix, false)
    );
    let b = row(&report, "b/main/m", 4);
    assert_eq!((b.cache_model.read, b.cache_model.agree), (0, true));
    assert_eq!(b.cause, Some(MissCause::ToolsChange));
    // The thread goes on from what the load wrote.
    let after = row(&report, "b/main/m", 5);
    assert!(after.cache_model.agree);
    let d = row(&report, "d/main/k", 4);
    assert_eq!(
        (d.cache_model.class, d.cache_model.agree),
        (ReadClass::Prefix, true)
    );
}

/// A thread past a first tool load that changed its model's prompt head sends another head
/// than a fresh session does, so it no longer keeps the shared tools head warm: a session
/// opening while only such threads have run since the head's last fresh write finds it dead
/// and reads nothing (on `personal-git`'s tuning part, Opus 4.7, 9 such openings;
/// docs/validation.md, "Looked at a seventh time"). 5-minute writes throughout.
#[test]
fn a_thread_past_a_first_load_that_changed_the_head_keeps_no_shared_head_warm() {
    // Four requests 10 s apart from `start` (the first reads the shared head), then a first
    // tool load that reads nothing, then `more` requests every `every` ms, each reading the last.
    let thread = |start: i64, more: usize, every: i64| {
        let mut t = growing(start, 4, 10_000, false);
        let mut prefix = t[3].usage.cache_read + t[3].usage.cache_write_5m;
        let mut load = req(start + 40_000, 0, prefix + 300, false);
        load.tools_loaded = true;
        t.push(load);
        prefix += 300;
        for k in 0..more {
            t.push(req(
                start + 40_000 + (k as i64 + 1) * every,
                prefix,
                400,
                false,
            ));
            prefix += 400;
        }
        t
    };
    // a's first load breaks the prefix: b's is predicted to (a tool change), and from then on
    // b's head is its own; b keeps working past c's opening, c comes 8.5 minutes after the last
    // request that sent the shared head (b's fourth).
    let mut c = growing(10 * MIN, 2, 10_000, false);
    c[0].usage.cache_read = 0;
    c[0].usage.cache_write_5m += H1;
    let traces = [
        trace("a", "main", ThreadKind::Main, "m", thread(0, 1, 10_000)),
        trace("b", "main", ThreadKind::Main, "m", thread(MIN, 10, MIN)),
        trace("c", "main", ThreadKind::Main, "m", c),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "b/main/m", 0), (H1, true));
    assert_eq!(read_agree(&report, "b/main/m", 4), (0, true));
    assert!(row(&report, "b/main/m", 9).cache_model.agree);
    assert_eq!(read_agree(&report, "c/main/m", 0), (0, true));
}

/// An entry dies at its expiry (it is live while `expires_at > now`), so a session resumed
/// exactly one TTL after the thread's previous request finds its entries expired: a resumption,
/// tallied and judged as one (found in review: `>` took it for a live thread).
#[test]
fn a_resumption_exactly_one_ttl_after_the_previous_request_is_one() {
    let at_ttl =
        |session: &str, days: i64| three_requests(session, days, H1, H1, 10_000 + 60 * MIN);
    let report = validate(
        &[at_ttl("a", 0), at_ttl("b", 2)],
        &ValidateOptions::default(),
    );
    assert_eq!(read_agree(&report, "b/main/m", 2), (H1, true));
}

/// Whether a thread's entries expired is judged at the tier they were written at: after a
/// request that read everything and wrote nothing, the thread's latest write's tier (the cache
/// model's own fallback), not five minutes. Otherwise a 1h thread going on after 16 minutes,
/// on a tools head dead only because another session taught a new size, is taken for a
/// resumption that read the head, and teaches a later session's cold resumption warm (found
/// in review).
#[test]
fn a_full_read_keeps_its_threads_tier_for_the_resumptions_expiry() {
    // `a` never reads a head of its own: it takes the size `c` teaches at 12 minutes, whose
    // 5-minute entry is dead by `a`'s request at 25 minutes.
    let a = vec![
        req(0, 0, 30_000, true),
        req(MIN, 30_000, 500, true),
        req(9 * MIN, 30_500, 0, true),
        req(25 * MIN, 30_500, 500, true),
    ];
    let c = vec![req(12 * MIN, H1, 20_000 - H1, false)];
    let day = 2 * 24 * 60 * MIN;
    let d = vec![
        req(day, H1, 30_000 - H1, true),
        req(day + 10_000, 30_000, 500, true),
        req(day + 3 * 60 * MIN, 0, 31_000, true),
    ];
    let traces = [
        trace("a", "main", ThreadKind::Main, "m", a),
        trace("c", "main", ThreadKind::Main, "m", c),
        trace("d", "main", ThreadKind::Main, "m", d),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "d/main/m", 2), (0, true));
}

/// Whether a thread's entries expired is judged by the rules' lifetime, as the cache model's
/// entries live: under a provider's fixed retention (`CacheRules::lifetime_ms`) a 1h write
/// lives that long, not an hour (found in review: the TTL's own length was used).
#[test]
fn a_resumption_follows_the_rules_lifetime() {
    let after = |session: &str, days: i64| three_requests(session, days, H1, H1, 10_000 + 30 * MIN);
    let mut options = ValidateOptions::default();
    options.rules.lifetime_ms = Some(10 * MIN);
    let report = validate(&[after("a", 0), after("b", 2)], &options);
    assert_eq!(read_agree(&report, "b/main/m", 2), (H1, true));
}

/// A first tool load exactly five minutes after the thread's previous request finds that
/// request's 5-minute entries expired: a read of nothing there says nothing of the load, and it
/// must not teach the model that first loads break the prefix (found in review: `>` counted it).
#[test]
fn a_first_tool_load_as_the_entries_expire_teaches_nothing() {
    let thread = |start: i64, gap: i64, breaks: bool| {
        let mut t = growing(start, 4, 10_000, false);
        let prefix = t[3].usage.cache_read + t[3].usage.cache_write_5m;
        let read = if breaks { 0 } else { prefix };
        let mut load = req(start + 30_000 + gap, read, prefix + 300 - read, false);
        load.tools_loaded = true;
        t.push(load);
        t
    };
    let traces = [
        trace("a", "main", ThreadKind::Main, "m", thread(0, 5 * MIN, true)),
        trace(
            "b",
            "main",
            ThreadKind::Main,
            "m",
            thread(60 * MIN, 10_000, false),
        ),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    let b = row(&report, "b/main/m", 4);
    assert_eq!(
        (b.cache_model.class, b.cache_model.agree),
        (ReadClass::Prefix, true)
    );
}

/// A model switch in the middle of a thread starts a new trace at index 0, but it opens no
/// session: the thread already had requests, so the first request on the new model is judged by
/// the resumptions' tally, not the openings' (on the tuning parts, 6 such requests: 2 on
/// `home-projects`, 4 on `IDAHO-VAULT`; docs/validation.md, "Reviewed").
#[test]
fn a_model_switch_mid_thread_is_judged_with_the_resumptions() {
    // On "m", openings read the head 1 in 3 and resumptions 3 in 3.
    let history = [
        session_of_three("a", 0, H1, H1),
        session_of_three("x", 2, 0, H1),
        session_of_three("y", 4, 0, H1),
    ];
    let at = 6 * 24 * 60 * MIN;
    // s opens on "o", then switches to "m", whose head nothing in the traces kept warm.
    let before = trace(
        "s",
        "main",
        ThreadKind::Main,
        "o",
        vec![req(at, 0, 30_000, true)],
    );
    let switched = trace(
        "s",
        "main",
        ThreadKind::Main,
        "m",
        vec![req(at + 10_000, H1, 30_500 - H1, true)],
    );
    // t opens on "m" two days later: a session opening, judged by the openings' tally.
    let t = opening("t", 8, 0);
    let mut traces = history.to_vec();
    traces.extend([before, switched, t]);
    let report = validate(&traces, &ValidateOptions::default());
    assert_eq!(read_agree(&report, "s/main/m", 0), (H1, true));
    assert_eq!(read_agree(&report, "t/main/m", 0), (0, true));
}

/// With the tools head not shared across sessions, each session's head is its own, and so is
/// the evidence of what outside traffic keeps warm: one session's resumptions that read its
/// head say nothing of another session's (docs/validation.md, "Reviewed").
#[test]
fn without_a_shared_head_resumptions_are_tallied_per_session() {
    let options = ValidateOptions {
        share_tools_head: false,
        ..ValidateOptions::default()
    };
    let report = validate(&[resumed("a", 0, H1), resumed("b", 2, 0)], &options);
    assert_eq!(read_agree(&report, "a/main/m", 2), (0, false));
    assert_eq!(read_agree(&report, "b/main/m", 2), (0, true));
}
