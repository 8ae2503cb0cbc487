//! Turns in one process: usage as the cache model says, a killed child resumed, API errors,
//! structured output, interrupts and the backend suite.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_turns_in_one_process_report_the_cache_models_usage() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("six")).await.unwrap();
    let texts = [
        "first: hello",
        "second: what is a raven?",
        "third: and a crow?",
        "fourth: which is larger?",
        "fifth: thanks",
        "sixth: one more thing",
    ];
    let mut pids = Vec::new();
    let mut reads = Vec::new();
    for text in texts {
        let o = ok(b.turn(TurnInput::text(text)).await);
        let expected = expected_for(&r.sim, text);
        assert_eq!(o.usage, expected, "{text}: usage equals the cache model's");
        assert_eq!(
            o.raw_usage["cache_read_input_tokens"].as_u64(),
            Some(expected.cache_read)
        );
        assert!(o.text.contains(text), "{}", o.text);
        let report = b.last_report().unwrap();
        assert!(report.session_events.is_empty());
        assert!(report.model_usage_since_last_result.is_some());
        pids.push(report.pid.unwrap());
        reads.push(o.usage.cache_read);
        eprintln!(
            "turn overhead: to write {:?}, from result {:?}",
            report.to_write, report.from_result
        );
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "one process: {pids:?}"
    );
    assert!(
        reads[0] == 0 && reads.windows(2).all(|w| w[1] > w[0]),
        "reads grow: {reads:?}"
    );
    let rss = vm_rss_kb(pids[0]).unwrap();
    eprintln!("six turns, one process; reads {reads:?}; child VmRSS {rss} kB");
    let status = b.shutdown().await.unwrap();
    assert!(status.success(), "{status:?}");
    drop(r.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_child_is_resumed_and_a_lost_session_is_reseeded() {
    let Some(bin) = claude_cli() else { return };
    let session = "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a52";
    let r = rig(bin, session).await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("kill")).await.unwrap();
    ok(b.turn(TurnInput::text("k1: before the kill")).await);
    ok(b.turn(TurnInput::text("k2: still before")).await);
    a_killed_child_is_resumed_with_its_history(&mut b, &r, session).await;
    let second = a_deleted_transcript_is_reseeded_from_the_log(&mut b, &r, session).await;
    a_corrupt_transcript_is_refused_then_reseeded(&mut b, &r, &second).await;
}

/// The last report's child, SIGKILLed and reaped.
async fn kill_the_child(b: &ClaudeCliBackend) {
    let pid = b.last_report().unwrap().pid.unwrap();
    sigkill(pid);
    wait_dead(pid).await;
}

/// SIGKILL → the next turn relaunches with --resume and carries the whole history.
async fn a_killed_child_is_resumed_with_its_history(
    b: &mut ClaudeCliBackend,
    r: &Rig,
    session: &str,
) {
    let pid = b.last_report().unwrap().pid.unwrap();
    kill_the_child(b).await;
    let o = ok(b.turn(TurnInput::text("k3: after the kill")).await);
    let report = b.last_report().unwrap().clone();
    assert_eq!(
        report.session_events,
        vec![SessionEvent::Relaunched {
            session_id: session.to_string()
        }]
    );
    assert_ne!(report.pid, Some(pid));
    assert_eq!(report.session_id, session);
    assert_eq!(o.usage, expected_for(&r.sim, "k3: after the kill"));
    let last = r.sim.sim.requests().last().unwrap().body.to_string();
    assert!(last.contains("k1: before the kill") && last.contains("k2: still before"));
    assert!(o.usage.cache_read > 0, "the resumed request read the cache");
}

