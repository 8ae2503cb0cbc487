//! Turns the CLI starts by itself: a background subagent's notification, after a turn's
//! `result`, makes the CLI run a turn of its own (`task_notification` → `system/init` →
//! assistant → `result`) while muninn is idle. That turn is not the next turn's answer, and
//! what it cost reaches the caller.

use super::*;
use muninn_backend::FailedAttempt;
use pretty_assertions::assert_eq;

/// Waits until the sim has answered a request whose last user message carries `text`.
async fn answered(sim: &SimHandle, text: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !sim
        .sim
        .requests()
        .iter()
        .any(|q| q.usage.is_some() && last_user(&q.body).contains(text))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no answered request for {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two turns, the first starting a background subagent: the CLI's own turn on the subagent's
/// notification runs in between, and the second turn's answer is still the second turn's. Every
/// request the sim answered is accounted for: the turns' usage and what the backend reports
/// as billed beside them ([`Backend::take_failed_attempts`]) add up to the sim's bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_cli_starts_by_itself_is_not_the_next_turns_answer() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a77").await;
    r.config.tools = vec!["Agent".to_string()];
    let script = json!([{"name": "Agent", "input": {"description": "look",
        "prompt": "SUBAGENT-ONLY-TEXT", "subagent_type": "general-purpose"}}]);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("unprompted")).await.unwrap();
    let first = ok(b
        .turn(TurnInput::text(format!(
            "delegate [sim: tool calls {script}]"
        )))
        .await);
    // The subagent has answered (in the background, the CLI's own turn on its notification
    // then follows the first turn's `result`).
    answered(&r.sim, "SUBAGENT-ONLY-TEXT").await;
    let second = ok(b.turn(TurnInput::text("second: what did you find?")).await);
    assert!(
        second.text.contains("second: what did you find?"),
        "the second turn's answer: {}",
        second.text
    );
    let third = ok(b.turn(TurnInput::text("third: thanks")).await);
    assert!(third.text.contains("third: thanks"), "{}", third.text);
    let beside: Vec<FailedAttempt> = b.take_failed_attempts();
    let mut reported = Usage::default();
    for u in [first.usage, second.usage, third.usage]
        .iter()
        .chain(beside.iter().map(|a| &a.usage))
    {
        reported.add(u);
    }
    let mut billed = Usage::default();
    for q in r.sim.sim.requests() {
        if let Some(u) = q.usage {
            billed.add(&u);
        }
    }
    assert_eq!(
        reported, billed,
        "every answered request accounted for: {beside:#?}"
    );
    b.shutdown().await;
}

