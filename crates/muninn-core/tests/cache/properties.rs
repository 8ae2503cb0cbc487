//! Property tests: random sessions (block sizes, 0–4 breakpoints in a valid TTL order, gaps,
//! edits between requests) through the model, checking what must hold for every request.

use super::*;
use proptest::sample::Index;

/// One request of a generated session, described relative to the request before it.
#[derive(Debug, Clone)]
struct Step {
    /// How many of the previous request's blocks are kept (an index into `0..=len`).
    keep: Index,
    /// A kept block whose content is edited, if any.
    edit: Option<Index>,
    /// Sizes of the new blocks appended after the kept ones.
    appended: Vec<Tokens>,
    /// Prompt tokens after the last checkpoint (sparse checkpoints leave some).
    tail: Tokens,
    /// Blocks carrying a breakpoint (repeats collapse, so 0 to 4 distinct).
    breakpoints: Vec<Index>,
    /// How many breakpoints, from the first, are 1h; the rest are 5m (the valid order).
    one_hour: usize,
    /// Milliseconds since the previous request.
    gap_ms: i64,
    /// Whether the request goes to [`OTHER_MODEL`] instead of [`MODEL`].
    other_model: bool,
}

/// A generated session: requests in time order, and the models' minimum cacheable size.
#[derive(Debug, Clone)]
struct Session {
    min_cacheable: Tokens,
    requests: Vec<(i64, Request)>,
}

fn step() -> impl Strategy<Value = Step> {
    let appended = prop_oneof![
        4 => prop::collection::vec(1..1500u64, 0..4),
        1 => prop::collection::vec(1..300u64, 18..24),
    ];
    let gap_ms = prop_oneof![
        0..MINUTE,
        5 * MINUTE - 2..5 * MINUTE + 2,
        4 * MINUTE..11 * MINUTE,
        HOUR - 2..HOUR + 2,
        0..2 * HOUR,
    ];
    (
        any::<Index>(),
        prop::option::of(any::<Index>()),
        appended,
        prop_oneof![Just(0u64), 0..500u64],
        prop::collection::vec(any::<Index>(), 0..=4),
        0..=4usize,
        gap_ms,
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(keep, edit, appended, tail, breakpoints, one_hour, gap_ms, other_model)| Step {
                keep,
                edit,
                appended,
                tail,
                breakpoints,
                one_hour,
                gap_ms,
                other_model,
            },
        )
}

fn session() -> impl Strategy<Value = Session> {
    (
        prop::sample::select(vec![1u64, 512, 1024, 4096]),
        prop::collection::vec(step(), 1..16),
    )
        .prop_map(|(min_cacheable, steps)| {
            // `(tokens, content)`; a fresh content number for every new or edited block.
            let mut blocks: Vec<(Tokens, u64)> = Vec::new();
            let mut next_content = 0u64;
            let mut fresh = || {
                next_content += 1;
                next_content
            };
            let mut now = T0;
            let mut requests = Vec::new();
            for step in steps {
                blocks.truncate(step.keep.index(blocks.len() + 1));
                if let Some(edit) = step.edit.filter(|_| !blocks.is_empty()) {
                    let i = edit.index(blocks.len());
                    blocks[i].1 = fresh();
                }
                blocks.extend(step.appended.iter().map(|&t| (t, fresh())));
                if blocks.is_empty() {
                    blocks.push((1, fresh()));
                }
                let marked: BTreeSet<usize> = step
                    .breakpoints
                    .iter()
                    .map(|i| i.index(blocks.len()))
                    .collect();
                let ttls: HashMap<usize, Ttl> = marked
                    .iter()
                    .enumerate()
                    .map(|(rank, &block)| {
                        let ttl = if rank < step.one_hour {
                            Ttl::OneHour
                        } else {
                            Ttl::FiveMinutes
                        };
                        (block, ttl)
                    })
                    .collect();
                let rendered: Vec<(Tokens, u64, Option<Ttl>)> = blocks
                    .iter()
                    .enumerate()
                    .map(|(i, &(tokens, content))| (tokens, content, ttls.get(&i).copied()))
                    .collect();
                let model = if step.other_model { OTHER_MODEL } else { MODEL };
                let mut request = Request::on(model, &rendered);
                request.total_tokens += step.tail;
                now += step.gap_ms;
                requests.push((now, request));
            }
            Session {
                min_cacheable,
                requests,
            }
        })
}

