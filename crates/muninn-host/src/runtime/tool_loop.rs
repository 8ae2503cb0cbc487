//! A Self brief as a tool loop the host drives, request by request, on a backend whose tools
//! are muninn's own (the Messages API, the simulator: [`Backend::can_offer_tools`]) — when the
//! Mind's Self has a workspace (`self_session.workspace`).
//!
//! Each request of the run is one ledger row, decided like a turn's: the brief's own request
//! at the task boundary (`plan_self`), every later one at a non-boundary arrival whose delta is
//! the reply it answers and the tool results it carries. So the decider may `mask` inside the
//! run — the request then goes through [`Backend::turn_cleared`] and clears the old tool
//! results — while a refresh waits for the next brief (the ceiling's forced refresh ends the
//! run instead: a segment cannot change under a tool loop).
//!
//! A reply that calls tools is run by the host ([`super::tools`], read-only, confined to the
//! workspace), and the reply, the results and the request's row are recorded in one
//! transaction under the request's own turn key (`self-<mind>-brief-<seq>-request-<k>`) before
//! the results are sent: a commit retried after a lost acknowledgement cannot record them
//! twice, and a run once sent is never restarted (`stranded.rs`), so no call
//! or result is recorded twice. The reply that ends the run goes into the brief's own record, as
//! a one-request brief's does.
//!
//! Caps, checked before every request after the first: the run's requests
//! (`self_session.max_requests`), its spend against the brief's budget
//! (`self_session.brief_budget_micro_usd`, the most the next request can cost included), the
//! Mind's spend cap, and the model's window. A run a cap ends is failed, with the cap named in
//! its result, in the Persona's delivery and in the log; its last calls go unanswered, so the
//! provider session is rebuilt at the next brief. The flush protocol's trigger (the context
//! ceiling less the headroom) asks for the flush with the next results, and the answer ends the
//! run as the protocol's does.

use super::pending::{Then, ToolRequest, Uncommitted};
use super::persona::{Plan, counted};
use super::tools::{ToolOutput, WorkspaceTools};
use super::{MindRunner, RuntimeError};
use muninn_backend::{
    Backend, BackendError, FlushStage, InputPart, RunOutcome, ToolCall, TurnInput, TurnOutcome,
};
use muninn_core::ledger::{LedgerRow, RowKind};
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::tokenize::count;
use muninn_store::{Brief, FencingToken, Role, TranscriptKind, TurnRecord};
use serde_json::json;

/// How a Self run ended: its last reply (not yet recorded), that reply's ledger row when the
/// loop wrote it already, and what ended the run early, if anything did.
pub(super) struct Driven {
    /// The last reply and how far the flush protocol went.
    pub(super) run: RunOutcome,
    /// The last request's rows (a failed attempt's before its own), when the run was a tool
    /// loop (else the caller writes them).
    pub(super) row: Option<Vec<LedgerRow>>,
    /// What ended the run early, and why in words (the last reply is then recorded already).
    pub(super) stopped: Option<(StopCause, String)>,
}

/// What ended a Self run before its answer: the report to the Persona says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopCause {
    /// A cap: the run's requests or budget, the Mind's spend cap, tools called after the flush.
    Cap,
    /// The store failed to record a request: it was saved, with its answer, at a later step,
    /// and the run could not go on from there (`pending.rs`).
    StoreFailed,
}

/// Where a run stands against its caps after a request: its count and cap, its spend and budget.
#[derive(Debug, Clone, Copy)]
struct Caps {
    request: u32,
    max_requests: u32,
    spent: MicroUsd,
    budget: Option<i64>,
}

impl Driven {
    /// A run that was one request (the backend's own [`Backend::run`]).
    pub(super) fn single(run: RunOutcome) -> Driven {
        Driven {
            run,
            row: None,
            stopped: None,
        }
    }
}

/// Where a run stood when a cap (or a commit that failed) ended it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stopped {
    /// Requests sent.
    pub(super) request: u32,
    /// Their cost.
    pub(super) spent: MicroUsd,
    /// Whether the last one asked for the flush.
    pub(super) flushing: bool,
    /// When.
    pub(super) at: i64,
}

/// One request of the loop about to be sent.
struct Next {
    input: TurnInput,
    plan: Plan,
    label: String,
    boundary: bool,
    /// The flush was asked for with this request.
    flushing: bool,
}

