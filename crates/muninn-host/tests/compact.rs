//! A Persona refresh by compaction (`refresh = "compact"`) on the real Claude Code CLI against
//! the simulator: the host asks the live CLI session to `/compact`, ledgers the compaction
//! request at what the simulator priced it, opens a segment on the summary and continues the
//! same CLI process; when the CLI cannot compact, the host rebuilds instead.

use crate::cli_world::{
    CliWorld, assert_gap_free, batches, child_pid, cli_world, events_of, kinds_and_segments,
    persona, turn,
};
use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_api::wire::LedgerParams;
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;
use muninn_core::tokenize::count;
use muninn_host::config::{MindConfig, RefreshMode};
use muninn_host::http::serve;
use muninn_host::runtime::{COMPACT_REASON, PERSONA_COMPACT_INSTRUCTIONS};
use muninn_sim::reply::COMPACTION_MARKERS;
use muninn_sim::sim::RecordedRequest;
use muninn_store::{OutboxMessage, Role, Segment};
use muninn_testkit::peers::claude_cli;
use muninn_testkit::wire::last_user;
use serde_json::Value;

/// A Persona that refreshes at every boundary once its segment holds `min_segment` turns, and
/// refreshes by compaction.
fn compacting(min_segment: u32) -> MindConfig {
    let mut m = persona("steady");
    m.policy = "rebuild".into();
    m.min_segment = min_segment;
    m.refresh = RefreshMode::Compact;
    m
}

fn is_compaction(body: &Value) -> bool {
    let last = last_user(body);
    COMPACTION_MARKERS.iter().any(|m| last.contains(m))
}

/// The answered `/v1/messages` requests the simulator recorded, in order.
fn answered(w: &CliWorld) -> Vec<RecordedRequest> {
    w.server
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/messages" && r.usage.is_some())
        .collect()
}

/// The (last) answered request whose last user message carries `text`.
fn request_with(w: &CliWorld, text: &str) -> RecordedRequest {
    answered(w)
        .into_iter()
        .rev()
        .find(|r| last_user(&r.body).contains(text))
        .unwrap_or_else(|| panic!("no request for {text:?}"))
}

