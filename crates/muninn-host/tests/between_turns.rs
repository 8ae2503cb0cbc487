//! Between turns: a refresh rehydrates from memory, keep-warm pings leave the session alone,
//! a restart keeps what a DM taught, and once the tail is let go the head is kept with
//! head-only pings.

use crate::runtime::*;
use muninn_host::runtime::Step;
use muninn_store::Role;

#[tokio::test]
async fn a_refresh_rehydrates_from_memory_written_as_it_happened() {
    let w = world().await;
    let mut r = runner(&w, mind("policy = 'rebuild'\nmin_segment = 1"), "host-a");
    r.register().await.unwrap();
    post(
        &w,
        "e1",
        "@ari",
        "ari",
        "remember that I like short answers",
    )
    .await;
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    w.sim.advance_clock(60_000);
    post(&w, "e2", "#swarm", "bo", "hi all").await;
    r.woken();
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2);
    // The second segment's system prompt carries what the first turn remembered.
    let requests = w.sim.requests();
    let system = requests.last().unwrap().body["system"].to_string();
    assert!(system.contains("What you remember"), "{system}");
    let rows = ledger(&w).await;
    assert!(
        rows[1].decision.starts_with("refresh"),
        "{:?}",
        rows[1].decision
    );
    // The doctrine block, under its 1h breakpoint, was read from cache by the new segment.
    assert!(rows[1].usage.cache_read > 0);
}

#[tokio::test]
async fn keepalive_pings_before_the_tail_expires_without_touching_the_session() {
    let w = world().await;
    let mut r = at_the_first_ping(&w).await;
    assert_eq!(r.step().await.unwrap(), Step::Ping);
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 2);
    assert!(rows[1].decision.starts_with("ping"));
    // A ping reads the whole prefix; it writes at most the last reply, which the next turn
    // would have written anyway.
    assert!(rows[1].usage.cache_read >= rows[0].usage.cache_read + rows[0].usage.written());
    assert!(rows[1].usage.written() < 400, "{:?}", rows[1].usage);
    // Sent with `max_tokens: 0` (the backend's default): no output paid.
    assert_eq!(rows[1].usage.output, 0);
    let sent = w.sim.requests().last().unwrap().body.clone();
    assert_eq!(sent["max_tokens"], serde_json::json!(0), "{sent}");
    // The next turn still reads the whole prefix: the ping kept it warm and left no trace in it.
    w.sim.advance_clock(200_000);
    post(&w, "e2", "#swarm", "ari", "still there?").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let rows = ledger(&w).await;
    assert_eq!(rows[2].predicted_read, rows[2].usage.cache_read);
    assert!(rows[2].usage.cache_read >= rows[0].usage.cache_read + rows[0].usage.written() - 16);
}

#[tokio::test]
async fn after_a_restart_the_persona_knows_what_a_dm_taught_her() {
    // Seed A6's scenario: a DM writes a memory, the host restarts (the session is gone), a
    // public question follows — the new segment is rehydrated with the memory.
    let w = world().await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(
        &w,
        "e1",
        "@ari",
        "ari",
        "please remember: the archive key is under the blue stone",
    )
    .await;
    assert!(matches!(
        a.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    let remembered = w.host.store.memory_newest("vala", 5).await.unwrap();
    assert_eq!(remembered.len(), 1);
    a.release().await.unwrap();
    drop(a);
    let mut b = runner(&w, mind(""), "host-a");
    w.sim.advance_clock(3_600_000);
    post(
        &w,
        "e2",
        "#swarm",
        "bo",
        "does anyone know where the archive key is?",
    )
    .await;
    assert!(matches!(
        b.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    let system = w.sim.requests().last().unwrap().body["system"].to_string();
    assert!(
        system.contains("What you remember") && system.contains(&remembered[0].text),
        "{system}"
    );
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2);
}

#[tokio::test]
async fn once_the_tail_is_let_go_the_head_is_kept_with_head_only_pings() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    // Walk the idle decision points: the tail (5m) is let go or kept by the decider; once it is
    // gone, the head (1h) gets its own decision shortly before it expires.
    let mut head_pings = 0;
    for _ in 0..40 {
        match r.step().await.unwrap() {
            Step::Idle { until_ms: Some(at) } => {
                w.sim.advance_clock(at - w.sim.now_ms());
            }
            Step::Ping => {}
            Step::Idle { until_ms: None } => break,
            other => panic!("unexpected {other:?}"),
        }
        head_pings = ledger(&w)
            .await
            .iter()
            .filter(|row| row.decision.starts_with("ping_head"))
            .count();
        if head_pings > 0 {
            break;
        }
    }
    assert_eq!(head_pings, 1);
    let rows = ledger(&w).await;
    let ping = rows
        .iter()
        .find(|row| row.decision.starts_with("ping_head"))
        .unwrap();
    assert_eq!(ping.usage.written(), 0, "{:?}", ping.usage);
    assert!(ping.usage.cache_read > 0);
    assert!(
        ping.usage.cache_read < rows[0].usage.cache_read + rows[0].usage.written(),
        "the head alone"
    );
    // A wake after the tail expired but within the kept head reads the head from cache.
    w.sim.advance_clock(40 * 60_000);
    post(&w, "e2", "#swarm", "ari", "back again").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let last = ledger(&w).await.pop().unwrap();
    assert!(last.usage.cache_read >= ping.usage.cache_read, "{last:?}");
}

/// A new segment's memory searches the batch's three most distinctive words, each once: a
/// batch that says "alpha" three times (once as "ALPHA") still searches a fourth word,
/// "delta", and finds the note only that word matches — older than the sixteen newest, so
/// nothing else selects it. Before, only neighbours after the sort were merged, and "alpha"
/// was searched twice (and "ALPHA", which the search folds to it, a third time).
#[tokio::test]
async fn a_new_segment_searches_memory_for_each_distinct_word_once() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let store = &w.host.store;
    let ttl = w.host.config.lease_ttl_ms;
    let setup = (store.acquire_lease("vala", "setup", ttl, w.sim.now_ms()))
        .await
        .unwrap()
        .expect("the Mind is free");
    let note = |text: String, at: i64| muninn_store::NewMemoryNote {
        about: Vec::new(),
        salience: 1,
        text,
        created_at_ms: at,
        source: "test".into(),
    };
    let now = w.sim.now_ms();
    let mut notes = vec![note("the delta gate opens at dawn".into(), now - 100_000)];
    notes.extend((0..16).map(|i| note(format!("filler note {i}"), now - 1_000 + i)));
    store.add_memory("vala", setup.token, &notes).await.unwrap();
    store.release_lease("vala", setup.token).await.unwrap();
    post(&w, "e1", "#swarm", "ari", "alpha bravo ALPHA alpha delta").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let segments = store.segments("vala", Role::Persona).await.unwrap();
    let memory = segments[0].memory.clone().unwrap_or_default();
    assert!(memory.contains("delta gate"), "not selected: {memory}");
}