impl<B: Backend> MindRunner<B> {
    /// The Self's tools, when its runs are host-driven tool loops: a workspace is configured
    /// and the backend takes muninn's own tools.
    pub(super) fn self_tools(&self) -> Result<Option<WorkspaceTools>, RuntimeError> {
        let session = self
            .mind
            .self_session
            .resolve(&self.host.config.backend.self_session);
        let Some(root) = session.workspace else {
            return Ok(None);
        };
        if !self.selfs.backend.can_offer_tools() {
            return Ok(None);
        }
        WorkspaceTools::new(&root).map(Some).map_err(|e| {
            RuntimeError::Config(format!(
                "mind {}: self_session.workspace {}: {e}",
                self.mind.id,
                root.display()
            ))
        })
    }

    /// Runs a brief as a tool loop (see the module docs). `plan` is the brief's own decision,
    /// its segment already open and the brief recorded.
    pub(super) async fn run_tool_loop(
        &mut self,
        brief: &Brief,
        text: String,
        plan: &Plan,
        token: FencingToken,
        tools: WorkspaceTools,
    ) -> Result<Driven, RuntimeError> {
        let session = self
            .mind
            .self_session
            .resolve(&self.host.config.backend.self_session);
        let (max_requests, budget) = (session.max_requests, session.brief_budget_micro_usd);
        let protocol = self.flush_protocol();
        let mut next = Next {
            input: TurnInput::text(text),
            plan: *plan,
            label: super::self_run::self_label(plan),
            boundary: true,
            flushing: false,
        };
        let mut spent = MicroUsd::ZERO;
        let mut request = 0u32;
        loop {
            request += 1;
            let now = self.host.clock.now_ms();
            let outcome = match self.send_self(&next).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    let failed = self.self_run_failed(brief, token, e, now, next.boundary);
                    return Err(failed.await);
                }
            };
            let asked = next
                .plan
                .asked(RowKind::Request, &next.label, next.boundary);
            let rows = self.answered(Role::SelfRole, &outcome, now, asked);
            // A failed attempt before the answer spent the brief's budget too.
            spent = rows.iter().fold(spent, |spent, row| spent + row.cost);
            let flushing = next.flushing;
            if outcome.tool_calls.is_empty() {
                return Ok(answered_run(outcome, rows, flushing));
            }
            let results = run_calls(&tools, &outcome.tool_calls).await;
            let after = self.host.clock.now_ms();
            let caps = Caps {
                request,
                max_requests,
                spent,
                budget,
            };
            let following = self
                .following(&outcome, &results, &protocol, flushing, caps, after)
                .await;
            let sent = if following.is_ok() { &results[..] } else { &[] };
            let at = Stopped {
                request,
                spent,
                flushing,
                at: after,
            };
            self.record_request(token, brief, plan, &outcome, sent, rows, at)
                .await?;
            match following {
                Ok(following) => next = following,
                Err((cause, stop)) => {
                    let stopped = self.stop_run(brief, outcome, at, cause, stop);
                    return Ok(stopped);
                }
            }
        }
    }

    /// The request that follows an answer with tool calls at `now`, or why the run stops before
    /// it: the run's own caps, then the budget and the Mind's spend cap priced on that request.
    async fn following(
        &self,
        outcome: &TurnOutcome,
        results: &[(ToolCall, ToolOutput)],
        protocol: &muninn_backend::FlushProtocol,
        flushing: bool,
        caps: Caps,
        now: i64,
    ) -> Result<Next, (StopCause, String)> {
        if let Some(stop) = self.cap_reached(caps.request, caps.max_requests, flushing) {
            return Err((StopCause::Cap, stop));
        }
        let following = self.next_request(outcome, results, protocol, now);
        match self
            .over_a_cap(&following, caps.spent, caps.budget, now)
            .await
        {
            Ok(Some(stop)) => Err((StopCause::Cap, stop)),
            Ok(None) => Ok(following),
            // The answer is billed and counted already: its row must reach the ledger, so the
            // step cannot fail here. A cap it cannot read stops the run as a cap would (going
            // on might cross it), as a Persona's retry is not sent then either — reported as
            // the store's failure, not a cap.
            Err(e) => Err((
                StopCause::StoreFailed,
                format!("its spend cap could not be read: {e}"),
            )),
        }
    }

    /// A run a cap (or a failed store: `cause`) ended: said in the log, the session left to be rebuilt (its last calls go
    /// unanswered, so the provider session cannot take another turn as it stands).
    pub(super) fn stop_run(
        &mut self,
        brief: &Brief,
        outcome: TurnOutcome,
        at: Stopped,
        cause: StopCause,
        stop: String,
    ) -> Driven {
        tracing::warn!(
            mind = %self.mind.id,
            brief = brief.seq,
            requests = at.request,
            spent = at.spent.0,
            "Self run stopped: {stop}"
        );
        self.selfs.mark_broken(at.at);
        let flush = if at.flushing {
            FlushStage::Interrupted
        } else {
            FlushStage::NotNeeded
        };
        Driven {
            run: RunOutcome { outcome, flush },
            row: None,
            stopped: Some((cause, stop)),
        }
    }

    /// The caps that end a run whatever the next request would be: the run's requests, and a
    /// model that called tools again once asked to flush (the protocol's interrupt).
    fn cap_reached(&self, request: u32, max_requests: u32, flushing: bool) -> Option<String> {
        if flushing {
            Some("it called tools after the flush was asked for".to_string())
        } else if request >= max_requests {
            Some(format!("it reached its cap of {max_requests} requests"))
        } else {
            None
        }
    }

    /// Records one request of the loop (see [`request_record`]), `at` where the run stands
    /// after it, and renders it. A commit that fails holds the record (`pending.rs`): the next
    /// step commits it and ends the run there, the brief's own `plan` and segment reporting it.
    #[allow(clippy::too_many_arguments)]
    async fn record_request(
        &mut self,
        token: FencingToken,
        brief: &Brief,
        plan: &Plan,
        outcome: &TurnOutcome,
        sent: &[(ToolCall, ToolOutput)],
        rows: Vec<LedgerRow>,
        at: Stopped,
    ) -> Result<(), RuntimeError> {
        let segment = self.selfs.segment.unwrap_or(0);
        let record = request_record(
            &self.mind.id,
            brief,
            at.request,
            segment,
            outcome,
            sent,
            rows,
            at.at,
        );
        let then = Then::ToolRequest(Box::new(ToolRequest {
            brief: brief.clone(),
            plan: *plan,
            segment,
            outcome: outcome.clone(),
            at,
        }));
        let held = Uncommitted::new(token, Role::SelfRole, record, at.at, then);
        if let Err(e) = self.commit_or_hold(held).await {
            // The run ends at this request when a later step commits it: its results are never
            // sent, so the held record lists the reply alone (under the same turn key).
            if let Some(record) = self.held_record_mut(Role::SelfRole) {
                record
                    .transcript
                    .retain(|item| item.kind != TranscriptKind::ToolResult);
            }
            return Err(e);
        }
        self.render_exchange(outcome, sent);
        Ok(())
    }

    /// Sends one request of the loop (a clear when the decider masked it).
    async fn send_self(&mut self, next: &Next) -> Result<TurnOutcome, BackendError> {
        self.selfs.send(&next.plan, next.input.clone()).await
    }

    /// The request that answers `outcome`'s calls with `results`: the decider asked at a
    /// non-boundary arrival of the reply and the results, and the flush asked for with them
    /// once the context reaches the protocol's trigger.
    fn next_request(
        &self,
        outcome: &TurnOutcome,
        results: &[(ToolCall, ToolOutput)],
        protocol: &muninn_backend::FlushProtocol,
        now: i64,
    ) -> Next {
        let mut parts: Vec<InputPart> = results
            .iter()
            .map(|(call, out)| InputPart::ToolResult {
                tool_use_id: call.id.clone(),
                content: out.content.clone(),
                is_error: out.is_error,
            })
            .collect();
        let (results_tokens, uses) = counted(&parts);
        let mut delta: Tokens = outcome.usage.output + results_tokens;
        let flushing = outcome.usage.prompt() + delta >= protocol.trigger_tokens();
        if flushing {
            delta += count(&protocol.message);
            parts.push(InputPart::Text {
                text: protocol.message.clone(),
            });
        }
        let plan = self.plan(Role::SelfRole, delta, false, uses, now);
        Next {
            input: TurnInput {
                parts,
                safe_to_repeat: false,
            },
            label: plan.label(),
            plan,
            boundary: false,
            flushing,
        }
    }

    /// The cap the next request would pass, in words, or `None` (see the module docs).
    async fn over_a_cap(
        &self,
        next: &Next,
        spent: MicroUsd,
        budget: Option<i64>,
        now: i64,
    ) -> Result<Option<String>, RuntimeError> {
        if next.plan.refreshes() {
            // Only the ceiling refreshes inside a tool loop, and a run cannot change segment.
            return Ok(Some(
                "its next request would pass the context ceiling".to_string(),
            ));
        }
        if let Err(e) = self.check_window(Role::SelfRole, &next.plan) {
            return Ok(Some(e.to_string()));
        }
        let worst = self.worst_case(Role::SelfRole, &next.plan, now);
        if let Some(budget) = budget
            && spent.0.saturating_add(worst.0) > budget
        {
            return Ok(Some(format!(
                "its next request could cross the brief's budget ({} of {budget} micro-USD spent, the next could cost {})",
                spent.0, worst.0
            )));
        }
        let settings = self.host.store.settings(&self.mind.id).await?;
        if self.would_cross_cap(now, &settings, worst).await? {
            return Ok(Some(
                "its next request could cross the Mind's spend cap".to_string(),
            ));
        }
        Ok(None)
    }

    /// The renderer takes the exchange as the provider's session holds it (for a reseed).
    fn render_exchange(&mut self, outcome: &TurnOutcome, results: &[(ToolCall, ToolOutput)]) {
        if let Some(r) = self.selfs.renderer.as_mut() {
            r.reply(&tool_use_body(outcome).to_string());
            for (_, out) in results {
                r.push_user(&out.content);
            }
        }
    }
}

