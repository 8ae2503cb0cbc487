//! Cache-model rules, one test per rule, and property tests.
//!
//! Each rule of `shared/reference/anthropic-prompt-caching.md` that `muninn_core::cache` models has
//! a test named for it, asserting whole [`CacheOutcome`]s. The property tests then drive random
//! sessions (random block sizes, 0–4 breakpoints in a valid TTL order, random gaps, random edits
//! between requests) through the model and check what must hold for every request.
//!
//! Requests are built block by block with [`checkpoints_from_blocks`]: a block is
//! `(tokens, content, breakpoint)`, and blocks with the same content are the same text, so two
//! prompts share a prefix exactly when their leading blocks have the same contents.

use muninn_core::cache::{
    CacheError, CacheOutcome, CacheRules, CacheState, Checkpoint, Entry, Fingerprint, ModelCache,
    Prompt, Ttl, checkpoints_from_blocks,
};
use muninn_core::ledger::MissCause;
use muninn_core::money::Tokens;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};

mod properties;

const MODEL: &str = "claude-sonnet-5";
const OTHER_MODEL: &str = "claude-opus-5-5";
/// Sonnet 5's minimum cacheable prompt.
const MIN: Tokens = 1024;
const T0: i64 = 1_770_000_000_000;
const SECOND: i64 = 1000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

const NO: Option<Ttl> = None;
const M5: Option<Ttl> = Some(Ttl::FiveMinutes);
const H1: Option<Ttl> = Some(Ttl::OneHour);

/// A request as the renderer would describe it: one checkpoint per block.
#[derive(Debug, Clone)]
struct Request {
    model: &'static str,
    checkpoints: Vec<Checkpoint>,
    total_tokens: Tokens,
}

impl Request {
    /// A request to [`MODEL`] made of `blocks`, `(tokens, content, breakpoint)`.
    fn new(blocks: &[(Tokens, u64, Option<Ttl>)]) -> Request {
        Request::on(MODEL, blocks)
    }

    fn on(model: &'static str, blocks: &[(Tokens, u64, Option<Ttl>)]) -> Request {
        let (checkpoints, total_tokens) = checkpoints_from_blocks(blocks);
        Request {
            model,
            checkpoints,
            total_tokens,
        }
    }

    fn prompt(&self) -> Prompt<'_> {
        Prompt {
            model: self.model,
            checkpoints: &self.checkpoints,
            total_tokens: self.total_tokens,
        }
    }

    /// The fingerprint of the prefix through block `block`.
    fn fingerprint(&self, block: usize) -> Fingerprint {
        self.checkpoints[block].fingerprint
    }
}

/// What `state` holds for every prefix of `requests` (live or dead), to compare states whole:
/// every entry the model can hold is keyed by one of these fingerprints.
fn entries(state: &CacheState, requests: &[&Request]) -> Vec<(&'static str, u32, Option<Entry>)> {
    requests
        .iter()
        .flat_map(|r| {
            r.checkpoints.iter().map(|cp| {
                let entry = state
                    .model(r.model)
                    .and_then(|c| c.get(cp.fingerprint))
                    .copied();
                (r.model, cp.block, entry)
            })
        })
        .collect()
}

fn held(state: &CacheState, model: &str) -> Option<usize> {
    state.model(model).map(ModelCache::len)
}

