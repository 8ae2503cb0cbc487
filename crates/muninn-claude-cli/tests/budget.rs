//! Spend limits: a spent budget is an error, and every run gets its whole run budget.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_an_error_not_a_success() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b0d9e7c2-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    // One micro-dollar: the first request crosses it.
    r.config.max_budget_micro_usd = Some(1);
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("budget")).await.unwrap();
    let err = b.turn(TurnInput::text("budget one")).await.unwrap_err();
    let BackendError::Api {
        kind,
        message,
        retryable,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(kind, "budget_exhausted");
    assert!(!retryable);
    assert!(message.contains("--max-budget-usd"), "{message}");
    // The crossing request ran; the next turn is refused without one.
    let count = || {
        r.sim
            .sim
            .requests()
            .iter()
            .filter(|q| q.path == "/v1/messages")
            .count()
    };
    assert_eq!(count(), 1);
    let err = b.turn(TurnInput::text("budget two")).await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Api { kind, .. } if kind == "budget_exhausted"),
        "{err:?}"
    );
    assert_eq!(count(), 1);
}

/// The session's cumulative `total_cost_usd` after the last exchange, micro-dollars.
fn total_micros(b: &ClaudeCliBackend) -> u64 {
    let total = b.last_report().unwrap().result.as_ref().unwrap()["total_cost_usd"]
        .as_f64()
        .unwrap();
    (total * 1e6).round() as u64
}

/// The `--max-budget-usd` argument of a live child, from `/proc/<pid>/cmdline`.
fn budget_arg(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--max-budget-usd")?;
    args.get(at + 1).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_budget_is_whole_for_every_run() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "b0d9e7c2-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.tools = vec!["Read".to_string()];
    let plain = protocol(10_000_000);

    let (resumed_run, live_run) = run_costs(&r.config).await;
    eprintln!("FIGURE run cost: resumed child {resumed_run} µ$, live child {live_run} µ$");
    // One run fits; two in one process do not.
    let budget = resumed_run * 3 / 2;
    assert!(resumed_run + live_run > budget, "{resumed_run} {live_run}");

    a_per_process_budget_is_spent_by_the_second_run(&r.config, budget, &plain).await;

    let mut per_run = r.config.clone();
    per_run.run_budget_micro_usd = Some(budget);
    let mut b = ClaudeCliBackend::new(per_run.clone());
    b.start(spec("run budget")).await.unwrap();
    three_runs_each_get_the_whole_budget(&mut b, &r, budget, &plain).await;
    a_run_over_its_budget_leaves_the_next_a_whole_one(&mut b, &r.sim, &plain).await;
    b.shutdown().await;

    // The two budgets cannot be combined.
    let mut both = per_run;
    both.max_budget_micro_usd = Some(budget);
    let err = ClaudeCliBackend::new(both)
        .start(spec("run budget"))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err:?}");
}

/// What one run costs on a warm, resumed session and in a running process, micro-dollars (the
/// CLI's own pricing of the sim's usage): the first request of a resumed child rewrites a
/// little of the cache, so it costs more than a turn in a running process, and it is what
/// every budgeted run after the first is.
async fn run_costs(config: &CliConfig) -> (u64, u64) {
    let mut b = ClaudeCliBackend::new(config.clone());
    b.start(spec("run budget")).await.unwrap();
    ok(b.turn(TurnInput::text("budget warm")).await);
    let warm = total_micros(&b);
    b.shutdown().await;
    let mut b = ClaudeCliBackend::new(config.clone());
    b.start(spec("run budget")).await.unwrap();
    ok(b.turn(TurnInput::text("budget measure")).await);
    let resumed_run = total_micros(&b) - warm;
    let before = total_micros(&b);
    ok(b.turn(TurnInput::text("budget measure two")).await);
    let live_run = total_micros(&b) - before;
    b.shutdown().await;
    (resumed_run, live_run)
}

