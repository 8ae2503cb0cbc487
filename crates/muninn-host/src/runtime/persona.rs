//! A Persona turn, as a pipeline: batch → plan → render → record the delivery → ask (with one
//! retry) → build the turn's record → one commit. Each step is a pure builder or one I/O call.

use super::accounting::Asked;
use super::attempt::Attempt;
use super::lost;
use super::pending::{Then, Uncommitted};
use super::prompts::{COMPACT_REASON, PERSONA_COMPACT_INSTRUCTIONS};
use super::reply::{PersonaReply, validate_reply_against};
use super::segment::shown_changed;
use super::session::Starting;
use super::window::{Fitted, is_prompt_too_long};
use super::{MindRunner, RuntimeError, Step};
use crate::config::RefreshMode;
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, BackendError, InputPart, SessionEvent, TurnInput, TurnOutcome};
use muninn_core::decide::{Action, Bounds, Decision, Event, decide};
use muninn_core::ledger::{ForcedStart, LedgerRow, RowKind, SegmentStart};
use muninn_core::money::Tokens;
use muninn_core::render::{self, Layers, Renderer};
use muninn_core::tokenize::count;
use muninn_store::{
    BriefOrigin, Delivery, FencingToken, MindSettings, NewBrief, NewMemoryNote, NewOutboxMessage,
    NewTranscriptItem, Role, TranscriptKind, TurnRecord,
};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The seed's `next_batch`: the oldest prefix of the pending deliveries that shares a
/// conversation — all public-room deliveries together, or one DM room alone — cut at the first
/// delivery that switches between public and direct or, for DMs, changes room.
pub fn next_batch(pending: &[Delivery]) -> &[Delivery] {
    &pending[..render::next_batch_len(pending, |d| (d.is_direct, d.room.as_str()))]
}

/// A batch of deliveries made ready for a turn.
pub(super) struct Batch {
    pub(super) deliveries: Vec<Delivery>,
    /// `<mind>-<first seq>-<max seq>`: the turn's key and the outbox request ids' stem.
    pub(super) id: String,
    pub(super) max_seq: i64,
    senders: BTreeSet<String>,
    /// What the renderer shows of it.
    input: render::TurnInput,
    /// Tokens the turn adds to the prompt: the messages and their context lines (an upper
    /// bound: lines the segment has shown already are not repeated).
    pub(super) delta: Tokens,
}

impl Batch {
    pub(super) fn new(mind: &str, deliveries: Vec<Delivery>) -> Batch {
        let max_seq = deliveries.iter().map(|d| d.seq).max().unwrap_or(0);
        let first_seq = deliveries.iter().map(|d| d.seq).min().unwrap_or(0);
        let delta = deliveries
            .iter()
            .map(|d| {
                count(&d.text) + 12 + d.context.iter().map(|l| count(&l.text) + 8).sum::<Tokens>()
            })
            .sum();
        Batch {
            id: format!("{mind}-{first_seq}-{max_seq}"),
            max_seq,
            senders: deliveries.iter().map(|d| d.sender.clone()).collect(),
            input: render::TurnInput {
                deliveries: deliveries.iter().map(render_delivery).collect(),
                status: String::new(),
                text: String::new(),
            },
            delta,
            deliveries,
        }
    }

    fn texts(&self) -> Vec<&str> {
        self.deliveries.iter().map(|d| d.text.as_str()).collect()
    }
}

fn render_delivery(d: &Delivery) -> render::Delivery {
    render::Delivery {
        id: d.source_id.clone(),
        room: d.room.clone(),
        sender: d.sender.clone(),
        is_direct: d.is_direct,
        to_you: d.to_you,
        text: d.text.clone(),
        // A line without an id cannot be recognised when a later delivery repeats it; its text
        // stands in for the id, so an identical line is shown once.
        context: d
            .context
            .iter()
            .map(|line| render::HistoryLine {
                id: line
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("text:{}:{}", line.sender, line.text)),
                sender: line.sender.clone(),
                text: line.text.clone(),
            })
            .collect(),
    }
}

