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

/// The largest host file read, bytes: ours is an address, two paths and a pid; anything
/// larger is not a host file, and is refused rather than read whole.
pub const HOST_FILE_MAX_BYTES: u64 = 64 * 1024;

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
    /// Reads the host file at `path`: `None` if it is missing (or its directory is, or is not
    /// a directory), malformed, or names a process that no longer runs (a host that died left
    /// it). An error if it cannot be read, or is
    /// not a regular file of at most [`HOST_FILE_MAX_BYTES`]: a named pipe there was waited
    /// on for a writer, for ever, by every client command.
    pub fn read(path: &Path) -> std::io::Result<Option<HostFile>> {
        let text = match muninn_fs::read_text_limited(path, HOST_FILE_MAX_BYTES, "a host file") {
            Ok(text) => text,
            // No file can be there: its directory is missing, or a file stands where a
            // directory of the path should (`HOME=/dev/null`). No host, as before the bound.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let Ok(file) = serde_json::from_str::<HostFile>(&text) else {
            return Ok(None);
        };
        Ok(Path::new(&format!("/proc/{}", file.pid))
            .exists()
            .then_some(file))
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
        // Read as clients read it: a pipe put there is not waited on (the host would never
        // stop), and is not this process's.
        let own = muninn_fs::read_text_limited(path, HOST_FILE_MAX_BYTES, "a host file")
            .ok()
            .and_then(|t| serde_json::from_str::<HostFile>(&t).ok())
            .is_some_and(|f| f.pid == std::process::id());
        if own {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::HostFile;
    use crate::test_files::{fifo, huge, within_10s};

    /// `muninn serve`, stopping, reads the host file to see whether it is still its own: a
    /// named pipe put there was waited on for a writer, for ever, and the host never stopped.
    /// What is not a regular file of at most [`super::HOST_FILE_MAX_BYTES`] is not its own now,
    /// and is left where it is.
    #[test]
    fn removing_its_own_host_file_waits_on_no_pipe() {
        let dir = tempfile::tempdir().unwrap();
        for path in [fifo(dir.path(), "pipe.json"), huge(dir.path(), "huge.json")] {
            let at = path.clone();
            within_10s(move || HostFile::remove_own(&at));
            assert!(path.exists(), "{}", path.display());
        }
    }

    /// No host file, whatever the reason none can exist: a state directory that is missing, or
    /// a file where a directory of its path should be (`HOME=/dev/null`, as services and
    /// sandboxes set it), is no running host, and the client falls back to the demo's defaults
    /// as it always did; the host file's bound made the latter an error ('Not a directory')
    /// that failed every client command.
    #[test]
    fn a_state_directory_that_cannot_exist_is_no_host_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("home");
        std::fs::write(&file, "").unwrap();
        for path in [
            dir.path().join("missing/muninn/host.json"),
            file.join(".local/state/muninn/host.json"),
        ] {
            assert_eq!(HostFile::read(&path).unwrap(), None, "{}", path.display());
        }
    }
}
