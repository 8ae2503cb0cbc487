//! A Persona turn on the Claude Code CLI backend, ledgered as the CLI reported it.

use crate::cli_world::CliWorld;
use crate::runtime::*;
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::runtime::{MindRunner, Step};
use muninn_store::{LedgerQuery, NewDelivery, Role};
use muninn_testkit::peers::claude_cli;
use std::sync::Arc;

/// The key the CLI world's backend reads, which nothing the host prints may show.
const KEY: &str = "sk-test-claude-cli-host";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_turn_on_the_claude_cli_backend_ledgers_what_the_cli_reported() {
    use muninn_host::backends::AnyBackend;
    let Some(bin) = claude_cli() else { return };
    let w = keyed_cli_world(bin).await;
    let (host, server) = (&w.host, &w.server);
    let prices = PriceTable::embedded();
    let persona = w.factory.make(host.clock.clone(), &prices, "vala/persona");
    assert!(matches!(persona, AnyBackend::ClaudeCli(_)));
    let selfs = w.factory.make(host.clock.clone(), &prices, "vala/self");
    let mut r = MindRunner::new(
        host.clone(),
        mind(""),
        "host-a".into(),
        &prices,
        persona,
        selfs,
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
                text: "hello vala".into(),
                source_id: "e1".into(),
                received_at_ms: T0,
                to_you: true,
                context: Vec::new(),
            },
        )
        .await
        .unwrap();
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::PersonaTurn { .. }), "{step:?}");
    let rows: Vec<_> = host
        .store
        .ledger(&LedgerQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.row)
        .collect();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_the_usage_is_what_the_cli_reported(&rows[0], server);
    assert_a_private_binding_key_and_a_bound_handle(host).await;
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// A Claude Code CLI world as `cli_world::cli_world` builds it, its backend reading [`KEY`]; the
/// backend factory's debug form does not show the key.
async fn keyed_cli_world(bin: std::path::PathBuf) -> CliWorld {
    let w = crate::cli_world::cli_world_keyed(bin, KEY, |_| {}, |store| store).await;
    assert!(!format!("{:?}", w.factory).contains(KEY));
    w
}

/// What the CLI reported is its `result` usage, kept verbatim; the parsed numbers are it. And
/// the CLI reported what the API (the simulator) answered, summed over the turn's requests (a
/// schema turn may take more than one).
fn assert_the_usage_is_what_the_cli_reported(row: &LedgerRow, server: &muninn_sim::SimHandle) {
    let raw = row.raw_usage.clone().unwrap();
    assert_eq!(row.usage, muninn_claude_cli::parse_usage(&raw, false));
    let answered: Vec<_> = server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .filter_map(|q| q.usage)
        .collect();
    assert!(!answered.is_empty());
    let sum = answered
        .iter()
        .fold(muninn_core::trace::Usage::default(), |a, u| {
            muninn_core::trace::Usage {
                input: a.input + u.input,
                cache_write_5m: a.cache_write_5m + u.cache_write_5m,
                cache_write_1h: a.cache_write_1h + u.cache_write_1h,
                cache_read: a.cache_read + u.cache_read,
                output: a.output + u.output,
            }
        });
    assert_eq!(row.usage, sum, "{raw}");
    assert!(row.cost.0 > 0);
}

/// The host's binding key was created, private, and the turn left a handle with the segment,
/// bound to the segment's transcript (issue 5).
async fn assert_a_private_binding_key_and_a_bound_handle(host: &Host) {
    let key_file = host.config.data_dir.join("session-binding.key");
    assert_eq!(std::fs::read(&key_file).unwrap().len(), 32);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let segment = host
        .store
        .current_segment("vala", Role::Persona)
        .await
        .unwrap()
        .unwrap();
    let stored = segment
        .session_id
        .expect("a handle stored with the segment");
    let handle = muninn_claude_cli::Handle::decode(&stored).unwrap();
    assert_eq!(
        handle.session_id,
        muninn_claude_cli::derive_session_id("vala/persona", 0)
    );
}

