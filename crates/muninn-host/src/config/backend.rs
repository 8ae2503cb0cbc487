//! `[backend]`: which model serves the Minds, the Self session's tools, budget and flush
//! protocol (`[backend.self_session]`, overridden per Mind), and the claude-cli process pool
//! (`[backend.pool]`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// `anthropic` only: seconds one attempt of a request may take, from sending it to the
    /// reply's last byte, however lively the reply (a provider or proxy trickling an event a
    /// minute never trips the 600 s silence bound). Past it the attempt fails as a transport
    /// failure and is retried. Default: derived from the request's `max_tokens` as the
    /// official SDKs estimate the longest real answer (128,000 tokens an hour), never under
    /// 600 s: 600 s up to 21,333 tokens, 900 s for 32,000.
    #[serde(default)]
    pub attempt_timeout_s: Option<u64>,
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
            attempt_timeout_s: None,
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
    /// The most one brief may spend, micro-dollars. On `claude-cli` it is `--max-budget-usd`
    /// (the CLI ends the run once it is crossed; each brief gets the whole budget, however many
    /// briefs one Self segment runs, `CliConfig::run_budget_micro_usd`). In the host's own tool
    /// loop (`workspace`), a request is not sent when the run's spend plus the most it can cost
    /// would cross it, and the run ends, failed, saying so. Default: no limit beyond the Mind's
    /// spend cap.
    #[serde(default)]
    pub brief_budget_micro_usd: Option<i64>,
    /// API and simulator backends: the directory the Self's read-only tools (`read_file`,
    /// `list_dir`, `grep`) are confined to. When set, a brief is a tool loop the host drives
    /// request by request: each call is run by the host against the real files (paths outside
    /// the directory refused, every input and output bounded), its result appended to the
    /// Self's transcript, each request one ledger row decided by the decider (so a `mask`
    /// clears old results mid-run). Default: none (a brief is one request). Ignored by
    /// `claude-cli`, whose own tools are `cli_tools`.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// The most requests one brief's tool loop may send (`workspace`); the run ends, failed,
    /// saying so, when it would send more. Default 40.
    #[serde(default)]
    pub max_requests: Option<u32>,
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

/// The default cap on one brief's tool-loop requests.
pub const DEFAULT_MAX_REQUESTS: u32 = 40;
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
    /// `--max-budget-usd`, as micro-dollars (and the host tool loop's per-brief spend cap).
    pub brief_budget_micro_usd: Option<i64>,
    /// See [`SelfSessionConfig::workspace`].
    pub workspace: Option<PathBuf>,
    /// See [`SelfSessionConfig::max_requests`].
    pub max_requests: u32,
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
            workspace: self.workspace.clone().or_else(|| wide.workspace.clone()),
            max_requests: self
                .max_requests
                .or(wide.max_requests)
                .unwrap_or(DEFAULT_MAX_REQUESTS),
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
    pub(super) fn check(&self, at: &str, bad: &mut impl FnMut(String, String)) {
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
        if self.max_requests == Some(0) {
            bad(
                format!("{at}.max_requests"),
                "must be at least 1: a run sends its brief".into(),
            );
        }
        if self.workspace.as_ref().is_some_and(|w| !w.is_dir()) {
            bad(
                format!("{at}.workspace"),
                "is not a directory (the Self's read-only tools are confined to it)".into(),
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
fn default_key_env() -> String {
    "ANTHROPIC_API_KEY".into()
}
