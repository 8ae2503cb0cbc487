//! A Self brief, as a pipeline: plan at the task boundary → (flush and) start a segment if
//! planned → record the brief → run it under the flush protocol → build the record → commit,
//! then report back to the Persona.

use super::accounting::Asked;
use super::attempt::{ASKED, Attempt, HeldBrief, MARKS, UNASKED, Unsent};
use super::pending::{SelfRun, TailMemory, Then, Uncommitted};
use super::persona::{Plan, outcome_text};
use super::prompts::{SELF_FLUSH_PROMPT, SELF_RUN_FLUSH_MESSAGE};
use super::tool_loop::{Driven, StopCause};
use super::tools::WorkspaceTools;
use super::{MindRunner, RuntimeError, SELF_ROOM, Step};
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, BackendError, FlushProtocol, FlushStage, RunOutcome, TurnInput};
use muninn_core::decide::Event;
use muninn_core::ledger::{ForcedStart, LedgerRow, RowKind};
use muninn_core::tokenize::count;
use muninn_store::{
    Brief, BriefStatus, FencingToken, NewDelivery, NewTranscriptItem, Role, TranscriptKind,
    TurnRecord,
};
use serde_json::{Value, json};

/// How much of a Self result reaches the Persona.
pub(super) const RESULT_EXCERPT_CHARS: usize = 2_000;

/// The transcript note of a memory flush: the memory, where it came from and, when the flush
/// failed, why — the backend's error (the provider's message, which never carries a
/// credential), bounded like the one `/readyz` repeats.
fn flush_note(memory: &str, from: &str, failed: Option<&BackendError>) -> Value {
    let mut note = json!({"memory": memory, "from": from});
    if let Some(e) = failed {
        use crate::telemetry::health::{ERROR_CHARS, truncate};
        note["error"] = json!(truncate(&e.to_string(), ERROR_CHARS));
    }
    note
}

impl<B: Backend> MindRunner<B> {
    /// The flush protocol of this Mind's Self runs: the Mind's ceiling (else the model's
    /// window) and the configured headroom and timings.
    pub fn flush_protocol(&self) -> FlushProtocol {
        let session = self
            .mind
            .self_session
            .resolve(&self.host.config.backend.self_session);
        FlushProtocol {
            ceiling_tokens: self
                .mind
                .ceiling_tokens
                .unwrap_or(self.price.context_window),
            headroom_tokens: session.flush_headroom_tokens,
            message: SELF_RUN_FLUSH_MESSAGE.to_string(),
            grace: session.flush_grace,
            escalate_after: session.flush_escalate_after,
            exit_drain: session.flush_exit_drain,
        }
    }

    /// One Self brief, as `plan` (its [`MindRunner::plan_self`], priced against the cap before
    /// the brief was claimed) says.
    pub(super) async fn self_turn(
        &mut self,
        token: FencingToken,
        now: i64,
        brief: Brief,
        plan: Plan,
    ) -> Result<Step, RuntimeError> {
        let tools = self.brief_tools(token, &brief, now).await?;
        self.enter_self_segment(&plan, token, now).await?;
        self.send_brief(token, now, tools, brief, plan, None).await
    }

    /// A brief this runner holds (`attempt.rs`): one whose append was not confirmed is run on
    /// the session it was rendered on, its append finished under its key (the store adds
    /// nothing if it landed); one found recorded and never answered, or whose session was given
    /// up since, is planned and recorded afresh — its old item, never sent, stays unanswered in
    /// a segment no session continues. Until an item of it is confirmed recorded, what this
    /// runner knows of its last one ([`HeldBrief::unsent_behind_its_mark`]) stays with it.
    pub(super) async fn run_held_brief(
        &mut self,
        token: FencingToken,
        now: i64,
        held: HeldBrief,
    ) -> Result<Step, RuntimeError> {
        // What a new item of the brief leaves behind: what this runner knows of its last one.
        let earlier = held.unsent_behind_its_mark();
        match held.attempt {
            Some((attempt, plan))
                if self.selfs.live() && self.selfs.segment == Some(attempt.segment) =>
            {
                let tools = self.brief_tools(token, &held.brief, now).await?;
                let (brief, unsent) = (held.brief, held.unsent);
                self.run_brief(token, now, tools, brief, (attempt, plan), unsent)
                    .await
            }
            attempt => {
                let plan = self.plan_self(&held.brief, now);
                // Failed, it is finished: not held.
                let tools = self.brief_tools(token, &held.brief, now).await?;
                // Still held when the flush or the new segment fails (a store in trouble): only
                // this runner knows the brief was never sent, and one let go here would be
                // failed by the recovery as a run that may have acted (`stranded.rs`).
                if let Err(e) = self.enter_self_segment(&plan, token, now).await {
                    self.held_brief = Some(HeldBrief {
                        brief: held.brief,
                        attempt,
                        unsent: earlier,
                    });
                    return Err(e);
                }
                self.send_brief(token, now, tools, held.brief, plan, earlier)
                    .await
            }
        }
    }

