//! `muninn.toml`: what a host runs. Loaded and validated once at start ([`Config::load`]); with
//! no file, a built-in demo Mind on the simulator ([`Config::demo`]).
//!
//! ## Paths
//!
//! Every path is absolute once loaded. Relative paths in a file (`data_dir`, `prices`,
//! `backend.claude_bin`, doctrine and persona state files, a SQLite `database` path, a Matrix
//! secret's `file`) are resolved against the directory of the file, itself made absolute against
//! the working directory, so a configuration means the same thing whatever directory `muninn` is
//! started from; the demo's are resolved against the working directory. Nothing downstream sees a relative path: a
//! Claude Code child runs in its own session directory, where a relative `HOME` or
//! `CLAUDE_CONFIG_DIR` would name another tree (its settings unread, its session files lost).
//!
//! ## Validation
//!
//! [`Config::validate`] checks everything that can be checked before the first turn — ids,
//! rooms, policies, TTL order, bounds, and that every referenced file exists and reads — and
//! reports *all* problems at once, each naming the file and the field (`mind[0].rooms[1]`), so an
//! operator fixes a configuration in one pass rather than one error per start.
//!
//! ## Matrix
//!
//! [`matrix`]: `[matrix]` (the homeserver) and each Mind's `[mind.matrix]` account, whose
//! credential is read from a file or an environment variable, never written in the file.
//!
//! ## Schema
//!
//! [`json_schema`] is generated from these types (schemars) and checked in at
//! `crates/muninn-host/muninn.schema.json`; a test regenerates it and fails on drift
//! (`MUNINN_BLESS=1` rewrites it).

pub mod api;
mod bounds;
pub mod matrix;

pub use api::ApiConfig;
pub use matrix::{MatrixConfig, MindMatrixConfig, SecretSource};

use muninn_core::cache::Ttl;
use muninn_core::decide::Policy;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The name shown in errors about the built-in demo configuration.
pub const DEMO_SOURCE: &str = "<built-in demo>";

/// The file name of the API token inside the data directory.
pub const API_TOKEN_FILE: &str = "api-token";

/// The longest Mind id or campaign slug.
const MAX_ID_LEN: usize = 64;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// The HTTP server's limits: connections, header and body read time, body size.
    #[serde(default)]
    pub api: ApiConfig,
    /// How long a host's lease on a Mind lasts, ms (at least 1000). The holder renews it when a
    /// third is left; if the holder dies, another host on the same database takes the Mind over
    /// at most this long (plus a third, its retry interval) later. Every host sharing a
    /// database should use the same value.
    #[serde(default = "default_lease_ttl_ms")]
    pub lease_ttl_ms: i64,
    /// A price table replacing the embedded one.
    #[serde(default)]
    pub prices: Option<PathBuf>,
    /// The model behind every Mind.
    #[serde(default)]
    pub backend: BackendConfig,
    /// The Matrix homeserver the Minds' `[mind.matrix]` accounts are on; with it, `muninn
    /// serve` runs the Matrix connector beside the Minds.
    #[serde(default)]
    pub matrix: Option<MatrixConfig>,
    /// The Minds this host runs.
    #[serde(default, rename = "mind")]
    pub minds: Vec<MindConfig>,
}

/// Which backend serves the Minds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// The in-process simulator (deterministic replies, usage from the cache model).
    Sim,
    /// The Anthropic Messages API.
    Anthropic,
    /// The Claude Code CLI (`claude -p`, one long-lived process per session), talking to the
    /// Messages API at `base_url` with the key from `api_key_env`.
    ClaudeCli,
}