/// What a turn does before it asks: the decider's answer, or a segment started without asking
/// (the first, or one rebuilt after the provider session was lost).
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    /// The decider's answer, when it was asked.
    pub(super) decision: Option<Decision>,
    /// The question it was (or would have been) asked.
    pub(super) event: Event,
    /// `warm` or `cold` as the decider saw the cache.
    pub(super) state: &'static str,
    /// The bounds the decider saw.
    pub(super) bounds: Bounds,
    /// A start without asking: its reason and record.
    pub(super) forced: Option<(&'static str, ForcedStart)>,
    /// The tool uses the request answers — a tool loop's results, and at a live session's
    /// arrival the backend's own (`Backend::pending_input`: a Persona's acknowledgement) — a
    /// clear sent with it keeps among the newest (`Accounting::arrival_view`).
    pub(super) tool_uses: u32,
    /// The request is the first of a segment already opened: an earlier attempt at it failed
    /// after the segment was opened. It is sent in that segment, neither asked again nor opened
    /// again (`MindRunner::plan`).
    pub(super) opened: bool,
}

impl Plan {
    /// Whether the turn opens a new segment.
    pub(super) fn refreshes(&self) -> bool {
        !self.opened && self.starts()
    }

    /// Whether the request is a segment's first: one it opens, or one opened for it already.
    /// It is priced and sized as a start (the layers and rehydration, nothing of the old
    /// prefix).
    pub(super) fn starts(&self) -> bool {
        self.decision.is_none_or(|d| d.action == Action::Refresh)
    }

    /// Whether the decider masked the turn: it is sent with the provider's tool-result clear.
    pub(super) fn masks(&self) -> bool {
        self.decision.is_some_and(|d| d.action == Action::Mask)
    }

    /// The ledger's text for the decision.
    pub(super) fn label(&self) -> String {
        match (&self.decision, self.forced) {
            (Some(d), _) => format!("{}:{:?}", d.action.as_str(), d.reason),
            (None, _) if self.opened => "start:retried".to_string(),
            (None, Some((reason, _))) => format!("start:{reason}"),
            (None, None) => "start".to_string(),
        }
    }

    /// What the turn's first ledger row records of it.
    pub(super) fn asked<'a>(&'a self, kind: RowKind, label: &'a str, boundary: bool) -> Asked<'a> {
        Asked {
            kind,
            bounds: Some(self.bounds),
            event: self.decision.map(|_| self.event),
            decision: self.decision.as_ref(),
            label,
            state: self.state,
            boundary,
        }
    }
}

/// What `parts` add to a request, as a plan counts them: the tokens of their text, and the tool
/// uses their tool results answer (a clear sent with the request keeps those among the newest).
pub(super) fn counted(parts: &[InputPart]) -> (Tokens, u32) {
    parts
        .iter()
        .fold((0, 0), |(tokens, uses), part| match part {
            InputPart::Text { text } => (tokens + count(text), uses),
            InputPart::ToolResult { content, .. } => (tokens + count(content), uses + 1),
        })
}

/// What the backend answered a turn, checked against the reply contract.
struct Answer {
    outcome: TurnOutcome,
    verdict: Result<PersonaReply, String>,
    /// The invalid first reply and the retry prompt, when a retry was answered: the provider's
    /// session holds both, so the transcript does too.
    retried: Option<Value>,
    ledger: Vec<LedgerRow>,
}