/// Delete the transcript, kill → a fresh session with a new id, reported, seeded once from
/// the backend's log. Returns the new session's id.
async fn a_deleted_transcript_is_reseeded_from_the_log(
    b: &mut ClaudeCliBackend,
    r: &Rig,
    session: &str,
) -> String {
    let file = transcript_path(&r.config, session).unwrap();
    std::fs::remove_file(&file).unwrap();
    kill_the_child(b).await;
    ok(b.turn(TurnInput::text("k4: after the delete")).await);
    let report = b.last_report().unwrap().clone();
    let [
        SessionEvent::Reseeded {
            old_session_id,
            new_session_id,
            reason,
            seed_tokens,
        },
    ] = report.session_events.as_slice()
    else {
        panic!("{:?}", report.session_events)
    };
    assert_eq!(old_session_id, session);
    assert_ne!(new_session_id, session);
    assert_eq!(&report.session_id, new_session_id);
    assert!(reason.contains("missing"), "{reason}");
    // A fresh session, seeded from the backend's log of the turns so far: one user message
    // whose first block is the seed carrying every earlier turn, then the new input.
    let sent = user_messages_sent_with(&r.sim, "k4: after the delete");
    assert_eq!(sent.len(), 1, "a fresh session: {sent:?}");
    let blocks: Value = serde_json::from_str(&sent[0]).unwrap();
    let seed = blocks[0]["text"].as_str().unwrap();
    for earlier in [
        "k1: before the kill",
        "k2: still before",
        "k3: after the kill",
    ] {
        assert!(seed.contains(earlier), "{earlier} in the seed: {seed}");
    }
    assert_eq!(*seed_tokens, muninn_core::tokenize::count(seed));
    assert!(*seed_tokens > 0);
    assert_eq!(blocks[1]["text"], json!("k4: after the delete"));
    ok(b.turn(TurnInput::text("k5: in the new session")).await);
    // The seed went once: the next turn is a plain append.
    let sent = user_messages_sent_with(&r.sim, "k5: in the new session");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[1].contains("k5: in the new session") && !sent[1].contains("[muninn]"),
        "{}",
        sent[1]
    );
    report.session_id
}

/// Corrupt the (new) transcript, kill → the CLI says "No conversation found" → reseeded.
async fn a_corrupt_transcript_is_refused_then_reseeded(
    b: &mut ClaudeCliBackend,
    r: &Rig,
    second: &str,
) {
    let file = transcript_path(&r.config, second).unwrap();
    std::fs::write(&file, "garbage{{{\n").unwrap();
    kill_the_child(b).await;
    ok(b.turn(TurnInput::text("k6: after the corruption")).await);
    let report = b.last_report().unwrap().clone();
    // The file still exists, so the driver first tries `--resume`; the CLI refuses it.
    match report.session_events.as_slice() {
        [
            SessionEvent::Relaunched { .. },
            SessionEvent::Reseeded {
                old_session_id,
                reason,
                seed_tokens,
                ..
            },
        ] => {
            assert_eq!(old_session_id, second);
            assert!(reason.contains("No conversation found"), "{reason}");
            assert!(*seed_tokens > 0);
        }
        other => panic!("{other:?}"),
    }
    assert_ne!(report.session_id, second);
    // Seeded again from the whole log, including the turns of the session just lost.
    let sent = user_messages_sent_with(&r.sim, "k6: after the corruption");
    assert_eq!(sent.len(), 1, "{sent:?}");
    for earlier in [
        "k1: before the kill",
        "k4: after the delete",
        "k5: in the new session",
    ] {
        assert!(sent[0].contains(earlier), "{earlier} in {}", sent[0]);
    }
    eprintln!("relaunch and reseeds: {:?}", report.session_events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_come_back_as_the_cli_reports_them() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a53").await;
    r.config.max_retries = Some(2);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("errors")).await.unwrap();
    ok(b.turn(TurnInput::text("e1: fine")).await);

    // 529 ×3: the CLI gives up after 3 attempts (2 retries).
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Overloaded,
        times: 3,
    }]);
    let err = b.turn(TurnInput::text("e2: overloaded")).await.unwrap_err();
    let BackendError::Api {
        status, retryable, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((*status, *retryable), (529, true));
    let retries = &b.last_report().unwrap().retries;
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(retries.iter().all(|r| r.status == Some(529)));

    // 500 ×2 then success: two RetryEvents on a good outcome.
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::ServerError,
        times: 2,
    }]);
    let o = ok(b.turn(TurnInput::text("e3: flaky")).await);
    assert_eq!(o.retries.len(), 2, "{:?}", o.retries);
    assert!(o.retries.iter().all(|r| r.status == Some(500)));
    assert_eq!(o.retries[0].attempt, 1);

    // 500 past the budget of 2 retries: a final failure.
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::ServerError,
        times: 3,
    }]);
    let err = b.turn(TurnInput::text("e4: down")).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Api { status: 500, .. }),
        "{err:?}"
    );
    assert_eq!(b.last_report().unwrap().retries.len(), 2);

    // The session stays usable: the refused turn was taken back out of it (its child stopped,
    // the session file cut back), and the next turn resumes the session without it.
    assert!(b.last_report().unwrap().rewound);
    ok(b.turn(TurnInput::text("e5: recovered")).await);
    let users = user_messages_sent_with(&r.sim, "e5: recovered").concat();
    assert!(
        users.contains("e3: flaky") && !users.contains("e4: down"),
        "{users}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_session_returns_structured_output() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a54").await;
    let schema = json!({
        "type": "object",
        "properties": {"mood": {"type": "string"}, "energy": {"type": "integer"}},
        "required": ["mood", "energy"],
    });
    let mut s = spec("persona");
    s.output_schema = Some(schema.clone());
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(s).await.unwrap();
    let o = ok(b.turn(TurnInput::text("How is the persona today?")).await);
    let v = o.structured.expect("structured output");
    muninn_backend::schema::validate(&schema, &v).unwrap();
    let o = ok(b.turn(TurnInput::text("And now?")).await);
    assert!(o.structured.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_a_slow_turn_and_keeps_the_process() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a55").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("interrupt")).await.unwrap();
    ok(b.turn(TurnInput::text("i1: warm up")).await);
    let pid = b.last_report().unwrap().pid;
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 0,
            event_ms: 1_000,
        },
        times: 1,
    }]);
    let interrupter = b.interrupter();
    let started = std::time::Instant::now();
    let (o, _) = tokio::join!(b.turn(TurnInput::text("i2: a slow one")), async {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert!(interrupter.interrupt().await);
    });
    let o = ok(o);
    assert_eq!(o.stop_reason, "interrupted");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let o = ok(b.turn(TurnInput::text("i3: after the interrupt")).await);
    assert_eq!(o.stop_reason, "end_turn");
    assert_eq!(b.last_report().unwrap().pid, pid, "the same process");
}

