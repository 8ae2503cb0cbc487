//! Replay engine, policies and the hindsight optimum.
//!
//! The optimum is checked against brute force: on small traces every admissible segmentation is
//! executed by the same engine and the cheapest must not beat the dynamic program's plan. On random
//! traces no online policy may beat the optimum.

use muninn_core::cache::{CacheRules, Ttl};
use muninn_core::decide::Policy;
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::optimum::OptimumPlan;
use muninn_core::price::PriceTable;
use muninn_core::replay::{
    Assumptions, Plan, ReplayConfig, RunTotals, Step, StepKind, Turn, execute_plan, optimum_plan,
    reconstruct, replay_trace,
};
use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use proptest::prelude::*;

mod asides;
mod branches;
mod compaction;

const HEAD: Tokens = 12_000;

/// A trace of an append-only session: request i comes `gap_s` seconds after the previous one and
/// adds `delta` tokens; the recorded usage is a warm append (read the previous cached prefix, write
/// the rest but a 3-token uncached tail). No request carries tool results.
fn trace(steps: &[(i64, Tokens, bool)], ttl: Ttl) -> Trace {
    let steps: Vec<_> = steps.iter().map(|&(g, d, b)| (g, d, b, 0, 0)).collect();
    crate::optimum_mask::trace(&steps, ttl)
}

fn assumptions() -> Assumptions {
    Assumptions {
        head_tokens: Some(HEAD),
        rehydrate_tokens: 2_000,
        min_segment_requests: 2,
        ..Assumptions::default()
    }
}

/// The assumption variants the properties range over: a head under its own 1h breakpoint, and
/// memory written as it happens (no flush request).
fn variant(head_one_hour: bool, memory_as_it_happens: bool) -> Assumptions {
    let mut a = assumptions();
    if head_one_hour {
        a.head_ttl = Some(Ttl::OneHour);
    }
    if memory_as_it_happens {
        a.flush_prompt_tokens = 0;
        a.flush_output_tokens = Some(0);
    }
    a
}

