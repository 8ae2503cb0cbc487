//! Which model serves the Minds: the in-process simulator when no credentials are configured,
//! the Anthropic Messages API when they are. One enum so a host runs either without boxing.

use crate::config::{BackendKind, Config};
use muninn_anthropic::backend::AnthropicBackend;
use muninn_anthropic::client::{AnthropicClient, ClientConfig, credentials_from_env};
use muninn_anthropic::clock::{Clock, TokioSleeper};
use muninn_backend::{Backend, BackendError, SessionSpec, TurnInput, TurnOutcome};
use muninn_core::price::PriceTable;
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{SimConfig, Simulator};
use std::sync::Arc;

/// A backend of either kind.
#[derive(Debug)]
pub enum AnyBackend {
    /// The in-process simulator.
    Sim(Box<SimBackend>),
    /// The Anthropic Messages API over HTTPS.
    Anthropic(Box<AnthropicBackend<AnthropicClient>>),
}

impl Backend for AnyBackend {
    fn name(&self) -> &str {
        match self {
            AnyBackend::Sim(_) => "sim",
            AnyBackend::Anthropic(b) => b.name(),
        }
    }

    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        match self {
            AnyBackend::Sim(b) => b.start(spec).await,
            AnyBackend::Anthropic(b) => b.start(spec).await,
        }
    }

    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.turn(input).await,
            AnyBackend::Anthropic(b) => b.turn(input).await,
        }
    }

    async fn ping(&mut self) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.ping().await,
            AnyBackend::Anthropic(b) => b.ping().await,
        }
    }

    async fn ping_head(&mut self) -> Result<TurnOutcome, BackendError> {
        match self {
            AnyBackend::Sim(b) => b.ping_head().await,
            AnyBackend::Anthropic(b) => b.ping_head().await,
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
}

impl std::fmt::Debug for BackendFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendFactory::Sim(_) => f.write_str("BackendFactory::Sim"),
            BackendFactory::Anthropic(_) => f.write_str("BackendFactory::Anthropic"),
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
        match kind {
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
                let base = config
                    .backend
                    .base_url
                    .clone()
                    .unwrap_or_else(|| "https://api.anthropic.com".to_string());
                let mut client_config = ClientConfig::new(base, key);
                client_config.auth = auth;
                let client = AnthropicClient::new(client_config, Arc::new(TokioSleeper))
                    .map_err(|e| BackendSetupError::Client(e.to_string()))?;
                Ok(BackendFactory::Anthropic(Box::new(client)))
            }
        }
    }

    /// A backend for one session.
    pub fn make(&self, clock: Arc<dyn Clock>, prices: &PriceTable) -> AnyBackend {
        match self {
            BackendFactory::Sim(sim) => AnyBackend::Sim(Box::new(SimBackend::new(
                InProcess::new(sim.clone()),
                clock,
                prices.clone(),
            ))),
            BackendFactory::Anthropic(client) => AnyBackend::Anthropic(Box::new(
                AnthropicBackend::new((**client).clone(), clock, prices.clone()),
            )),
        }
    }

    /// The simulator, when this is one (its clock is the host's).
    pub fn simulator(&self) -> Option<&Arc<Simulator>> {
        match self {
            BackendFactory::Sim(sim) => Some(sim),
            BackendFactory::Anthropic(_) => None,
        }
    }
}
