//! A restarted host continues a segment through the provider session handle stored with it
//! (issue 5), on the real Claude Code CLI against the simulator: the sim backend binds no
//! sessions, so resuming means nothing there.

use crate::cli_world::{
    CliWorld, assert_gap_free, batches, child_pid, cli_world, cli_world_with, kill, persona,
    persona_session_files, row_events_of, turn,
};
use crate::runtime::T0;
use muninn_core::ledger::LedgerRow;
use muninn_host::Host;
use muninn_host::backends::BackendFactory;
use muninn_host::config::{Config, MindConfig};
use muninn_sim::SimClock;
use muninn_sim::sim::SimConfig;
use muninn_store::Role;
use muninn_testkit::peers::claude_cli;
use std::sync::Arc;

/// Flip to `true` once `resume_session(.., fork = true)` is wired in muninn-claude-cli
/// (`--resume <id> --fork-session`): a takeover then continues a copy under a new session id.
const FORK_WIRED: bool = true;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_continues_the_segment_through_its_stored_handle() {
    let Some(bin) = claude_cli() else { return };
    let w = cli_world(bin).await;
    let mut a = w.runner(persona("watchful"), "host-a");
    a.register().await.unwrap();
    w.say("e1", "alpha-one: remember the river").await;
    turn(&mut a).await;
    w.say("e2", "alpha-two: and the bridge").await;
    turn(&mut a).await;
    let original = w.stored_session_id().await;
    let before = w.messages_requests().len();
    let outbox_before = w.host.store.unacked_outbox("vala", 100).await.unwrap();
    // A crash: the runner (and its CLI child) is gone, its lease not released.
    drop(a);
    // Another host takes the Mind over once the lease has lapsed.
    w.server
        .sim
        .advance_clock(w.host.config.lease_ttl_ms + 1_000);
    let mut b = w.runner(persona("watchful"), "host-b");
    w.say("e3", "alpha-three: what did I ask you to remember?")
        .await;
    turn(&mut b).await;

    // The same segment continues: no new segment row.
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 1, "{segments:#?}");
    // The new process's first request carries the whole conversation so far.
    let requests = w.messages_requests();
    let first = requests[before].to_string();
    for earlier in ["alpha-one", "alpha-two", "alpha-three"] {
        assert!(first.contains(earlier), "{earlier} missing from {first}");
    }
    assert_forked_resume_on_the_row(&w.rows().await, &original);
    // Nothing sent twice: the earlier batches' messages are still the only ones for them.
    w.assert_nothing_sent_twice().await;
    let outbox = w.assert_still_sent_once(&outbox_before).await;
    assert!(outbox.len() > outbox_before.len());
    // The transcript is whole: three deliveries, three replies, in order, one segment.
    let transcript = w.persona_transcript().await;
    let kinds: Vec<_> = transcript.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "delivery", "reply", "delivery", "reply", "delivery", "reply"
        ]
    );
    assert_gap_free(&transcript);
    // A forked resume continues a copy under a new id; until forking is wired the session
    // itself continues.
    let now = w.stored_session_id().await;
    assert_eq!(now != original, FORK_WIRED, "{original} → {now}");

    // A clean shutdown releases the lease: the next holder resumes without forking.
    b.release().await.unwrap();
    drop(b);
    assert_the_next_holder_resumes_unforked_in_one_accounting(&w).await;
    w.server.stop().await.unwrap();
}

/// The resume is on the turn's ledger row, forked (the lease was taken over, not released),
/// with the CLI's side of it: the copy's new id, from `original`.
fn assert_forked_resume_on_the_row(rows: &[LedgerRow], original: &str) {
    let resumed = row_events_of(rows, "resumed_segment");
    assert_eq!(resumed.len(), 1, "{rows:#?}");
    assert_eq!(resumed[0]["fork"], true);
    assert_eq!(resumed[0]["segment"], 0);
    let forked = row_events_of(rows, "forked");
    assert_eq!(forked.len(), 1, "{rows:#?}");
    assert_eq!(forked[0]["from"], original);
    assert!(rows.iter().all(|r| r.segment == 0));
}

