//! A failed turn is retried on the Mind's own schedule — exponential backoff with a cap, never
//! before the provider's `retry-after` — by the real `run_mind` loop, with no new mail to wake
//! it; the runner's activity says `retrying`, why and when the next attempt is due; the delivery
//! is answered exactly once and is in the transcript once (one notice per distinct failure).
//!
//! The backend is the Anthropic backend over the in-process simulator, whose refusals (401, 429
//! with `retry-after`, 500, 529) come back as the HTTP client reports them once its own retries
//! ran out. The simulator's clock is frozen at `T0`, so every scheduled time is exact.

mod support;

pub(crate) use support::persona_kinds;
use support::{acked, activity_until, answered_once, register, spawn_mind, vala_ledger};

use crate::runtime::{T0, World, ledger, mind, post, runner, world};
use muninn_host::Activity;
use muninn_host::runtime::{RetryPolicy, Step, run_mind};
use muninn_sim::sim::{Fault, FaultKind};
use std::time::Duration;

/// The key is rotated (401 on every request, which no client retries): the runner backs off
/// on its own clock — 250 ms, 500 ms, 1 s, … — and says so; the key is fixed, and the pending
/// delivery is answered with no new mail, exactly once.
#[tokio::test]
async fn a_rotated_key_backs_off_then_the_delivery_is_answered_once_without_new_mail() {
    let w = world().await;
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 1_000,
    }]);
    register(&w).await;
    post(
        &w,
        "k1",
        "#swarm",
        "ari",
        "are you there after the key change?",
    )
    .await;
    let (stop, task) = spawn_mind(&w);
    let seen = activity_until(
        &w,
        Duration::from_secs(20),
        |a| matches!(a, Activity::Retrying { attempts, .. } if *attempts >= 3),
    )
    .await;
    let Some(Activity::Retrying {
        error,
        since_ms,
        attempts,
        next_attempt_ms,
    }) = seen
    else {
        panic!("not retrying: {seen:?}");
    };
    assert!(error.contains("401"), "{error}");
    assert_eq!(since_ms, T0);
    // The frozen clock makes the schedule exact: the n-th failure waits base · 2ⁿ⁻¹.
    assert_eq!(
        next_attempt_ms,
        T0 + RetryPolicy::default().delay_ms(attempts, None)
    );
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 0);
    // Many attempts, one delivery and one notice in the transcript.
    assert_eq!(persona_kinds(&w.host).await, ["delivery", "attempt_failed"]);

    w.sim.clear_faults();
    assert!(
        acked(&w, 1, Duration::from_secs(20)).await,
        "never answered"
    );
    let idle = activity_until(&w, Duration::from_secs(5), |a| {
        matches!(a, Activity::Idle { .. })
    })
    .await;
    assert!(matches!(idle, Some(Activity::Idle { .. })), "{idle:?}");
    stop.send(true).unwrap();
    task.await.unwrap();
    answered_once(&w).await;
}

/// 429 with `retry-after`, 500 and 529 once their retries ran out: each is logged in the
/// runner's activity with its status, the next attempt is scheduled no earlier than the
/// provider asked, and the delivery is answered once when the provider recovers.
#[tokio::test]
async fn refusals_429_500_529_are_retried_on_schedule_and_recover() {
    let cases = [
        (
            FaultKind::RateLimit {
                retry_after_s: Some(2.0),
            },
            "429",
            Some(2_000u64),
        ),
        (FaultKind::ServerError, "500", None),
        (FaultKind::Overloaded, "529", None),
    ];
    for (kind, status, retry_after) in cases {
        let w = world().await;
        w.sim.push_faults([Fault { kind, times: 2 }]);
        register(&w).await;
        post(&w, "k1", "#swarm", "ari", "still there?").await;
        let started = tokio::time::Instant::now();
        let (stop, task) = spawn_mind(&w);
        let seen = activity_until(&w, Duration::from_secs(10), |a| {
            matches!(a, Activity::Retrying { .. })
        })
        .await;
        let Some(Activity::Retrying {
            error,
            attempts,
            next_attempt_ms,
            ..
        }) = seen
        else {
            panic!("{status}: not retrying: {seen:?}");
        };
        assert!(error.contains(status), "{status}: {error}");
        assert_eq!(
            next_attempt_ms,
            T0 + RetryPolicy::default().delay_ms(attempts, retry_after),
            "{status}"
        );
        assert!(
            acked(&w, 1, Duration::from_secs(20)).await,
            "{status}: never answered"
        );
        if let Some(ms) = retry_after {
            // Two refusals, each asking for `retry-after`: the answer came no sooner.
            assert!(
                started.elapsed() >= Duration::from_millis(2 * ms),
                "{status}: retried before retry-after ({:?})",
                started.elapsed()
            );
        }
        stop.send(true).unwrap();
        task.await.unwrap();
        answered_once(&w).await;
    }
}

