//! Resuming a session: only through a handle that verifies, a forked copy, a refused resume
//! seeded from the host's seed, a turn the API refused taken back out of the session.

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

/// The user lines of the CLI's own session file that carry `text`.
fn stored_user_lines_with(config: &CliConfig, session: &str, text: &str) -> usize {
    let Some(path) = transcript_path(config, session) else {
        return 0;
    };
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == json!("user") && v["message"].to_string().contains(text))
        .count()
}

/// A turn the API refused (a 401 on every request, the CLI's own retry included) is taken back
/// out of the CLI's session. The CLI keeps a refused turn's line in its session file and merges
/// it into the next turn's user message, so the same input sent again showed the model the
/// message twice, and each retry of an outage one copy more. Now the input sent again after
/// three refusals goes as the refused requests went (the same conversation, the message once),
/// the session file holds it once, and the backend says the failure left the session as it
/// was. A refused first turn leaves no file: the session starts later under the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_api_refused_is_taken_back_out_of_the_session() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a55").await;
    // One retry of its own per turn (by default the CLI tries a 401 for minutes).
    r.config.max_retries = Some(1);
    let session = r.config.session_id.clone();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("refused")).await.unwrap();
    let refuse = || Fault {
        kind: FaultKind::Unauthorized,
        times: 1_000,
    };

    r.sim.sim.push_faults([refuse()]);
    let err = b.turn(TurnInput::text("r0: the first")).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Api { status: 401, .. }),
        "{err:?}"
    );
    assert!(b.failure_left_session(), "{:?}", b.last_report());
    assert_eq!(transcript_path(&r.config, &session), None);
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("r0: the first")).await);
    assert_eq!(b.session_id(), session);
    ok(b.turn(TurnInput::text("r1: fine")).await);

    let from = messages_from(&r.sim, 0).len();
    r.sim.sim.push_faults([refuse()]);
    for attempt in 1..=3 {
        let err = b.turn(TurnInput::text("r2: refused")).await.unwrap_err();
        assert!(
            matches!(err, BackendError::Api { status: 401, .. }),
            "{attempt}: {err:?}"
        );
        assert!(b.failure_left_session(), "{attempt}: {:?}", b.last_report());
    }
    r.sim.sim.clear_faults();
    let o = ok(b.turn(TurnInput::text("r2: refused")).await);
    assert!(!b.failure_left_session());
    assert!(o.text.contains("r2: refused"), "{}", o.text);
    let sent = messages_from(&r.sim, from);
    let refused = sent.iter().filter(|q| q.status == 401).count();
    assert!(refused >= 3, "{refused} refused");
    let answered = sent.last().unwrap();
    assert_eq!(answered.status, 200);
    // The whole request, not only its messages: system, tools, metadata (the session id) and
    // the beta header too, or the retry would not read the refused request's cache.
    for q in &sent {
        assert_eq!(
            (&q.body, &q.anthropic_beta),
            (&answered.body, &answered.anthropic_beta),
            "request {}",
            q.seq
        );
    }
    let users = user_messages_sent_with(&r.sim, "r2: refused");
    assert_eq!(
        users.concat().matches("r2: refused").count(),
        1,
        "{users:#?}"
    );
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "r2: refused"),
        1
    );
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "r0: the first"),
        1
    );
    b.shutdown().await;
}

/// A turn given up at its timeout (the API never answers; the child is killed) is taken back
/// out of the session the same way. The CLI stores a line as soon as it takes it and a resumed
/// session merges it into the next turn's message, so the same input sent again carried it
/// twice, and each timed-out retry of a hung API one copy more. Now, after two timeouts, the
/// same input goes once, and is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_given_up_at_its_timeout_is_taken_back_out_of_the_session() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a56").await;
    // Long enough for a relaunch and an answer on a loaded machine, short beside the hang.
    r.config.turn_timeout = Duration::from_secs(10);
    let session = r.config.session_id.clone();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("timeout")).await.unwrap();
    ok(b.turn(TurnInput::text("t1: fine")).await);
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 60_000,
            event_ms: 0,
        },
        times: 2,
    }]);
    let mut left = Vec::new();
    for attempt in 1..=2 {
        let err = b.turn(TurnInput::text("t2: hung")).await.unwrap_err();
        assert!(
            matches!(err, BackendError::Transport(_)),
            "{attempt}: {err:?}"
        );
        left.push(b.failure_left_session());
    }
    ok(b.turn(TurnInput::text("t2: hung")).await);
    let users = user_messages_sent_with(&r.sim, "t2: hung").concat();
    assert_eq!(users.matches("t2: hung").count(), 1, "{users}");
    assert_eq!(stored_user_lines_with(&r.config, &session, "t2: hung"), 1);
    assert_eq!(left, [true, true]);
    b.shutdown().await;
}

