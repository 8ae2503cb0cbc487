//! How a client finds a running host from any directory: `muninn serve` writes where its API
//! listens and where its token is to a small JSON file in the user's state directory
//! (`$XDG_STATE_HOME/muninn/host.json`, else `~/.local/state/muninn/host.json`), and removes
//! it when it stops. A client with no address, token file or configuration given reads it.
//!
//! The file holds no secret: the token stays in its own file (mode 0600), named here by path.
//! The environment is injected (`env`), so tests point the file wherever they like.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The name of the file in the state directory.
pub const HOST_FILE: &str = "host.json";

/// Where a running host is: the content of [`HOST_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFile {
    /// The API's base URL (`http://127.0.0.1:7676`).
    pub api: String,
    /// The file holding the API token (absolute).
    pub token_file: PathBuf,
    /// The host's process id (a file whose process is gone is stale).
    pub pid: u32,
    /// The configuration it runs, if it was given one (absolute).
    #[serde(default)]
    pub config: Option<PathBuf>,
}

/// The host file's path for this environment: `$MUNINN_STATE_DIR/host.json`, else
/// `$XDG_STATE_HOME/muninn/host.json`, else `$HOME/.local/state/muninn/host.json`; `None`
/// without any of them.
pub fn host_file_path(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set("MUNINN_STATE_DIR") {
        return Some(dir.join(HOST_FILE));
    }
    let state = set("XDG_STATE_HOME").or_else(|| set("HOME").map(|h| h.join(".local/state")))?;
    Some(state.join("muninn").join(HOST_FILE))
}

impl HostFile {
    /// Reads the host file at `path`; `None` if it is missing, unreadable, malformed, or names
    /// a process that no longer runs.
    pub fn read(path: &Path) -> Option<HostFile> {
        let text = std::fs::read_to_string(path).ok()?;
        let file: HostFile = serde_json::from_str(&text).ok()?;
        Path::new(&format!("/proc/{}", file.pid))
            .exists()
            .then_some(file)
    }

    /// Writes it to `path` (creating the directory), through a temporary file and a rename so
    /// a reader never sees half of it.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("json.{}", std::process::id()));
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, text + "\n")?;
        std::fs::rename(&tmp, path)
    }

    /// Removes the file at `path` if it is still this process's (another host may have
    /// replaced it since).
    pub fn remove_own(path: &Path) {
        let own = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<HostFile>(&t).ok())
            .is_some_and(|f| f.pid == std::process::id());
        if own {
            let _ = std::fs::remove_file(path);
        }
    }
}