/// A host whose Mind's backends are the Anthropic client over HTTP to a simulator on a real
/// socket (its clock frozen at `T0`), with one delivery from `#swarm` waiting.
struct HttpRig {
    server: muninn_sim::SimHandle,
    host: muninn_host::Host,
    _dir: tempfile::TempDir,
}

impl HttpRig {
    async fn new() -> HttpRig {
        let server = muninn_sim::spawn(
            "127.0.0.1:0".parse().unwrap(),
            muninn_sim::sim::SimConfig {
                frozen_at_ms: Some(T0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = muninn_store::open(dir.path().join("muninn.db").to_str().unwrap())
            .await
            .unwrap();
        let host = muninn_host::Host::new(
            store,
            toml::from_str("").unwrap(),
            std::sync::Arc::new(muninn_sim::SimClock(server.sim.clone())),
        );
        let rig = HttpRig {
            server,
            host,
            _dir: dir,
        };
        rig.runner(Duration::from_secs(600), None)
            .register()
            .await
            .unwrap();
        rig.host
            .store
            .post_delivery(
                "vala",
                &muninn_store::NewDelivery {
                    room: "#swarm".into(),
                    sender: "ari".into(),
                    is_direct: false,
                    to_you: false,
                    text: "are you slow today?".into(),
                    source_id: "t1".into(),
                    received_at_ms: T0,
                    context: Vec::new(),
                },
            )
            .await
            .unwrap();
        rig
    }

    /// A runner whose clients wait `read_timeout` of silence and `attempt_timeout` in all
    /// (`None`: the default budget), each retrying once after 10 ms.
    fn runner(
        &self,
        read_timeout: Duration,
        attempt_timeout: Option<Duration>,
    ) -> muninn_host::runtime::MindRunner<muninn_anthropic::backend::AnthropicBackend> {
        use muninn_anthropic::client::{AnthropicClient, ClientConfig, TokioSleeper};
        use muninn_core::price::PriceTable;
        let backend = || {
            let key = muninn_anthropic::secret::ApiKey::new("sk-test-timeout").unwrap();
            let mut config = ClientConfig::new(self.server.base_url(), key);
            config.read_timeout = read_timeout;
            config.attempt_timeout = attempt_timeout;
            config.retry.max_retries = 1;
            config.retry.base_delay = Duration::from_millis(10);
            let client = AnthropicClient::new(config, std::sync::Arc::new(TokioSleeper)).unwrap();
            muninn_anthropic::backend::AnthropicBackend::new(
                client,
                self.host.clock.clone(),
                PriceTable::embedded(),
            )
        };
        muninn_host::runtime::MindRunner::new(
            self.host.clone(),
            mind("turns_per_wake = 1"),
            "host-a".to_string(),
            &PriceTable::embedded(),
            backend(),
            backend(),
        )
        .unwrap()
    }

    /// Runs the Mind's loop until the delivery is acknowledged (at most 30 s); returns the
    /// first `retrying` activity seen and how long after the start it was seen.
    async fn run_until_answered(
        &self,
        runner: muninn_host::runtime::MindRunner<muninn_anthropic::backend::AnthropicBackend>,
    ) -> Option<(Activity, Duration)> {
        let started = tokio::time::Instant::now();
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(run_mind(runner, shutdown));
        let deadline = started + Duration::from_secs(30);
        let mut seen_retrying = None;
        while tokio::time::Instant::now() < deadline {
            if let Some(a @ Activity::Retrying { .. }) = self.host.signals.activity("vala") {
                seen_retrying.get_or_insert((a, started.elapsed()));
            }
            if self.host.store.ack_position("vala").await.unwrap() >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.send(true).unwrap();
        task.await.unwrap().unwrap();
        seen_retrying
    }
}

/// A request that times out: the simulator's HTTP endpoint holds its answer back longer than
/// the client's read timeout, on both of the client's attempts. The turn fails with the
/// timeout (bounded: no attempt waits longer than the read timeout), the runner says so and
/// schedules its own retry, and when the endpoint answers again the delivery is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_times_out_is_bounded_logged_and_retried_until_answered() {
    let rig = HttpRig::new().await;
    rig.server.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 5_000,
            event_ms: 0,
        },
        times: 2,
    }]);
    let runner = rig.runner(Duration::from_millis(500), None);
    let Some((Activity::Retrying { error, .. }, failed_after)) =
        rig.run_until_answered(runner).await
    else {
        panic!("never seen retrying");
    };
    assert!(
        error.contains("transport") && error.to_lowercase().contains("time"),
        "{error}"
    );
    // Two attempts of at most the read timeout each (and a 10 ms backoff), not the 5 s hang.
    assert!(
        failed_after < Duration::from_millis(3_000),
        "{failed_after:?}"
    );
    assert_eq!(rig.host.store.ack_position("vala").await.unwrap(), 1);
    let outbox = rig.host.store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 1, "{outbox:?}");
    rig.server.stop().await.unwrap();
}