    /// The segment a brief runs in, as `plan` says: a new one (flushed into first), or the open
    /// one.
    async fn enter_self_segment(
        &mut self,
        plan: &Plan,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        if plan.refreshes() {
            self.start_self_segment(plan, token, now).await
        } else {
            // An idle flush the segment outlived: its memory is stale now.
            self.selfs.flushed = None;
            Ok(())
        }
    }

    /// Renders the brief on the segment entered, and records and runs it ([`Self::run_brief`];
    /// `unsent`: an earlier item of it this runner never sent, [`HeldBrief::unsent`]).
    async fn send_brief(
        &mut self,
        token: FencingToken,
        now: i64,
        tools: Option<WorkspaceTools>,
        brief: Brief,
        plan: Plan,
        unsent: Option<Unsent>,
    ) -> Result<Step, RuntimeError> {
        let segment = self.selfs.segment.unwrap_or(0);
        let text = format!(
            "Brief {} (from the {}):\n{}",
            brief.seq,
            brief.origin.as_str(),
            brief.text
        );
        let body = json!({"brief": brief.seq, "text": text, MARKS: true});
        let key = self.append_key(TranscriptKind::Brief, &brief.seq.to_string(), segment);
        let attempt = Attempt::brief(brief.seq, segment, &text, key, body);
        // A retry runs on the segment opened here: it is not opened (nor flushed into) again.
        let plan = Plan {
            opened: plan.opened || plan.refreshes(),
            ..plan
        };
        self.run_brief(token, now, tools, brief, (attempt, plan), unsent)
            .await
    }

    /// The brief's workspace tools. A workspace that cannot be opened (removed since the
    /// configuration was checked) fails the brief, saying why, rather than leaving it claimed.
    async fn brief_tools(
        &self,
        token: FencingToken,
        brief: &Brief,
        now: i64,
    ) -> Result<Option<WorkspaceTools>, RuntimeError> {
        match self.self_tools() {
            Ok(tools) => Ok(tools),
            Err(e) => {
                self.fail_brief(token, brief.seq, "failed", &e.to_string(), now)
                    .await?;
                Err(e)
            }
        }
    }

    /// Records the brief once and marks it asked (`attempt.rs`), then runs it. An append that
    /// fails leaves the brief held, for the next step to finish ([`Self::run_held_brief`]), with
    /// `unsent` ([`HeldBrief::unsent`]); once the append is confirmed, the brief is sent as
    /// rendered and nothing of it is held.
    async fn run_brief(
        &mut self,
        token: FencingToken,
        now: i64,
        tools: Option<WorkspaceTools>,
        brief: Brief,
        (mut attempt, plan): (Attempt, Plan),
        unsent: Option<Unsent>,
    ) -> Result<Step, RuntimeError> {
        let recorded = match self.record_once(&mut attempt, token, now).await {
            Ok(()) => self.mark_asked(&mut attempt, token, now).await,
            Err(e) => Err(e),
        };
        if let Err(e) = recorded {
            self.held_brief = Some(HeldBrief {
                brief,
                attempt: Some((attempt, plan)),
                unsent,
            });
            return Err(e);
        }
        let (segment, text) = (attempt.segment, attempt.text);
        if let Some(r) = self.selfs.renderer.as_mut() {
            // As sent: the renderer holds what the provider's session holds.
            r.push_user(&text);
        }
        // With a workspace, the host drives the run as a tool loop (`tool_loop.rs`); else the
        // backend runs it (one request, or the CLI's own loop under the flush protocol).
        let driven = match tools {
            Some(tools) => {
                self.run_tool_loop(&brief, text, &plan, token, tools)
                    .await?
            }
            None => Driven::single(self.run_self(&brief, text, token, now).await?),
        };
        self.finish_self_run(token, &brief, segment, &plan, driven, now)
            .await
    }

