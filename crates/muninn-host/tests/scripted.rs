//! The runtime against a scripted backend: the in-process simulator for turns, with `run`'s
//! flush stage and `compact`'s outcome scripted, so the Self's flush path and the Persona's
//! compaction are checked without a CLI.

use crate::retry::persona_kinds;
use crate::runtime::{World, ledger, mind, post, world};
use muninn_backend::{
    Backend, BackendError, Capability, FailedAttempt, FlushProtocol, FlushStage, RunOutcome,
    SessionEvent, SessionSpec, TurnInput, TurnOutcome,
};
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use muninn_host::config::MindConfig;
use muninn_host::runtime::{COMPACT_REASON, MindRunner, Step};
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_store::{BriefOrigin, BriefStatus, NewBrief, Role};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the scripted backend saw and will answer.
#[derive(Default)]
struct Script {
    /// The stage `run` reports.
    stage: Option<FlushStage>,
    /// The text `run` answers with (the simulator's reply otherwise).
    answer: Option<String>,
    /// The protocols `run` was given.
    protocols: Vec<FlushProtocol>,
    /// What `compact` returns (`None`: the backend cannot compact).
    compact: Option<TurnOutcome>,
    /// The instructions `compact` was given.
    compacted: Vec<String>,
    /// `start` calls.
    starts: u32,
    /// Session events handed out on the next `take_session_events`.
    events: Vec<SessionEvent>,
    /// An error `run` fails with instead of answering.
    fail_run: Option<BackendError>,
    /// An error the next `turn` fails with instead of answering (taken by it).
    fail_turn: Option<BackendError>,
    /// What the backend says of its sessions and of the last failure: it binds sessions, the
    /// failure left the session as it was, the session kept the failed turn and carries on.
    binds: bool,
    left: bool,
    kept: bool,
    /// Attempts the backend reports billed once it is closed (a CLI child's turn of its own,
    /// finished or cut short while it was stopped).
    billed_at_close: Vec<FailedAttempt>,
    /// Billed attempts not yet taken.
    billed: Vec<FailedAttempt>,
}

struct Scripted {
    inner: SimBackend,
    script: Arc<Mutex<Script>>,
}

impl Backend for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        self.script.lock().unwrap().starts += 1;
        self.inner.start(spec).await
    }

    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        if let Some(e) = self.script.lock().unwrap().fail_turn.take() {
            return Err(e);
        }
        self.inner.turn(input).await
    }

    async fn run(
        &mut self,
        input: TurnInput,
        protocol: &FlushProtocol,
    ) -> Result<RunOutcome, BackendError> {
        if let Some(e) = self.script.lock().unwrap().fail_run.clone() {
            return Err(e);
        }
        let mut outcome = self.inner.turn(input).await?;
        let mut script = self.script.lock().unwrap();
        script.protocols.push(protocol.clone());
        if let Some(answer) = &script.answer {
            outcome.text = answer.clone();
        }
        Ok(RunOutcome {
            outcome,
            flush: script.stage.unwrap_or(FlushStage::NotNeeded),
        })
    }

    async fn compact(&mut self, instructions: &str) -> Result<TurnOutcome, BackendError> {
        let mut script = self.script.lock().unwrap();
        script.compacted.push(instructions.to_string());
        script.compact.clone().ok_or(BackendError::Unsupported {
            capability: Capability::Compact,
        })
    }

    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        std::mem::take(&mut self.script.lock().unwrap().events)
    }

    fn take_failed_attempts(&mut self) -> Vec<FailedAttempt> {
        std::mem::take(&mut self.script.lock().unwrap().billed)
    }

    async fn close(&mut self) {
        let mut script = self.script.lock().unwrap();
        let at_close = std::mem::take(&mut script.billed_at_close);
        script.billed.extend(at_close);
    }

    fn binds_sessions(&self) -> bool {
        self.script.lock().unwrap().binds
    }

    fn failure_left_session(&self) -> bool {
        let script = self.script.lock().unwrap();
        !script.binds || script.left
    }

    fn failure_kept_turn(&self) -> bool {
        self.script.lock().unwrap().kept
    }
}

