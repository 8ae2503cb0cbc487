//! Features that meet in the one driver task: a reseed's pending seed against a compaction and
//! against a turn that began but never finished; a fork's event in the session-event queue; an
//! interrupt against a subagent's requests.

use super::*;
use pretty_assertions::assert_eq;

/// The preamble every rendered seed starts with.
const SEED_MARK: &str = "[muninn] The session that held this conversation was lost.";

/// A backend whose start reseeds (a handle that does not verify) with `host_seed` pending, so
/// the next turn's line must carry the seed exactly once.
async fn reseeding(r: &Rig, config: CliConfig, tag: &str, host_seed: &str) -> ClaudeCliBackend {
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec(tag)).await.unwrap();
    let a1 = ok(b.turn(TurnInput::text(format!("{tag} one"))).await).text;
    let handle = b
        .session_handle(&bytes(&items(&[(&format!("{tag} one"), &a1)])))
        .unwrap();
    b.shutdown().await;
    let mut b = ClaudeCliBackend::new(config);
    assert!(b.resume_session(
        &handle,
        &bytes(&items(&[(&format!("{tag} one"), "edited")])),
        false
    ));
    b.set_seed(Some(host_seed.to_string()));
    b.start(spec(tag)).await.unwrap();
    b
}

/// Requests whose body carries `text`, and how often the seed preamble occurs in the last one.
fn seeds_in_request_with(sim: &SimHandle, text: &str) -> usize {
    let body = sim
        .sim
        .requests()
        .into_iter()
        .rev()
        .filter(|r| r.path == "/v1/messages")
        .find(|r| last_user(&r.body).contains(text))
        .unwrap_or_else(|| panic!("no request for {text:?}"))
        .body
        .to_string();
    body.matches(SEED_MARK).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_before_the_first_turn_does_not_drop_a_pending_seed() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "c5ed0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a51").await;
    r.config.binding_key = Some(BindingKey::new(&[6u8; 32]).unwrap());
    let host_seed = "User: cs one\n\nAssistant: HOST-RECORD-CS";
    let mut b = reseeding(&r, r.config.clone(), "cs", host_seed).await;
    // The new session is empty: whatever `/compact` answers, it carried no seed.
    let _ = b.compact("").await;
    ok(b.turn(TurnInput::text("cs two")).await);
    let sent = user_messages_sent_with(&r.sim, "cs two").join("\n");
    assert!(sent.contains("HOST-RECORD-CS"), "the seed was lost: {sent}");
    assert_eq!(seeds_in_request_with(&r.sim, "cs two"), 1);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_whose_turn_began_is_not_sent_again_after_the_child_dies() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin, "c5ed0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a52").await;
    r.config.binding_key = Some(BindingKey::new(&[7u8; 32]).unwrap());
    let host_seed = "User: ks one\n\nAssistant: HOST-RECORD-KS";
    let mut config = r.config.clone();
    // The seeded turn hangs on the API and is given up on: the child is killed after the CLI
    // took the line (and stored it in the new session's transcript).
    // (10 s: the line is taken within a second of the write, even on loaded cores.)
    config.turn_timeout = Duration::from_secs(10);
    let mut b = reseeding(&r, config, "ks", host_seed).await;
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 60_000,
            event_ms: 0,
        },
        times: 1,
    }]);
    let e = b.turn(TurnInput::text("ks two")).await.unwrap_err();
    assert!(e.to_string().contains("no result within"), "{e}");
    ok(b.turn(TurnInput::text("ks three")).await);
    assert_eq!(
        seeds_in_request_with(&r.sim, "ks three"),
        1,
        "{:?}",
        user_messages_sent_with(&r.sim, "ks three")
    );
    b.shutdown().await;
}

/// A turn interrupted while its subagent ran (the CLI's `Agent` tool) names the main thread's
/// request, not the subagent's: the stand-in answers with the main thread's `Agent` call, a
/// message of the subagent's (its line carries the call's `parent_tool_use_id` and its own
/// `request_id`) and the `result` of an interrupted turn. The ledger row of the turn carries
/// its request id; the subagent's requests are billed beside it. Before, the turn named the
/// subagent's request ("req_sub"), whichever line came last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_interrupted_in_its_subagent_names_the_main_threads_request() {
    use script::*;
    let dir = tempfile::tempdir().unwrap();
    let usage = json!({"input_tokens": 9, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "output_tokens": 1});
    let call = json!({"type": "assistant", "parent_tool_use_id": null, "request_id": "req_main",
        "message": {"id": "msg_main", "model": "m", "usage": usage,
            "content": [{"type": "tool_use", "id": "toolu_agent", "name": "Agent",
                "input": {"prompt": "look"}}]}});
    let subagent = json!({"type": "assistant", "parent_tool_use_id": "toolu_agent",
        "request_id": "req_sub", "message": {"id": "msg_sub", "model": "m", "usage": usage,
            "content": [{"type": "text", "text": "the subagent looks"}]}});
    let interrupted = json!({"type": "result", "subtype": "error_during_execution",
        "is_error": true, "terminal_reason": "aborted_streaming", "result": "",
        "usage": {"input_tokens": 9, "output_tokens": 1}});
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n{}while read line; do :; done\n",
            printed(&[init(), echo("a1"), call, subagent, interrupted])
        ),
    )
    .await;
    let r = rig(bin, "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a95").await;
    let mut b = ClaudeCliBackend::new(r.config.clone());
    b.start(spec("subagent-interrupted")).await.unwrap();
    let o = ok(b.turn(TurnInput::text("a1")).await);
    assert_eq!(
        (o.stop_reason.as_str(), o.request_id.as_deref()),
        ("interrupted", Some("req_main"))
    );
    b.shutdown().await;
}
