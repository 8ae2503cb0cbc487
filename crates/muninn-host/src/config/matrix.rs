//! `[matrix]` and `[mind.matrix]`: Matrix rooms as the Minds' ears and mouth.
//!
//! `[matrix]` names the homeserver and the connector's bounds; each Mind that talks in Matrix
//! has a `[mind.matrix]` account: its user id, a fixed device id, and where its credential is
//! read from — a file or an environment variable, never the credential itself. The Mind's
//! `rooms` are its Matrix rooms (`#alias`, `#alias:server`, `!id:server`); its direct chats
//! come on their own. `muninn serve` runs the connector (`muninn-matrix`) beside the Minds when
//! `[matrix]` is there.

use super::Problem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `[matrix]`: the homeserver and the connector's bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatrixConfig {
    /// The homeserver's base URL (`https://matrix.example.org`, or `http://127.0.0.1:8008`).
    pub homeserver: String,
    /// How long each `/sync` long poll waits for something new, ms (1000 to 120000).
    #[serde(default = "default_sync_timeout_ms")]
    pub sync_timeout_ms: u64,
    /// Events per room per `/sync` before the timeline is `limited` and paged back (1 to 1000).
    #[serde(default = "default_timeline_limit")]
    pub timeline_limit: u32,
    /// Unanswered deliveries (past the Mind's ack position) at which an account stops
    /// syncing, so its position stays until the Mind catches up (the seed's `maxPending`).
    #[serde(default = "default_max_pending")]
    pub max_pending: u32,
    /// The most history lines a delivery carries (the seed's 20).
    #[serde(default = "default_context_lines")]
    pub context_lines: u32,
    /// The most bytes (sender and text) of history a delivery carries (the seed's 16 KiB).
    #[serde(default = "default_context_bytes")]
    pub context_bytes: u32,
    /// The most events of a `limited` timeline's gap read (paged back, or forwards after a
    /// membership change), 1 to 100000: the events past it are skipped, never delivered, and
    /// shown in `muninn status`. A bound on memory and on the time a sync takes.
    #[serde(default = "default_max_gap_events")]
    pub max_gap_events: u32,
}

/// `[mind.matrix]`: a Mind's Matrix account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MindMatrixConfig {
    /// The account, `@name:server`.
    pub user_id: String,
    /// The account's fixed device id (1–64 of `A-Z a-z 0-9 _ - .`): every login uses it, and an
    /// access token must belong to it, because the homeserver scopes transaction ids — which
    /// make sends idempotent — per device.
    pub device_id: String,
    /// Where the access token is read from (give this or `password`).
    #[serde(default)]
    pub access_token: Option<SecretSource>,
    /// Where the password is read from (give this or `access_token`); the connector logs in
    /// with it at every start, on `device_id`.
    #[serde(default)]
    pub password: Option<SecretSource>,
    /// Accept invites to direct chats (and record them in the account's `m.direct`).
    #[serde(default = "default_true")]
    pub accept_dm_invites: bool,
}

/// Where a secret is read from: a file (its content, trimmed) or an environment variable —
/// exactly one. The secret itself never appears in the configuration, a log or an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    /// A file holding the secret (relative to the configuration file).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An environment variable holding the secret (`A-Z 0-9 _`).
    #[serde(default)]
    pub env: Option<String>,
}

/// The largest secret read from a file, bytes: far more than a password or an access token
/// (a JWT included), and a bound on what a path pointing at something else costs to read.
pub const SECRET_MAX_BYTES: usize = 64 * 1024;