/// The driver's own guard, for a CLI that starts a turn by itself anyway (background tasks are
/// off in muninn's children, so the real CLI no longer does): a CLI stand-in that, after the
/// first turn's `result`, notifies and starts a turn of its own, whose `result` comes only
/// after the second turn's line was written. The second turn's answer is its own, and the
/// stand-in's turn is reported with its usage. Before, the second turn's answer was
/// "UNPROMPTED-REPLY".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_cli_started_while_idle_is_read_past_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("claude");
    let usage = |n: u64| {
        json!({"input_tokens": n, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "output_tokens": 1})
    };
    let model_usage = |n: u64| {
        json!({"claude-opus-5-5": {"inputTokens": n, "outputTokens": 1,
        "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0, "costUSD": 0.5}})
    };
    let init = json!({"type": "system", "subtype": "init", "session_id": "s"});
    let echo = |t: &str| json!({"type": "user", "isReplay": true, "message": {"role": "user", "content": t}});
    let say = |t: &str| {
        json!({"type": "assistant", "message": {"model": "m",
        "content": [{"type": "text", "text": t}], "usage": {}}, "parent_tool_use_id": null})
    };
    let result = |t: &str, n: u64| {
        json!({"type": "result", "subtype": "success", "is_error": false,
        "result": t, "usage": usage(n), "model_usage_since_last_result": model_usage(n)})
    };
    let notification = json!({"type": "system", "subtype": "task_notification",
        "task_id": "t1", "status": "completed"});
    let lines = |events: &[Value]| {
        events
            .iter()
            .map(|e| format!("printf '%s\\n' '{e}'\n"))
            .collect::<String>()
    };
    let script = format!(
        "#!/bin/sh\nread line\n{}read line\n{}{}sleep 30\n",
        lines(&[
            init.clone(),
            echo("u1"),
            say("answer one"),
            notification,
            result("answer one", 11),
            init.clone(),
            say("UNPROMPTED-REPLY"),
        ]),
        lines(&[result("UNPROMPTED-REPLY", 700)]),
        lines(&[
            init,
            echo("u2"),
            say("answer two"),
            result("answer two", 13)
        ]),
    );
    std::fs::write(&bin, script).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a78").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("stand-in")).await.unwrap();
    let first = ok(b.turn(TurnInput::text("u1")).await);
    assert_eq!((first.text.as_str(), first.usage.input), ("answer one", 11));
    let second = ok(b.turn(TurnInput::text("u2")).await);
    assert_eq!(
        (second.text.as_str(), second.usage.input),
        ("answer two", 13)
    );
    let beside = b.take_failed_attempts();
    let inputs: Vec<u64> = beside.iter().map(|a| a.usage.input).collect();
    assert_eq!(inputs, vec![700], "{beside:#?}");
    assert!(
        beside[0].error.contains("started by itself"),
        "{}",
        beside[0].error
    );
    drop(b);
}

/// An interrupted turn between two others: every request the sim answered is accounted for
/// once, by the turns' usage and what is reported beside them. The input side only: the CLI
/// counts a cut request's output as far as it streamed, the sim bills the whole reply. Before,
/// the cut request (its `result`'s `usage` all zeros) was reported nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_turn_is_accounted_for_once() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a79").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("interrupted")).await.unwrap();
    let first = ok(b.turn(TurnInput::text("i1: warm up")).await);
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 0,
            event_ms: 1_000,
        },
        times: 1,
    }]);
    let interrupter = b.interrupter();
    let (second, _) = tokio::join!(b.turn(TurnInput::text("i2: a slow one")), async {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert!(interrupter.interrupt().await);
    });
    let second = ok(second);
    let third = ok(b.turn(TurnInput::text("i3: after the interrupt")).await);
    let beside = b.take_failed_attempts();
    let mut reported = Usage::default();
    for u in [first.usage, second.usage, third.usage]
        .iter()
        .chain(beside.iter().map(|a| &a.usage))
    {
        reported.add(u);
    }
    let mut billed = Usage::default();
    let mut each = Vec::new();
    for q in r.sim.sim.requests() {
        each.push(q.usage);
        if let Some(u) = q.usage {
            billed.add(&u);
        }
    }
    let input_side = |u: Usage| Usage { output: 0, ..u };
    assert_eq!(
        input_side(reported),
        input_side(billed),
        "turns {:?} / {:?} / {:?}; beside {beside:#?}; sim {each:#?}",
        first.usage,
        second.usage,
        third.usage
    );
    b.shutdown().await;
}

/// A stand-in that answers one turn, then starts a turn of its own (a background task's
/// notification) whose `result` comes a second later, and exits at the end of its stdin.
fn answers_then_runs_its_own_turn(tail: &str) -> String {
    use script::*;
    format!(
        "read line\n{}{}{tail}",
        printed(&[
            init(),
            echo("u1"),
            said("answer one", "msg_1", 11),
            result("answer one", 11)
        ]),
        printed(&[
            notification(),
            init(),
            said("UNPROMPTED-REPLY", "msg_own", 700)
        ]),
    )
}