/// After a clean release, a third host resumes the segment without forking, and the three
/// hosts kept one accounting: each took the segment's counts back from the ledger (a resumed
/// segment used to restart them), so the turns count on, and replaying the ledger in closed
/// loop takes every decision the hosts took. (The CLI's requests carry its own system and
/// tools, whose shape the ledger does not know: the cost is not checked.)
async fn assert_the_next_holder_resumes_unforked_in_one_accounting(w: &CliWorld) {
    let mut c = w.runner(persona("watchful"), "host-c");
    w.say("e4", "alpha-four: still there?").await;
    turn(&mut c).await;
    let rows = w.rows().await;
    let last = rows.last().unwrap();
    let event = last
        .events
        .iter()
        .find(|e| e["type"] == "resumed_segment")
        .unwrap_or_else(|| panic!("{last:#?}"));
    assert_eq!(event["fork"], false);
    assert_eq!(w.persona_segments().await, 1);
    let turns: Vec<u64> = rows.iter().map(|r| r.turn).collect();
    assert_eq!(turns, [0, 1, 2, 3], "{rows:#?}");
    let report = muninn_core::closed_loop::verify(
        &rows,
        &muninn_core::price::PriceTable::embedded(),
        &Default::default(),
    );
    assert!(report.disagreements.is_empty(), "{report:#?}");
    assert_eq!(report.decisions, 3, "{report:#?}");
    assert_eq!(report.agreed, 3, "{report:#?}");
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_persona_layer_opens_a_fresh_segment_after_a_restart() {
    let Some(bin) = claude_cli() else { return };
    let w = cli_world(bin).await;
    let mut a = w.runner(persona("watchful"), "host-a");
    a.register().await.unwrap();
    w.say("e1", "beta-one: hello").await;
    turn(&mut a).await;
    let before = w.messages_requests().len();
    drop(a);
    w.server
        .sim
        .advance_clock(w.host.config.lease_ttl_ms + 1_000);
    // The persona state changed while the host was down: the segment's system layers are no
    // longer what the handle was minted over, so it is not continued.
    let mut b = w.runner(persona("cheerful"), "host-b");
    w.say("e2", "beta-two: hello again").await;
    turn(&mut b).await;
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2, "{segments:#?}");
    // A new process opens its first segment as a cold start.
    assert_eq!(segments[1].reason, "start");
    assert!(segments[0].ended_at_ms.is_some());
    let rows = w.rows().await;
    assert!(
        rows.iter()
            .flat_map(|r| &r.events)
            .all(|e| e["type"] != "resumed_segment"),
        "{rows:#?}"
    );
    // A new segment is a fresh session by choice, not a lost one: no reseed is recorded.
    assert!(
        rows.iter()
            .flat_map(|r| &r.events)
            .all(|e| e["type"] != "reseeded"),
        "{rows:#?}"
    );
    // The new session starts from the layers: the old conversation is not in its request.
    let first = w.messages_requests()[before].to_string();
    assert!(!first.contains("beta-one"), "{first}");
    assert!(
        first.contains("beta-two") && first.contains("cheerful"),
        "{first}"
    );
    b.release().await.unwrap();
    w.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_turns_ledger_what_the_cli_reported_and_a_parked_child_resumes_on_the_next() {
    let Some(bin) = claude_cli() else { return };
    let w = cli_world_with(bin, |c| {
        c.backend.pool.park_min_idle_s = 1;
    })
    .await;
    let mut r = w.runner(persona("steady"), "host-a");
    r.register().await.unwrap();
    for (i, text) in ["one", "two", "three", "four", "five"].iter().enumerate() {
        w.say(&format!("f{i}"), &format!("turn {text}: keep count"))
            .await;
        turn(&mut r).await;
    }
    let rows = w.rows().await;
    assert_eq!(rows.len(), 5, "{rows:#?}");
    // Each row's usage is what the CLI's `result` reported for the turn, verbatim.
    for row in &rows {
        let raw = row.raw_usage.as_ref().unwrap();
        assert_eq!(
            row.usage,
            muninn_claude_cli::parse_usage(raw, false),
            "{row:#?}"
        );
    }
    // One process, one segment: the cached prefix is read, and reads grow turn by turn.
    let reads: Vec<u64> = rows.iter().map(|r| r.usage.cache_read).collect();
    assert!(reads.windows(2).skip(1).all(|p| p[1] > p[0]), "{reads:?}");
    assert!(rows.iter().all(|r| r.segment == 0));

    // The pool parks the idle child (the sweep looks ten minutes ahead of the last turn) …
    let pool = w.factory.process_pool().unwrap().clone();
    let pid = child_pid(&w, "vala/persona").expect("a live persona child");
    let events = pool
        .sweep(pool.now() + std::time::Duration::from_secs(600))
        .await;
    assert!(
        events
            .iter()
            .any(|e| format!("{e:?}").contains("vala/persona")),
        "{events:?}"
    );
    assert_eq!(child_pid(&w, "vala/persona"), None);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || {
            // A zombie not yet reaped counts as gone.
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map(|s| s.contains("State:\tZ"))
                .unwrap_or(true)
        }
    );
    // … and the next turn resumes it with the whole conversation, recorded on its ledger row.
    let before = w.messages_requests().len();
    w.say("f5", "turn six: how many so far?").await;
    turn(&mut r).await;
    let first = w.messages_requests()[before].to_string();
    assert!(
        first.contains("turn one") && first.contains("turn five"),
        "{first}"
    );
    let last = w.rows().await.pop().unwrap();
    let types: Vec<_> = last.events.iter().map(|e| e["type"].clone()).collect();
    assert!(types.contains(&serde_json::json!("parked")), "{types:?}");
    assert!(types.contains(&serde_json::json!("unparked")), "{types:?}");
    assert!(last.usage.cache_read > 0, "{last:#?}");
    assert_eq!(w.persona_segments().await, 1);
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// A CLI child killed (SIGKILL) mid-turn, its request waiting on the API, nothing answered:
/// the delivery is answered once, nothing is sent twice, and the model is shown the delivery
/// once. The CLI had stored the turn's line as it took it, so the resumed session merged it
/// into the retry's message and the host recorded the delivery a second time: the answered
/// request held `kilo-two` twice and the transcript two deliveries. Now the driver takes the
/// dead child's turn back out of the session file, and the retry is the recorded message
/// re-sent: one delivery and a notice of why the attempt failed, as for a refused turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_killed_mid_turn_loses_no_delivery_and_sends_nothing_twice() {
    use muninn_sim::sim::{Fault, FaultKind};
    let Some(bin) = claude_cli() else { return };
    let w = Arc::new(cli_world(bin).await);
    let mut r = w.runner(persona("steady"), "host-a");
    r.register().await.unwrap();
    w.say("k1", "kilo-one: hello").await;
    turn(&mut r).await;
    let pid = child_pid(&w, "vala/persona").expect("a live persona child");
    // The next reply is slow, so the child is certainly mid-turn when it is killed.
    w.server.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 20_000,
            event_ms: 0,
        },
        times: 1,
    }]);
    w.say("k2", "kilo-two: are you there?").await;
    r.woken();
    let stepping = tokio::spawn(async move {
        let step = r.step().await;
        (r, step)
    });
    wait_until_the_child_waits_on_the_sim(&w, "kilo-two").await;
    // SIGKILL: no chance to finish the turn or write anything more.
    kill(pid);
    let (mut r, step) = stepping.await.unwrap();
    assert!(step.is_err(), "{step:?}");
    // The delivery was not acknowledged: the next step answers it, in the same segment, the
    // child relaunched with `--resume`: its first request carries the conversation so far.
    let before = w.messages_requests().len();
    turn(&mut r).await;
    let first = w.messages_requests()[before].to_string();
    assert!(first.contains("kilo-one"), "{first}");
    assert_eq!(first.matches("kilo-two").count(), 1, "{first}");
    assert_eq!(w.persona_segments().await, 1);
    let last = w.rows().await.pop().unwrap();
    assert!(
        last.events.iter().any(|e| e["type"] == "relaunched"),
        "{:?}",
        last.events
    );
    assert_the_retry_answered_once_and_kept_the_transcript(&w).await;
    r.release().await.unwrap();
}

