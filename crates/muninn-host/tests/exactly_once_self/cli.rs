//! A brief whose append answer is lost, on the Claude Code CLI: sent once on the same
//! child session.

use super::*;

/// Steps a Claude Code runner until it idles, each step a new wake (a Persona turn reads each
/// report in between); every step must succeed.
async fn settle_cli(r: &mut MindRunner<muninn_host::backends::AnyBackend>) {
    for _ in 0..10 {
        r.woken();
        if matches!(r.step().await.unwrap(), Step::Idle { .. }) {
            return;
        }
    }
    panic!("never idle");
}

/// The user lines of every CLI session file the Self's child wrote that hold `word`.
fn self_session_lines_with(w: &crate::cli_world::CliWorld, word: &str) -> Vec<String> {
    let projects = w
        .host
        .config
        .data_dir
        .join("claude-cli/vala/self/home/.claude/projects");
    let mut lines = Vec::new();
    for dir in std::fs::read_dir(projects).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "jsonl") {
                let text = std::fs::read_to_string(f.path()).unwrap();
                lines.extend(
                    text.lines()
                        .filter(|l| l.contains(word))
                        .filter(|l| {
                            serde_json::from_str::<Value>(l).is_ok_and(|v| v["type"] == "user")
                        })
                        .map(str::to_string),
                );
            }
        }
    }
    lines
}

/// [`a_brief_whose_append_answer_is_lost_is_recorded_shown_and_run_once`] on the Claude Code
/// CLI, whose Self session is the CLI's own (its session file, resumed by later briefs): the
/// brief held after its lost append answer is sent on the same child, once — its session file
/// holds one user line with the brief, the next brief's request extends the same conversation
/// (one Self segment, the probe once in it), and the brief is done and reported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_cli_a_brief_whose_append_answer_is_lost_is_sent_once_on_the_same_session() {
    let Some(bin) = muninn_testkit::peers::claude_cli() else {
        return;
    };
    let (w, faults) = crate::exactly_once::faulty_cli_world(bin).await;
    let queue = |text: String| queue_on_cli(&w, text);
    let mut r = w.runner(mind(""), "host-a");
    r.register().await.unwrap();
    queue("Summarise the open issues.".into()).await;
    settle_cli(&mut r).await;
    let seq = queue(format!("{PROBE}: summarise the week.")).await;
    faults.lose_append_answers(1);
    r.woken();
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    settle_cli(&mut r).await;
    queue("And the month.".into()).await;
    settle_cli(&mut r).await;

    let lines = self_session_lines_with(&w, PROBE);
    assert_eq!(
        lines.len(),
        1,
        "the CLI session holds the brief {}",
        lines.len()
    );
    // The transcript, which a restarted host resumes the CLI session from, holds it once too.
    let transcript = self_transcript(&w.host.store).await;
    let recorded = transcript
        .iter()
        .filter(|(_, kind, text)| *kind == TranscriptKind::Brief && text.contains(PROBE))
        .count();
    assert_eq!(recorded, 1, "{transcript:#?}");
    // A restart resumes the Self's CLI session through its stored handle (the transcript and
    // the session still agree), and the next brief extends it: the probe in it once.
    drop(r);
    let mut restarted = w.runner(mind(""), "host-a");
    queue("And the year.".into()).await;
    settle_cli(&mut restarted).await;
    let self_requests: Vec<String> = w
        .messages_requests()
        .iter()
        .map(Value::to_string)
        .filter(|b| b.contains("(from the operator)"))
        .collect();
    let last = self_requests.last().unwrap();
    assert!(
        last.contains("And the month.") && last.contains("And the year."),
        "{last}"
    );
    assert_eq!(last.matches(PROBE).count(), 1, "{last}");
    one_segment_and_the_brief_done_once(&w, seq).await;
    w.server.stop().await.unwrap();
}

/// Queues an operator brief on `vala` at the world's time; its seq.
async fn queue_on_cli(w: &crate::cli_world::CliWorld, text: String) -> i64 {
    let brief = NewBrief {
        text,
        origin: BriefOrigin::Operator,
        created_at_ms: w.server.sim.now_ms(),
    };
    w.host
        .store
        .enqueue_brief("vala", &brief)
        .await
        .unwrap()
        .seq
}

/// The Self still in its one segment (its CLI session resumed, not rebuilt), and brief `seq`
/// done and reported to the Persona once.
async fn one_segment_and_the_brief_done_once(w: &crate::cli_world::CliWorld, seq: i64) {
    let segments = w.host.store.segments("vala", Role::SelfRole).await.unwrap();
    assert_eq!(segments.len(), 1, "{segments:#?}");
    let briefs = w.host.store.briefs("vala", None, 10).await.unwrap();
    let stored = briefs.into_iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(stored.status, BriefStatus::Done, "{stored:?}");
    let reports = w
        .host
        .store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .count();
    assert_eq!(reports, 1);
}