#[test]
fn a_hit_needs_the_exact_prefix_through_the_breakpoint() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let first = Request::new(&[(2000, 1, NO), (1000, 2, M5), (500, 3, NO)]);
    assert_eq!(
        state.apply(&first.prompt(), T0, MIN, &rules)?,
        CacheOutcome {
            uncached: 500,
            write_5m: 3000,
            miss: Some(MissCause::ColdStart),
            ..CacheOutcome::default()
        }
    );

    let later = T0 + MINUTE;
    // A change after the breakpoint: the prefix through it still matches, and growth is no miss.
    let tail_changed = Request::new(&[(2000, 1, NO), (1000, 2, M5), (700, 4, NO)]);
    assert_eq!(
        state
            .predict(&tail_changed.prompt(), later, MIN, &rules)?
            .outcome,
        CacheOutcome {
            uncached: 700,
            read: 3000,
            ..CacheOutcome::default()
        }
    );
    // A change in an earlier block changes every later prefix: nothing is read.
    let head_changed = Request::new(&[(2000, 9, NO), (1000, 2, M5), (500, 3, NO)]);
    let rewritten = CacheOutcome {
        uncached: 500,
        write_5m: 3000,
        miss: Some(MissCause::PrefixChange),
        ..CacheOutcome::default()
    };
    assert_eq!(
        state
            .predict(&head_changed.prompt(), later, MIN, &rules)?
            .outcome,
        rewritten
    );
    // The block carrying the breakpoint is part of the prefix too.
    let breakpoint_changed = Request::new(&[(2000, 1, NO), (1000, 8, M5), (500, 3, NO)]);
    assert_eq!(
        state
            .predict(&breakpoint_changed.prompt(), later, MIN, &rules)?
            .outcome,
        rewritten
    );
    Ok(())
}

#[test]
fn at_most_four_breakpoints_and_a_fifth_is_the_apis_400() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let four = Request::new(&[
        (2000, 1, M5),
        (2000, 2, M5),
        (2000, 3, M5),
        (2000, 4, M5),
        (2000, 5, NO),
    ]);
    assert_eq!(
        state.apply(&four.prompt(), T0, MIN, &rules)?,
        CacheOutcome {
            uncached: 2000,
            write_5m: 8000,
            miss: Some(MissCause::ColdStart),
            ..CacheOutcome::default()
        }
    );

    let five = Request::new(&[
        (2000, 1, M5),
        (2000, 2, M5),
        (2000, 3, M5),
        (2000, 4, M5),
        (2000, 5, M5),
    ]);
    let before = entries(&state, &[&five]);
    let refused = state.apply(&five.prompt(), T0 + MINUTE, MIN, &rules);
    let expected = CacheError::TooManyBreakpoints { max: 4, found: 5 };
    assert_eq!(refused, Err(expected.clone()));
    assert_eq!(
        expected.to_string(),
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
    // A refused request changes nothing (the API answers 400 before touching the cache).
    assert_eq!(entries(&state, &[&five]), before);
    Ok(())
}

#[test]
fn a_1h_breakpoint_after_a_5m_one_is_refused() {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let misordered = Request::new(&[(2000, 1, M5), (2000, 2, NO), (2000, 3, H1)]);
    assert_eq!(
        state.apply(&misordered.prompt(), T0, MIN, &rules),
        Err(CacheError::TtlOrder { block: 2 })
    );
    assert_eq!(held(&state, MODEL), None);
}

#[test]
fn a_1h_breakpoint_before_a_5m_one_is_fine_and_each_span_is_written_at_the_ttl_closing_it()
-> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let request = Request::new(&[(1500, 1, H1), (1000, 2, NO), (800, 3, M5), (200, 4, NO)]);
    // Tokens 0..1500 are closed by the 1h breakpoint, 1500..3300 by the 5m one, the rest uncached.
    assert_eq!(
        state.apply(&request.prompt(), T0, MIN, &rules)?,
        CacheOutcome {
            uncached: 200,
            write_5m: 1800,
            write_1h: 1500,
            miss: Some(MissCause::ColdStart),
            ..CacheOutcome::default()
        }
    );
    assert_eq!(
        [request.fingerprint(0), request.fingerprint(2)].map(|f| state.expiry(MODEL, f)),
        [Some(T0 + HOUR), Some(T0 + 5 * MINUTE)]
    );
    Ok(())
}