/// A reply that trickles: the simulator streams the first attempt one character per event,
/// an event every 200 ms — never silent for the 2 s read timeout, yet a whole answer would
/// take minutes. The attempt is cut at its 1.5 s deadline (content had begun, so the client
/// does not re-send it: `BrokenAfterContent`, as a stream cut mid-content), the runner says
/// `retrying` with the cause (what `muninn status` shows), and its own retry answers the
/// delivery exactly once: one reply, the transcript whole with one notice, and two ledger rows —
/// the cut attempt the provider billed (its input side as the simulator billed it; the output
/// is what reached the client), then the answered retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_trickles_past_the_attempt_deadline_fails_and_is_retried_once() {
    let rig = HttpRig::new().await;
    rig.server.sim.push_faults([Fault {
        kind: FaultKind::Trickle { every_ms: 200 },
        times: 1,
    }]);
    let runner = rig.runner(Duration::from_secs(2), Some(Duration::from_millis(1_500)));
    let Some((Activity::Retrying { error, .. }, failed_after)) =
        rig.run_until_answered(runner).await
    else {
        panic!("never seen retrying");
    };
    assert!(
        error.contains("no whole reply within the attempt's deadline of 1.5s"),
        "{error}"
    );
    assert!(
        failed_after < Duration::from_millis(4_000),
        "{failed_after:?}"
    );
    assert_eq!(rig.host.store.ack_position("vala").await.unwrap(), 1);
    let outbox = rig.host.store.unacked_outbox("vala", 10).await.unwrap();
    let ids: Vec<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids, ["vala-1-1-0"]);
    assert_eq!(
        persona_kinds(&rig.host).await,
        ["delivery", "attempt_failed", "reply"]
    );
    let rows = vala_ledger(&rig.host).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0].row.decision, "attempt_failed");
    assert_ne!(rows[1].row.decision, "attempt_failed");
    let billed = rig.server.sim.requests()[0].usage.unwrap();
    let cut = &rows[0].row.usage;
    assert_eq!(
        (cut.input, cut.cache_read, cut.written()),
        (billed.input, billed.cache_read, billed.written())
    );
    // The provider answered (and billed) both attempts; only the second reached the Mind.
    let answered: Vec<bool> = rig
        .server
        .sim
        .requests()
        .iter()
        .filter(|q| q.path == "/v1/messages")
        .map(|q| q.fault.is_some())
        .collect();
    assert_eq!(answered, [true, false]);
    rig.server.stop().await.unwrap();
}