/// A fault that lets one request through as usual: queued ahead of another, it makes that one
/// hit the request after (a tool loop's second).
fn pass_one() -> Fault {
    Fault {
        kind: FaultKind::InflateUsage {
            cache_read_tokens: 0,
        },
        times: 1,
    }
}

/// A turn whose model acted — its first request answered with a tool call, which the CLI ran —
/// is kept in the session when a later request of the turn then fails: hung to the turn's
/// timeout, or refused. Taking it back out would drop a paid answer and a tool call that ran
/// (the retry would run it again, the model none the wiser). The refusal was checked; the
/// timeout was not: the driver took any timed-out turn back out, tool call and all (this test
/// failed there with `left [true]` and no tool result left in the session file). The backend
/// says the session holds the turn, and the session carries on with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_model_acted_is_kept_when_a_later_request_fails() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a57").await;
    r.config.tools = vec!["Read".to_string()];
    // No retries of its own: a refusal ends the turn at once.
    r.config.max_retries = Some(0);
    // Long enough for a relaunch, a tool call and its run on a loaded machine.
    r.config.turn_timeout = Duration::from_secs(10);
    let session = r.config.session_id.clone();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("acted")).await.unwrap();
    ok(b.turn(TurnInput::text("a1: fine")).await);
    let tool_results = || stored_user_lines_with(&r.config, &session, "tool_result");

    // Hung: the loop's second request never answers.
    r.sim.sim.push_faults([
        pass_one(),
        Fault {
            kind: FaultKind::Slow {
                first_byte_ms: 60_000,
                event_ms: 0,
            },
            times: 1,
        },
    ]);
    let err = b
        .turn(TurnInput::text("a2: use Read to look [sim: tool rounds 2]"))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let left = [b.failure_left_session()];
    assert_eq!(left, [false], "left {left:?}");
    assert_eq!(tool_results(), 1);

    // Refused: the loop's second request is overloaded.
    r.sim.sim.clear_faults();
    r.sim.sim.push_faults([
        pass_one(),
        Fault {
            kind: FaultKind::Overloaded,
            times: 1_000,
        },
    ]);
    let err = b
        .turn(TurnInput::text("a3: use Read again [sim: tool rounds 2]"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::Api { status: 529, .. }),
        "{err:?}"
    );
    assert!(!b.failure_left_session(), "{:?}", b.last_report());
    assert_eq!(tool_results(), 2);

    // The session carries on, holding both turns once each.
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("a4: after")).await);
    let users = user_messages_sent_with(&r.sim, "a4: after").concat();
    assert_eq!(users.matches("a2: use Read").count(), 1, "{users}");
    assert_eq!(users.matches("a3: use Read").count(), 1, "{users}");
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "a2: use Read"),
        1
    );
    b.shutdown().await;
}