struct Harness {
    bin: PathBuf,
    base_url: String,
    dir: tempfile::TempDir,
    sessions: std::sync::atomic::AtomicU32,
}

impl muninn_testkit::SuiteHarness for Harness {
    type B = ClaudeCliBackend;

    async fn backend(&self) -> ClaudeCliBackend {
        let n = self
            .sessions
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ClaudeCliBackend::new(CliConfig::new(
            &self.bin,
            self.dir.path(),
            &self.base_url,
            Secret::new("sk-test-cli"),
            format!("5017e000-0000-4000-8000-{n:012x}"),
        ))
    }

    fn model(&self) -> String {
        // The CLI's default model (what it sends when not told otherwise).
        String::new()
    }

    fn nonce(&self) -> String {
        "claude-cli-suite".to_string()
    }

    async fn advance_clock(&self, _ms: u64) -> bool {
        // The CLI runs on the wall clock; the TTL case is skipped.
        false
    }
}

/// The behaviour suite: `tool_round_trip` is skipped by design — the backend runs the CLI with
/// `--tools=` and says at `start` that it cannot offer custom tools (offering muninn's tools
/// would need an MCP bridge); nor can it ping. The test pins exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_suite_passes_without_custom_tools_and_pings() {
    let Some(bin) = claude_cli() else { return };
    let sim = sim().await;
    let h = Harness {
        bin,
        base_url: sim.base_url(),
        dir: tempfile::tempdir().unwrap(),
        sessions: std::sync::atomic::AtomicU32::new(0),
    };
    let report = muninn_testkit::run_backend_suite(&h).await.unwrap();
    assert_eq!(
        report.passed,
        vec!["append_reads_grow", "structured_output", "capabilities"]
    );
    assert_eq!(report.skipped, vec!["tool_round_trip", "ttl_expiry"]);
    assert_eq!(
        report.unsupported,
        vec![Capability::Ping, Capability::PingHead]
    );
}