fn scripted(w: &World, mind: MindConfig) -> (MindRunner<Scripted>, Arc<Mutex<Script>>) {
    let script = Arc::new(Mutex::new(Script::default()));
    let make = || Scripted {
        inner: SimBackend::new(
            InProcess::new(w.sim.clone()),
            w.host.clock.clone(),
            PriceTable::embedded(),
        ),
        script: script.clone(),
    };
    let runner = MindRunner::new(
        w.host.clone(),
        mind,
        "host-a".into(),
        &PriceTable::embedded(),
        make(),
        make(),
    )
    .unwrap();
    (runner, script)
}

/// Enqueues an operator's brief for the Mind `vala`; its sequence number.
pub(crate) async fn brief(w: &World, text: &str) -> i64 {
    w.host
        .store
        .enqueue_brief(
            "vala",
            &NewBrief {
                text: text.into(),
                origin: BriefOrigin::Operator,
                created_at_ms: w.sim.now_ms(),
            },
        )
        .await
        .unwrap()
        .seq
}

/// Steps until the Self ran `seq` (Persona turns for its reports may come first).
async fn run_brief(r: &mut MindRunner<Scripted>, seq: i64) {
    for _ in 0..6 {
        r.woken();
        if r.step().await.unwrap() == (Step::SelfTurn { brief: seq }) {
            return;
        }
    }
    panic!("brief {seq} did not run");
}

const PINNED: &str = r#"{"goal":"map the archive","open_tasks":["shelf 3"],"constraints":["read only"],"done":["shelf 1","shelf 2"],"facts":["shelf 2 is damp"]}"#;

/// A stage the flush protocol can end a Self run at, and what the host makes of it.
struct FlushCase {
    stage: FlushStage,
    /// The stage's name, in the decision and the flush item.
    name: &'static str,
    /// What the run answers.
    answer: &'static str,
    /// The memory is the flush's answer (otherwise the segment's tail).
    from_flush: bool,
    /// The brief's status after the run.
    status: BriefStatus,
}

#[tokio::test]
async fn a_self_run_the_flush_protocol_ended_starts_the_next_brief_from_its_memory() {
    let cases = [
        FlushCase {
            stage: FlushStage::Flushed,
            name: "flushed",
            answer: PINNED,
            from_flush: true,
            status: BriefStatus::Done,
        },
        FlushCase {
            stage: FlushStage::Interrupted,
            name: "interrupted",
            answer: "half way through shelf 3, then",
            from_flush: false,
            status: BriefStatus::Failed,
        },
        FlushCase {
            stage: FlushStage::Terminated,
            name: "terminated",
            answer: PINNED,
            from_flush: true,
            status: BriefStatus::Failed,
        },
    ];
    for case in cases {
        let w = world().await;
        let (mut r, script) = scripted(&w, mind("ceiling_tokens = 150000"));
        r.register().await.unwrap();
        script.lock().unwrap().stage = Some(case.stage);
        script.lock().unwrap().answer = Some(case.answer.into());
        script
            .lock()
            .unwrap()
            .events
            .push(SessionEvent::Relaunched {
                session_id: "s-1".into(),
            });
        let first = brief(&w, "Map the archive.").await;
        run_brief(&mut r, first).await;

        // The run was given the configured protocol: the Mind's ceiling, the default timings.
        let protocol = script.lock().unwrap().protocols[0].clone();
        assert_eq!(protocol.ceiling_tokens, 150_000);
        assert_eq!(protocol.headroom_tokens, 60_000);
        assert_eq!(protocol.trigger_tokens(), 90_000);
        assert_eq!(protocol.grace, Duration::from_secs(900));
        assert_eq!(protocol.escalate_after, Duration::from_secs(120));
        assert_eq!(protocol.exit_drain, Duration::from_secs(2));

        let memory = assert_the_flush_recorded(&w, &case, first).await;
        // The next brief opens a new segment from that memory, without asking for a flush.
        script.lock().unwrap().stage = None;
        script.lock().unwrap().answer = None;
        let second = brief(&w, "Carry on.").await;
        run_brief(&mut r, second).await;
        assert_the_next_segment_starts_from(&w, &case, &memory).await;
    }
}

