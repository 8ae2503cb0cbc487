//! The runtime against the in-process simulator and a real SQLite store, on the simulator's
//! virtual clock.

use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::config::{Config, MindConfig};
use muninn_host::runtime::{MindRunner, Step, next_batch};
use muninn_sim::SimClock;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use muninn_store::{BriefOrigin, Caps, LedgerQuery, NewBrief, NewDelivery, Role};
use std::sync::Arc;

pub(crate) const T0: i64 = 1_800_000_000_000;

pub(crate) struct World {
    pub(crate) host: Host,
    pub(crate) sim: Arc<Simulator>,
    pub(crate) _dir: tempfile::TempDir,
}

/// The test Mind's configuration as TOML, with `extra` lines.
pub(crate) fn mind_toml(extra: &str) -> String {
    format!(
        "id = 'vala'\nrooms = ['#swarm', '#burn']\ndoctrine_text = '''{}'''\n{extra}",
        "You are Vala, a careful and curious mind. ".repeat(200)
    )
}

pub(crate) fn mind(extra: &str) -> MindConfig {
    toml::from_str(&mind_toml(extra)).unwrap()
}

pub(crate) async fn world() -> World {
    world_with("").await
}

/// A world whose host runs with the configuration `config` (TOML).
pub(crate) async fn world_with(config: &str) -> World {
    world_on(config, |store| store).await
}

/// A world whose host runs with the configuration `config` (TOML) on `wrap` of its SQLite store
/// (a fault-injecting store around it, say).
pub(crate) async fn world_on(
    config: &str,
    wrap: impl FnOnce(Arc<dyn muninn_store::Store>) -> Arc<dyn muninn_store::Store>,
) -> World {
    world_on_sim(config, wrap, SimConfig::default()).await
}

/// A world with the configuration `config` on a store whose faults a test arms (refused
/// commits, lost answers), and the handle that arms them.
pub(crate) async fn faulty_world(config: &str) -> (World, Arc<muninn_testkit::FaultyStore>) {
    let mut faults = None;
    let w = world_on(config, |store| {
        let faulty = muninn_testkit::FaultyStore::new(store);
        faults = Some(faulty.clone());
        faulty
    })
    .await;
    (w, faults.unwrap())
}

/// [`world_on`] with the simulator configured as `sim` (its clock frozen at [`T0`]): a price
/// table of its own, say, so the provider counts windows apart from the host.
pub(crate) async fn world_on_sim(
    config: &str,
    wrap: impl FnOnce(Arc<dyn muninn_store::Store>) -> Arc<dyn muninn_store::Store>,
    sim: SimConfig,
) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store = muninn_store::open(dir.path().join("muninn.db").to_str().unwrap())
        .await
        .unwrap();
    let store = wrap(store);
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(T0),
        ..sim
    }));
    let config: Config = toml::from_str(config).unwrap();
    let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
    World {
        host,
        sim,
        _dir: dir,
    }
}

/// The Mind `vala`'s brief `seq`, as the store holds it now.
pub(crate) async fn stored_brief(w: &World, seq: i64) -> muninn_store::Brief {
    let briefs = w.host.store.briefs("vala", None, 10).await.unwrap();
    briefs
        .into_iter()
        .find(|b| b.seq == seq)
        .expect("the brief is stored")
}

/// A registered `keepalive:2` Persona that has answered one delivery and sits, clock advanced,
/// at its first keep-warm ping's time: the next step is that ping.
pub(crate) async fn at_the_first_ping(w: &World) -> MindRunner<SimBackend> {
    let mut r = runner(w, mind("policy = 'keepalive:2'"), "host-a");
    r.register().await.unwrap();
    post(w, "e1", "#swarm", "ari", "hello").await;
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let Step::Idle { until_ms: Some(at) } = r.step().await.unwrap() else {
        panic!("expected a timed idle")
    };
    w.sim.advance_clock(at - w.sim.now_ms());
    r
}

pub(crate) fn runner(w: &World, mind: MindConfig, holder: &str) -> MindRunner<SimBackend> {
    let backend = || {
        SimBackend::new(
            InProcess::new(w.sim.clone()),
            w.host.clock.clone(),
            PriceTable::embedded(),
        )
    };
    MindRunner::new(
        w.host.clone(),
        mind,
        holder.to_string(),
        &PriceTable::embedded(),
        backend(),
        backend(),
    )
    .unwrap()
}

