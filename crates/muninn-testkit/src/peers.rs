//! Finding the real peers the tests run against (STYLE 10): the Claude Code CLI, the official
//! Anthropic Python SDK, PostgreSQL, a headless browser and Synapse — written once here instead
//! of in every test file.
//!
//! | peer | found through | installed by |
//! |---|---|---|
//! | Claude Code CLI 2.1.332 | `MUNINN_CLAUDE_BIN`, else the install script's place under `~/.cache/muninn` | `scripts/install-claude-cli.sh` |
//! | Python with `anthropic` | `MUNINN_PYTHON`, else `python3` | `scripts/install-python-peers.sh` |
//! | PostgreSQL | `MUNINN_TEST_POSTGRES` (an admin URL), else `postgres://postgres@127.0.0.1:5432/test`; `psql` on 127.0.0.1 for whole databases | `scripts/test.sh` starts it |
//! | headless Chromium and chromedriver (Debian's `chromium`, `chromium-driver`) | `MUNINN_CHROMIUM` and `MUNINN_CHROMEDRIVER`, else `/usr/bin/chromium` and `/usr/bin/chromedriver` | `scripts/install-browser-peers.sh` |
//! | Synapse 1.163.2 (a Matrix homeserver) | `MUNINN_SYNAPSE_PYTHON`, else the install script's environment under `~/.cache/muninn/synapse`; each test starts its own (`crate::synapse`) | `scripts/install-synapse.sh` |
//!
//! A test whose peer is missing **fails** ([`missing_peer`]), so a green `cargo test` on a machine
//! without the peers cannot hide that it tested nothing of them. Skipping is asked for explicitly
//! with `MUNINN_SKIP_PEERS=1`: then the test prints `SKIP: <what>` and returns early. Benchmarks
//! use the unchecked lookups ([`claude_cli_path`], [`FreshDatabase::create`]) and report a
//! missing peer themselves.

use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

/// The one Claude Code CLI version the driver and the tests rely on (its observed protocol).
pub const CLAUDE_CLI_VERSION: &str = "2.1.332";

/// Where `scripts/install-claude-cli.sh` puts the CLI, under `$HOME`.
const CLAUDE_CLI_INSTALLED: &str =
    ".cache/muninn/claude-cli/node_modules/@anthropic-ai/claude-code/bin/claude.exe";

/// The Synapse version the Matrix connector is tested against.
pub const SYNAPSE_VERSION: &str = "1.163.2";

/// Where `scripts/install-synapse.sh` puts the environment's interpreter, under `$HOME`.
const SYNAPSE_INSTALLED: &str = ".cache/muninn/synapse/bin/python";

/// The admin URL the store's PostgreSQL tests use when `MUNINN_TEST_POSTGRES` is not set.
const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Whether a missing peer fails the test: always, unless `MUNINN_SKIP_PEERS=1` asks to skip.
pub fn peers_required() -> bool {
    std::env::var("MUNINN_SKIP_PEERS").as_deref() != Ok("1")
}

/// Reports a missing peer: panics when [`peers_required`], else prints `SKIP: <what>` to stderr
/// (the caller then returns without testing anything).
#[track_caller]
pub fn missing_peer(what: &str) {
    if peers_required() {
        panic!(
            "peer missing: {what} (scripts/test.sh installs every peer; MUNINN_SKIP_PEERS=1 skips the tests that need one)"
        );
    }
    eprintln!("SKIP: {what}");
}

/// Where the Claude Code CLI would be: `MUNINN_CLAUDE_BIN`, else the install script's place if
/// something is there. Neither its version nor `MUNINN_SKIP_PEERS` is checked (benchmarks).
pub fn claude_cli_path() -> Option<PathBuf> {
    std::env::var("MUNINN_CLAUDE_BIN")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            let installed = PathBuf::from(std::env::var("HOME").ok()?).join(CLAUDE_CLI_INSTALLED);
            installed.exists().then_some(installed)
        })
}

/// The Claude Code CLI, if it is [`CLAUDE_CLI_VERSION`] (only the pinned version: the driver
/// relies on its observed protocol); `None` after [`missing_peer`].
#[track_caller]
pub fn claude_cli() -> Option<PathBuf> {
    let pinned = claude_cli_path().filter(|bin| {
        Command::new(bin).arg("--version").output().is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).starts_with(&format!("{CLAUDE_CLI_VERSION} "))
        })
    });
    if pinned.is_none() {
        missing_peer(&format!(
            "Claude Code CLI {CLAUDE_CLI_VERSION} not found (run scripts/install-claude-cli.sh, or set MUNINN_CLAUDE_BIN)"
        ));
    }
    pinned
}

/// A Python that can `import anthropic` (`MUNINN_PYTHON`, else `python3`); `None` after
/// [`missing_peer`].
#[track_caller]
pub fn python_sdk() -> Option<String> {
    let python = std::env::var("MUNINN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = Command::new(&python)
        .args(["-c", "import anthropic"])
        .output();
    if probe.is_ok_and(|o| o.status.success()) {
        return Some(python);
    }
    missing_peer(&format!(
        "{python} cannot import anthropic (run scripts/install-python-peers.sh, or set MUNINN_PYTHON)"
    ));
    None
}

/// A browser the dashboard's tests drive over WebDriver: Debian's Chromium, run headless, and
/// its chromedriver (the same build, from `chromium-driver`). Nothing here downloads a browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Browser {
    /// The Chromium binary.
    pub chromium: PathBuf,
    /// The chromedriver binary.
    pub chromedriver: PathBuf,
}