/// A turn the CLI started by itself that is still running when the session is parked is
/// billed: closing stdin lets the CLI finish it, and its `result`, which comes while the park
/// waits for the child to exit, is read and reported like any turn of the CLI's own. Before,
/// the park never read the child's stdout: the turn's 700 input tokens, billed by the
/// provider, reached no ledger row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_cli_started_that_a_park_waits_out_is_billed() {
    let dir = tempfile::tempdir().unwrap();
    let tail = format!(
        "sleep 1\n{}while read line; do :; done\n",
        script::printed(&[script::result("UNPROMPTED-REPLY", 700)])
    );
    let bin = stand_in(dir.path(), &answers_then_runs_its_own_turn(&tail)).await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a8a").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("parked-own-turn")).await.unwrap();
    let first = ok(b.turn(TurnInput::text("u1")).await);
    assert_eq!((first.text.as_str(), first.usage.input), ("answer one", 11));
    assert!(b.park().await.is_some(), "a child was running");
    let beside = b.take_failed_attempts();
    let inputs: Vec<u64> = beside.iter().map(|a| a.usage.input).collect();
    assert_eq!(inputs, vec![700], "{beside:#?}");
    assert!(
        beside[0].error.contains("started by itself"),
        "{}",
        beside[0].error
    );
}

/// A turn the CLI started by itself that has not ended when shutdown gives up on the child
/// (it ignores the end of its stdin; SIGTERM after the shutdown timeout) is billed as far as
/// its stdout shows: each API message's usage as it began (input and cache final, output as
/// far as reported). Before, nothing of it was reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_cli_started_that_shutdown_cuts_short_is_billed_as_far_as_known() {
    let dir = tempfile::tempdir().unwrap();
    let bin = stand_in(
        dir.path(),
        &answers_then_runs_its_own_turn("exec sleep 30\n"),
    )
    .await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a8b").await;
    r.config.shutdown_timeout = Duration::from_secs(1);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("cut-own-turn")).await.unwrap();
    ok(b.turn(TurnInput::text("u1")).await);
    let started = std::time::Instant::now();
    b.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let beside = b.take_failed_attempts();
    let usage: Vec<Usage> = beside.iter().map(|a| a.usage).collect();
    assert_eq!(
        usage,
        vec![Usage {
            input: 700,
            output: 1,
            ..Usage::default()
        }],
        "{beside:#?}"
    );
    assert_eq!(beside[0].request_id.as_deref(), Some("req_msg_own"));
    assert!(
        beside[0].error.contains("still running"),
        "{}",
        beside[0].error
    );
}

/// What a dead child said does not outlive it: a child that told the driver a background task
/// ended (after which the CLI may start a turn of its own, told apart by a `result` after a
/// `system/init` with no echo of the line) and died, then the relaunched real CLI answering a
/// `/compact` that cannot compact — init, the CLI's own `Error: No messages to compact`, a
/// `result`, and no echo of the line. That `result` is the `/compact`'s: it fails as a
/// compaction that did not happen, at once, and nothing is billed beside it. Before, the dead
/// child's notification held in the new child: the `result` was taken for a turn the CLI
/// started by itself (reported as billed), and the `/compact` waited out its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_childs_notification_does_not_outlive_it() {
    let Some(cli) = claude_cli() else { return };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("notified-once");
    // The first launch notifies and dies; every later one is the real CLI.
    let wrapper = stand_in(
        dir.path(),
        &format!(
            "if [ ! -e '{marker}' ]; then\n: > '{marker}'\n{}exit 0\nfi\nexec '{cli}' \"$@\"\n",
            script::printed(&[script::notification()]),
            marker = marker.display(),
            cli = cli.display(),
        ),
    )
    .await;
    let mut r = rig(wrapper, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a8c").await;
    r.config.turn_timeout = Duration::from_secs(30);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("notified")).await.unwrap();
    let err = b.compact("").await.unwrap_err();
    assert!(marker.exists(), "the notifying child never ran");
    assert!(
        matches!(&err, BackendError::CompactionFailed(m) if m.contains("No messages to compact")),
        "{err:?}"
    );
    let beside = b.take_failed_attempts();
    assert!(beside.is_empty(), "{beside:#?}");
    b.shutdown().await;
}

