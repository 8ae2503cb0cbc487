//! OpenAI's automatic cache on Codex-like rollouts: reads in 128-token steps, the retention,
//! reasoning left out at a new turn, and causality on generated rollouts.

use super::causality::predictions;
use super::{MIN, trace};
use muninn_core::trace::{ThreadKind, TraceRequest, Usage};
use muninn_core::validate::{Disagreement, ReadClass, ValidateOptions, ValidationReport, validate};
use proptest::prelude::*;

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
        // Forty minutes idle: past the 1,800 s retention.
        codex(13_000 + 40 * MIN, 22_000, 3_456, 100, true),
        codex(13_000 + 40 * MIN + 5_000, 30_000, 22_016, 100, false),
        // A new turn whose prompt shrank (earlier reasoning dropped): back to the turn start.
        codex(13_000 + 41 * MIN, 29_000, 21_888, 100, true),
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

/// OpenAI keeps an unused prefix "5 to 10 minutes, up to an hour off-peak"; Codex rollouts read
/// their conversation back after idle gaps well past ten minutes, so the retention is 1,800 s:
/// twenty idle minutes keep the conversation (for the model and the naive rule), forty do not.
#[test]
fn a_conversation_outlives_ten_idle_minutes() {
    let requests = vec![
        codex(0, 17_091, 3_456, 463, true),
        codex(20 * MIN, 19_268, 17_536, 239, true),
        codex(60 * MIN, 21_312, 3_456, 304, true),
    ];
    let t = trace("cx", "main", ThreadKind::Main, "gpt-5-codex", requests);
    let report = validate(&[t], &ValidateOptions::default());
    assert_eq!(
        model_reads(&report),
        vec![
            (0, ReadClass::None),
            (17_536, ReadClass::Prefix),
            (3_456, ReadClass::Head),
        ]
    );
    assert_eq!(report.rows[1].naive.read, 17_024);
    assert_eq!(report.rows[2].naive.read, 0);
    assert_eq!(report.model.all.agree, 2);
}

/// Codex sends every model nearly the same instructions, and a thread's first request finds
/// them warm: a thread that opens a model no earlier thread has used reads the head another
/// model's threads read (its size a guess, its class a head), not nothing.
#[test]
fn a_model_no_thread_has_opened_borrows_another_models_head() {
    let first = trace(
        "a",
        "main",
        ThreadKind::Main,
        "gpt-5-codex",
        vec![codex(0, 3_796, 3_072, 100, true)],
    );
    let second = trace(
        "b",
        "main",
        ThreadKind::Main,
        "gpt-5.1-codex",
        vec![
            codex(MIN, 5_233, 3_072, 100, true),
            codex(MIN + 5_000, 6_000, 5_120, 100, false),
        ],
    );
    let report = validate(&[first, second], &ValidateOptions::default());
    assert_eq!(
        model_reads(&report),
        vec![
            // Nothing known yet: no head to predict.
            (0, ReadClass::None),
            // Another model's head stands in.
            (3_072, ReadClass::Head),
            // floor128(min(6_000, 5_233 + 100)) = 5_248.
            (5_248, ReadClass::Prefix),
        ]
    );
    assert_eq!(report.model.all.agree, 2);
}

