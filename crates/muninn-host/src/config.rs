//! `muninn.toml`: what a host runs. Loaded and validated once at start; with no file, a built-in
//! demo Mind on the simulator.
//!
//! (Being completed: loading, validation, the demo default, the checked-in JSON Schema.)

use muninn_core::cache::Ttl;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the database file, the API token and child session homes live.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// The store: a `postgres://` URL, or a SQLite file path. Default: `<data_dir>/muninn.db`.
    #[serde(default)]
    pub database: Option<String>,
    /// Where the HTTP API listens. Loopback by default.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// A price table replacing the embedded one.
    #[serde(default)]
    pub prices: Option<PathBuf>,
    /// The model behind every Mind.
    #[serde(default)]
    pub backend: BackendConfig,
    /// The Minds this host runs.
    #[serde(default, rename = "mind")]
    pub minds: Vec<MindConfig>,
}

/// Which backend serves the Minds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// The in-process simulator (deterministic replies, usage from the cache model).
    Sim,
    /// The Anthropic Messages API.
    Anthropic,
}

/// The backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `sim` or `anthropic`. Default: `anthropic` when the credential variable is set, else `sim`.
    #[serde(default)]
    pub kind: Option<BackendKind>,
    /// The API base URL (default `https://api.anthropic.com`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable holding the API key (never the key itself).
    #[serde(default = "default_key_env")]
    pub api_key_env: String,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            kind: None,
            base_url: None,
            api_key_env: default_key_env(),
        }
    }
}

/// A campaign in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Campaign {
    /// Its slug (the reply schema's campaign enum).
    pub slug: String,
    /// Its title.
    pub title: String,
}

/// One Mind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub head_ttl: Ttl,
    /// TTL of the conversation tail.
    #[serde(default = "default_tail_ttl")]
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
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("muninn-data")
}
fn default_listen() -> String {
    "127.0.0.1:7676".into()
}
fn default_key_env() -> String {
    "ANTHROPIC_API_KEY".into()
}
fn default_model() -> String {
    "claude-opus-5-5".into()
}
fn default_policy() -> String {
    "ski-rental".into()
}
fn default_head_ttl() -> Ttl {
    Ttl::OneHour
}
fn default_tail_ttl() -> Ttl {
    Ttl::FiveMinutes
}
fn default_min_segment() -> u32 {
    4
}
fn default_true() -> bool {
    true
}
fn default_memory_tokens() -> u64 {
    2_000
}
fn default_window_s() -> u64 {
    86_400
}
fn default_turns_per_wake() -> u32 {
    4
}
fn default_max_tokens() -> u64 {
    2_048
}