/// Runs `f` with the replay configuration of `t`'s model (embedded prices, default cache rules)
/// under `a`.
fn with_config<R>(t: &Trace, a: &Assumptions, f: impl FnOnce(&ReplayConfig<'_>) -> R) -> R {
    let prices = PriceTable::embedded();
    let price = prices.model(&t.model).expect("priced");
    let rules = CacheRules::default();
    f(&ReplayConfig {
        price,
        assumptions: a,
        rules: &rules,
    })
}

fn replay(t: &Trace, plan: Plan, a: &Assumptions, on_step: &mut dyn FnMut(&Step)) -> RunTotals {
    with_config(t, a, |config| replay_trace(t, plan, config, on_step))
}

fn cost(t: &Trace, plan: Plan, a: &Assumptions) -> MicroUsd {
    replay(t, plan, a, &mut |_| {}).cost
}

/// What a run costs when the head's layers change (`changes[j]`: head tokens, from its end, that
/// request j made new): every refresh that read the head also writes, at the head's TTL, the
/// largest change since its segment began instead of reading it — as the Persona workload charges.
fn charged_cost(
    t: &Trace,
    a: &Assumptions,
    changes: &[Tokens],
    run: impl FnOnce(&ReplayConfig<'_>, &mut dyn FnMut(&Step)),
) -> MicroUsd {
    let head_ttl = a.head_ttl_for(a.ttl.unwrap_or_else(|| t.whole_trace_ttl()));
    with_config(t, a, |config| {
        let price = config.price;
        let mut total = MicroUsd::ZERO;
        let mut since: Tokens = 0;
        run(config, &mut |step| {
            total += step.cost;
            if step.kind != StepKind::Request {
                return;
            }
            // The first request meets the layers as they are: a change there is no change.
            if step.index > 0 {
                since = since.max(changes.get(step.index).copied().unwrap_or(0));
            }
            if step.refreshed {
                let changed = std::mem::take(&mut since);
                if step.usage.cache_read >= HEAD {
                    total = total + MicroUsd::of(changed, price.write(head_ttl))
                        - MicroUsd::of(changed, price.read);
                }
            }
        });
        total
    })
}

/// The optimum told of the head's layer changes, executed and charged for them.
fn optimum_charged(t: &Trace, a: &Assumptions, changes: &[Tokens]) -> MicroUsd {
    charged_cost(t, a, changes, |config, on_step| {
        let plan = optimum_plan(t, config, changes);
        execute_plan(t, plan, config, on_step);
    })
}

/// Every segmentation of a small trace that `admissible(turns, head, starts)` accepts, executed
/// by the same engine (and charged for the head's layer changes, if any); the cheapest, if any was
/// admissible.
fn cheapest_admissible(
    t: &Trace,
    a: &Assumptions,
    changes: &[Tokens],
    admissible: impl Fn(&[Turn], Tokens, &[bool]) -> bool,
) -> Option<MicroUsd> {
    let (head, turns) = reconstruct(t, a.head_tokens);
    let n = turns.len();
    (0u32..(1 << (n - 1)))
        .map(|mask| {
            (0..n)
                .map(|j| j == 0 || mask & (1 << (j - 1)) != 0)
                .collect::<Vec<bool>>()
        })
        .filter(|starts| admissible(&turns, head, starts))
        .map(|starts| {
            let plan = OptimumPlan::for_starts(starts, changes);
            charged_cost(t, a, changes, |config, on_step| {
                execute_plan(t, plan, config, on_step);
            })
        })
        .min()
}

/// Every admissible segmentation of a small trace, executed; the cheapest.
fn brute_force_min(t: &Trace, a: &Assumptions, changes: &[Tokens]) -> MicroUsd {
    cheapest_admissible(t, a, changes, |turns, _, starts| {
        let n = turns.len();
        // Admissible: starts at boundaries; every segment followed by a refresh is long enough.
        (1..n).all(|j| !starts[j] || turns[j].boundary) && {
            let mut ok = true;
            let mut s = 0;
            for (j, &start) in starts.iter().enumerate().skip(1) {
                if start {
                    ok &= j - s >= a.min_segment_requests as usize;
                    s = j;
                }
            }
            ok
        }
    })
    .unwrap_or(MicroUsd(i64::MAX))
}

/// Like [`brute_force_min`], with a ceiling: a segment must fit under it, and a refresh inside a
/// tool loop is admissible only when the ceiling forces it.
fn brute_force_min_with_ceiling(t: &Trace, a: &Assumptions, ceiling: Tokens) -> Option<MicroUsd> {
    cheapest_admissible(t, a, &[], |turns, head, starts| {
        let n = turns.len();
        let mut len = vec![0u64; n + 1];
        for j in 1..=n {
            len[j] = len[j - 1] + turns[j - 1].delta;
        }
        let prompt = |s: usize, e: usize| {
            let base = if s == 1 {
                head
            } else {
                head + a.rehydrate_tokens
            };
            base + len[e] - len[s - 1]
        };
        let mut s = 1;
        let mut ok = true;
        for e in 1..=n {
            ok &= prompt(s, e) <= ceiling;
            if e < n && starts[e] {
                let next = e + 1;
                let forced = prompt(s, next) > ceiling;
                ok &= (turns[e].boundary || forced) && e + 1 - s >= a.min_segment_requests as usize;
                s = next;
            }
        }
        ok
    })
}

fn steps_strategy(max: usize) -> impl Strategy<Value = Vec<(i64, Tokens, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => 1i64..240, 2 => 240i64..1_200, 1 => 1_200i64..9_000],
            prop_oneof![3 => 50u64..3_000, 1 => 3_000u64..40_000],
            prop::bool::weighted(0.6),
        ),
        2..max,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn the_optimum_matches_brute_force_on_small_traces(
        steps in steps_strategy(9),
        one_hour in any::<bool>(),
        head_one_hour in any::<bool>(),
        memory_as_it_happens in any::<bool>(),
    ) {
        let ttl = if one_hour { Ttl::OneHour } else { Ttl::FiveMinutes };
        let t = trace(&steps, ttl);
        let a = variant(head_one_hour, memory_as_it_happens);
        let optimum = cost(&t, Plan::Optimum, &a);
        let brute = brute_force_min(&t, &a, &[]);
        // The program chooses per-gap keep-warm lines at a representative prefix; allow 0.1%.
        prop_assert!(optimum.0 <= brute.0 + brute.0 / 1000 + 5, "optimum {optimum} > brute force {brute}");
    }

    #[test]
    fn the_optimum_sees_the_head_change_charge(
        steps in steps_strategy(9),
        changes in prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => Just(HEAD / 4), 1 => Just(HEAD)], 9),
        one_hour in any::<bool>(),
        memory_as_it_happens in any::<bool>(),
    ) {
        // A head under its own 1h breakpoint whose layers change (a quarter of it, or all of it)
        // at random requests: every refresh that reads the head writes what changed since its
        // segment began. The program is told the changes; brute force executes and charges every
        // admissible segmentation.
        let ttl = if one_hour { Ttl::OneHour } else { Ttl::FiveMinutes };
        let t = trace(&steps, ttl);
        let a = variant(true, memory_as_it_happens);
        let changes = &changes[..steps.len()];
        let optimum = optimum_charged(&t, &a, changes);
        let brute = brute_force_min(&t, &a, changes);
        prop_assert!(optimum.0 <= brute.0 + brute.0 / 1000 + 5, "optimum {optimum} > brute force {brute}");
    }

    #[test]
    fn the_optimum_matches_brute_force_under_a_ceiling(steps in steps_strategy(10), ceiling in 30_000u64..80_000) {
        let t = trace(&steps, Ttl::FiveMinutes);
        let a = Assumptions { ceiling_tokens: Some(ceiling), ..assumptions() };
        // Only traces where every single request fits under the ceiling after a refresh.
        let (_, turns) = reconstruct(&t, a.head_tokens);
        prop_assume!(turns.iter().all(|x| HEAD + a.rehydrate_tokens + x.delta <= ceiling));
        if let Some(brute) = brute_force_min_with_ceiling(&t, &a, ceiling) {
            let optimum = cost(&t, Plan::Optimum, &a);
            prop_assert!(optimum.0 <= brute.0 + brute.0 / 1000 + 5, "optimum {optimum} > brute force {brute}");
        }
    }

    #[test]
    fn no_online_policy_beats_the_optimum(
        steps in steps_strategy(80),
        one_hour in any::<bool>(),
        head_one_hour in any::<bool>(),
        memory_as_it_happens in any::<bool>(),
    ) {
        let ttl = if one_hour { Ttl::OneHour } else { Ttl::FiveMinutes };
        let t = trace(&steps, ttl);
        let a = variant(head_one_hour, memory_as_it_happens);
        let optimum = cost(&t, Plan::Optimum, &a);
        for plan in Plan::all() {
            if matches!(plan, Plan::Recorded | Plan::Optimum) {
                continue;
            }
            let c = cost(&t, plan, &a);
            prop_assert!(c.0 + c.0 / 1000 + 5 >= optimum.0, "{plan} {c} < optimum {optimum}");
        }
    }

    #[test]
    fn no_online_policy_beats_the_optimum_with_head_changes(
        steps in steps_strategy(60),
        changes in prop::collection::vec(prop_oneof![6 => Just(0u64), 1 => Just(HEAD / 4), 1 => Just(HEAD)], 60),
        one_hour in any::<bool>(),
    ) {
        let ttl = if one_hour { Ttl::OneHour } else { Ttl::FiveMinutes };
        let t = trace(&steps, ttl);
        let a = variant(true, true);
        let changes = &changes[..steps.len()];
        let optimum = optimum_charged(&t, &a, changes);
        for plan in Plan::all() {
            if matches!(plan, Plan::Recorded | Plan::Optimum) {
                continue;
            }
            let c = charged_cost(&t, &a, changes, |config, on_step| {
                replay_trace(&t, plan, config, on_step);
            });
            prop_assert!(c.0 + c.0 / 1000 + 5 >= optimum.0, "{plan} {c} < optimum {optimum}");
        }
    }

    #[test]
    fn every_replayed_request_conserves_tokens(steps in steps_strategy(40)) {
        let t = trace(&steps, Ttl::FiveMinutes);
        let a = assumptions();
        let prices = PriceTable::embedded();
        let price = prices.model(&t.model).expect("priced");
        let rules = CacheRules::default();
        let config = ReplayConfig { price, assumptions: &a, rules: &rules };
        let (head, turns) = reconstruct(&t, a.head_tokens);
        for plan in Plan::all() {
            let mut requests = 0;
            replay_trace(&t, plan, &config, &mut |step| {
                if step.kind == StepKind::Request { requests += 1; }
                assert_eq!(step.cost, price.cost(&step.usage));
            });
            prop_assert_eq!(requests, turns.len());
        }
        prop_assert_eq!(head, HEAD);
    }
}

