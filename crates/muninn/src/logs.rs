//! The process's log subscriber: `tracing` events to stderr, filtered by `RUST_LOG` (default
//! `info`), as text or as JSON lines (`--log-format`).
//!
//! stdout stays the commands' own output (the startup line of `muninn serve`, tables, JSON),
//! so logs never mix into what a script reads. The JSON form is one object per line:
//! `{"timestamp","level","fields":{"message",…},"target","span","spans"}` — the fields of
//! each event are documented where the host emits them (`muninn_host::telemetry`).

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per event.
    Json,
}

/// Installs the subscriber for the whole process. A `RUST_LOG` that does not parse is reported
/// on stderr and replaced by the default.
pub fn init(format: LogFormat) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("muninn: RUST_LOG={spec:?} does not parse ({e}); logging at info");
            EnvFilter::new("info")
        }),
        _ => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    if let Err(e) = installed {
        eprintln!("muninn: logs not installed: {e}");
    }
}