/// A stream cut after `message_start` and some content (the simulator's `truncate` fault, over
/// HTTP): the provider billed the cut attempt and cached the prefix it read. The turn is not
/// safe to repeat, so the client gives up (`BrokenAfterContent`) and the Mind's own retry
/// answers the delivery once — and that retry's row is predicted reading the prefix the cut
/// attempt wrote, exactly as the simulator reports it (before, the backend's cache mirror
/// ignored the cut attempt and predicted a cold write). The cut attempt itself is the row
/// before it, as the provider billed it ([`assert_cut_row`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_after_a_stream_cut_mid_content_reads_what_the_cut_attempt_wrote() {
    let rig = HttpRig::new().await;
    rig.server.sim.push_faults([Fault {
        kind: FaultKind::Truncate { after_deltas: 1 },
        times: 1,
    }]);
    let runner = rig.runner(Duration::from_secs(600), None);
    let Some((Activity::Retrying { error, .. }, _)) = rig.run_until_answered(runner).await else {
        panic!("never seen retrying");
    };
    assert!(error.contains("broke off after content"), "{error}");
    let outbox = rig.host.store.unacked_outbox("vala", 10).await.unwrap();
    let ids: Vec<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids, ["vala-1-1-0"]);
    let records: Vec<_> = rig
        .server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .collect();
    assert_eq!(records.len(), 2, "{records:#?}");
    let (cut, retry) = (records[0].usage.unwrap(), records[1].usage.unwrap());
    assert!(cut.written() > 0 && cut.cache_read == 0, "{cut:?}");
    let rows = vala_ledger(&rig.host).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_cut_row(&rows[0].row, &cut, &rows[1].row);
    let row = &rows[1].row;
    assert_eq!(row.usage, retry);
    assert_eq!(row.usage.cache_read, cut.written());
    assert_eq!(
        (row.predicted_read, row.predicted_write),
        (retry.cache_read, retry.written())
    );
    rig.server.stop().await.unwrap();
}