/// The backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `sim`, `anthropic` or `claude-cli`. Default: `anthropic` when the credential variable is
    /// set, else `sim` (`claude-cli` is only used when asked for).
    #[serde(default)]
    pub kind: Option<BackendKind>,
    /// The API base URL (default `https://api.anthropic.com`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable holding the API key (never the key itself).
    #[serde(default = "default_key_env")]
    pub api_key_env: String,
    /// `claude-cli` only: the `claude` binary (pinned 2.1.332). Default: `$MUNINN_CLAUDE_BIN`,
    /// else where `scripts/install-claude-cli.sh` installs it. Each session's CLI state lives
    /// under `<data_dir>/claude-cli/<mind>/<role>`.
    #[serde(default)]
    pub claude_bin: Option<PathBuf>,
    /// Every Mind's Self session and the flush protocol of its runs; a Mind's own
    /// `[mind.self_session]` overrides this field by field.
    #[serde(default)]
    pub self_session: SelfSessionConfig,
    /// `claude-cli` only: the one process pool every session's CLI child joins.
    #[serde(default)]
    pub pool: PoolSettings,
    /// `claude-cli` only: seconds a turn waits for the CLI's `result` before the child is
    /// stopped and the turn fails (the Mind then retries it on its own backoff). Default 600,
    /// which the CLI's own retries of a failing API fit in; a child that hangs holds its Mind
    /// no longer than this.
    #[serde(default)]
    pub cli_turn_timeout_s: Option<u64>,
    /// `anthropic` only: keep-warm pings send `max_tokens: 0` (non-streaming), paying the
    /// prefix's read and no output. Default true; set false for an endpoint that refuses it.
    #[serde(default)]
    pub ping_max_tokens_zero: Option<bool>,
    /// `anthropic` only: a compaction (a Persona's `refresh = "compact"`) is the provider's
    /// on-demand server compaction (beta `compact-2026-09-04`), billed from
    /// `usage.iterations[]`. Default false: the backend cannot compact, and such a refresh
    /// rebuilds the segment instead.
    #[serde(default)]
    pub server_compaction: Option<bool>,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            kind: None,
            base_url: None,
            api_key_env: default_key_env(),
            claude_bin: None,
            self_session: SelfSessionConfig::default(),
            pool: PoolSettings::default(),
            cli_turn_timeout_s: None,
            ping_max_tokens_zero: None,
            server_compaction: None,
        }
    }
}

impl BackendConfig {
    /// The provider's context tools the `anthropic` backend uses, defaults filled in.
    pub fn context_tools(&self) -> muninn_anthropic::backend::ContextTools {
        let defaults = muninn_anthropic::backend::ContextTools::default();
        muninn_anthropic::backend::ContextTools {
            ping_max_tokens_zero: self
                .ping_max_tokens_zero
                .unwrap_or(defaults.ping_max_tokens_zero),
            server_compaction: self.server_compaction.unwrap_or(defaults.server_compaction),
            clear_tool_uses: defaults.clear_tool_uses,
        }
    }
}

/// The Self session: what its CLI child may do, what one brief may spend, and the flush
/// protocol of its runs (seed A2). Every field is optional: a Mind's value wins over the
/// backend-wide one, which wins over the default ([`SelfSessionConfig::resolve`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelfSessionConfig {
    /// `claude-cli` only: the CLI's built-in tools the Self may use (`--tools`, e.g. `["Read",
    /// "Edit", "Bash"]`). Default: none (`--tools ""`).
    #[serde(default)]
    pub cli_tools: Option<Vec<String>>,
    /// `claude-cli` only: the CLI's permission mode for those tools (`--permission-mode`).
    /// Default: `default` (a tool that needs a permission is refused in a headless run).
    #[serde(default)]
    pub permission_mode: Option<PermissionMode>,
    /// `claude-cli` only: the most one brief may spend, micro-dollars (`--max-budget-usd`; the
    /// CLI ends the run once it is crossed). Each brief gets the whole budget, however many
    /// briefs one Self segment runs (`CliConfig::run_budget_micro_usd`). Default: no limit
    /// beyond the Mind's spend cap.
    #[serde(default)]
    pub brief_budget_micro_usd: Option<i64>,
    /// The flush is asked for this many tokens before the context ceiling (the Mind's
    /// `ceiling_tokens`, else the model's window), so the answer still fits. Default 60000.
    #[serde(default)]
    pub flush_headroom_tokens: Option<u64>,
    /// Seconds the run may take to finish once the flush was asked for, before it is
    /// interrupted. Default 900.
    #[serde(default)]
    pub flush_grace_s: Option<u64>,
    /// Seconds after the interrupt before the process is terminated. Default 120.
    #[serde(default)]
    pub flush_escalate_after_s: Option<u64>,
    /// Milliseconds after SIGTERM before SIGKILL. Default 2000.
    #[serde(default)]
    pub flush_exit_drain_ms: Option<u64>,
}