/// A child that takes no input (stopped here with SIGSTOP: hung, or busy past its pipe) cannot
/// hold a turn forever: a line bigger than the pipe's buffer blocks the write, and the turn's
/// timeout covers the write as well as the read. The child is killed, the error says why, and
/// the next turn resumes the session with its conversation whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_takes_no_input_times_out_and_the_next_turn_resumes() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a71").await;
    // Long enough for a real CLI's first and last turns on a loaded two-core machine (3 s was
    // a thin margin there); the stalled turn waits it out.
    r.config.turn_timeout = Duration::from_secs(12);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("stalled")).await.unwrap();
    ok(b.turn(TurnInput::text("s1: before the stall")).await);
    let pid = b.last_report().unwrap().pid.unwrap();
    let stopped = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(stopped, rustix::process::Signal::STOP).unwrap();

    // 1 MiB: far more than a pipe holds, so the write itself waits on the stopped child.
    let big = format!("s2: {}", "x".repeat(1 << 20));
    let err = tokio::time::timeout(Duration::from_secs(60), b.turn(TurnInput::text(big)))
        .await
        .expect("the turn never ended: a child that takes no input stalls it")
        .unwrap_err();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    assert!(err.to_string().contains("took no input"), "{err}");
    wait_dead(pid).await;

    let o = ok(b.turn(TurnInput::text("s3: after the stall")).await);
    assert!(!o.text.is_empty());
    assert_ne!(b.last_report().unwrap().pid, Some(pid));
    let sent = user_messages_sent_with(&r.sim, "s3: after the stall");
    assert!(
        sent.iter().any(|m| m.contains("s1: before the stall")),
        "{sent:?}"
    );
    // The half-written line was never taken: nothing of it reached the API.
    assert!(!sent.iter().any(|m| m.contains("s2: ")), "{sent:?}");
}