impl<B: Backend> MindRunner<B> {
    /// One Persona turn over `deliveries` (a [`next_batch`]).
    pub(super) async fn persona_turn(
        &mut self,
        token: FencingToken,
        now: i64,
        deliveries: Vec<Delivery>,
        settings: &MindSettings,
    ) -> Result<Step, RuntimeError> {
        let batch = Batch::new(&self.mind.id, self.attempted(deliveries));
        self.resume_on_new_lease(Role::Persona, now).await?;
        let (batch, plan) = match self.fit_window(batch, now) {
            Fitted::Send(batch, plan) => (batch, plan),
            Fitted::Undeliverable(batch, prompt) => {
                return self.set_aside(token, batch, prompt, None, now).await;
            }
        };
        self.check_window(Role::Persona, &plan)?;
        let worst = self.worst_case(Role::Persona, &plan, now);
        if self.would_cross_cap(now, settings, worst).await? {
            return Ok(Step::OverBudget);
        }
        // A retry of a batch this segment already holds re-sends the recorded message; anything
        // else records the delivery first (the policy is in `retry.rs`), under the attempt's
        // key: a retry after an append whose answer was lost finds it, not records it again
        // (`attempt.rs`).
        let text = match self.resend(&batch.id, plan.refreshes()) {
            Some(text) => text,
            None => {
                if plan.refreshes() {
                    self.start_persona_segment(&plan, &batch, token, now)
                        .await?;
                }
                let (text, mut body) = self.render_persona(&batch)?;
                // The request's estimate rides in the delivery's write: a crash that loses its
                // answer leaves the next holder its cost to ledger (`lost.rs`).
                let sent = self.sent_estimate(&plan, now);
                body[lost::SENT] = serde_json::to_value(sent).unwrap_or_default();
                let segment = self.persona.segment.unwrap_or(0);
                let key = self.append_key(TranscriptKind::Delivery, &batch.id, segment);
                let attempt = Attempt::new(&batch.id, batch.max_seq, segment, &text, key, body);
                self.attempt = Some(attempt);
                text
            }
        };
        self.record_attempt(token, now).await?;
        let segment = self.persona.segment.unwrap_or(0);
        let answer = match self.ask_persona(&batch, &plan, text, now).await {
            Ok(answer) => answer,
            Err(RuntimeError::Backend(e)) if is_prompt_too_long(&e) => {
                return self.refused_as_too_long(token, batch, &plan, e, now).await;
            }
            Err(e) => return Err(e),
        };
        self.attempt = None;
        let valid = answer.verdict.is_ok();
        let record = persona_record(&batch, segment, answer, now);
        // The turn's one transaction; then the session is bound to the transcript it now
        // stands on. A failed commit is held and committed first at the next step.
        let then = Then::PersonaTurn {
            max_seq: batch.max_seq,
            valid,
        };
        let turn = Uncommitted::new(token, Role::Persona, record, now, then);
        self.host.crash_points.reached(CrashPoint::PersonaAnswered);
        let step = self.settle(turn).await?;
        Ok(step.unwrap_or(Step::PersonaTurn {
            acked_through: batch.max_seq,
            valid,
        }))
    }

    /// The decider's plan for a role's next request (a turn's arrival), or a forced start when
    /// the session has no segment or lost it.
    pub(super) fn plan(
        &self,
        role: Role,
        delta: Tokens,
        boundary: bool,
        tool_uses: u32,
        now: i64,
    ) -> Plan {
        let session = self.session(role);
        let bounds = session.acc.bounds();
        // A segment opened whose first request has not been answered (an attempt at it failed
        // and left the session live: the Messages API, the simulator, a relaunching CLI child):
        // the accounting still counts the segment before, whose prefix, requests and clearable
        // results the provider no longer holds. The request is that segment's start, as it was
        // when the segment was opened: deciding it again on the old segment would refresh a
        // second time, or clear or append on a session that is gone. Its row records the start
        // and no question, so a replay begins the segment there without asking either.
        if session.live() && session.starting.is_some() {
            return Plan {
                decision: None,
                event: Event::Arrival { boundary, delta },
                state: "cold",
                bounds,
                forced: None,
                tool_uses,
                opened: true,
            };
        }
        if !session.live() {
            let event = Event::Arrival { boundary, delta };
            let forced = if session.segment.is_none() {
                ("start", ForcedStart::First)
            } else {
                ("rebuilt from the transcript", ForcedStart::Rebuilt)
            };
            return Plan {
                decision: None,
                event,
                state: "cold",
                bounds,
                forced: Some(forced),
                tool_uses,
                opened: false,
            };
        }
        // The request continues the provider session, so it carries what the backend adds to it
        // (a Persona's acknowledgement of its last structured reply, a tool result): counted as
        // a tool loop's results are, in its size and among the uses a clear sent with it keeps —
        // the tool results its ledger row records, and a replay of the row decides with. A
        // refresh sends it nowhere (a new session, or a compaction that closes the call), so its
        // row records none, and a replay weighs the clear the refresh won over with one more of
        // the older results kept: no more to clear, so no more gain (`ClearPrice::gain_over`
        // grows with what is cleared), and the same refresh.
        let (carried, carried_uses) = counted(&session.backend.pending_input());
        let (delta, tool_uses) = (delta + carried, tool_uses + carried_uses);
        let event = Event::Arrival { boundary, delta };
        let view = session.acc.arrival_view(boundary, tool_uses);
        Plan {
            decision: Some(decide(self.policy, &view, event, now)),
            event,
            state: if view.warm(now) { "warm" } else { "cold" },
            bounds,
            forced: None,
            tool_uses,
            opened: false,
        }
    }

