//! Which model serves the Minds: the in-process simulator when no credentials are configured,
//! the Anthropic Messages API when they are, or — when asked for — the Claude Code CLI, one
//! long-lived `claude -p` process per session. One enum so a host runs any without boxing.

use crate::config::{BackendKind, Config, PoolSettings, SelfSession};
use muninn_anthropic::backend::{AnthropicBackend, ContextTools};
use muninn_anthropic::client::TokioSleeper;
use muninn_anthropic::client::{AnthropicClient, ClientConfig, credentials_from_env};
use muninn_backend::clock::Clock;
use muninn_backend::{
    Backend, BackendError, FailedAttempt, FlushProtocol, InputPart, RunOutcome, SessionEvent,
    SessionSpec, ToolSpec, TurnInput, TurnOutcome,
};
pub use muninn_claude_cli::PINNED_VERSION as PINNED_CLAUDE_CLI;
use muninn_claude_cli::pool::{ParkPolicy, PoolConfig, SharedPool};
use muninn_claude_cli::{BindingKey, ClaudeCliBackend, CliConfig, CredentialKind, Secret, Sweeps};
use muninn_core::price::PriceTable;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A backend of either kind.
#[derive(Debug)]
pub enum AnyBackend {
    /// The in-process simulator.
    Sim(Box<SimBackend>),
    /// The Anthropic Messages API over HTTPS.
    Anthropic(Box<AnthropicBackend<AnthropicClient>>),
    /// The Claude Code CLI, one long-lived child per session.
    ClaudeCli(Box<ClaudeCliBackend>),
}

