//! A delivery recorded before the model is asked, whose commit lands but whose answer is lost
//! (the store's call deadline passed after `COMMIT` was sent, the connection dropped): the
//! runner retries the step, and the transcript still holds the delivery once, the model is
//! shown it once, and the batch is answered once — on an injected lost answer over SQLite, and
//! on a real PostgreSQL whose answer to the `COMMIT` never comes back.

use crate::cli_world::{cli_world_on, persona, turn};
use crate::pg_faults::{acked, answered_once, world_on_postgres_at};
use crate::runtime::{World, mind, post, runner};
use muninn_host::runtime::{RuntimeError, Step, run_mind};
use muninn_store::{ContextLine, NewDelivery, Role, Store, StoreError, TranscriptKind};
use muninn_testkit::peers::{FreshDatabase, claude_cli};
use muninn_testkit::{FaultyStore, SilentProxy};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A word only the probe delivery holds, so the trap and the counts find it alone.
const PROBE: &str = "exactly-once-probe";

/// The Persona transcript's deliveries that hold [`PROBE`].
async fn probe_deliveries(store: &Arc<dyn Store>) -> usize {
    let items = store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    items
        .iter()
        .filter(|i| i.kind == TranscriptKind::Delivery && i.body.to_string().contains(PROBE))
        .count()
}

/// How often the model was shown [`PROBE`], over every Messages request it answered.
fn probe_shown(w: &World) -> usize {
    w.sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200)
        .map(|r| r.body.to_string().matches(PROBE).count())
        .sum()
}

/// The model was shown [`PROBE`] once, and the batch answered with one reply.
async fn shown_and_answered_once(w: &World) {
    assert_eq!(probe_shown(w), 1, "the model was shown the delivery twice");
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 1, "{outbox:#?}");
}

#[tokio::test]
async fn a_delivery_whose_commit_answer_is_lost_is_recorded_and_shown_once() {
    let (w, faults) = crate::runtime::faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", &format!("{PROBE}: hello vala")).await;
    faults.lose_append_answers(1);
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    assert_eq!(
        probe_deliveries(&w.host.store).await,
        1,
        "the append landed"
    );
    assert_eq!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 1,
            valid: true
        }
    );
    assert_eq!(
        probe_deliveries(&w.host.store).await,
        1,
        "the delivery recorded twice"
    );
    shown_and_answered_once(&w).await;
}

/// A restart between the append whose answer was lost and the ask: the new process draws a
/// new nonce, so its key is new and it records the delivery again — in a new segment (the
/// simulator binds no sessions, so a new process always starts one; for a backend that does,
/// see [`a_restart_after_a_lost_append_answer_does_not_resume_the_cli_segment`]). The old
/// segment keeps the copy the model never saw; the model is shown the delivery once, and the
/// batch is answered once.
#[tokio::test]
async fn a_restart_after_a_lost_append_answer_records_the_delivery_in_a_new_segment() {
    let (w, faults) = crate::runtime::faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", &format!("{PROBE}: hello vala")).await;
    faults.lose_append_answers(1);
    r.step().await.unwrap_err();
    drop(r);
    let mut restarted = runner(&w, mind(""), "host-a");
    assert_eq!(
        restarted.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 1,
            valid: true
        }
    );
    let items = w
        .host
        .store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    let segments: Vec<i64> = items
        .iter()
        .filter(|i| i.kind == TranscriptKind::Delivery && i.body.to_string().contains(PROBE))
        .map(|i| i.segment)
        .collect();
    assert_eq!(segments.len(), 2, "{items:#?}");
    assert!(segments[0] < segments[1], "one segment: {items:#?}");
    shown_and_answered_once(&w).await;
}

/// The same on PostgreSQL, through a [`SilentProxy`] that forwards the delivery's `COMMIT` and
/// then lets nothing of that connection through: the server commits, the store's deadline (1 s
/// here) passes without its answer, and the runner, retrying on a new connection, finds the
/// delivery recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_delivery_whose_commit_answer_never_comes_is_recorded_and_shown_once() {
    let Some(db) = FreshDatabase::for_test("muninn_host_pgexactly", "a lost commit answer") else {
        return;
    };
    let proxy = SilentProxy::start(FreshDatabase::SERVER.parse().unwrap())
        .await
        .unwrap();
    let w =
        world_on_postgres_at(&format!("{}?call_timeout=1s", db.url_through(proxy.addr()))).await;
    let direct = muninn_store::open(&db.url()).await.unwrap();
    let r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_mind(r, stopped));

    proxy.cut_after_commit(PROBE.as_bytes());
    let delivery = NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("message 1: {PROBE}"),
        source_id: "pgx-1".into(),
        received_at_ms: w.sim.now_ms(),
        context: Vec::new(),
    };
    // Posted straight to the server: only the runner's own writes carry the probe through the
    // proxy.
    direct.post_delivery("vala", &delivery).await.unwrap();
    w.host.signals.wake("vala");
    let started = Instant::now();
    while acked(&direct).await < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            w.host.telemetry.mind("vala")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(proxy.commits_cut(), 1, "the trap never tripped");
    assert_eq!(
        probe_deliveries(&direct).await,
        1,
        "the delivery recorded twice"
    );
    assert_eq!(probe_shown(&w), 1, "the model was shown the delivery twice");
    answered_once(&w, 1, 0).await;
    w.host.store.close().await;
    direct.close().await;
}

