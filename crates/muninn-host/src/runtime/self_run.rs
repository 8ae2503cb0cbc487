//! A Self brief: decide at the task boundary, run under the flush protocol, report back.

#[allow(unused_imports)]
use super::*;

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

    pub(super) async fn self_turn(
        &mut self,
        token: FencingToken,
        now: i64,
        brief: muninn_store::Brief,
    ) -> Result<Step, RuntimeError> {
        // A new lease: continue the open segment through its stored handle, if it lines up.
        if self.selfs.broken
            && let Some(fork) = self.selfs.resume.take()
        {
            self.resume_segment(Role::SelfRole, fork, now).await?;
        }
        // A brief's start is a task boundary: the decider may refresh here.
        let delta = count(&brief.text);
        let mut decision_text = "start".to_string();
        let flushed = self.selfs.flushed_memory.take();
        let refresh = if flushed.is_some() || self.selfs.renderer.is_none() || self.selfs.broken {
            true
        } else {
            let view = self.view(&self.selfs);
            let d = decide(
                self.policy,
                &view,
                Event::Arrival {
                    boundary: self.mind.refresh_at_task_boundaries,
                    delta,
                },
                now,
            );
            decision_text = format!("{}:{:?}", d.action.as_str(), d.reason);
            d.action == Action::Refresh
        };
        if refresh {
            let (memory, reason) = if let Some(memory) = flushed {
                // The last run flushed under the flush protocol: its memory is the new start.
                decision_text = "start:flushed".to_string();
                (memory, "flushed")
            } else if self.selfs.renderer.is_some() && !self.selfs.broken {
                (self.flush_self(token, now).await?, "task boundary")
            } else {
                // A host that stopped after a run flushed left the flush as the segment's last
                // item: it is the memory to start from.
                let tail = self
                    .host
                    .store
                    .transcript_tail(&self.mind.id, Role::SelfRole, 1)
                    .await?;
                match tail
                    .last()
                    .filter(|i| i.kind == TranscriptKind::MemoryFlush)
                {
                    Some(item) => (
                        item.body["memory"].as_str().unwrap_or_default().to_string(),
                        "flushed",
                    ),
                    None => (self.self_memory_from_briefs().await?, "task boundary"),
                }
            };
            self.open_segment(Role::SelfRole, token, now, memory, reason)
                .await?;
        }
        let segment = self.selfs.segment.unwrap_or(0);
        let text = format!(
            "Brief {} (from the {}):\n{}",
            brief.seq,
            brief.origin.as_str(),
            brief.text
        );
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role: Role::SelfRole,
                    segment,
                    kind: TranscriptKind::Brief,
                    body: json!({"brief": brief.seq, "text": text}),
                    created_at_ms: now,
                }],
            )
            .await?;
        if let Some(r) = self.selfs.renderer.as_mut() {
            // As sent: the renderer holds what the provider's session holds.
            r.push_user(&text);
        }
        let protocol = self.flush_protocol();
        let run = match self
            .selfs
            .backend
            .run(TurnInput::text(text), &protocol)
            .await
        {
            Ok(run) => run,
            Err(e) => {
                self.selfs.broken = true;
                self.selfs.collect_events();
                let message = format!("the Self session failed: {e}");
                self.host
                    .store
                    .finish_brief(
                        &self.mind.id,
                        token,
                        brief.seq,
                        BriefStatus::Failed,
                        &message,
                        now,
                    )
                    .await?;
                return Err(e.into());
            }
        };
        let outcome = run.outcome;
        let stage = flush_stage_name(run.flush);
        if run.flush != FlushStage::NotNeeded {
            decision_text = format!("flush:{stage}");
        }
        let row = self.answered(Role::SelfRole, &outcome, now, &decision_text, "warm", true);
        let result = outcome_text(&outcome);
        if let Some(r) = self.selfs.renderer.as_mut() {
            r.reply(&result);
        }
        let mut transcript = vec![NewTranscriptItem {
            role: Role::SelfRole,
            segment,
            kind: TranscriptKind::Result,
            body: json!({"brief": brief.seq, "text": result}),
            created_at_ms: now,
        }];
        // A run the flush protocol ended has flushed (or failed to): its memory, or the
        // segment's tail when the answer lacks a pinned item, starts the next segment.
        let (status, verb) = match run.flush {
            FlushStage::NotNeeded => (BriefStatus::Done, "finished"),
            FlushStage::Flushed => (BriefStatus::Done, "stopped at the context ceiling"),
            FlushStage::Interrupted | FlushStage::Terminated => {
                (BriefStatus::Failed, "was cut off at the context ceiling")
            }
        };
        if run.flush != FlushStage::NotNeeded {
            let (memory, from) = match pinned_memory(&outcome.text) {
                Some(memory) => (memory, format!("flush:{stage}")),
                None => {
                    let mut tail = self.self_tail(segment).await?;
                    if !tail.is_empty() {
                        tail.push('\n');
                    }
                    tail.push_str(&result);
                    (
                        tail,
                        format!("tail (flush:{stage}: the answer missed a pinned item)"),
                    )
                }
            };
            transcript.push(NewTranscriptItem {
                role: Role::SelfRole,
                segment,
                kind: TranscriptKind::MemoryFlush,
                body: json!({"memory": memory, "from": from, "stage": stage}),
                created_at_ms: now,
            });
            self.selfs.flushed_memory = Some(memory);
        }
        let record = TurnRecord {
            turn_key: Some(format!("self-{}-brief-{}", self.mind.id, brief.seq)),
            transcript,
            ledger: vec![row],
            ..TurnRecord::default()
        };
        self.host
            .store
            .record_turn(&self.mind.id, token, &record)
            .await?;
        if run.flush == FlushStage::NotNeeded {
            self.bind_session(Role::SelfRole, token).await?;
        }
        self.host
            .store
            .finish_brief(&self.mind.id, token, brief.seq, status, &result, now)
            .await?;
        // The result reaches the Persona as a delivery; the brief's seq makes it idempotent.
        let excerpt: String = result.chars().take(2_000).collect();
        self.host
            .store
            .post_delivery(
                &self.mind.id,
                &NewDelivery {
                    room: SELF_ROOM.to_string(),
                    sender: "self".to_string(),
                    is_direct: true,
                    to_you: true,
                    text: format!("Self run {} {verb}: {excerpt}", brief.seq),
                    source_id: format!("self-brief-{}", brief.seq),
                    received_at_ms: now,
                    context: Vec::new(),
                },
            )
            .await?;
        self.host.signals.wake(&self.mind.id);
        self.host.signals.outbox.notify_waiters();
        Ok(Step::SelfTurn { brief: brief.seq })
    }

    /// Asks the Self to flush its memory; falls back to the previous segment's tail verbatim when
    /// a pinned item is missing.
    pub(super) async fn flush_self(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<String, RuntimeError> {
        let segment = self.selfs.segment.unwrap_or(0);
        let outcome = self
            .selfs
            .backend
            .turn(TurnInput::text(SELF_FLUSH_PROMPT))
            .await;
        let (memory, how, ledger) = match outcome {
            Ok(o) => {
                let mut row = self.ledger_row(&self.selfs, &o, now, "flush", "warm", true);
                self.selfs.attach_events(&mut row);
                match pinned_memory(&o.text) {
                    Some(memory) => (memory, "flush", vec![row]),
                    None => (
                        self.self_tail(segment).await?,
                        "tail (the flush missed a pinned item)",
                        vec![row],
                    ),
                }
            }
            Err(_) => {
                self.selfs.collect_events();
                (
                    self.self_tail(segment).await?,
                    "tail (the flush failed)",
                    Vec::new(),
                )
            }
        };
        self.host
            .store
            .record_turn(
                &self.mind.id,
                token,
                &TurnRecord {
                    transcript: vec![NewTranscriptItem {
                        role: Role::SelfRole,
                        segment,
                        kind: TranscriptKind::MemoryFlush,
                        body: json!({"memory": memory, "from": how}),
                        created_at_ms: now,
                    }],
                    ledger,
                    ..TurnRecord::default()
                },
            )
            .await?;
        Ok(memory)
    }

    pub(super) async fn self_tail(&self, segment: i64) -> Result<String, RuntimeError> {
        let tail = self
            .host
            .store
            .transcript_tail(&self.mind.id, Role::SelfRole, 6)
            .await?;
        Ok(tail
            .iter()
            .filter(|i| i.segment == segment)
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

    pub(super) async fn self_memory_from_briefs(&self) -> Result<String, RuntimeError> {
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

/// The memory in a flush's answer: one JSON object with every pinned key (goal, open tasks,
/// constraints, done markers, facts), or `None`.
pub(super) fn pinned_memory(answer: &str) -> Option<String> {
    let parsed = serde_json::from_str::<Value>(answer.trim()).ok()?;
    let pinned = ["goal", "open_tasks", "constraints", "done", "facts"];
    pinned
        .iter()
        .all(|k| parsed.get(k).is_some())
        .then(|| parsed.to_string())
}

/// The ledger's name of a flush stage.
pub(super) fn flush_stage_name(stage: FlushStage) -> &'static str {
    match stage {
        FlushStage::NotNeeded => "not_needed",
        FlushStage::Flushed => "flushed",
        FlushStage::Interrupted => "interrupted",
        FlushStage::Terminated => "terminated",
    }
}