/// Waits until the Persona's child is mid-turn on `text`: its request is waiting on the sim
/// and its session file holds the line. The sim takes the fault when the request arrives and
/// records the request only once it is answered: an empty fault queue is the sign that the
/// child is waiting on its reply. (Waiting for the record instead raced the kill against the
/// child's finishing the turn.) The CLI writes its session file behind a buffer: the kill
/// waits for the line to be in it too, as it is once a request has waited a moment on a slow
/// API.
async fn wait_until_the_child_waits_on_the_sim(w: &CliWorld, text: &str) {
    let stored = |w: &CliWorld| {
        persona_session_files(w)
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|s| s.contains(text)))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !w.server.sim.faults().is_empty() || !stored(w) {
        assert!(
            std::time::Instant::now() < deadline,
            "the turn never reached the sim"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// After the killed turn's retry: nothing sent twice, one batch per delivery answered (k1's
/// and k2's, no other), and the transcript whole: the delivery shown to the killed turn stays,
/// then why that attempt failed, then the retry's reply (the same message re-sent); nothing
/// was removed.
async fn assert_the_retry_answered_once_and_kept_the_transcript(w: &CliWorld) {
    w.assert_nothing_sent_twice().await;
    let outbox = w.host.store.unacked_outbox("vala", 100).await.unwrap();
    assert_eq!(batches(&outbox).len(), 2, "{outbox:#?}");
    let transcript = w.persona_transcript().await;
    let kinds: Vec<_> = transcript.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["delivery", "reply", "delivery", "notice", "reply"],
        "{transcript:#?}"
    );
    assert!(transcript[3].body.get("attempt_failed").is_some());
    assert_gap_free(&transcript);
    assert!(
        transcript[4].body.to_string().len() > 2,
        "{:?}",
        transcript[4]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_cli_session_is_seeded_from_muninns_transcript_mid_run_and_after_a_restart() {
    let Some(bin) = claude_cli() else { return };
    let w = cli_world(bin).await;
    let mut a = w.runner(persona("steady"), "host-a");
    a.register().await.unwrap();
    w.say("s1", "sierra-one: the key is under the oak").await;
    turn(&mut a).await;
    w.say("s2", "sierra-two: and the gate code is 4471").await;
    turn(&mut a).await;

    // The CLI's session file goes (a wiped disk, an operator's clean-up), the child with it.
    let pid = child_pid(&w, "vala/persona").unwrap();
    for f in persona_session_files(&w) {
        std::fs::remove_file(f).unwrap();
    }
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    let before = w.messages_requests().len();
    w.say("s3", "sierra-three: where is the key?").await;
    turn(&mut a).await;
    // The fresh session's first request carries the conversation so far, from muninn's side.
    let first = w.messages_requests()[before].to_string();
    for earlier in ["sierra-one", "4471", "sierra-three"] {
        assert!(first.contains(earlier), "{earlier} missing from {first}");
    }
    let row = w.rows().await.pop().unwrap();
    let reseeded: Vec<_> = row
        .events
        .iter()
        .filter(|e| e["type"] == "reseeded")
        .collect();
    assert_eq!(reseeded.len(), 1, "{:?}", row.events);
    assert!(
        reseeded[0]["seed_tokens"].as_u64().unwrap() > 20,
        "{reseeded:?}"
    );
    // Still one segment: the loss was the provider's, not a decision.
    assert_eq!(w.persona_segments().await, 1);

    // A restart finds a handle that verifies but no session file: seeded from the transcript
    // the new runner rendered (it has no log of its own).
    a.release().await.unwrap();
    drop(a);
    for f in persona_session_files(&w) {
        std::fs::remove_file(f).unwrap();
    }
    let mut b = w.runner(persona("steady"), "host-b");
    let before = w.messages_requests().len();
    w.say("s4", "sierra-four: and the code?").await;
    turn(&mut b).await;
    let first = w.messages_requests()[before].to_string();
    for earlier in ["sierra-one", "4471", "sierra-three", "sierra-four"] {
        assert!(first.contains(earlier), "{earlier} missing from {first}");
    }
    let row = w.rows().await.pop().unwrap();
    assert!(
        row.events
            .iter()
            .any(|e| e["type"] == "reseeded" && e["seed_tokens"].as_u64().is_some_and(|t| t > 20)),
        "{:?}",
        row.events
    );
    assert_eq!(w.persona_segments().await, 1);
    // Nothing was sent twice through all of it.
    w.assert_nothing_sent_twice().await;
    b.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// A variable of a live process's environment.
fn environ(pid: u32, name: &str) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    bytes.split(|b| *b == 0).find_map(|entry| {
        let entry = String::from_utf8_lossy(entry);
        entry.strip_prefix(&format!("{name}=")).map(str::to_string)
    })
}

/// Issue 10: the example configuration keeps `data_dir = "muninn-data"`, relative. Loaded from
/// its own directory with a relative `--config` (`cd dir && muninn serve --config muninn.toml`)
/// and run on the Claude Code CLI, every path the child gets is absolute: it reads the
/// `settings.json` muninn wrote (auto-compaction off), writes its session where muninn looks
/// for it, and a child killed between turns is resumed (`--resume`), not re-seeded. (A relative
/// `CLAUDE_CONFIG_DIR` inside the child's own working directory named another tree.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_configuration_with_a_relative_data_dir_resumes_a_killed_child() {
    let Some(bin) = claude_cli() else { return };
    let (w, mind) = example_world(bin).await;
    let mut r = w.runner(mind, "host-a");
    r.register().await.unwrap();
    w.say("x1", "xray-one: the lantern is lit").await;
    turn(&mut r).await;
    let pid = child_pid(&w, "vala/persona").expect("a live persona child");
    assert_the_child_runs_on_absolute_paths(&w, pid);

    // Killed between turns: the next turn relaunches the child on the same session.
    kill(pid);
    let before = w.messages_requests().len();
    w.say("x2", "xray-two: is it still lit?").await;
    turn(&mut r).await;
    let first = w.messages_requests()[before].to_string();
    assert!(first.contains("xray-one"), "{first}");
    let row = w.rows().await.pop().unwrap();
    let types: Vec<_> = row.events.iter().map(|e| e["type"].clone()).collect();
    assert!(
        types.contains(&serde_json::json!("relaunched")),
        "{types:?}"
    );
    assert!(!types.contains(&serde_json::json!("reseeded")), "{types:?}");
    assert_eq!(w.persona_segments().await, 1);
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// The example configuration, its backend switched to the CLI against a simulator and its key
/// variable to the test's, written to a temporary directory and loaded with a relative
/// `--config` from there: a world on it, and its one Mind.
async fn example_world(bin: std::path::PathBuf) -> (CliWorld, MindConfig) {
    let server = muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        SimConfig {
            frozen_at_ms: Some(T0),
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let example = include_str!("../../../muninn.example.toml");
    assert!(
        example.contains("\ndata_dir = \"muninn-data\"\n"),
        "the example's data_dir"
    );
    let edited = example
        .replace(
            "kind = \"sim\"",
            &format!(
                "kind = \"claude-cli\"\nbase_url = \"{}\"\nclaude_bin = {:?}",
                server.base_url(),
                bin.display().to_string()
            ),
        )
        .replace("\"ANTHROPIC_API_KEY\"", "\"MUNINN_TEST_KEY\"");
    std::fs::write(dir.path().join("muninn.toml"), edited).unwrap();
    let config = Config::load_in(dir.path(), Some(std::path::Path::new("muninn.toml"))).unwrap();
    assert_eq!(config.data_dir, dir.path().join("muninn-data"));
    let env = |k: &str| (k == "MUNINN_TEST_KEY").then(|| "sk-test-example".to_string());
    let factory = BackendFactory::from_config(&config, env).unwrap();
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    let mind = config.minds[0].clone();
    let host = Host::new(store, config, Arc::new(SimClock(server.sim.clone())));
    let w = CliWorld {
        server,
        host,
        factory,
        _dir: dir,
    };
    (w, mind)
}

/// The child's HOME and CLAUDE_CONFIG_DIR are absolute, and the settings muninn wrote are
/// where the child, from its own working directory, reads them.
fn assert_the_child_runs_on_absolute_paths(w: &CliWorld, pid: u32) {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    for name in ["HOME", "CLAUDE_CONFIG_DIR", "TMPDIR"] {
        let value = environ(pid, name).unwrap_or_default();
        assert!(
            std::path::Path::new(&value).is_absolute(),
            "{name}={value} (cwd {})",
            cwd.display()
        );
    }
    let config_dir = cwd.join(environ(pid, "CLAUDE_CONFIG_DIR").unwrap());
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(config_dir.join("settings.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(
        settings["autoCompactEnabled"],
        false,
        "{}",
        config_dir.display()
    );
    assert!(!persona_session_files(w).is_empty());
}
