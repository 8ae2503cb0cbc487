//! How to run the CLI for one session: [`CliConfig`] (binary, directories, environment,
//! credential and its passing, budgets), the [`Secret`] that never prints, and where a session's
//! transcript lives and how reseeded session ids are derived.

use crate::BindingKey;
use std::path::PathBuf;
use std::time::Duration;

/// A credential that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// How to run the CLI for one session.
///
/// The child's environment is exactly: `PATH` (= [`CliConfig::path`]), `HOME`
/// (`<data_dir>/home`), `CLAUDE_CONFIG_DIR` (`$HOME/.claude`), `TMPDIR` (`<data_dir>/tmp`, where
/// the CLI leaves sockets and probe directories), `ANTHROPIC_BASE_URL`, the credential variable
/// ([`CredentialKind::descriptor_var`] holding a descriptor number, or with
/// [`CredentialPassing::Environment`] [`CredentialKind::environment_var`] holding the secret),
/// `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (only the Messages API is called),
/// `CLAUDE_CODE_ATTRIBUTION_HEADER=0` (no billing-header block, whose content varies with the
/// first message and would break prefix stability), `CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1`
/// (subagents and Bash commands run inside the turn that started them, so the CLI never starts
/// a turn of its own on their end), `CLAUDE_CODE_PROMPT_CACHE_TTL`, `DISABLE_AUTO_COMPACT=1`, `DISABLE_TELEMETRY=1`, `DISABLE_AUTOUPDATER=1`, and
/// `CLAUDE_CODE_MAX_RETRIES` when [`CliConfig::max_retries`] is set, and `MUNINN_CHILD_MARK`, a
/// random mark per child that every process it starts inherits, by which those it leaves
/// behind are found and killed when it is done with. Nothing else is inherited.
#[derive(Debug, Clone)]
pub struct CliConfig {
    /// The `claude` binary (pinned 2.1.332).
    pub bin: PathBuf,
    /// Where HOME, TMPDIR and the per-session working directories live.
    pub data_dir: PathBuf,
    /// The Messages API base URL.
    pub base_url: String,
    /// The credential: an API key or an OAuth token, as [`CliConfig::credential_kind`] says.
    pub api_key: Secret,
    /// What the credential is (sent as `x-api-key` or as `authorization: Bearer`).
    pub credential_kind: CredentialKind,
    /// How the credential reaches the child.
    pub credential_passing: CredentialPassing,
    /// The session id (a UUID; muninn derives it from the Mind and segment).
    pub session_id: String,
    /// The child's `PATH`; minimal by default, since `--tools=` runs no commands.
    pub path: String,
    /// The CLI's own retry budget for 5xx and 429 (`None`: its default of 10).
    pub max_retries: Option<u32>,
    /// The longest a turn may take — writing its line, then reading its result — before the
    /// driver gives up on it (and kills the child).
    pub turn_timeout: Duration,
    /// How long shutdown waits after closing stdin before SIGTERM (and as long again before
    /// SIGKILL).
    pub shutdown_timeout: Duration,
    /// The key session handles are minted with. When set, a session found on disk is resumed
    /// only through a verified [`Handle`](crate::Handle) ([`ClaudeCliBackend::resume_with`](crate::ClaudeCliBackend::resume_with)), and a
    /// [`Backend::start`](muninn_backend::Backend::start) with no handle claimed starts a fresh session under the next unused
    /// derived id; when `None`, any transcript found is resumed (the caller vouches for it).
    pub binding_key: Option<BindingKey>,
    /// The CLI's built-in tools the session may use (`--tools Read,Grep`); empty (the default)
    /// runs with `--tools=`, none. A tool that runs commands also needs them on [`CliConfig::path`].
    pub tools: Vec<String>,
    /// `--permission-mode` (`acceptEdits`, `auto`, `bypassPermissions`, `manual`, `dontAsk`,
    /// `plan`); `None` leaves the CLI's default.
    pub permission_mode: Option<String>,
    /// `--max-budget-usd`, in micro-dollars, for each child **process**: the CLI stops a turn
    /// that crosses it (after the request that crossed it) and refuses later ones; both come
    /// back as [`BackendError::Api`](muninn_backend::BackendError::Api) with kind `budget_exhausted`. The CLI counts it from the
    /// process's start, not over the session — `total_cost_usd` is restored on `--resume`, the
    /// budget's count is not (measured on 2.1.332) — so a relaunch (a crash, an unpark) starts
    /// it afresh, and a long-lived child spends it across all its turns. For a budget per unit
    /// of work use [`CliConfig::run_budget_micro_usd`]; the two cannot be combined.
    pub max_budget_micro_usd: Option<u64>,
    /// The most one run may spend, micro-dollars: each [`Backend::run`](muninn_backend::Backend::run) (a Self brief, its
    /// flush included) — and each [`Backend::turn`](muninn_backend::Backend::turn) or [`Backend::compact`](muninn_backend::Backend::compact), which are runs of
    /// their own — gets this whole budget. Since the CLI counts `--max-budget-usd` per process
    /// (see [`CliConfig::max_budget_micro_usd`]), the driver gives a run a fresh count by
    /// relaunching the child (`--resume`, about 0.7 s, reported as
    /// [`TurnReport::budget_relaunch`](crate::TurnReport::budget_relaunch)) when the live child has already served a run; a child
    /// launched at start or after a park, crash or earlier relaunch is used as it is. A run
    /// that crosses it ends as [`BackendError::Api`](muninn_backend::BackendError::Api) with kind `budget_exhausted`; the next
    /// run gets a fresh budget. Meant for the Self, whose runs are minutes long; a session
    /// without it (the Persona) keeps its one long-lived process.
    pub run_budget_micro_usd: Option<u64>,
    /// `--max-turns`: the most requests one turn (tool loop) may make; running out comes back as
    /// [`BackendError::Api`](muninn_backend::BackendError::Api) with kind `max_turns`.
    pub max_turns: Option<u32>,
    /// **Tests only**: leave the CLI's own auto-compaction on (no `DISABLE_AUTO_COMPACT`,
    /// `"autoCompactEnabled": true`), to show that the switches muninn sets are what stops it.
    /// muninn never sets this.
    pub allow_cli_auto_compaction: bool,
    /// Where the sweeps of what this session's children leave behind run (see [`crate::Sweeps`]):
    /// a host gives every session one set and waits for it to settle before it exits.
    pub sweeps: crate::Sweeps,
}