#[test]
fn recorded_prices_exactly_what_was_paid() {
    let t = trace(
        &[(0, 5_000, true), (30, 800, false), (400, 900, true)],
        Ttl::FiveMinutes,
    );
    let a = assumptions();
    let prices = PriceTable::embedded();
    let price = prices.model(&t.model).expect("priced");
    let expected: MicroUsd = t.requests.iter().map(|r| price.cost(&r.usage)).sum();
    assert_eq!(cost(&t, Plan::Recorded, &a), expected);
}

#[test]
fn a_warm_append_only_session_replays_as_recorded() {
    // All gaps within the TTL, `never`: the engine's reads and writes equal the recorded ones
    // (apart from the recorded uncached tail, which it carries as uncached input).
    let t = trace(
        &[
            (0, 5_000, true),
            (30, 800, false),
            (60, 900, true),
            (10, 400, false),
        ],
        Ttl::FiveMinutes,
    );
    let a = assumptions();
    let mut usages = Vec::new();
    replay(&t, Plan::Online(Policy::Never), &a, &mut |s| {
        usages.push(s.usage)
    });
    let recorded: Vec<Usage> = t.requests.iter().map(|r| r.usage).collect();
    for (got, want) in usages.iter().zip(&recorded) {
        assert_eq!(got.prompt(), want.prompt());
        assert_eq!(got.cache_read, want.cache_read);
    }
}