    /// A new lease: continue the role's open segment through its stored handle, if it lines up.
    pub(super) async fn resume_on_new_lease(
        &mut self,
        role: Role,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let session = self.session_mut(role);
        if session.broken
            && let Some(fork) = session.resume.take()
        {
            self.resume_segment(role, fork, now).await?;
        }
        Ok(())
    }

    /// A refresh the decider chose may compact the live session in place; a forced start or a
    /// rebuild always starts from the layers, with memory selected for the batch.
    async fn start_persona_segment(
        &mut self,
        plan: &Plan,
        batch: &Batch,
        token: FencingToken,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let compacted = plan.decision.is_some()
            && self.mind.refresh == RefreshMode::Compact
            && self.compact_persona(plan, token, now).await?;
        if compacted {
            return Ok(());
        }
        let memory = self.select_memory(&batch.senders, &batch.texts()).await?;
        let (reason, forced) = match plan.forced {
            Some((reason, forced)) => (reason, Some(forced)),
            None => ("refresh", None),
        };
        self.open_segment(Role::Persona, token, now, memory, reason, forced)
            .await
    }

    /// The turn's user message, and the transcript body a rebuilt renderer replays it from (the
    /// history keys it showed and, after a notice, the layers it showed). Only this message is
    /// sent — the provider's session holds the rest — so the whole request is not rendered.
    fn render_persona(&mut self, batch: &Batch) -> Result<(String, Value), RuntimeError> {
        let layers = self.layers(String::new())?;
        let Some(renderer) = self.persona.renderer.as_mut() else {
            return Err(RuntimeError::Config("no persona renderer".to_string()));
        };
        let memory = renderer.base().memory.clone();
        let text = renderer
            .append_turn(&Layers { memory, ..layers }, &batch.input)
            .blocks
            .last()
            .map(|b| b.text.clone())
            .unwrap_or_default();
        let mut body = json!({
            "batch": batch.id,
            "seqs": batch.deliveries.iter().map(|d| d.seq).collect::<Vec<_>>(),
            "text": text,
            "seen": Renderer::shown_keys(&batch.input),
        });
        if shown_changed(renderer) {
            body["shown"] = serde_json::to_value(renderer.shown()).unwrap_or_default();
        }
        Ok((text, body))
    }