/// Serves the host's HTTP API on a loopback port: what `muninn ledger` and `muninn status` call.
async fn api(w: &CliWorld) -> (ApiClient, tokio::sync::oneshot::Sender<()>) {
    let token = ApiToken::new("compact-test-token");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(w.host.clone(), token.clone(), listener, async {
        let _ = stopped.await;
    }));
    (ApiClient::new(&addr.to_string(), token).unwrap(), stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_refresh_summarises_the_live_cli_session_and_continues_it() {
    let Some(bin) = claude_cli() else { return };
    let w = cli_world(bin).await;
    let mut r = w.runner(compacting(3), "host-a");
    r.register().await.unwrap();
    let texts = [
        "g1: the ravens nest by the old mill",
        "g2: the middle of it, the ferry timetable",
        "g3: the crows came back at dusk",
    ];
    for (i, text) in texts.iter().enumerate() {
        w.say(&format!("g{i}"), text).await;
        turn(&mut r).await;
        w.server.sim.advance_clock(30_000);
    }
    let pid = child_pid(&w, "vala/persona").expect("a live persona child");
    let outbox_before = w.host.store.unacked_outbox("vala", 100).await.unwrap();
    assert!(answered(&w).iter().all(|q| !is_compaction(&q.body)));

    // The fourth turn: three turns in, the decider refreshes, and the session is compacted.
    w.say("g3", "g4: what did the ravens do?").await;
    turn(&mut r).await;
    let compaction = the_one_compaction(&w);
    let rows = w.rows().await;
    assert_compaction_row(&rows, &compaction);
    let fresh = summary_segment(&w).await;
    let summary = fresh.memory.clone().unwrap();

    // The turn after it went to the same CLI process, its request starting from the summary
    // instead of the whole history.
    assert_eq!(child_pid(&w, "vala/persona"), Some(pid), "no relaunch");
    assert_continued_from_summary(&w, &rows, &compaction, &fresh);

    // One more turn: still the same process and segment.
    w.server.sim.advance_clock(30_000);
    w.say("g5", "g5: and the crows?").await;
    turn(&mut r).await;
    assert_eq!(child_pid(&w, "vala/persona"), Some(pid), "no relaunch");
    let rows = w.rows().await;
    assert_eq!(rows.len(), 6);
    assert_eq!(rows[5].segment, 1);
    assert_eq!(
        Some(rows[5].usage),
        request_with(&w, "g5: and the crows?").usage
    );
    assert!(rows[5].usage.cache_read > 0, "{:#?}", rows[5]);
    assert_eq!(
        answered(&w)
            .iter()
            .filter(|q| is_compaction(&q.body))
            .count(),
        1
    );

    assert_sent_once_and_summary_between_halves(&w, &outbox_before, &summary).await;
    assert_api_shows_the_compaction(&w, &rows).await;
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// The simulator received exactly one compaction request, carrying the host's instructions.
fn the_one_compaction(w: &CliWorld) -> RecordedRequest {
    let compactions: Vec<_> = answered(w)
        .into_iter()
        .filter(|q| is_compaction(&q.body))
        .collect();
    assert_eq!(compactions.len(), 1);
    let compaction = compactions.into_iter().next().unwrap();
    let instructions = PERSONA_COMPACT_INSTRUCTIONS.split(':').next().unwrap();
    assert!(
        last_user(&compaction.body).contains(instructions),
        "{}",
        last_user(&compaction.body)
    );
    compaction
}

/// The compaction's ledger row (the fourth of five): decision `compact`, on the segment it
/// summarised, at the usage the simulator's cache model priced that request at.
fn assert_compaction_row(rows: &[LedgerRow], compaction: &RecordedRequest) {
    assert_eq!(rows.len(), 5, "{rows:#?}");
    let row = &rows[3];
    assert_eq!(row.decision, "compact");
    assert_eq!(row.segment, 0);
    assert_eq!(row.turn, 3);
    assert_eq!(Some(row.usage), compaction.usage, "{row:#?}");
    assert!(row.usage.cache_read > 0, "{row:#?}");
    let price = PriceTable::embedded();
    let model = price.model(&row.model).unwrap();
    assert_eq!(row.cost, model.cost(&row.usage));
    assert_eq!(row.rehydration_tokens, 0, "not a segment start");
    let compacted = events_of(&row.events, "compacted");
    assert_eq!(compacted.len(), 1, "{:?}", row.events);
    assert_eq!(compacted[0]["trigger"], "manual");
    assert_eq!(compacted[0]["outside"], false);
}

/// The compaction ended the first segment and opened a second on its summary: returns it.
async fn summary_segment(w: &CliWorld) -> Segment {
    let mut segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2, "{segments:#?}");
    assert!(segments[0].ended_at_ms.is_some());
    let fresh = segments.pop().unwrap();
    assert_eq!(fresh.reason, COMPACT_REASON);
    let summary = fresh.memory.clone().unwrap();
    assert!(summary.contains("Summary"), "{summary}");
    fresh
}

/// The request after the compaction starts from the summary, not the history; its row is the
/// new segment's first, and the segment's rehydration is what the session continues from.
fn assert_continued_from_summary(
    w: &CliWorld,
    rows: &[LedgerRow],
    compaction: &RecordedRequest,
    fresh: &Segment,
) {
    let after = request_with(w, "g4: what did the ravens do?");
    assert!(after.seq > compaction.seq);
    let first_user = after.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()
        .to_string();
    assert!(
        first_user.contains("This session is being continued"),
        "{first_user}"
    );
    assert!(!after.body.to_string().contains("ferry timetable"));
    let next = &rows[4];
    assert!(next.decision.starts_with("refresh"), "{next:#?}");
    assert_eq!(next.segment, 1);
    assert_eq!(Some(next.usage), after.usage, "{next:#?}");
    // Its record is the system the session was launched with (the head and system under their
    // breakpoints, where a replay caches them); the summary follows in the conversation.
    assert_eq!(next.rehydration_tokens, rows[0].rehydration_tokens);
    assert!(
        rows[..3].iter().all(|r| r.segment == 0) && rows[3].decision == "compact",
        "{rows:#?}"
    );

    // The new segment's rehydration is what the session continues from: the head it was
    // launched with and the summary (the request after it adds only the CLI's wrapper, the
    // new message and what the CLI adds to every request).
    let summary = fresh.memory.as_deref().unwrap();
    let rehydration = fresh.rehydration_tokens as u64;
    assert_eq!(rehydration, rows[0].rehydration_tokens + count(summary));
    let overhead = |prompt: u64, rehydrated: u64| prompt.saturating_sub(rehydrated);
    let cold = overhead(rows[0].usage.prompt(), rows[0].rehydration_tokens);
    let warm = overhead(next.usage.prompt(), rehydration);
    assert!(next.usage.prompt() >= rehydration, "{next:#?}");
    assert!(
        warm <= cold + 600,
        "rehydration {rehydration} against a prompt of {}: {warm} unaccounted vs {cold} at start",
        next.usage.prompt()
    );
}

/// Nothing sent twice (five batches answered), and the transcript is whole: the summary opens
/// the new segment, between the two halves.
async fn assert_sent_once_and_summary_between_halves(
    w: &CliWorld,
    outbox_before: &[OutboxMessage],
    summary: &str,
) {
    w.assert_nothing_sent_twice().await;
    let outbox = w.host.store.unacked_outbox("vala", 100).await.unwrap();
    assert_eq!(batches(&outbox).len(), 5, "{outbox:#?}");
    w.assert_still_sent_once(outbox_before).await;
    let transcript = w.persona_transcript().await;
    assert_eq!(
        kinds_and_segments(&transcript),
        [
            ("delivery", 0),
            ("reply", 0),
            ("delivery", 0),
            ("reply", 0),
            ("delivery", 0),
            ("reply", 0),
            ("memory_flush", 1),
            ("delivery", 1),
            ("reply", 1),
            ("delivery", 1),
            ("reply", 1),
        ],
        "{transcript:#?}"
    );
    assert_gap_free(&transcript);
    assert_eq!(transcript[6].body["memory"], summary);
}

/// What `muninn ledger` and `muninn status` read: the compaction is there, and the spend is
/// every row's cost, the compaction's included.
async fn assert_api_shows_the_compaction(w: &CliWorld, rows: &[LedgerRow]) {
    w.server.sim.advance_clock(1_000);
    let (client, _stop) = api(w).await;
    let ledger = client
        .ledger("vala", &LedgerParams::default())
        .await
        .unwrap();
    let served: Vec<_> = ledger.rows.iter().map(|e| e.row.clone()).collect();
    assert_eq!(served, rows);
    let jsonl = client
        .ledger_jsonl("vala", &LedgerParams::default())
        .await
        .unwrap();
    assert_eq!(jsonl.lines().count(), 6);
    assert!(jsonl.contains("\"decision\":\"compact\""), "{jsonl}");
    let minds = client.minds().await.unwrap().minds;
    let status = minds.iter().find(|m| m.id == "vala").unwrap();
    assert_eq!(
        status.spend.spent_micro_usd,
        rows.iter().map(|r| r.cost.0).sum::<i64>()
    );
    let open = status.segments.persona.as_ref().unwrap();
    assert_eq!((open.number, open.ended_at_ms), (1, None));
    assert_eq!(open.reason, COMPACT_REASON);
}

/// How many times the pinned CLI sends a `/compact` request that the API refuses before giving
/// up on the compaction (measured: with fewer refusals the next attempt's answer is used).
const CLI_COMPACT_ATTEMPTS: u32 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_the_cli_cannot_finish_falls_back_to_a_rebuild() {
    use muninn_sim::sim::{Fault, FaultKind};
    let Some(bin) = claude_cli() else { return };
    let w = cli_world(bin).await;
    // A refresh at the first turn it is allowed.
    let mut r = w.runner(compacting(1), "host-a");
    r.register().await.unwrap();
    w.say("h1", "h1: the ravens nest by the old mill").await;
    turn(&mut r).await;
    let pid = child_pid(&w, "vala/persona").expect("a live persona child");
    let session = w.stored_session_id().await;
    w.server.sim.advance_clock(30_000);
    // Every compaction request the CLI sends is refused, and nothing after them.
    w.server.sim.push_faults([Fault {
        kind: FaultKind::BadRequest {
            message: "compaction refused".into(),
        },
        times: CLI_COMPACT_ATTEMPTS,
    }]);
    let before = answered(&w).len();
    w.say("h2", "h2: and the crows?").await;
    turn(&mut r).await;

    assert_every_compaction_refused(&w);
    // The host rebuilt instead: a fresh segment from the layers, in a new CLI session.
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2, "{segments:#?}");
    assert_eq!(segments[1].reason, "refresh");
    assert!(segments[0].ended_at_ms.is_some());
    assert_ne!(w.stored_session_id().await, session);
    assert_ne!(child_pid(&w, "vala/persona"), Some(pid), "a new process");
    let fresh = answered(&w);
    assert_eq!(fresh.len(), before + 1, "{fresh:#?}");
    let after = request_with(&w, "h2: and the crows?");
    assert!(
        !after.body.to_string().contains("old mill"),
        "{}",
        after.body
    );
    assert!(
        !after
            .body
            .to_string()
            .contains("This session is being continued")
    );
    assert_failure_on_the_rebuilt_row(&w.rows().await, &after, &segments[1]);
    // The transcript: no summary, one delivery and one reply per segment.
    let transcript = w.persona_transcript().await;
    assert_eq!(
        kinds_and_segments(&transcript),
        [("delivery", 0), ("reply", 0), ("delivery", 1), ("reply", 1)]
    );
    w.assert_nothing_sent_twice().await;
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// The CLI tried to compact and failed: it sent its every attempt, and none was answered.
fn assert_every_compaction_refused(w: &CliWorld) {
    let requests: Vec<_> = w
        .server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .collect();
    let refused: Vec<_> = requests.iter().filter(|q| is_compaction(&q.body)).collect();
    assert_eq!(
        refused.len(),
        CLI_COMPACT_ATTEMPTS as usize,
        "{requests:#?}"
    );
    assert!(
        refused
            .iter()
            .all(|q| q.usage.is_none() && q.error.is_some())
    );
}

/// Nothing ledgered for the failed compaction (it cost nothing); its failure is recorded on
/// the rebuilt turn's row, which is priced as the simulator priced it.
fn assert_failure_on_the_rebuilt_row(rows: &[LedgerRow], after: &RecordedRequest, fresh: &Segment) {
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert!(rows.iter().all(|r| r.decision != "compact"));
    let rebuilt = &rows[1];
    assert!(rebuilt.decision.starts_with("refresh"), "{rebuilt:#?}");
    assert_eq!(rebuilt.segment, 1);
    assert_eq!(Some(rebuilt.usage), after.usage);
    assert_eq!(rebuilt.rehydration_tokens, fresh.rehydration_tokens as u64);
    let failed = events_of(&rebuilt.events, "compact_failed");
    assert_eq!(failed.len(), 1, "{:?}", rebuilt.events);
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .contains("compaction refused"),
        "{failed:?}"
    );
}

