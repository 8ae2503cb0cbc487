//! Why a configuration could not be used: [`ConfigError`], and the [`Problem`]s an invalid
//! one is reported with.

#[cfg(doc)]
use super::DEMO_SOURCE;
use std::path::PathBuf;

/// Why a configuration could not be used. Every variant names the file (or [`DEMO_SOURCE`]);
/// none is retryable without editing the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the configuration's shape (the message names the line and
    /// the key: an unknown field, a wrong type).
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The TOML parser's message.
        message: String,
    },
    /// The working directory, against which relative paths are resolved, could not be read.
    #[error("cannot read the working directory to resolve relative paths: {0}")]
    WorkingDir(std::io::Error),
    /// The file parsed, but some values are not acceptable; every problem found is listed.
    #[error("{}: invalid configuration:{}", file.display(), list(problems))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Each problem, with the field it is about.
        problems: Vec<Problem>,
    },
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("\n  {}: {}", p.field, p.message))
        .collect()
}

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field, as a TOML path: `listen`, `mind[0].rooms[1]`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// The fields named by an [`Invalid`](ConfigError::Invalid) error (empty for the others).
    pub fn fields(&self) -> Vec<&str> {
        match self {
            ConfigError::Invalid { problems, .. } => {
                problems.iter().map(|p| p.field.as_str()).collect()
            }
            _ => Vec::new(),
        }
    }
}
