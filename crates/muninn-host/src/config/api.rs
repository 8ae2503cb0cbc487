//! `[api]`: the bounds the HTTP server puts on its clients — how many connections it holds, how
//! long a client may take to send a request's headers and body, and how large a body may be.
//!
//! Each bound exists because a slow or many-connection client otherwise holds a file
//! descriptor and memory for as long as it likes (a few thousand slowloris connections exhausted
//! the host's descriptors before these existed). The defaults suit a host on loopback behind a
//! transport; every value has a floor and a ceiling checked at load, so a typo cannot turn a
//! limit off (0) or into years.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The HTTP server's limits (`[api]` in `muninn.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The most connections served at once. A connection over it is accepted and closed at
    /// once (and counted in the log), so the host never runs out of file descriptors.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Seconds a client has to send a request's headers, counted from when the connection
    /// opens or its previous response was written — so it is also how long an idle keep-alive
    /// connection is kept. A connection over it is closed.
    #[serde(default = "default_header_read_timeout_s")]
    pub header_read_timeout_s: u64,
    /// Seconds a client has to send a request's whole body once its headers arrived; over it
    /// the request is answered `408` and the connection closed.
    #[serde(default = "default_body_read_timeout_s")]
    pub body_read_timeout_s: u64,
    /// The largest body of a delivery or a brief, bytes; a larger one is answered `413`
    /// (every other route takes at most [`SMALL_BODY_BYTES`]).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
}

/// The largest body of a route that carries no message text (settings, the brake, the
/// dashboard's login form), bytes.
pub const SMALL_BODY_BYTES: u64 = 64 * 1024;

/// Allowed ranges, inclusive: below the floor a limit would refuse ordinary clients, above the
/// ceiling it would no longer bound anything.
pub const MAX_CONNECTIONS_RANGE: (u32, u32) = (8, 100_000);
/// See [`MAX_CONNECTIONS_RANGE`].
pub const TIMEOUT_S_RANGE: (u64, u64) = (1, 600);
/// See [`MAX_CONNECTIONS_RANGE`]. The ceiling is the transcript's own bound on a message.
pub const MAX_BODY_BYTES_RANGE: (u64, u64) = (4 * 1024, 32 * 1024 * 1024);

fn default_max_connections() -> u32 {
    1024
}
fn default_header_read_timeout_s() -> u64 {
    10
}
fn default_body_read_timeout_s() -> u64 {
    10
}
fn default_max_body_bytes() -> u64 {
    1024 * 1024
}

impl Default for ApiConfig {
    fn default() -> ApiConfig {
        ApiConfig {
            max_connections: default_max_connections(),
            header_read_timeout_s: default_header_read_timeout_s(),
            body_read_timeout_s: default_body_read_timeout_s(),
            max_body_bytes: default_max_body_bytes(),
        }
    }
}

impl ApiConfig {
    /// Reports every value outside its range through `bad(field, message)`.
    pub(crate) fn check(&self, bad: &mut impl FnMut(String, String)) {
        let mut range = |field: &str, value: u64, (low, high): (u64, u64)| {
            if !(low..=high).contains(&value) {
                bad(
                    format!("api.{field}"),
                    format!("{value} is outside the allowed range {low}..={high}"),
                );
            }
        };
        let (low, high) = MAX_CONNECTIONS_RANGE;
        range(
            "max_connections",
            u64::from(self.max_connections),
            (u64::from(low), u64::from(high)),
        );
        range(
            "header_read_timeout_s",
            self.header_read_timeout_s,
            TIMEOUT_S_RANGE,
        );
        range(
            "body_read_timeout_s",
            self.body_read_timeout_s,
            TIMEOUT_S_RANGE,
        );
        range("max_body_bytes", self.max_body_bytes, MAX_BODY_BYTES_RANGE);
    }
}
