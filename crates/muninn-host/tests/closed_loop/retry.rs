//! A failed turn's backoff across an idle decision point. While the runner waits to try a
//! refused turn again it takes no idle decision (for either role): the provider is refusing or
//! failing, a ping would meet the same refusal, and the pending turn is itself the next use of
//! the cache. The ledger must say so, or a replay would ask those points and ping where the host
//! did not.

use super::{Act, Harness, assert_holds};
use crate::runtime::{T0, ledger};
use muninn_core::closed_loop::verify;
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;

/// The tail's TTL and how long before its end the decider is asked.
const TTL_MS: i64 = 300_000;
const DECIDE_BEFORE_MS: i64 = 30_000;

/// Runs `acts` on a fresh harness up to `end` (ms after `T0`); the ledger, and how many
/// requests the provider refused.
async fn run(acts: &[Act], end: i64) -> (Vec<LedgerRow>, usize) {
    let mut h = Harness::new("").await;
    for act in acts {
        h.apply(act).await;
    }
    h.run_until(T0 + end).await;
    let refused =
        h.w.sim
            .requests()
            .iter()
            .filter(|r| r.status == 429)
            .count();
    (ledger(&h.w).await, refused)
}

/// The last row of `role` before `before` (ms after `T0`).
fn last_before<'a>(rows: &'a [LedgerRow], role: &str, before: i64) -> &'a LedgerRow {
    rows.iter()
        .rfind(|r| r.role == role && r.at_ms < T0 + before)
        .expect("a row")
}

/// Whether `role` pinged its tail in `(from, to)` (Unix ms).
fn pinged(rows: &[LedgerRow], role: &str, from: i64, to: i64) -> bool {
    rows.iter().any(|r| {
        r.role == role && r.decision.starts_with("ping:") && r.at_ms > from && r.at_ms < to
    })
}

/// Runs `warm_up` to `end` twice. First followed by a quiet wait, the control: `role` must
/// ping its tail at the decision point after its last row before `at` (ms into the workload),
/// or the backoff would cross nothing. Then followed by a delivery refused with a
/// `retry-after` of `retry_after_ms`: refused once. Returns that last row's time and the
/// refused run's rows.
async fn refused_after(
    warm_up: Vec<Act>,
    retry_after_ms: i64,
    role: &str,
    at: i64,
    end: i64,
) -> (i64, Vec<LedgerRow>) {
    let mut control = warm_up.clone();
    control.push(Act::Wait { ms: 400_000 });
    let (rows, none) = run(&control, end).await;
    assert_eq!(none, 0);
    let last = last_before(&rows, role, at).at_ms;
    let point = last + TTL_MS - DECIDE_BEFORE_MS;
    assert!(
        pinged(&rows, role, point - 1, last + TTL_MS),
        "the workload must make the host ping the {role} where the backoff will be"
    );
    let mut refused = warm_up;
    refused.push(Act::Refused {
        room: 0,
        words: 40,
        retry_after_ms,
    });
    let (rows, refusals) = run(&refused, end).await;
    assert_eq!(refusals, 1);
    (last, rows)
}