/// The Claude Code CLI's permission modes (`--permission-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PermissionMode {
    /// Ask for each permission (refused when headless).
    #[serde(rename = "default")]
    Default,
    /// File edits are allowed without asking.
    #[serde(rename = "acceptEdits")]
    AcceptEdits,
    /// Plan only: no tool with effects runs.
    #[serde(rename = "plan")]
    Plan,
    /// Every tool runs without asking.
    #[serde(rename = "bypassPermissions")]
    BypassPermissions,
    /// Never ask: what is not allowed is refused.
    #[serde(rename = "dontAsk")]
    DontAsk,
}

impl PermissionMode {
    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::DontAsk => "dontAsk",
        }
    }
}

/// The default flush headroom (seed A2).
pub const DEFAULT_FLUSH_HEADROOM_TOKENS: u64 = 60_000;
/// The default flush grace (seed A2).
pub const DEFAULT_FLUSH_GRACE_S: u64 = 900;
/// The default time from interrupt to SIGTERM (seed A2).
pub const DEFAULT_FLUSH_ESCALATE_AFTER_S: u64 = 120;
/// The default time from SIGTERM to SIGKILL (seed A2).
pub const DEFAULT_FLUSH_EXIT_DRAIN_MS: u64 = 2_000;

/// A Mind's Self session with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfSession {
    /// The CLI tools (`--tools`); empty for none.
    pub cli_tools: Vec<String>,
    /// `--permission-mode`.
    pub permission_mode: PermissionMode,
    /// `--max-budget-usd`, as micro-dollars.
    pub brief_budget_micro_usd: Option<i64>,
    /// See [`SelfSessionConfig::flush_headroom_tokens`].
    pub flush_headroom_tokens: u64,
    /// See [`SelfSessionConfig::flush_grace_s`].
    pub flush_grace: std::time::Duration,
    /// See [`SelfSessionConfig::flush_escalate_after_s`].
    pub flush_escalate_after: std::time::Duration,
    /// See [`SelfSessionConfig::flush_exit_drain_ms`].
    pub flush_exit_drain: std::time::Duration,
}

impl SelfSessionConfig {
    /// `self` (a Mind's) over `wide` (the backend's) over the defaults.
    pub fn resolve(&self, wide: &SelfSessionConfig) -> SelfSession {
        SelfSession {
            cli_tools: self
                .cli_tools
                .clone()
                .or_else(|| wide.cli_tools.clone())
                .unwrap_or_default(),
            permission_mode: self
                .permission_mode
                .or(wide.permission_mode)
                .unwrap_or(PermissionMode::Default),
            brief_budget_micro_usd: self.brief_budget_micro_usd.or(wide.brief_budget_micro_usd),
            flush_headroom_tokens: self
                .flush_headroom_tokens
                .or(wide.flush_headroom_tokens)
                .unwrap_or(DEFAULT_FLUSH_HEADROOM_TOKENS),
            flush_grace: std::time::Duration::from_secs(
                self.flush_grace_s
                    .or(wide.flush_grace_s)
                    .unwrap_or(DEFAULT_FLUSH_GRACE_S),
            ),
            flush_escalate_after: std::time::Duration::from_secs(
                self.flush_escalate_after_s
                    .or(wide.flush_escalate_after_s)
                    .unwrap_or(DEFAULT_FLUSH_ESCALATE_AFTER_S),
            ),
            flush_exit_drain: std::time::Duration::from_millis(
                self.flush_exit_drain_ms
                    .or(wide.flush_exit_drain_ms)
                    .unwrap_or(DEFAULT_FLUSH_EXIT_DRAIN_MS),
            ),
        }
    }