/// Where each new turn steadily reads a little short of where the last turn began to reason
/// (Codex 0.104 on the localpush rollouts' tuning part: 12–29 steps on most turns of its
/// longest rollout), that shortfall is learned as the tail deficit is — the smaller of the
/// last two — and taken off the next new turn's prediction.
#[test]
fn a_steady_shortfall_at_new_turns_is_learned() {
    let requests = vec![
        codex_reasoned(0, 20_000, 3_072, true, false),
        codex_reasoned(5_000, 22_000, 20_096, false, true),
        // Each new turn reads 15 steps short of where the last began to reason.
        codex_reasoned(60_000, 24_000, 21_888 - 1_920, true, false),
        codex_reasoned(65_000, 26_000, 24_192, false, true),
        codex_reasoned(120_000, 28_000, 25_984 - 1_920, true, false),
        codex_reasoned(125_000, 30_000, 28_160, false, true),
        codex_reasoned(180_000, 32_000, 29_952 - 1_920, true, false),
    ];
    let t = trace("cx", "main", ThreadKind::Main, "gpt-5.3-codex", requests);
    let report = validate(&[t], &ValidateOptions::default());
    let turns: Vec<(u64, ReadClass)> = model_reads(&report)
        .into_iter()
        .skip(2)
        .step_by(2)
        .collect();
    assert_eq!(
        turns,
        vec![
            // Nothing learned yet: the prefix up to where the last turn reasoned.
            (21_888, ReadClass::Prefix),
            // One short turn is not believed yet (the smaller of the last two).
            (25_984, ReadClass::Prefix),
            // Two are: 15 steps short, a head, as recorded.
            (29_952 - 1_920, ReadClass::Head),
        ]
    );
    assert!(report.rows[6].cache_model.agree);
    assert_eq!(report.rows[6].recorded_class, ReadClass::Head);
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
            // Another model: its first thread borrows the other's head.
            trace("b", "main", ThreadKind::Main, "gpt-5.2-codex", build_codex(2_500, &b)),
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

/// OpenAI's cache is a machine's: a Codex thread that sends faster than about 15 requests a
/// minute overflows to machines a request or two behind, which read the conversation a few
/// hundred tokens short of the previous prompt. Such a read is classed the prefix (up to eight
/// 128-token steps short), for the cache model and the naive rule alike; a read back to the
/// instructions head stays a head, and the read error still counts every token short.
#[test]
fn a_read_a_few_steps_short_of_the_previous_prompt_is_the_prefix() {
    let requests = vec![
        codex(0, 20_000, 3_072, 300, true),
        // The previous prompt rounds down to 19_968; read 7 steps (896 tokens) short of it.
        codex(3_000, 21_000, 19_072, 300, false),
        // 8 steps (1_024) short of floor128(21_000) = 20_992: still the prefix.
        codex(6_000, 22_000, 19_968, 300, false),
        // 9 steps (1_152) short of 21_888: a head.
        codex(9_000, 23_000, 20_736, 300, false),
        // Back to the instructions head.
        codex(12_000, 24_000, 3_072, 300, false),
    ];
    let t = trace("cx", "main", ThreadKind::Main, "gpt-5.1-codex", requests);
    let report = validate(&[t], &ValidateOptions::default());
    let recorded: Vec<ReadClass> = report.rows.iter().map(|r| r.recorded_class).collect();
    assert_eq!(
        recorded,
        vec![
            ReadClass::Head,
            ReadClass::Prefix,
            ReadClass::Prefix,
            ReadClass::Head,
            ReadClass::Head,
        ]
    );
    // Both predictors read the previous prompt (the model with its output) and so agree on the
    // two stale reads; the read error still counts the tokens they fell short.
    let agree = |side: fn(&muninn_core::validate::RequestRow) -> bool| {
        report.rows.iter().map(side).collect::<Vec<_>>()
    };
    assert_eq!(
        agree(|r| r.cache_model.agree),
        vec![false, true, true, false, false]
    );
    assert_eq!(
        agree(|r| r.naive.agree),
        vec![false, true, true, false, false]
    );
    assert!(report.model.all.abs_error >= 896 + 1_024);
}

/// Found in review: the prefix slack (eight steps) must not make a read of nothing, or a read
/// back to the shared instructions head that found nothing of the conversation, count as the
/// conversation's prefix while the conversation is still shorter than the slack.
#[test]
fn the_prefix_slack_never_covers_a_read_of_nothing_or_of_the_instructions_head() {
    // Each alone, so that the first has no instructions head known.
    let second_class = |requests: Vec<TraceRequest>| {
        let t = trace("cx", "main", ThreadKind::Main, "gpt-5.1-codex", requests);
        let report = validate(&[t], &ValidateOptions::default());
        (report.rows[1].reference, report.rows[1].recorded_class)
    };
    let nothing = vec![
        codex(0, 1_100, 0, 100, true),
        codex(3_000, 1_300, 0, 100, false),
    ];
    assert_eq!(second_class(nothing), (1_024, ReadClass::None));
    let head = vec![
        codex(0, 3_600, 3_072, 100, true),
        codex(3_000, 4_200, 3_072, 100, false),
    ];
    assert_eq!(second_class(head), (3_584, ReadClass::Head));
}
