//! A child that died mid-turn: the turn taken back out when nothing was answered, kept when
//! the model acted and the file holds it, the session out of step when it does not.

use super::*;
use pretty_assertions::assert_eq;

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