fn gappy_steps() -> Vec<(i64, Tokens, bool)> {
    let mut steps = vec![(0, 150_000, true)];
    steps.extend((0..5).map(|_| (20, 200, false)));
    steps.push((15 * 60, 300, true)); // 15 minutes
    steps.extend((0..5).map(|_| (20, 200, false)));
    steps.push((5 * 3600, 300, true)); // 5 hours
    steps
}

#[test]
fn ski_rental_keeps_warm_through_a_short_gap_and_lets_a_long_one_expire() {
    // Memory as large as the prefix: restarting never pays, so this is the pure rent-or-buy rule.
    let t = trace(&gappy_steps(), Ttl::FiveMinutes);
    let a = Assumptions {
        rehydrate_tokens: 150_000,
        ..assumptions()
    };
    let mut pings_before = [0u32; 16];
    let mut head_pings_before = [0u32; 16];
    let totals = replay(&t, Plan::Online(Policy::SkiRental), &a, &mut |s| {
        if s.kind == StepKind::Ping {
            if s.usage.cache_read > HEAD {
                pings_before[s.index] += 1;
            } else {
                head_pings_before[s.index] += 1;
            }
        }
    });
    // 15 minutes at TTL 5m, deciding 30 s before expiry: pings at 4.5, 9 and 13.5 minutes.
    assert_eq!(pings_before[6], 3);
    assert_eq!(head_pings_before[6], 0);
    // 5 hours: pings while their spend stays within one cold-wake penalty (w − r)·P, i.e.
    // 3.45 / 0.3 ≈ 11 pings of 0.3·P each, then the tail is let go, and the head with it: the
    // head shares the tail's 5-minute TTL, and those pings kept it too, for as much as one
    // rewrite of it, (w − r)·H (`SessionView::head_rent`; 11 head-only pings more before).
    assert_eq!(pings_before[12], 11);
    assert_eq!(head_pings_before[12], 0);
    assert_eq!(totals.flushes, 0);
    assert_eq!(totals.refreshes, 0);
    // Renting through the 5-hour gap was wasted, so here ski-rental pays a little more than
    // `never`; its guarantee is the bound against the optimum, which pings only the short gap.
    let optimum = cost(&t, Plan::Optimum, &a);
    assert!(
        totals.cost.0 <= 2 * optimum.0,
        "{} vs optimum {optimum}",
        totals.cost
    );
}