/// The walk checks the breakpoint's own boundary and the 20 boundaries before it: from a
/// breakpoint on block `b`, an entry on block `b - 20` is read and one on `b - 21` is not. (The
/// reference says "walks back up to 20 blocks"; whether the provider's 20 include the breakpoint's
/// own block is not settled by it — this test pins the model's reading.)
#[test]
fn the_lookback_reaches_an_entry_20_blocks_back_but_not_21() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    state.apply(&Request::new(&[(2000, 1, M5)]).prompt(), T0, MIN, &rules)?;
    // The head (block 0) grown by `n` blocks of 100 tokens, with the only breakpoint on the last.
    let grown = |n: u64| {
        let mut blocks = vec![(2000, 1, NO)];
        blocks.extend((1..=n).map(|i| (100, 100 + i, if i == n { M5 } else { NO })));
        Request::new(&blocks)
    };
    let later = T0 + MINUTE;
    assert_eq!(
        state
            .predict(&grown(20).prompt(), later, MIN, &rules)?
            .outcome,
        CacheOutcome {
            write_5m: 2000,
            read: 2000,
            ..CacheOutcome::default()
        }
    );
    // Out of reach, the head is rewritten. The model has no cause for "beyond the lookback", so
    // it names the miss a prefix change.
    assert_eq!(
        state
            .predict(&grown(21).prompt(), later, MIN, &rules)?
            .outcome,
        CacheOutcome {
            write_5m: 4100,
            miss: Some(MissCause::PrefixChange),
            ..CacheOutcome::default()
        }
    );

    // Block indices, not the number of checkpoints listed, measure the distance: the replay
    // engine lists only a few boundaries of a long prompt.
    let head = Checkpoint {
        breakpoint: None,
        ..grown(0).checkpoints[0]
    };
    let sparse = |block: u32| {
        [
            head,
            Checkpoint {
                block,
                tokens: 4000,
                fingerprint: 0x5eed + u64::from(block),
                breakpoint: M5,
            },
        ]
    };
    let reached = sparse(20);
    let unreached = sparse(21);
    assert_eq!(
        [&reached[..], &unreached[..]].map(|checkpoints| {
            let prompt = Prompt {
                model: MODEL,
                checkpoints,
                total_tokens: 4000,
            };
            state
                .predict(&prompt, later, MIN, &rules)
                .map(|p| p.outcome)
        }),
        [
            Ok(CacheOutcome {
                write_5m: 2000,
                read: 2000,
                ..CacheOutcome::default()
            }),
            Ok(CacheOutcome {
                write_5m: 4000,
                miss: Some(MissCause::PrefixChange),
                ..CacheOutcome::default()
            }),
        ]
    );
    Ok(())
}