pub(crate) async fn post(w: &World, id: &str, room: &str, sender: &str, text: &str) -> i64 {
    w.host
        .store
        .post_delivery(
            "vala",
            &NewDelivery {
                room: room.into(),
                sender: sender.into(),
                is_direct: room.starts_with('@'),
                to_you: false,
                text: text.into(),
                source_id: id.into(),
                received_at_ms: w.sim.now_ms(),
                context: Vec::new(),
            },
        )
        .await
        .unwrap()
        .seq
}

pub(crate) async fn ledger(w: &World) -> Vec<muninn_core::ledger::LedgerRow> {
    w.host
        .store
        .ledger(&LedgerQuery {
            mind: Some("vala".into()),
            ..LedgerQuery::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.row)
        .collect()
}

#[tokio::test]
async fn a_persona_turn_records_reply_outbox_ledger_memory_and_ack_together() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    post(&w, "e2", "#swarm", "bo", "what are you working on?").await;
    post(&w, "e3", "#burn", "ari", "and here?").await;
    assert_eq!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 3,
            valid: true
        }
    );
    let store = &w.host.store;
    assert_eq!(store.ack_position("vala").await.unwrap(), 3);
    // The simulator answers each room where it was addressed, the room's last message.
    use muninn_sim::reply::sentence;
    let outbox = store.unacked_outbox("vala", 10).await.unwrap();
    let sent: Vec<(&str, &str, &str)> = outbox
        .iter()
        .map(|m| (m.request_id.as_str(), m.room.as_str(), m.text.as_str()))
        .collect();
    assert_eq!(
        sent,
        vec![
            (
                "vala-1-3-0",
                "#swarm",
                sentence("bo", "what are you working on?").as_str()
            ),
            ("vala-1-3-1", "#burn", sentence("ari", "and here?").as_str()),
        ]
    );
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 1);
    // The simulator reports exactly what the cache model predicted for the request as sent.
    assert_eq!(rows[0].predicted_read, rows[0].usage.cache_read);
    assert_eq!(rows[0].predicted_write, rows[0].usage.written());
    assert!(rows[0].raw_usage.is_some());
    assert!(rows[0].cost.0 > 0);
    assert_eq!(store.memory_newest("vala", 10).await.unwrap().len(), 1);
    let transcript = store
        .transcript_tail("vala", Role::Persona, 10)
        .await
        .unwrap();
    let kinds: Vec<&str> = transcript.iter().map(|i| i.kind.as_str()).collect();
    assert!(
        kinds.contains(&"delivery") && kinds.contains(&"reply"),
        "{kinds:?}"
    );
    // Nothing more to do: idle until shortly before the tail's TTL runs out.
    assert!(matches!(
        r.step().await.unwrap(),
        Step::Idle { until_ms: Some(_) }
    ));
}

#[tokio::test]
async fn cache_reads_grow_turn_by_turn_and_match_the_prediction() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    for i in 0..6 {
        post(
            &w,
            &format!("e{i}"),
            "#swarm",
            "ari",
            &format!("message number {i} with some words"),
        )
        .await;
        r.woken();
        assert!(matches!(
            r.step().await.unwrap(),
            Step::PersonaTurn { valid: true, .. }
        ));
        w.sim.advance_clock(20_000);
    }
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 6);
    for pair in rows.windows(2) {
        assert!(
            pair[1].usage.cache_read > pair[0].usage.cache_read,
            "{rows:#?}"
        );
    }
    for row in &rows {
        assert_eq!(row.predicted_read, row.usage.cache_read);
        assert_eq!(row.segment, rows[0].segment, "one segment: append-only");
    }
}

#[tokio::test]
async fn a_dm_is_answered_alone_and_public_rooms_together() {
    let pending: Vec<muninn_store::Delivery> = [
        ("#swarm", false),
        ("#burn", false),
        ("@ari", true),
        ("@ari", true),
        ("@bo", true),
    ]
    .iter()
    .enumerate()
    .map(|(i, (room, dm))| muninn_store::Delivery {
        mind: "vala".into(),
        seq: i as i64 + 1,
        room: room.to_string(),
        sender: "x".into(),
        is_direct: *dm,
        to_you: false,
        text: "t".into(),
        source_id: format!("s{i}"),
        received_at_ms: 0,
        context: Vec::new(),
    })
    .collect();
    assert_eq!(next_batch(&pending).len(), 2);
    assert_eq!(next_batch(&pending[2..]).len(), 2);
    assert_eq!(next_batch(&pending[4..]).len(), 1);
}

