//! The prompt-window guard: a batch whose prompt cannot fit the model's window is never sent —
//! not under a spend cap, not without one — and its deliveries stay queued, with the reason in
//! the step's error (which the run loop shows as the Mind's activity and logs).

use crate::runtime::{mind, post, runner, set_cap, spent, world};
use muninn_host::runtime::RuntimeError;

#[tokio::test]
async fn a_prompt_beyond_the_window_is_not_sent_and_the_delivery_is_kept() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    // About 2.4M tokens of text in one batch (the API bounds a delivery far below this; the
    // store does not, and a batch may gather many): twelve times a 200k window.
    let huge = "the quick brown fox jumps over the lazy dog ".repeat(220_000);
    post(&w, "e1", "#swarm", "ari", &huge).await;
    // A $5 cap in force: the guard stops it before any pricing is needed.
    set_cap(&w, Some(5_000_000)).await;
    let error = r.step().await.unwrap_err();
    let RuntimeError::PromptTooLarge {
        prompt,
        max_output,
        window,
    } = error
    else {
        panic!("expected PromptTooLarge, got {error}");
    };
    assert!(prompt > window, "{prompt} ≤ {window}");
    assert!(max_output > 0);
    let message = error.to_string();
    assert!(message.contains("context window"), "{message}");
    assert!(w.sim.requests().is_empty(), "nothing was sent");
    assert_eq!(spent(&w).await, 0);
    let pending = w
        .host
        .store
        .pending_deliveries("vala", 0, 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "the delivery is kept");
    let items = w
        .host
        .store
        .transcript_tail("vala", muninn_store::Role::Persona, 10)
        .await
        .unwrap();
    assert!(items.is_empty(), "nothing recorded: {}", items.len());
    // Without a cap, the same.
    set_cap(&w, None).await;
    r.woken();
    assert!(matches!(
        r.step().await,
        Err(RuntimeError::PromptTooLarge { .. })
    ));
    assert!(w.sim.requests().is_empty());
}

/// A refresh at the ceiling, its first request refused once (a 401): the retry is the new
/// segment's start and is sized as one — the layers, the rehydration and the message — not as
/// the message appended to the old segment's prefix, which with it would pass the window and
/// leave the batch refused on every retry.
#[tokio::test]
async fn the_retry_of_a_refreshs_first_request_is_sized_on_the_new_segment() {
    use muninn_host::runtime::Step;
    use muninn_sim::sim::{Fault, FaultKind};
    let w = world().await;
    // A model with a 200k window; the ceiling below it.
    let m = mind("model = 'claude-sonnet-4-5'\nturns_per_wake = 1\nceiling_tokens = 150000");
    let mut r = runner(&w, m, "host-a");
    r.register().await.unwrap();
    let words = |n| "the quick brown fox jumps over the lazy dog ".repeat(n);
    post(&w, "e1", "#swarm", "ari", &words(12_000)).await;
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::PersonaTurn { .. }), "{step:?}");
    w.sim.advance_clock(2_000);
    post(&w, "e2", "#swarm", "ari", &words(5_000)).await;
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 1,
    }]);
    let error = r.step().await.unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");
    w.sim.advance_clock(1_000);
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::PersonaTurn { .. }), "{step:?}");
    let rows = crate::runtime::ledger(&w).await;
    let decisions: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| (r.segment, r.decision.as_str()))
        .collect();
    assert_eq!(decisions, [(0, "start:start"), (1, "start:retried")]);
}

/// Twenty deliveries in one room, each near the API's 64 KiB bound (~14k tokens): one batch of
/// ~280k tokens, beyond a 200k window. The batch is halved until it fits and the rest answered
/// in the next turns — every delivery once, in order — where the whole batch used to be refused
/// at every retry and the Mind stuck on it for good.
#[tokio::test]
async fn a_batch_too_large_for_the_window_is_cut_and_every_delivery_answered_once() {
    use muninn_host::runtime::Step;
    let w = world().await;
    let mut r = runner(&w, mind("model = 'claude-sonnet-4-5'"), "host-a");
    r.register().await.unwrap();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(1_400);
    assert!(
        long.len() < muninn_api::limits::TEXT_MAX_BYTES,
        "{}",
        long.len()
    );
    let mut seqs = Vec::new();
    for i in 1..=20 {
        seqs.push(post(&w, &format!("e{i}"), "#swarm", "ari", &long).await);
    }
    let (first, last) = (seqs[0], seqs[19]);
    let mut acked = Vec::new();
    for _ in 0..40 {
        r.woken();
        match r.step().await {
            Ok(Step::PersonaTurn {
                acked_through,
                valid,
            }) => {
                assert!(valid);
                acked.push(acked_through);
            }
            Ok(Step::Idle { .. }) => break,
            other => panic!("after turns acking through {acked:?}: {other:?}"),
        }
        w.sim.advance_clock(1_000);
    }
    assert_eq!(acked.last(), Some(&last), "{acked:?}");
    assert!(
        acked.len() > 1 && acked.windows(2).all(|p| p[0] < p[1]),
        "{acked:?}"
    );
    // Each delivery in exactly one turn: the answered batches' seq ranges (outbox request ids
    // `vala-<first>-<max>-<index>`) tile the mailbox.
    let outbox = w.host.store.unacked_outbox("vala", 1_000).await.unwrap();
    let mut ranges: Vec<(i64, i64)> = outbox
        .iter()
        .map(|m| {
            let parts: Vec<&str> = m.request_id.split('-').collect();
            (parts[1].parse().unwrap(), parts[2].parse().unwrap())
        })
        .collect();
    ranges.dedup();
    let mut next = first;
    for (from, max) in &ranges {
        assert_eq!(*from, next, "{ranges:?}");
        next = max + 1;
    }
    assert_eq!(next, last + 1, "{ranges:?}");
    assert_eq!(ranges.len(), acked.len(), "{ranges:?} {acked:?}");
}