#[test]
fn ski_rental_flushes_before_expiry_when_a_restart_will_be_cheaper() {
    // Small memory: at a long gap, flushing while warm and restarting cold from head + memory beats
    // both renting for hours and rewriting 150k tokens.
    let t = trace(&gappy_steps(), Ttl::FiveMinutes);
    let a = assumptions();
    let totals = replay(&t, Plan::Online(Policy::SkiRental), &a, &mut |_| {});
    // One flush and restart, at the 15-minute gap; after it the prefix is small, so at the
    // 5-hour gap a restart no longer pays and the cache is simply let go.
    assert_eq!(totals.flushes, 1, "{totals:?}");
    assert_eq!(totals.refreshes, 1, "{totals:?}");
    let never = cost(&t, Plan::Online(Policy::Never), &a);
    let optimum = cost(&t, Plan::Optimum, &a);
    assert!(totals.cost < never);
    assert!(totals.cost.0 <= 2 * optimum.0);
}

#[test]
fn ski_rental_refreshes_once_growth_has_paid_for_a_rebuild() {
    // Fast, warm turns that each add 5k tokens: the read excess soon pays for a rebuild.
    let steps: Vec<_> = (0..60)
        .map(|i| (if i == 0 { 0 } else { 20 }, 5_000, true))
        .collect();
    let t = trace(&steps, Ttl::FiveMinutes);
    let a = assumptions();
    let totals = replay(&t, Plan::Online(Policy::SkiRental), &a, &mut |_| {});
    assert!(totals.refreshes >= 2, "{totals:?}");
    let never = cost(&t, Plan::Online(Policy::Never), &a);
    let optimum = cost(&t, Plan::Optimum, &a);
    assert!(totals.cost < never);
    // The growth rule's guarantee: within 2× of the optimum.
    assert!(
        totals.cost.0 <= 2 * optimum.0,
        "{} vs optimum {optimum}",
        totals.cost
    );
}

#[test]
fn the_ceiling_forces_a_refresh_even_inside_a_tool_loop() {
    let steps: Vec<_> = (0..30)
        .map(|i| (if i == 0 { 0 } else { 10 }, 8_000, i == 0))
        .collect();
    let t = trace(&steps, Ttl::FiveMinutes);
    let a = Assumptions {
        ceiling_tokens: Some(100_000),
        ..assumptions()
    };
    for plan in [
        Plan::Online(Policy::Never),
        Plan::Online(Policy::SkiRental),
        Plan::Optimum,
    ] {
        let mut max_prompt = 0;
        let totals = replay(&t, plan, &a, &mut |s| {
            if s.kind == StepKind::Request {
                max_prompt = max_prompt.max(s.usage.prompt());
            }
        });
        assert!(max_prompt <= 100_000, "{plan}: {max_prompt}");
        assert!(totals.refreshes >= 2, "{plan}: {totals:?}");
    }
}

#[test]
fn rebuild_refreshes_at_every_boundary_after_the_minimum_segment() {
    let steps: Vec<_> = (0..12)
        .map(|i| (if i == 0 { 0 } else { 60 }, 1_000, true))
        .collect();
    let t = trace(&steps, Ttl::FiveMinutes);
    let a = Assumptions {
        min_segment_requests: 1,
        ..assumptions()
    };
    let totals = replay(&t, Plan::Online(Policy::Rebuild), &a, &mut |_| {});
    assert_eq!(totals.refreshes, 11);
    assert_eq!(totals.flushes, 11);
}

#[test]
fn policies_parse_and_print() {
    for s in [
        "ski-rental",
        "predictive",
        "rebuild",
        "never",
        "threshold:0.8",
        "ceiling:300000",
        "keepalive:3",
    ] {
        let p: Policy = s.parse().expect("parses");
        assert_eq!(p.to_string(), s);
    }
    assert!("threshold".parse::<Policy>().is_err());
    assert!("threshold:1.5".parse::<Policy>().is_err());
    assert!("sometimes".parse::<Policy>().is_err());
    assert_eq!("optimum".parse::<Plan>(), Ok(Plan::Optimum));
    assert_eq!("recorded".parse::<Plan>(), Ok(Plan::Recorded));
}