    /// The problems of this section, each with its field under `at`.
    fn check(&self, at: &str, bad: &mut impl FnMut(String, String)) {
        if let Some(tools) = &self.cli_tools {
            for (j, tool) in tools.iter().enumerate() {
                // A name goes into one comma-separated flag value: no commas, no spaces.
                if tool.is_empty()
                    || !tool
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-():*/.".contains(c))
                {
                    bad(
                        format!("{at}.cli_tools[{j}]"),
                        format!("{tool:?} is not a CLI tool name"),
                    );
                }
            }
        }
        if let Some(budget) = self.brief_budget_micro_usd
            && budget <= 0
        {
            bad(
                format!("{at}.brief_budget_micro_usd"),
                format!("{budget} must be positive (leave it out for no limit)"),
            );
        }
        if self.flush_headroom_tokens == Some(0) {
            bad(
                format!("{at}.flush_headroom_tokens"),
                "must be positive: the flush's answer needs room".into(),
            );
        }
        if self.flush_grace_s == Some(0) {
            bad(format!("{at}.flush_grace_s"), "must be positive".into());
        }
        if self.flush_escalate_after_s == Some(0) {
            bad(
                format!("{at}.flush_escalate_after_s"),
                "must be positive".into(),
            );
        }
    }
}

/// `claude-cli` only: the shared process pool's budgets and park policy. The claude-cli
/// factory joins each session's CLI child to one pool built from this, so idle sessions are
/// parked (their child stopped, the session kept on disk) when holding them costs more than
/// resuming them, and the budgets below are never exceeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolSettings {
    /// The most live CLI children at once. Default 8.
    #[serde(default = "default_pool_max_processes")]
    pub max_processes: u32,
    /// The most resident memory all live children may hold, MiB. Default 4096.
    #[serde(default = "default_pool_memory_budget_mib")]
    pub memory_budget_mib: u64,
    /// What one child is assumed to hold when `/proc` does not say, MiB. Default 300.
    #[serde(default = "default_pool_per_process_mib")]
    pub per_process_mib: u64,
    /// Never park a session idle for less than this, seconds. Default 10.
    #[serde(default = "default_pool_park_min_idle_s")]
    pub park_min_idle_s: u64,
    /// How far ahead a park decision looks, seconds. Default 300.
    #[serde(default = "default_pool_park_horizon_s")]
    pub park_horizon_s: u64,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_processes: default_pool_max_processes(),
            memory_budget_mib: default_pool_memory_budget_mib(),
            per_process_mib: default_pool_per_process_mib(),
            park_min_idle_s: default_pool_park_min_idle_s(),
            park_horizon_s: default_pool_park_horizon_s(),
        }
    }
}

fn default_pool_max_processes() -> u32 {
    8
}
fn default_pool_memory_budget_mib() -> u64 {
    4_096
}
fn default_pool_per_process_mib() -> u64 {
    300
}
fn default_pool_park_min_idle_s() -> u64 {
    10
}
fn default_pool_park_horizon_s() -> u64 {
    300
}

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

