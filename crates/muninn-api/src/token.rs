//! The API's bearer token: created by the host on first start in `<data_dir>/api-token` (mode
//! 0600), read by clients from the same file. Its `Debug` is redacted and it has no `Display`,
//! so it cannot end up in a log line or an error by accident; errors name the file, never its
//! content.

use std::path::{Path as FsPath, PathBuf};

/// Bytes of entropy in a new API token (hex-encoded: 64 characters).
const TOKEN_BYTES: usize = 32;

/// The largest token file read, bytes: a token is one line (ours 65 bytes); anything larger
/// is not a token file, and is refused rather than read whole.
pub const TOKEN_FILE_MAX_BYTES: u64 = 64 * 1024;

/// The API's bearer token. Its `Debug` is redacted, and it has no `Display`, so it cannot end
/// up in a log line or an error by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

/// Why the API token could not be created or read. Messages name the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Reading, writing or creating the file (or its directory) failed.
    #[error("API token file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file exists but holds no usable token (empty, or not one line of visible ASCII).
    #[error("API token file {} holds no usable token (delete it to make a new one)", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

impl ApiToken {
    /// A token with this value (tests, or a token handed over by other means).
    pub fn new(value: impl Into<String>) -> ApiToken {
        ApiToken(value.into())
    }

    /// The value, for an `Authorization` header. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Reads the token at `path`, or creates it (mode 0600, from the OS's random source) if the
    /// file does not exist, creating its directory as needed. Two hosts starting at once agree:
    /// the file is created exclusively and the loser reads the winner's.
    pub fn load_or_create(path: &FsPath) -> Result<ApiToken, TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_owned(),
            source,
        };
        match ApiToken::read(path) {
            Err(TokenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            }
            other => return other,
        }
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut random = [0u8; TOKEN_BYTES];
        {
            use std::io::Read;
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut random))
                .map_err(io)?;
        }
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        // Written whole under a name of its own, then linked into place: a second host starting
        // at the same moment either links first (and this one reads its complete file) or finds
        // the complete file — never an empty one it would take for the token.
        let partial = path.with_extension(format!("partial-{}", &token[..16]));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let written = options.open(&partial).and_then(|mut file| {
            use std::io::Write;
            file.write_all(format!("{token}\n").as_bytes())?;
            file.sync_all()
        });
        let linked = written.and_then(|()| std::fs::hard_link(&partial, path));
        // The partial name is only a step: gone whether the link was made or not.
        let _ = std::fs::remove_file(&partial);
        match linked {
            Ok(()) => {
                tracing::info!(path = %path.display(), "created the API token");
                Ok(ApiToken(token))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => ApiToken::read(path),
            Err(e) => Err(io(e)),
        }
    }

    /// Reads an existing token file (what the CLI does): a regular file of at most
    /// [`TOKEN_FILE_MAX_BYTES`], opened without blocking (a named pipe there was waited on for
    /// a writer, for ever: every client command hung, and so did `muninn serve`).
    pub fn read(path: &FsPath) -> Result<ApiToken, TokenError> {
        let text = muninn_fs::read_text_limited(path, TOKEN_FILE_MAX_BYTES, "a token file")
            .map_err(|source| TokenError::Io {
                path: path.to_owned(),
                source,
            })?;
        let token = text.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Malformed {
                path: path.to_owned(),
            });
        }
        Ok(ApiToken(token.to_owned()))
    }

    /// Whether `presented` is the token, in time independent of where they differ (the length
    /// may leak; it is public anyway). The server checks every request's bearer token with it.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        if expected.len() != presented.len() {
            return false;
        }
        expected
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::ApiToken;

    /// Hosts starting at once on one data directory all end up with the one token, complete:
    /// none reads the file while another is still writing it.
    #[test]
    fn concurrent_creators_all_read_the_same_complete_token() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("api-token");
            let tokens: Vec<ApiToken> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| ApiToken::load_or_create(&path).unwrap()))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(tokens.windows(2).all(|w| w[0] == w[1]), "{tokens:?}");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        }
    }

    /// A named pipe where the token file should be was opened and waited on for a writer, for
    /// ever: every client command hung before its first request, and so did `muninn serve`. A
    /// 100 MB file was read whole. Both are refused now, naming the file and the limit.
    #[test]
    fn a_pipe_or_a_huge_file_is_no_token_file() {
        use crate::test_files::{fifo, huge, within_10s};
        let dir = tempfile::tempdir().unwrap();
        let pipe = fifo(dir.path(), "api-token");
        let read = pipe.clone();
        let refused = within_10s(move || ApiToken::read(&read).unwrap_err().to_string());
        assert_eq!(
            refused,
            format!(
                "API token file {}: not a file nor a folder (a pipe, socket or device)",
                pipe.display()
            )
        );
        let large = huge(dir.path(), "large");
        let refused = ApiToken::read(&large).unwrap_err().to_string();
        assert_eq!(
            refused,
            format!(
                "API token file {}: larger than the limit of 65536 bytes for a token file",
                large.display()
            )
        );
    }
}
