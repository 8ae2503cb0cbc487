//! Finding the running host, for every client command (`say`, `tail`, `status`, `ledger`,
//! `brake`, `caps`), from any directory. The address and the token file come from, in order:
//!
//! 1. `--addr` / `MUNINN_ADDR` and `--token-file` / `MUNINN_TOKEN_FILE`;
//! 2. the host's configuration, `--config` / `MUNINN_CONFIG`: its `listen` and
//!    `<data_dir>/api-token` (every path in it absolute, whatever the directory);
//! 3. the host file a running `muninn serve` leaves in the user's state directory
//!    (`muninn_api::discovery`);
//! 4. the built-in demo's, relative to the working directory.
//!
//! The token is read from its file and never printed.

use anyhow::Context;
use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_api::discovery::{HostFile, host_file_path};
use muninn_host::config::Config;
use std::path::PathBuf;

/// How to reach the host: shared by every client command.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// The host's configuration (for its address and data directory).
    #[arg(long, env = "MUNINN_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The host's API address (`127.0.0.1:7676` or `http://…`).
    #[arg(long, env = "MUNINN_ADDR", global = true)]
    addr: Option<String>,
    /// The file holding the API token.
    #[arg(long, env = "MUNINN_TOKEN_FILE", global = true)]
    token_file: Option<PathBuf>,
}

/// Where the host is, and how that was found (for messages).
#[derive(Debug, Clone)]
pub struct Target {
    /// The API address.
    pub addr: String,
    /// The token file.
    pub token_file: PathBuf,
    /// Where they came from.
    pub source: String,
}

impl ApiArgs {
    /// Where the host is (see the [module docs](self)).
    pub fn target(&self) -> anyhow::Result<Target> {
        if let (Some(addr), Some(token_file)) = (&self.addr, &self.token_file) {
            return Ok(Target {
                addr: addr.clone(),
                token_file: token_file.clone(),
                source: "--addr and --token-file".into(),
            });
        }
        let (addr, token_file, source) = match &self.config {
            Some(path) => {
                let config = Config::load(Some(path))?;
                (
                    config.listen.clone(),
                    config.api_token_path(),
                    format!("the configuration {}", path.display()),
                )
            }
            None => match running_host(host_file_path(|k| std::env::var(k).ok()))? {
                Some((file, path)) => (
                    file.api,
                    file.token_file,
                    format!("the running host's {}", path.display()),
                ),
                None => {
                    let demo = Config::load(None)?;
                    (
                        demo.listen.clone(),
                        demo.api_token_path(),
                        "the demo's defaults (no configuration, no running host found)".into(),
                    )
                }
            },
        };
        Ok(Target {
            addr: self.addr.clone().unwrap_or(addr),
            token_file: self.token_file.clone().unwrap_or(token_file),
            source,
        })
    }

    /// A client of the host.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        let target = self.target()?;
        let token = ApiToken::read(&target.token_file).with_context(|| {
            format!(
                "reading the API token (found through {}): start the host with `muninn serve` (it creates the token), or pass --token-file / MUNINN_TOKEN_FILE",
                target.source
            )
        })?;
        Ok(ApiClient::new(&target.addr, token)?)
    }
}

/// The running host's file and its path, if there is one at `path`; an error naming the file
/// when it cannot be read (a pipe or a file past its limit there is no host file).
fn running_host(path: Option<PathBuf>) -> anyhow::Result<Option<(HostFile, PathBuf)>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let file = HostFile::read(&path)
        .with_context(|| format!("reading the host file {}", path.display()))?;
    Ok(file.map(|file| (file, path)))
}

/// Runs `future` on a small single-threaded runtime (these commands make a few requests).
pub fn block_on<T>(
    future: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}