/// The Self run of brief `first` ended at `case`'s stage: its ledger row says how far the
/// protocol went, with the backend's session events, and the transcript holds the brief, the
/// result and the memory flushed (or the tail), which it returns.
async fn assert_the_flush_recorded(w: &World, case: &FlushCase, first: i64) -> String {
    let name = case.name;
    let rows = ledger(w).await;
    let row = rows.iter().find(|r| r.role == "self").unwrap();
    assert_eq!(row.decision, format!("flush:{name}"), "{row:#?}");
    assert!(row.events.iter().any(|e| e["type"] == "relaunched"));
    let transcript = w
        .host
        .store
        .transcript_tail("vala", Role::SelfRole, 10)
        .await
        .unwrap();
    let kinds: Vec<_> = transcript.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["brief", "notice", "result", "memory_flush"],
        "{name}"
    );
    let flush = &transcript[3].body;
    assert_eq!(flush["stage"], name);
    let memory = flush["memory"].as_str().unwrap().to_string();
    if case.from_flush {
        assert_eq!(flush["from"], format!("flush:{name}"));
        assert!(memory.contains("shelf 2 is damp"));
    } else {
        assert!(
            flush["from"].as_str().unwrap().starts_with("tail"),
            "{flush}"
        );
        assert!(memory.contains("Map the archive.") && memory.contains("half way"));
    }
    let briefs = w.host.store.briefs("vala", None, 10).await.unwrap();
    let done = briefs.iter().find(|b| b.seq == first).unwrap();
    assert_eq!(done.status, case.status, "{name}");
    memory
}

/// The brief after the flush ran in a new segment opened from `memory`, and asked no flush of
/// its own: its request's system carries the memory.
async fn assert_the_next_segment_starts_from(w: &World, case: &FlushCase, memory: &str) {
    let name = case.name;
    let segments = w.host.store.segments("vala", Role::SelfRole).await.unwrap();
    assert_eq!(segments.len(), 2, "{name}");
    assert_eq!(segments[1].reason, "flushed");
    assert_eq!(segments[1].memory.as_deref(), Some(memory));
    let rows = ledger(w).await;
    let self_rows: Vec<_> = rows.iter().filter(|r| r.role == "self").collect();
    assert_eq!(
        self_rows.len(),
        2,
        "no flush request of its own: {self_rows:#?}"
    );
    assert_eq!(self_rows[1].decision, "start:flushed");
    assert_eq!(self_rows[1].segment, 1);
    let system = w.sim.requests().last().unwrap().body["system"].to_string();
    let needle = if case.from_flush {
        "shelf 2 is damp"
    } else {
        "half way"
    };
    assert!(system.contains(needle), "{name}: {system}");
}

#[tokio::test]
async fn a_self_run_below_the_trigger_finishes_as_before() {
    let w = world().await;
    let (mut r, script) = scripted(&w, mind(""));
    r.register().await.unwrap();
    let first = brief(&w, "Count the shelves.").await;
    run_brief(&mut r, first).await;
    let rows = ledger(&w).await;
    let row = rows.iter().find(|r| r.role == "self").unwrap();
    assert_eq!(row.decision, "start");
    let transcript = w
        .host
        .store
        .transcript_tail("vala", Role::SelfRole, 10)
        .await
        .unwrap();
    // The brief, the mark that it was sent, the result.
    assert_eq!(transcript.len(), 3);
    // The default ceiling is the model's window.
    let window = PriceTable::embedded()
        .model(&mind("").model)
        .unwrap()
        .context_window;
    assert_eq!(script.lock().unwrap().protocols[0].ceiling_tokens, window);
    let briefs = w.host.store.briefs("vala", None, 10).await.unwrap();
    assert_eq!(briefs[0].status, BriefStatus::Done);
}