    /// A run's end: its ledger row and result in one record (with the memory the flush protocol
    /// left, if it ended the run), the session bound to it, and the result reported back. A
    /// tool loop wrote its last row already (`driven.row`), or — stopped by a cap — recorded its
    /// last reply with it, and leaves only the result.
    pub(super) async fn finish_self_run(
        &mut self,
        token: FencingToken,
        brief: &Brief,
        segment: i64,
        plan: &Plan,
        driven: Driven,
        now: i64,
    ) -> Result<Step, RuntimeError> {
        let Driven { run, row, stopped } = driven;
        let stage = flush_stage_name(run.flush);
        let rows = match (row, &stopped) {
            (Some(rows), _) => rows,
            // The last reply's row is recorded already; the brief's record carries the rows of
            // failed attempts still waiting for one.
            (None, Some(_)) => self.take_unledgered(Role::SelfRole, now, RowKind::Request),
            (None, None) => {
                let label = match run.flush {
                    FlushStage::NotNeeded => self_label(plan),
                    _ => format!("flush:{stage}"),
                };
                self.answered(
                    Role::SelfRole,
                    &run.outcome,
                    now,
                    plan.asked(RowKind::Request, &label, true),
                )
            }
        };
        let result = match &stopped {
            Some((_, why)) => format!("stopped: {why}. Last reply: {}", outcome_text(&run.outcome)),
            None => outcome_text(&run.outcome),
        };
        if stopped.is_none()
            && let Some(r) = self.selfs.renderer.as_mut()
        {
            r.reply(&result);
        }
        let (memory, tail) = match (run.flush, &stopped) {
            (FlushStage::NotNeeded, _) | (_, Some(_)) => (None, None),
            _ => run_memory(segment, &run, &result),
        };
        let (status, verb) = run_report(stopped.as_ref().map(|(cause, _)| *cause), run.flush);
        let report = RunReport {
            result: &result,
            status,
            verb,
        };
        let record = self_record(
            &self.mind.id,
            brief,
            segment,
            report,
            rows,
            &memory,
            stage,
            now,
        );
        // Then the session is bound (or the next segment starts from the flushed memory) and
        // the result reported back; a failed commit is held and committed first at the next
        // step (`pending.rs`).
        let then = Then::SelfRun(Box::new(SelfRun {
            brief: brief.clone(),
            flush: run.flush,
            stopped: stopped.map(|(cause, _)| cause),
            result,
            memory: memory.map(|(memory, _)| memory),
        }));
        let finish = Uncommitted::new(token, Role::SelfRole, record, now, then).with_tail(tail);
        let step = self.settle(finish).await?;
        Ok(step.unwrap_or(Step::SelfTurn { brief: brief.seq }))
    }

    /// A brief's start is a task boundary: the decider may refresh here. A run the flush
    /// protocol ended starts the next segment from its memory without asking.
    pub(super) fn plan_self(&self, brief: &Brief, now: i64) -> Plan {
        let delta = count(&brief.text);
        if self.selfs.flushed.as_ref().is_some_and(|f| f.forced) {
            return Plan {
                decision: None,
                event: Event::Arrival {
                    boundary: true,
                    delta,
                },
                state: "cold",
                bounds: self.selfs.acc.bounds(),
                forced: Some(("flushed", ForcedStart::Flushed)),
                tool_uses: 0,
                opened: false,
            };
        }
        self.plan(
            Role::SelfRole,
            delta,
            self.mind.refresh_at_task_boundaries,
            0,
            now,
        )
    }

