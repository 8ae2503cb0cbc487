//! What a connector runs with, resolved: secrets already read, defaults filled in. The host's
//! `muninn.toml` (`[matrix]` and each `[mind.matrix]`) is parsed and validated by the host;
//! `muninn serve` builds a [`ConnectorConfig`] from it, so this crate never reads a
//! configuration file or the environment itself (a credential's file is read again only
//! through the [`Reread`] the host gives it).

use std::sync::Arc;
use std::time::Duration;

/// The name of the cursor a Mind's `/sync` position is stored under.
pub const SYNC_CURSOR: &str = "matrix:sync";
/// The name of the cursor the homeserver's position at a Mind's first start is stored under
/// (before the account joins anything), read until its first sync is committed.
pub const FIRST_START_CURSOR: &str = "matrix:first-start";

/// The seed's per-delivery context bound: lines.
pub const DEFAULT_CONTEXT_LINES: usize = 20;
/// The seed's per-delivery context bound: bytes of sender and text.
pub const DEFAULT_CONTEXT_BYTES: usize = 16 * 1024;
/// The default of [`ConnectorConfig::max_gap_events`].
pub const DEFAULT_MAX_GAP_EVENTS: usize = 5_000;
/// How long a `/sync` long poll waits for something new.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// How many events a room's timeline brings per `/sync` before it is `limited` (and paged).
pub const DEFAULT_TIMELINE_LIMIT: u32 = 50;
/// The seed's `maxPending`: unanswered deliveries above which the sync position stays.
pub const DEFAULT_MAX_PENDING: usize = 50;

/// Everything a [`Connector`](crate::Connector) needs.
#[derive(Debug, Clone)]
pub struct ConnectorConfig {
    /// The homeserver's base URL.
    pub homeserver: String,
    /// How long each `/sync` waits for something new.
    pub sync_timeout: Duration,
    /// Events per room per `/sync` before the timeline is `limited`.
    pub timeline_limit: u32,
    /// Above this many unanswered deliveries (seq past the Mind's ack position) the account
    /// stops syncing, so its position stays, until the Mind catches up.
    pub max_pending: usize,
    /// The most history lines a delivery carries.
    pub context_lines: usize,
    /// The most bytes (sender and text) of history a delivery carries.
    pub context_bytes: usize,
    /// The most events paged to fill one gap (back from a `limited` timeline, or forwards
    /// from the position after a membership change); beyond it the events between are
    /// skipped, logged at error and counted (`StatsSnapshot::gaps_cut`). A bound on the
    /// memory and time one answer takes (a connector down for days in a very busy room).
    pub max_gap_events: usize,
    /// One account per Mind.
    pub accounts: Vec<Account>,
    /// A crash point to stop the process at (tests only; `None` in production).
    pub fault: Option<FaultPoint>,
}

impl ConnectorConfig {
    /// A configuration with the defaults above and no accounts.
    pub fn new(homeserver: impl Into<String>) -> ConnectorConfig {
        ConnectorConfig {
            homeserver: homeserver.into(),
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            timeline_limit: DEFAULT_TIMELINE_LIMIT,
            max_pending: DEFAULT_MAX_PENDING,
            context_lines: DEFAULT_CONTEXT_LINES,
            context_bytes: DEFAULT_CONTEXT_BYTES,
            max_gap_events: DEFAULT_MAX_GAP_EVENTS,
            accounts: Vec::new(),
            fault: None,
        }
    }
}

/// A Mind's Matrix account.
#[derive(Debug, Clone)]
pub struct Account {
    /// The Mind whose mailbox and outbox this account serves.
    pub mind: String,
    /// `@name:server`.
    pub user_id: String,
    /// The account's fixed device: a password login always uses it, an access token must
    /// belong to it (transaction ids, hence idempotent sends, are scoped per device).
    pub device_id: String,
    /// How it logs in.
    pub credential: Credential,
    /// The public rooms it listens and speaks in, as the Mind names them: `!id:server`,
    /// `#alias:server`, or `#alias` (on the account's own server). DMs come on their own.
    pub rooms: Vec<String>,
    /// Whether an invite to a direct chat is accepted (joined and added to `m.direct`).
    pub accept_dm_invites: bool,
    /// Where the credential is read again when the homeserver refuses the account's token
    /// (`None`: it is not): a new access token (or password) put in its file is taken without
    /// a restart.
    pub reread: Option<Reread>,
}

/// Reads an account's credential again from where it was configured (its file): the secret, or
/// why it cannot be read (naming where it looked, never what it found).
#[derive(Clone)]
pub struct Reread(Arc<dyn Fn() -> Result<Secret, String> + Send + Sync>);

impl Reread {
    /// Reads with `read`.
    pub fn new(read: impl Fn() -> Result<Secret, String> + Send + Sync + 'static) -> Reread {
        Reread(Arc::new(read))
    }

    /// The credential as it is now.
    pub fn read(&self) -> Result<Secret, String> {
        (self.0)()
    }
}

impl std::fmt::Debug for Reread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reread(…)")
    }
}

/// How an account logs in.
#[derive(Debug, Clone)]
pub enum Credential {
    /// An access token, used as it is.
    AccessToken(Secret),
    /// A password, logged in with at every start (on the fixed device).
    Password(Secret),
}

/// A credential's text. Its `Debug` shows nothing of it, so no log line or error carries it.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret read from a file or an environment variable (surrounding whitespace,
    /// such as a file's final newline, removed).
    pub fn new(text: &str) -> Secret {
        Secret(text.trim().to_owned())
    }

    /// The text, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// A named point where a test can stop the process dead (`std::process::abort`, as abrupt as
/// `kill -9`: no destructor, no flush, no further write), to prove that a crash there loses
/// and duplicates nothing. Compiled in, inert unless a [`ConnectorConfig::fault`] names it
/// (`muninn serve` reads `MUNINN_FAULT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// A `/sync` answer with new mail was read, before its batch and position are committed.
    SyncedBeforeCommit,
    /// The homeserver accepted an outbox message, before the outbox acknowledges it.
    SentBeforeAck,
}

impl FaultPoint {
    /// Every point, for error messages.
    pub const ALL: [FaultPoint; 2] = [FaultPoint::SyncedBeforeCommit, FaultPoint::SentBeforeAck];

    /// Its name (`matrix-synced-before-commit`, `matrix-sent-before-ack`).
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::SyncedBeforeCommit => "matrix-synced-before-commit",
            FaultPoint::SentBeforeAck => "matrix-sent-before-ack",
        }
    }

    /// The point called `name`.
    pub fn parse(name: &str) -> Option<FaultPoint> {
        FaultPoint::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Stops the process if `armed` is `at` (see [`FaultPoint`]).
pub(crate) fn crash_if_armed(armed: Option<FaultPoint>, at: FaultPoint) {
    if armed == Some(at) {
        eprintln!("muninn-matrix: fault point {} reached: aborting", at.name());
        std::process::abort();
    }
}