/// Two Persona turns a minute apart under a policy that refreshes at once.
async fn refresh_twice(w: &World, r: &mut MindRunner<Scripted>) {
    post(w, "e1", "#swarm", "ari", "hello vala, the river is high").await;
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    w.sim.advance_clock(60_000);
    post(w, "e2", "#swarm", "bo", "hi all").await;
    r.woken();
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
}

#[tokio::test]
async fn a_compact_refresh_on_a_backend_that_cannot_compact_rebuilds() {
    let w = world().await;
    let (mut r, script) = scripted(
        &w,
        mind("policy = 'rebuild'\nmin_segment = 1\nrefresh = 'compact'"),
    );
    r.register().await.unwrap();
    refresh_twice(&w, &mut r).await;
    assert_eq!(
        script.lock().unwrap().compacted.len(),
        1,
        "compaction tried"
    );
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2);
    assert_eq!(segments[1].reason, "refresh");
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.decision != "compact"));
    assert!(rows[1].decision.starts_with("refresh"));
    // Why the configured compaction did not happen is on the rebuilt turn's row.
    let failed: Vec<_> = rows[1]
        .events
        .iter()
        .filter(|e| e["type"] == "compact_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", rows[1].events);
    assert_eq!(failed[0]["error"], "this backend cannot compact");
    assert_eq!(script.lock().unwrap().starts, 2, "a fresh session");
}

/// What a backend's `compact` answers: the summary "Ari said the river is high." at `usage`.
fn compaction_outcome(usage: Usage) -> TurnOutcome {
    TurnOutcome {
        text: "Ari said the river is high.".into(),
        tool_calls: Vec::new(),
        structured: None,
        stop_reason: "end_turn".into(),
        usage,
        raw_usage: json!({"input_tokens": 40, "cache_read_input_tokens": 9000, "output_tokens": 300}),
        predicted: None,
        miss: None,
        ttl: muninn_backend::TtlCheck {
            expected_5m: 0,
            expected_1h: 0,
            honoured_5m: 0,
            honoured_1h: 0,
        },
        retries: Vec::new(),
        events: Vec::new(),
        request_id: None,
        breakpoints: Vec::new(),
        tool_results: Default::default(),
        provider_miss: None,
    }
}

#[tokio::test]
async fn a_compact_refresh_ledgers_the_compaction_and_continues_the_session_from_the_summary() {
    let w = world().await;
    let (mut r, script) = scripted(
        &w,
        mind("policy = 'rebuild'\nmin_segment = 1\nrefresh = 'compact'"),
    );
    let usage = Usage {
        input: 40,
        cache_write_5m: 0,
        cache_write_1h: 0,
        cache_read: 9_000,
        output: 300,
    };
    script.lock().unwrap().compact = Some(compaction_outcome(usage));
    r.register().await.unwrap();
    refresh_twice(&w, &mut r).await;
    let instructions = script.lock().unwrap().compacted.clone();
    assert_eq!(instructions.len(), 1);
    assert_eq!(
        instructions[0],
        muninn_host::runtime::PERSONA_COMPACT_INSTRUCTIONS
    );
    // The provider session was not restarted: the compaction continues it.
    assert_eq!(script.lock().unwrap().starts, 1);
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    assert_eq!(segments.len(), 2);
    assert_eq!(segments[1].reason, COMPACT_REASON);
    assert_eq!(
        segments[1].memory.as_deref(),
        Some("Ari said the river is high.")
    );
    assert!(segments[0].ended_at_ms.is_some());
    // Three rows: the first turn, the compaction (on the segment it summarised, with its own
    // usage and cost), the turn after it in the new segment.
    let rows = ledger(&w).await;
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let compaction = &rows[1];
    assert_eq!(compaction.decision, "compact");
    assert_eq!(compaction.segment, 0);
    assert_eq!(compaction.usage, usage);
    assert_eq!(
        compaction.cost,
        PriceTable::embedded()
            .model(&mind("").model)
            .unwrap()
            .cost(&usage)
    );
    assert!(compaction.cost.0 > 0);
    assert!(rows[2].decision.starts_with("refresh"), "{:?}", rows[2]);
    assert_eq!(rows[2].segment, 1);
    // The summary is in the transcript at the new segment's start.
    let transcript = w
        .host
        .store
        .transcript_tail("vala", Role::Persona, 10)
        .await
        .unwrap();
    let flush = transcript
        .iter()
        .find(|i| i.kind.as_str() == "memory_flush")
        .unwrap();
    assert_eq!(flush.segment, 1);
    assert_eq!(flush.body["from"], "compact");
}