/// The row of an attempt the provider billed but cut (`cut`, as the simulator billed it), before
/// the `retry` that answered: its own row, priced as any row, at the retry's segment, time and
/// boundary, predicted as the backend's cache mirror predicted it, the error and request id
/// among its events, and a decision record of its own kind that asked the decider nothing.
fn assert_cut_row(
    row: &muninn_core::ledger::LedgerRow,
    cut: &muninn_core::trace::Usage,
    retry: &muninn_core::ledger::LedgerRow,
) {
    let price = muninn_core::price::PriceTable::embedded();
    assert_eq!(&row.usage, cut);
    assert_eq!(row.cost, price.model(&row.model).unwrap().cost(cut));
    assert!(row.cost.0 > 0);
    assert_eq!(row.decision, "attempt_failed");
    assert!(row.raw_usage.is_some());
    assert_eq!(
        (row.predicted_read, row.predicted_write),
        (cut.cache_read, cut.written())
    );
    assert_eq!(row.segment, retry.segment);
    assert!(row.at_ms <= retry.at_ms);
    // The first try of the retry's request: a turn's boundary as the retry is.
    assert_eq!(row.boundary, retry.boundary);
    let event = row
        .events
        .iter()
        .find(|e| e.get("attempt_failed").is_some())
        .expect("the error among the events");
    assert!(
        event["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    let decided = row.decided.as_ref().expect("a decision record");
    assert_eq!(serde_json::json!(decided.kind), "failed_attempt");
    assert_eq!((decided.event, decided.action), (None, None));
}

/// A Claude Code child that hangs (the API it calls never answers): the turn is given up after
/// `backend.cli_turn_timeout_s` and the child stopped (bounded), the runner says `retrying`
/// with the cause (loud), and the next attempt — a relaunched child resuming the session —
/// answers the delivery once (recovered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_cli_child_that_hangs_is_timed_out_and_the_turn_retried() {
    let Some(bin) = muninn_testkit::peers::claude_cli() else {
        return;
    };
    let w = crate::cli_world::cli_world_with(bin, |c| c.backend.cli_turn_timeout_s = Some(5)).await;
    let first = w.runner(mind("turns_per_wake = 1"), "host-a");
    first.register().await.unwrap();
    drop(first);
    w.say("h1", "hotel-one: are you there?").await;
    w.server.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 120_000,
            event_ms: 0,
        },
        times: 1,
    }]);
    let started = tokio::time::Instant::now();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_mind(
        w.runner(mind("turns_per_wake = 1"), "host-a"),
        shutdown,
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut retrying = None;
    while tokio::time::Instant::now() < deadline {
        if let Some(a @ Activity::Retrying { .. }) = w.host.signals.activity("vala") {
            retrying.get_or_insert((a, started.elapsed()));
        }
        if w.host.store.ack_position("vala").await.unwrap() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    let Some((Activity::Retrying { error, .. }, failed_after)) = retrying else {
        panic!("never seen retrying");
    };
    assert!(error.contains("no result within"), "{error}");
    // The 5 s timeout, a child's start and stop: nowhere near the 120 s hang.
    assert!(failed_after < Duration::from_secs(30), "{failed_after:?}");
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 1);
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 1, "{outbox:?}");
    w.server.stop().await.unwrap();
}

/// The Persona's ledger rows as `(segment, decision, asked)`: `asked` whether the row records a
/// question put to the decider.
async fn rows(w: &World) -> Vec<(u64, String, bool)> {
    ledger(w)
        .await
        .iter()
        .map(|row| {
            let asked = row.decided.as_ref().is_some_and(|d| d.event.is_some());
            (row.segment, row.decision.clone(), asked)
        })
        .collect()
}

/// A segment is opened — the first, then one the decider refreshed to at the ceiling — and its
/// first request fails (a 401 once). The attempt after it sends that same request: the
/// segment's first, in the segment just opened. It is not decided again on the accounting of
/// the segment before — which still counts the old prefix, its requests and its clearable
/// results, none of which the provider holds any more: on it the decider refreshed a second
/// time, leaving the opened segment empty, selecting memory and recording the delivery again.
/// Its ledger row is the segment's start, asking nothing, and the ledger replays exactly.
#[tokio::test]
async fn a_failed_first_request_of_a_new_segment_is_retried_as_that_segments_start() {
    let w = world().await;
    let m = mind("turns_per_wake = 1\nmin_segment = 1\nceiling_tokens = 3000");
    let mut r = runner(&w, m, "host-a");
    r.register().await.unwrap();
    let refused_once = || {
        w.sim.push_faults([Fault {
            kind: FaultKind::Unauthorized,
            times: 1,
        }])
    };
    let long = "a longer message about the ledger and its many entries ".repeat(60);
    for (key, text) in [("k1", "hello there"), ("k2", long.as_str())] {
        post(&w, key, "#swarm", "ari", text).await;
        refused_once();
        assert!(r.step().await.is_err());
        w.sim.advance_clock(1_000);
        let step = r.step().await.unwrap();
        assert!(
            matches!(step, Step::PersonaTurn { valid: true, .. }),
            "{step:?}"
        );
        w.sim.advance_clock(2_000);
    }
    assert_eq!(
        rows(&w).await,
        [
            (0, "start:retried".to_string(), false),
            (1, "start:retried".to_string(), false)
        ]
    );
    assert_eq!(
        persona_kinds(&w.host).await,
        ["delivery", "attempt_failed", "reply"].repeat(2)
    );
    let ledger = ledger(&w).await;
    assert!(
        ledger
            .iter()
            .all(|row| row.decided.as_ref().unwrap().segment.is_some())
    );
    let report = muninn_core::closed_loop::verify(
        &ledger,
        &muninn_core::price::PriceTable::embedded(),
        &Default::default(),
    );
    assert!(report.holds(0.001), "{report:#?}");
}