#[test]
fn writes_happen_only_at_breakpoints() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let first = Request::new(&[(2000, 1, NO), (1000, 2, M5), (3000, 3, NO)]);
    // The 3000 tokens after the last breakpoint are uncached input, not written.
    assert_eq!(
        state.apply(&first.prompt(), T0, MIN, &rules)?,
        CacheOutcome {
            uncached: 3000,
            write_5m: 3000,
            miss: Some(MissCause::ColdStart),
            ..CacheOutcome::default()
        }
    );
    // The prefix through block 0 and the whole prompt were sent, but only the breakpoint's
    // prefix was written.
    assert_eq!(
        [0, 1, 2].map(|b| state.expiry(MODEL, first.fingerprint(b))),
        [None, Some(T0 + 5 * MINUTE), None]
    );
    // So a later request with its breakpoint on block 0 finds nothing to read.
    let head_only = Request::new(&[(2000, 1, M5), (50, 4, NO)]);
    assert_eq!(
        state
            .predict(&head_only.prompt(), T0 + MINUTE, MIN, &rules)?
            .outcome,
        CacheOutcome {
            uncached: 50,
            write_5m: 2000,
            miss: Some(MissCause::PrefixChange),
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn the_ttl_runs_from_the_request_start_and_a_hit_refreshes_it() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let request = Request::new(&[(2000, 1, M5), (10, 2, NO)]);
    let head = request.fingerprint(0);
    state.apply(&request.prompt(), T0, MIN, &rules)?;
    assert_eq!(state.expiry(MODEL, head), Some(T0 + 5 * MINUTE));

    let hit = CacheOutcome {
        uncached: 10,
        read: 2000,
        ..CacheOutcome::default()
    };
    let refreshed_at = T0 + 4 * MINUTE + 59 * SECOND;
    assert_eq!(
        state.apply(&request.prompt(), refreshed_at, MIN, &rules)?,
        hit
    );
    assert_eq!(
        state.expiry(MODEL, head),
        Some(T0 + 9 * MINUTE + 59 * SECOND)
    );
    // Alive until the last millisecond before the refreshed expiry, dead at it.
    let new_expiry = refreshed_at + 5 * MINUTE;
    assert_eq!(
        state
            .predict(&request.prompt(), new_expiry - 1, MIN, &rules)?
            .outcome,
        hit
    );
    assert_eq!(
        state
            .predict(&request.prompt(), new_expiry, MIN, &rules)?
            .outcome,
        CacheOutcome {
            uncached: 10,
            write_5m: 2000,
            miss: Some(MissCause::TtlExpiry),
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

/// A request applied out of order — at a time before that of one already applied, as a server
/// applying requests that arrived together may — reads what the later one wrote and refreshes it,
/// but never shortens its life. Its refresh used to overwrite the expiry the later request set
/// with one counted from its own, earlier time.
#[test]
fn a_request_applied_out_of_order_never_shortens_an_entrys_life() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let request = Request::new(&[(2000, 1, M5), (10, 2, NO)]);
    state.apply(&request.prompt(), T0 + 4 * MINUTE, MIN, &rules)?;
    let hit = CacheOutcome {
        uncached: 10,
        read: 2000,
        ..CacheOutcome::default()
    };
    assert_eq!(state.apply(&request.prompt(), T0, MIN, &rules)?, hit);
    assert_eq!(
        state.expiry(MODEL, request.fingerprint(0)),
        Some(T0 + 9 * MINUTE)
    );
    Ok(())
}

/// An entry is live while `now < expires_at` and dead from `now == expires_at` on: a 5m entry
/// written at `t` is read at `t + 5m − 1ms` and missed at exactly `t + 5m` (likewise for 1h).
#[test]
fn an_entry_is_dead_at_exactly_its_expiry() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    for (ttl, life) in [(Ttl::FiveMinutes, 5 * MINUTE), (Ttl::OneHour, HOUR)] {
        let mut state = CacheState::new();
        let request = Request::new(&[(2000, 1, Some(ttl))]);
        state.apply(&request.prompt(), T0, MIN, &rules)?;
        let outcomes = [T0 + life - 1, T0 + life].map(|now| {
            state
                .predict(&request.prompt(), now, MIN, &rules)
                .map(|p| p.outcome)
        });
        let (write_5m, write_1h) = match ttl {
            Ttl::FiveMinutes => (2000, 0),
            Ttl::OneHour => (0, 2000),
        };
        assert_eq!(
            outcomes,
            [
                Ok(CacheOutcome {
                    read: 2000,
                    ..CacheOutcome::default()
                }),
                Ok(CacheOutcome {
                    write_5m,
                    write_1h,
                    miss: Some(MissCause::TtlExpiry),
                    ..CacheOutcome::default()
                }),
            ],
            "{ttl:?}"
        );
        // The dead entry is remembered (for miss attribution) and `expiry` still reports it.
        assert_eq!(state.expiry(MODEL, request.fingerprint(0)), Some(T0 + life));
    }
    Ok(())
}

#[test]
fn a_prefix_below_the_models_minimum_is_neither_written_nor_read() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let one_short = Request::new(&[(MIN - 1, 1, M5), (10, 2, NO)]);
    let uncached = CacheOutcome {
        uncached: MIN + 9,
        ..CacheOutcome::default()
    };
    assert_eq!(state.apply(&one_short.prompt(), T0, MIN, &rules)?, uncached);
    assert_eq!(
        state.apply(&one_short.prompt(), T0 + MINUTE, MIN, &rules)?,
        uncached
    );
    assert_eq!(held(&state, MODEL), None);

    let exactly = Request::new(&[(MIN, 1, M5), (10, 2, NO)]);
    assert_eq!(
        state.apply(&exactly.prompt(), T0 + 2 * MINUTE, MIN, &rules)?,
        CacheOutcome {
            uncached: 10,
            write_5m: MIN,
            miss: Some(MissCause::ColdStart),
            ..CacheOutcome::default()
        }
    );
    assert_eq!(
        state.apply(&exactly.prompt(), T0 + 3 * MINUTE, MIN, &rules)?,
        CacheOutcome {
            uncached: 10,
            read: MIN,
            ..CacheOutcome::default()
        }
    );
    // The minimum gates reads as well: under a larger minimum the live entry is not read.
    assert_eq!(
        state
            .predict(&exactly.prompt(), T0 + 4 * MINUTE, 2 * MIN, &rules)?
            .outcome,
        CacheOutcome {
            uncached: MIN + 10,
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn the_cache_is_per_model() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let blocks = [(3000, 1, M5), (100, 2, NO)];
    let written = CacheOutcome {
        uncached: 100,
        write_5m: 3000,
        miss: Some(MissCause::ColdStart),
        ..CacheOutcome::default()
    };
    assert_eq!(
        state.apply(&Request::on(MODEL, &blocks).prompt(), T0, MIN, &rules)?,
        written
    );
    assert_eq!(
        state.apply(
            &Request::on(OTHER_MODEL, &blocks).prompt(),
            T0 + MINUTE,
            MIN,
            &rules
        )?,
        written
    );
    assert_eq!(
        state.apply(
            &Request::on(MODEL, &blocks).prompt(),
            T0 + 2 * MINUTE,
            MIN,
            &rules
        )?,
        CacheOutcome {
            uncached: 100,
            read: 3000,
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn a_model_with_nothing_cached_misses_with_cold_start() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    // A request too short to cache leaves the model cold.
    state.apply(&Request::new(&[(500, 1, M5)]).prompt(), T0, MIN, &rules)?;
    assert_eq!(
        state.apply(
            &Request::new(&[(2000, 2, M5)]).prompt(),
            T0 + MINUTE,
            MIN,
            &rules
        )?,
        CacheOutcome {
            write_5m: 2000,
            miss: Some(MissCause::ColdStart),
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn an_expired_prefix_misses_with_ttl_expiry() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let request = Request::new(&[(2000, 1, NO), (1000, 2, M5), (100, 3, NO)]);
    state.apply(&request.prompt(), T0, MIN, &rules)?;
    assert_eq!(
        state.apply(&request.prompt(), T0 + 7 * MINUTE, MIN, &rules)?,
        CacheOutcome {
            uncached: 100,
            write_5m: 3000,
            miss: Some(MissCause::TtlExpiry),
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn a_live_head_before_an_expired_tail_reads_the_head_and_misses_with_ttl_expiry()
-> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    let request = Request::new(&[(2000, 1, H1), (3000, 2, M5), (100, 3, NO)]);
    state.apply(&request.prompt(), T0, MIN, &rules)?;
    assert_eq!(
        state.apply(&request.prompt(), T0 + 10 * MINUTE, MIN, &rules)?,
        CacheOutcome {
            uncached: 100,
            write_5m: 3000,
            read: 2000,
            miss: Some(MissCause::TtlExpiry),
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn a_changed_prefix_misses_with_prefix_change() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let mut state = CacheState::new();
    state.apply(
        &Request::new(&[(2000, 1, M5), (100, 2, NO)]).prompt(),
        T0,
        MIN,
        &rules,
    )?;
    assert_eq!(
        state.apply(
            &Request::new(&[(2000, 3, M5), (100, 2, NO)]).prompt(),
            T0 + MINUTE,
            MIN,
            &rules
        )?,
        CacheOutcome {
            uncached: 100,
            write_5m: 2000,
            miss: Some(MissCause::PrefixChange),
            ..CacheOutcome::default()
        }
    );
    Ok(())
}

#[test]
fn predict_changes_nothing_and_apply_is_predict_then_commit() -> Result<(), CacheError> {
    let rules = CacheRules::default();
    let session = [
        (
            T0,
            Request::new(&[(2000, 1, H1), (1000, 2, M5), (100, 3, NO)]),
        ),
        (
            T0 + MINUTE,
            Request::new(&[(2000, 1, H1), (1000, 2, NO), (100, 3, NO), (900, 4, M5)]),
        ),
        (
            T0 + 20 * MINUTE,
            Request::new(&[(2000, 1, H1), (1000, 2, NO), (100, 3, M5)]),
        ),
        (
            T0 + 21 * MINUTE,
            Request::on(OTHER_MODEL, &[(2000, 1, H1), (5, 2, NO)]),
        ),
    ];
    let all: Vec<&Request> = session.iter().map(|(_, r)| r).collect();
    let mut applied = CacheState::new();
    let mut committed = CacheState::new();
    for (now, request) in &session {
        let before = entries(&committed, &all);
        let prediction = committed.predict(&request.prompt(), *now, MIN, &rules)?;
        assert_eq!(entries(&committed, &all), before);
        committed.commit(request.model, &prediction, *now, &rules);
        assert_eq!(
            applied.apply(&request.prompt(), *now, MIN, &rules)?,
            prediction.outcome
        );
        assert_eq!(entries(&applied, &all), entries(&committed, &all));
    }
    Ok(())
}

/// Pruning runs when a model holds more than `max_entries_per_model` entries and drops only dead
/// ones, oldest expiry first, down to half the budget. So the count stays within the budget as
/// long as the live entries fit in it, and live entries beyond the budget are all kept.
#[test]
fn pruning_bounds_the_entries_and_never_drops_a_live_one() -> Result<(), CacheError> {
    let rules = CacheRules {
        max_entries_per_model: 8,
        ..CacheRules::default()
    };
    let mut state = CacheState::new();
    // One new 5m prefix a minute: at most 5 are live at once.
    let requests: Vec<Request> = (0..100)
        .map(|i| Request::new(&[(2000, 1000 + i, M5)]))
        .collect();
    for (i, request) in requests.iter().enumerate() {
        let now = T0 + i as i64 * MINUTE;
        state.apply(&request.prompt(), now, MIN, &rules)?;
        assert!(
            held(&state, MODEL) <= Some(8),
            "{:?} entries after request {i}",
            held(&state, MODEL)
        );
        let live: Vec<Option<i64>> = (i.saturating_sub(4)..=i)
            .map(|j| state.expiry(MODEL, requests[j].fingerprint(0)))
            .collect();
        let expected: Vec<Option<i64>> = (i.saturating_sub(4)..=i)
            .map(|j| Some(T0 + j as i64 * MINUTE + 5 * MINUTE))
            .collect();
        assert_eq!(live, expected, "after request {i}");
    }

    // Twelve prefixes written at once are all live: all are kept, over the budget.
    let mut crowded = CacheState::new();
    for request in &requests[..12] {
        crowded.apply(&request.prompt(), T0, MIN, &rules)?;
    }
    assert_eq!(held(&crowded, MODEL), Some(12));
    Ok(())
}

#[test]
fn a_breakpoint_inside_a_read_prefix_gets_no_free_one_hour_entry() {
    use muninn_core::cache::{CacheRules, CacheState, Prompt, Ttl, checkpoints_from_blocks};
    let rules = CacheRules::default();
    let t0 = 1_000_000_000;
    let mut state = CacheState::new();
    let first = [(2_000, 1, None), (1_000, 2, Some(Ttl::FiveMinutes))];
    let (cps, total) = checkpoints_from_blocks(&first);
    let prompt = Prompt {
        model: "m",
        checkpoints: &cps,
        total_tokens: total,
    };
    state.apply(&prompt, t0, 1024, &rules).expect("valid");
    // One minute later a 1h breakpoint appears on the first block: everything is read, nothing
    // written, and the new entry lives only as long as the 5m entry that was read.
    let second = [
        (2_000, 1, Some(Ttl::OneHour)),
        (1_000, 2, Some(Ttl::FiveMinutes)),
    ];
    let (cps, total) = checkpoints_from_blocks(&second);
    let prompt = Prompt {
        model: "m",
        checkpoints: &cps,
        total_tokens: total,
    };
    let outcome = state
        .apply(&prompt, t0 + 60_000, 1024, &rules)
        .expect("valid");
    assert_eq!((outcome.read, outcome.written()), (3_000, 0));
    let later = state
        .apply(&prompt, t0 + 30 * 60_000, 1024, &rules)
        .expect("valid");
    assert_eq!(later.read, 0, "a 1h entry nobody paid for must not exist");
    assert_eq!(later.write_1h, 2_000);
}