/// A Self run whose request fails fails its brief, and the Persona is told (posted under the
/// brief's source id, so a retry of the report adds nothing): a failed run is never silent.
#[tokio::test]
async fn a_self_run_that_fails_is_reported_to_the_persona() {
    let w = world().await;
    let (mut r, script) = scripted(&w, mind(""));
    r.register().await.unwrap();
    script.lock().unwrap().fail_run = Some(BackendError::Invalid("the test refuses it".into()));
    let seq = brief(&w, "Map the archive.").await;
    let mut failed = false;
    for _ in 0..6 {
        r.woken();
        if r.step().await.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the run did not fail");
    let b = w
        .host
        .store
        .briefs("vala", Some(BriefStatus::Failed), 10)
        .await
        .unwrap();
    assert!(b.iter().any(|b| b.seq == seq), "{b:#?}");
    let told = w
        .host
        .store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap();
    let reports: Vec<_> = told
        .iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .collect();
    assert_eq!(reports.len(), 1, "{told:#?}");
    assert!(
        reports[0]
            .text
            .starts_with(&format!("Self run {seq} failed: the Self session failed")),
        "{}",
        reports[0].text
    );
}

/// A failed Persona turn on a backend that binds its sessions (the Claude Code CLI), once
/// `kept` says whether the backend reports the session as holding the turn: the step fails,
/// and the retry is answered. Returns the Persona's segments, the backend's starts since the
/// first turn and the Persona's transcript kinds.
async fn fail_a_bound_turn(kept: bool) -> (usize, u32, Vec<String>) {
    let w = world().await;
    let (mut r, script) = scripted(&w, mind(""));
    script.lock().unwrap().binds = true;
    r.register().await.unwrap();
    post(&w, "m1", "#swarm", "@ann:hs", "first").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let starts = script.lock().unwrap().starts;
    {
        let mut s = script.lock().unwrap();
        // A transport error, and nothing from the backend on what became of its session (a
        // CLI driver that stopped leaves no report) unless `kept`.
        s.fail_turn = Some(BackendError::Transport(
            "the claude-cli driver has stopped".into(),
        ));
        s.kept = kept;
    }
    post(&w, "m2", "#swarm", "@ann:hs", "second").await;
    r.woken();
    assert!(r.step().await.is_err(), "the turn did not fail");
    script.lock().unwrap().kept = false;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let segments = w.host.store.segments("vala", Role::Persona).await.unwrap();
    let started = script.lock().unwrap().starts - starts;
    (segments.len(), started, persona_kinds(&w.host).await)
}

/// A transport failure the backend says nothing more of (`failure_left_session` and
/// `failure_kept_turn` both false: a Claude Code driver that stopped and sent no report) may
/// have left the provider's session anywhere, so the host rebuilds it in a new segment and
/// records the delivery there again. Before `failure_kept_turn`, any transport error on such a
/// backend was taken as a relaunched child carrying on, and the session was resumed. A failure
/// the backend says the session kept carries on in the same segment, the delivery recorded
/// again beside the copy the session holds.
#[tokio::test]
async fn a_transport_failure_the_backend_says_nothing_of_rebuilds_the_session() {
    // (kept by the backend, (segments, new starts) after the retry)
    for (kept, expected) in [(false, (2, 1)), (true, (1, 0))] {
        let (segments, started, kinds) = fail_a_bound_turn(kept).await;
        assert_eq!((segments, started), expected, "{kinds:?}");
        assert_eq!(
            kinds,
            [
                "delivery",
                "reply",
                "delivery",
                "attempt_failed",
                "delivery",
                "reply"
            ]
        );
    }
}

/// What a backend bills as it is closed at the host's shutdown (the Claude Code CLI driver
/// reads a stopped child's stdout to its end, and reports a turn the CLI started by itself
/// that finished, or was cut short, then) is a ledger row, committed before the lease is let
/// go. Before, the host closed its backends and released the lease without taking their
/// billed attempts: the driver's warning was the only trace of what the provider billed.
#[tokio::test]
async fn what_a_backend_bills_as_it_is_closed_is_ledgered_before_the_lease_is_released() {
    let w = world().await;
    let (mut r, script) = scripted(&w, mind(""));
    r.register().await.unwrap();
    post(&w, "m1", "#swarm", "@ann:hs", "first").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let usage = Usage {
        input: 700,
        cache_write_5m: 0,
        cache_write_1h: 0,
        cache_read: 12_000,
        output: 1,
    };
    // Both sessions are scripted from one script: the first to close bills it.
    script.lock().unwrap().billed_at_close.push(FailedAttempt {
        usage,
        raw_usage: json!([{"input_tokens": 700, "cache_read_input_tokens": 12_000, "output_tokens": 1}]),
        predicted: None,
        request_id: Some("req_own".into()),
        error: "a turn the Claude Code CLI started by itself, still running when its child was stopped".into(),
        breakpoints: Vec::new(),
        cleared: false,
    });
    r.close().await;
    r.release().await.unwrap();
    let rows = ledger(&w).await;
    let decisions: Vec<&str> = rows.iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(decisions.len(), 2, "{rows:#?}");
    assert_eq!(decisions[1], "attempt_failed", "{rows:#?}");
    let closed = &rows[1];
    assert_eq!(closed.usage, usage);
    assert_eq!(
        closed.cost,
        PriceTable::embedded()
            .model(&mind("").model)
            .unwrap()
            .cost(&usage)
    );
    assert!(
        closed.events.iter().any(|e| e["request_id"] == "req_own"),
        "{:?}",
        closed.events
    );
    assert!(script.lock().unwrap().billed.is_empty(), "taken once");
}

/// What a Claude Code CLI bills beside the turns it answers (a turn it started by itself),
/// reported between two steps.
fn billed_beside_a_turn() -> FailedAttempt {
    FailedAttempt {
        usage: Usage {
            input: 300,
            cache_write_5m: 0,
            cache_write_1h: 0,
            cache_read: 9_000,
            output: 2,
        },
        raw_usage: json!([{"input_tokens": 300, "cache_read_input_tokens": 9_000, "output_tokens": 2}]),
        predicted: None,
        request_id: Some("req_beside".into()),
        error: "a turn the Claude Code CLI started by itself".into(),
        breakpoints: Vec::new(),
        cleared: false,
    }
}

/// A runner whose Persona answered one batch, then held its answer to the next (the store
/// refused its commit a moment) while the backend reported an attempt billed beside it; the
/// next step's commit of the held answer is refused for good, so it is abandoned under the
/// lease still held, and the billed attempt's row, committed as the failed step ends, is
/// refused `refusals` times.
async fn an_answer_abandoned_with_a_cut_row_behind_it(
    refusals: u32,
) -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<Scripted>,
) {
    let (w, faults) = crate::runtime::faulty_world("").await;
    let (mut r, script) = scripted(&w, mind("turns_per_wake = 5"));
    r.register().await.unwrap();
    post(&w, "m1", "#swarm", "@ann:hs", "first").await;
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    w.sim.advance_clock(1_000);
    post(&w, "m2", "#swarm", "@ann:hs", "second").await;
    faults.fail_commits(1);
    r.woken();
    assert!(r.step().await.is_err(), "the answer is held");
    script.lock().unwrap().billed.push(billed_beside_a_turn());
    faults.fail_commits_for_good(1);
    faults.fail_commits(refusals);
    w.sim.advance_clock(1_000);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("never take"), "{e}");
    (w, faults, r)
}

