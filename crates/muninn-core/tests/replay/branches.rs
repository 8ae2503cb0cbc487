//! Conversations of one thread alive at once (two terminals on one session, forks, rewinds):
//! priced apart, or kept in line, by whether the conversation a fork left goes on.

use super::*;

/// Two append-only conversations of one thread, A longer than B, their requests alternating
/// (B 15 s after each of A's): the thread a session resumed in two terminals writes. B's
/// requests carry `conversation` 7 and A's 0 when `marked`; the trace is sorted by time.
fn interleaved(marked: bool) -> (Trace, Trace, Trace) {
    let a = trace(
        &[
            (0, 60_000, true),
            (30, 900, false),
            (30, 700, true),
            (30, 800, false),
        ],
        Ttl::FiveMinutes,
    );
    let mut b = trace(
        &[
            (0, 20_000, true),
            (30, 500, false),
            (30, 600, true),
            (30, 400, false),
        ],
        Ttl::FiveMinutes,
    );
    for r in &mut b.requests {
        r.at_ms += 15_000;
        r.conversation = if marked { 7 } else { 0 };
    }
    let mut both = a.clone();
    both.requests.extend(b.requests.iter().copied());
    both.requests.sort_by_key(|r| r.at_ms);
    (both, a, b)
}

#[test]
fn two_conversations_alive_at_once_are_priced_apart() {
    // Read as one conversation, every switch from B back to A looks like A's whole lead in new
    // tokens, written and then carried: every plan pays for it. Apart, each is priced as its own
    // session — the first request of each as recorded.
    let (both, a, b) = interleaved(true);
    let assumptions = assumptions();
    for plan in [
        Plan::Online(Policy::Never),
        Plan::Online(Policy::SkiRental),
        Plan::Optimum,
    ] {
        let apart = cost(&a, plan, &assumptions) + cost(&b, plan, &assumptions);
        assert_eq!(cost(&both, plan, &assumptions), apart, "{plan}");
    }
    // Every request of the interleaved trace is priced once, under its own index (conversation
    // by conversation, so not in time order).
    let mut indices = Vec::new();
    replay(&both, Plan::Online(Policy::Never), &assumptions, &mut |s| {
        indices.push(s.index)
    });
    indices.sort_unstable();
    assert_eq!(indices, (0..both.requests.len()).collect::<Vec<_>>());
    // Unmarked, the same requests are one conversation, as before.
    let (unmarked, _, _) = interleaved(false);
    assert!(
        cost(&unmarked, Plan::Online(Policy::Never), &assumptions)
            > cost(&both, Plan::Online(Policy::Never), &assumptions)
    );
}

#[test]
fn a_fork_whose_origin_never_continues_stays_in_line() {
    // A rewind: the later requests fork from an earlier one and the conversation they left never
    // goes on. That is one conversation, priced as if nothing were marked.
    let mut t = trace(
        &[
            (0, 20_000, true),
            (30, 900, false),
            (30, 700, true),
            (30, 800, false),
        ],
        Ttl::FiveMinutes,
    );
    let unmarked = t.clone();
    for r in &mut t.requests[2..] {
        r.conversation = 9;
    }
    assert_eq!(
        muninn_core::replay::branches::branches(&t),
        vec![vec![0, 1, 2, 3]]
    );
    let a = assumptions();
    for plan in [Plan::Online(Policy::Never), Plan::Optimum] {
        assert_eq!(cost(&t, plan, &a), cost(&unmarked, plan, &a), "{plan}");
    }
}

/// The branches of a trace whose requests, 30 s apart, continue the conversations `ids`.
fn branches_of(ids: &[u64]) -> Vec<Vec<usize>> {
    let steps: Vec<_> = ids.iter().map(|_| (30, 500, true)).collect();
    let mut t = trace(&steps, Ttl::FiveMinutes);
    for (r, &c) in t.requests.iter_mut().zip(ids) {
        r.conversation = c;
    }
    muninn_core::replay::branches::branches(&t)
}

#[test]
fn forks_of_forks_fold_or_stay_apart_by_whether_their_origin_goes_on() {
    // A chain of rewinds, each leaving a conversation that never goes on: one conversation.
    assert_eq!(
        branches_of(&[0, 0, 5, 5, 6, 7, 7]),
        vec![(0..7).collect::<Vec<_>>()]
    );
    // Two terminals (5 forks from 0 and both go on), then a rewind in the second (6 leaves 5,
    // which never goes on): the second terminal's requests are one conversation.
    assert_eq!(
        branches_of(&[0, 5, 0, 5, 6, 0, 6]),
        vec![vec![0, 2, 5], vec![1, 3, 4, 6]]
    );
    // Three alive at once.
    assert_eq!(
        branches_of(&[0, 5, 6, 0, 5, 6]),
        vec![vec![0, 3], vec![1, 4], vec![2, 5]]
    );
    assert!(branches_of(&[]).is_empty());
}

#[test]
fn a_long_chain_of_rewinds_is_one_conversation() {
    // 13,000 requests, each a rewind of the one before: a new
    // conversation id every time, each folded into the one it left.
    let ids: Vec<u64> = (0..13_000).collect();
    assert_eq!(branches_of(&ids), vec![(0..13_000).collect::<Vec<_>>()]);
}

/// Two terminals, A (0) and B (5), and a rewind in B (6 forks from 5) taken while A answered
/// last: judged against A, which goes on, the rewind would be a third conversation and its first
/// request a cold write; judged against B, its true origin (`forked_from`), which never goes on,
/// it is B going back.
#[test]
fn a_rewind_is_judged_against_the_conversation_it_forked_from() {
    let ids = [0, 5, 0, 5, 0, 6, 0, 6];
    assert_eq!(branches_of(&ids).len(), 3, "by time alone");
    let steps: Vec<_> = ids.iter().map(|_| (30, 500, true)).collect();
    let mut t = trace(&steps, Ttl::FiveMinutes);
    for (r, &c) in t.requests.iter_mut().zip(&ids) {
        r.conversation = c;
    }
    t.requests[1].forked_from = Some(0);
    t.requests[5].forked_from = Some(5);
    assert_eq!(
        muninn_core::replay::branches::branches(&t),
        vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]
    );
}