    /// Appends one transcript item on its own: what the Mind is shown is durable before it is
    /// acted on.
    pub(super) async fn record_item(
        &self,
        token: FencingToken,
        role: Role,
        segment: i64,
        kind: TranscriptKind,
        body: Value,
        now: i64,
    ) -> Result<(), RuntimeError> {
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role,
                    segment,
                    kind,
                    body,
                    created_at_ms: now,
                }],
            )
            .await?;
        Ok(())
    }

    /// Asks the backend and checks the reply; an invalid reply is retried once with the reason.
    async fn ask_persona(
        &mut self,
        batch: &Batch,
        plan: &Plan,
        text: String,
        now: i64,
    ) -> Result<Answer, RuntimeError> {
        let sent = self.persona.send(plan, TurnInput::text(text)).await;
        let outcome = match sent {
            Ok(o) => o,
            Err(e) => {
                // A session the failure left as it was — one that lives here (the Messages
                // API, the simulator: an exchange joins it only when it succeeds), or the CLI's
                // after a turn with nothing answered (refused, timed out, its child dead) that it
                // took back out of its session file, or one that never reached it — takes the next attempt as the recorded
                // message re-sent (`retry.rs`): one delivery, one notice per distinct error,
                // however long the outage.
                // A CLI child that died or hung after its model acted is relaunched by the
                // backend (`--resume`): its session holds this turn's user line and what the
                // model did, as the transcript holds the delivery, and the retry appends the
                // batch again on both sides, so the segment (and its cached prefix) continues.
                // Any other failure may have left the provider's session out of step with the
                // renderer: rebuild next time.
                let binds = self.persona.backend.binds_sessions();
                let kept = !binds || self.persona.backend.failure_left_session();
                let carries_on = binds && self.persona.backend.failure_kept_turn();
                if !kept {
                    self.attempt = None;
                    if !carries_on {
                        self.persona.mark_broken(now);
                    }
                }
                self.persona.collect_events();
                // An attempt cut after the provider read it was billed: its row is committed
                // now, before the retry (`failed.rs`).
                (self.ledger_cut_now(Role::Persona, now, (RowKind::Request, true))).await?;
                // Compared without its request id, which every refusal has its own of; the
                // notice says the first one's.
                let error = e.without_request_id().to_string();
                let new_error = self.attempt.as_mut().is_none_or(|a| a.failed_with(&error));
                if new_error {
                    self.record_failed_attempt(batch, &e, now).await;
                }
                return Err(e.into());
            }
        };
        let label = plan.label();
        let ledger = self.answered(
            Role::Persona,
            &outcome,
            now,
            plan.asked(RowKind::Request, &label, true),
        );
        let verdict = self.check_reply(batch, &outcome);
        let mut answer = Answer {
            outcome,
            verdict,
            retried: None,
            ledger,
        };
        if let Err(problem) = answer.verdict.clone() {
            self.retry_persona(batch, &mut answer, &problem).await;
        }
        if let Some(r) = self.persona.renderer.as_mut() {
            r.reply(&outcome_text(&answer.outcome));
        }
        Ok(answer)
    }

    /// Records that an attempt at the batch failed, after its delivery: each attempt's
    /// delivery stays in the transcript (it says what was sent, even when the provider refused
    /// it), followed by why the attempt failed; the batch is tried again. Best effort — the
    /// failure may be the store's own.
    async fn record_failed_attempt(&self, batch: &Batch, error: &BackendError, now: i64) {
        let Some(token) = self.lease.as_ref().map(|l| l.token) else {
            return;
        };
        let segment = self.persona.segment.unwrap_or(0);
        let body = json!({"attempt_failed": error.to_string(), "batch": batch.id});
        if let Err(e) = self
            .record_item(
                token,
                Role::Persona,
                segment,
                TranscriptKind::Notice,
                body,
                now,
            )
            .await
        {
            tracing::warn!(mind = %self.mind.id, error = %e, "a failed attempt was not recorded");
        }
    }

    fn check_reply(&self, batch: &Batch, outcome: &TurnOutcome) -> Result<PersonaReply, String> {
        outcome
            .structured
            .as_ref()
            .ok_or_else(|| "no structured reply".to_string())
            .and_then(|v| validate_reply_against(&self.persona_schema, &batch.deliveries, v))
    }

    /// The one retry of an invalid reply, answered by policy: the reason, then a recorded
    /// failure if it fails again.
    async fn retry_persona(&mut self, batch: &Batch, answer: &mut Answer, problem: &str) {
        let retry = format!(
            "Your reply was not valid ({problem}). Reply again, following the schema exactly."
        );
        let now = self.host.clock.now_ms();
        let delta = count(&retry) + answer.outcome.usage.output;
        let worst = self.follow_up_worst_case(Role::Persona, delta, now);
        let crosses = match self.host.store.settings(&self.mind.id).await {
            Ok(settings) => self.would_cross_cap(now, &settings, worst).await,
            Err(e) => Err(e.into()),
        };
        match crosses {
            Ok(false) => {}
            Ok(true) => {
                answer.verdict = Err(format!(
                    "{problem}; not retried: the retry could cross the spend cap"
                ));
                return;
            }
            Err(e) => {
                answer.verdict = Err(format!("{problem}; not retried: {e}"));
                return;
            }
        }
        match self
            .persona
            .backend
            .turn(TurnInput::text(retry.clone()))
            .await
        {
            Ok(second) => {
                if let Some(r) = self.persona.renderer.as_mut() {
                    r.reply(&outcome_text(&answer.outcome));
                    // The retry prompt goes as sent, with no notices: the renderer holds
                    // exactly what the provider's session holds.
                    r.push_user(&retry);
                }
                answer.retried = Some(json!({
                    "failure": "invalid reply",
                    "problem": problem,
                    "reply": answer.outcome.structured,
                    "text": answer.outcome.text,
                    "retry": retry,
                }));
                let rows = self.answered(
                    Role::Persona,
                    &second,
                    now,
                    Asked {
                        kind: RowKind::Request,
                        bounds: None,
                        event: None,
                        decision: None,
                        label: "retry_invalid_reply",
                        state: "warm",
                        boundary: false,
                    },
                );
                answer.ledger.extend(rows);
                answer.verdict = self.check_reply(batch, &second);
                answer.outcome = second;
            }
            Err(e) => {
                self.persona.mark_broken(now);
                self.persona.collect_events();
                // A retry cut after the provider read it was billed: the turn's record
                // carries its row.
                let cut = self.take_unledgered(Role::Persona, now, RowKind::Request);
                answer.ledger.extend(cut);
                answer.verdict = Err(format!("retry failed: {e}"));
            }
        }
    }

    /// A Persona refresh by compaction (`refresh = "compact"`): the provider summarises the
    /// session in place. The compaction's request is ledgered on the segment it summarised
    /// (decision `compact`, a flush in the accounting, its own usage and cost); a new segment
    /// (reason `compact`) then continues the same provider session, its renderer restarted on
    /// the summary as memory. Returns `false` — the caller rebuilds, the next row carries a
    /// `compact_failed` event — when the backend cannot compact ([`BackendError::Unsupported`])
    /// or the compaction failed (the session is then rebuilt, which never depends on the
    /// provider's copy).
    async fn compact_persona(
        &mut self,
        plan: &Plan,
        token: FencingToken,
        now: i64,
    ) -> Result<bool, RuntimeError> {
        let outcome = match self
            .persona
            .backend
            .compact(PERSONA_COMPACT_INSTRUCTIONS)
            .await
        {
            Ok(o) => o,
            Err(e) => {
                // A backend that cannot compact, or a compaction that failed: either way the
                // configured refresh did not happen, which the rebuilt turn's row says.
                if !matches!(e, BackendError::Unsupported { .. }) {
                    tracing::warn!(mind = %self.mind.id, error = %e, "compaction failed; rebuilding");
                }
                self.persona.collect_events();
                (self.ledger_cut_now(Role::Persona, now, (RowKind::Flush, false))).await?;
                self.persona
                    .pending_events
                    .push(SessionEvent::CompactFailed {
                        error: e.to_string(),
                    });
                return Ok(false);
            }
        };
        let rows = self.answered(
            Role::Persona,
            &outcome,
            now,
            plan.asked(RowKind::Flush, "compact", true),
        );
        let summary = outcome.text;
        let then = Then::Compacted { summary };
        let compaction = Uncommitted::rows(token, Role::Persona, rows, now, then);
        self.settle(compaction).await?;
        Ok(true)
    }

    /// The segment a compaction opens: the same provider session, its renderer restarted on
    /// the summary as memory, rehydrated with the launched system and the summary.
    pub(super) async fn open_compacted_segment(
        &mut self,
        token: FencingToken,
        now: i64,
        summary: String,
    ) -> Result<(), RuntimeError> {
        let (renderer, spec) = self.renderer_on(Role::Persona, summary.clone())?;
        // The session continues from the system it was launched with (the CLI keeps its launch
        // flags across a compaction) and the summary: what the new segment was rehydrated with,
        // as its segment row says.
        let rehydration = self.persona.launched.rehydration + count(&summary);
        let number = self
            .store_segment(
                token,
                Role::Persona,
                now,
                rehydration,
                COMPACT_REASON,
                summary.clone(),
                &spec,
            )
            .await?;
        self.record_item(
            token,
            Role::Persona,
            number,
            TranscriptKind::MemoryFlush,
            json!({"memory": summary, "from": "compact"}),
            now,
        )
        .await?;
        // The session keeps the system it was launched with, as its first request measured it
        // (`Session::launched`); the summary follows it in the conversation. So the record is
        // that system, under its breakpoints — the prefix a replay caches the segment's head and
        // system at; the summary is not under them (a record that counted it there, or the
        // layers' estimate, priced every later row apart from the provider's bill).
        let start = SegmentStart {
            forced: None,
            ..self.persona.launched
        };
        self.estimate_rehydration(Role::Persona, &renderer);
        self.persona.begin_segment(
            renderer,
            number,
            Starting {
                start,
                measured: true,
            },
        );
        Ok(())
    }
}