impl Browser {
    /// The arguments the tests launch Chromium with: headless, no sandbox (tests run as root in
    /// containers), no GPU, and nothing that reaches the network on its own; `profile` is a
    /// fresh user-data directory.
    pub fn args(profile: &std::path::Path) -> Vec<String> {
        [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1700",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect()
    }
}

/// Chromium and chromedriver (`MUNINN_CHROMIUM`, `MUNINN_CHROMEDRIVER`, else Debian's
/// `/usr/bin/chromium` and `/usr/bin/chromedriver`), if both answer `--version`; `None` after
/// [`missing_peer`].
#[track_caller]
pub fn chromium() -> Option<Browser> {
    let find = |var: &str, default: &str| {
        let path = std::env::var(var).map_or_else(|_| PathBuf::from(default), PathBuf::from);
        Command::new(&path)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
            .then_some(path)
    };
    match (
        find("MUNINN_CHROMIUM", "/usr/bin/chromium"),
        find("MUNINN_CHROMEDRIVER", "/usr/bin/chromedriver"),
    ) {
        (Some(chromium), Some(chromedriver)) => Some(Browser {
            chromium,
            chromedriver,
        }),
        _ => {
            missing_peer(
                "Chromium and chromedriver not found (run scripts/install-browser-peers.sh, or set MUNINN_CHROMIUM and MUNINN_CHROMEDRIVER)",
            );
            None
        }
    }
}

/// The interpreter of a Python environment with Synapse [`SYNAPSE_VERSION`]
/// (`MUNINN_SYNAPSE_PYTHON`, else the install script's place); `None` after [`missing_peer`].
#[track_caller]
pub fn synapse_python() -> Option<PathBuf> {
    let python = std::env::var("MUNINN_SYNAPSE_PYTHON")
        .ok()
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(std::env::var("HOME").ok()?).join(SYNAPSE_INSTALLED)));
    let pinned = python.filter(|python| {
        Command::new(python)
            .args([
                "-c",
                &format!(
                    "import synapse, sys; sys.exit(synapse.__version__ != '{SYNAPSE_VERSION}')"
                ),
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if pinned.is_none() {
        missing_peer(&format!(
            "Synapse {SYNAPSE_VERSION} not found (run scripts/install-synapse.sh, or set MUNINN_SYNAPSE_PYTHON)"
        ));
    }
    pinned
}

/// The admin URL of the PostgreSQL the store's tests use: `MUNINN_TEST_POSTGRES`, else
/// `postgres://postgres@127.0.0.1:5432/test`.
pub fn postgres_url() -> String {
    std::env::var("MUNINN_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_string())
}

/// An admin pool on [`postgres_url`], or `None` after [`missing_peer`] when it cannot be
/// reached. `test` names the test in the message.
pub async fn postgres_admin(test: &str) -> Option<sqlx::PgPool> {
    let options = match sqlx::postgres::PgConnectOptions::from_str(&postgres_url()) {
        Ok(options) => options,
        Err(error) => panic!("bad MUNINN_TEST_POSTGRES: {error}"),
    };
    let connected = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await;
    match connected {
        Ok(pool) => Some(pool),
        Err(error) => {
            missing_peer(&format!(
                "{test}: PostgreSQL at {} unreachable: {error}",
                postgres_url()
            ));
            None
        }
    }
}

/// Runs one SQL command through `psql` as `postgres` on 127.0.0.1 (the machine's trust-auth
/// cluster), for what a pool cannot do on itself: creating and dropping whole databases.
pub fn psql(sql: &str) -> Result<(), String> {
    match Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        Err(e) => Err(format!("psql: {e}")),
    }
}

/// A fresh PostgreSQL database on 127.0.0.1, dropped (with its connections) when this is.
#[derive(Debug)]
pub struct FreshDatabase {
    name: String,
}

impl FreshDatabase {
    /// Creates `<prefix>_<pid>`, or says why it could not.
    pub fn create(prefix: &str) -> Result<FreshDatabase, String> {
        let name = format!("{prefix}_{}", std::process::id());
        psql(&format!("CREATE DATABASE {name}"))?;
        Ok(FreshDatabase { name })
    }

    /// [`create`](Self::create) for a test: `None` after [`missing_peer`] when PostgreSQL is not
    /// there. `test` names the test in the message.
    #[track_caller]
    pub fn for_test(prefix: &str, test: &str) -> Option<FreshDatabase> {
        match FreshDatabase::create(prefix) {
            Ok(database) => Some(database),
            Err(e) => {
                missing_peer(&format!(
                    "{test}: cannot create a database on PostgreSQL at 127.0.0.1: {e}"
                ));
                None
            }
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its URL, as `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}/{}", Self::SERVER, self.name)
    }

    /// Where the server listens.
    pub const SERVER: &str = "127.0.0.1:5432";

    /// Its URL with the connections going through `proxy` (a [`crate::SilentProxy`]'s address)
    /// instead of straight to the server.
    pub fn url_through(&self, proxy: std::net::SocketAddr) -> String {
        format!("postgres://postgres@{proxy}/{}", self.name)
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        let _ = psql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}
