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