/// The user messages of a request body, concatenated: what the user's side showed the model.
fn user_side(body: &serde_json::Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

/// The session files the Persona's CLI children left (`projects/<cwd>/<id>.jsonl` under its
/// config directory).
fn cli_session_files(host: &Host) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "jsonl")
                && path.components().any(|c| c.as_os_str() == "projects")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &host.config.data_dir.join("claude-cli/vala/persona"),
        &mut files,
    );
    files
}

/// An outage behind the Claude Code CLI — the API overloaded: every request refused with a 529,
/// which the CLI itself gives up on after three tries (a 401 or a 500 it retries for about three
/// minutes first) — while a delivery waits, on a session with a conversation in it. The CLI keeps a refused turn's user line in its session file and merges it into the
/// next turn's message, so the host used to give the session up: each attempt opened a new
/// segment and a new CLI session and recorded the delivery again. Now the driver puts the
/// session file back as it was before the refused turn, and the session continues: three
/// refused attempts leave one segment, one recorded delivery and one notice (one error); every
/// refused request and the one answered when the key works again carry the same conversation
/// (the delivery once: what the model sees does not grow per retry), the delivery is answered
/// once, and the Persona has one CLI session file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_behind_the_claude_cli_does_not_grow_the_transcript_per_retry() {
    let Some(bin) = claude_cli() else { return };
    let w = crate::cli_world::cli_world(bin).await;
    let mut r = w.runner(mind(""), "host-a");
    r.register().await.unwrap();
    w.say("e1", "juliet-one: the lighthouse is dark").await;
    crate::cli_world::turn(&mut r).await;
    let answered_before = w.messages_requests().len();

    w.server.sim.push_faults([muninn_sim::sim::Fault {
        kind: muninn_sim::sim::FaultKind::Overloaded,
        times: 1_000,
    }]);
    w.say("e2", "juliet-two: who keeps it now?").await;
    for attempt in 1..=3 {
        r.woken();
        let failed = r.step().await;
        assert!(failed.is_err(), "attempt {attempt}: {failed:?}");
    }
    assert_eq!(w.persona_segments().await, 1, "a segment per retry");
    assert_eq!(
        crate::retry::persona_kinds(&w.host).await,
        ["delivery", "reply", "delivery", "attempt_failed"]
    );
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 1);

    w.server.sim.clear_faults();
    crate::cli_world::turn(&mut r).await;
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 2);
    assert_eq!(w.persona_segments().await, 1);
    assert_eq!(
        crate::retry::persona_kinds(&w.host).await,
        ["delivery", "reply", "delivery", "attempt_failed", "reply"]
    );
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 2, "{outbox:#?}");
    w.assert_nothing_sent_twice().await;
    // What the model was shown: the outage's refused requests and the answered retry all hold
    // the same conversation, the waiting delivery once in it.
    let requests: Vec<_> = w
        .server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .skip(answered_before)
        .collect();
    let refused = requests.iter().filter(|q| q.status == 529).count();
    assert!(refused >= 3, "{refused} refused requests");
    let answered: Vec<_> = requests.iter().filter(|q| q.status == 200).collect();
    assert_eq!(answered.len(), 1, "one request answered after the outage");
    let conversation = |q: &muninn_sim::sim::RecordedRequest| {
        (q.body["system"].clone(), q.body["messages"].clone())
    };
    for q in &requests {
        assert_eq!(
            conversation(q),
            conversation(answered[0]),
            "request {}",
            q.seq
        );
    }
    // The user's side of it (the simulator's replies quote what they answer).
    let said = user_side(&answered[0].body);
    assert_eq!(said.matches("juliet-two").count(), 1, "{said}");
    assert_eq!(said.matches("juliet-one").count(), 1, "{said}");
    let files = cli_session_files(&w.host);
    assert_eq!(files.len(), 1, "{files:#?}");
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// A host killed (SIGKILL) during a refused turn, after the CLI wrote the turn to its session
/// file and before the driver cut it back out: the file holds the refused line, muninn's
/// transcript the delivery unanswered. Emulated in process: the file as the CLI left it before
/// the cut (watched while the CLI retries) is put back after the attempt, and the runner is
/// dropped without releasing its lease. The host that takes over must not resume that CLI
/// session (it would merge the refused line into the next message: the delivery twice). It
/// does not: a segment whose transcript ends in a delivery never answered is not resumed, the
/// handle verifies only over the transcript as bound after the last reply, and a new segment
/// starts a fresh CLI session — the delivery is shown to the model once and answered once.
/// (The binding covers muninn's transcript, not the CLI's file: it is the unanswered tail that
/// keeps the diverged file from being resumed.) Passes before the review: a guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_before_a_refused_turn_is_cut_out_shows_the_line_once() {
    let Some(bin) = claude_cli() else { return };
    let w = crate::cli_world::cli_world(bin).await;
    let mut a = w.runner(mind(""), "host-a");
    a.register().await.unwrap();
    w.say("e1", "kilo-one: the tide is out").await;
    crate::cli_world::turn(&mut a).await;
    let files = cli_session_files(&w.host);
    assert_eq!(files.len(), 1, "{files:#?}");
    let file = files[0].clone();

    // Watch the session file while the CLI retries: the last content holding the refused line
    // (whole lines only) is the file as a kill before the cut leaves it.
    let left = Arc::new(std::sync::Mutex::new(None::<Vec<u8>>));
    let watch = {
        let (file, left) = (file.clone(), left.clone());
        tokio::spawn(async move {
            loop {
                let bytes = std::fs::read(&file).unwrap_or_default();
                if String::from_utf8_lossy(&bytes).contains("kilo-two") {
                    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                    *left.lock().unwrap() = Some(bytes[..end].to_vec());
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    };
    w.server.sim.push_faults([muninn_sim::sim::Fault {
        kind: muninn_sim::sim::FaultKind::Overloaded,
        times: 1_000,
    }]);
    w.say("e2", "kilo-two: when does it turn?").await;
    a.woken();
    assert!(a.step().await.is_err());
    watch.abort();
    let before_cut = left
        .lock()
        .unwrap()
        .take()
        .expect("the CLI stored the refused line");
    assert!(!std::fs::read_to_string(&file).unwrap().contains("kilo-two"));
    // The kill: the cut never happened, the lease is not released.
    std::fs::write(&file, &before_cut).unwrap();
    drop(a);

    w.server.sim.clear_faults();
    w.server
        .sim
        .advance_clock(w.host.config.lease_ttl_ms + 1_000);
    let mut b = w.runner(mind(""), "host-b");
    crate::cli_world::turn(&mut b).await;
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 2);
    w.assert_nothing_sent_twice().await;
    let outbox = w.host.store.unacked_outbox("vala", 10).await.unwrap();
    assert_eq!(outbox.len(), 2, "{outbox:#?}");
    let answered = w
        .server
        .sim
        .requests()
        .into_iter()
        .rfind(|q| q.path == "/v1/messages" && q.status == 200)
        .unwrap();
    let said = user_side(&answered.body);
    assert_eq!(said.matches("kilo-two").count(), 1, "{said}");
    // A new segment, on a fresh CLI session: the diverged file is left alone.
    assert_eq!(w.persona_segments().await, 2);
    assert_eq!(std::fs::read(&file).unwrap(), before_cut);
    b.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// A failure after a paid answer rebuilds the session once, not once per retry of an outage.
/// The model answers in text though asked for the structured reply, the CLI nudges it, and
/// that request is refused (529): the turn fails with the model's answer in the CLI's session,
/// which the host does not carry on from (it holds what muninn's transcript does not, and the
/// delivery would be shown twice): a new segment, seeded from the transcript. The outage goes
/// on: the rebuilt segment's first request, refused with nothing answered, is taken back out of
/// its session, and the retries stay in that segment — two segments after three failed
/// attempts, not four, and the delivery recorded once per segment. A guard of the rule
/// `docs/host.md` explains (passes before and after the change that added it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_a_paid_answer_rebuilds_once_not_per_retry() {
    use muninn_sim::sim::{Fault, FaultKind};
    let Some(bin) = claude_cli() else { return };
    let w = crate::cli_world::cli_world(bin).await;
    let mut r = w.runner(mind(""), "host-a");
    r.register().await.unwrap();
    w.say("e1", "lima-one: the fog is in").await;
    crate::cli_world::turn(&mut r).await;
    let answered_before = w.messages_requests().len();

    // The first request passes (the paid text answer), every later one is overloaded.
    w.server.sim.push_faults([
        Fault {
            kind: FaultKind::InflateUsage {
                cache_read_tokens: 0,
            },
            times: 1,
        },
        Fault {
            kind: FaultKind::Overloaded,
            times: 1_000,
        },
    ]);
    let marker = muninn_sim::reply::TEXT_ANSWER_MARKER;
    w.say("e2", &format!("lima-two: say it in words {marker}"))
        .await;
    for attempt in 1..=3 {
        r.woken();
        let failed = r.step().await;
        assert!(failed.is_err(), "attempt {attempt}: {failed:?}");
    }
    let answered: Vec<_> = w
        .server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages" && q.status == 200)
        .skip(answered_before)
        .collect();
    assert_eq!(answered.len(), 1, "the paid answer");
    assert_eq!(w.persona_segments().await, 2, "a segment per retry");
    let kinds = crate::retry::persona_kinds(&w.host).await;
    let deliveries = kinds.iter().filter(|k| *k == "delivery").count();
    assert_eq!(deliveries, 3, "{kinds:?}");
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// Every session the claude-cli factory makes shares its one `Sweeps`: the host waits for
/// those (`run_minds`, `sweeps_settled`) before it exits, and shows their failures in `muninn
/// status` and `/metrics`. A Mind's two sessions on a CLI stand-in, the factory's sweeps unable
/// to list the processes (a directory that is not there for `/proc`): each session's stop
/// fails its sweep, and the factory counts both, as does the host's telemetry once `run_minds`
/// has run. A session with a `Sweeps` of its own would be neither waited for nor seen failing
/// (0), nor would a host whose `run_minds` did not hand the factory's sweeps to its telemetry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_claude_cli_session_shares_the_factorys_sweeps() {
    use muninn_backend::{Backend, SessionSpec};
    use muninn_core::cache::Ttl;
    use muninn_host::backends::BackendFactory;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("claude");
    std::fs::write(&bin, "#!/bin/sh\nwhile read line; do :; done\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A child forked elsewhere in this test binary may still hold the file open for writing
    // (ETXTBSY) until it execs.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut w = crate::cli_world::cli_world(bin).await;
    if let BackendFactory::ClaudeCli { sweeps, .. } = &mut w.factory {
        *sweeps = muninn_claude_cli::Sweeps::looking_in(dir.path().join("no-proc"));
    }
    let prices = PriceTable::embedded();
    // The host as `muninn serve` runs it (no Mind configured, stopped at once): `run_minds`
    // hands the factory's sweeps to the telemetry, which `muninn status` and `/metrics` read.
    let (_stop, stopped) = tokio::sync::watch::channel(true);
    let ran = muninn_host::runtime::run_minds(
        w.host.clone(),
        w.factory.clone(),
        prices.clone(),
        "host-a".into(),
        stopped,
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), ran)
        .await
        .unwrap()
        .unwrap();
    for session in ["vala/persona", "vala/self"] {
        let mut backend = w.factory.make(w.host.clock.clone(), &prices, session);
        backend
            .start(SessionSpec {
                model: String::new(),
                system: vec!["You are a stand-in's session.".into()],
                tools: Vec::new(),
                output_schema: None,
                system_ttl: Ttl::FiveMinutes,
                conversation_ttl: Ttl::FiveMinutes,
                max_tokens: 1024,
            })
            .await
            .unwrap();
        backend.close().await;
    }
    assert_eq!(
        (
            w.factory.sweeps().map(|s| s.failed()),
            w.host.telemetry.sweeps_failed()
        ),
        (Some(2), 2)
    );
}