/// Runs each call on the blocking pool (file I/O), in order.
async fn run_calls(tools: &WorkspaceTools, calls: &[ToolCall]) -> Vec<(ToolCall, ToolOutput)> {
    let mut results = Vec::with_capacity(calls.len());
    for call in calls {
        let (t, c) = (tools.clone(), call.clone());
        let out = tokio::task::spawn_blocking(move || t.call(&c.name, &c.input))
            .await
            .unwrap_or_else(|e| ToolOutput {
                content: format!("error: the tool failed: {e}"),
                is_error: true,
            });
        results.push((call.clone(), out));
    }
    results
}

/// The transcript body of a reply that called tools.
fn tool_use_body(outcome: &TurnOutcome) -> serde_json::Value {
    json!({"text": outcome.text, "calls": outcome.tool_calls})
}

/// One request's record: the reply that called tools, the results sent back (none when the
/// run stops there), and the request's rows (a failed attempt's before its own), under the
/// request's own turn key.
#[allow(clippy::too_many_arguments)]
fn request_record(
    mind: &str,
    brief: &Brief,
    request: u32,
    segment: i64,
    outcome: &TurnOutcome,
    results: &[(ToolCall, ToolOutput)],
    rows: Vec<LedgerRow>,
    now: i64,
) -> TurnRecord {
    let item = |kind, body| super::self_run::self_item(segment, now, kind, body);
    let mut transcript = vec![item(TranscriptKind::ToolUse, tool_use_body(outcome))];
    transcript.extend(results.iter().map(|(call, out)| {
        item(
            TranscriptKind::ToolResult,
            json!({
                "tool_use_id": call.id,
                "name": call.name,
                "input": call.input,
                "text": out.content,
                "is_error": out.is_error,
            }),
        )
    }));
    TurnRecord {
        turn_key: Some(format!("self-{mind}-brief-{}-request-{request}", brief.seq)),
        transcript,
        ledger: rows,
        ..TurnRecord::default()
    }
}

/// A run whose last request was answered without tool calls: it is over (with the flush's
/// answer, when the flush was asked for).
fn answered_run(outcome: TurnOutcome, rows: Vec<LedgerRow>, flushing: bool) -> Driven {
    let flush = if flushing {
        FlushStage::Flushed
    } else {
        FlushStage::NotNeeded
    };
    Driven {
        run: RunOutcome { outcome, flush },
        row: Some(rows),
        stopped: None,
    }
}
