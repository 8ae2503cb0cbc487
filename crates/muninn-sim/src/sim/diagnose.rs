//! Cache diagnostics: a request with a `diagnostics` object (beta `cache-diagnosis-2026-04-07`;
//! the header is not required) opts in. The simulator keeps the request's shape under the
//! response's id (the newest [`super::SimConfig::max_recorded`] of them, holding no more
//! checkpoints in all than [`super::SimConfig::max_recorded_bytes`] holds, the newest always
//! kept: the request log's bounds) and compares the request with the shape of
//! `diagnostics.previous_message_id` by
//! [`muninn_anthropic::prompt::diverge`] — model, tools, system, then messages. A divergence is
//! answered as `diagnostics.cache_miss_reason` with its `cache_missed_input_tokens`; an unknown
//! previous id as `previous_message_not_found`; no divergence, or no previous id, as no
//! `diagnostics` at all. Streaming carries it on `message_start`. The comparison is structural,
//! as the provider's is: it says nothing of the TTL, which shows in the usage alone.

use super::Simulator;
use muninn_anthropic::prompt::{PromptShape, diverge};
use muninn_anthropic::wire::{CacheMissReason, Diagnostics, DiagnosticsRequest};
use muninn_core::ledger::ProviderMiss;
use muninn_core::miss::ProviderMissReason;
use std::collections::{HashMap, VecDeque};

/// The shapes of the requests that opted into diagnostics, by response id, the newest kept.
#[derive(Debug, Default)]
pub(super) struct Fingerprints {
    shapes: HashMap<String, PromptShape>,
    order: VecDeque<String>,
    /// The checkpoints the kept shapes hold, in all.
    checkpoints: usize,
}

impl Fingerprints {
    /// Keeps `shape` under `id`, then forgets the oldest shapes while more than `max` are kept
    /// or they hold more than `max_checkpoints` (a shape has a checkpoint per block of its
    /// request, so a count alone does not bound the memory).
    fn keep(&mut self, id: &str, shape: PromptShape, max: usize, max_checkpoints: usize) {
        self.checkpoints += shape.checkpoints.len();
        if let Some(replaced) = self.shapes.insert(id.to_string(), shape) {
            self.checkpoints -= replaced.checkpoints.len();
        } else {
            self.order.push_back(id.to_string());
        }
        while self.order.len() > max || (self.checkpoints > max_checkpoints && self.order.len() > 1)
        {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(forgotten) = self.shapes.remove(&old) {
                self.checkpoints -= forgotten.checkpoints.len();
            }
        }
    }
}

impl Simulator {
    /// Compares a request that opted into diagnostics with its previous message's shape, then
    /// keeps its own shape under `id` for the request that will name it.
    pub(super) fn diagnose(
        &self,
        asked: &DiagnosticsRequest,
        id: &str,
        shaped: PromptShape,
    ) -> (Option<Diagnostics>, Option<ProviderMiss>) {
        let Ok(mut fingerprints) = self.fingerprints.lock() else {
            return (None, None);
        };
        let answer = asked.previous_message_id.as_deref().map(|previous| {
            let (kind, missed) = match fingerprints.shapes.get(previous) {
                None => (ProviderMissReason::PreviousMessageNotFound, None),
                Some(before) => match diverge(before, &shaped) {
                    None => (ProviderMissReason::NoDivergence, None),
                    Some((level, tokens)) => {
                        (ProviderMissReason::of_level(Some(level)), Some(tokens))
                    }
                },
            };
            let diagnostics = (kind != ProviderMissReason::NoDivergence).then(|| Diagnostics {
                cache_miss_reason: Some(CacheMissReason {
                    kind: kind.as_str().to_string(),
                    cache_missed_input_tokens: missed,
                }),
            });
            let recorded = ProviderMiss {
                reason: kind,
                missed_tokens: missed,
            };
            (diagnostics, recorded)
        });
        let max_checkpoints = self.config.max_recorded_bytes
            / std::mem::size_of::<muninn_core::cache::Checkpoint>().max(1);
        fingerprints.keep(id, shaped, self.config.max_recorded.max(1), max_checkpoints);
        match answer {
            Some((diagnostics, recorded)) => (diagnostics, Some(recorded)),
            None => (None, None),
        }
    }
}