impl Backend for AnyBackend {
    fn name(&self) -> &str {
        match self {
            AnyBackend::Sim(_) => "sim",
            AnyBackend::Anthropic(b) => b.name(),
            AnyBackend::ClaudeCli(b) => b.name(),
        }
    }

    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        match self {
            AnyBackend::Sim(b) => b.start(spec).await,
            AnyBackend::Anthropic(b) => b.start(spec).await,
            AnyBackend::ClaudeCli(b) => b.start(spec).await,
        }
    }

    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.turn(input).await,
            AnyBackend::Anthropic(b) => b.turn(input).await,
            AnyBackend::ClaudeCli(b) => b.turn(input).await,
        }
    }

    async fn ping(&mut self) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.ping().await,
            AnyBackend::Anthropic(b) => b.ping().await,
            AnyBackend::ClaudeCli(b) => b.ping().await,
        }
    }

    async fn ping_head(&mut self) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.ping_head().await,
            AnyBackend::Anthropic(b) => b.ping_head().await,
            AnyBackend::ClaudeCli(b) => b.ping_head().await,
        }
    }

    fn ping_output_tokens(&self) -> u64 {
        match self {
            AnyBackend::Sim(b) => b.ping_output_tokens(),
            AnyBackend::Anthropic(b) => b.ping_output_tokens(),
            AnyBackend::ClaudeCli(b) => b.ping_output_tokens(),
        }
    }

    fn can_offer_tools(&self) -> bool {
        match self {
            AnyBackend::Sim(b) => b.can_offer_tools(),
            AnyBackend::Anthropic(b) => b.can_offer_tools(),
            AnyBackend::ClaudeCli(b) => b.can_offer_tools(),
        }
    }

    fn pending_input(&self) -> Vec<InputPart> {
        match self {
            AnyBackend::Sim(b) => b.pending_input(),
            AnyBackend::Anthropic(b) => b.pending_input(),
            AnyBackend::ClaudeCli(b) => b.pending_input(),
        }
    }

    fn tool_tokens(&self, tools: &[ToolSpec], output_schema: Option<&Value>) -> u64 {
        match self {
            AnyBackend::Sim(b) => b.tool_tokens(tools, output_schema),
            AnyBackend::Anthropic(b) => b.tool_tokens(tools, output_schema),
            AnyBackend::ClaudeCli(b) => b.tool_tokens(tools, output_schema),
        }
    }

    fn can_clear_tool_results(&self) -> bool {
        match self {
            AnyBackend::Sim(b) => b.can_clear_tool_results(),
            AnyBackend::Anthropic(b) => b.can_clear_tool_results(),
            AnyBackend::ClaudeCli(b) => b.can_clear_tool_results(),
        }
    }

    async fn turn_cleared(
        &mut self,
        input: TurnInput,
        keep_tool_uses: u32,
    ) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.turn_cleared(input, keep_tool_uses).await,
            AnyBackend::Anthropic(b) => b.turn_cleared(input, keep_tool_uses).await,
            AnyBackend::ClaudeCli(b) => b.turn_cleared(input, keep_tool_uses).await,
        }
    }

    fn can_ping(&self) -> bool {
        match self {
            AnyBackend::Sim(b) => b.can_ping(),
            AnyBackend::Anthropic(b) => b.can_ping(),
            AnyBackend::ClaudeCli(b) => b.can_ping(),
        }
    }

    fn binds_sessions(&self) -> bool {
        match self {
            AnyBackend::Sim(b) => b.binds_sessions(),
            AnyBackend::Anthropic(b) => b.binds_sessions(),
            AnyBackend::ClaudeCli(b) => b.binds_sessions(),
        }
    }

    fn failure_left_session(&self) -> bool {
        match self {
            AnyBackend::Sim(b) => b.failure_left_session(),
            AnyBackend::Anthropic(b) => b.failure_left_session(),
            AnyBackend::ClaudeCli(b) => b.failure_left_session(),
        }
    }

    fn failure_kept_turn(&self) -> bool {
        match self {
            AnyBackend::Sim(b) => b.failure_kept_turn(),
            AnyBackend::Anthropic(b) => b.failure_kept_turn(),
            AnyBackend::ClaudeCli(b) => b.failure_kept_turn(),
        }
    }

    fn session_handle(&self, items: &[Vec<u8>]) -> Option<String> {
        match self {
            AnyBackend::Sim(b) => b.session_handle(items),
            AnyBackend::Anthropic(b) => b.session_handle(items),
            AnyBackend::ClaudeCli(b) => b.session_handle(items),
        }
    }

    fn resume_session(&mut self, handle: &str, items: &[Vec<u8>], fork: bool) -> bool {
        match self {
            AnyBackend::Sim(b) => b.resume_session(handle, items, fork),
            AnyBackend::Anthropic(b) => b.resume_session(handle, items, fork),
            AnyBackend::ClaudeCli(b) => b.resume_session(handle, items, fork),
        }
    }

    fn set_seed(&mut self, seed: Option<String>) {
        match self {
            AnyBackend::Sim(b) => b.set_seed(seed),
            AnyBackend::Anthropic(b) => b.set_seed(seed),
            AnyBackend::ClaudeCli(b) => b.set_seed(seed),
        }
    }

    async fn compact(&mut self, instructions: &str) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.compact(instructions).await,
            AnyBackend::Anthropic(b) => b.compact(instructions).await,
            AnyBackend::ClaudeCli(b) => b.compact(instructions).await,
        }
    }

    async fn run(
        &mut self,
        input: TurnInput,
        protocol: &FlushProtocol,
    ) -> Result<RunOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.run(input, protocol).await,
            AnyBackend::Anthropic(b) => b.run(input, protocol).await,
            AnyBackend::ClaudeCli(b) => b.run(input, protocol).await,
        }
    }

    // Forwarded, not left to the trait's default (none): without it no attempt the provider
    // billed and cut was ever a ledger row under `muninn serve`.
    fn take_failed_attempts(&mut self) -> Vec<FailedAttempt> {
        match self {
            AnyBackend::Sim(b) => b.take_failed_attempts(),
            AnyBackend::Anthropic(b) => b.take_failed_attempts(),
            AnyBackend::ClaudeCli(b) => b.take_failed_attempts(),
        }
    }

    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        match self {
            AnyBackend::Sim(b) => b.take_session_events(),
            AnyBackend::Anthropic(b) => b.take_session_events(),
            AnyBackend::ClaudeCli(b) => b.take_session_events(),
        }
    }

    async fn close(&mut self) {
        match self {
            AnyBackend::Sim(b) => b.close().await,
            AnyBackend::Anthropic(b) => b.close().await,
            AnyBackend::ClaudeCli(b) => b.close().await,
        }
    }
}

