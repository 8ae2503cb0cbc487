//! A Persona turn: batch, decide, render, record the delivery, ask, validate, commit.

#[allow(unused_imports)]
use super::*;

/// The seed's `next_batch`: the oldest prefix of the pending deliveries that shares a
/// conversation — all public-room deliveries together, or one DM room alone — cut at the first
/// delivery that switches between public and direct or, for DMs, changes room.
pub fn next_batch(pending: &[Delivery]) -> &[Delivery] {
    &pending[..render::next_batch_len(pending, |d| (d.is_direct, d.room.as_str()))]
}

impl<B: Backend> MindRunner<B> {
    pub(super) async fn persona_turn(
        &mut self,
        token: FencingToken,
        now: i64,
        batch: Vec<Delivery>,
    ) -> Result<Step, RuntimeError> {
        let senders: BTreeSet<String> = batch.iter().map(|d| d.sender.clone()).collect();
        let max_seq = batch.iter().map(|d| d.seq).max().unwrap_or(0);
        let first_seq = batch.iter().map(|d| d.seq).min().unwrap_or(0);
        let batch_id = format!("{}-{}-{}", self.mind.id, first_seq, max_seq);
        let input = render::TurnInput {
            deliveries: batch
                .iter()
                .map(|d| render::Delivery {
                    id: d.source_id.clone(),
                    room: d.room.clone(),
                    sender: d.sender.clone(),
                    is_direct: d.is_direct,
                    to_you: d.to_you,
                    text: d.text.clone(),
                    // A line without an id cannot be recognised when a later delivery repeats it;
                    // its text stands in for the id, so an identical line is shown once.
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
                })
                .collect(),
            status: String::new(),
            text: String::new(),
        };

        // A new lease: continue the open segment through its stored handle, if it lines up.
        if self.persona.broken
            && let Some(fork) = self.persona.resume.take()
        {
            self.resume_segment(Role::Persona, fork, now).await?;
        }
        // The decider: append, or refresh into a new segment.
        // New tokens this turn: the messages, and their context lines (an upper bound: lines the
        // segment has shown already are not repeated).
        let delta: Tokens = batch
            .iter()
            .map(|d| {
                count(&d.text) + 12 + d.context.iter().map(|l| count(&l.text) + 8).sum::<Tokens>()
            })
            .sum();
        let mut decision: Option<Decision> = None;
        let (state, reason) = if self.persona.renderer.is_none() || self.persona.broken {
            (
                "cold",
                if self.persona.segment.is_none() {
                    "start"
                } else {
                    "rebuilt from the transcript"
                },
            )
        } else {
            let view = self.view(&self.persona);
            let d = decide(
                self.policy,
                &view,
                Event::Arrival {
                    boundary: true,
                    delta,
                },
                now,
            );
            decision = Some(d);
            (if view.warm(now) { "warm" } else { "cold" }, "refresh")
        };
        if decision.is_none_or(|d| d.action == Action::Refresh) {
            // A refresh the decider chose may compact the live session in place; a cold start
            // or a rebuild after a failure always starts from the layers.
            let compacted = decision.is_some()
                && self.mind.refresh == RefreshMode::Compact
                && self.compact_persona(token, now).await?;
            if !compacted {
                let texts: Vec<&str> = batch.iter().map(|d| d.text.as_str()).collect();
                let memory = self.select_memory(&senders, &texts).await?;
                self.open_segment(Role::Persona, token, now, memory, reason)
                    .await?;
            }
        }
        let decision_text = decision.map_or_else(
            || format!("start:{reason}"),
            |d| format!("{}:{:?}", d.action.as_str(), d.reason),
        );
        let layers = self.layers(String::new())?;
        let Some(renderer) = self.persona.renderer.as_mut() else {
            return Err(RuntimeError::Config("no persona renderer".to_string()));
        };
        // Only this turn's user message is sent (the provider's session holds the rest), so the
        // whole request is not rendered.
        let memory = renderer.base().memory.clone();
        let user_text = renderer
            .append_turn(&Layers { memory, ..layers }, &input)
            .blocks
            .last()
            .map(|b| b.text.clone())
            .unwrap_or_default();
        let segment = self.persona.segment.unwrap_or(0);
        // What a rebuilt renderer needs to replay this turn (see `replay`): the history keys it
        // showed and, after a notice, the layers it showed.
        let mut delivery_body = json!({
            "batch": batch_id,
            "seqs": batch.iter().map(|d| d.seq).collect::<Vec<_>>(),
            "text": user_text,
            "seen": Renderer::shown_keys(&input),
        });
        if shown_changed(renderer) {
            delivery_body["shown"] = serde_json::to_value(renderer.shown()).unwrap_or_default();
        }

        // The transcript first: what the Mind is shown is durable before it is acted on.
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role: Role::Persona,
                    segment,
                    kind: TranscriptKind::Delivery,
                    body: delivery_body,
                    created_at_ms: now,
                }],
            )
            .await?;

        let mut ledger = Vec::new();
        let mut outcome = match self.persona.backend.turn(TurnInput::text(user_text)).await {
            Ok(o) => o,
            Err(e) => {
                // A backend that keeps its own durable session (the CLI) relaunches it by itself
                // on the next turn (`--resume`) when its child died or hung: the session then
                // holds this turn's user line unanswered, as the transcript holds the delivery,
                // and the retry appends the batch again on both sides, so the segment (and its
                // cached prefix) continues. Any other failure may have left the provider's
                // session out of step with the renderer: rebuild next time.
                let relaunches = self.persona.backend.binds_sessions()
                    && matches!(e, BackendError::Transport(_));
                if !relaunches {
                    self.persona.broken = true;
                }
                self.persona.collect_events();
                return Err(e.into());
            }
        };
        ledger.push(self.answered(Role::Persona, &outcome, now, &decision_text, state, true));
        let mut verdict = outcome
            .structured
            .as_ref()
            .ok_or_else(|| "no structured reply".to_string())
            .and_then(|v| validate_reply(&self.mind, &batch, v));
        // The invalid first reply and the retry prompt, when a retry was answered: the
        // provider's session holds both, so the transcript does too.
        let mut retried: Option<Value> = None;
        if let Err(problem) = &verdict {
            // Answered by policy: one retry with the reason, then a recorded failure.
            let retry = format!(
                "Your reply was not valid ({problem}). Reply again, following the schema exactly."
            );
            let now2 = self.host.clock.now_ms();
            match self
                .persona
                .backend
                .turn(TurnInput::text(retry.clone()))
                .await
            {
                Ok(second) => {
                    if let Some(r) = self.persona.renderer.as_mut() {
                        r.reply(&outcome_text(&outcome));
                        // The retry prompt goes as sent, with no notices: the renderer holds
                        // exactly what the provider's session holds.
                        r.push_user(&retry);
                    }
                    retried = Some(json!({
                        "failure": "invalid reply",
                        "problem": problem,
                        "reply": outcome.structured,
                        "text": outcome.text,
                        "retry": retry,
                    }));
                    let row = self.answered(
                        Role::Persona,
                        &second,
                        now2,
                        "retry_invalid_reply",
                        "warm",
                        false,
                    );
                    ledger.push(row);
                    verdict = second
                        .structured
                        .as_ref()
                        .ok_or_else(|| "no structured reply".to_string())
                        .and_then(|v| validate_reply(&self.mind, &batch, v));
                    outcome = second;
                }
                Err(e) => {
                    self.persona.broken = true;
                    self.persona.collect_events();
                    verdict = Err(format!("retry failed: {e}"));
                }
            }
        }
        if let Some(r) = self.persona.renderer.as_mut() {
            r.reply(&outcome_text(&outcome));
        }

        let mut record = TurnRecord {
            turn_key: Some(format!("persona-{batch_id}-{}", segment)),
            ack_through: Some(max_seq),
            ledger,
            ..TurnRecord::default()
        };
        let valid = verdict.is_ok();
        if let Some(body) = retried {
            record.transcript.push(NewTranscriptItem {
                role: Role::Persona,
                segment,
                kind: TranscriptKind::Notice,
                body,
                created_at_ms: now,
            });
        }
        match verdict {
            Ok(reply) => {
                record.transcript.push(NewTranscriptItem {
                    role: Role::Persona,
                    segment,
                    kind: TranscriptKind::Reply,
                    body: outcome.structured.clone().unwrap_or(Value::Null),
                    created_at_ms: now,
                });
                for (index, say) in reply.say.iter().enumerate() {
                    record.outbox.push(NewOutboxMessage {
                        request_id: format!("{batch_id}-{index}"),
                        room: say.room.clone(),
                        text: say.text.clone(),
                        created_at_ms: now,
                    });
                }
                for note in reply.remember.iter().take(MEMORY_NOTES_PER_REPLY) {
                    // `about` is limited to the batch's senders and the operators' ids the model
                    // named; anything else is dropped rather than trusted.
                    let about: Vec<String> = note
                        .about
                        .iter()
                        .filter(|a| senders.contains(*a))
                        .cloned()
                        .collect();
                    record.memory.push(NewMemoryNote {
                        about,
                        salience: note.salience.clamp(0, 10),
                        text: note.text.clone(),
                        created_at_ms: now,
                        source: batch_id.clone(),
                    });
                }
                if let Some(run) = reply.start_self_run {
                    record.briefs.push(NewBrief {
                        text: run.brief,
                        origin: BriefOrigin::Persona,
                        created_at_ms: now,
                    });
                }
            }
            Err(problem) => {
                record.transcript.push(NewTranscriptItem {
                    role: Role::Persona,
                    segment,
                    kind: TranscriptKind::Notice,
                    body: json!({"failure": "invalid reply", "problem": problem, "reply": outcome.structured, "text": outcome.text}),
                    created_at_ms: now,
                });
            }
        }
        match self
            .host
            .store
            .record_turn(&self.mind.id, token, &record)
            .await
        {
            Ok(receipt) => {
                self.bind_session(Role::Persona, token).await?;
                self.host.signals.outbox.notify_waiters();
                if !record.briefs.is_empty() {
                    self.host.signals.wake(&self.mind.id);
                }
                Ok(Step::PersonaTurn {
                    acked_through: receipt.ack_position,
                    valid,
                })
            }
            Err(StoreError::TurnAlreadyRecorded { .. }) => Ok(Step::PersonaTurn {
                acked_through: max_seq,
                valid,
            }),
            Err(e) => {
                self.persona.broken = true;
                Err(e.into())
            }
        }
    }

    /// A Persona refresh by compaction (`refresh = "compact"`): the provider summarises the
    /// session in place. The compaction's request is ledgered on the segment it summarised
    /// (decision `compact`, its own usage and cost); a new segment (reason `compact`) then
    /// continues the same provider session, its renderer restarted on the summary as memory.
    /// Returns `false` — the caller rebuilds, the next row carries a `compact_failed` event —
    /// when the backend cannot compact ([`BackendError::Invalid`]) or the compaction failed (the
    /// session is then rebuilt, which never depends on the provider's copy).
    pub(super) async fn compact_persona(
        &mut self,
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
                // `Invalid` is also what the CLI's `/compact` ends in when its summary request
                // failed (it answers in text, no boundary): either way the configured refresh did
                // not happen, which the rebuilt turn's row says.
                if !matches!(e, BackendError::Invalid(_)) {
                    tracing::warn!(mind = %self.mind.id, error = %e, "compaction failed; rebuilding");
                }
                self.persona.collect_events();
                self.persona
                    .pending_events
                    .push(json!({"type": "compact_failed", "error": e.to_string()}));
                return Ok(false);
            }
        };
        let mut row = self.ledger_row(&self.persona, &outcome, now, "compact", "warm", true);
        self.persona.attach_events(&mut row);
        self.host
            .store
            .append_ledger(&self.mind.id, token, &[row])
            .await?;
        let summary = outcome.text.clone();
        let layers = self.layers(summary.clone())?;
        let renderer = Renderer::new(layers, self.mind.head_ttl, self.mind.tail_ttl)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let spec = self.spec_for(Role::Persona, &renderer);
        // The session continues from the system it was launched with (the CLI keeps its launch
        // flags across a compaction) and the summary: that is what the new segment was
        // rehydrated with, and what its reads are measured against (not the summary alone, which
        // would count the whole head as growth and bring the next refresh early).
        let rehydration = self.persona.launched_system + count(&summary);
        let segment = self
            .host
            .store
            .start_segment(
                &self.mind.id,
                token,
                &NewSegment {
                    role: Role::Persona,
                    started_at_ms: now,
                    rehydration_tokens: rehydration as i64,
                    reason: COMPACT_REASON.to_string(),
                    session_id: None,
                    memory: Some(summary.clone()),
                    spec_digest: Some(spec_digest(&spec)),
                },
            )
            .await?;
        self.host
            .store
            .append_transcript(
                &self.mind.id,
                token,
                &[NewTranscriptItem {
                    role: Role::Persona,
                    segment: segment.number,
                    kind: TranscriptKind::MemoryFlush,
                    body: json!({"memory": summary, "from": "compact"}),
                    created_at_ms: now,
                }],
            )
            .await?;
        let s = &mut self.persona;
        s.begin_segment(renderer, segment.number, rehydration);
        // The session now starts from its system and the summary.
        s.prefix_tokens = rehydration;
        s.last_request_ms = now;
        s.warm_until_ms = Some(now + self.mind.tail_ttl.millis());
        s.head_warm_until_ms = Some(now + self.mind.head_ttl.millis());
        Ok(true)
    }

    /// Memory for a new segment (seed A6): notes relevant to the batch (matching its most
    /// distinctive words), about its senders, then the newest — within the configured token
    /// budget, most relevant first.
    pub(super) async fn select_memory(
        &self,
        senders: &BTreeSet<String>,
        texts: &[&str],
    ) -> Result<String, RuntimeError> {
        let store = &self.host.store;
        let mut notes = Vec::new();
        let mut words: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
            .filter(|w| w.chars().count() >= 5)
            .collect();
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        words.dedup();
        for word in words.iter().take(3) {
            notes.extend(store.memory_search(&self.mind.id, word, 4).await?);
        }
        for sender in senders {
            notes.extend(store.memory_about(&self.mind.id, sender, 6).await?);
        }
        notes.extend(store.memory_newest(&self.mind.id, 16).await?);
        let mut seen = BTreeSet::new();
        let mut out = String::new();
        let mut tokens = 0;
        for note in notes {
            if !seen.insert(note.id) {
                continue;
            }
            let line = format!("- ({}) {}\n", note.about.join(", "), note.text);
            let t = count(&line);
            if tokens + t > self.mind.memory_tokens {
                continue;
            }
            tokens += t;
            out.push_str(&line);
        }
        Ok(out)
    }
}

pub(super) fn outcome_text(outcome: &TurnOutcome) -> String {
    match &outcome.structured {
        Some(v) => v.to_string(),
        None => outcome.text.clone(),
    }
}