/// Kills `pid` (SIGKILL) once `ready` says so, polling every 10 ms for up to 60 s; returns
/// whether the sim's fault queue was still untouched then (the killed turn's request had not
/// reached it).
fn kill_when(
    sim: &SimHandle,
    pid: u32,
    ready: impl Fn() -> bool + Send + 'static,
) -> tokio::task::JoinHandle<bool> {
    let sim = sim.sim.clone();
    tokio::spawn(async move {
        for _ in 0..6_000 {
            if ready() {
                let untouched = !sim.faults().is_empty();
                sigkill(pid);
                return untouched;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the turn never got where the kill was due");
    })
}

/// A child that dies by itself mid-turn (SIGKILL from outside, an OOM kill, a crash) before
/// anything was answered is taken back out of the session like a refused turn. The CLI stores
/// the user line as it takes it and a resumed session merges that line into the next turn's
/// message, so the same input sent again showed the model the message twice (and the caller,
/// told the session held the turn, recorded it twice). Now the turn is cut back out — killed
/// once the request reached the API, or the moment the line shows in the file — the backend says
/// the session is as it was, and the retry shows the model the message once. A child killed
/// after its model acted (a tool call the CLI ran) keeps the turn: the retry must not run the
/// tool again. And a file holding a model's message the driver never read is not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_child_died_before_an_answer_is_taken_back_out_of_the_session() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a58").await;
    r.config.tools = vec!["Read".to_string()];
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("died")).await.unwrap();
    ok(b.turn(TurnInput::text("d1: fine")).await);
    died_before_an_answer(&mut b, &r).await;
    died_after_its_model_acted(&mut b, &r).await;
    died_with_an_answer_in_the_file_unread(&mut b, &r).await;
    b.shutdown().await;
}

/// A request held on the API for a minute (the kill comes first).
fn hung() -> Fault {
    Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 60_000,
            event_ms: 0,
        },
        times: 1,
    }
}

/// Killed while the request waits on the API, then the moment the line shows in the file:
/// each turn cut back out, its retry showing the model the line once.
async fn died_before_an_answer(b: &mut ClaudeCliBackend, r: &Rig) {
    let session = r.config.session_id.clone();
    // Killed while its request waits on the API (the sim took the fault: the request is there).
    let pid = b.last_report().unwrap().pid.unwrap();
    r.sim.sim.push_faults([hung()]);
    let sim = r.sim.sim.clone();
    let killer = kill_when(&r.sim, pid, move || sim.faults().is_empty());
    let err = b
        .turn(TurnInput::text("d2: killed waiting"))
        .await
        .unwrap_err();
    assert!(!killer.await.unwrap(), "killed before the request arrived");
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let mut left = vec![b.failure_left_session()];
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("d2: killed waiting")).await);

    // Killed the moment the line shows in the file. The CLI writes its file behind a buffer, so
    // that is mostly just after its request left, now and then before it reached the sim (the
    // line must be shown once either way; a kill before the line is stored leaves nothing to cut).
    let pid = b.last_report().unwrap().pid.unwrap();
    r.sim.sim.push_faults([hung()]);
    let (config, id) = (r.config.clone(), session.clone());
    let killer = kill_when(&r.sim, pid, move || {
        stored_user_lines_with(&config, &id, "d3: killed early") > 0
    });
    let err = b
        .turn(TurnInput::text("d3: killed early"))
        .await
        .unwrap_err();
    let early = killer.await.unwrap();
    eprintln!("d3 killed before its request reached the sim: {early}");
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    left.push(b.failure_left_session());
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("d3: killed early")).await);

    let users = user_messages_sent_with(&r.sim, "d3: killed early").concat();
    for line in ["d1: fine", "d2: killed waiting", "d3: killed early"] {
        assert_eq!(users.matches(line).count(), 1, "{line}: {users}");
        assert_eq!(
            stored_user_lines_with(&r.config, &session, line),
            1,
            "{line}"
        );
    }
    assert_eq!(left, [true, true]);
}

