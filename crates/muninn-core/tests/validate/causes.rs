//! The cache model's miss causes against the provider's labels: the levels the transcript
//! shows, and what a read short of the expected prefix names.

use super::thinking::thinking_turns;
use super::{H1, H2, growing, req, row, trace};
use muninn_core::miss::{MissCause, ProviderMiss, ProviderMissReason};
use muninn_core::trace::ThreadKind;
use muninn_core::validate::{ReadClass, ValidateOptions, validate};

fn label(reason: ProviderMissReason) -> Option<ProviderMiss> {
    Some(ProviderMiss {
        reason,
        missed_tokens: Some(1_000),
    })
}

/// An answer the person stopped while it was only thinking: Claude Code sends the next turn
/// without that turn's thinking, so it reads exactly up to where the turn's first thinking
/// began, and the provider labels it `messages_changed`. The model follows it on the first
/// such turn (no learning needed) and names the level; the drop teaches nothing of what the
/// client does with finished turns, so two plain drops after it are still needed before one
/// is predicted.
#[test]
fn an_answer_stopped_while_thinking_drops_its_turns_thinking() {
    let (mut requests, points) = thinking_turns(&[false, true, true, true]);
    // Turn 2 (request 4) opens after the interrupt.
    requests[4].interrupted_thinking = true;
    requests[4].provider_miss = label(ProviderMissReason::MessagesChanged);
    let report = validate(
        &[trace("s", "main", ThreadKind::Main, "m", requests)],
        &ValidateOptions::default(),
    );
    let r = row(&report, "s/main/m", 4);
    assert_eq!(
        (r.recorded_read, r.cache_model.read, r.cache_model.class),
        (points[1], points[1], ReadClass::Head)
    );
    assert_eq!(
        (r.cause, r.cause_agrees),
        (Some(MissCause::MessagesChange), Some(true))
    );
    // Turns 3 and 4 drop on their own: one observed drop before turn 4, not two.
    let r = row(&report, "s/main/m", 8);
    assert_eq!(r.recorded_read, points[3]);
    assert!(r.cache_model.read > points[3], "{r:?}");
}

/// A request the model expected to read its whole prefix but that read only a head, with
/// nothing in the trace to say why: the prompt changed, at a level unknown, which agrees with
/// the provider's label at any level and is counted apart. After a new client version the
/// same shortfall is named a change of system prompt; a new version whose request read its
/// whole prefix names nothing.
#[test]
fn a_read_short_of_the_expected_prefix_names_a_change_of_the_prompt() {
    let shortfall = |session: &str, new_version: bool, reason| {
        let mut requests = growing(0, 4, 10_000, true);
        let prefix = requests[3].usage.cache_read + requests[3].usage.cache_write_1h;
        // Same version, whole prefix read.
        let mut kept = req(40_000, prefix, 300, true);
        kept.version_changed = new_version;
        requests.push(kept);
        let mut short = req(50_000, H1, prefix + 300 + 200 - H1, true);
        short.version_changed = new_version;
        short.provider_miss = label(reason);
        requests.push(short);
        trace(session, "main", ThreadKind::Main, "m", requests)
    };
    let traces = [
        shortfall("a", false, ProviderMissReason::MessagesChanged),
        shortfall("b", true, ProviderMissReason::SystemChanged),
    ];
    let report = validate(&traces, &ValidateOptions::default());
    for (id, cause) in [
        ("a/main/m", MissCause::PrefixChange),
        ("b/main/m", MissCause::SystemChange),
    ] {
        let kept = row(&report, id, 4);
        assert_eq!((kept.cache_model.agree, kept.cause), (true, None), "{id}");
        let short = row(&report, id, 5);
        assert_eq!(
            (short.cache_model.class, short.recorded_class),
            (ReadClass::Prefix, ReadClass::Head),
            "{id}"
        );
        assert_eq!((short.cause, short.cause_agrees), (Some(cause), Some(true)));
    }
    assert_eq!(
        (
            report.causes.labelled,
            report.causes.agree,
            report.causes.unknown_level
        ),
        (2, 2, 1)
    );
}

/// Where a short read stopped names the level of the change, on Claude Code's layout (tools,
/// system, messages; a breakpoint after the system preamble, the tools head): nothing read
/// although the tools head was warm is a change before that breakpoint, in the tools or the
/// system; a read well past the tools head (a system head) is a change of the messages; a read
/// of about the tools head leaves the level unknown (the system or the messages). Each
/// agrees with its label, and the report counts the one of two levels apart.
#[test]
fn where_a_short_read_stopped_names_the_level() {
    let shortfall = |session: &str, read: u64, reason| {
        let mut requests = growing(0, 4, 10_000, true);
        let prefix = requests[3].usage.cache_read + requests[3].usage.cache_write_1h;
        let mut short = req(40_000, read, prefix + 300 - read, true);
        short.provider_miss = label(reason);
        requests.push(short);
        trace(session, "main", ThreadKind::Main, "m", requests)
    };
    let cases = [
        ("none", 0, ProviderMissReason::ToolsChanged),
        ("system", H2, ProviderMissReason::MessagesChanged),
        ("tools", H1 + 40, ProviderMissReason::SystemChanged),
    ];
    let traces: Vec<_> = cases
        .iter()
        .map(|&(s, read, reason)| shortfall(s, read, reason))
        .collect();
    let report = validate(&traces, &ValidateOptions::default());
    let named: Vec<_> = cases
        .iter()
        .map(|(s, ..)| {
            let r = row(&report, &format!("{s}/main/m"), 4);
            (r.cache_model.class, r.cause, r.cause_agrees)
        })
        .collect();
    assert_eq!(
        named,
        vec![
            (
                ReadClass::Prefix,
                Some(MissCause::ToolsOrSystemChange),
                Some(true)
            ),
            (
                ReadClass::Prefix,
                Some(MissCause::MessagesChange),
                Some(true)
            ),
            (ReadClass::Prefix, Some(MissCause::PrefixChange), Some(true)),
        ]
    );
    let c = &report.causes;
    assert_eq!(
        (c.labelled, c.agree, c.unknown_level, c.two_levels),
        (3, 3, 1, 1)
    );
}

/// Found in review: without a tools head known (the session opened cold and no other session
/// read one), a read of nothing says nothing of where the prompt diverged — a prompt with no
/// cacheable head reads nothing after a change of its messages too — so the level stays unknown.
#[test]
fn without_a_tools_head_a_read_of_nothing_names_no_level() {
    let mut requests = growing(0, 4, 10_000, true);
    requests[0].usage.cache_read = 0;
    requests[0].usage.cache_write_1h = 20_000;
    let mut cached = 20_000;
    for r in requests.iter_mut().skip(1) {
        r.usage.cache_read = cached;
        cached += r.usage.cache_write_1h;
    }
    let mut short = req(40_000, 0, cached + 300, true);
    short.provider_miss = label(ProviderMissReason::MessagesChanged);
    requests.push(short);
    let t = trace("s", "main", ThreadKind::Main, "m", requests);
    let report = validate(&[t], &ValidateOptions::default());
    let r = row(&report, "s/main/m", 4);
    assert_eq!(r.cache_model.class, ReadClass::Prefix, "{r:?}");
    assert_eq!(
        (r.cause, r.cause_agrees),
        (Some(MissCause::PrefixChange), Some(true)),
        "{r:?}"
    );
}
