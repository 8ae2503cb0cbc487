//! A turn that failed with nothing answered (the API refused it, or it timed out) is taken
//! back out of the CLI's session; one whose model acted is kept.

use super::*;
use pretty_assertions::assert_eq;

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
