//! Segments: opening one, resuming one after a new lease (the renderer rebuilt from the
//! transcript), and binding the provider session to the transcript.

use super::attempt::{ASKED, UNASKED};
use super::prompts::COMPACT_REASON;
use super::session::{Bound, Starting};
use super::{MindRunner, RuntimeError};
use crate::crash_points::CrashPoint;
use muninn_backend::{Backend, SessionEvent, SessionSpec};
use muninn_core::ledger::ForcedStart;
use muninn_core::money::Tokens;
use muninn_core::render::{Layers, Renderer};
use muninn_core::tokenize::count;
use muninn_store::{FencingToken, NewSegment, Role, TranscriptItem, TranscriptKind};
use serde_json::Value;
use std::collections::BTreeSet;

impl<B: Backend> MindRunner<B> {
    /// The layers as they are now: doctrine and persona state re-read (an edit shows up as a
    /// notice), campaigns from the configuration, memory as selected at segment start.
    pub(super) fn layers(&self, memory: String) -> Result<Layers, RuntimeError> {
        let doctrine = self
            .mind
            .read_doctrine()
            .map_err(|e| RuntimeError::Config(format!("mind {}: doctrine: {e}", self.mind.id)))?;
        let persona = match self.mind.read_persona_state().map_err(|e| {
            RuntimeError::Config(format!("mind {}: persona state: {e}", self.mind.id))
        })? {
            Some(state) => serde_json::to_string_pretty(&state).unwrap_or_default(),
            None => format!("{{\"name\": {:?}}}", self.mind.display_name()),
        };
        let campaigns = self
            .mind
            .campaigns
            .iter()
            .map(|c| format!("{}: {}", c.slug, c.title))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Layers {
            tools: Vec::new(),
            doctrine,
            persona,
            campaigns,
            memory,
        })
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
        // Each word once, whatever its case (the search folds ASCII case): `dedup` after the
        // sort caught only neighbours, and "alpha bravo alpha" searched "alpha" twice and never
        // got to a third word. The sort is stable: of equally long words, the first said first.
        let mut said = BTreeSet::new();
        words.retain(|w| said.insert(w.to_ascii_lowercase()));
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
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

    /// The session spec of a role's segment rendered by `renderer`.
    pub(super) fn spec_for(&self, role: Role, renderer: &Renderer) -> SessionSpec {
        SessionSpec {
            model: self.mind.model.clone(),
            system: renderer
                .rendered()
                .system
                .into_iter()
                .map(|b| b.text)
                .collect(),
            // The Self's read-only tools when the host drives its runs as tool loops.
            tools: match role {
                Role::SelfRole if matches!(self.self_tools(), Ok(Some(_))) => {
                    super::tools::WorkspaceTools::specs()
                }
                _ => Vec::new(),
            },
            output_schema: (role == Role::Persona).then(|| self.persona_schema.clone()),
            system_ttl: self.mind.head_ttl,
            conversation_ttl: self.mind.tail_ttl,
            max_tokens: self.mind.max_output_tokens,
        }
    }

    /// A renderer on the current layers with `memory`, and the session spec it renders.
    pub(super) fn renderer_on(
        &self,
        role: Role,
        memory: String,
    ) -> Result<(Renderer, SessionSpec), RuntimeError> {
        let layers = self.layers(memory)?;
        let renderer = Renderer::new(layers, self.mind.head_ttl, self.mind.tail_ttl)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let spec = self.spec_for(role, &renderer);
        Ok((renderer, spec))
    }