/// A secret's file, read up to [`SECRET_MAX_BYTES`] (one byte more says it is larger): a path
/// pointing at a log or a device is refused, not read whole, at load and at each read again.
fn read_bounded(path: &Path) -> Result<String, String> {
    // Only a regular file, opened without blocking: a named pipe there was waited on for a
    // writer, for ever.
    muninn_fs::read_text_limited(path, SECRET_MAX_BYTES as u64, "a secret")
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

impl SecretSource {
    /// The secret, read from its file or variable (trimmed); the error names where it looked,
    /// never what it found.
    pub fn read(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
        let text = match (&self.file, &self.env) {
            (Some(path), None) => read_bounded(path)?,
            (None, Some(name)) => env(name).ok_or_else(|| format!("${name} is not set"))?,
            _ => return Err("give exactly one of file and env".into()),
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(match (&self.file, &self.env) {
                (Some(path), _) => format!("{} is empty", path.display()),
                (_, Some(name)) => format!("${name} is empty"),
                _ => "empty".into(),
            });
        }
        Ok(text.to_owned())
    }

    pub(super) fn resolve_paths(&mut self, base: &Path) {
        if let Some(file) = &mut self.file
            && file.is_relative()
        {
            *file = base.join(&*file);
        }
    }

    /// Its problems: the shape, and (for a file) that it reads and is not empty. A variable
    /// is checked for its name only: it is the environment of `muninn serve` that counts,
    /// which may differ from the one validating.
    fn check(&self, at: &str, bad: &mut impl FnMut(String, String)) {
        match (&self.file, &self.env) {
            (Some(_), None) => {
                if let Err(message) = self.read(&|_| None) {
                    bad(format!("{at}.file"), message);
                }
            }
            (None, Some(name)) => {
                if !super::is_env_name(name) {
                    bad(
                        format!("{at}.env"),
                        format!("{name:?} must be an environment variable name (A-Z, 0-9, _)"),
                    );
                }
            }
            _ => bad(
                at.to_owned(),
                "give exactly one of file and env (never the secret itself)".into(),
            ),
        }
    }
}

fn default_sync_timeout_ms() -> u64 {
    30_000
}
fn default_timeline_limit() -> u32 {
    50
}
fn default_max_pending() -> u32 {
    50
}
fn default_context_lines() -> u32 {
    20
}
fn default_context_bytes() -> u32 {
    16 * 1024
}
fn default_max_gap_events() -> u32 {
    5_000
}
fn default_true() -> bool {
    true
}

impl MatrixConfig {
    /// The problems of `[matrix]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        let url = self.homeserver.as_str();
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
            bad(
                "matrix.homeserver".into(),
                format!("{url:?} must be an http:// or https:// URL"),
            );
        }
        if !(1_000..=120_000).contains(&self.sync_timeout_ms) {
            bad(
                "matrix.sync_timeout_ms".into(),
                format!("{} must be 1000 to 120000", self.sync_timeout_ms),
            );
        }
        if !(1..=1_000).contains(&self.timeline_limit) {
            bad(
                "matrix.timeline_limit".into(),
                format!("{} must be 1 to 1000", self.timeline_limit),
            );
        }
        if self.max_pending == 0 {
            bad(
                "matrix.max_pending".into(),
                "must be at least 1 (at 0 no mail would ever be read)".into(),
            );
        }
        if !(1..=100_000).contains(&self.max_gap_events) {
            bad(
                "matrix.max_gap_events".into(),
                format!("{} must be 1 to 100000", self.max_gap_events),
            );
        }
        if self.context_lines > 0 && self.context_bytes == 0 {
            bad(
                "matrix.context_bytes".into(),
                "must be positive when context_lines is (set both to 0 for no context)".into(),
            );
        }
    }
}

impl MindMatrixConfig {
    /// The problems of a Mind's `[mind.matrix]`; `rooms` are the Mind's.
    pub(super) fn check(&self, at: &str, rooms: &[String], bad: &mut impl FnMut(String, String)) {
        let user = self.user_id.as_str();
        let valid_user = user.starts_with('@')
            && user
                .split_once(':')
                .is_some_and(|(local, server)| local.len() > 1 && !server.is_empty())
            && !user.chars().any(char::is_whitespace);
        if !valid_user {
            bad(
                format!("{at}.user_id"),
                format!("{user:?} must be a Matrix user id, @name:server"),
            );
        }
        let device = self.device_id.as_str();
        if device.is_empty()
            || device.len() > 64
            || !device
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        {
            bad(
                format!("{at}.device_id"),
                format!("{device:?} must be 1 to 64 of A-Z a-z 0-9 _ - ."),
            );
        }
        match (&self.access_token, &self.password) {
            (Some(token), None) => token.check(&format!("{at}.access_token"), bad),
            (None, Some(password)) => password.check(&format!("{at}.password"), bad),
            _ => bad(
                at.to_owned(),
                "give exactly one of access_token and password (each a file or an env variable)"
                    .into(),
            ),
        }
        for (j, room) in rooms.iter().enumerate() {
            if !(room.starts_with('#') || room.starts_with('!')) {
                bad(
                    format!("{}.rooms[{j}]", at.trim_end_matches(".matrix")),
                    format!(
                        "{room:?} is not a Matrix room: #alias, #alias:server or !id:server (direct chats come on their own)"
                    ),
                );
            }
        }
    }
}

/// The problems of the Matrix sections: `[mind.matrix]` without `[matrix]`, two Minds on one
/// account, and each section's own.
pub(super) fn check(
    matrix: Option<&MatrixConfig>,
    minds: &[super::MindConfig],
    problems: &mut Vec<Problem>,
) {
    let mut bad = |field: String, message: String| problems.push(Problem { field, message });
    if let Some(matrix) = matrix {
        matrix.check(&mut bad);
    }
    let mut accounts = std::collections::HashMap::new();
    for (i, mind) in minds.iter().enumerate() {
        let Some(account) = &mind.matrix else {
            continue;
        };
        let at = format!("mind[{i}].matrix");
        if matrix.is_none() {
            bad(
                at.clone(),
                "needs a [matrix] section naming the homeserver".into(),
            );
        }
        if let Some(first) = accounts.insert(account.user_id.as_str(), i) {
            bad(
                format!("{at}.user_id"),
                format!(
                    "{} is mind[{first}]'s account too: one account, one /sync, one Mind",
                    account.user_id
                ),
            );
        }
        account.check(&at, &mind.rooms, &mut bad);
    }
}
