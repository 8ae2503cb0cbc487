//! Which model serves the Minds: the in-process simulator when no credentials are configured,
//! the Anthropic Messages API when they are, or — when asked for — the Claude Code CLI, one
//! long-lived `claude -p` process per session. One enum so a host runs any without boxing.

use crate::config::{BackendKind, Config};
use muninn_anthropic::backend::AnthropicBackend;
use muninn_anthropic::client::{AnthropicClient, ClientConfig, credentials_from_env};
use muninn_anthropic::clock::{Clock, TokioSleeper};
use muninn_backend::{Backend, BackendError, SessionSpec, TurnInput, TurnOutcome};
use muninn_claude_cli::{ClaudeCliBackend, CliConfig, Secret};
use muninn_core::price::PriceTable;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use std::path::PathBuf;
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
}

/// Builds a fresh backend per session.
#[derive(Clone)]
pub enum BackendFactory {
    /// Sessions on one shared simulator (one provider cache, as on the real API).
    Sim(Arc<Simulator>),
    /// Sessions on the Anthropic API, sharing one HTTPS client.
    Anthropic(Box<AnthropicClient>),
    /// Sessions on the Claude Code CLI: one child per session, each with its own state
    /// directory under `data_dir`.
    ClaudeCli {
        /// The `claude` binary.
        bin: PathBuf,
        /// `<host data_dir>/claude-cli`.
        data_dir: PathBuf,
        /// The Messages API base URL the CLI calls.
        base_url: String,
        /// The credential, passed to each child by environment only.
        api_key: Secret,
    },
}

impl std::fmt::Debug for BackendFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendFactory::Sim(_) => f.write_str("BackendFactory::Sim"),
            BackendFactory::Anthropic(_) => f.write_str("BackendFactory::Anthropic"),
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
    /// `kind = "anthropic"` but the credential variable is unset or empty. The message names the
    /// variable, never a value.
    #[error("backend anthropic: no credential in ${0} (or ANTHROPIC_AUTH_TOKEN)")]
    MissingCredential(String),
    /// `kind = "claude-cli"` but no `claude` binary was configured or found.
    #[error(
        "backend claude-cli: no claude binary (set backend.claude_bin or $MUNINN_CLAUDE_BIN, or run scripts/install-claude-cli.sh)"
    )]
    MissingClaudeBin,
    /// The HTTPS client could not be built.
    #[error("backend anthropic: {0}")]
    Client(String),
}

impl BackendFactory {
    /// The configured backend: `anthropic` when asked for or when the credential variable is set,
    /// the simulator otherwise. `env` is the environment (injected).
    pub fn from_config(
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<BackendFactory, BackendSetupError> {
        let var = &config.backend.api_key_env;
        let has_key = env(var).is_some_and(|v| !v.is_empty())
            || env("ANTHROPIC_AUTH_TOKEN").is_some_and(|v| !v.is_empty());
        let kind = config.backend.kind.unwrap_or(if has_key {
            BackendKind::Anthropic
        } else {
            BackendKind::Sim
        });
        let base = config
            .backend
            .base_url
            .clone()
            .unwrap_or_else(|| "https://api.anthropic.com".to_string());
        match kind {
            BackendKind::ClaudeCli => {
                let key = env(var)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| BackendSetupError::MissingCredential(var.clone()))?;
                let bin = config
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
                    .filter(|p| p.is_file())
                    .ok_or(BackendSetupError::MissingClaudeBin)?;
                Ok(BackendFactory::ClaudeCli {
                    bin,
                    data_dir: config.data_dir.join("claude-cli"),
                    base_url: base,
                    api_key: Secret::new(key),
                })
            }
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
                let (key, auth) = credentials_from_env(lookup)
                    .map_err(|_| BackendSetupError::MissingCredential(var.clone()))?;
                let mut client_config = ClientConfig::new(base, key);
                client_config.auth = auth;
                let client = AnthropicClient::new(client_config, Arc::new(TokioSleeper))
                    .map_err(|e| BackendSetupError::Client(e.to_string()))?;
                Ok(BackendFactory::Anthropic(Box::new(client)))
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
            BackendFactory::Anthropic(client) => AnyBackend::Anthropic(Box::new(
                AnthropicBackend::new((**client).clone(), clock, prices.clone()),
            )),
            BackendFactory::ClaudeCli {
                bin,
                data_dir,
                base_url,
                api_key,
            } => {
                // One directory per session: the CLI keeps HOME, config and transcripts there,
                // and two children must never share a config directory.
                let config = CliConfig::new(
                    bin,
                    data_dir.join(session),
                    base_url.clone(),
                    api_key.clone(),
                    muninn_claude_cli::derive_session_id(session, 0),
                );
                AnyBackend::ClaudeCli(Box::new(ClaudeCliBackend::new(config)))
            }
        }
    }

    /// The simulator, when this is one (its clock is the host's).
    pub fn simulator(&self) -> Option<&Arc<Simulator>> {
        match self {
            BackendFactory::Sim(sim) => Some(sim),
            BackendFactory::Anthropic(_) | BackendFactory::ClaudeCli { .. } => None,
        }
    }
}
