//! The flush protocol: no flush below the trigger, a long tool loop flushed, a slow flush
//! interrupted after its grace.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_below_the_trigger_needs_no_flush_and_a_long_tool_loop_is_flushed() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "f1a5b000-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    r.config.tools = vec!["Read".to_string()];
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("flush")).await.unwrap();

    // (a) Far below the ceiling: a plain turn.
    let a = b
        .run(TurnInput::text("flush a: hello"), &protocol(10_000_000))
        .await
        .unwrap();
    assert_eq!(a.flush, FlushStage::NotNeeded);
    assert!(a.outcome.text.contains("flush a: hello"));
    let pid = b.last_report().unwrap().pid;

    // (b) A tool loop of up to 8 rounds; each round adds a tool call and its result (about 240
    // tokens with the sim's Read input), so a trigger 150 tokens above the last prompt is
    // crossed by the loop's second request, not its first.
    let trigger = a.outcome.usage.prompt() + 150;
    let before = messages_from(&r.sim, 0).len();
    let run = b
        .run(
            TurnInput::text("use Read to look around [sim: tool rounds 8]"),
            &protocol(trigger),
        )
        .await
        .unwrap();
    assert_eq!(run.flush, FlushStage::Flushed, "{:?}", run.outcome);
    assert!(
        run.outcome.text.contains(FLUSH_MESSAGE),
        "{}",
        run.outcome.text
    );
    let requests = messages_from(&r.sim, before);
    let prompts: Vec<u64> = requests.iter().map(|q| q.usage.unwrap().prompt()).collect();
    eprintln!("FIGURE flush run: trigger {trigger}, request prompts {prompts:?}");
    assert!(prompts[0] < trigger, "{prompts:?}");
    // The flush reached the sim inside the loop: beside a tool result, in a request after the
    // one that crossed the trigger, and it ended the loop before its 8 rounds.
    let flushed_at = requests
        .iter()
        .position(|q| {
            let last = last_user(&q.body);
            last.contains(FLUSH_MESSAGE) && last.contains("tool_result")
        })
        .unwrap_or_else(|| panic!("no request carried the flush inside the loop"));
    assert!(flushed_at >= 2, "{flushed_at}");
    assert!(prompts[flushed_at - 1] >= trigger, "{prompts:?}");
    assert_eq!(
        flushed_at,
        requests.len() - 1,
        "the flush answer ended the run"
    );
    assert!(requests.len() < 9, "{}", requests.len());
    // The run's usage is the sum over its requests.
    let summed = requests
        .iter()
        .fold(muninn_core::trace::Usage::default(), |mut u, q| {
            u.add(&q.usage.unwrap());
            u
        });
    assert_eq!(run.outcome.usage, summed);

    // The process carries on.
    ok(b.turn(TurnInput::text("flush c: after")).await);
    assert_eq!(b.last_report().unwrap().pid, pid);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_flush_is_interrupted_after_its_grace_and_terminated_when_told() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "f1a5b000-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.tools = vec!["Read".to_string()];
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("slow flush")).await.unwrap();
    ok(b.turn(TurnInput::text("slow warm")).await);
    let pid = b.last_report().unwrap().pid;

    // The flush is asked at once, and its answer streams far past a 1 s grace.
    r.sim.sim.push_faults(a_quick_then_a_slow_request());
    let short = FlushProtocol {
        grace: Duration::from_secs(1),
        ..protocol(1)
    };
    let started = std::time::Instant::now();
    let run = b
        .run(
            TurnInput::text("use Read to look [sim: tool rounds 3]"),
            &short,
        )
        .await
        .unwrap();
    eprintln!("FIGURE interrupted flush run took {:?}", started.elapsed());
    assert_eq!(run.flush, FlushStage::Interrupted, "{:?}", run.outcome);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // The process stays usable.
    ok(b.turn(TurnInput::text("slow after the interrupt")).await);
    assert_eq!(b.last_report().unwrap().pid, pid, "the same process");

    a_flush_with_no_time_after_its_interrupt_is_terminated(&mut b, &r, pid).await;
    b.shutdown().await;
}

/// The loop's first request crosses a trigger of 1 token, so the flush is asked at once;
/// the next request streams one event a second, far past a 1 s grace.
fn a_quick_then_a_slow_request() -> [Fault; 2] {
    [
        Fault {
            kind: FaultKind::Slow {
                first_byte_ms: 0,
                event_ms: 0,
            },
            times: 1,
        },
        Fault {
            kind: FaultKind::Slow {
                first_byte_ms: 0,
                event_ms: 1_000,
            },
            times: 1,
        },
    ]
}

/// No time to wait after the interrupt: the child (`pid`) is terminated, and the next turn
/// relaunches it with `--resume`, the history intact.
async fn a_flush_with_no_time_after_its_interrupt_is_terminated(
    b: &mut ClaudeCliBackend,
    r: &Rig,
    pid: Option<u32>,
) {
    r.sim.sim.clear_faults();
    r.sim.sim.push_faults(a_quick_then_a_slow_request());
    let hasty = FlushProtocol {
        grace: Duration::from_secs(1),
        escalate_after: Duration::ZERO,
        ..protocol(1)
    };
    let run = b
        .run(
            TurnInput::text("use Read to peek [sim: tool rounds 3]"),
            &hasty,
        )
        .await
        .unwrap();
    assert_eq!(run.flush, FlushStage::Terminated, "{:?}", run.outcome);
    if let Some(pid) = pid {
        wait_dead(pid).await;
    }
    r.sim.sim.clear_faults();
    ok(b.turn(TurnInput::text("slow after the termination")).await);
    let report = b.last_report().unwrap();
    assert!(
        matches!(report.session_events.as_slice(), [SessionEvent::Relaunched { session_id }] if session_id == &r.config.session_id),
        "{:?}",
        report.session_events
    );
    assert_ne!(report.pid, pid);
    let sent = user_messages_sent_with(&r.sim, "slow after the termination");
    assert!(sent.iter().any(|m| m.contains("slow warm")), "{sent:?}");
}