    /// The memory a new Self segment starts from, and the segment opened on it: a flush's
    /// (the protocol's, or the idle one the decider chose), a flush asked for now, or — after a
    /// lost session — the last flush left in the transcript, else the latest briefs' results.
    async fn start_self_segment(
        &mut self,
        plan: &Plan,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let flushed = self.selfs.flushed.take();
        let (memory, reason) = if let Some(flushed) = flushed {
            (flushed.memory, "flushed")
        } else if self.selfs.live() {
            let asked = plan.asked(RowKind::Flush, "flush", true);
            let (memory, failed) = self.flush_self(token, now, asked).await?;
            if let Some(e) = failed {
                // The brief goes on from the tail; the failure is not the step's.
                tracing::warn!(mind = %self.mind.id, role = "self", error = %e, "the memory flush failed; the new segment starts from the tail");
            }
            (memory, "task boundary")
        } else {
            self.lost_self_memory().await?
        };
        // A start the decider did not choose says why it began — the first segment, a lost
        // session rebuilt, a run's flush — as the Persona's does (status and the dashboard show
        // it): where its memory came from is not why it began.
        let reason = plan.forced.map_or(reason, |(why, _)| why);
        let forced = plan.forced.map(|(_, forced)| forced);
        self.open_segment(Role::SelfRole, token, now, memory, reason, forced)
            .await
    }

    /// A host that stopped after a run flushed left the flush as the segment's last item: it is
    /// the memory to start from; otherwise the latest briefs' results.
    async fn lost_self_memory(&self) -> Result<(String, &'static str), RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 1)
            .await?;
        Ok(
            match tail
                .last()
                .filter(|i| i.kind == TranscriptKind::MemoryFlush)
            {
                Some(item) => (
                    item.body["memory"].as_str().unwrap_or_default().to_string(),
                    "flushed",
                ),
                None => (self.self_memory_from_briefs().await?, "task boundary"),
            },
        )
    }

    /// Runs the brief under the flush protocol; a failed run fails the brief and breaks the
    /// session (the next brief rebuilds it).
    async fn run_self(
        &mut self,
        brief: &Brief,
        text: String,
        token: FencingToken,
        now: i64,
    ) -> Result<RunOutcome, RuntimeError> {
        let protocol = self.flush_protocol();
        match self
            .selfs
            .backend
            .run(TurnInput::text(text), &protocol)
            .await
        {
            Ok(run) => Ok(run),
            Err(e) => Err(self.self_run_failed(brief, token, e, now, true).await),
        }
    }

    /// A failed request fails the brief, tells the Persona, and breaks the session (the next
    /// brief rebuilds it). Returns the error to give up the step with. `boundary`: whether the
    /// request began the brief's run (its cut attempts' rows say so, `failed.rs`).
    pub(super) async fn self_run_failed(
        &mut self,
        brief: &Brief,
        token: FencingToken,
        e: BackendError,
        now: i64,
        boundary: bool,
    ) -> RuntimeError {
        self.selfs.mark_broken(now);
        self.selfs.collect_events();
        // Fenced: the brief is the next holder's to recover, and the lease is let go at once.
        let cut = self.ledger_cut_now(Role::SelfRole, now, (RowKind::Request, boundary));
        if let Err(fenced) = cut.await {
            return fenced;
        }
        let message = format!("the Self session failed: {e}");
        if let Err(store) = self
            .fail_brief(token, brief.seq, "failed", &message, now)
            .await
        {
            return store;
        }
        e.into()
    }

    /// Finishes the brief and posts its result to the Persona as a delivery (the brief's seq
    /// makes it idempotent).
    pub(super) async fn report_back(
        &self,
        token: FencingToken,
        brief: &Brief,
        flush: FlushStage,
        stopped: Option<StopCause>,
        result: &str,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let (status, verb) = run_report(stopped, flush);
        self.report_and_finish(token, brief.seq, status, verb, result, now)
            .await
    }

    /// Posts a Self run's report to the Persona as a delivery. Its source id is the brief's, so
    /// posting it again (a retry, or a recovery after a crash between the post and the brief's
    /// end) adds nothing.
    pub(super) async fn post_self_report(
        &self,
        seq: i64,
        verb: &str,
        result: &str,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let excerpt: String = result.chars().take(RESULT_EXCERPT_CHARS).collect();
        self.host
            .store
            .post_delivery(
                &self.mind.id,
                &NewDelivery {
                    room: SELF_ROOM.to_string(),
                    sender: "self".to_string(),
                    is_direct: true,
                    to_you: true,
                    text: format!("Self run {seq} {verb}: {excerpt}"),
                    source_id: format!("self-brief-{seq}"),
                    received_at_ms: now,
                    context: Vec::new(),
                },
            )
            .await?;
        self.host.signals.wake_local(&self.mind.id);
        self.host.signals.outbox.notify_waiters();
        Ok(())
    }