/// What kind of credential [`CliConfig::api_key`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CredentialKind {
    /// A Console API key, sent as `x-api-key`.
    #[default]
    ApiKey,
    /// An OAuth access token (`claude setup-token`), sent as `authorization: Bearer`. With it the
    /// CLI defaults to the subscription's model, so give [`SessionSpec::model`](muninn_backend::SessionSpec::model) explicitly.
    OAuthToken,
}

impl CredentialKind {
    /// The variable naming the inherited descriptor the CLI reads the credential from.
    pub fn descriptor_var(self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
            CredentialKind::OAuthToken => "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR",
        }
    }

    /// The variable holding the credential itself ([`CredentialPassing::Environment`]).
    pub fn environment_var(self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "ANTHROPIC_API_KEY",
            CredentialKind::OAuthToken => "CLAUDE_CODE_OAUTH_TOKEN",
        }
    }
}

/// How the credential reaches the child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CredentialPassing {
    /// Through an inherited pipe, read to its end by the CLI (2.1.332 reads
    /// `/proc/self/fd/<n>`): the secret is never in the child's environment, argv or a file,
    /// nor in what the CLI's tool processes inherit (neither the descriptor nor its variable).
    #[default]
    FileDescriptor,
    /// In the child's environment (readable in `/proc/<pid>/environ` by the same user, and
    /// handed by the CLI to every tool process it runs: a Bash call's `env` prints it): for CLI
    /// versions without the descriptor variables.
    Environment,
}