/// A Codex-like trace on an OpenAI model: every request read back the previous prompt, some
/// after eight idle minutes (inside OpenAI's retention, past Anthropic's 5m TTL).
fn codex_trace(gaps_s: &[i64]) -> Trace {
    let mut at = 1_800_000_000_000i64;
    let mut prompt: Tokens = 20_000;
    let mut requests = Vec::new();
    for (i, gap) in gaps_s.iter().enumerate() {
        at += gap * 1000;
        let read = if i == 0 { 0 } else { prompt / 128 * 128 };
        prompt += 3_000;
        requests.push(TraceRequest {
            at_ms: at,
            usage: Usage {
                input: prompt - read,
                cache_read: read,
                output: 300,
                ..Usage::default()
            },
            boundary: true,
            ..TraceRequest::default()
        });
    }
    Trace {
        id: "cx/main/gpt-5-codex".into(),
        session: "cx".into(),
        thread: "main".into(),
        kind: ThreadKind::Main,
        model: "gpt-5-codex".into(),
        source: "test".into(),
        requests,
    }
}

/// The replay's configuration for an OpenAI model (gpt-5-codex, a 4,096-token head).
fn with_codex_config<R>(f: impl FnOnce(&ReplayConfig<'_>) -> R) -> R {
    let prices = PriceTable::embedded();
    let a = Assumptions {
        head_tokens: Some(4_096),
        ..Assumptions::default()
    };
    let rules = CacheRules::default();
    f(&ReplayConfig {
        price: prices.model("gpt-5-codex").unwrap(),
        assumptions: &a,
        rules: &rules,
    })
}

/// On OpenAI's automatic cache no plan pings (the provider has no TTL to extend), a prefix
/// survives the provider's retention rather than a 5m tier, and a write costs no premium.
#[test]
fn an_openai_trace_replays_under_openais_cache() {
    with_codex_config(|config| {
        let price = config.price;
        let t = codex_trace(&[0, 30, 480, 30, 480, 30, 3_600, 30]);
        for plan in Plan::all() {
            let mut steps: Vec<Step> = Vec::new();
            let totals = replay_trace(&t, plan, config, &mut |s| steps.push(*s));
            assert_eq!(
                totals.pings, 0,
                "{plan}: no keep-warm on an automatic cache"
            );
            if plan == Plan::Online(Policy::Never) {
                let requests: Vec<&Step> = steps
                    .iter()
                    .filter(|s| s.kind == StepKind::Request)
                    .collect();
                // Eight minutes idle: still cached (1,800 s retention); an hour: cold, head and all
                // (a replay models one session: no other keeps the head warm).
                assert!(requests[2].usage.cache_read > 20_000, "{:?}", requests[2]);
                assert_eq!(requests[6].usage.cache_read, 0, "{:?}", requests[6]);
                // Writes are priced as plain input (no premium).
                assert_eq!(price.write_5m, price.input);
                // After the first (priced as recorded), each request caches its whole prompt
                // rounded down to 128 tokens: less than a step is left uncached.
                assert!(
                    requests[1..].iter().all(|s| s.usage.input < 128),
                    "{requests:?}"
                );
            }
        }
    })
}

/// A keep-warm ping pays the output the backend's pings generate: none with `max_tokens: 0`
/// (the Anthropic backend's default), one token with `max_tokens: 1` — in the replay's steps
/// and in its total.
#[test]
fn pings_are_priced_at_the_backends_ping_output() {
    let t = trace(&gappy_steps(), Ttl::FiveMinutes);
    let price = PriceTable::embedded().model(&t.model).unwrap().clone();
    let run = |ping_output_tokens: Tokens| {
        let a = Assumptions {
            rehydrate_tokens: 150_000,
            ping_output_tokens,
            ..assumptions()
        };
        let mut outputs = Vec::new();
        let totals = replay(&t, Plan::Online(Policy::SkiRental), &a, &mut |s| {
            if s.kind == StepKind::Ping {
                outputs.push(s.usage.output);
            }
        });
        (totals, outputs)
    };
    let (zero, zero_outputs) = run(0);
    let (one, one_outputs) = run(1);
    assert!(!zero_outputs.is_empty());
    assert!(zero_outputs.iter().all(|&o| o == 0), "{zero_outputs:?}");
    assert!(one_outputs.iter().all(|&o| o == 1), "{one_outputs:?}");
    // The same decisions (one output token does not move a break-even here), each ping one
    // output token cheaper.
    assert_eq!(zero.pings, one.pings);
    assert_eq!(
        one.cost.0 - zero.cost.0,
        MicroUsd::of(one.pings, price.output).0
    );
    assert_eq!(Assumptions::default().ping_output_tokens, 0);
}

/// The `mask` action's price: the clearing request reads the prefix cached before the clear and
/// writes the rest; it pays back once the later warm requests' smaller reads (r·C each) have
/// covered its rewrite premium, w·(P − C − R₀) − r·(P − R₀) — the closed form, checked against
/// the function that prices the two requests' usage.
#[test]
fn a_mask_pays_back_after_its_break_even_requests() {
    use muninn_core::mask::{MaskedRequest, mask_break_even, masked_usage, unmasked_usage};
    let price = PriceTable::embedded()
        .model("claude-opus-5-5")
        .unwrap()
        .clone();
    let (p, delta, c, r0) = (100_000u64, 1_000u64, 30_000u64, 20_000u64);
    let request = MaskedRequest {
        uncleared_tokens: p + delta,
        kept_tokens: 25_000,
        cleared_tokens: c,
        cached_before_clear: r0,
        ttl: Ttl::FiveMinutes,
        output: 0,
    };
    let masked = masked_usage(&request);
    assert_eq!(masked.cache_read, r0);
    assert_eq!(masked.cache_write_5m, p + delta - c - r0);
    assert_eq!(unmasked_usage(&request, p).cache_write_5m, delta);
    let w = price.write_5m;
    let r = price.read;
    let extra = MicroUsd::of(p - c - r0, w).0 - MicroUsd::of(p - r0, r).0;
    let each = MicroUsd::of(c, r).0;
    let n = mask_break_even(&request, p, &price).unwrap();
    assert_eq!(
        n as i64,
        (extra + each - 1) / each,
        "extra {extra}, each {each}"
    );
    assert!(n > 0);
    // Nothing cached before the clear: a dearer rewrite, a later break-even.
    let cold = MaskedRequest {
        cached_before_clear: 0,
        ..request
    };
    assert!(mask_break_even(&cold, p, &price).unwrap() > n);
    // Nothing cleared: it never pays.
    let nothing = MaskedRequest {
        cleared_tokens: 0,
        ..request
    };
    assert_eq!(mask_break_even(&nothing, p, &price), None);
}

/// `replay --by kind` keys its rows by `ThreadKind::as_str`: the serialized name, whatever the
/// `Debug` output says.
#[test]
fn a_thread_kinds_name_is_its_serialized_form() {
    for kind in [
        ThreadKind::Main,
        ThreadKind::Subagent,
        ThreadKind::Compaction,
        ThreadKind::Mind,
    ] {
        assert_eq!(
            serde_json::to_value(kind).unwrap(),
            serde_json::Value::from(kind.as_str())
        );
    }
    assert_eq!(ThreadKind::Subagent.as_str(), "subagent");
}

/// `--head-ttl 1h` on a trace the client wrote at 5 minutes: the first request, which every plan
/// pays as recorded, pays the part of the head it wrote at the hour's price, since the cache model
/// keeps that head alive for the hour from there. It was priced at the recorded 5 minutes, which
/// gave every plan an hour's head for a 5-minute write. The same tokens, at the plan's tiers; with
/// the head at the session's TTL nothing moves.
#[test]
fn a_head_under_a_longer_ttl_than_the_client_wrote_pays_the_longer_write_at_the_first_request() {
    let t = trace(
        &[(0, 40_000, true), (20, 500, false), (20 * 60, 300, true)],
        Ttl::FiveMinutes,
    );
    let first = |a: &Assumptions| {
        let mut first = None;
        replay(&t, Plan::Online(Policy::SkiRental), a, &mut |s| {
            if s.kind == StepKind::Request && s.index == 0 {
                first = Some(s.usage);
            }
        });
        first.expect("the first request is priced")
    };
    let session = assumptions();
    let hour = Assumptions {
        head_ttl: Some(Ttl::OneHour),
        ..assumptions()
    };
    let (u, v) = (first(&hour), first(&session));
    assert_eq!(v, t.requests[0].usage, "as recorded");
    assert_eq!(u.cache_write_1h, HEAD, "{u:?}");
    assert_eq!(
        u.cache_write_5m + u.cache_write_1h,
        v.cache_write_5m,
        "{u:?} {v:?}"
    );
    assert_eq!(
        (u.cache_read, u.input, u.output),
        (v.cache_read, v.input, v.output)
    );
}