/// A compact refresh on the Anthropic API backend with the provider's on-demand compaction
/// (`[backend] server_compaction = true`), against the simulator over HTTP: the provider reports
/// the compaction's tokens only in `usage.iterations[]`, and the ledger row counts them — its
/// usage is the simulator's bill for that request and its cost the iterations priced, where a
/// ledger that read the top-level counts (all 0) would have recorded nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_compaction_is_ledgered_at_its_iterations() {
    let w = crate::cli_world::cli_world_with("unused".into(), |c| {
        c.backend.kind = Some(muninn_host::config::BackendKind::Anthropic);
        c.backend.server_compaction = Some(true);
    })
    .await;
    let mut r = w.runner(compacting(3), "host-a");
    r.register().await.unwrap();
    for i in 0..5 {
        w.say(
            &format!("s{i}"),
            &format!("s{i}: the ravens by the mill, part {i}"),
        )
        .await;
        turn(&mut r).await;
        w.server.sim.advance_clock(30_000);
    }
    let compactions: Vec<_> = answered(&w)
        .into_iter()
        .filter(|q| q.body.get("compaction").is_some())
        .collect();
    let rows = w.rows().await;
    assert_eq!(
        compactions.len(),
        1,
        "{rows:#?} {:#?}",
        answered(&w)
            .iter()
            .map(|q| (q.seq, q.usage, q.body.get("compaction").is_some()))
            .collect::<Vec<_>>()
    );
    let rows = w.rows().await;
    let row = rows.iter().find(|r| r.decision == "compact").unwrap();
    let billed = compactions[0].usage.unwrap();
    assert_eq!(row.usage, billed, "{row:#?}");
    assert!(row.usage.output > 0 && row.usage.cache_read > 0, "{row:#?}");
    let price = PriceTable::embedded();
    let model = price.model(&row.model).unwrap();
    assert_eq!(row.cost, model.cost(&billed));
    assert!(row.cost.0 > 0);
    let compacted: Vec<_> = row
        .events
        .iter()
        .filter(|e| e["type"] == "compacted")
        .collect();
    assert_eq!(compacted.len(), 1, "{:?}", row.events);
    // The turn after it sent the signed block back, not the history before it.
    let after = answered(&w)
        .into_iter()
        .find(|q| q.seq > compactions[0].seq)
        .unwrap();
    assert_eq!(
        after.body["messages"][0]["content"][0]["type"],
        serde_json::json!("compaction")
    );
    assert_eq!(
        after.body["messages"].as_array().unwrap().len(),
        2,
        "{}",
        after.body
    );
}