/// The lowest spend cap (micro-dollars) under which the Persona's next step over one delivery
/// is not refused as over budget, in a fresh world; `fail_first` makes an uncapped first
/// attempt fail (a 401 once) before the capped one, so the capped step is its retry.
async fn lowest_cap(fail_first: bool) -> i64 {
    use muninn_host::runtime::Step;
    let (mut low, mut high) = (0i64, 10_000_000i64);
    while low < high {
        let cap = low + (high - low) / 2;
        let w = world().await;
        let mut r = runner(&w, mind("turns_per_wake = 1"), "host-a");
        r.register().await.unwrap();
        post(&w, "k1", "#swarm", "ari", "hello there").await;
        if fail_first {
            w.sim.push_faults([Fault {
                kind: FaultKind::Unauthorized,
                times: 1,
            }]);
            assert!(r.step().await.is_err());
            w.sim.advance_clock(1_000);
        }
        crate::runtime::set_cap(&w, Some(cap)).await;
        match r.step().await.unwrap() {
            Step::OverBudget => low = cap + 1,
            _ => high = cap,
        }
    }
    low
}

/// The retry of a segment's failed first request is priced against the spend cap as what it
/// is, the segment's start — the layers written, then the message — not as an append to a
/// prefix the accounting counted before the segment opened (here none at all: priced so, the
/// retry passed a cap the start itself could not).
#[tokio::test]
async fn the_retry_of_a_segments_first_request_is_priced_as_its_start() {
    let start = lowest_cap(false).await;
    let retry = lowest_cap(true).await;
    assert!(start > 0);
    assert!(
        retry >= start,
        "the retry was priced at {retry}, the start at {start}"
    );
}

/// A delivery with room history is refused once (a 401); while the runner backs off, a second
/// message arrives in the same room. The provider took nothing of the refused attempt, so the
/// history that attempt rendered has still to reach it: the retry re-sends the recorded message
/// (history included) and the new message is the next turn's — each delivery in the
/// transcript once, both answered.
#[tokio::test]
async fn a_retry_after_new_mail_still_sends_the_history_the_refused_attempt_rendered() {
    use muninn_host::runtime::Step;
    use muninn_store::{ContextLine, NewDelivery};
    const HISTORY: &str = "the launch moved to friday";
    let w = world().await;
    let mut r = runner(&w, mind("turns_per_wake = 5"), "host-a");
    r.register().await.unwrap();
    let first = NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: "so what do we tell the others?".into(),
        source_id: "k1".into(),
        received_at_ms: w.sim.now_ms(),
        context: vec![ContextLine {
            id: Some("h1".into()),
            sender: "bo".into(),
            text: HISTORY.into(),
        }],
    };
    w.host.store.post_delivery("vala", &first).await.unwrap();
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 1,
    }]);
    assert!(r.step().await.is_err());
    w.sim.advance_clock(1_000);
    post(&w, "k2", "#swarm", "bo", "and the budget?").await;
    for _ in 0..3 {
        match r.step().await.unwrap() {
            Step::PersonaTurn { valid: true, .. } => {}
            Step::Idle { .. } => break,
            step => panic!("{step:?}"),
        }
    }
    let answered: Vec<String> = w
        .sim
        .requests()
        .iter()
        .filter(|q| q.status == 200 && q.path == "/v1/messages")
        .map(|q| q.body.to_string())
        .collect();
    assert!(
        answered.iter().any(|body| body.contains(HISTORY)),
        "the history never reached the provider: {answered:#?}"
    );
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 2);
    assert_eq!(
        persona_kinds(&w.host).await,
        ["delivery", "attempt_failed", "reply", "delivery", "reply"]
    );
}