/// The child's stderr is drained whatever it holds. A child (a stand-in script: the real CLI
/// cannot be made to write these) that writes a byte that is not UTF-8, then a 1 MiB line, then
/// its last words and exits: the turn fails at once naming those words. Before, the drain
/// stopped at the bad byte and closed the pipe, so the child's next stderr write killed it
/// (SIGPIPE) and the error named nothing of why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_stderr_is_drained_whatever_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("claude");
    std::fs::write(
        &bin,
        "#!/bin/sh\n\
         printf 'bad \\377 byte\\n' >&2\n\
         head -c 1048576 /dev/zero | tr '\\000' e >&2\n\
         printf '\\nfatal: the stderr end\\n' >&2\n\
         exit 3\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a72").await;
    r.config.turn_timeout = Duration::from_secs(20);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("stderr")).await.unwrap();
    let started = std::time::Instant::now();
    let err = b.turn(TurnInput::text("e1")).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("fatal: the stderr end"), "{message}");
    assert!(message.contains("bad \u{fffd} byte"), "{message}");
    assert!(message.contains("1048576 bytes"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// A child killed at the turn's timeout takes the processes it started with it: the real CLI
/// runs a Bash tool call (a `tail -f` that outlasts the turn) in a process group of its own,
/// the turn times out, and the driver kills the CLI's whole process tree, not the CLI alone.
/// Before, the `tail` was left running, orphaned, after every timed-out or killed run of a
/// session with tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_child_leaves_no_process_of_its_own_running() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a73").await;
    r.config.turn_timeout = Duration::from_secs(8);
    r.config.tools = vec!["Bash".to_string()];
    // Bash allowed by the project's settings (`bypassPermissions` is refused to root).
    let project = r.config.work_dir().join(".claude");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("settings.json"),
        json!({"permissions": {"allow": ["Bash"]}}).to_string(),
    )
    .unwrap();
    // A duration no other test uses: the tool's process is found by its command line.
    // (The CLI refuses a plain `sleep` as a way to wait, and a read outside its directory.)
    let command = "tail -s 3173 -f wait.log";
    std::fs::write(r.config.work_dir().join("wait.log"), "").unwrap();
    let script = json!([{"name": "Bash", "input": {"command": command, "description": "wait"}}]);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("group")).await.unwrap();
    let watch = tokio::spawn(async move {
        for _ in 0..200 {
            if let Some(pid) = pid_running(command) {
                return Some(pid);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    });
    let err = b
        .turn(TurnInput::text(format!(
            "run it [sim: tool calls {script}]"
        )))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no result within"), "{err}");
    let tool_pid = watch.await.unwrap().expect("the Bash tool never ran");
    wait_dead(tool_pid).await;
}

/// A clean stop leaves no process the CLI started running: a Bash tool call starts a `tail` in
/// the background (`cmd &`: its shell exits at once, and the `tail`, adopted by init, leaves the
/// CLI's tree), the turn ends, and the session is parked; the next turn starts another, and the
/// backend shuts down. Each `tail` dies with the stop. The CLI runs with `bypassPermissions`,
/// as a Self whose Bash calls nobody can approve does (it asks before a `&`; as root it takes
/// the mode only with `IS_SANDBOX=1`, set by a wrapper). Before, both ran on after the CLI
/// exited: the stop signalled the CLI alone, and the tree kill reaches only what is below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_process_the_cli_started() {
    let Some(cli) = claude_cli() else { return };
    let dir = tempfile::tempdir().unwrap();
    let wrapper = stand_in(
        dir.path(),
        &format!("export IS_SANDBOX=1\nexec '{}' \"$@\"\n", cli.display()),
    )
    .await;
    let mut r = rig(wrapper, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a93").await;
    r.config.tools = vec!["Bash".to_string()];
    r.config.permission_mode = Some("bypassPermissions".to_string());
    std::fs::create_dir_all(r.config.work_dir()).unwrap();
    std::fs::write(r.config.work_dir().join("wait.log"), "").unwrap();
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("left-behind")).await.unwrap();
    for (seconds, park) in [(3176, true), (3177, false)] {
        // A duration no other test uses: the process is found by its command line.
        let command = format!("tail -s {seconds} -f wait.log");
        let script = json!([{"name": "Bash", "input": {
            "command": format!("{command} >/dev/null 2>&1 &"), "description": "watch"}}]);
        let o = ok(b
            .turn(TurnInput::text(format!(
                "watch it [sim: tool calls {script}]"
            )))
            .await);
        let mut pid = pid_running(&command);
        for _ in 0..100 {
            if pid.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            pid = pid_running(&command);
        }
        let pid = pid.unwrap_or_else(|| panic!("the Bash tool never started the tail: {}", o.text));
        if park {
            assert!(b.park().await.is_some(), "a child was running");
        } else {
            b.shutdown().await;
        }
        wait_dead(pid).await;
    }
}

/// The pid of a process whose command line is `command` (arguments split at spaces).
pub(crate) fn pid_running(command: &str) -> Option<u32> {
    let wanted: Vec<u8> = command
        .split(' ')
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            (std::fs::read(entry.path().join("cmdline")).ok()? == wanted).then_some(pid)
        })
}

/// A `result` whose fields are not of the types the driver knows still ends the turn. A child
/// (a stand-in script speaking stream-json: the pinned CLI writes none such) answers with
/// `"errors": null` and `"api_error_status": "none"`: the turn is answered at once from the
/// fields that read. Before, the line was kept as an unknown event, the turn waited its whole
/// timeout for a `result` that had come, the child was killed, and a retry would have sent the
/// message a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_with_odd_fields_still_ends_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("claude");
    let init = json!({"type": "system", "subtype": "init", "session_id": "s"});
    let result = json!({"type": "result", "subtype": "success", "is_error": false,
        "result": "answered", "errors": null, "api_error_status": "none",
        "usage": {"input_tokens": 3, "output_tokens": 2}});
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\nread line\necho '{init}'\necho '{result}'\nwhile read line; do :; done\n"
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a74").await;
    r.config.turn_timeout = Duration::from_secs(10);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("odd")).await.unwrap();
    let started = std::time::Instant::now();
    let o = ok(b.turn(TurnInput::text("o1")).await);
    assert_eq!(o.text, "answered");
    assert_eq!((o.usage.input, o.usage.output), (3, 2));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A dead child's error carries its last stderr words even when they come after its stdout
