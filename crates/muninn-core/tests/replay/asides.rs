//! A request on another, shorter context in the middle of a thread (an aside): the next request
//! is back on the thread's own prompt, so the dip is no compaction and adds nothing to the
//! conversation every plan replays.

use super::*;

/// Requests every 30 s on an OpenAI model, each adding 3,000 tokens to a 20,000-token prompt and
/// reading back the previous one; request `DIP` is sent on an 8,000-token prompt (4,096 of it
/// cached). With `stays`, the session goes on from that small prompt (an unmarked compaction);
/// otherwise the next request is back on the thread's prompt (an aside, as Codex 0.77 logs them).
fn dipped(dip: bool, stays: bool, compacted: bool) -> Trace {
    const DIP: usize = 6;
    let mut t = codex_trace(&[0, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30]);
    if !dip {
        return t;
    }
    let cut = t.requests[DIP].usage.prompt() - 8_000;
    for (i, r) in t.requests.iter_mut().enumerate().skip(DIP) {
        if i == DIP || stays {
            let read = if i == DIP {
                4_096
            } else {
                (r.usage.prompt() - cut - 3_000) / 128 * 128
            };
            r.usage.input = r.usage.prompt() - cut - read;
            r.usage.cache_read = read;
        }
        r.compacted = compacted && i == DIP;
    }
    t
}

fn prompts(t: &Trace) -> Vec<Tokens> {
    t.requests.iter().map(|r| r.usage.prompt()).collect()
}

#[test]
fn an_aside_adds_nothing_to_the_conversation() {
    let t = dipped(true, false, false);
    let p = prompts(&t);
    assert!(p[6] * 5 < p[5] * 4 && p[7] > p[5], "{p:?}");
    let (head, turns) = reconstruct(&t, Some(4_096));
    // The aside adds nothing, and the request after it adds what it added to the thread's last
    // prompt: the conversation ends as long as the recorded one (before, the dip's content and
    // the way back up were new tokens, 15,000 more than the thread ever held).
    assert_eq!(turns[6].delta, 0);
    assert_eq!(turns[7].delta, p[7] - p[5]);
    let total: Tokens = turns.iter().map(|t| t.delta).sum();
    assert_eq!(head + total, *p.last().unwrap());
}

#[test]
fn never_prices_an_aside_as_the_thread_without_it() {
    with_codex_config(|config| {
        let never = Plan::Online(Policy::Never);
        let mut largest: Tokens = 0;
        let with_aside = replay_trace(&dipped(true, false, false), never, config, &mut |s| {
            largest = largest.max(s.usage.prompt())
        });
        let without = replay_trace(&dipped(false, false, false), never, config, &mut |_| {});
        // No replayed prompt is longer than the longest the thread sent, and the aside, priced as
        // one more request on the thread, costs no more than the thread's own request there.
        let recorded = prompts(&dipped(true, false, false));
        assert!(largest <= *recorded.iter().max().unwrap(), "{largest}");
        assert!(
            with_aside.cost <= without.cost,
            "{with_aside:?} vs {without:?}"
        );
    });
}

#[test]
fn a_shrink_that_stays_or_is_marked_still_starts_a_segment() {
    // An unmarked compaction: the prompt stays small. The counterfactual did not compact, so the
    // small prompt's content is new and the conversation outgrows the recorded one.
    for (stays, compacted) in [(true, false), (false, true)] {
        let t = dipped(true, stays, compacted);
        let (head, turns) = reconstruct(&t, Some(4_096));
        assert_eq!(
            turns[6].delta,
            8_000 - head,
            "stays {stays}, compacted {compacted}"
        );
        let total: Tokens = turns.iter().map(|t| t.delta).sum();
        assert!(head + total > *prompts(&t).iter().max().unwrap());
    }
}
