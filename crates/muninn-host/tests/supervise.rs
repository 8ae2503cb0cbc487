//! A Mind whose task panics is restarted (`runtime/supervise.rs`): the other Minds run on, the
//! panicked one is `retrying` with the panic's message meanwhile, and once restarted it answers
//! its mail once, from the store, and its status clears.

use crate::runtime::T0;
use muninn_core::price::PriceTable;
use muninn_host::Activity;
use muninn_host::backends::BackendFactory;
use muninn_host::runtime::run_minds;
use muninn_host::telemetry::health::readiness;
use muninn_store::NewDelivery;
use std::time::{Duration, Instant};

const TWO_MINDS: &str = "[[mind]]\nid = 'vala'\nrooms = ['#swarm']\n\
                         [[mind]]\nid = 'ada'\nrooms = ['#swarm']\n";

/// A delivery for `mind`, and its wake-up (as the API sends one).
async fn post(host: &muninn_host::Host, mind: &str, source_id: &str) {
    let delivery = NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: true,
        text: "are you there?".into(),
        source_id: source_id.into(),
        received_at_ms: T0,
        context: Vec::new(),
    };
    host.store.post_delivery(mind, &delivery).await.unwrap();
    host.signals.wake(mind);
}

/// The outbox messages `mind` recorded, waiting up to `within` for at least one.
async fn answers(store: &dyn muninn_store::Store, mind: &str, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let n = store.unacked_outbox(mind, 100).await.unwrap().len();
        if n > 0 || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mind_whose_task_panics_is_restarted_and_says_why_meanwhile() {
    let (w, faults) = crate::runtime::faulty_world(TWO_MINDS).await;
    // vala's first two steps panic where they read the mailbox; ada's never do.
    faults.panic_pending_reads("vala", 2);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let minds = tokio::spawn(run_minds(
        w.host.clone(),
        BackendFactory::Sim(w.sim.clone()),
        PriceTable::embedded(),
        "host-a".into(),
        stopped,
    ));

    // While vala waits for its restart it says why, in status and readiness.
    let deadline = Instant::now() + Duration::from_secs(20);
    let retrying = loop {
        if let Some(activity @ Activity::Retrying { .. }) = w.host.signals.activity("vala") {
            break activity;
        }
        assert!(Instant::now() < deadline, "vala never showed its panic");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let Activity::Retrying {
        error, attempts, ..
    } = &retrying
    else {
        unreachable!()
    };
    assert!(
        error.contains("panicked: injected: a bug while reading vala's deliveries"),
        "{error}"
    );
    assert!(*attempts >= 1, "{retrying:?}");

    // The other Mind was never stopped by it.
    post(&w.host, "ada", "a1").await;
    assert_eq!(
        answers(&*w.host.store, "ada", Duration::from_secs(20)).await,
        1
    );

    // vala, restarted twice (250 ms, then 500 ms later), answers its delivery once.
    post(&w.host, "vala", "v1").await;
    assert_eq!(
        answers(&*w.host.store, "vala", Duration::from_secs(20)).await,
        1,
        "vala was never answered after its task panicked"
    );
    // Recovered: no failure left in status or readiness, once the step that answered ends (its
    // outbox row is committed inside the step, before the step's success is reported).
    let deadline = Instant::now() + Duration::from_secs(10);
    let live = loop {
        let live = w.host.telemetry.mind("vala");
        if (live.failing.is_none() && live.runner_up) || Instant::now() > deadline {
            break live;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(live.step_failures.get("panic"), Some(&2), "{live:?}");
    assert!(live.failing.is_none() && live.runner_up, "{live:?}");
    assert!(
        !matches!(
            w.host.signals.activity("vala"),
            Some(Activity::Retrying { .. })
        ),
        "{:?}",
        w.host.signals.activity("vala")
    );
    let ready = readiness(&w.host).await;
    assert!(ready.ready, "{ready:?}");

    stop.send(true).unwrap();
    minds.await.unwrap().unwrap();
    // A clean stop released both leases (the restarted runner's too).
    for mind in ["vala", "ada"] {
        assert_eq!(w.host.store.lease(mind).await.unwrap(), None, "{mind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_lease_renewal_runs_on_after_a_panic() {
    // A lease of 1 s: the host renews its leases every 250 ms.
    let config = "lease_ttl_ms = 1000\n[[mind]]\nid = 'vala'\nrooms = ['#swarm']\n";
    let (w, faults) = crate::runtime::faulty_world(config).await;
    faults.panic_lease_renewals(1);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let minds = tokio::spawn(run_minds(
        w.host.clone(),
        BackendFactory::Sim(w.sim.clone()),
        PriceTable::embedded(),
        "host-a".into(),
        stopped,
    ));
    // The first renewal panics; the ones after it still come, a quarter of the lease apart.
    let deadline = Instant::now() + Duration::from_secs(20);
    while faults.lease_renewals() < 4 {
        assert!(
            Instant::now() < deadline,
            "the host's lease renewal stopped after its panic: {} renewal(s) in 20 s",
            faults.lease_renewals()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    minds.await.unwrap().unwrap();
    assert_eq!(w.host.store.lease("vala").await.unwrap(), None);
}

/// A Self run stopped by a panic under its step (here its end's commit, after the model
/// answered) is failed by the restarted runner as its runner's panic stopped it, the panic
/// named. Before, the new runner knew nothing of the panic and told the Persona "its host
/// stopped (a crash, a kill or a lost lease)": the host ran on, and nobody looks for a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_run_a_panic_stopped_is_reported_as_the_panic() {
    let config = "[[mind]]\nid = 'vala'\nrooms = ['#swarm']\n";
    let (w, faults) = crate::runtime::faulty_world(config).await;
    let store = w.host.store.clone();
    let vala = muninn_store::Mind {
        id: "vala".into(),
        display_name: "vala".into(),
        config: serde_json::Value::Null,
        created_at_ms: T0,
    };
    store.create_mind(&vala).await.unwrap();
    let brief = muninn_store::NewBrief {
        text: "Tidy the notes.".into(),
        origin: muninn_store::BriefOrigin::Operator,
        created_at_ms: T0,
    };
    let seq = store.enqueue_brief("vala", &brief).await.unwrap().seq;
    // The run's end is the Mind's first commit: it panics, after the model answered.
    faults.panic_commits(1);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let minds = tokio::spawn(run_minds(
        w.host.clone(),
        BackendFactory::Sim(w.sim.clone()),
        PriceTable::embedded(),
        "host-a".into(),
        stopped,
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let brief = crate::runtime::stored_brief(&w, seq).await;
        if brief.status == muninn_store::BriefStatus::Failed {
            break brief;
        }
        assert!(
            Instant::now() < deadline,
            "the brief was never failed: {brief:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.send(true).unwrap();
    minds.await.unwrap().unwrap();
    let result = failed.result.unwrap_or_default();
    assert!(
        result.starts_with(
            "its step panicked (injected: a bug while committing vala's turn) and its Mind was \
             restarted, after the brief was marked as sent"
        ),
        "{result}"
    );
}

/// A restarted runner (the one before it panicked) that finds the Mind's lease with another
/// host — which took it in the restart's backoff and died in the middle of a Self run — takes
/// it back and fails that run as its host stopped, not as its own predecessor's panic, which
/// stopped nothing of that host's. Before, the runner kept the panic until its first check for
/// stranded briefs, whoever had held the lease since.
#[tokio::test]
async fn a_restarted_runner_does_not_blame_its_panic_for_another_holders_stranded_run() {
    use crate::runtime::{mind, runner, stored_brief, world};
    let w = world().await;
    let mut panicked = runner(&w, mind(""), "host-a");
    panicked.register().await.unwrap();
    panicked.step().await.unwrap();
    // Its task panicked: no release, and a new runner of the same host waits for its restart.
    drop(panicked);
    let mut restarted = runner(&w, mind(""), "host-a");
    restarted.replaces_a_panicked_runner("injected: a bug under the step");
    // Meanwhile host-b takes the Mind, claims a brief and dies before its run records anything.
    let ttl = w.host.config.lease_ttl_ms;
    w.sim.advance_clock(ttl + 1);
    let mut b = runner(&w, mind(""), "host-b");
    b.step().await.unwrap();
    let store = w.host.store.clone();
    let brief = muninn_store::NewBrief {
        text: "Tidy the notes.".into(),
        origin: muninn_store::BriefOrigin::Operator,
        created_at_ms: w.sim.now_ms(),
    };
    store.enqueue_brief("vala", &brief).await.unwrap();
    let lease = store.lease("vala").await.unwrap().expect("host-b leads");
    assert_eq!(lease.holder, "host-b");
    let claimed = (store.claim_brief("vala", lease.token, w.sim.now_ms()))
        .await
        .unwrap()
        .expect("the brief is queued");
    drop(b);
    w.sim.advance_clock(ttl + 1);
    restarted.step().await.unwrap();
    let brief = stored_brief(&w, claimed.seq).await;
    assert_eq!(brief.status, muninn_store::BriefStatus::Failed, "{brief:?}");
    let result = brief.result.unwrap_or_default();
    assert!(result.starts_with("its host stopped"), "{result}");
}

/// A host whose stop signal's sender is gone (nobody can stop it any more) runs its Minds and
/// its lease renewal on their schedule. Before, every wait on the signal ended at once on the
/// closed channel: the Mind stepped, and the renewal renewed, in a hot loop — thousands of
/// store calls a second, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_stop_signal_is_dropped_runs_on_its_schedule_not_in_a_hot_loop() {
    let config = "[[mind]]\nid = 'vala'\nrooms = ['#swarm']\n";
    let (w, faults) = crate::runtime::faulty_world(config).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    drop(stop);
    let minds = tokio::spawn(run_minds(
        w.host.clone(),
        BackendFactory::Sim(w.sim.clone()),
        PriceTable::embedded(),
        "host-a".into(),
        stopped,
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    minds.abort();
    let (steps, renewals) = (faults.pending_reads(), faults.lease_renewals());
    assert!(
        steps <= 5 && renewals <= 5,
        "in 500 ms: {steps} steps' mailbox reads, {renewals} lease renewals"
    );
}