/// The turn's one record: the reply (or the failure) and what it causes — outbox messages with
/// idempotent request ids, memory notes about the batch's senders, a Self brief — the ledger
/// rows, and the ack through the batch's max seq.
fn persona_record(batch: &Batch, segment: i64, answer: Answer, now: i64) -> TurnRecord {
    let item = |kind, body| NewTranscriptItem {
        role: Role::Persona,
        segment,
        kind,
        body,
        created_at_ms: now,
    };
    let mut record = TurnRecord {
        turn_key: Some(format!("persona-{}-{segment}", batch.id)),
        ack_through: Some(batch.max_seq),
        ledger: answer.ledger,
        ..TurnRecord::default()
    };
    if let Some(body) = answer.retried {
        record.transcript.push(item(TranscriptKind::Notice, body));
    }
    let outcome = answer.outcome;
    let reply = match answer.verdict {
        Ok(reply) => reply,
        Err(problem) => {
            record.transcript.push(item(
                TranscriptKind::Notice,
                json!({"failure": "invalid reply", "problem": problem, "reply": outcome.structured, "text": outcome.text}),
            ));
            return record;
        }
    };
    record.transcript.push(item(
        TranscriptKind::Reply,
        outcome.structured.clone().unwrap_or(Value::Null),
    ));
    for (index, say) in reply.say.iter().enumerate() {
        record.outbox.push(NewOutboxMessage {
            request_id: format!("{}-{index}", batch.id),
            room: say.room.clone(),
            text: say.text.clone(),
            created_at_ms: now,
        });
    }
    for note in &reply.remember {
        // `about` is limited to the batch's senders; anything else the model named is dropped
        // rather than trusted.
        let about: Vec<String> = note
            .about
            .iter()
            .filter(|a| batch.senders.contains(*a))
            .cloned()
            .collect();
        record.memory.push(NewMemoryNote {
            about,
            salience: note.salience,
            text: note.text.clone(),
            created_at_ms: now,
            source: batch.id.clone(),
        });
    }
    if let Some(run) = reply.start_self_run {
        record.briefs.push(NewBrief {
            text: run.brief,
            origin: BriefOrigin::Persona,
            created_at_ms: now,
        });
    }
    record
}

pub(super) fn outcome_text(outcome: &TurnOutcome) -> String {
    match &outcome.structured {
        Some(v) => v.to_string(),
        None => outcome.text.clone(),
    }
}