#[tokio::test]
async fn a_second_host_does_not_run_the_mind_and_nothing_is_sent_twice() {
    let w = world().await;
    let mut a = runner(&w, mind(""), "host-a");
    let mut b = runner(&w, mind(""), "host-b");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert!(matches!(a.step().await.unwrap(), Step::PersonaTurn { .. }));
    // B is refused while A's lease is live.
    post(&w, "e2", "#swarm", "ari", "again").await;
    assert_eq!(b.step().await.unwrap(), Step::NotLeader);
    // A dies without releasing; once its lease expires B takes over, and A is fenced out.
    w.sim.advance_clock(31_000);
    assert!(matches!(
        b.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 2,
            ..
        }
    ));
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    let ids: Vec<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids, vec!["vala-1-1-0", "vala-2-2-0"]);
}

pub(crate) async fn set_cap(w: &World, cap: Option<i64>) {
    w.host
        .store
        .put_caps(
            "vala",
            &Caps {
                spend_cap: cap.map(muninn_core::money::MicroUsd),
                ..Caps::default()
            },
            None,
            w.sim.now_ms(),
        )
        .await
        .unwrap();
}

pub(crate) async fn spent(w: &World) -> i64 {
    let now = w.sim.now_ms();
    w.host
        .store
        .spend("vala", now - 86_400_000, now + 1)
        .await
        .unwrap()
        .0
}

/// A world on the simulator's real-time clock (the lease keeper races real time).
async fn live_world(config: &str) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store = muninn_store::open(dir.path().join("muninn.db").to_str().unwrap())
        .await
        .unwrap();
    let sim = Arc::new(Simulator::new(SimConfig::default()));
    let config: Config = toml::from_str(config).unwrap();
    let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
    World {
        host,
        sim,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_renewed_while_a_turn_outlasts_it() {
    use muninn_sim::sim::{Fault, FaultKind};
    let w = live_world("lease_ttl_ms = 1000").await;
    let mut a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "take your time").await;
    // The model takes 2.5 lease lifetimes to answer.
    w.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 2_500,
            event_ms: 0,
        },
        times: 1,
    }]);
    let turn = tokio::spawn(async move {
        let step = a.step().await;
        (a, step)
    });
    tokio::time::sleep(std::time::Duration::from_millis(1_600)).await;
    // Another host looks while the turn is in flight, past the first lease's end: the lease
    // was renewed, so it does not take the Mind over.
    let mut b = runner(&w, mind(""), "host-b");
    assert_eq!(b.step().await.unwrap(), Step::NotLeader);
    let (mut a, step) = turn.await.unwrap();
    assert!(
        matches!(step, Ok(Step::PersonaTurn { valid: true, .. })),
        "{step:?}"
    );
    let lease = w.host.store.lease("vala").await.unwrap().unwrap();
    assert_eq!(lease.holder, "host-a");
    assert!(lease.expires_at_ms > w.sim.now_ms());
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 1);
    a.release().await.unwrap();
}
#[tokio::test]
async fn an_invalid_reply_is_retried_once_then_recorded_as_a_failure() {
    let w = world().await;
    // No public room: the simulator's schema-valid reply says in "@dm", which a public batch
    // cannot use, so the reply fails the checks the schema cannot express.
    let mut config = mind("");
    config.rooms.clear();
    let mut r = runner(&w, config, "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    assert_eq!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 1,
            valid: false
        }
    );
    assert_eq!(w.sim.requests().len(), 2, "one retry");
    assert!(
        w.host
            .store
            .unacked_outbox("vala", 10)
            .await
            .unwrap()
            .is_empty()
    );
    let transcript = w
        .host
        .store
        .transcript_tail("vala", Role::Persona, 10)
        .await
        .unwrap();
    assert!(
        transcript
            .iter()
            .any(|i| i.kind.as_str() == "notice" && i.body["failure"] == "invalid reply")
    );
    assert_eq!(ledger(&w).await.len(), 2);
}

#[tokio::test]
async fn an_operator_brief_runs_in_the_self_and_reports_back_to_the_persona() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let brief = w
        .host
        .store
        .enqueue_brief(
            "vala",
            &NewBrief {
                text: "Summarise the open issues.".into(),
                origin: BriefOrigin::Operator,
                created_at_ms: w.sim.now_ms(),
            },
        )
        .await
        .unwrap();
    assert_eq!(r.step().await.unwrap(), Step::SelfTurn { brief: brief.seq });
    let done = w
        .host
        .store
        .briefs("vala", Some(muninn_store::BriefStatus::Done), 10)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    let pending = w
        .host
        .store
        .pending_deliveries("vala", 0, 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].room, "self");
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    let rows = ledger(&w).await;
    assert_eq!(rows.iter().filter(|r| r.role == "self").count(), 1);
}