fn default_data_dir() -> PathBuf {
    PathBuf::from("muninn-data")
}
fn default_listen() -> String {
    "127.0.0.1:7676".into()
}
fn default_lease_ttl_ms() -> i64 {
    crate::runtime::LEASE_TTL_MS
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

/// Why a configuration could not be used. Every variant names the file (or [`DEMO_SOURCE`]);
/// none is retryable without editing the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the configuration's shape (the message names the line and
    /// the key: an unknown field, a wrong type).
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The TOML parser's message.
        message: String,
    },
    /// The working directory, against which relative paths are resolved, could not be read.
    #[error("cannot read the working directory to resolve relative paths: {0}")]
    WorkingDir(std::io::Error),
    /// The file parsed, but some values are not acceptable; every problem found is listed.
    #[error("{}: invalid configuration:{}", file.display(), list(problems))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Each problem, with the field it is about.
        problems: Vec<Problem>,
    },
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("\n  {}: {}", p.field, p.message))
        .collect()
}

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field, as a TOML path: `listen`, `mind[0].rooms[1]`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// The fields named by an [`Invalid`](ConfigError::Invalid) error (empty for the others).
    pub fn fields(&self) -> Vec<&str> {
        match self {
            ConfigError::Invalid { problems, .. } => {
                problems.iter().map(|p| p.field.as_str()).collect()
            }
            _ => Vec::new(),
        }
    }
}

