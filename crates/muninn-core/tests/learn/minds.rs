//! What a Mind carries from session to session ([`replay_traces`]), against its definition:
//! each trace starts with the sum of what every trace of its Mind that *ended* before it began
//! added to the state it started with.

use super::{assumptions, price, session_at};
use muninn_core::cache::CacheRules;
use muninn_core::decide::Policy;
use muninn_core::learn::Learned;
use muninn_core::price::ModelPrice;
use muninn_core::replay::{
    Plan, ReplayConfig, RunTotals, Step, mind_of, replay_trace_learning, replay_traces,
};
use muninn_core::trace::Trace;
use proptest::prelude::*;

/// Every trace's totals and steps.
type Replayed = (Vec<RunTotals>, Vec<Vec<Step>>);

/// The definition, summed afresh for every trace: each Mind's traces in the order they began,
/// each starting from the lessons of those that ended before it began.
fn by_definition(priced: &[(&Trace, &ModelPrice)], plan: Plan) -> Replayed {
    let span = |t: &Trace| {
        let r = &t.requests;
        (
            r.first().map_or(i64::MIN, |q| q.at_ms),
            r.last().map_or(i64::MIN, |q| q.at_ms),
        )
    };
    let mut order: Vec<usize> = (0..priced.len()).collect();
    order.sort_by_key(|&i| (mind_of(priced[i].0), span(priced[i].0).0, i));
    let (a, rules) = (assumptions(), CacheRules::default());
    let mut totals = vec![RunTotals::default(); priced.len()];
    let mut steps = vec![Vec::new(); priced.len()];
    // (mind, end, lesson) of every trace replayed so far.
    let mut lessons = Vec::new();
    for i in order {
        let (trace, price) = priced[i];
        let (start, end) = span(trace);
        let known = lessons
            .iter()
            .filter(|(mind, ended, _)| *mind == mind_of(trace) && *ended < start)
            .fold(Learned::default(), |sum, (_, _, l)| sum + *l);
        let config = ReplayConfig {
            price,
            assumptions: &a,
            rules: &rules,
        };
        let mut learned = known;
        totals[i] = replay_trace_learning(trace, plan, &config, &mut learned, &mut |s| {
            steps[i].push(*s)
        });
        lessons.push((mind_of(trace), end, learned - known));
    }
    (totals, steps)
}

fn replayed(priced: &[(&Trace, &ModelPrice)], plan: Plan) -> Replayed {
    let mut steps = vec![Vec::new(); priced.len()];
    let totals = replay_traces(
        priced,
        plan,
        &assumptions(),
        &CacheRules::default(),
        &mut |i, s| steps[i].push(*s),
    );
    (totals, steps)
}

/// Idle gaps in seconds: warm, past a 5-minute cache, past an hour's.
fn gap() -> impl Strategy<Value = i64> {
    prop_oneof![Just(10), Just(240), Just(600), Just(7_200), 1i64..20_000]
}

/// A session: its Mind (one of three projects), when it begins (minutes into a three-day
/// window, so that sessions overlap, follow one another or begin together; or, drawn so, at the
/// instant the session before it ended, which has not ended *before* it began), its gaps and
/// growth. No gap at all is an empty trace.
fn sessions() -> impl Strategy<Value = Vec<Trace>> {
    let one = (
        0usize..3,
        0i64..3 * 24 * 60,
        proptest::collection::vec(gap(), 0..14),
        prop_oneof![Just(2_000u64), Just(6_000u64)],
        proptest::bool::weighted(0.3),
    );
    proptest::collection::vec(one, 1..12).prop_map(|drawn| {
        let mut traces: Vec<Trace> = Vec::new();
        for (k, (mind, minute, mut gaps, delta, follows)) in drawn.into_iter().enumerate() {
            if let Some(first) = gaps.first_mut() {
                *first = 0;
            }
            let mut t = session_at(["a", "b", "c"][mind], 0, 0, &gaps, delta);
            let first_at = t.requests.first().map_or(0, |r| r.at_ms);
            let previous_end = traces
                .last()
                .and_then(|p| p.requests.last())
                .map(|r| r.at_ms);
            let shift = match previous_end {
                Some(end) if follows => end - first_at,
                _ => minute * 60_000,
            };
            for r in &mut t.requests {
                r.at_ms += shift;
            }
            t.source = format!("{}/{k}.jsonl", ["a", "b", "c"][mind]);
            t.id = format!("{}-{k}", t.id);
            traces.push(t);
        }
        traces
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Carrying each lesson once (it joins what later traces know when the first trace that
    /// began after its end comes) replays every trace as summing all earlier lessons afresh for
    /// each did: the same steps and totals, under the default and the predictive policy.
    #[test]
    fn what_a_mind_carries_is_the_sum_of_the_sessions_that_ended_before(
        traces in sessions(),
    ) {
        let price = price();
        let priced: Vec<(&Trace, &ModelPrice)> = traces.iter().map(|t| (t, &price)).collect();
        for plan in [Plan::Online(Policy::SkiRental), Plan::Online(Policy::Predictive)] {
            prop_assert_eq!(replayed(&priced, plan), by_definition(&priced, plan), "{}", plan);
        }
    }
}