fn failed(error: CacheError) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

/// The tokens the provider reports as uncached input: everything after the last breakpoint, or
/// the whole prompt if that breakpoint's prefix is below the minimum.
fn after_last_breakpoint(request: &Request, min_cacheable: Tokens) -> Tokens {
    let cached = request
        .checkpoints
        .iter()
        .rev()
        .find(|cp| cp.breakpoint.is_some())
        .map_or(0, |cp| cp.tokens);
    if cached >= min_cacheable {
        request.total_tokens - cached
    } else {
        request.total_tokens
    }
}

proptest! {
    #[test]
    fn conservation_holds_for_every_request(session in session()) {
        let rules = CacheRules::default();
        let mut state = CacheState::new();
        for (now, request) in &session.requests {
            let o = state.apply(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?;
            prop_assert_eq!(o.uncached + o.write_5m + o.write_1h + o.read, request.total_tokens, "{:?}", o);
            prop_assert_eq!(o.uncached, after_last_breakpoint(request, session.min_cacheable), "{:?}", o);
        }
    }

    #[test]
    fn the_model_is_deterministic(session in session()) {
        let rules = CacheRules::default();
        let all: Vec<&Request> = session.requests.iter().map(|(_, r)| r).collect();
        let run = || -> Result<_, CacheError> {
            let mut state = CacheState::new();
            let mut outcomes = Vec::new();
            for (now, request) in &session.requests {
                outcomes.push(state.apply(&request.prompt(), *now, session.min_cacheable, &rules)?);
            }
            Ok((outcomes, entries(&state, &all)))
        };
        prop_assert_eq!(run().map_err(failed)?, run().map_err(failed)?);
    }

    #[test]
    fn predict_changes_nothing_and_apply_is_predict_then_commit_on_random_sessions(session in session()) {
        let rules = CacheRules::default();
        let all: Vec<&Request> = session.requests.iter().map(|(_, r)| r).collect();
        let mut applied = CacheState::new();
        let mut committed = CacheState::new();
        for (now, request) in &session.requests {
            let before = entries(&committed, &all);
            let prediction = committed.predict(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?;
            prop_assert_eq!(&entries(&committed, &all), &before);
            committed.commit(request.model, &prediction, *now, &rules);
            let outcome = applied.apply(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?;
            prop_assert_eq!(outcome, prediction.outcome);
            prop_assert_eq!(entries(&applied, &all), entries(&committed, &all));
        }
    }

    /// Whatever is live later was live earlier, so sending the same request sooner from the same
    /// state never reads less (and, the breakpoints being the same, leaves the same uncached).
    #[test]
    fn a_request_sent_sooner_never_reads_less(session in session()) {
        let rules = CacheRules::default();
        let mut state = CacheState::new();
        for (now, request) in &session.requests {
            let at = |t: i64| state.predict(&request.prompt(), t, session.min_cacheable, &rules).map(|p| p.outcome);
            let sooner = at(*now).map_err(failed)?;
            for delay in [1, MINUTE, 5 * MINUTE, HOUR] {
                let later = at(now + delay).map_err(failed)?;
                prop_assert!(sooner.read >= later.read, "{:?} then, {:?} {} ms later", sooner, later, delay);
                prop_assert_eq!(sooner.uncached, later.uncached);
            }
            state.apply(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?;
        }
    }

    /// Each breakpoint reads on its own; another breakpoint can only add a read and can only
    /// move the end of the cached prefix later.
    #[test]
    fn adding_a_breakpoint_never_reads_less_or_leaves_more_uncached(session in session()) {
        let rules = CacheRules::default();
        let mut state = CacheState::new();
        for (now, request) in &session.requests {
            let base = state.predict(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?.outcome;
            let count = request.checkpoints.iter().filter(|cp| cp.breakpoint.is_some()).count();
            if count < rules.max_breakpoints {
                for (i, checkpoint) in request.checkpoints.iter().enumerate() {
                    if checkpoint.breakpoint.is_some() {
                        continue;
                    }
                    // The next breakpoint's TTL keeps the order valid (5m if none follows).
                    let ttl = request.checkpoints[i..].iter().find_map(|cp| cp.breakpoint).unwrap_or(Ttl::FiveMinutes);
                    let mut more = request.clone();
                    more.checkpoints[i].breakpoint = Some(ttl);
                    let o = state.predict(&more.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?.outcome;
                    prop_assert!(o.read >= base.read && o.uncached <= base.uncached, "{:?} became {:?} with a breakpoint on block {}", base, o, i);
                }
            }
            state.apply(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?;
        }
    }

    #[test]
    fn a_request_never_reads_more_than_an_earlier_request_wrote(session in session()) {
        let rules = CacheRules::default();
        let mut state = CacheState::new();
        // Per model, the longest prefix an earlier request wrote (its read plus its writes).
        let mut longest_written: HashMap<&str, Tokens> = HashMap::new();
        for (now, request) in &session.requests {
            let o = state.apply(&request.prompt(), *now, session.min_cacheable, &rules).map_err(failed)?;
            let longest = longest_written.get(request.model).copied().unwrap_or(0);
            prop_assert!(o.read <= longest, "{:?} read more than the {} tokens written before", o, longest);
            if o.written() > 0 {
                let end = o.read + o.written();
                longest_written.entry(request.model).and_modify(|l| *l = (*l).max(end)).or_insert(end);
            }
        }
    }

    /// Pruning drops only dead entries, and dead entries only name misses: a small budget reads
    /// and writes exactly what an unbounded one does. Pruning runs when a request changes the
    /// state (it has a breakpoint at or above the minimum); after such a request a model holds no
    /// more than the budget or its live entries, whichever is larger. A request that caches
    /// nothing prunes nothing, so entries that die in between stay until the next such request.
    #[test]
    fn pruning_changes_no_read_or_write_and_bounds_the_state(session in session(), budget in 1usize..10) {
        let unbounded = CacheRules::default();
        let bounded = CacheRules { max_entries_per_model: budget, ..unbounded };
        // Every prefix the session sends: every entry either state can hold is one of them.
        let prefixes: BTreeSet<(&str, Fingerprint)> = session
            .requests
            .iter()
            .flat_map(|(_, r)| r.checkpoints.iter().map(|cp| (r.model, cp.fingerprint)))
            .collect();
        let mut reference = CacheState::new();
        let mut pruned = CacheState::new();
        for (now, request) in &session.requests {
            let expected = reference.apply(&request.prompt(), *now, session.min_cacheable, &unbounded).map_err(failed)?;
            let o = pruned.apply(&request.prompt(), *now, session.min_cacheable, &bounded).map_err(failed)?;
            prop_assert_eq!(CacheOutcome { miss: None, ..o }, CacheOutcome { miss: None, ..expected });
            let cached = request
                .checkpoints
                .iter()
                .any(|cp| cp.breakpoint.is_some() && cp.tokens >= session.min_cacheable);
            if cached {
                let model = request.model;
                let live = prefixes
                    .iter()
                    .filter(|(m, f)| *m == model && pruned.model(m).and_then(|c| c.get(*f)).is_some_and(|e| e.expires_at_ms > *now))
                    .count();
                let held = held(&pruned, model).unwrap_or(0);
                prop_assert!(held <= budget.max(live), "{} entries of {} held, {} live, budget {}", held, model, live, budget);
            }
        }
    }
}