#[tokio::test]
async fn the_api_key_never_reaches_the_transcript_the_ledger_or_the_outbox() {
    use muninn_host::backends::AnyBackend;
    let dir = tempfile::tempdir().unwrap();
    let server = muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        SimConfig {
            frozen_at_ms: Some(T0),
            api_key: Some(SECRET.to_string()),
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    let (host, factory) = keyed_host(&dir, &server).await;
    let make = || factory.make(host.clock.clone(), &PriceTable::embedded(), "vala/persona");
    let persona: AnyBackend = make();
    // Found by this test: the simulator's own configured key reached `{:?}` through the clock.
    assert!(!format!("{persona:?}").contains(SECRET));
    let mut r = MindRunner::new(
        host.clone(),
        mind(""),
        "host-a".into(),
        &PriceTable::embedded(),
        persona,
        make(),
    )
    .unwrap();
    r.register().await.unwrap();
    host.store
        .post_delivery(
            "vala",
            &NewDelivery {
                room: "#swarm".into(),
                sender: "ari".into(),
                is_direct: false,
                text: "hello".into(),
                source_id: "e1".into(),
                received_at_ms: T0,
                to_you: false,
                context: Vec::new(),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    assert_the_key_is_nowhere(&host, &server).await;
    server.stop().await.unwrap();
}

/// The Anthropic API key of [`keyed_host`]'s backend, and the simulator's.
const SECRET: &str = "sk-ant-secret-key-do-not-leak-7731";

/// A host in `dir` on the Anthropic backend against `server`, its key [`SECRET`]; the backend
/// factory's debug form does not show it.
async fn keyed_host(
    dir: &tempfile::TempDir,
    server: &muninn_sim::SimHandle,
) -> (Host, muninn_host::backends::BackendFactory) {
    use muninn_host::backends::BackendFactory;
    use muninn_host::config::BackendConfig;
    let mut config: Config = toml::from_str("").unwrap();
    config.backend = BackendConfig {
        kind: Some(muninn_host::config::BackendKind::Anthropic),
        base_url: Some(server.base_url()),
        api_key_env: "MUNINN_TEST_KEY".into(),
        claude_bin: None,
        ..BackendConfig::default()
    };
    let env = |k: &str| (k == "MUNINN_TEST_KEY").then(|| SECRET.to_string());
    let factory = BackendFactory::from_config(&config, env).unwrap();
    assert!(!format!("{factory:?}").contains(SECRET));
    let store = muninn_store::open(dir.path().join("muninn.db").to_str().unwrap())
        .await
        .unwrap();
    let host = Host::new(store, config, Arc::new(SimClock(server.sim.clone())));
    (host, factory)
}

/// The key is in nothing the host stored (transcript, ledger, outbox) nor any request body
/// the simulator received; there was something to look in.
async fn assert_the_key_is_nowhere(host: &Host, server: &muninn_sim::SimHandle) {
    let transcript = host
        .store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    let ledger = host.store.ledger(&LedgerQuery::default()).await.unwrap();
    let outbox = host.store.unacked_outbox("vala", 100).await.unwrap();
    let everything = format!(
        "{:?}{}{:?}{:?}",
        transcript,
        serde_json::to_string(&ledger.iter().map(|e| &e.row).collect::<Vec<_>>()).unwrap(),
        outbox,
        server
            .sim
            .requests()
            .iter()
            .map(|r| &r.body)
            .collect::<Vec<_>>()
    );
    assert!(!everything.contains(SECRET));
    assert!(!ledger.is_empty() && !transcript.is_empty());
}

#[tokio::test]
async fn room_history_that_came_with_deliveries_is_shown_once_per_segment() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let line = |id: &str, text: &str| muninn_store::ContextLine {
        id: Some(id.into()),
        sender: "bo".into(),
        text: text.into(),
    };
    let deliver = |id: &str, text: &str, context: Vec<muninn_store::ContextLine>| NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        text: text.into(),
        source_id: id.into(),
        received_at_ms: w.sim.now_ms(),
        to_you: true,
        context,
    };
    let store = &w.host.store;
    store
        .post_delivery(
            "vala",
            &deliver(
                "m3",
                "third",
                vec![line("m1", "history one"), line("m2", "history two")],
            ),
        )
        .await
        .unwrap();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    store
        .post_delivery(
            "vala",
            &deliver(
                "m5",
                "fifth",
                vec![
                    line("m2", "history two"),
                    line("m3", "third"),
                    line("m4", "history four"),
                ],
            ),
        )
        .await
        .unwrap();
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let requests = w.sim.requests();
    let last_user = |i: usize| {
        let messages = requests[i].body["messages"].as_array().unwrap();
        messages.last().unwrap()["content"].to_string()
    };
    assert!(last_user(0).contains("history one") && last_user(0).contains("history two"));
    let second = last_user(1);
    assert!(second.contains("history four"), "{second}");
    assert!(
        !second.contains("history two") && !second.contains("history one"),
        "{second}"
    );
    assert!(second.contains("to you"));
}

#[tokio::test]
async fn a_delivery_posted_through_another_host_is_a_new_wake() {
    // Another host on the same database posts to the store and cannot signal this runner, so
    // a delivery newer than any seen must start a new wake by itself.
    let w = world().await;
    let mut r = runner(&w, mind("turns_per_wake = 1"), "host-a");
    r.register().await.unwrap();
    post(&w, "d1", "@ada", "@ada", "first").await;
    post(&w, "d2", "@bo", "@bo", "second").await;
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 1,
            ..
        }
    ));
    // The wake's one turn is spent: the second, already waiting, stays until a new arrival.
    assert!(matches!(r.step().await.unwrap(), Step::Idle { .. }));
    post(&w, "d3", "@cy", "@cy", "third").await;
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: 2,
            ..
        }
    ));
    assert!(matches!(r.step().await.unwrap(), Step::Idle { .. }));
}

