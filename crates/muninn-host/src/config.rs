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
//!
//! ## Layout
//!
//! This file holds [`Config`] itself and its loading (parse, path resolution, the demo);
//! `backend` the backend, Self session and pool sections; `mind` a `[[mind]]`; `error` the
//! load errors; `validate` the checks [`Config::validate`] runs; `api`, `bounds` and `matrix`
//! their sections.

pub mod api;
mod backend;
mod bounds;
mod error;
pub mod matrix;
mod mind;
mod validate;

pub use api::ApiConfig;
pub use backend::{
    BackendConfig, BackendKind, DEFAULT_FLUSH_ESCALATE_AFTER_S, DEFAULT_FLUSH_EXIT_DRAIN_MS,
    DEFAULT_FLUSH_GRACE_S, DEFAULT_FLUSH_HEADROOM_TOKENS, PermissionMode, PoolSettings,
    SelfSession, SelfSessionConfig,
};
pub use bounds::{CONFIG_FILE_MAX_BYTES, read_config_file};
pub use error::{ConfigError, Problem};
pub use matrix::{MatrixConfig, MindMatrixConfig, SECRET_MAX_BYTES, SecretSource};
pub use mind::{Campaign, MindConfig, RefreshMode};
pub use validate::{check_id, check_room};

use mind::{
    default_head_ttl, default_max_tokens, default_memory_tokens, default_min_segment,
    default_model, default_policy, default_tail_ttl, default_turns_per_wake, default_window_s,
};
use validate::is_env_name;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The name shown in errors about the built-in demo configuration.
pub const DEMO_SOURCE: &str = "<built-in demo>";

/// The file name of the API token inside the data directory.
pub const API_TOKEN_FILE: &str = "api-token";

/// The whole configuration.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the database file, the API token and child session homes live.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// The store: a `postgres://` URL, or a SQLite file path. Default: `<data_dir>/muninn.db`.
    /// A URL's `call_timeout` parameter (muninn's own, taken out before the driver reads the
    /// URL) bounds each store call on a server that stops answering: `250ms`, `5s`, `2min`
    /// or a bare number of milliseconds, more than zero; 30 s when absent.
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
fn default_data_dir() -> PathBuf {
    PathBuf::from("muninn-data")
}
fn default_listen() -> String {
    "127.0.0.1:7676".into()
}
fn default_lease_ttl_ms() -> i64 {
    crate::runtime::LEASE_TTL_MS
}

/// Every field, the database as the store shows it ([`muninn_store::ShownDatabase`]): a
/// `{config:?}` in a log or a panic must not print the PostgreSQL password. Destructured, so a
/// new field cannot be left out unnoticed.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Config {
            data_dir,
            database,
            listen,
            api,
            lease_ttl_ms,
            prices,
            backend,
            matrix,
            minds,
        } = self;
        f.debug_struct("Config")
            .field("data_dir", data_dir)
            .field(
                "database",
                &database.as_deref().map(muninn_store::ShownDatabase),
            )
            .field("listen", listen)
            .field("api", api)
            .field("lease_ttl_ms", lease_ttl_ms)
            .field("prices", prices)
            .field("backend", backend)
            .field("matrix", matrix)
            .field("minds", minds)
            .finish()
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
        let text = read_config_file(&path).map_err(|source| ConfigError::Read {
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