/// closed (here written by a process it left behind, half a second later): the driver waits,
/// bounded, for stderr to end. Before, it waited a fixed 20 ms, and on a busy machine the error
/// named nothing of why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_childs_late_stderr_is_in_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("claude");
    std::fs::write(
        &bin,
        "#!/bin/sh\n\
         read line\n\
         (exec >/dev/null; sleep 0.5; echo 'fatal: late words' >&2) &\n\
         exit 3\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a75").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("late")).await.unwrap();
    let err = b.turn(TurnInput::text("l1")).await.unwrap_err();
    assert!(err.to_string().contains("fatal: late words"), "{err}");
}

/// A subagent's messages are not the turn's reply: the CLI writes them to stdout (with a
/// `parent_tool_use_id`) among the main thread's, and the reply is the main thread's text and
/// calls alone. Here the model calls the `Agent` tool, whose subagent answers the sim's text
/// for its prompt. Before, that answer was joined into the turn's text, between the main
/// thread's words, and a subagent's tool calls were listed as the turn's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_messages_are_not_the_turns_reply() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a76").await;
    r.config.tools = vec!["Agent".to_string()];
    let script = json!([{"name": "Agent", "input": {"description": "look",
        "prompt": "SUBAGENT-ONLY-TEXT", "subagent_type": "general-purpose"}}]);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("subagent")).await.unwrap();
    let o = ok(b
        .turn(TurnInput::text(format!(
            "delegate [sim: tool calls {script}]"
        )))
        .await);
    // The subagent did run and answer (the sim saw its request) ...
    assert!(
        r.sim
            .sim
            .requests()
            .iter()
            .any(|q| last_user(&q.body).contains("SUBAGENT-ONLY-TEXT")),
        "the subagent never ran"
    );
    // ... and its answer is not the turn's.
    assert!(!o.text.contains("SUBAGENT-ONLY-TEXT"), "{}", o.text);
    let calls: Vec<&str> = o.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(calls, vec!["Agent"]);
    b.shutdown().await;
}

/// A reply the model gave in several API messages (here a text and a `Read` call, then, after
/// the tool's result, a second text) keeps them apart: its messages are joined by a blank
/// line, as paragraphs, while the blocks of one message are joined as they are. Before, the
/// messages ran together: "I will use the Read tool.Tool result received: …".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_in_several_messages_keeps_them_apart() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a8d").await;
    r.config.tools = vec!["Read".to_string()];
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("paragraphs")).await.unwrap();
    let o = ok(b.turn(TurnInput::text("please use Read on it")).await);
    let calls: Vec<&str> = o.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(calls, vec!["Read"]);
    assert!(
        o.text
            .starts_with("I will use the Read tool.\n\nTool result received: "),
        "{:?}",
        o.text
    );
    b.shutdown().await;
}

/// A message whose text is whitespace alone (the model often writes a bare `"\n\n"` block
/// before a tool call) adds nothing to a reply joined from several messages: the paragraphs
/// around it stay one blank line apart. A CLI stand-in answers in four messages, the two
/// between the paragraphs whitespace alone (`"\n\n"`, `" "`). Before, each was joined as a
/// paragraph of its own: "First.\n\n\n\n\n\n \n\nSecond.".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_message_adds_no_blank_lines_to_the_reply() {
    use script::*;
    let dir = tempfile::tempdir().unwrap();
    let events = [
        init(),
        echo("w1"),
        said("First.", "msg_w1", 5),
        said("\n\n", "msg_w2", 5),
        said(" ", "msg_w3", 5),
        said("Second.", "msg_w4", 5),
        result("Second.", 5),
    ];
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n{}while read line; do :; done\n",
            printed(&events)
        ),
    )
    .await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a90").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("blank")).await.unwrap();
    let o = ok(b.turn(TurnInput::text("w1")).await);
    assert_eq!(o.text, "First.\n\nSecond.");
    b.shutdown().await;
}
