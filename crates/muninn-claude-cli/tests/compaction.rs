//! Compaction: the CLI never compacts by itself under muninn's configuration (and does, with the
//! switches left on, in the same setup); `compact()` runs `/compact` and reports the compaction
//! request's own usage; session events are queued once each.

use super::*;
use muninn_sim::reply::COMPACTION_MARKERS;
use pretty_assertions::assert_eq;

fn is_compaction(body: &Value) -> bool {
    let last = last_user(body);
    COMPACTION_MARKERS.iter().any(|m| last.contains(m))
}

fn compaction_requests(sim: &SimHandle) -> usize {
    sim.sim
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/messages" && is_compaction(&r.body))
        .count()
}

/// Reported usage that puts the context this many tokens in: past the CLI's auto-compaction
/// threshold for its 1M window (the reference saw 975,028 trigger it), short of the window.
const INFLATED_CONTEXT: u64 = 975_000;

/// Two turns, the second one's reported usage inflated near the window, then a third turn.
/// Returns the session events drained after the third turn.
async fn inflated_run(r: &Rig, config: CliConfig) -> Vec<Value> {
    let mut b = ClaudeCliBackend::new(config);
    b.start(spec("inflate")).await.unwrap();
    let first = ok(b.turn(TurnInput::text("n1: hello")).await);
    let context = first.usage.prompt() + first.usage.output;
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::InflateUsage {
            cache_read_tokens: INFLATED_CONTEXT - context,
        },
        times: 1,
    }]);
    let second = ok(b.turn(TurnInput::text("n2: the big one")).await);
    assert!(
        second.usage.cache_read > 900_000,
        "the CLI saw the inflated usage: {:?}",
        second.usage
    );
    let third = ok(b.turn(TurnInput::text("n3: after")).await);
    assert!(third.text.contains("n3: after"));
    let events = session_events_json(&mut b);
    b.shutdown().await;
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_never_compacts_by_itself_under_muninns_switches() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "a7f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    let events = inflated_run(&r, r.config.clone()).await;
    assert_eq!(compaction_requests(&r.sim), 0);
    assert_eq!(events, Vec::<Value>::new());
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(r.config.config_dir().join("settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        settings,
        json!({"autoCompactEnabled": false, "idleCompaction": false})
    );
}