impl Config {
    /// Loads and validates `path`, or returns the validated [demo](Config::demo) when `None`,
    /// with every path made absolute against the working directory ([`Config::load_in`]).
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let cwd = std::env::current_dir().map_err(ConfigError::WorkingDir)?;
        Config::load_in(&cwd, path)
    }

    /// [`Config::load`] with the working directory given (`cwd` must be absolute): a relative
    /// `path` is read from `cwd`, the file's relative paths resolve against its directory, and
    /// the demo's against `cwd`.
    pub fn load_in(cwd: &Path, path: Option<&Path>) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            let mut demo = Config::demo();
            demo.resolve_paths(cwd);
            demo.validate(Path::new(DEMO_SOURCE))?;
            return Ok(demo);
        };
        let path = cwd.join(path);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            file: path.clone(),
            source,
        })?;
        let base = path.parent().unwrap_or(cwd);
        let config = Config::parse(&text, &path, base)?;
        config.validate(&path)?;
        Ok(config)
    }

    /// Parses TOML text (not yet validated), resolving relative paths against `base`; `file`
    /// only names the source in errors.
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        config.resolve_paths(base);
        Ok(config)
    }

    /// Resolves every relative path against `base` (absolute, for the result to be): the
    /// loader's step, and the one `muninn serve` repeats for a `--data-dir` or `--database`
    /// given on its command line (against the working directory).
    pub fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() && !p.as_os_str().is_empty() {
                *p = base.join(&*p);
            }
        };
        resolve(&mut self.data_dir);
        if let Some(bin) = &mut self.backend.claude_bin {
            resolve(bin);
        }
        if let Some(prices) = &mut self.prices {
            resolve(prices);
        }
        // A SQLite file path is a path like the others; URLs are left alone.
        if let Some(database) = &mut self.database
            && !database.contains("://")
            && !database.starts_with("sqlite:")
            && Path::new(database.as_str()).is_relative()
            && !database.is_empty()
        {
            *database = base.join(database.as_str()).display().to_string();
        }
        for mind in &mut self.minds {
            mind.doctrine.iter_mut().for_each(resolve);
            if let Some(state) = &mut mind.persona_state {
                resolve(state);
            }
            if let Some(account) = &mut mind.matrix {
                for secret in [&mut account.access_token, &mut account.password]
                    .into_iter()
                    .flatten()
                {
                    secret.resolve_paths(base);
                }
            }
        }
    }

    /// The built-in demo: one Mind, `vala`, on the simulator, with a short inline doctrine and
    /// persona, in `#swarm`, `#burn` and `#minds`. Used when no configuration file is given.
    pub fn demo() -> Config {
        Config {
            data_dir: default_data_dir(),
            database: None,
            listen: default_listen(),
            api: ApiConfig::default(),
            lease_ttl_ms: default_lease_ttl_ms(),
            prices: None,
            backend: BackendConfig {
                kind: Some(BackendKind::Sim),
                ..BackendConfig::default()
            },
            matrix: None,
            minds: vec![MindConfig {
                id: "vala".into(),
                name: Some("Vala".into()),
                model: default_model(),
                doctrine: Vec::new(),
                doctrine_text: Some(
                    "You are Vala, a seeress who keeps the swarm's memory. Speak briefly and \
                     plainly, in the room you were addressed in. Answer what is asked; when work \
                     is needed, start a Self run with a clear brief instead of promising it."
                        .into(),
                ),
                persona_state: None,
                persona_state_inline: Some(serde_json::json!({
                    "name": "Vala",
                    "mood": "watchful",
                    "voice": "terse, dry, kind",
                })),
                rooms: vec!["#swarm".into(), "#burn".into(), "#minds".into()],
                campaigns: vec![Campaign {
                    slug: "demo".into(),
                    title: "Show the operator how muninn keeps a session warm".into(),
                }],
                policy: default_policy(),
                head_ttl: default_head_ttl(),
                tail_ttl: default_tail_ttl(),
                min_segment: default_min_segment(),
                ceiling_tokens: None,
                refresh_at_task_boundaries: true,
                memory_tokens: default_memory_tokens(),
                spend_cap_micro_usd: Some(5_000_000),
                spend_window_s: default_window_s(),
                turns_per_wake: default_turns_per_wake(),
                max_output_tokens: default_max_tokens(),
                refresh: RefreshMode::Rebuild,
                self_session: SelfSessionConfig::default(),
                matrix: None,
            }],
        }
    }

    /// The store to open (for [`muninn_store::open`]): `database` if set, else the SQLite file
    /// `<data_dir>/muninn.db`.
    pub fn database_url(&self) -> String {
        match &self.database {
            Some(database) => database.clone(),
            None => self.data_dir.join("muninn.db").display().to_string(),
        }
    }

    /// Where the HTTP API's bearer token is kept: `<data_dir>/api-token`.
    pub fn api_token_path(&self) -> PathBuf {
        self.data_dir.join(API_TOKEN_FILE)
    }

    /// The Mind with this id.
    pub fn mind(&self, id: &str) -> Option<&MindConfig> {
        self.minds.iter().find(|m| m.id == id)
    }

    /// Checks every value; `file` names the source in the error. See the [module docs](self).
    pub fn validate(&self, file: &Path) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut bad = |field: String, message: String| problems.push(Problem { field, message });

        if self.data_dir.as_os_str().is_empty() {
            bad("data_dir".into(), "must not be empty".into());
        }
        if let Some(database) = &self.database
            && database.trim().is_empty()
        {
            bad(
                "database".into(),
                "must not be empty (leave it out for <data_dir>/muninn.db)".into(),
            );
        }
        match self.listen.parse::<std::net::SocketAddr>() {
            Ok(_) => {}
            Err(_) => bad(
                "listen".into(),
                format!("{:?} is not an IP:port address", self.listen),
            ),
        }
        self.api.check(&mut bad);
        bounds::check(self, &mut bad);
        if self.lease_ttl_ms < 1_000 {
            bad(
                "lease_ttl_ms".into(),
                format!("{} is below the minimum of 1000", self.lease_ttl_ms),
            );
        }
        if let Some(prices) = &self.prices
            && let Err(e) = std::fs::read_to_string(prices)
        {
            bad(
                "prices".into(),
                format!("cannot read {}: {e}", prices.display()),
            );
        }
        if let Some(url) = &self.backend.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bad(
                "backend.base_url".into(),
                format!("{url:?} must start with http:// or https://"),
            );
        }
        let env = &self.backend.api_key_env;
        if !is_env_name(env) {
            bad(
                "backend.api_key_env".into(),
                format!(
                    "{env:?} must be an environment variable name (A-Z, 0-9, _), not a key itself"
                ),
            );
        }
        self.backend
            .self_session
            .check("backend.self_session", &mut bad);
        let pool = &self.backend.pool;
        if pool.max_processes == 0 {
            bad(
                "backend.pool.max_processes".into(),
                "must be at least 1".into(),
            );
        }
        if pool.per_process_mib == 0 {
            bad(
                "backend.pool.per_process_mib".into(),
                "must be positive".into(),
            );
        } else if pool.memory_budget_mib < pool.per_process_mib {
            bad(
                "backend.pool.memory_budget_mib".into(),
                format!(
                    "{} MiB cannot hold one child of per_process_mib {} MiB",
                    pool.memory_budget_mib, pool.per_process_mib
                ),
            );
        }
        if pool.park_horizon_s == 0 {
            bad(
                "backend.pool.park_horizon_s".into(),
                "must be positive".into(),
            );
        }

        if self.minds.is_empty() {
            bad(
                "mind".into(),
                "at least one [[mind]] is needed: a host without Minds runs nothing".into(),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for (i, mind) in self.minds.iter().enumerate() {
            let at = |field: &str| format!("mind[{i}].{field}");
            if let Err(message) = check_id(&mind.id) {
                bad(at("id"), message);
            } else if !seen.insert(mind.id.as_str()) {
                bad(
                    at("id"),
                    format!("{:?} is used by an earlier Mind", mind.id),
                );
            }
            if mind.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                bad(
                    at("name"),
                    "must not be empty (leave it out to use the id)".into(),
                );
            }
            if mind.model.trim().is_empty() {
                bad(at("model"), "must not be empty".into());
            }
            for (j, path) in mind.doctrine.iter().enumerate() {
                if let Err(e) = std::fs::read_to_string(path) {
                    bad(
                        at(&format!("doctrine[{j}]")),
                        format!("cannot read {}: {e}", path.display()),
                    );
                }
            }
            if mind.doctrine.is_empty()
                && mind
                    .doctrine_text
                    .as_deref()
                    .is_none_or(|t| t.trim().is_empty())
            {
                bad(
                    at("doctrine"),
                    "a Mind needs a doctrine: give doctrine files or doctrine_text".into(),
                );
            }
            match (&mind.persona_state, &mind.persona_state_inline) {
                (Some(_), Some(_)) => bad(
                    at("persona_state_inline"),
                    "give persona_state (a file) or persona_state_inline, not both".into(),
                ),
                (Some(path), None) => match std::fs::read_to_string(path) {
                    Err(e) => bad(
                        at("persona_state"),
                        format!("cannot read {}: {e}", path.display()),
                    ),
                    Ok(text) => {
                        if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                            bad(
                                at("persona_state"),
                                format!("{} is not JSON: {e}", path.display()),
                            );
                        }
                    }
                },
                (None, Some(value)) if !value.is_object() => {
                    bad(at("persona_state_inline"), "must be a table".into())
                }
                _ => {}
            }
            let mut rooms = std::collections::HashSet::new();
            for (j, room) in mind.rooms.iter().enumerate() {
                if let Err(message) = check_room(room) {
                    bad(at(&format!("rooms[{j}]")), message);
                } else if !rooms.insert(room.as_str()) {
                    bad(
                        at(&format!("rooms[{j}]")),
                        format!("{room:?} is listed twice"),
                    );
                }
            }
            let mut slugs = std::collections::HashSet::new();
            for (j, campaign) in mind.campaigns.iter().enumerate() {
                if let Err(message) = check_id(&campaign.slug) {
                    bad(at(&format!("campaigns[{j}].slug")), message);
                } else if !slugs.insert(campaign.slug.as_str()) {
                    bad(
                        at(&format!("campaigns[{j}].slug")),
                        format!("{:?} is listed twice", campaign.slug),
                    );
                }
                if campaign.title.trim().is_empty() {
                    bad(
                        at(&format!("campaigns[{j}].title")),
                        "must not be empty".into(),
                    );
                }
            }
            if let Err(e) = Policy::from_str(&mind.policy) {
                bad(at("policy"), e);
            }
            // A 1h breakpoint after a 5m one is refused by the provider (design §3.3): the head,
            // which comes first, must live at least as long as the tail.
            if mind.head_ttl < mind.tail_ttl {
                bad(
                    at("head_ttl"),
                    format!(
                        "{} is shorter than tail_ttl {}: a 1h breakpoint may not follow a 5m one",
                        mind.head_ttl.label(),
                        mind.tail_ttl.label()
                    ),
                );
            }
            if mind.ceiling_tokens == Some(0) {
                bad(at("ceiling_tokens"), "must be positive".into());
            }
            if let Some(cap) = mind.spend_cap_micro_usd
                && cap <= 0
            {
                bad(
                    at("spend_cap_micro_usd"),
                    format!("{cap} must be positive (leave it out for no cap)"),
                );
            }
            if mind.spend_window_s == 0 {
                bad(at("spend_window_s"), "must be positive".into());
            }
            if mind.turns_per_wake == 0 {
                bad(at("turns_per_wake"), "must be at least 1".into());
            }
            if mind.max_output_tokens == 0 {
                bad(at("max_output_tokens"), "must be at least 1".into());
            }
            mind.self_session.check(&at("self_session"), &mut bad);
            let headroom = mind
                .self_session
                .resolve(&self.backend.self_session)
                .flush_headroom_tokens;
            if let Some(ceiling) = mind.ceiling_tokens
                && ceiling > 0
                && headroom >= ceiling
            {
                bad(
                    at("self_session.flush_headroom_tokens"),
                    format!(
                        "{headroom} leaves no room below ceiling_tokens {ceiling}: the flush would be asked for at once"
                    ),
                );
            }
        }
        matrix::check(self.matrix.as_ref(), &self.minds, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                file: file.to_owned(),
                problems,
            })
        }
    }
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
            parts.push(std::fs::read_to_string(path)?.trim_end().to_owned());
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
                let text = std::fs::read_to_string(path)?;
                serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            }
            (None, inline) => Ok(inline.clone()),
        }
    }
}