/// A notification that comes during a turn, after the CLI took the turn's line, may be taken
/// into that turn's tool loop (no turn of the CLI's own follows) — from stdout it cannot be
/// told whether it was. A `/compact` after it (a CLI stand-in: init, the compaction, a
/// `result`, no echo) is still the `/compact`'s: a turn of the CLI's own is the model's, and
/// no message of a model came. Before, the `result` was taken for a turn the CLI started by
/// itself and the compaction waited out its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_after_a_notification_is_not_a_turn_of_the_clis_own() {
    use script::*;
    let dir = tempfile::tempdir().unwrap();
    let boundary = json!({"type": "system", "subtype": "compact_boundary",
        "compact_metadata": {"trigger": "manual", "pre_tokens": 900}});
    let summary = json!({"type": "user", "message": {"role": "user",
        "content": "This session is being continued: THE SUMMARY"}});
    let compacted = json!({"type": "result", "subtype": "success", "is_error": false,
        "result": "", "usage": {"input_tokens": 0, "output_tokens": 0},
        "model_usage_since_last_result": {"claude-opus-5-5": {"inputTokens": 900,
            "outputTokens": 40, "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0,
            "costUSD": 0.5}}});
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n{}read line\n{}while read line; do :; done\n",
            printed(&[
                init(),
                echo("u1"),
                said("looking", "msg_1", 11),
                notification(),
                said("answer one", "msg_2", 12),
                result("answer one", 23),
            ]),
            printed(&[init(), boundary, summary, compacted]),
        ),
    )
    .await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a92").await;
    r.config.turn_timeout = Duration::from_secs(10);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("notified-absorbed")).await.unwrap();
    ok(b.turn(TurnInput::text("u1")).await);
    let compacted = b.compact("").await;
    let beside = b.take_failed_attempts();
    assert_eq!(
        compacted
            .map(|o| (o.text, o.usage.input))
            .map_err(|e| e.to_string()),
        Ok((
            "This session is being continued: THE SUMMARY".to_string(),
            900
        )),
        "beside: {beside:#?}"
    );
    assert_eq!(beside, Vec::<FailedAttempt>::new());
    b.shutdown().await;
}

/// A turn the CLI started by itself that takes muninn's line into its loop (the echo comes
/// after its messages), then dies: what the model did after the line is in the session file,
/// so the session holds the turn and is in step. The stand-in stores its own turn's message
/// before it reads the line, as the CLI does. Before, the own turn's message was still among
/// those the file's part after the line had to hold, was not found there, and the session was
/// called out of step (the caller rebuilt a session that was fine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_of_the_clis_own_that_absorbed_the_line_leaves_the_session_in_step() {
    use script::*;
    let dir = tempfile::tempdir().unwrap();
    let session = "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a94";
    let file = dir
        .path()
        .join("data/home/.claude/projects/stand-in")
        .join(format!("{session}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let stored = |events: &[Value]| -> String {
        events
            .iter()
            .map(|e| format!("printf '%s\\n' '{e}' >> '{}'\n", file.display()))
            .collect()
    };
    let user = |t: &str| json!({"type": "user", "message": {"role": "user", "content": t}});
    let model = |id: &str| {
        json!({"type": "assistant", "message": {"id": id, "model": "m", "role": "assistant",
            "content": [{"type": "text", "text": id}]}})
    };
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n{}{}{}read line\n{}{}exit 1\n",
            stored(&[user("u1"), model("msg_1"), model("msg_own")]),
            printed(&[
                init(),
                echo("u1"),
                said("answer one", "msg_1", 11),
                result("answer one", 11),
            ]),
            printed(&[notification(), init(), said("OWN", "msg_own", 700)]),
            stored(&[user("u2"), model("msg_2")]),
            printed(&[echo("u2"), said("answer two", "msg_2", 13)]),
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
    let mut b = ClaudeCliBackend::new(config);
    b.start(spec("absorbed")).await.unwrap();
    ok(b.turn(TurnInput::text("u1")).await);
    let err = b.turn(TurnInput::text("u2")).await.unwrap_err();
    assert!(
        err.to_string().contains("claude exited during the turn"),
        "{err}"
    );
    let report = b.last_report().unwrap().clone();
    assert!(
        report.held && !report.out_of_step && b.failure_kept_turn(),
        "{report:?}"
    );
    b.shutdown().await;
}