/// An answer abandoned under the lease still held rebuilds the Persona's accounting from the
/// ledger; the cut row that waits under the same lease (refused a moment) is kept and committed
/// before the next answer, once: the ledger is the provider's bill. Before, the rebuild
/// gave it up as if the lease had changed ("a failed attempt's row was abandoned uncommitted:
/// the lease changed before a record carried it"), a row this lease could still commit.
#[tokio::test]
async fn a_cut_row_waiting_when_an_answer_is_abandoned_under_the_same_lease_is_kept() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();
    let (w, faults, mut r) = an_answer_abandoned_with_a_cut_row_behind_it(2).await;
    w.sim.advance_clock(1_000);
    r.woken();
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    assert_eq!(
        faults.refused(),
        4,
        "held, abandoned, and the row refused twice"
    );
    let lost = crate::cut_rows::errors_starting(&logs, "a failed attempt's row was abandoned");
    assert!(lost.is_empty(), "given up under the same lease: {lost:?}");
    let rows = ledger(&w).await;
    let decisions: Vec<&str> = rows.iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert_eq!(decisions[1], "attempt_failed", "{decisions:?}");
    assert_eq!(rows[1].usage, billed_beside_a_turn().usage);
}

/// The same row when the lease changes before it is committed (another host answered the batch
/// meanwhile): no lease this runner can take commits it, so it is given up, at error in the
/// log, saying the lease changed.
#[tokio::test]
async fn a_cut_row_waiting_at_a_new_lease_after_an_abandoned_answer_is_given_up() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();
    let (w, _faults, mut r) = an_answer_abandoned_with_a_cut_row_behind_it(1).await;
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1);
    let mut b = crate::runtime::runner(&w, mind("turns_per_wake = 5"), "host-b");
    assert!(matches!(b.step().await.unwrap(), Step::PersonaTurn { .. }));
    b.release().await.unwrap();
    r.woken();
    r.step().await.unwrap();
    let lost = crate::cut_rows::errors_starting(&logs, "a failed attempt's row was abandoned");
    assert_eq!(lost.len(), 1, "{:?}", logs.events());
    let message = lost[0]["fields"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("lease changed"), "{message}");
    let decisions: Vec<String> = ledger(&w).await.into_iter().map(|r| r.decision).collect();
    assert!(
        !decisions.iter().any(|d| d == "attempt_failed"),
        "{decisions:?}"
    );
}