/// Killed after its model acted: the turn stays, its tool result stored once.
async fn died_after_its_model_acted(b: &mut ClaudeCliBackend, r: &Rig) {
    let session = r.config.session_id.clone();
    // Killed after its model acted: the loop's first request answered with a tool call the CLI
    // ran (and stored: the CLI writes its file behind a buffer, so the kill waits for it), the
    // second waiting on the API. The turn stays in the session, tool result and all.
    let pid = b.last_report().unwrap().pid.unwrap();
    r.sim.sim.push_faults([pass_one(), hung()]);
    let (sim, config, id) = (r.sim.sim.clone(), r.config.clone(), session.clone());
    let killer = kill_when(&r.sim, pid, move || {
        sim.faults().is_empty() && stored_user_lines_with(&config, &id, "tool_result") > 0
    });
    let err = b
        .turn(TurnInput::text("d4: use Read to look [sim: tool rounds 2]"))
        .await
        .unwrap_err();
    killer.await.unwrap();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    assert!(!b.failure_left_session(), "{:?}", b.last_report());
    assert!(b.failure_kept_turn(), "{:?}", b.last_report());
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "tool_result"),
        1
    );
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("d5: after")).await);
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "tool_result"),
        1
    );
}

/// Killed with a model's message in the file that the driver never read: not cut, out of step.
async fn died_with_an_answer_in_the_file_unread(b: &mut ClaudeCliBackend, r: &Rig) {
    let session = r.config.session_id.clone();
    // Killed after the CLI stored a model's message whose stdout line never reached the driver
    // (written into the file here while the request waits): the file, not only what was read,
    // says the model answered, so the turn is not cut, and the session is not said to carry
    // on either — the caller rebuilds it.
    let pid = b.last_report().unwrap().pid.unwrap();
    r.sim.sim.push_faults([hung()]);
    let (sim, config, id) = (r.sim.sim.clone(), r.config.clone(), session.clone());
    let file = transcript_path(&r.config, &session).unwrap();
    let killer = kill_when(&r.sim, pid, move || {
        use std::io::Write;
        if !sim.faults().is_empty() || stored_user_lines_with(&config, &id, "d6: answered") == 0 {
            return false;
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(
            b"{\"type\":\"assistant\",\"message\":{\"model\":\"claude-x\",\"content\":[]}}\n",
        )
        .unwrap();
        true
    });
    let err = b
        .turn(TurnInput::text("d6: answered unseen"))
        .await
        .unwrap_err();
    killer.await.unwrap();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let report = b.last_report().unwrap().clone();
    assert!(
        !b.failure_left_session() && !b.failure_kept_turn(),
        "{report:?}"
    );
    assert!(report.out_of_step, "{report:?}");
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "d6: answered unseen"),
        1
    );
}

/// A child killed after its model called a tool the CLI ran, whose session file lost the call
/// and its result: the CLI writes the file behind a buffer, so a kill can take the records
/// with it (cut here from the file just before the kill). The resumed session would hold the
/// turn's line unanswered, the retry's copy merged into it and the model none the wiser about
/// the call: the turn was said to be held (`failure_kept_turn`), and the caller carried on.
/// The file does not hold what the driver read of the model, so the session is out of step and
/// the caller rebuilds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_turn_whose_file_lost_what_the_model_did_is_out_of_step() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a59").await;
    r.config.tools = vec!["Read".to_string()];
    let session = r.config.session_id.clone();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("lost")).await.unwrap();
    ok(b.turn(TurnInput::text("l1: fine")).await);
    let hung = Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 60_000,
            event_ms: 0,
        },
        times: 1,
    };

    // The loop's first request answered with a tool call the CLI ran and stored, the second
    // waiting on the API; the file then loses everything after the turn's line.
    let pid = b.last_report().unwrap().pid.unwrap();
    r.sim.sim.push_faults([pass_one(), hung]);
    let (sim, config, id) = (r.sim.sim.clone(), r.config.clone(), session.clone());
    let file = transcript_path(&r.config, &session).unwrap();
    let killer = kill_when(&r.sim, pid, move || {
        if !sim.faults().is_empty() || stored_user_lines_with(&config, &id, "tool_result") == 0 {
            return false;
        }
        // The file up to the end of the turn's user line.
        let text = std::fs::read_to_string(&file).unwrap();
        let mut end = 0;
        for line in text.split_inclusive('\n') {
            end += line.len();
            let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            if v["type"] == "user" && v["message"].to_string().contains("l2: use Read") {
                break;
            }
        }
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(end as u64).unwrap();
        true
    });
    let err = b
        .turn(TurnInput::text("l2: use Read to look [sim: tool rounds 2]"))
        .await
        .unwrap_err();
    killer.await.unwrap();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let report = b.last_report().unwrap().clone();
    assert!(!report.rewound && report.out_of_step, "{report:?}");
    assert!(
        !b.failure_left_session() && !b.failure_kept_turn(),
        "{report:?}"
    );
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "tool_result"),
        0
    );
    assert_eq!(
        stored_user_lines_with(&r.config, &session, "l2: use Read"),
        1
    );
    b.shutdown().await;
}

