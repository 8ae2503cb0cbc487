//! `[[mind]]`: one Mind — its model, doctrine, persona state, rooms, campaigns, cache policy,
//! spend cap and Self session — and the reads of its doctrine and persona state files.

use super::{MindMatrixConfig, SelfSessionConfig};
use muninn_core::cache::Ttl;
use muninn_core::decide::Policy;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::str::FromStr;

/// How a Mind's Persona refreshes its session (seed: the decider's `Refresh`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefreshMode {
    /// A fresh provider session rehydrated from the doctrine, persona state and memory.
    #[default]
    Rebuild,
    /// The provider summarises the session in place (Claude Code `/compact`) and the session
    /// continues from the summary; a backend that cannot compact rebuilds instead.
    Compact,
}

/// A campaign in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Campaign {
    /// Its slug (the reply schema's campaign enum).
    pub slug: String,
    /// Its title.
    pub title: String,
}

/// One Mind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MindConfig {
    /// Stable id (URL-safe).
    pub id: String,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// The model id.
    #[serde(default = "default_model")]
    pub model: String,
    /// Doctrine files, concatenated in order (re-read at each segment start; an edit inside a
    /// segment is appended as a notice).
    #[serde(default)]
    pub doctrine: Vec<PathBuf>,
    /// Doctrine given inline (after the files).
    #[serde(default)]
    pub doctrine_text: Option<String>,
    /// The persona state file (JSON).
    #[serde(default)]
    pub persona_state: Option<PathBuf>,
    /// The persona state given inline (a table), instead of a file.
    #[serde(default)]
    pub persona_state_inline: Option<serde_json::Value>,
    /// Public rooms the Persona may speak in.
    #[serde(default)]
    pub rooms: Vec<String>,
    /// Campaigns in force.
    #[serde(default)]
    pub campaigns: Vec<Campaign>,
    /// The decider's policy (`ski-rental`, `predictive`, `never`, `rebuild`, `threshold:F`, …).
    #[serde(default = "default_policy")]
    pub policy: String,
    /// TTL of the head breakpoints (doctrine, persona).
    #[serde(default = "default_head_ttl")]
    #[schemars(with = "TtlSchema")]
    pub head_ttl: Ttl,
    /// TTL of the conversation tail.
    #[serde(default = "default_tail_ttl")]
    #[schemars(with = "TtlSchema")]
    pub tail_ttl: Ttl,
    /// Turns a segment holds before a voluntary refresh.
    #[serde(default = "default_min_segment")]
    pub min_segment: u32,
    /// The context ceiling in tokens (default: the model's window from the price table).
    #[serde(default)]
    pub ceiling_tokens: Option<u64>,
    /// Prefer refreshing at task boundaries (Self: between briefs; Persona: at idle).
    #[serde(default = "default_true")]
    pub refresh_at_task_boundaries: bool,
    /// The most memory (tokens) a new segment is rehydrated with.
    #[serde(default = "default_memory_tokens")]
    pub memory_tokens: u64,
    /// Spend cap per window, micro-dollars (none: no cap).
    #[serde(default)]
    pub spend_cap_micro_usd: Option<i64>,
    /// The spend window, seconds.
    #[serde(default = "default_window_s")]
    pub spend_window_s: u64,
    /// Persona turns per wake.
    #[serde(default = "default_turns_per_wake")]
    pub turns_per_wake: u32,
    /// Output tokens a reply may have.
    #[serde(default = "default_max_tokens")]
    pub max_output_tokens: u64,
    /// How the Persona refreshes: `rebuild` (a fresh session, the default) or `compact` (the
    /// provider summarises the session in place).
    #[serde(default)]
    pub refresh: RefreshMode,
    /// This Mind's Self session, over `[backend.self_session]`.
    #[serde(default)]
    pub self_session: SelfSessionConfig,
    /// The Mind's Matrix account; its `rooms` are then Matrix rooms (needs `[matrix]`).
    #[serde(default)]
    pub matrix: Option<MindMatrixConfig>,
}
pub(super) fn default_model() -> String {
    "claude-opus-5-5".into()
}
pub(super) fn default_policy() -> String {
    "ski-rental".into()
}
pub(super) fn default_head_ttl() -> Ttl {
    Ttl::OneHour
}
pub(super) fn default_tail_ttl() -> Ttl {
    Ttl::FiveMinutes
}
pub(super) fn default_min_segment() -> u32 {
    4
}
fn default_true() -> bool {
    true
}
pub(super) fn default_memory_tokens() -> u64 {
    2_000
}
pub(super) fn default_window_s() -> u64 {
    86_400
}
pub(super) fn default_turns_per_wake() -> u32 {
    4
}
pub(super) fn default_max_tokens() -> u64 {
    2_048
}

// The schema of `Ttl`, which lives in `muninn-core` and stays free of schemars; only its
// schema is used.
/// A prompt-cache TTL: `"5m"` or `"1h"`.
#[derive(JsonSchema)]
#[schemars(rename = "Ttl")]
#[allow(dead_code)]
enum TtlSchema {
    /// The default 5-minute TTL.
    #[serde(rename = "5m")]
    FiveMinutes,
    /// The extended 1-hour TTL.
    #[serde(rename = "1h")]
    OneHour,
}
impl MindConfig {
    /// The name shown to people: `name`, or the id.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }

    /// The decider's policy. Validation guarantees it parses.
    pub fn parsed_policy(&self) -> Result<Policy, String> {
        Policy::from_str(&self.policy)
    }

    /// The doctrine as the Mind sees it now: the files in order, then the inline text, separated
    /// by blank lines. Read afresh on each call (the runtime calls it at each segment start).
    pub fn read_doctrine(&self) -> std::io::Result<String> {
        let mut parts = Vec::new();
        for path in &self.doctrine {
            parts.push(super::read_config_file(path)?.trim_end().to_owned());
        }
        if let Some(text) = &self.doctrine_text {
            parts.push(text.trim_end().to_owned());
        }
        Ok(parts.join("\n\n"))
    }

    /// The persona state now: the file's JSON, the inline table, or `None`.
    pub fn read_persona_state(&self) -> std::io::Result<Option<serde_json::Value>> {
        match (&self.persona_state, &self.persona_state_inline) {
            (Some(path), _) => {
                let text = super::read_config_file(path)?;
                serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            }
            (None, inline) => Ok(inline.clone()),
        }
    }
}