impl CliConfig {
    /// A config with the defaults: an API key passed through a descriptor,
    /// `PATH=/usr/bin:/bin`, the CLI's retry budget, a 10-minute turn timeout (the CLI's full 5xx
    /// backoff takes about 3 minutes), 5 s to shut down.
    pub fn new(
        bin: impl Into<PathBuf>,
        data_dir: impl Into<PathBuf>,
        base_url: impl Into<String>,
        api_key: Secret,
        session_id: impl Into<String>,
    ) -> CliConfig {
        CliConfig {
            bin: bin.into(),
            data_dir: data_dir.into(),
            base_url: base_url.into(),
            api_key,
            session_id: session_id.into(),
            path: "/usr/bin:/bin".to_string(),
            max_retries: None,
            turn_timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(5),
            binding_key: None,
            tools: Vec::new(),
            permission_mode: None,
            max_budget_micro_usd: None,
            run_budget_micro_usd: None,
            max_turns: None,
            credential_kind: CredentialKind::ApiKey,
            credential_passing: CredentialPassing::FileDescriptor,
            allow_cli_auto_compaction: false,
            sweeps: crate::Sweeps::default(),
        }
    }

    /// `$HOME` of the child.
    pub fn home_dir(&self) -> PathBuf {
        self.data_dir.join("home")
    }

    /// `$CLAUDE_CONFIG_DIR` of the child (transcripts live under `projects/`).
    pub fn config_dir(&self) -> PathBuf {
        self.home_dir().join(".claude")
    }

    /// `$TMPDIR` of the child.
    pub fn tmp_dir(&self) -> PathBuf {
        self.data_dir.join("tmp")
    }

    /// The session's working directory. Named after the *configured* id and kept when the
    /// session is reseeded, because the CLI files transcripts under a slug of the cwd.
    pub fn work_dir(&self) -> PathBuf {
        self.data_dir.join("sessions").join(&self.session_id)
    }
}

/// The CLI's transcript file for `session_id`, if it exists: `projects/<cwd slug>/<id>.jsonl`
/// under the config dir. The slug directory is searched rather than recomputed, so a slug rule
/// the CLI changes (or shortens for long paths) does not lose the file.
pub fn transcript_path(config: &CliConfig, session_id: &str) -> Option<PathBuf> {
    let projects = config.config_dir().join("projects");
    let name = format!("{session_id}.jsonl");
    std::fs::read_dir(projects)
        .ok()?
        .flatten()
        .map(|e| e.path().join(&name))
        .find(|p| p.is_file())
}

/// A new session id for the `n`th reseed of `base`: deterministic (so a restarted host derives
/// the same one, whatever Rust it was built with: SHA-256, not the standard library's
/// `DefaultHasher`, whose output may change between releases), shaped as a UUID (version nibble
/// 5, RFC 4122 variant). Uniqueness within one data directory is all the CLI needs.
pub fn derive_session_id(base: &str, n: u32) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("muninn-claude-cli-session\0{base}\0{n}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x50;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The first session id derived from the configured one that has no transcript on disk: where a
/// fresh session starts when the configured one is taken by an earlier segment.
pub(crate) fn fresh_session_id(config: &CliConfig) -> String {
    (1..)
        .map(|n| derive_session_id(&config.session_id, n))
        .find(|id| transcript_path(config, id).is_none())
        .unwrap_or_else(|| config.session_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_uuid_shaped_stable_and_distinct() {
        let a = derive_session_id("7e1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a5b", 1);
        assert_eq!(
            a,
            derive_session_id("7e1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a5b", 1)
        );
        assert_ne!(
            a,
            derive_session_id("7e1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a5b", 2)
        );
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "5");
        // Pinned (computed independently with Python's hashlib): a host built by another Rust
        // release derives the ids its sessions already have.
        assert_eq!(
            derive_session_id("vala/persona", 0),
            "990089ca-9e84-5b53-90a0-9e0df53c87a0"
        );
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn the_secret_never_prints() {
        let c = CliConfig::new(
            "claude",
            "/d",
            "http://x",
            Secret::new("sk-very-secret"),
            "id",
        );
        assert!(!format!("{c:?}").contains("sk-very-secret"));
    }
}