/// The Persona's delivery is refused with a `retry-after` longer than what is left of its
/// tail: the backoff crosses the tail's decision point and its expiry. Without the refusal (the
/// same workload, the delivery not sent) the host pings there, so the replay would too; with it
/// the host did nothing until the retry, and the ledger replays exactly, decisions and cost.
#[tokio::test]
async fn a_persona_backoff_across_its_tail_decision_point_replays_exactly() {
    let mut warm_up = Vec::new();
    for round in 0..8u16 {
        warm_up.push(Act::Deliver {
            room: (round % 2) as u8,
            words: 30 + round * 3,
        });
        warm_up.push(Act::Wait { ms: 255_000 });
    }
    let end = 8 * 255_000 + 3 * 3_600_000;
    let (last, rows) = refused_after(warm_up, 120_000, "persona", 8 * 255_000, end).await;
    assert!(!pinged(&rows, "persona", last, last + 255_000 + 120_000));
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

/// The Persona's delivery is refused while the Self's tail is warm: the backoff crosses the
/// Self's decision point and expiry, which the runner, retrying the Persona, does not ask. The
/// Self's later rows replay exactly.
#[tokio::test]
async fn a_persona_backoff_across_the_selfs_tail_decision_point_replays_exactly() {
    let mut warm_up = Vec::new();
    for round in 0..8u16 {
        warm_up.push(Act::Brief {
            words: 200 + round * 20,
        });
        warm_up.push(Act::Wait { ms: 255_000 });
    }
    warm_up.pop();
    warm_up.push(Act::Wait { ms: 200_000 });
    let at = 7 * 255_000 + 200_000;
    let end = at + 3 * 3_600_000;
    let (last, rows) = refused_after(warm_up, 300_000, "self", at, end).await;
    assert!(!pinged(&rows, "self", last, T0 + at + 300_000));
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert_holds(&report, &rows);
}

/// The cut attempts of a ledger: `attempt_failed` rows, each with the row after it of the same
/// role (its retry, or what the role sent next).
fn cut_rows(rows: &[LedgerRow]) -> Vec<(&LedgerRow, &LedgerRow)> {
    rows.iter()
        .enumerate()
        .filter(|(_, r)| r.decision == "attempt_failed")
        .map(|(i, cut)| {
            let next = rows[i + 1..]
                .iter()
                .find(|r| r.role == cut.role)
                .expect("a row after the cut attempt");
            (cut, next)
        })
        .collect()
}

/// Replays `acts` in closed loop and checks it holds exactly — every decision, and the cost to
/// the micro-dollar — with `cuts` cut attempts on the ledger, each followed by a retry that
/// read what it wrote. Returns the rows.
async fn replays_with_cuts(acts: &[Act], cuts: usize) -> Vec<LedgerRow> {
    let (report, rows) = super::closed_loop("", acts).await;
    assert_holds(&report, &rows);
    assert_eq!(report.recorded_cost, report.replayed_cost, "{report:#?}");
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    let found = cut_rows(&rows);
    assert_eq!(found.len(), cuts, "{rows:#?}");
    for (cut, retry) in found {
        assert!(cut.cost.0 > 0);
        assert_eq!(
            cut.usage.prompt(),
            retry.usage.prompt(),
            "{cut:#?}\n{retry:#?}"
        );
        assert_eq!(
            retry.usage.cache_read,
            cut.usage.cache_read + cut.usage.written()
        );
    }
    rows
}

/// Rounds of mail with a cut at `at` (the round whose turn's first attempt is cut).
fn mail_with_a_cut(at: u16, after_deltas: u32, mid_stream: bool) -> Vec<Act> {
    let mut acts = Vec::new();
    for round in 0..5u16 {
        if round == at {
            acts.push(Act::Cut {
                after_deltas,
                mid_stream,
            });
        }
        acts.push(Act::Deliver {
            room: (round % 2) as u8,
            words: 30 + round * 5,
        });
        acts.push(Act::Wait { ms: 200_000 });
    }
    acts
}

/// A Persona turn whose first attempt the provider cut after `message_start` — before content,
/// after some, by an `error` event — is retried: the cut attempt is a ledger row before the
/// retry, which read what it wrote, and the ledger replays exactly, decisions and cost. Before,
/// the cut attempt was not on the ledger: the replay priced the retry as the write the cut
/// attempt had made (the retry's row priced apart, the replayed cost above the recorded one).
#[tokio::test]
async fn a_persona_turn_cut_after_message_start_is_a_row_and_replays_exactly() {
    for (after_deltas, mid_stream) in [(1, false), (0, false), (2, true)] {
        replays_with_cuts(&mail_with_a_cut(2, after_deltas, mid_stream), 1).await;
    }
}

/// The Mind's very first request is cut: the row of the cut attempt is in the segment its retry
/// begins (priced there by a replay), and the segment begins once, with the retry.
#[tokio::test]
async fn a_cut_first_request_of_a_segment_replays_exactly() {
    let rows = replays_with_cuts(&mail_with_a_cut(0, 1, false), 1).await;
    let segments: Vec<bool> = rows
        .iter()
        .filter(|r| r.role == "persona")
        .take(2)
        .map(|r| r.decided.as_ref().unwrap().segment.is_some())
        .collect();
    // The cut attempt carries the segment for the cache; the retry begins it.
    assert_eq!(segments, [true, true]);
}

/// Three Self briefs a minute apart, the second's request cut after one delta.
fn a_cut_self_brief() -> Vec<Act> {
    vec![
        Act::Brief { words: 200 },
        Act::Wait { ms: 60_000 },
        Act::Cut {
            after_deltas: 1,
            mid_stream: false,
        },
        Act::Brief { words: 220 },
        Act::Wait { ms: 60_000 },
        Act::Brief { words: 240 },
        Act::Wait { ms: 200_000 },
    ]
}

/// A Self brief whose request is cut: the brief fails (told to the Persona), the cut attempt's
/// row waits for the Self's next record, and the ledger replays exactly.
#[tokio::test]
async fn a_cut_self_request_is_a_row_and_replays_exactly() {
    let (report, rows) = super::closed_loop("", &a_cut_self_brief()).await;
    assert_holds(&report, &rows);
    assert_eq!(report.recorded_cost, report.replayed_cost, "{report:#?}");
    let cut = cut_rows(&rows);
    assert_eq!(cut.len(), 1, "{rows:#?}");
    assert_eq!(cut[0].0.role, "self");
}

/// The workload proptest shrank a failure to: a Persona turn after a long gap, planned with a
/// clear of old tool results, is cut before content; its retry, decided again, goes without the
/// clear. The cut attempt's row says it was sent with one, and the retry is priced on the
/// uncleared prompt — not as extending the cleared one the attempt wrote (the retry's row was
/// priced apart: 3,789 tokens read where the provider read 2,941).
#[tokio::test]
async fn a_cut_attempt_sent_with_a_clear_and_retried_without_replays_exactly() {
    let acts = vec![
        Act::Deliver { room: 0, words: 3 },
        Act::Deliver { room: 0, words: 3 },
        Act::Refused {
            room: 0,
            words: 3,
            retry_after_ms: 2_000,
        },
        Act::Deliver { room: 0, words: 3 },
        Act::Wait { ms: 3_300_000 },
        Act::Cut {
            after_deltas: 0,
            mid_stream: false,
        },
        Act::Deliver { room: 0, words: 3 },
    ];
    let (report, rows) = super::closed_loop("refresh = 'compact'", &acts).await;
    assert_holds(&report, &rows);
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    let cut = cut_rows(&rows);
    assert_eq!(cut.len(), 1, "{rows:#?}");
    let (attempt, retry) = cut[0];
    let action = |r: &LedgerRow| r.decided.as_ref().and_then(|d| d.action);
    assert_eq!(action(attempt), Some(muninn_core::decide::Action::Mask));
    assert_ne!(action(retry), Some(muninn_core::decide::Action::Mask));
}

/// Another workload proptest shrank a failure to: a cut attempt, then its retry refused long
/// enough (a 429 asking for 310 s) that the turn is decided again as a refresh into a new
/// segment. The new segment is priced from its own start, not from the ends of the segment the
/// attempt was cut in (its first request, and the ping after it, were priced apart).
#[tokio::test]
async fn a_cut_attempt_whose_retry_opens_a_new_segment_replays_exactly() {
    let acts = vec![
        Act::Deliver { room: 0, words: 40 },
        Act::Deliver { room: 0, words: 3 },
        Act::Cut {
            after_deltas: 0,
            mid_stream: false,
        },
        Act::Refused {
            room: 0,
            words: 3,
            retry_after_ms: 310_000,
        },
        Act::Deliver { room: 0, words: 3 },
    ];
    let (report, rows) = super::closed_loop("", &acts).await;
    assert_holds(&report, &rows);
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    let cut = cut_rows(&rows);
    assert_eq!(cut.len(), 1, "{rows:#?}");
    assert_ne!(cut[0].0.segment, cut[0].1.segment);
}

/// The cut attempt's request in the counterfactual replay's trace (`muninn replay`, `ledger`
/// input): `role`'s thread, the request mapped from the first `attempt_failed` row of `rows`,
/// and the one after it (its retry).
fn cut_and_retry_mapped(
    rows: &[LedgerRow],
    role: &str,
) -> (
    muninn_core::trace::TraceRequest,
    muninn_core::trace::TraceRequest,
) {
    let traces = muninn_import::ledger_traces(rows);
    let thread = traces
        .iter()
        .find(|t| t.trace.thread == role)
        .expect("the role's thread");
    let cut = rows
        .iter()
        .position(|r| r.role == role && r.decision == "attempt_failed")
        .expect("a cut attempt");
    let i = thread.rows.iter().position(|&r| r == cut).unwrap();
    (thread.trace.requests[i], thread.trace.requests[i + 1])
}

/// A cut attempt is the first try of the request it attempted, so in a counterfactual replay
/// it opens the turn that request opened: a Persona turn's cut first attempt, and a Self
/// brief's cut first request, are mapped as turn boundaries, where every policy (and the
/// optimum) decides the arrival — refresh included — before paying the attempt. Before, the
/// cut row was written `boundary: false` and mapped inside the previous turn, after the idle
/// gap: an online policy could not refresh before it and paid it on the old prefix, however
/// cold, and decided the arrival only at the retry, with the prefix just rewritten.
#[tokio::test]
async fn a_cut_attempt_opens_the_turn_it_attempted_in_a_counterfactual_replay() {
    let rows = replays_with_cuts(&mail_with_a_cut(2, 1, false), 1).await;
    let (cut, retry) = cut_and_retry_mapped(&rows, "persona");
    assert!(cut.boundary, "{cut:?}");
    assert!(retry.boundary, "the retry was decided again: {retry:?}");
    let (report, rows) = super::closed_loop("", &a_cut_self_brief()).await;
    assert_holds(&report, &rows);
    let (cut, _) = cut_and_retry_mapped(&rows, "self");
    assert!(cut.boundary, "{cut:?}");
}