/// A delivery on `vala` in #swarm, carrying the room history line [`PROBE`] (id `h1`).
fn with_history(source_id: &str, text: &str, at_ms: i64) -> NewDelivery {
    NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: true,
        text: text.into(),
        source_id: source_id.into(),
        received_at_ms: at_ms,
        context: vec![ContextLine {
            id: Some("h1".into()),
            sender: "bo".into(),
            text: PROBE.into(),
        }],
    }
}

/// A Claude Code world on a store whose faults the test arms, and the handle that arms them.
pub(crate) async fn faulty_cli_world(
    bin: std::path::PathBuf,
) -> (crate::cli_world::CliWorld, std::sync::Arc<FaultyStore>) {
    let mut faults = None;
    let w = cli_world_on(
        bin,
        |_| {},
        |store| {
            let faulty = FaultyStore::new(store);
            faults = Some(faulty.clone());
            faulty
        },
    )
    .await;
    (w, faults.unwrap())
}

/// An attempt belongs to the session it was rendered on. On the Claude Code CLI, a delivery's
/// append is refused (nothing lands); then another host takes the lease and lets it go
/// without a turn, and the runner takes it back: its session is rebuilt from the transcript
/// (the segment resumes through its handle), which does not hold the refused attempt. The
/// delivery is rendered afresh on that session — not the old rendering re-sent past it, which
/// left the rebuilt renderer without the turn, so the next delivery showed the room history
/// line again (the model read it twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecorded_attempt_is_rendered_again_on_the_session_a_new_lease_rebuilt() {
    let Some(bin) = claude_cli() else { return };
    let (w, faults) = faulty_cli_world(bin).await;
    let store = w.host.store.clone();
    let mut a = w.runner(persona("watchful"), "host-a");
    a.register().await.unwrap();
    w.say("e1", "alpha-one: remember the river").await;
    turn(&mut a).await;
    let now = w.server.sim.now_ms();
    let first = with_history("e2", "alpha-two: what did bo say?", now);
    store.post_delivery("vala", &first).await.unwrap();
    faults.refuse_appends(1);
    a.woken();
    a.step().await.unwrap_err();

    let ttl = w.host.config.lease_ttl_ms;
    w.server.sim.advance_clock(ttl + 1_000);
    let now = w.server.sim.now_ms();
    let b = store.acquire_lease("vala", "host-b", ttl, now).await;
    let b = b.unwrap().expect("the lapsed lease");
    store.release_lease("vala", b.token).await.unwrap();
    turn(&mut a).await;
    let second = with_history("e3", "alpha-three: and again?", now);
    store.post_delivery("vala", &second).await.unwrap();
    turn(&mut a).await;

    let items = store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    let deliveries: Vec<(i64, String)> = items
        .iter()
        .filter(|i| i.kind == TranscriptKind::Delivery)
        .map(|i| (i.segment, i.body["text"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(deliveries.len(), 3, "{items:#?}");
    assert!(
        deliveries.iter().all(|d| d.0 == 0),
        "not resumed: {items:#?}"
    );
    let shown: Vec<bool> = deliveries.iter().map(|d| d.1.contains(PROBE)).collect();
    assert_eq!(
        shown,
        [false, true, false],
        "the history line shown again: {deliveries:#?}"
    );
    w.assert_nothing_sent_twice().await;
    w.server.stop().await.unwrap();
}

/// [`a_restart_after_a_lost_append_answer_records_the_delivery_in_a_new_segment`] on the Claude
/// Code CLI, whose segments a new process can resume through their stored handle: not this one,
/// whose transcript ends in the delivery never sent. The new process records the delivery in
/// a new segment, and its request holds the delivery once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_a_lost_append_answer_does_not_resume_the_cli_segment() {
    let Some(bin) = claude_cli() else { return };
    let (w, faults) = faulty_cli_world(bin).await;
    let mut a = w.runner(persona("watchful"), "host-a");
    a.register().await.unwrap();
    w.say("e1", "alpha-one: remember the river").await;
    turn(&mut a).await;
    w.say("e2", &format!("{PROBE}: and the bridge")).await;
    faults.lose_append_answers(1);
    a.woken();
    a.step().await.unwrap_err();
    // A crash: the runner and its CLI child are gone, the lease not released.
    drop(a);
    w.server
        .sim
        .advance_clock(w.host.config.lease_ttl_ms + 1_000);
    let mut b = w.runner(persona("watchful"), "host-b");
    turn(&mut b).await;

    let items = w
        .host
        .store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    let segments: Vec<i64> = items
        .iter()
        .filter(|i| i.kind == TranscriptKind::Delivery && i.body.to_string().contains(PROBE))
        .map(|i| i.segment)
        .collect();
    assert_eq!(segments, [0, 1], "{items:#?}");
    let requests = w.messages_requests();
    let last = requests.last().unwrap().to_string();
    assert_eq!(last.matches(PROBE).count(), 1, "{last}");
    w.assert_nothing_sent_twice().await;
    w.server.stop().await.unwrap();
}