/// Builds a fresh backend per session.
#[derive(Clone)]
pub enum BackendFactory {
    /// Sessions on one shared simulator (one provider cache, as on the real API).
    Sim(Arc<Simulator>),
    /// Sessions on the Anthropic API, sharing one HTTPS client, using the provider's context
    /// tools as `[backend]` says.
    Anthropic(Box<AnthropicClient>, ContextTools),
    /// Sessions on the Claude Code CLI: one child per session, each with its own state
    /// directory under `data_dir`.
    ClaudeCli {
        /// The `claude` binary.
        bin: PathBuf,
        /// `<host data_dir>/claude-cli`.
        data_dir: PathBuf,
        /// The Messages API base URL the CLI calls.
        base_url: String,
        /// The credential, passed to each child through an inherited pipe
        /// (`CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR` / `CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR`).
        api_key: Secret,
        /// Whether `api_key` is an API key or an OAuth token.
        credential_kind: CredentialKind,
        /// The host's own session-binding key (`<data_dir>/session-binding.key`): a session left
        /// on disk is resumed only through a handle minted with it. Boxed: keyed HMAC state is
        /// large, and the factory is cloned per Mind.
        binding_key: Box<BindingKey>,
        /// Each Mind's Self session resolved (its `[mind.self_session]` over
        /// `[backend.self_session]` over the defaults), by Mind id: the CLI tools, permission
        /// mode and per-brief budget its `<mind>/self` child runs with, and its flush timings.
        self_sessions: Box<BTreeMap<String, SelfSession>>,
        /// `backend.cli_turn_timeout_s`: how long a turn waits for the CLI's result (the
        /// driver's default when unset).
        turn_timeout: Option<std::time::Duration>,
        /// `[backend.pool]`: the claude-cli factory joins each session's child to one shared
        /// process pool built from these budgets, so idle sessions are parked and the host
        /// never holds more children or memory than configured.
        pool: PoolSettings,
        /// The pool itself, built from `pool`: every session `make` builds joins it under its
        /// session name, and [`crate::runtime::run_minds`] sweeps it.
        shared_pool: SharedPool,
        /// The sweeps of what every session's children left behind: each session's child is
        /// swept when done with, and [`crate::runtime::run_minds`] waits for them all before
        /// the host exits.
        sweeps: Sweeps,
    },
}

/// The pool's budgets and park policy from `[backend.pool]`; the policy's prices stay at their
/// defaults (a break-even of about a minute for a 250 MiB child).
pub fn pool_config(settings: &PoolSettings) -> PoolConfig {
    PoolConfig {
        max_processes: settings.max_processes.max(1) as usize,
        memory_budget_mib: settings.memory_budget_mib,
        per_process_mib: settings.per_process_mib,
        policy: ParkPolicy {
            min_idle: std::time::Duration::from_secs(settings.park_min_idle_s),
            horizon: std::time::Duration::from_secs(settings.park_horizon_s.max(1)),
            ..ParkPolicy::default()
        },
    }
}

/// Where the `claude` binary is looked for: `backend.claude_bin`, else `$MUNINN_CLAUDE_BIN`,
/// else where `scripts/install-claude-cli.sh` installs it under `$HOME` (whether or not a file
/// is there).
pub fn claude_bin(config: &Config, env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    config
        .backend
        .claude_bin
        .clone()
        .or_else(|| env("MUNINN_CLAUDE_BIN").map(PathBuf::from))
        .or_else(|| {
            env("HOME").map(|home| {
                PathBuf::from(home).join(
                    ".cache/muninn/claude-cli/node_modules/@anthropic-ai/claude-code/bin/claude.exe",
                )
            })
        })
}

/// The backend `config` asks for: `backend.kind`, else `anthropic` when a credential variable
/// is set, else the simulator.
pub fn backend_kind(config: &Config, env: impl Fn(&str) -> Option<String>) -> BackendKind {
    let var = &config.backend.api_key_env;
    let has_key = env(var).is_some_and(|v| !v.is_empty())
        || env("ANTHROPIC_AUTH_TOKEN").is_some_and(|v| !v.is_empty());
    config.backend.kind.unwrap_or(if has_key {
        BackendKind::Anthropic
    } else {
        BackendKind::Sim
    })
}

