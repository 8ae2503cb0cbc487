//! Which session a start continues: only one a handle verifies, a forked copy of it, or a
//! fresh one seeded from the host's seed when the resume is refused.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_only_through_a_handle_that_verifies() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.binding_key = Some(BindingKey::new(&[7u8; 32]).unwrap());

    // A first start: two turns, then the handle over the transcript so far.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("bind")).await.unwrap();
    let a1 = ok(b.turn(TurnInput::text("bind one")).await).text;
    let a2 = ok(b.turn(TurnInput::text("bind two")).await).text;
    let transcript = items(&[("bind one", &a1), ("bind two", &a2)]);
    let handle = b.mint_handle(&transcript).unwrap();
    assert_eq!(handle.session_id, r.config.session_id);
    b.shutdown().await;

    // It verifies: the session is resumed, with its history and a warm cache.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.resume_with(handle.clone(), &transcript);
    b.start(spec("bind")).await.unwrap();
    let o = ok(b.turn(TurnInput::text("bind three")).await);
    let report = b.last_report().unwrap();
    assert_eq!(report.session_events, vec![]);
    assert_eq!(report.session_id, r.config.session_id);
    // The history went with it.
    let sent = user_messages_sent_with(&r.sim, "bind three");
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent[0].contains("bind one") && sent[1].contains("bind two"));
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    let a3 = o.text;
    let transcript = items(&[("bind one", &a1), ("bind two", &a2), ("bind three", &a3)]);
    let handle = b.mint_handle(&transcript).unwrap();
    b.shutdown().await;

    a_changed_item_does_not_verify(&r, &handle, &transcript).await;
    changed_instructions_do_not_verify(&r, &handle, &transcript).await;

    // No handle at all: a fresh session by the caller's choice (a new segment) — a new id, not
    // the one on disk, none of its history, and no reseed event: nothing was lost.
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("bind")).await.unwrap();
    ok(b.turn(TurnInput::text("bind six")).await);
    let report = b.last_report().unwrap();
    assert!(
        report.session_events.is_empty(),
        "{:?}",
        report.session_events
    );
    assert_ne!(report.session_id, r.config.session_id);
    assert_eq!(user_messages_sent_with(&r.sim, "bind six").len(), 1);
    b.shutdown().await;
}