/// The control: the same run with the switches left on compacts, so the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_switches_left_on_the_same_run_compacts() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "a7f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    let config = CliConfig {
        allow_cli_auto_compaction: true,
        ..r.config.clone()
    };
    let events = inflated_run(&r, config).await;
    assert_eq!(compaction_requests(&r.sim), 1);
    let [event] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(event["type"], json!("compacted"));
    assert_eq!(event["trigger"], json!("auto"));
    assert_eq!(event["outside"], json!(true));
    assert!(
        event["pre_tokens"].as_u64().unwrap() >= INFLATED_CONTEXT - 1_000,
        "{event}"
    );
    // Its cost was told apart from the turn's: the compaction request's usage.
    let expected = recompute(&r.sim.sim.requests())
        .into_iter()
        .find(|(body, _)| is_compaction(body))
        .unwrap()
        .1;
    assert_eq!(event["usage"], serde_json::to_value(expected).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_summarises_in_place_and_events_are_reported_once() {
    let Some(bin) = claude_cli() else { return };
    let session = "a7f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a53";
    let r = rig(bin, session).await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("compact")).await.unwrap();
    for text in ["c1: the ravens", "c2: the middle of it", "c3: the crows"] {
        ok(b.turn(TurnInput::text(text)).await);
    }
    let o = ok(b.compact("keep the ravens").await);

    // The sim saw one compaction request, with the instructions, and the outcome's usage is
    // what the cache model priced for exactly that request.
    assert_eq!(compaction_requests(&r.sim), 1);
    let (body, expected) = recompute(&r.sim.sim.requests())
        .into_iter()
        .find(|(body, _)| is_compaction(body))
        .unwrap();
    assert!(last_user(&body).contains("keep the ravens"));
    assert_eq!(o.usage, expected);
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    assert_eq!(o.stop_reason, "compacted");
    assert!(o.text.contains("Summary"), "{}", o.text);
    let report = b.last_report().unwrap();
    assert_eq!(report.result.as_ref().unwrap()["num_turns"], json!(0));

    // The next request carries the summary instead of the full history.
    // (The CLI merges its `/compact` caveat blocks into this user message, ahead of the text.)
    let after = ok(b.turn(TurnInput::text("c4: after the compaction")).await);
    assert_eq!(after.stop_reason, "end_turn");
    let next = r
        .sim
        .sim
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path == "/v1/messages" && last_user(&r.body).contains("c4: after"))
        .unwrap()
        .body;
    let first_user = next["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == json!("user"))
        .unwrap()
        .to_string();
    assert!(
        first_user.contains("This session is being continued"),
        "{first_user}"
    );
    assert!(!next.to_string().contains("c2: the middle of it"), "{next}");

    // A killed child is relaunched; the session keeps working from the summary.
    let pid = b.last_report().unwrap().pid.unwrap();
    sigkill(pid);
    wait_dead(pid).await;
    ok(b.turn(TurnInput::text("c5: after the kill")).await);
    let sent = user_messages_sent_with(&r.sim, "c5: after the kill");
    assert!(
        sent[0].contains("This session is being continued"),
        "{sent:?}"
    );

    // Each event once, in order, then nothing.
    let events = session_events_json(&mut b);
    assert_eq!(
        events,
        vec![
            json!({"type": "compacted", "session_id": session, "trigger": "manual",
                   "pre_tokens": events[0]["pre_tokens"], "post_tokens": events[0]["post_tokens"],
                   "outside": false, "usage": serde_json::to_value(expected).unwrap()}),
            json!({"type": "relaunched", "session_id": session}),
        ]
    );
    assert!(events[0]["pre_tokens"].as_u64().unwrap() > 0);
    assert_eq!(b.take_session_events(), Vec::new());
    b.shutdown().await;
}

/// A `/compact` that did not compact yet was billed (a CLI stand-in: its summary request
/// answered and paid for, then no `compact_boundary`, only the CLI's own error message) fails
/// saying why, and what it billed is reported as the failed compaction's, not a subagent's.
/// Before, the billed row read "requests billed beside the turn's own (a subagent's)", and the
/// error gave no reason ("the CLI did not compact the session: ").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_that_did_not_compact_is_billed_as_what_it_was() {
    use script::*;
    let dir = tempfile::tempdir().unwrap();
    let cli_error = json!({"type": "assistant", "message": {"id": "cli-own-1",
        "model": "<synthetic>", "content": [{"type": "text",
        "text": "Error during compaction: the summary was cut off"}], "usage": {}},
        "parent_tool_use_id": null});
    let mut not_compacted = result("", 0);
    not_compacted["model_usage_since_last_result"]["claude-opus-5-5"]["inputTokens"] = json!(900);
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n{}read line\n{}while read line; do :; done\n",
            printed(&[
                init(),
                echo("k1"),
                said("answer one", "msg_1", 11),
                result("answer one", 11)
            ]),
            printed(&[init(), cli_error, not_compacted]),
        ),
    )
    .await;
    let r = rig(bin, "a7f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a54").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("not-compacted")).await.unwrap();
    ok(b.turn(TurnInput::text("k1")).await);
    let err = b.compact("keep it").await.unwrap_err();
    assert!(
        matches!(&err, BackendError::CompactionFailed(m) if m.contains("the summary was cut off")),
        "{err:?}"
    );
    let beside = b.take_failed_attempts();
    let inputs: Vec<u64> = beside.iter().map(|a| a.usage.input).collect();
    assert_eq!(inputs, vec![900], "{beside:#?}");
    assert!(
        beside[0].error.contains("/compact") && !beside[0].error.contains("subagent"),
        "{}",
        beside[0].error
    );
    b.shutdown().await;
}