/// A turn the provider refuses (a rotated key: 401, which the client does not retry) is tried
/// again on the runner's own steps until it goes through — it does not count against the wake's
/// turn limit, so no new delivery is needed to wake it. The provider's session took nothing of
/// a refused attempt, so the transcript holds the delivery once (each retry re-sends it) and
/// one notice of why the attempts failed (three identical 401s).
#[tokio::test]
async fn a_refused_turn_is_retried_until_it_goes_through_and_its_delivery_is_recorded_once() {
    use muninn_sim::sim::{Fault, FaultKind};
    let w = world().await;
    let mut r = runner(&w, mind("turns_per_wake = 1"), "host-a");
    r.register().await.unwrap();
    post(
        &w,
        "k1",
        "#swarm",
        "ari",
        "are you there after the key change?",
    )
    .await;
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 3,
    }]);
    for _ in 0..3 {
        assert!(r.step().await.is_err());
        w.sim.advance_clock(1_000);
    }
    // The key works again: the next step answers, with no new delivery and no wake-up.
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 1);
    let transcript = w
        .host
        .store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    let kinds: Vec<String> = transcript
        .iter()
        .map(|i| match i.body.get("attempt_failed") {
            Some(_) => "attempt_failed".to_string(),
            None => i.kind.as_str().to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        ["delivery", "attempt_failed", "reply"],
        "{transcript:#?}"
    );
    assert!(
        transcript[1].body["attempt_failed"]
            .as_str()
            .unwrap()
            .contains("401"),
        "{:?}",
        transcript[1]
    );
    assert_eq!(ledger(&w).await.len(), 1);
}

/// What `muninn status` (and the dashboard) shows of the Self's segments says why each began:
/// the first because there was none (`start`), the next because the session its brief failed
/// in was lost and rebuilt (`rebuilt from the transcript`), as the Persona's say. Both said
/// `task boundary` — a refresh the decider chose between briefs — though the decider chose
/// nothing: the reason came from where the new segment's memory was restored from.
#[tokio::test]
async fn the_self_segments_status_shows_say_why_they_began() {
    use muninn_api::ApiToken;
    use muninn_api::client::ApiClient;
    use muninn_sim::sim::{Fault, FaultKind};
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let brief = crate::scripted::brief;
    brief(&w, "Summarise the open issues.").await;
    w.sim.push_faults([Fault {
        kind: FaultKind::Truncate { after_deltas: 1 },
        times: 1,
    }]);
    assert!(r.step().await.is_err(), "the Self's run was cut");
    w.sim.advance_clock(1_000);
    brief(&w, "Summarise them again.").await;
    for _ in 0..4 {
        r.woken();
        if matches!(r.step().await.unwrap(), Step::Idle { .. }) {
            break;
        }
    }
    let token = ApiToken::new("status-test-token");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(muninn_host::http::serve(
        w.host.clone(),
        token.clone(),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    let client = ApiClient::new(&addr.to_string(), token).unwrap();
    let minds = client.minds().await.unwrap().minds;
    let status = minds.iter().find(|m| m.id == "vala").unwrap();
    let open = status.segments.self_role.as_ref().expect("a Self segment");
    let all = w.host.store.segments("vala", Role::SelfRole).await.unwrap();
    let reasons: Vec<&str> = all.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(Some(open.number), all.last().map(|s| s.number));
    assert_eq!(
        (open.reason.as_str(), reasons),
        (
            "rebuilt from the transcript",
            vec!["start", "rebuilt from the transcript"]
        ),
    );
}
