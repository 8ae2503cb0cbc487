//! Strict causality on generated Anthropic traces: no prediction looks ahead.

use super::{req, trace};
use muninn_core::trace::{ThreadKind, Trace, TraceRequest};
use muninn_core::validate::{ReadClass, ValidateOptions, ValidationReport, validate};
use proptest::prelude::*;

/// One generated request: gap since the previous request of its trace, growth of the cached
/// part, the share of it the provider said it read, tier, a compaction before it, blocks added,
/// whether it opens a person's turn, whether its answer thought, the conversation of its thread it
/// belongs to (one session in two terminals), whether it sends a tool load (`tools_loaded`), a
/// tools head it reads instead (see [`HEAD`]), and whether the client changed its tool list
/// before it (`tools_changed`: a new tools epoch; unlike a first load that breaks the prefix,
/// it leaves the thread on the shared tools head).
type GenRequest = (
    i64,
    u64,
    u8,
    bool,
    bool,
    u32,
    bool,
    bool,
    u64,
    bool,
    Option<u64>,
    bool,
);

/// The tools head the generated reads of a head sit near: `HEAD` plus up to 20%, so the sizes
/// the sessions' heads are learned at lie sometimes within the 10% the tallies of heads kept
/// warm outside pool over and sometimes not (a tally per exact size, or one pooled
/// acausally, would otherwise go untested).
const HEAD: u64 = 12_000;

fn gen_trace() -> impl Strategy<Value = Vec<GenRequest>> {
    prop::collection::vec(
        (
            // Gaps within a TTL, past one, and exactly one (an entry dies at its expiry).
            prop_oneof![
                3 => 1_000i64..60_000,
                3 => 60_000i64..600_000,
                3 => 600_000i64..5_000_000,
                1 => prop_oneof![Just(300_000i64), Just(3_600_000)],
            ],
            0u64..30_000,
            // Often a full read (nothing written, so a tier must be assumed), often nothing read
            // (what the tallies of heads kept warm outside and of tool loads count), often a
            // 5m write.
            prop_oneof![2 => Just(100u8), 1 => Just(0u8), 2 => 0u8..=100],
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.05),
            0u32..30,
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.5),
            prop_oneof![3 => Just(0u64), 1 => 1u64..3],
            prop::bool::weighted(0.2),
            prop::option::weighted(0.4, 0u64..=HEAD / 5),
            prop::bool::weighted(0.1),
        ),
        1..25,
    )
}

/// Builds a trace from generated requests, starting at `start` with a first prompt of `first`.
fn build(start: i64, first: u64, generated: &[GenRequest]) -> Vec<TraceRequest> {
    let mut at = start;
    let mut cached = first;
    let mut out = Vec::new();
    for &(
        gap,
        growth,
        read_pct,
        one_hour,
        compacted,
        blocks,
        boundary,
        thinking,
        conversation,
        loaded,
        head,
        changed,
    ) in generated
    {
        at += gap;
        cached += growth;
        let read = head.map_or(cached * read_pct as u64 / 100, |h| cached.min(HEAD + h));
        let mut r = req(at, read, cached - read, one_hour);
        r.compacted = compacted;
        r.blocks_added = blocks;
        r.boundary = boundary;
        r.reasoning = thinking;
        r.conversation = conversation;
        r.tools_loaded = loaded;
        r.tools_changed = changed;
        out.push(r);
    }
    out
}

/// The predictions of every row, in replay order: read and class of both predictors.
pub(super) fn predictions(
    report: &ValidationReport,
) -> Vec<(String, usize, u64, ReadClass, u64, ReadClass)> {
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

/// Generated traces: three sessions on one model, a main thread each (the third opening after
/// the others' heads may have died), the first with a compaction agent and a sub-agent on
/// another model.
fn traces_of(parts: &[Vec<GenRequest>; 5]) -> Vec<Trace> {
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
        trace(
            "c",
            "main",
            ThreadKind::Main,
            "opus",
            build(2 * 3_600_000, 22_000, &parts[4]),
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Strict causality: perturbing the provider's answer to request k — any split of its
    /// cached part into read, 5m and 1h writes, any output, whether it thought — moves no
    /// prediction at or before k.
    /// Perturbing its whole usage (the prompt's size included) and what its client knew before
    /// sending it (a tool load, a tool change, a compaction, a turn's opening: `flip`) moves
    /// none before k, so no earlier request reads a later one's flags. Half the time k is a
    /// main thread's opening or a request after a pause.
    #[test]
    fn no_prediction_looks_ahead(
        parts in [gen_trace(), gen_trace(), gen_trace(), gen_trace(), gen_trace()],
        which in any::<prop::sample::Index>(),
        at_pause in any::<bool>(),
        read_pct in prop_oneof![Just(0u8), Just(100), 0u8..=100],
        five_pct in 0u8..=100,
        output in 0u64..5_000,
        input in 0u64..5_000,
        extra in 0u64..50_000,
        flip in any::<(bool, bool, bool, bool)>(),
    ) {
        let traces = traces_of(&parts);
        let before = validate(&traces, &ValidateOptions::default());
        // Half the time a main thread's opening or a request after a pause of 5 minutes or
        // more: the requests the tallies of heads kept warm outside judge, few among the rows.
        let paused: Vec<usize> = (0..before.rows.len())
            .filter(|&k| {
                let r = &before.rows[k];
                let t = traces.iter().find(|t| t.id == r.trace).unwrap();
                t.kind == ThreadKind::Main
                    && (r.index == 0
                        || t.requests[r.index].at_ms - t.requests[r.index - 1].at_ms >= 300_000)
            })
            .collect();
        let k = if at_pause && !paused.is_empty() {
            paused[which.index(paused.len())]
        } else {
            which.index(before.rows.len())
        };
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

        // The whole usage perturbed, the prompt's size included, and the flags its client set
        // before sending it.
        let mut rewritten = answered;
        let r = &mut rewritten[t].requests[index];
        r.usage.input = input;
        r.usage.cache_write_1h += extra;
        r.tools_loaded ^= flip.0;
        r.tools_changed ^= flip.1;
        r.compacted ^= flip.2;
        r.boundary ^= flip.3;
        let after = validate(&rewritten, &ValidateOptions::default());
        prop_assert_eq!(&predictions(&before)[..k], &predictions(&after)[..k]);
    }
}