/// Whether `id` is a URL-safe identifier: 1–64 of `A-Z a-z 0-9 - _`, starting with a letter or
/// digit. Mind ids appear in URL paths and file names, so nothing there needs escaping.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!("{id:?} must be 1 to {MAX_ID_LEN} characters"));
    }
    let ok = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok || !id.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(format!(
            "{id:?} must be URL-safe: letters, digits, '-' and '_', starting with a letter or digit"
        ));
    }
    Ok(())
}

/// Whether `name` can be an environment variable's name: `A-Z`, `0-9` and `_`, not empty.
fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether `room` names a room: `#alias`, `!room-id` or `@user` (a DM), without whitespace.
pub fn check_room(room: &str) -> Result<(), String> {
    let Some(first) = room.chars().next() else {
        return Err("a room must not be empty".into());
    };
    if !matches!(first, '#' | '!' | '@') || room.len() < 2 {
        return Err(format!(
            "{room:?} must start with '#' (an alias), '!' (a room id) or '@' (a DM) and name something"
        ));
    }
    if room.chars().any(char::is_whitespace) {
        return Err(format!("{room:?} must not contain whitespace"));
    }
    Ok(())
}

/// The JSON Schema of `muninn.toml` (draft 2020-12), generated from [`Config`].
pub fn json_schema() -> serde_json::Value {
    schemars::schema_for!(Config).to_value()
}

/// [`json_schema`] as the checked-in file's text: pretty JSON and a final newline.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).unwrap_or_default();
    text.push('\n');
    text
}