    /// Stores a role's new segment row — what it was rehydrated with, why, its memory layer and
    /// its spec's digest (a restarted host resumes it only under the same spec) — and returns
    /// its number.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn store_segment(
        &self,
        token: FencingToken,
        role: Role,
        now: i64,
        rehydration: Tokens,
        reason: &str,
        memory: String,
        spec: &SessionSpec,
    ) -> Result<i64, RuntimeError> {
        let segment = self
            .host
            .store
            .start_segment(
                &self.mind.id,
                token,
                &NewSegment {
                    role,
                    started_at_ms: now,
                    rehydration_tokens: rehydration as i64,
                    reason: reason.to_string(),
                    session_id: None,
                    memory: Some(memory),
                    spec_digest: Some(spec_digest(spec)),
                },
            )
            .await?;
        Ok(segment.number)
    }

    /// Opens a new segment for a role: a segment row, a renderer on the current layers, a fresh
    /// provider session. `forced` says why, when the decider did not choose it; the segment's
    /// first ledger row carries its head and rehydration.
    pub(super) async fn open_segment(
        &mut self,
        role: Role,
        token: FencingToken,
        now: i64,
        memory: String,
        reason: &str,
        forced: Option<ForcedStart>,
    ) -> Result<(), RuntimeError> {
        let (renderer, spec) = self.renderer_on(role, memory.clone())?;
        let rehydration: Tokens = spec.system.iter().map(|t| count(t)).sum();
        let number = self
            .store_segment(token, role, now, rehydration, reason, memory, &spec)
            .await?;
        self.host.crash_points.reached(CrashPoint::SegmentStored);
        let start = self.segment_start(role, &renderer, forced);
        self.estimate_rehydration(role, &renderer);
        let session = self.session_mut(role);
        // A fresh segment is never seeded from an earlier conversation (a resume that did not
        // go through may have left a seed behind).
        session.backend.set_seed(None);
        let started = session.backend.start(spec).await;
        session.collect_events();
        started?;
        session.begin_segment(
            renderer,
            number,
            Starting {
                start,
                measured: false,
            },
        );
        session.launched = start;
        session.resume = None;
        Ok(())
    }

    /// Continues the role's open segment after a new lease, through the provider session
    /// handle stored with it: the renderer is rebuilt from the segment's start layers (its
    /// stored memory, the doctrine and persona state as they are now) with the segment's
    /// transcript replayed, and the backend resumes (with `fork`, a copy of) the provider
    /// session — or, when the handle no longer verifies over that transcript, starts a fresh
    /// provider session seeded with the transcript rendered. Returns `false`, changing nothing,
    /// when the segment cannot be continued: a backend that binds no sessions, no handle, a
    /// segment stored before migration 4, a compacted or flushed segment, a transcript that
    /// ends in a turn never answered, or a session spec that differs from the segment's (an
    /// edited doctrine or persona state, another model or reply schema).
    pub(super) async fn resume_segment(
        &mut self,
        role: Role,
        fork: bool,
        now: i64,
    ) -> Result<bool, RuntimeError> {
        if !self.session_mut(role).backend.binds_sessions() {
            return Ok(false);
        }
        let Some(segment) = self.host.store.current_segment(&self.mind.id, role).await? else {
            return Ok(false);
        };
        let (Some(handle), Some(memory), Some(digest)) = (
            segment.session_id.clone(),
            segment.memory.clone(),
            segment.spec_digest.clone(),
        ) else {
            return Ok(false);
        };
        // A compacted segment's provider session runs under the spec from before the
        // compaction, which the row does not hold.
        if segment.ended_at_ms.is_some() || segment.reason == COMPACT_REASON {
            return Ok(false);
        }
        let (renderer, spec) = self.renderer_on(role, memory)?;
        if spec_digest(&spec) != digest {
            return Ok(false);
        }
        let launched = self.segment_start(role, &renderer, None);
        let from = self.session_mut(role).bind_from;
        let (items, next) = self.segment_transcript(role, segment.number, from).await?;
        if let Some(first) = items.first() {
            self.session_mut(role).bind_from = first.seq;
        }
        let Some(renderer) = replay(role, renderer, &items) else {
            return Ok(false);
        };
        let bytes: Vec<Vec<u8>> = items.iter().map(binding_bytes).collect();
        self.estimate_rehydration(role, &renderer);
        let session = self.session_mut(role);
        if !session.backend.resume_session(&handle, &bytes, fork) {
            return Ok(false);
        }
        session.backend.set_seed(Some(renderer.conversation_text()));
        let started = session.backend.start(spec).await;
        session.collect_events();
        started?;
        // The segment continues: no new segment on the ledger (a fresh provider session seeded
        // from the transcript reports its seeding among the backend's session events), and the
        // accounting, read back from the ledger, carries on where the last holder left it — its
        // requests, reads, and the cache the provider still holds.
        session.renderer = Some(renderer);
        session.segment = Some(segment.number);
        session.starting = None;
        session.broken = false;
        session.launched = launched;
        session.bound = Some(Bound {
            segment: segment.number,
            items: bytes,
            next,
        });
        session.pending_events.push(SessionEvent::ResumedSegment {
            segment: segment.number,
            fork,
            items: items.len() as u64,
            at_ms: now,
        });
        Ok(true)
    }

    /// The role's transcript items of `segment` from seq `from` on, oldest first, and the seq
    /// after the last item read (`from` when there was none).
    pub(super) async fn segment_transcript(
        &self,
        role: Role,
        segment: i64,
        mut from: i64,
    ) -> Result<(Vec<TranscriptItem>, i64), RuntimeError> {
        const PAGE: i64 = 500;
        let mut items = Vec::new();
        loop {
            let page = self
                .host
                .store
                .transcript_range(&self.mind.id, role, from, None, PAGE)
                .await?;
            let full = page.len() as i64 == PAGE;
            if let Some(last) = page.last() {
                from = last.seq + 1;
            }
            items.extend(page.into_iter().filter(|i| i.segment == segment));
            if !full {
                return Ok((items, from));
            }
        }
    }

    /// Stores the role's session handle with its segment, bound to the segment's transcript as
    /// it now stands, so a restarted runner can tell whether the provider's copy of the
    /// conversation is still muninn's. A no-op for backends that bind nothing. The transcript is
    /// append-only and this runner its only writer under the lease, so the items bound last time
    /// still stand: only the ones after them are read.
    pub(super) async fn bind_session(
        &mut self,
        role: Role,
        token: FencingToken,
    ) -> Result<(), RuntimeError> {
        let session = self.session_mut(role);
        let Some(segment) = session.segment else {
            return Ok(());
        };
        if !session.backend.binds_sessions() || session.broken {
            return Ok(());
        }
        let mut bound = match session.bound.take() {
            Some(bound) if bound.segment == segment => bound,
            _ => Bound {
                segment,
                items: Vec::new(),
                next: session.bind_from,
            },
        };
        let (items, next) = self.segment_transcript(role, segment, bound.next).await?;
        let session = self.session_mut(role);
        if bound.items.is_empty()
            && let Some(first) = items.first()
        {
            session.bind_from = first.seq;
        }
        bound.items.extend(items.iter().map(binding_bytes));
        bound.next = next;
        let handle = session.backend.session_handle(&bound.items);
        session.bound = Some(bound);
        if let Some(handle) = handle {
            self.host
                .store
                .set_segment_session(&self.mind.id, token, role, segment, &handle)
                .await?;
        }
        Ok(())
    }
}