/// A delivery in another conversation that arrives while a failed turn backs off (its wake-up
/// comes during the retry's wait, which it does not end): once the backoff ends and the retried
/// turn goes through, it is answered too, with no further mail — the retried turn does not use
/// up the new wake's turns (`turns_per_wake = 1`), so it does not wait for the next delivery.
#[tokio::test]
async fn a_delivery_that_arrives_during_a_backoff_is_answered_when_it_ends() {
    let w = world().await;
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 1_000,
    }]);
    register(&w).await;
    post(&w, "k1", "#swarm", "ari", "are you there?").await;
    let (stop, task) = spawn_mind(&w);
    let backing_off = activity_until(
        &w,
        Duration::from_secs(20),
        |a| matches!(a, Activity::Retrying { attempts, .. } if *attempts >= 2),
    )
    .await;
    assert!(
        matches!(backing_off, Some(Activity::Retrying { .. })),
        "{backing_off:?}"
    );
    post(&w, "k2", "@ari", "ari", "and in private?").await;
    w.host.signals.wake_local("vala");
    w.sim.clear_faults();
    assert!(
        acked(&w, 2, Duration::from_secs(20)).await,
        "the delivery that came during the backoff was never answered"
    );
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 2, "{outbox:#?}");
    stop.send(true).unwrap();
    task.await.unwrap();
}

/// A wake owed by a failed turn (`wake.rs`) is owed only while its deliveries wait: once the
/// mailbox is empty nothing is owed, and the next wake takes its own turns and no more
/// (`turns_per_wake = 2`, each DM its own batch).
#[tokio::test]
async fn an_owed_wake_ends_when_the_mailbox_empties() {
    let w = world().await;
    let mut r = runner(&w, mind("turns_per_wake = 2"), "host-a");
    r.register().await.unwrap();
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 1,
    }]);
    post(&w, "k1", "@ari", "ari", "are you there?").await;
    r.step().await.unwrap_err();
    // An arrival while the failed turn's delivery waits: that wake is owed.
    post(&w, "k2", "@bo", "bo", "and you?").await;
    for _ in 0..2 {
        assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    }
    assert!(matches!(r.step().await.unwrap(), Step::Idle { .. }));
    // A new wake of three: two turns, the third waits for the next wake.
    for (key, room, who) in [
        ("k3", "@cy", "cy"),
        ("k4", "@di", "di"),
        ("k5", "@ed", "ed"),
    ] {
        post(&w, key, room, who, "hello").await;
    }
    for _ in 0..2 {
        assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    }
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::Idle { .. }), "{step:?}");
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 4);
}

/// Two errors that alternate through an outage (a 401, then a 500, then the 401 again …) leave
/// one notice each in the transcript, however long the outage: the delivery once, two notices,
/// the reply. Before, each failure was compared with the previous one only, and every retry
/// wrote a notice.
#[tokio::test]
async fn two_alternating_errors_leave_one_notice_each_however_long_the_outage() {
    let w = world().await;
    let mut r = runner(&w, mind("turns_per_wake = 1"), "host-a");
    r.register().await.unwrap();
    post(&w, "k1", "#swarm", "ari", "are you there?").await;
    let alternating = (0..6).map(|i| Fault {
        kind: [FaultKind::Unauthorized, FaultKind::ServerError][i % 2].clone(),
        times: 1,
    });
    w.sim.push_faults(alternating);
    for attempt in 0..6 {
        assert!(r.step().await.is_err(), "attempt {attempt} went through");
        w.sim.advance_clock(1_000);
    }
    let step = r.step().await.unwrap();
    assert!(
        matches!(step, Step::PersonaTurn { valid: true, .. }),
        "{step:?}"
    );
    assert_eq!(
        persona_kinds(&w.host).await,
        ["delivery", "attempt_failed", "attempt_failed", "reply"]
    );
}