/// The file, under the host's data directory, that holds the session-binding key.
pub const BINDING_KEY_FILE: &str = "session-binding.key";

/// The largest session-binding key file read, bytes: ours holds 32; a larger file is not a
/// key file, and is refused rather than read whole (and taken for a key).
pub const BINDING_KEY_MAX_BYTES: u64 = 4096;

/// Reads the session-binding key at `path`, or creates it (32 bytes from `/dev/urandom`, mode
/// 0600) when there is none, creating its directory as needed. The file is written under a
/// temporary name and hard-linked into place, so a host starting at the same time never reads
/// a half-written key: the loser of the race reads the winner's. The key is never logged.
pub fn load_or_create_binding_key(path: &Path) -> Result<BindingKey, BackendSetupError> {
    let io = |source: std::io::Error| BackendSetupError::BindingKey {
        path: path.to_owned(),
        reason: source.to_string(),
    };
    // Only a regular file: a named pipe there was waited on for a writer, for ever.
    let read = || muninn_fs::read_limited(path, BINDING_KEY_MAX_BYTES, "a key file");
    match read() {
        Ok(bytes) => return parse_binding_key(path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut random = [0u8; BindingKey::MIN_LEN];
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut random))
            .map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options.open(&tmp).and_then(|mut file| {
        use std::io::Write;
        file.write_all(&random).and_then(|()| file.sync_all())
    });
    // `hard_link` fails when the name exists, which makes creation exclusive and atomic.
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created the session-binding key");
            parse_binding_key(path, &random)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let bytes = read().map_err(io)?;
            parse_binding_key(path, &bytes)
        }
        Err(e) => Err(io(e)),
    }
}

fn parse_binding_key(path: &Path, bytes: &[u8]) -> Result<BindingKey, BackendSetupError> {
    BindingKey::new(bytes).map_err(|e| BackendSetupError::BindingKey {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

impl std::fmt::Debug for BackendFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendFactory::Sim(_) => f.write_str("BackendFactory::Sim"),
            BackendFactory::Anthropic(..) => f.write_str("BackendFactory::Anthropic"),
            BackendFactory::ClaudeCli { bin, .. } => f
                .debug_struct("BackendFactory::ClaudeCli")
                .field("bin", bin)
                .finish_non_exhaustive(),
        }
    }
}

/// Why a backend could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BackendSetupError {
    /// The configured backend needs a credential and its variable is unset or empty. The
    /// message names the backend and the variables it reads, never a value.
    #[error("backend {backend}: no credential in ${var} (or {fallback})")]
    MissingCredential {
        /// The backend configured (`anthropic`, `claude-cli`).
        backend: &'static str,
        /// The configured variable (`backend.api_key_env`).
        var: String,
        /// The other variable that backend accepts instead.
        fallback: &'static str,
    },
    /// `kind = "claude-cli"` but no `claude` binary was configured or found.
    #[error(
        "backend claude-cli: no claude binary (set backend.claude_bin or $MUNINN_CLAUDE_BIN, or run scripts/install-claude-cli.sh)"
    )]
    MissingClaudeBin,
    /// The session-binding key could not be read or created (the message never holds the key).
    #[error("session-binding key {}: {reason}", path.display())]
    BindingKey {
        /// The key file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The HTTPS client could not be built.
    #[error("backend anthropic: {0}")]
    Client(String),
}