/// A turn that never reached the session — its child dead and the relaunch failing (here its
/// binary gone) — leaves the session as it was, and the backend says so, as after a turn it
/// took back out: the caller re-sends the input it recorded. It said the session held the turn
/// (`held`, for any transport failure nothing was cut for), so a caller recorded the input a
/// second time though the session held no copy of it: muninn's transcript then showed the
/// model the delivery twice on its next rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_relaunch_failed_leaves_the_session_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin.clone(), "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a60").await;
    let wrapper = r.dir.path().join("claude-wrapper");
    let write_wrapper = || {
        let script = format!("#!/bin/sh\nexec '{}' \"$@\"\n", bin.display());
        std::fs::write(&wrapper, script).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write_wrapper();
    r.config.bin = wrapper.clone();
    let session = r.config.session_id.clone();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("gone")).await.unwrap();
    ok(b.turn(TurnInput::text("g1: fine")).await);
    let pid = b.last_report().unwrap().pid.unwrap();
    sigkill(pid);
    wait_dead(pid).await;
    std::fs::remove_file(&wrapper).unwrap();
    let err = b.turn(TurnInput::text("g2: again")).await.unwrap_err();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let report = b.last_report().unwrap().clone();
    assert!(
        b.failure_left_session() && !b.failure_kept_turn(),
        "{report:?}"
    );
    write_wrapper();
    ok(b.turn(TurnInput::text("g2: again")).await);
    let users = user_messages_sent_with(&r.sim, "g2: again").concat();
    assert_eq!(users.matches("g2: again").count(), 1, "{users}");
    assert_eq!(stored_user_lines_with(&r.config, &session, "g2: again"), 1);
    b.shutdown().await;
}

/// The part of the session file a refused turn added is read under a bound before the turn is
/// taken back out (the driver checks it holds nothing of the model's). A CLI stand-in stores
/// the turn's line and then 65 MiB more (a sparse run of NUL bytes, read fast and stored in
/// nothing) before the API refusal: the turn is refused loudly, not cut — the file is left
/// as the CLI wrote it, byte for byte, and the backend says the session is out of step, so the
/// caller rebuilds it. Before, the driver read the whole part into memory, however large, and
/// cut the file back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_part_of_the_session_file_past_the_bound_is_not_read_nor_cut() {
    let dir = tempfile::tempdir().unwrap();
    let session = "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a61";
    let file = dir
        .path()
        .join("data/home/.claude/projects/stand-in")
        .join(format!("{session}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let earlier = "{\"type\":\"user\",\"message\":{\"content\":\"earlier\"}}\n";
    std::fs::write(&file, earlier).unwrap();
    let refused = json!({"type": "result", "subtype": "success", "is_error": true,
        "terminal_reason": "api_error", "api_error_status": 401,
        "result": "API Error: 401", "usage": {"input_tokens": 0, "output_tokens": 0}});
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n\
             printf '%s\\n' '{{\"type\":\"user\",\"message\":{{\"content\":\"the turn\"}}}}' >> '{f}'\n\
             truncate -s +65M '{f}'\n\
             {}while read line; do :; done\n",
            script::printed(&[script::init(), script::echo("p1"), refused]),
            f = file.display(),
        ),
    )
    .await;
    let sim = sim().await;
    let config = CliConfig::new(
        bin,
        dir.path().join("data"),
        sim.base_url(),
        Secret::new("sk-test-cli"),
        session,
    );
    assert_eq!(transcript_path(&config, session), Some(file.clone()));
    let mut b = ClaudeCliBackend::new(config);
    b.start(spec("oversize")).await.unwrap();
    let err = b.turn(TurnInput::text("p1")).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Api { status: 401, .. }),
        "{err:?}"
    );
    let report = b.last_report().unwrap().clone();
    assert!(
        report.out_of_step && !b.failure_left_session() && !b.failure_kept_turn(),
        "{report:?}"
    );
    let len = std::fs::metadata(&file).unwrap().len();
    let added = "{\"type\":\"user\",\"message\":{\"content\":\"the turn\"}}\n".len() as u64;
    assert_eq!(len, earlier.len() as u64 + added + 65 * 1024 * 1024);
    b.shutdown().await;
}