    /// Asks the Self to flush its memory — at a refresh, or while idle (the decider chose to
    /// flush before the cache expires; `asked` says which) — and records it. Falls back to the
    /// segment's tail verbatim when a pinned item is missing or the backend failed (that
    /// failure is returned beside the memory, for the caller to report it).
    /// The renderer takes the exchange as the provider's session did, at a task boundary too:
    /// the segment may continue after an idle flush, and after a boundary flush whose commit was
    /// held (the step failed before the new segment opened, and the next brief's decider may
    /// append); a segment opened from the memory replaces the renderer anyway.
    pub(super) async fn flush_self(
        &mut self,
        token: FencingToken,
        now: i64,
        asked: Asked<'_>,
    ) -> Result<(String, Option<BackendError>), RuntimeError> {
        let idle = asked.event == Some(Event::Expiring);
        let segment = self.selfs.segment.unwrap_or(0);
        let outcome = self
            .selfs
            .backend
            .turn(TurnInput::text(SELF_FLUSH_PROMPT))
            .await;
        let mut failed = None;
        // `None`: the segment's tail, read when the flush is committed (`pending.rs`).
        let (memory, how, ledger) = match outcome {
            Ok(o) => {
                let rows = self.answered(Role::SelfRole, &o, now, asked);
                if let Some(r) = self.selfs.renderer.as_mut() {
                    r.push_user(SELF_FLUSH_PROMPT);
                    r.reply(&outcome_text(&o));
                }
                match pinned_memory(&o.text) {
                    Some(memory) => (Some(memory), "flush", rows),
                    None => (None, "tail (the flush missed a pinned item)", rows),
                }
            }
            Err(e) => {
                self.selfs.collect_events();
                failed = Some(e);
                // A flush cut after the provider read it was billed: its row is this record's.
                let rows = self.take_unledgered(Role::SelfRole, now, RowKind::Flush);
                (None, "tail (the flush failed)", rows)
            }
        };
        let record = TurnRecord {
            transcript: vec![self_item(
                segment,
                now,
                TranscriptKind::MemoryFlush,
                flush_note(memory.as_deref().unwrap_or_default(), how, failed.as_ref()),
            )],
            ledger,
            ..TurnRecord::default()
        };
        let tail = memory.is_none().then_some(TailMemory {
            segment,
            after: None,
        });
        // An idle flush lets the tail go and leaves its memory for the next brief; one at a
        // task boundary opens the segment from it at once. A failed commit is held and
        // committed first at the next step (`pending.rs`).
        let then = Then::SelfFlush {
            memory: memory.unwrap_or_default(),
            idle,
        };
        let flush = Uncommitted::new(token, Role::SelfRole, record, now, then).with_tail(tail);
        self.host
            .crash_points
            .reached(CrashPoint::SelfFlushAnswered);
        self.settle(flush).await?;
        // The memory as committed; one at a task boundary is the new segment's at once.
        let recorded = if idle {
            self.selfs.flushed.clone()
        } else {
            self.selfs.flushed.take()
        };
        Ok((recorded.map(|f| f.memory).unwrap_or_default(), failed))
    }