/// The claude-cli backend: its credential, binary, binding key, each Mind's self-session and
/// the shared process pool.
fn claude_cli_factory(
    config: &Config,
    env: &impl Fn(&str) -> Option<String>,
    base: String,
) -> Result<BackendFactory, BackendSetupError> {
    let var = &config.backend.api_key_env;
    // An API key from the configured variable, else a Claude subscription's OAuth token (the
    // CLI sends that as a bearer); either reaches the child through an inherited pipe, never
    // its environment or argv.
    let (key, credential_kind) = match env(var).filter(|v| !v.is_empty()) {
        Some(key) => (key, CredentialKind::ApiKey),
        None => env("CLAUDE_CODE_OAUTH_TOKEN")
            .filter(|v| !v.is_empty())
            .map(|t| (t, CredentialKind::OAuthToken))
            .ok_or_else(|| BackendSetupError::MissingCredential {
                backend: "claude-cli",
                var: var.clone(),
                fallback: "CLAUDE_CODE_OAUTH_TOKEN",
            })?,
    };
    let bin = claude_bin(config, env)
        .filter(|p| p.is_file())
        .ok_or(BackendSetupError::MissingClaudeBin)?;
    let binding_key = load_or_create_binding_key(&config.data_dir.join(BINDING_KEY_FILE))?;
    Ok(BackendFactory::ClaudeCli {
        bin,
        data_dir: config.data_dir.join("claude-cli"),
        base_url: base,
        api_key: Secret::new(key),
        credential_kind,
        binding_key: Box::new(binding_key),
        self_sessions: Box::new(
            config
                .minds
                .iter()
                .map(|m| {
                    let resolved = m.self_session.resolve(&config.backend.self_session);
                    (m.id.clone(), resolved)
                })
                .collect(),
        ),
        pool: config.backend.pool.clone(),
        shared_pool: SharedPool::new(pool_config(&config.backend.pool)),
        sweeps: Sweeps::default(),
        turn_timeout: config
            .backend
            .cli_turn_timeout_s
            .map(|s| std::time::Duration::from_secs(s.max(1))),
    })
}