/// A backend that fails every attempt for a long while and reports a session event with each
/// (a Claude Code child relaunched after every death): the events wait for the next ledger
/// row, at most `MAX_PENDING_EVENTS` (64) of them — the first, the newest, and how many were
/// dropped between — not one per retry of the whole outage on that one row.
#[tokio::test]
async fn session_events_of_a_long_outage_reach_the_next_row_bounded() {
    let w = world().await;
    let (mut r, script) = scripted(&w, mind(""));
    r.register().await.unwrap();
    post(&w, "m1", "#swarm", "@ann:hs", "first").await;
    for i in 0..200 {
        {
            let mut s = script.lock().unwrap();
            let session_id = format!("s-{i}");
            s.events.push(SessionEvent::Relaunched { session_id });
            s.fail_turn = Some(BackendError::Transport("the claude-cli child died".into()));
        }
        r.woken();
        assert!(r.step().await.is_err(), "attempt {i} did not fail");
    }
    assert!(matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }));
    let events = ledger(&w).await.pop().unwrap().events;
    let relaunched: Vec<&str> = (events.iter())
        .filter_map(|e| e["session_id"].as_str())
        .collect();
    assert_eq!(
        relaunched.len(),
        64,
        "{} events on one row",
        relaunched.len()
    );
    assert_eq!((relaunched[0], relaunched[63]), ("s-0", "s-199"));
    let dropped = events
        .iter()
        .find_map(|e| e["session_events_dropped"].as_u64());
    assert_eq!(dropped, Some(136));
}