    pub(super) async fn self_tail(&self, segment: i64) -> Result<String, RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 6)
            .await?;
        Ok(tail
            .iter()
            // A brief's ask mark, or its taking back (`attempt.rs`), says nothing of the work.
            .filter(|i| {
                i.segment == segment && i.body.get(ASKED).is_none() && i.body.get(UNASKED).is_none()
            })
            .map(|i| {
                i.body
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    async fn self_memory_from_briefs(&self) -> Result<String, RuntimeError> {
        let done = self
            .host
            .store
            .briefs(&self.mind.id, Some(BriefStatus::Done), 5)
            .await?;
        Ok(done
            .iter()
            .map(|b| {
                format!(
                    "- brief {}: {} → {}",
                    b.seq,
                    b.text,
                    b.result.clone().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

/// The ledger's text for a Self run's decision: `start` for a segment started without asking
/// (`start:flushed` after the flush protocol), else the decider's.
pub(super) fn self_label(plan: &Plan) -> String {
    match (&plan.decision, plan.forced) {
        (None, Some((reason @ "flushed", _))) => format!("start:{reason}"),
        (None, _) => "start".to_string(),
        (Some(_), _) => plan.label(),
    }
}

/// What the Persona is told of a run a failed store stopped after its last answer was saved.
pub(super) const STOPPED_BY_THE_STORE: &str =
    "was stopped when the store failed (its last answer is saved)";

/// How a run's end is reported: a run the flush protocol ended has flushed (or failed to); one
/// a cap or a failed store ended failed.
fn run_report(stopped: Option<StopCause>, flush: FlushStage) -> (BriefStatus, &'static str) {
    match (stopped, flush) {
        (Some(StopCause::Cap), _) => (BriefStatus::Failed, "was stopped by a cap"),
        (Some(StopCause::StoreFailed), _) => (BriefStatus::Failed, STOPPED_BY_THE_STORE),
        (None, FlushStage::NotNeeded) => (BriefStatus::Done, "finished"),
        (None, FlushStage::Flushed) => (BriefStatus::Done, "stopped at the context ceiling"),
        (None, FlushStage::Interrupted | FlushStage::Terminated) => {
            (BriefStatus::Failed, "was cut off at the context ceiling")
        }
    }
}

/// A run's result and how its brief ends (`run_report`).
struct RunReport<'a> {
    result: &'a str,
    status: BriefStatus,
    verb: &'static str,
}

/// A brief's record: its result, the run's flushed memory when the flush protocol ended it, and
/// the run's ledger row.
#[allow(clippy::too_many_arguments)]
fn self_record(
    mind: &str,
    brief: &Brief,
    segment: i64,
    report: RunReport<'_>,
    rows: Vec<LedgerRow>,
    memory: &Option<(String, String)>,
    stage: &str,
    now: i64,
) -> TurnRecord {
    let item = |kind, body| self_item(segment, now, kind, body);
    let mut transcript = vec![item(
        TranscriptKind::Result,
        // With how the brief ends: a host that stops after this commit and before the report
        // leaves the brief running, and the next holder reports it from here (`stranded.rs`).
        json!({
            "brief": brief.seq,
            "text": report.result,
            "status": report.status.as_str(),
            "verb": report.verb,
        }),
    )];
    if let Some((memory, from)) = memory {
        transcript.push(item(
            TranscriptKind::MemoryFlush,
            json!({"memory": memory, "from": from, "stage": stage}),
        ));
    }
    TurnRecord {
        turn_key: Some(format!("self-{mind}-brief-{}", brief.seq)),
        transcript,
        ledger: rows,
        ..TurnRecord::default()
    }
}

/// One transcript item of the Self role's segment `segment`, written at `now`.
pub(super) fn self_item(
    segment: i64,
    now: i64,
    kind: TranscriptKind,
    body: Value,
) -> NewTranscriptItem {
    NewTranscriptItem {
        role: Role::SelfRole,
        segment,
        kind,
        body,
        created_at_ms: now,
    }
}

/// The memory in a flush's answer: one JSON object with every pinned key (goal, open tasks,
/// constraints, done markers, facts), or `None`.
fn pinned_memory(answer: &str) -> Option<String> {
    let parsed = serde_json::from_str::<Value>(answer.trim()).ok()?;
    let pinned = ["goal", "open_tasks", "constraints", "done", "facts"];
    pinned
        .iter()
        .all(|k| parsed.get(k).is_some())
        .then(|| parsed.to_string())
}

/// The memory a run the flush protocol ended leaves for the next segment: its answer when it
/// holds every pinned item, else the segment's tail verbatim followed by the result — read when
/// the run's end is committed (`pending.rs`), so a read that fails holds the answer instead of
/// losing it. With where it came from.
fn run_memory(
    segment: i64,
    run: &RunOutcome,
    result: &str,
) -> (Option<(String, String)>, Option<TailMemory>) {
    let stage = flush_stage_name(run.flush);
    if let Some(memory) = pinned_memory(&run.outcome.text) {
        return (Some((memory, format!("flush:{stage}"))), None);
    }
    let from = format!("tail (flush:{stage}: the answer missed a pinned item)");
    let tail = TailMemory {
        segment,
        after: Some(result.to_string()),
    };
    (Some((String::new(), from)), Some(tail))
}

/// The ledger's name of a flush stage.
fn flush_stage_name(stage: FlushStage) -> &'static str {
    match stage {
        FlushStage::NotNeeded => "not_needed",
        FlushStage::Flushed => "flushed",
        FlushStage::Interrupted => "interrupted",
        FlushStage::Terminated => "terminated",
    }
}