impl BackendFactory {
    /// The configured backend: `anthropic` when asked for or when the credential variable is set,
    /// the simulator otherwise. `env` is the environment (injected).
    pub fn from_config(
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<BackendFactory, BackendSetupError> {
        let var = &config.backend.api_key_env;
        let kind = backend_kind(config, &env);
        let base = config
            .backend
            .base_url
            .clone()
            .unwrap_or_else(|| "https://api.anthropic.com".to_string());
        match kind {
            BackendKind::ClaudeCli => claude_cli_factory(config, &env, base),
            BackendKind::Sim => Ok(BackendFactory::Sim(Arc::new(Simulator::new(
                SimConfig::default(),
            )))),
            BackendKind::Anthropic => {
                let lookup = |name: &str| {
                    if name == "ANTHROPIC_API_KEY" {
                        env(var)
                    } else {
                        env(name)
                    }
                };
                let (key, auth) = credentials_from_env(lookup).map_err(|_| {
                    BackendSetupError::MissingCredential {
                        backend: "anthropic",
                        var: var.clone(),
                        fallback: "ANTHROPIC_AUTH_TOKEN",
                    }
                })?;
                let mut client_config = ClientConfig::new(base, key);
                client_config.auth = auth;
                client_config.attempt_timeout = config
                    .backend
                    .attempt_timeout_s
                    .map(|s| std::time::Duration::from_secs(s.max(1)));
                let client = AnthropicClient::new(client_config, Arc::new(TokioSleeper))
                    .map_err(|e| BackendSetupError::Client(e.to_string()))?;
                Ok(BackendFactory::Anthropic(
                    Box::new(client),
                    config.backend.context_tools(),
                ))
            }
        }
    }

    /// A backend for one session; `session` names it (`<mind>/<role>`), which the claude-cli
    /// backend turns into its state directory and a stable session id, so a restarted host
    /// finds the session again.
    pub fn make(&self, clock: Arc<dyn Clock>, prices: &PriceTable, session: &str) -> AnyBackend {
        match self {
            BackendFactory::Sim(sim) => AnyBackend::Sim(Box::new(SimBackend::new(
                InProcess::new(sim.clone()),
                clock,
                prices.clone(),
            ))),
            BackendFactory::Anthropic(client, tools) => AnyBackend::Anthropic(Box::new(
                AnthropicBackend::new((**client).clone(), clock, prices.clone())
                    .with_context_tools(tools.clone()),
            )),
            BackendFactory::ClaudeCli {
                bin,
                data_dir,
                base_url,
                api_key,
                credential_kind,
                binding_key,
                self_sessions,
                shared_pool,
                turn_timeout,
                sweeps,
                ..
            } => {
                // One directory per session: the CLI keeps HOME, config and transcripts there,
                // and two children must never share a config directory.
                let mut config = CliConfig::new(
                    bin,
                    data_dir.join(session),
                    base_url.clone(),
                    api_key.clone(),
                    muninn_claude_cli::derive_session_id(session, 0),
                );
                config.binding_key = Some((**binding_key).clone());
                config.sweeps = sweeps.clone();
                config.credential_kind = *credential_kind;
                if let Some(timeout) = turn_timeout {
                    config.turn_timeout = *timeout;
                }
                // A Self session (`<mind>/self`) runs with its configured CLI tools, permission
                // mode and per-brief budget; a Persona session keeps `--tools=` and no budget
                // (its replies are schema-checked JSON, never tool calls).
                if let Some((mind, "self")) = session.rsplit_once('/')
                    && let Some(options) = self_sessions.get(mind)
                {
                    config.tools = options.cli_tools.clone();
                    config.permission_mode = Some(options.permission_mode.as_str().to_string());
                    // Per brief, not per process: each Self run gets the whole budget (the
                    // driver relaunches a child that already served a run, since the CLI
                    // counts `--max-budget-usd` from its process's start).
                    config.run_budget_micro_usd = options
                        .brief_budget_micro_usd
                        .and_then(|b| u64::try_from(b).ok());
                }
                let mut backend = ClaudeCliBackend::new(config);
                backend.join_pool(shared_pool.clone(), session);
                AnyBackend::ClaudeCli(Box::new(backend))
            }
        }
    }

    /// The Self session configured for `mind`, when this is the claude-cli factory.
    pub fn self_session(&self, mind: &str) -> Option<&SelfSession> {
        match self {
            BackendFactory::ClaudeCli { self_sessions, .. } => self_sessions.get(mind),
            BackendFactory::Sim(_) | BackendFactory::Anthropic(..) => None,
        }
    }

    /// The shared process pool every claude-cli session joins, when this is that factory.
    pub fn process_pool(&self) -> Option<&SharedPool> {
        match self {
            BackendFactory::ClaudeCli { shared_pool, .. } => Some(shared_pool),
            BackendFactory::Sim(_) | BackendFactory::Anthropic(..) => None,
        }
    }

    /// Waits until no claude-cli session's sweep of what its children left behind is under way
    /// (at once for the other backends).
    pub async fn sweeps_settled(&self) {
        if let BackendFactory::ClaudeCli { sweeps, .. } = self {
            sweeps.settled().await;
        }
    }

    /// The sweeps of what every claude-cli session's children left behind — one set, shared
    /// by every session this factory makes — when this is that factory.
    pub fn sweeps(&self) -> Option<&Sweeps> {
        match self {
            BackendFactory::ClaudeCli { sweeps, .. } => Some(sweeps),
            BackendFactory::Sim(_) | BackendFactory::Anthropic(..) => None,
        }
    }

    /// The process pool's settings, when this is the claude-cli factory.
    pub fn pool_settings(&self) -> Option<&PoolSettings> {
        match self {
            BackendFactory::ClaudeCli { pool, .. } => Some(pool),
            BackendFactory::Sim(_) | BackendFactory::Anthropic(..) => None,
        }
    }

    /// What the Minds run on, for people: the startup banner and `muninn doctor`.
    pub fn describe(&self) -> String {
        match self {
            BackendFactory::Sim(_) => "the built-in simulator".to_string(),
            BackendFactory::Anthropic(client, _) => {
                format!("the Anthropic API at {}", client.config().base_url)
            }
            BackendFactory::ClaudeCli { bin, base_url, .. } => {
                format!("the Claude Code CLI ({}) against {base_url}", bin.display())
            }
        }
    }

    /// The simulator, when this is one (its clock is the host's).
    pub fn simulator(&self) -> Option<&Arc<Simulator>> {
        match self {
            BackendFactory::Sim(sim) => Some(sim),
            BackendFactory::Anthropic(..) | BackendFactory::ClaudeCli { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests;