/// A forked session's file begins with the whole history the CLI copied into it, so the turn's
/// part of it cannot be told from its start: a kept turn's check that the file holds what was
/// read of the model looks at the file's end, still under the bound. A CLI stand-in forks a
/// session whose copied history is 65 MiB (a sparse run of NUL bytes), stores a tool call and
/// its result, and dies before its `result`: the file holds both, so the session carries on
/// with the turn in it. Before, the whole file was read under the bound meant for a turn's
/// part, refused, and the session called out of step — a long session rebuilt from scratch
/// where a resume would do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_turn_of_a_forked_long_session_is_checked_at_the_files_end() {
    let dir = tempfile::tempdir().unwrap();
    let (session, copy) = (
        "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a62",
        "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a63",
    );
    let projects = dir.path().join("data/home/.claude/projects/stand-in");
    let copied = projects.join(format!("{copy}.jsonl"));
    let call = json!({"type": "assistant", "message": {"id": "msg_f1", "model": "m",
        "content": [{"type": "tool_use", "id": "toolu_f1", "name": "Read", "input": {}}],
        "usage": {"input_tokens": 5, "output_tokens": 1}},
        "parent_tool_use_id": null, "request_id": "req_f1"});
    let result = json!({"type": "user", "message": {"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_f1", "content": "ok"}]}});
    let forked = json!({"type": "system", "subtype": "init", "session_id": copy});
    // Only the forked launch answers; the first backend's child waits for its stdin to end.
    let bin = stand_in(
        dir.path(),
        &format!(
            "case \"$*\" in *--fork-session*)\n\
             read line\n\
             truncate -s 65M '{f}'\n\
             printf '\\n%s\\n%s\\n' '{call}' '{result}' >> '{f}'\n\
             {}exit 1\n;;\n\
             esac\n\
             while read line; do :; done\n",
            script::printed(&[forked, script::echo("f1"), call.clone()]),
            f = copied.display(),
        ),
    )
    .await;
    let sim = sim().await;
    let mut config = CliConfig::new(
        bin,
        dir.path().join("data"),
        sim.base_url(),
        Secret::new("sk-test-cli"),
        session,
    );
    config.binding_key = Some(BindingKey::new(&[3u8; 32]).unwrap());
    let mut first = ClaudeCliBackend::new(config.clone());
    first.start(spec("fork-long")).await.unwrap();
    let handle = first.mint_handle(Vec::<Vec<u8>>::new()).unwrap();
    assert_eq!(handle.session_id, session);
    std::fs::create_dir_all(&projects).unwrap();
    let earlier = "{\"type\":\"user\",\"message\":{\"content\":\"earlier\"}}\n";
    std::fs::write(projects.join(format!("{session}.jsonl")), earlier).unwrap();

    let mut fork = ClaudeCliBackend::new(config);
    fork.fork_with(handle, Vec::<Vec<u8>>::new());
    fork.start(spec("fork-long")).await.unwrap();
    let err = fork.turn(TurnInput::text("f1")).await.unwrap_err();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let report = fork.last_report().unwrap().clone();
    assert_eq!(report.session_id, copy);
    assert!(
        std::fs::metadata(&copied).unwrap().len() > 65 * 1024 * 1024,
        "the copy is past the bound"
    );
    assert!(
        report.held && !report.out_of_step && fork.failure_kept_turn(),
        "{report:?}"
    );
    for b in [&mut first, &mut fork] {
        b.shutdown().await;
    }
}