/// An item changed (the caller's transcript diverged): a fresh session, and it says so.
async fn a_changed_item_does_not_verify(r: &Rig, handle: &Handle, transcript: &[String]) {
    let mut edited = transcript.to_vec();
    edited[1] = "assistant:something else".to_string();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.resume_with(handle.clone(), &edited);
    b.start(spec("bind")).await.unwrap();
    ok(b.turn(TurnInput::text("bind four")).await);
    let report = b.last_report().unwrap().clone();
    let [
        SessionEvent::Reseeded {
            old_session_id,
            new_session_id,
            reason,
            ..
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(old_session_id, &r.config.session_id);
    assert_eq!(new_session_id, &report.session_id);
    assert_ne!(new_session_id, &r.config.session_id);
    assert!(reason.contains("did not verify"), "{reason}");
    assert_eq!(user_messages_sent_with(&r.sim, "bind four").len(), 1);
    b.shutdown().await;
}

/// The instructions changed: the same transcript no longer vouches for the session.
async fn changed_instructions_do_not_verify(r: &Rig, handle: &Handle, transcript: &[String]) {
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.resume_with(handle.clone(), transcript);
    b.start(spec("bind, new doctrine")).await.unwrap();
    ok(b.turn(TurnInput::text("bind five")).await);
    let report = b.last_report().unwrap();
    assert!(
        matches!(report.session_events.as_slice(), [SessionEvent::Reseeded { reason, .. }] if reason.contains("did not verify")),
        "{:?}",
        report.session_events
    );
    assert_eq!(user_messages_sent_with(&r.sim, "bind five").len(), 1);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_resume_continues_a_copy_and_leaves_the_original_untouched() {
    let Some(bin) = claude_cli() else { return };
    let session = "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a51";
    let mut r = rig(bin, session).await;
    r.config.binding_key = Some(BindingKey::new(&[9u8; 32]).unwrap());

    // The first writer: two turns, a handle, and it stays alive (it may still be running when a
    // lease is taken over).
    let mut first = ClaudeCliBackend::new(r.config.clone());
    first.start(spec("fork")).await.unwrap();
    let a1 = ok(first.turn(TurnInput::text("fork one")).await).text;
    let a2 = ok(first.turn(TurnInput::text("fork two")).await).text;
    let transcript = bytes(&items(&[("fork one", &a1), ("fork two", &a2)]));
    let handle = first.session_handle(&transcript).unwrap();
    let original = transcript_path(&r.config, session).unwrap();
    let before = std::fs::read(&original).unwrap();

    // The second writer forks it.
    let mut fork = ClaudeCliBackend::new(r.config.clone());
    assert!(fork.resume_session(&handle, &transcript, true));
    fork.start(spec("fork")).await.unwrap();
    let o = ok(fork.turn(TurnInput::text("fork three")).await);
    let report = fork.last_report().unwrap().clone();
    let [SessionEvent::Forked { from, to }] = report.session_events.as_slice() else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(from, session);
    assert_ne!(to, session);
    assert_eq!(&report.session_id, to);
    assert_eq!(fork.session_id(), to);
    // The host records session events from the queue: the fork is there, once.
    assert_eq!(
        session_events_json(&mut fork),
        vec![json!({"type": "forked", "from": session, "to": to})]
    );
    // The copy's first request carries the whole history, from the cache.
    let sent = user_messages_sent_with(&r.sim, "fork three");
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent[0].contains("fork one") && sent[1].contains("fork two"));
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    // The original file is byte for byte what it was; the copy has its own.
    assert_eq!(std::fs::read(&original).unwrap(), before);
    assert!(transcript_path(&r.config, to).is_some());
    // Handles are minted over the copy from now on.
    let transcript = bytes(&items(&[
        ("fork one", &a1),
        ("fork two", &a2),
        ("fork three", &o.text),
    ]));
    let next = Handle::decode(&fork.session_handle(&transcript).unwrap()).unwrap();
    assert_eq!(&next.session_id, to);
    // Later turns continue the copy, with nothing more to report.
    ok(fork.turn(TurnInput::text("fork four")).await);
    let report = fork.last_report().unwrap();
    assert_eq!(report.session_events, vec![]);
    assert_eq!(&report.session_id, to);
    assert_eq!(std::fs::read(&original).unwrap(), before);

    // A handle that does not verify is seeded as before, fork or not.
    let mut stale = ClaudeCliBackend::new(r.config.clone());
    assert!(stale.resume_session(&handle, &transcript, true));
    stale.start(spec("fork")).await.unwrap();
    ok(stale.turn(TurnInput::text("fork five")).await);
    assert!(
        matches!(
            stale.last_report().unwrap().session_events.as_slice(),
            [SessionEvent::Reseeded { reason, .. }] if reason.contains("did not verify")
        ),
        "{:?}",
        stale.last_report().unwrap().session_events
    );
    for b in [&mut first, &mut fork, &mut stale] {
        b.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_is_seeded_from_the_hosts_seed() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "5eed0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    r.config.binding_key = Some(BindingKey::new(&[5u8; 32]).unwrap());
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("seed")).await.unwrap();
    let a1 = ok(b.turn(TurnInput::text("seed one")).await).text;
    let handle = b
        .session_handle(&bytes(&items(&[("seed one", &a1)])))
        .unwrap();
    b.shutdown().await;

    // The host's transcript no longer matches the handle: the session is refused, and the new
    // one starts from the seed the host rendered.
    let host_seed = "User: seed one\n\nAssistant: (the host's own record of the reply)";
    let mut b = ClaudeCliBackend::new(r.config.clone());
    assert!(b.resume_session(&handle, &bytes(&items(&[("seed one", "edited")])), false));
    b.set_seed(Some(host_seed.to_string()));
    b.start(spec("seed")).await.unwrap();
    ok(b.turn(TurnInput::text("seed two")).await);
    let report = b.last_report().unwrap().clone();
    let [
        SessionEvent::Reseeded {
            reason,
            seed_tokens,
            ..
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert!(reason.contains("did not verify"), "{reason}");
    let sent = user_messages_sent_with(&r.sim, "seed two");
    assert_eq!(sent.len(), 1, "{sent:?}");
    let blocks: Value = serde_json::from_str(&sent[0]).unwrap();
    let seed = blocks[0]["text"].as_str().unwrap();
    assert!(seed.contains(host_seed), "{seed}");
    assert_eq!(*seed_tokens, muninn_core::tokenize::count(seed));
    assert_eq!(blocks[1]["text"], json!("seed two"));
    // Sent once.
    ok(b.turn(TurnInput::text("seed three")).await);
    let sent = user_messages_sent_with(&r.sim, "seed three");
    assert_eq!(sent.len(), 2);
    assert!(!sent[1].contains(host_seed));
    b.shutdown().await;
}
