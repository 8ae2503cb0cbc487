//! `ulimit -f` without dying: a write past the file-size limit raises SIGXFSZ, whose default
//! action kills the process silently (on every restart, as the database only grows). With a
//! handler installed the kernel still sends the signal, but the write fails with `EFBIG`
//! instead, which the store reports as a failed commit — loud, and recoverable once the limit
//! is raised. Tokio's signal handling installs the handler without `unsafe`.

use tokio::signal::unix::{SignalKind, signal};

/// SIGXFSZ's number on Linux (every architecture muninn builds for).
const SIGXFSZ: i32 = 25;

/// Installs the SIGXFSZ handler and logs each signal; call once, inside the runtime, before the
/// store is opened.
pub fn survive_file_size_limit() {
    match signal(SignalKind::from_raw(SIGXFSZ)) {
        Ok(mut stream) => {
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    tracing::error!(
                        "a write exceeded the file-size limit (ulimit -f, SIGXFSZ): it failed \
                         with EFBIG; raise the limit for muninn serve"
                    );
                }
            });
        }
        Err(e) => tracing::warn!(error = %e,
            "cannot handle SIGXFSZ: a file-size limit (ulimit -f) would stop the host silently"),
    }
}