/// A transcript item's canonical bytes for a session binding: its seq, kind and body (JSON with
/// sorted keys, as `serde_json` writes a `Value`), so an item edited, dropped, reordered or
/// re-kinded no longer verifies.
pub(super) fn binding_bytes(item: &muninn_store::TranscriptItem) -> Vec<u8> {
    let mut bytes = format!("{}\n{}\n", item.seq, item.kind.as_str()).into_bytes();
    // Serialising a `Value` cannot fail; an empty body would only make the binding not verify.
    bytes.extend(serde_json::to_vec(&item.body).unwrap_or_default());
    bytes
}

/// A digest of a session spec (every field: model, system layers, tools, reply schema, TTLs,
/// output limit), kept with the segment so a restarted host resumes it only while the spec it
/// would send now is the same. Not a security boundary (the handle's HMAC is): a change
/// detector.
pub(super) fn spec_digest(spec: &SessionSpec) -> String {
    // Serialising a spec of strings and JSON values cannot fail.
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    format!("{:016x}", muninn_core::cache::hash_bytes(&bytes))
}

/// Whether a renderer's shown layers differ from its start layers (a notice changed them).
pub(super) fn shown_changed(r: &Renderer) -> bool {
    let (shown, base) = (r.shown(), r.base());
    shown.doctrine != base.doctrine
        || shown.persona != base.persona
        || shown.campaigns != base.campaigns
        || shown.tools != base.tools
}

/// Rebuilds a segment's renderer from its transcript: each user message and reply as sent,
/// each turn's shown history keys and noticed layers. Returns the renderer, or `None` when the
/// transcript holds something a renderer cannot replay — a
/// flushed Self segment (it ends there), an item of a kind this build does not write into a
/// conversation, or a last turn never answered (the provider may or may not have it).
pub(super) fn replay(
    role: Role,
    mut renderer: Renderer,
    items: &[TranscriptItem],
) -> Option<Renderer> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let mut awaiting_reply = false;
    for item in items {
        let body = &item.body;
        match (role, &item.kind) {
            (Role::Persona, TranscriptKind::Delivery) => {
                renderer.push_user(&text(&body["text"])?);
                let keys = body["seen"].as_array().map_or(Vec::new(), |keys| {
                    keys.iter().filter_map(text).collect::<Vec<_>>()
                });
                renderer.mark_shown(keys);
                if let Some(shown) = body.get("shown") {
                    renderer.restore_shown(serde_json::from_value(shown.clone()).ok()?);
                }
                awaiting_reply = true;
            }
            (Role::Persona, TranscriptKind::Reply) => {
                renderer.reply(&body.to_string());
                awaiting_reply = false;
            }
            // A failed attempt: the provider answered nothing; its delivery stays unanswered
            // (the CLI's session holds its line too) and the retry follows.
            (Role::Persona, TranscriptKind::Notice) if body.get("attempt_failed").is_some() => {}
            (Role::Persona, TranscriptKind::Notice) if body.get("failure").is_some() => {
                let reply = match &body["reply"] {
                    Value::Null => text(&body["text"]).unwrap_or_default(),
                    v => v.to_string(),
                };
                renderer.reply(&reply);
                awaiting_reply = false;
                if let Some(retry) = body.get("retry") {
                    renderer.push_user(&text(retry)?);
                    awaiting_reply = true;
                }
            }
            (Role::SelfRole, TranscriptKind::Brief) => {
                renderer.push_user(&text(&body["text"])?);
                awaiting_reply = true;
            }
            // The mark that the brief was about to be sent, or that it never was (`attempt.rs`):
            // not a message.
            (Role::SelfRole, TranscriptKind::Notice)
                if body.get(ASKED).is_some() || body.get(UNASKED).is_some() => {}
            (Role::SelfRole, TranscriptKind::Result) => {
                renderer.reply(&text(&body["text"])?);
                awaiting_reply = false;
            }
            // A tool loop's reply and each result sent back, as the loop rendered them.
            (Role::SelfRole, TranscriptKind::ToolUse) => {
                renderer.reply(&body.to_string());
                awaiting_reply = false;
            }
            (Role::SelfRole, TranscriptKind::ToolResult) => {
                renderer.push_user(&text(&body["text"])?);
                awaiting_reply = true;
            }
            _ => return None,
        }
    }
    (!awaiting_reply).then_some(renderer)
}
