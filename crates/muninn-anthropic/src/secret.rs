//! The API key as a secret type: it is sent in one header and shown nowhere else.
//!
//! `Debug` and `Display` print `ApiKey(<redacted>)`; there is no `Serialize`, so a key cannot
//! reach the ledger, the transcript or a log line by accident. Only the client reads the value,
//! through the crate-private `ApiKey::expose`.

use std::fmt;

/// An Anthropic API key (or an `ANTHROPIC_AUTH_TOKEN` bearer token).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// Why no key could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiKeyError {
    /// Neither the environment nor the configuration gave a key. Set `ANTHROPIC_API_KEY`.
    #[error("no API key: set ANTHROPIC_API_KEY (or api_key in the configuration)")]
    Missing,
    /// The key is empty or has characters that cannot go in an HTTP header.
    #[error("the API key is empty or not a valid header value")]
    Malformed,
}

impl ApiKey {
    /// A key from a string (configuration), checked to be a non-empty header value.
    pub fn new(key: impl Into<String>) -> Result<ApiKey, ApiKeyError> {
        let key = key.into();
        let key = key.trim().to_string();
        if key.is_empty() || !key.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(ApiKeyError::Malformed);
        }
        Ok(ApiKey(key))
    }

    /// The key from an environment lookup (injected so tests need no process environment):
    /// `ANTHROPIC_API_KEY`.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<ApiKey, ApiKeyError> {
        match get("ANTHROPIC_API_KEY") {
            Some(k) => ApiKey::new(k),
            None => Err(ApiKeyError::Missing),
        }
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}