/// Control: the same budget per process (today's `--max-budget-usd`) is spent by the second run.
async fn a_per_process_budget_is_spent_by_the_second_run(
    config: &CliConfig,
    budget: u64,
    plain: &FlushProtocol,
) {
    let mut per_process = config.clone();
    per_process.max_budget_micro_usd = Some(budget);
    let mut b = ClaudeCliBackend::new(per_process);
    b.start(spec("run budget")).await.unwrap();
    b.run(TurnInput::text("budget control one"), plain)
        .await
        .unwrap();
    let err = b
        .run(TurnInput::text("budget control two"), plain)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Api { kind, .. } if kind == "budget_exhausted"),
        "{err:?}"
    );
    b.shutdown().await;
}

/// Per run: three runs in a row, each under the whole budget, each in its own child, one session.
async fn three_runs_each_get_the_whole_budget(
    b: &mut ClaudeCliBackend,
    r: &Rig,
    budget: u64,
    plain: &FlushProtocol,
) {
    let expected_arg = format!("{}.{:06}", budget / 1_000_000, budget % 1_000_000);
    let mut pids = Vec::new();
    for n in 0..3 {
        let pid = b.child_pid().await.unwrap();
        assert_eq!(budget_arg(pid).as_deref(), Some(expected_arg.as_str()));
        let before = total_micros_or_zero(b);
        let run = b
            .run(TurnInput::text(format!("budget run {n}")), plain)
            .await
            .unwrap_or_else(|e| panic!("run {n} failed: {e}"));
        assert!(run.outcome.text.contains(&format!("budget run {n}")));
        let report = b.last_report().unwrap();
        // The first run uses the child launched at start; later ones a fresh one, planned, so
        // not reported as a relaunch.
        assert_eq!(report.budget_relaunch, n > 0);
        eprintln!("FIGURE run {n}: to_write {:?}", report.to_write);
        assert!(
            report.session_events.is_empty(),
            "{:?}",
            report.session_events
        );
        assert_eq!(report.session_id, r.config.session_id);
        if n > 0 {
            let spent = total_micros(b) - before;
            assert!(spent <= budget, "{spent} > {budget}");
        }
        pids.push(report.pid.unwrap());
    }
    pids.dedup();
    assert_eq!(pids.len(), 3, "a child per run: {pids:?}");
    // The relaunched children continued the one session: the last run saw the first.
    let sent = user_messages_sent_with(&r.sim, "budget run 2");
    assert!(sent.iter().any(|m| m.contains("budget run 0")), "{sent:?}");
}

/// A run that alone costs more than its budget (a tool loop) ends with the budget error, after
/// the request that crossed it; the next run has a whole budget.
async fn a_run_over_its_budget_leaves_the_next_a_whole_one(
    b: &mut ClaudeCliBackend,
    sim: &SimHandle,
    plain: &FlushProtocol,
) {
    let requests = messages_from(sim, 0).len();
    let err = b
        .run(
            TurnInput::text("budget: use Read to look around [sim: tool rounds 6]"),
            plain,
        )
        .await
        .unwrap_err();
    let BackendError::Api {
        kind,
        message,
        retryable,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(kind, "budget_exhausted");
    assert!(!retryable);
    assert!(message.contains("the run's budget"), "{message}");
    let loop_requests = messages_from(sim, requests).len();
    // A tool call's reply costs more than a plain one (its output is priced 100 times a cached
    // read), so here the loop's first request already crosses it: the loop of 7 stops there.
    assert_eq!(loop_requests, 1);
    // The next run is not refused (a spent per-process budget refuses without a request):
    // it sends its request under a whole budget. Its outcome is not asserted: it re-caches the
    // tool call the spent run left behind, which costs about as much as the budget.
    let n0 = messages_from(sim, 0).len();
    let _ = b
        .run(TurnInput::text("budget after the spent run"), plain)
        .await;
    assert!(b.last_report().unwrap().budget_relaunch);
    assert_eq!(messages_from(sim, n0).len(), 1);
    let run = b
        .run(TurnInput::text("budget after, again"), plain)
        .await
        .unwrap();
    assert!(run.outcome.text.contains("budget after, again"));
    assert!(b.last_report().unwrap().budget_relaunch);
}

/// [`total_micros`], or 0 before the backend's first exchange.
fn total_micros_or_zero(b: &ClaudeCliBackend) -> u64 {
    match b.last_report() {
        Some(_) => total_micros(b),
        None => 0,
    }
}
